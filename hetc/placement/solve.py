"""Choosing a placement solver, and brute force for tiny problems.

``solve(problem, objective, solver="auto", time_limit)``:

* ``"auto"``: the chain DP when the graph is a chain and the objective is latency (falling
  through when binding capacities make it refuse); for ``n <= MILP_MAX_NODES`` (300) the
  heuristic first (its result bounds the MILP: tighter big-Ms and ``objective <= heuristic``),
  then the MILP with the rest of ``time_limit``, returning the better of the two: ``solver``
  names the winner and ``status`` says what happened (``"milp"`` when the MILP found something
  better or proved the heuristic's answer optimal; when the heuristic wins, ``bound`` is the
  MILP's proven lower bound, if any, and ``gap`` the heuristic's relative gap to it); the
  heuristic alone above that size;
* ``"milp"``, ``"chain-dp"``, ``"heuristic"``, ``"brute-force"``: that solver (``"chain-dp"``
  raises ``ValueError`` where it does not apply).

``brute_force`` evaluates every combination of allowed devices (the product over nodes,
enumerated as mixed-radix numbers in vectorised chunks) and refuses problems with more than
``max_assignments`` combinations; it is the reference the tests compare the other solvers to.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .chain import chain_dp
from .heuristic import heuristic
from .milp import milp
from .problem import (
    Problem,
    Result,
    _check_objective,
    check_feasible,
    evaluate_batch,
    infeasible_error,
    make_result,
)

SOLVERS = ("auto", "milp", "chain-dp", "heuristic", "brute-force")
MILP_MAX_NODES = 300
HEURISTIC_BUDGET = 2.0


def brute_force(problem: Problem, objective: str = "latency", max_assignments: int = 2_000_000,
                chunk: int = 1 << 16, with_breakdown: bool = True) -> Result:
    """The exact optimum by enumeration (first optimum in enumeration order)."""
    _check_objective(objective)
    t0 = time.perf_counter()
    p = problem
    check_feasible(p)
    choices = [np.flatnonzero(p.allowed[i]) for i in range(p.n)]
    radix = np.array([len(c) for c in choices], dtype=np.int64)
    total = math.prod(int(r) for r in radix)
    if total > max_assignments:
        raise ValueError(f"brute force would evaluate {total} assignments (more than {max_assignments}); "
                         "use the MILP")
    stride = np.ones(p.n, dtype=np.int64)
    for i in range(p.n - 2, -1, -1):
        stride[i] = stride[i + 1] * radix[i + 1]
    best_value, best_a = math.inf, None
    for lo in range(0, total, chunk):
        idx = np.arange(lo, min(lo + chunk, total), dtype=np.int64)
        digits = (idx[:, None] // stride[None, :]) % radix[None, :]
        A = np.empty_like(digits)
        for i in range(p.n):
            A[:, i] = choices[i][digits[:, i]]
        values = evaluate_batch(p, A, objective)
        j = int(np.argmin(values))
        if values[j] < best_value:
            best_value, best_a = float(values[j]), A[j].copy()
    if best_a is None:
        raise infeasible_error()
    result = make_result(p, best_a, objective, "brute-force", optimal=True, gap=0.0,
                         seconds=time.perf_counter() - t0, status=f"optimal ({total} assignments evaluated)",
                         with_breakdown=with_breakdown)
    result.bound = result.objective
    return result


def _auto(problem: Problem, objective: str, time_limit: float, seed: int, heuristic_budget: float | None,
          with_breakdown: bool) -> Result:
    t0 = time.perf_counter()
    if objective == "latency" and problem.is_chain:
        result = chain_dp(problem, objective, with_breakdown=with_breakdown)
        if result is not None:
            result.status = f"auto: chain-dp, {result.status}"
            return result
    small = problem.n <= MILP_MAX_NODES
    budget = heuristic_budget if heuristic_budget is not None else (
        min(HEURISTIC_BUDGET, 0.2 * time_limit) if small else min(HEURISTIC_BUDGET, time_limit))
    h = heuristic(problem, objective, time_budget=budget, seed=seed, with_breakdown=with_breakdown)
    if not small:
        h.status = f"auto: heuristic (n = {problem.n} > {MILP_MAX_NODES}), {h.status}"
        return h
    remaining = max(time_limit - (time.perf_counter() - t0), 0.1)
    try:
        m = milp(problem, objective, time_limit=remaining, incumbent=h.assignment, with_breakdown=with_breakdown)
    except TimeoutError as err:
        h.status = f"auto: heuristic (the MILP found nothing: {err})"
        h.seconds = time.perf_counter() - t0
        return h
    m.seconds = time.perf_counter() - t0
    if m.objective < h.objective * (1 - 1e-12):
        m.status = (f"auto: milp won ({m.objective:.6g} s vs the heuristic's {h.objective:.6g} s; "
                    f"{'proven optimal' if m.optimal else f'gap {m.gap}'}), {m.status}")
        return m
    if m.optimal:
        m.status = f"auto: milp proved the heuristic's answer optimal, {m.status}"
        return m
    h.seconds = m.seconds
    h.bound = m.bound
    h.gap = (h.objective - m.bound) / h.objective if m.bound is not None and h.objective > 0 else None
    h.status = (f"auto: heuristic won (the MILP found nothing better in {remaining:.3g} s; {m.status}); "
                f"{h.status}")
    return h


def solve(problem: Problem, objective: str = "latency", solver: str = "auto", time_limit: float = 10.0, *,
          seed: int = 0, heuristic_budget: float | None = None, with_breakdown: bool = True) -> Result:
    """Place ``problem`` (see the module docstring). Raises ``InfeasiblePlacement`` when no
    assignment satisfies the constraints."""
    _check_objective(objective)
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    check_feasible(problem)
    if solver == "auto":
        return _auto(problem, objective, time_limit, seed, heuristic_budget, with_breakdown)
    if solver == "milp":
        return milp(problem, objective, time_limit=time_limit, with_breakdown=with_breakdown)
    if solver == "chain-dp":
        result = chain_dp(problem, objective, with_breakdown=with_breakdown)
        if result is None:
            raise ValueError("the chain DP applies only to the latency of a chain whose optimum fits the "
                             "memory capacities")
        return result
    if solver == "heuristic":
        budget = heuristic_budget if heuristic_budget is not None else min(HEURISTIC_BUDGET, time_limit)
        return heuristic(problem, objective, time_budget=budget, seed=seed, with_breakdown=with_breakdown)
    return brute_force(problem, objective, with_breakdown=with_breakdown)
