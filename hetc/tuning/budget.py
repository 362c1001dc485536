"""Spreading a trial budget over tuning tasks.

``--trials`` is the total number of trials the database should hold for the model's tasks.
It is handed out in *rounds* (one search iteration each, ``ROUND`` trials): every round goes to
the task with the largest estimated cost per trial it already has (a divisor, or D'Hondt,
method over the task's share of the model's run time), never beyond ``max_per_task``. The last
round may be cut short to make the total exact.

For fixed costs the allocation for a budget is a prefix of one fixed sequence of rounds, so it
only grows when the budget grows (the tuner re-measures costs on every run, so in practice a
task the search made fast gets fewer of the new trials): tuning again with a larger ``--trials`` tops every task up to its new
allocation and spends exactly the difference. ``remaining`` subtracts what the database holds.

Tasks with a tiny share (a layout transpose next to a convolution) get no trials until the
budget is large enough, and keep their default schedule.
"""

from __future__ import annotations

from collections.abc import Sequence

# Trials per search iteration: one evolutionary-search round, built and measured as a batch.
# Generating a round costs 10-50 s on this project's 2-core machines whatever its size, so
# smaller rounds waste time; MetaSchedule commits a round's records when the whole round has
# been measured, so larger rounds lose more to a kill.
ROUND = 32


def allocate(costs: Sequence[float], total: int, max_per_task: int, round_size: int = ROUND) -> list[int]:
    """Trials per task for a budget of ``total`` trials; ``costs`` are the tasks' estimated costs."""
    if total < 0 or max_per_task < 0 or round_size < 1:
        raise ValueError("budgets must be >= 0 and round_size >= 1")
    alloc = [0] * len(costs)
    left = total
    while left > 0:
        best, best_priority = -1, -1.0
        for i, cost in enumerate(costs):
            if alloc[i] >= max_per_task:
                continue
            step = min(round_size, max_per_task - alloc[i])
            priority = max(float(cost), 0.0) / (alloc[i] + step)
            if priority > best_priority:  # ties go to the earlier (more expensive) task
                best, best_priority = i, priority
        if best < 0:  # every task is at its cap
            break
        step = min(round_size, max_per_task - alloc[best], left)
        alloc[best] += step
        left -= step
    return alloc


def remaining(allocation: Sequence[int], existing: Sequence[int], total: int) -> list[int]:
    """New trials per task: each task's allocation minus the trials it has, with the whole run
    also held to ``total`` minus everything the tasks already have."""
    left = max(0, total - sum(existing))
    out = []
    for want, have in zip(allocation, existing):
        n = min(max(0, want - have), left)
        out.append(n)
        left -= n
    return out
