"""Exact latency placement of a chain by dynamic programming.

A chain: every node ``i > 0`` has exactly the edge ``(i - 1, i)`` and there are no other edges
(``Problem.is_chain``). Then each node starts after its predecessor finishes, so the device
queues never bind and the latency recursion of ``problem`` reduces to::

    f_i = max(f_{i-1} + transfer(a_{i-1}, a_i, bytes_i), in(i, a_i)) + times[i, a_i]
    latency = max_i f_i + out(i, a_i)

(``in``/``out``: the model-input / model-output transfers). ``f_i`` is non-decreasing in
``f_{i-1}``, so for each (node, device) it suffices to keep the labels ``(f_i, L_i)`` with
``L_i = max_{j <= i} f_j + out(j, a_j)`` that are Pareto-minimal; when only the last node
produces model outputs (the usual case) every label set has one element and the DP is
O(n d^2). Intermediate model outputs can create a few more labels (exact, never pruned).

Limits (``chain_dp`` returns None, and ``solve`` falls back to the MILP or the heuristic):

* objective "throughput": the period is a max of per-device sums, which this DP cannot
  decompose (it is a partition problem even on a chain);
* memory capacities that bind: the DP ignores them (beyond nodes whose weights alone exceed a
  device); if its optimum happens to satisfy them it is returned (it is then also optimal for
  the constrained problem), otherwise None;
* not a chain.
"""

from __future__ import annotations

import time

import numpy as np

from .problem import Problem, Result, _check_objective, check_feasible, is_feasible, make_result


def _pareto(labels: list[tuple[float, float, int, int]]) -> list[tuple[float, float, int, int]]:
    labels.sort(key=lambda x: (x[0], x[1]))
    out = []
    best_l = float("inf")
    for lab in labels:
        if lab[1] < best_l:
            out.append(lab)
            best_l = lab[1]
    return out


def chain_assignment(problem: Problem) -> tuple[np.ndarray, float] | None:
    """The latency-optimal assignment of a chain ignoring memory capacities (except that a
    node's own weights must fit), and its latency; None if ``problem`` is not a chain."""
    p = problem
    if not p.is_chain:
        return None
    n, d = p.n, p.d
    order = np.argsort(p.edges[:, 1]) if p.m else np.zeros(0, np.int64)
    allowed = [np.flatnonzero(p.allowed[i]).tolist() for i in range(n)]
    times = p.times.tolist()
    incost = p.input_cost.tolist()
    outcost = p.output_cost.tolist()
    # labels[i][k]: Pareto-minimal (f, L, previous device, index of the previous label)
    labels: list[list[list[tuple[float, float, int, int]]]] = []
    first = [[] for _ in range(d)]
    for k in allowed[0]:
        f = incost[0][k] + times[0][k]
        first[k] = [(f, f + outcost[0][k], -1, -1)]
    labels.append(first)
    for i in range(1, n):
        tr = p.edge_cost[order[i - 1]].tolist()
        prev = labels[-1]
        cur = [[] for _ in range(d)]
        for k in allowed[i]:
            cand = []
            tik, ink, outk = times[i][k], incost[i][k], outcost[i][k]
            for j in allowed[i - 1]:
                c = tr[j][k]
                for idx, (f0, l0, _, _) in enumerate(prev[j]):
                    s = f0 + c
                    if ink > s:  # noqa: PLR1730 (hot loop)
                        s = ink
                    f = s + tik
                    e = f + outk
                    cand.append((f, max(e, l0), j, idx))
            cur[k] = _pareto(cand)
        labels.append(cur)
    best = None
    for k in range(d):
        for idx, lab in enumerate(labels[-1][k]):
            if best is None or lab[1] < best[0]:
                best = (lab[1], k, idx)
    value, k, idx = best
    a = np.empty(n, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        a[i] = k
        _, _, k, idx = labels[i][a[i]][idx]
    return a, float(value)


def chain_dp(problem: Problem, objective: str = "latency", with_breakdown: bool = True) -> Result | None:
    """Exact latency optimum of a chain (see the module docstring); None where the DP does
    not apply (not a chain, throughput, or memory capacities that its optimum violates)."""
    _check_objective(objective)
    if objective != "latency" or not problem.is_chain:
        return None
    t0 = time.perf_counter()
    check_feasible(problem)
    out = chain_assignment(problem)
    if out is None:
        return None
    a, _ = out
    if not is_feasible(problem, a):
        return None
    result = make_result(problem, a, objective, "chain-dp", optimal=True, gap=0.0,
                         seconds=time.perf_counter() - t0, status="optimal (dynamic program over the chain)",
                         with_breakdown=with_breakdown)
    result.bound = result.objective
    return result
