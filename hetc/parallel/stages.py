"""Pipeline stages: split a layer sequence into p contiguous stages, fastest slowest stage
first, under a memory limit per device.

Formulation (n layers, stage k = layers b_k .. b_{k+1} - 1, 0 = b_0 < b_1 < ... < b_p = n):

    minimise   max_k  T_k
    T_k      = sum_{i in k} times[i] + (send[b_{k+1} - 1] if k < p - 1)   (C1: stage time)
    M_k      = sum_{i in k} state_bytes[i] + in_flight[k] sum_{i in k} activation_bytes[i]
    subject to M_k <= limit for every k                                   (C2: memory)

Dynamic programming over prefixes: best[k][j], the least max stage time of the first j
layers in k + 1 stages, is min over i of max(best[k - 1][i], T of stage k = layers i .. j - 1)
over the i where that stage satisfies C2: O(p n^2), vectorised over (i, j). ``brute_force``
enumerates all C(n - 1, p - 1) splits (for tests). The memory constraint depends on the stage's
index (a 1F1B stage k keeps p - k micro-batches), which the DP knows.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..errors import HetcError


class Infeasible(HetcError, ValueError):
    """No split satisfies the memory limit; the message is one line naming why."""


@dataclass(frozen=True)
class StageProblem:
    times: np.ndarray  # (n,) seconds of layer i per micro-batch
    send: np.ndarray  # (n,) seconds to send what is live after layer i to the next stage
    state_bytes: np.ndarray  # (n,) bytes of layer i per device, whatever is in flight (weights...)
    activation_bytes: np.ndarray  # (n,) bytes of layer i per device per micro-batch in flight
    in_flight: np.ndarray  # (p,) micro-batches stage k keeps at its peak
    limit: float  # bytes per device
    names: tuple[str, ...] = ()  # of the layers, for messages

    @property
    def n(self) -> int:
        return len(self.times)

    @property
    def p(self) -> int:
        return len(self.in_flight)

    def stage_seconds(self, k: int, i: int, j: int) -> float:
        """T_k (C1) of stage k = layers i .. j - 1."""
        return float(np.sum(self.times[i:j])) + (float(self.send[j - 1]) if k < self.p - 1 else 0.0)

    def stage_bytes(self, k: int, i: int, j: int) -> float:
        """M_k (C2) of stage k = layers i .. j - 1."""
        return float(np.sum(self.state_bytes[i:j]) + self.in_flight[k] * np.sum(self.activation_bytes[i:j]))


@dataclass(frozen=True)
class Partition:
    bounds: tuple[int, ...]  # b_0 = 0 < b_1 < ... < b_p = n
    seconds: tuple[float, ...]  # T_k
    memory: tuple[float, ...]  # M_k

    @property
    def objective(self) -> float:
        return max(self.seconds)

    def stages(self) -> list[range]:
        return [range(a, b) for a, b in itertools.pairwise(self.bounds)]


def _gb(b: float) -> str:
    return f"{b / 1e9:.3g} GB"


def _make(problem: StageProblem, bounds: tuple[int, ...]) -> Partition:
    ranges = list(itertools.pairwise(bounds))
    return Partition(bounds, tuple(problem.stage_seconds(k, i, j) for k, (i, j) in enumerate(ranges)),
                     tuple(problem.stage_bytes(k, i, j) for k, (i, j) in enumerate(ranges)))


def memory_lower_bound(problem: StageProblem) -> float:
    """No split needs less on its fullest device: the stages share the layers, and a layer
    needs its memory at the fewest micro-batches in flight."""
    least = float(np.min(problem.in_flight))
    per_layer = problem.state_bytes + least * problem.activation_bytes
    return max(float(np.sum(per_layer)) / problem.p, float(np.max(per_layer)))


def _infeasible(problem: StageProblem) -> Infeasible:
    if problem.p > problem.n:
        return Infeasible(f"cannot split {problem.n} layers into {problem.p} pipeline stages")
    least = float(np.min(problem.in_flight))
    per_layer = problem.state_bytes + least * problem.activation_bytes
    worst = int(np.argmax(per_layer))
    if per_layer[worst] > problem.limit:
        name = problem.names[worst] if problem.names else f"#{worst}"
        return Infeasible(f"layer '{name}' alone needs {_gb(per_layer[worst])} per device, over the "
                          f"limit of {_gb(problem.limit)}")
    return Infeasible(f"no split of {problem.n} layers into {problem.p} stages fits in {_gb(problem.limit)} "
                      f"per device (each would need at least {_gb(memory_lower_bound(problem))})")


def partition(problem: StageProblem) -> Partition:
    """The split minimising the slowest stage's time under the memory limit (exact DP)."""
    n, p = problem.n, problem.p
    if p > n:
        raise _infeasible(problem)
    t = np.concatenate([[0.0], np.cumsum(problem.times)])
    s = np.concatenate([[0.0], np.cumsum(problem.state_bytes)])
    a = np.concatenate([[0.0], np.cumsum(problem.activation_bytes)])
    # (i, j) matrices: the stage of layers i .. j - 1
    nonempty = np.arange(n + 1)[:, None] < np.arange(n + 1)[None, :]
    compute, state, acts = (x[None, :] - x[:, None] for x in (t, s, a))
    send = np.concatenate([[0.0], problem.send])[None, :]  # after layer j - 1
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    choice = np.zeros((p, n + 1), dtype=np.int64)
    for k in range(p):
        cost = compute + send if k < p - 1 else compute
        fits = nonempty & (state + problem.in_flight[k] * acts <= problem.limit)
        value = np.where(fits, np.maximum(best[:, None], cost), np.inf)
        choice[k] = np.argmin(value, axis=0)
        best = value[choice[k], np.arange(n + 1)]
    if not math.isfinite(best[n]):
        raise _infeasible(problem)
    bounds = [n]
    for k in range(p - 1, -1, -1):
        bounds.append(int(choice[k, bounds[-1]]))
    result = _make(problem, tuple(reversed(bounds)))
    assert result.bounds[0] == 0 and all(m <= problem.limit * (1 + 1e-9) for m in result.memory), result
    assert math.isclose(result.objective, best[n], rel_tol=1e-9, abs_tol=1e-15), (result.objective, best[n])
    return result


def brute_force(problem: StageProblem) -> Partition:
    """``partition`` by enumerating every split (small problems only)."""
    n, p = problem.n, problem.p
    best: Partition | None = None
    for cuts in itertools.combinations(range(1, n), p - 1):
        candidate = _make(problem, (0, *cuts, n))
        if max(candidate.memory) <= problem.limit and (best is None or candidate.objective < best.objective):
            best = candidate
    if best is None:
        raise _infeasible(problem)
    return best
