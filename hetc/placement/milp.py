"""Exact placement by mixed-integer linear programming (``scipy.optimize.milp``, i.e. HiGHS).

``milp(problem, objective, time_limit)`` builds one of the formulations below, solves it with
HiGHS under ``time_limit`` seconds and returns a ``Result`` whose ``objective`` is the
evaluator's value of the assignment found (``problem.evaluate``; at a proven optimum the MILP's
own value agrees with it to ~1e-9 relative). When the time limit stops HiGHS, the best
assignment found so far is returned with ``optimal=False`` and the gap HiGHS reports.

What scipy returns: ``OptimizeResult`` with ``status`` (0 optimal, 1 iteration/time limit,
2 infeasible, 3 unbounded, 4 other), ``message`` (HiGHS's model status), ``x`` (None when no
integer solution was found), ``fun``, and for MILPs ``mip_gap`` (HiGHS's relative gap
``|primal - dual| / |primal|``), ``mip_dual_bound`` and ``mip_node_count``. scipy exposes
HiGHS's ``mip_rel_gap`` but not ``mip_abs_gap`` (1e-6 in HiGHS), so the model is scaled: one
model time unit is ``H / 1e5`` seconds, where ``H`` is an upper bound on the optimum, so that
the absolute gap cannot stop HiGHS early and the tolerances are far below 1e-9 of the objective.

Notation: ``D_i`` the devices allowed for node i (finite time, pin, weights fit), ``x[i,k]`` binary
for ``k in D_i`` (no variable where node i cannot go), ``f_i = s_i + sum_k t[i,k] x[i,k]``,
``tr_e(a, b)`` the transfer time of edge e from a to b (0 when a == b), ``in(i,b)`` /
``out(i,a)`` the model-input / model-output transfer times.

Latency ("sequence" formulation, the default)
---------------------------------------------
Variables: ``x[i,k]``, start ``s_i``, makespan ``C``, and for each device k and each node j in
``L_k`` (the nodes allowed on k, in index order) ``R[k,j]``: when device k is free after the
nodes of ``L_k`` up to j. Minimize ``C`` subject to::

    sum_k x[i,k] = 1                                              (assignment)
    sum_i memory_i x[i,k] <= capacity_k                           (memory, where it can bind)
    s_i >= f_p                                                    (each edge (p, i))
    s_i >= f_p + sum_{b != a} tr_e(a,b) x[i,b] - M_a (1 - x[p,a])   (each edge, each a in D_p;
                                                      M_a = max_b tr_e(a,b), the tightest valid M)
    s_i >= sum_b in(i,b) x[i,b]                                   (nodes that read model inputs)
    C >= f_i + sum_a out(i,a) x[i,a]                              (sinks and output nodes)
    R[k,j] >= R[k,prev] + t[j,k] x[j,k]                           (device k's busy time adds up)
    R[k,j] >= f_j - UBf_j (1 - x[j,k])                            (k is free only after j)
    s_j >= R[k,prev] - M3 (1 - x[j,k])                            (j waits for device k)
    C >= R[k,last]                                                (makespan >= each device's load)

``prev`` is the node before j in ``L_k``. This is the "each device runs its ops in index order"
rule written with O(n d) rows instead of one big-M row per unordered node pair. The
``"pairwise"`` formulation replaces the R rows by the textbook form: for each pair i < j NOT
connected by a path (reachability by bitsets; connected pairs are ordered by the edges) and each
``k in D_i & D_j``: ``s_j >= f_i - M_ij (2 - x[i,k] - x[j,k])``, plus ``C >= sum_i t[i,k] x[i,k]``.

Big-M values come from valid bounds: ``head_i`` (earliest possible start: longest path of the
fastest times plus unavoidable transfers), ``tail_i`` (time that must follow ``f_i``), and an upper
bound ``H`` on the optimum (the greedy's latency, or a trivial bound: every node's slowest time,
every edge's slowest transfer, the slowest input and output). Every optimal assignment's
as-soon-as-possible schedule satisfies ``head_i <= s_i``, ``f_i <= H - tail_i = UBf_i``, so
``M3 = max(UBf of L_k up to prev) - head_j``, ``M_ij = UBf_i - head_j``, and the bounds of ``s``
and ``C`` (``C <= H``) cut off no optimum. Conversely, for integral x every row is either exact
or relaxed, so ``C`` is never below the evaluator's latency: the MILP optimum is the true one.

Throughput
----------
Variables ``x[i,k]``, period ``T``, and for each edge e = (p, i) with bytes > 0 and each ordered
pair ``a in D_p, b in D_i, a != b`` with finite bandwidth a continuous ``y[e,a,b] in [0, 1]``.
Minimize ``T`` subject to assignment and memory rows and::

    T >= sum_i t[i,k] x[i,k]                                      (each device)
    y[e,a,b] >= x[p,a] + x[i,b] - 1                               (edge e crosses a -> b)
    T >= (sum_e bytes_e y[e,a,b] + [a = home] sum_i in_i x[i,b]
          + [b = home] sum_i out_i x[i,a]) / bandwidth[a,b]       (each link a -> b)

Sizes (``model_size``) for ``random_problem(200, 3, seed=0)``: 375 edges, 535 allowed (node,
device) pairs (10% unsupported, some pins)::

    latency, sequence:  1271 variables (535 binary, 736 continuous),  3179 rows, 14678 nonzeros
    latency, pairwise:   736 variables (535 binary, 201 continuous),  9297 rows, 54422 nonzeros
    throughput:         2326 variables (535 binary, 1791 continuous), 1999 rows,  8278 nonzeros

The pairwise row count grows with the number of unconnected node pairs (quadratic for wide
graphs); the sequence formulation stays O(n d + m d). Neither closes the gap on 200-node
latency problems within seconds (big-M relaxations are weak); ``solve`` therefore pairs the
MILP with the heuristic.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint
from scipy.optimize import milp as scipy_milp
from scipy.sparse import csr_array

from .problem import (
    Problem,
    Result,
    _check_objective,
    check_feasible,
    evaluate,
    infeasible_error,
    is_feasible,
    make_result,
)

FORMULATIONS = ("sequence", "pairwise")
_SCALE = 1e5  # model units per H (see the module docstring)


@dataclass
class Model:
    """A built MILP (scaled units): minimize ``c @ v`` s.t. ``lo <= A v <= hi``, bounds, integrality."""

    c: np.ndarray
    A: csr_array
    lo: np.ndarray
    hi: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    integrality: np.ndarray
    xindex: np.ndarray  # int[n, d]: variable of x[i,k], -1 where not allowed
    unit: float  # seconds per model unit
    objective_var: int

    @property
    def n_vars(self) -> int:
        return len(self.c)

    @property
    def n_binary(self) -> int:
        return int(self.integrality.sum())

    @property
    def n_rows(self) -> int:
        return self.A.shape[0]

    @property
    def nnz(self) -> int:
        return self.A.nnz

    def decode(self, v: np.ndarray) -> np.ndarray:
        vals = np.where(self.xindex >= 0, v[np.maximum(self.xindex, 0)], -1.0)
        return np.argmax(vals, axis=1).astype(np.int64)


class _Rows:
    """Sparse rows ``lo <= sum(vals * v[cols]) <= hi`` collected in Python lists."""

    def __init__(self):
        self.r: list[int] = []
        self.c: list[int] = []
        self.v: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def add(self, cols, vals, lo: float, hi: float = math.inf):
        row = len(self.lo)
        self.r.extend([row] * len(cols))
        self.c.extend(cols)
        self.v.extend(vals)
        self.lo.append(lo)
        self.hi.append(hi)

    def matrix(self, n_vars: int) -> tuple[csr_array, np.ndarray, np.ndarray]:
        A = csr_array((np.array(self.v, dtype=float), (np.array(self.r, dtype=np.int64),
                                                         np.array(self.c, dtype=np.int64))),
                      shape=(len(self.lo), n_vars))
        A.sum_duplicates()
        return A, np.array(self.lo, dtype=float), np.array(self.hi, dtype=float)


# ---- bounds ----------------------------------------------------------------------------------
def _fastest(p: Problem) -> np.ndarray:
    return np.where(p.allowed, p.times, np.inf).min(axis=1)


def _slowest(p: Problem) -> np.ndarray:
    return np.where(p.allowed, p.times, -np.inf).max(axis=1)


def _edge_lower(p: Problem) -> np.ndarray:
    """float[m]: the least transfer time edge e can cost (0 if its ends can share a device)."""
    al = p.allowed
    out = np.zeros(p.m)
    for e, (q, i) in enumerate(p.edges):
        if not (al[q] & al[i]).any():
            out[e] = p.edge_cost[e][np.ix_(al[q], al[i])].min()
    return out


def _edge_upper(p: Problem) -> np.ndarray:
    al = p.allowed
    return np.array([p.edge_cost[e][np.ix_(al[q], al[i])].max() for e, (q, i) in enumerate(p.edges)])


def head_tail(p: Problem) -> tuple[np.ndarray, np.ndarray]:
    """Lower bounds on every assignment's schedule: ``head_i <= start_i`` and
    ``tail_i <= latency - finish_i``."""
    tmin = _fastest(p)
    elo = _edge_lower(p)
    inlo = np.where(p.allowed, p.input_cost, np.inf).min(axis=1)
    outlo = np.where(p.allowed, p.output_cost, np.inf).min(axis=1)
    indptr, eid = p.preds
    head = inlo.copy()
    for i in range(p.n):
        for e in eid[indptr[i]:indptr[i + 1]]:
            q = p.edges[e, 0]
            head[i] = max(head[i], head[q] + tmin[q] + elo[e])
    sptr, seid = p.succs
    tail = outlo.copy()
    for i in range(p.n - 1, -1, -1):
        for e in seid[sptr[i]:sptr[i + 1]]:
            j = p.edges[e, 1]
            tail[i] = max(tail[i], elo[e] + tmin[j] + tail[j])
    return head, tail


def latency_lower_bound(p: Problem) -> float:
    tmin = _fastest(p)
    head, tail = head_tail(p)
    return float(max((head + tmin + tail).max(), tmin.sum() / p.d))


def latency_upper_bound(p: Problem) -> float:
    """Latency no feasible assignment exceeds (see the module docstring)."""
    inhi = np.where(p.allowed, p.input_cost, -np.inf).max()
    outhi = np.where(p.allowed, p.output_cost, -np.inf).max()
    return float(_slowest(p).sum() + _edge_upper(p).sum() + inhi + outhi)


def period_lower_bound(p: Problem) -> float:
    tmin = _fastest(p)
    return float(max(tmin.max(), tmin.sum() / p.d))


# ---- formulations ----------------------------------------------------------------------------
def _x_index(p: Problem) -> tuple[np.ndarray, int]:
    xi = np.full((p.n, p.d), -1, dtype=np.int64)
    idx = np.nonzero(p.allowed)
    xi[idx] = np.arange(len(idx[0]))
    return xi, len(idx[0])


def _common_rows(p: Problem, rows: _Rows, xi: np.ndarray):
    for i in range(p.n):
        ks = np.nonzero(xi[i] >= 0)[0]
        rows.add(xi[i, ks].tolist(), [1.0] * len(ks), 1.0, 1.0)
    for k in range(p.d):
        if math.isfinite(p.capacity[k]):
            nodes = np.nonzero(xi[:, k] >= 0)[0]
            if p.memory[nodes].sum() > p.capacity[k]:
                rows.add(xi[nodes, k].tolist(), p.memory[nodes].tolist(), -math.inf, float(p.capacity[k]))


def _reachability(p: Problem) -> list[int]:
    """reach[i]: bitset of the nodes reachable from i (excluding i)."""
    sptr, seid = p.succs
    reach = [0] * p.n
    dst = p.edges[:, 1].tolist()
    for i in range(p.n - 1, -1, -1):
        r = 0
        for e in seid[sptr[i]:sptr[i + 1]].tolist():
            j = dst[e]
            r |= (1 << j) | reach[j]
        reach[i] = r
    return reach


def build_latency(p: Problem, upper: float, formulation: str = "sequence") -> Model:
    if formulation not in FORMULATIONS:
        raise ValueError(f"formulation must be one of {FORMULATIONS}, got {formulation!r}")
    n, d = p.n, p.d
    unit = upper / _SCALE if upper > 0 else 1.0
    t = np.where(p.allowed, p.times, 0.0) / unit
    incost = p.input_cost / unit
    outcost = p.output_cost / unit
    head, tail = head_tail(p)
    head, tail = head / unit, tail / unit
    tmin = _fastest(p) / unit
    H = upper / unit
    lower = latency_lower_bound(p) / unit
    ubf = np.maximum(H - tail, head + tmin)  # finish upper bounds (>= the least finish, for safety)

    xi, nx = _x_index(p)
    s0 = nx
    C = s0 + n
    nv = C + 1
    allowed = [np.nonzero(xi[i] >= 0)[0] for i in range(n)]
    fcols = [xi[i, allowed[i]].tolist() for i in range(n)]  # f_i = s_i + sum t x
    fvals = [t[i, allowed[i]].tolist() for i in range(n)]
    rows = _Rows()
    _common_rows(p, rows, xi)

    ecost = p.edge_cost / unit
    for e, (q, i) in enumerate(p.edges.tolist()):
        base_c = [s0 + i, s0 + q] + fcols[q]
        base_v = [1.0, -1.0] + [-v for v in fvals[q]]
        rows.add(base_c, base_v, 0.0)
        for a in allowed[q]:
            bs = [b for b in allowed[i] if b != a]
            if not bs:
                continue
            tr = ecost[e, a, bs]
            big = float(tr.max())
            if big <= 0:
                continue
            cols = base_c + xi[i, bs].tolist() + [int(xi[q, a])]
            vals = base_v + (-tr).tolist() + [-big]
            rows.add(cols, vals, -big)
    for i in np.nonzero(p.input_bytes > 0)[0]:
        ks = allowed[i]
        if (incost[i, ks] > 0).any():
            rows.add([s0 + i] + xi[i, ks].tolist(), [1.0] + (-incost[i, ks]).tolist(), 0.0)
    has_succ = np.zeros(n, dtype=bool)
    has_succ[p.edges[:, 0]] = True
    for i in np.nonzero(~has_succ | (p.output_bytes > 0))[0]:
        ks = allowed[i]
        rows.add([C, s0 + i] + xi[i, ks].tolist(), [1.0, -1.0] + (-(t[i, ks] + outcost[i, ks])).tolist(), 0.0)

    if formulation == "sequence":
        nr = 0
        for k in range(d):
            nodes = np.nonzero(xi[:, k] >= 0)[0].tolist()
            prev_r = -1
            prev_ubf = -math.inf
            for j in nodes:
                r = nv + nr
                nr += 1
                xj = int(xi[j, k])
                # R[k,j] >= R[k,prev] + t x
                if prev_r >= 0:
                    rows.add([r, prev_r, xj], [1.0, -1.0, -float(t[j, k])], 0.0)
                else:
                    rows.add([r, xj], [1.0, -float(t[j, k])], 0.0)
                # R[k,j] >= f_j - UBf_j (1 - x[j,k])
                big = float(ubf[j])
                rows.add([r, s0 + j] + fcols[j] + [xj], [1.0, -1.0] + [-v for v in fvals[j]] + [-big], -big)
                # s_j >= R[k,prev] - M3 (1 - x[j,k])
                if prev_r >= 0:
                    big = prev_ubf - float(head[j])
                    if big > 0:
                        rows.add([s0 + j, prev_r, xj], [1.0, -1.0, -big], -big)
                    else:
                        rows.add([s0 + j, prev_r], [1.0, -1.0], 0.0)
                prev_r = r
                prev_ubf = max(prev_ubf, float(ubf[j]))
            if prev_r >= 0:
                rows.add([C, prev_r], [1.0, -1.0], 0.0)
        nv += nr
    else:
        reach = _reachability(p)
        for k in range(d):
            nodes = np.nonzero(xi[:, k] >= 0)[0]
            rows.add([C] + xi[nodes, k].tolist(), [1.0] + (-t[nodes, k]).tolist(), 0.0)
        for i in range(n):
            ri = reach[i]
            for j in range(i + 1, n):
                if (ri >> j) & 1:
                    continue
                big = float(ubf[i] - head[j])
                if big <= 0:
                    continue
                for k in allowed[i]:
                    if xi[j, k] < 0:
                        continue
                    rows.add([s0 + j, s0 + i] + fcols[i] + [int(xi[i, k]), int(xi[j, k])],
                             [1.0, -1.0] + [-v for v in fvals[i]] + [-big, -big], -2 * big)

    A, lo, hi = rows.matrix(nv)
    c = np.zeros(nv)
    c[C] = 1.0
    lb = np.zeros(nv)
    ub = np.full(nv, math.inf)
    ub[:nx] = 1.0
    lb[s0:s0 + n] = head
    ub[s0:s0 + n] = np.maximum(ubf - tmin, head)
    lb[C] = min(lower, H)
    ub[C] = H * (1 + 1e-9)
    ub[C + 1:] = H * (1 + 1e-9)
    integrality = np.zeros(nv, dtype=np.int64)
    integrality[:nx] = 1
    return Model(c=c, A=A, lo=lo, hi=hi, lb=lb, ub=ub, integrality=integrality, xindex=xi, unit=unit,
                 objective_var=C)


def build_throughput(p: Problem, upper: float | None = None) -> Model:
    n, d = p.n, p.d
    ref = upper if upper and upper > 0 else max(period_lower_bound(p), 1e-300)
    unit = ref / _SCALE if ref > 0 else 1.0
    t = np.where(p.allowed, p.times, 0.0) / unit
    inv = p.inv_bandwidth * (1.0 / unit)
    xi, nx = _x_index(p)
    T = nx
    nv = T + 1
    rows = _Rows()
    _common_rows(p, rows, xi)
    for k in range(d):
        nodes = np.nonzero(xi[:, k] >= 0)[0]
        rows.add([T] + xi[nodes, k].tolist(), [1.0] + (-t[nodes, k]).tolist(), 0.0)
    link_cols: dict[tuple[int, int], list[int]] = {}
    link_vals: dict[tuple[int, int], list[float]] = {}
    ny = 0
    for e, (q, i) in enumerate(p.edges.tolist()):
        nbytes = float(p.edge_bytes[e])
        if nbytes <= 0:
            continue
        for a in np.nonzero(xi[q] >= 0)[0].tolist():
            for b in np.nonzero(xi[i] >= 0)[0].tolist():
                if a == b or inv[a, b] <= 0:
                    continue
                y = nv + ny
                ny += 1
                rows.add([y, int(xi[q, a]), int(xi[i, b])], [1.0, -1.0, -1.0], -1.0)
                link_cols.setdefault((a, b), []).append(y)
                link_vals.setdefault((a, b), []).append(nbytes * inv[a, b])
    h = p.home
    for i in range(n):
        for k in np.nonzero(xi[i] >= 0)[0].tolist():
            if k == h:
                continue
            if p.input_bytes[i] > 0 and inv[h, k] > 0:
                link_cols.setdefault((h, k), []).append(int(xi[i, k]))
                link_vals.setdefault((h, k), []).append(float(p.input_bytes[i] * inv[h, k]))
            if p.output_bytes[i] > 0 and inv[k, h] > 0:
                link_cols.setdefault((k, h), []).append(int(xi[i, k]))
                link_vals.setdefault((k, h), []).append(float(p.output_bytes[i] * inv[k, h]))
    for key, cols in link_cols.items():
        rows.add([T] + cols, [1.0] + [-v for v in link_vals[key]], 0.0)
    nv += ny
    A, lo, hi = rows.matrix(nv)
    c = np.zeros(nv)
    c[T] = 1.0
    lb = np.zeros(nv)
    ub = np.ones(nv)
    ub[T] = upper / unit * (1 + 1e-9) if upper else math.inf
    lb[T] = min(period_lower_bound(p) / unit, ub[T])
    integrality = np.zeros(nv, dtype=np.int64)
    integrality[:nx] = 1
    return Model(c=c, A=A, lo=lo, hi=hi, lb=lb, ub=ub, integrality=integrality, xindex=xi, unit=unit,
                 objective_var=T)


def build(problem: Problem, objective: str = "latency", upper: float | None = None,
          formulation: str = "sequence") -> Model:
    """The MILP of ``problem`` (``upper``: a known upper bound on the optimum, e.g. a feasible
    assignment's value; default: the trivial bound for latency, none for throughput)."""
    _check_objective(objective)
    if objective == "latency":
        return build_latency(problem, upper if upper is not None else latency_upper_bound(problem), formulation)
    return build_throughput(problem, upper)


def model_size(problem: Problem, objective: str = "latency", formulation: str = "sequence") -> dict:
    """Variables (binary / continuous), rows and nonzeros of the MILP of ``problem``."""
    model = build(problem, objective, formulation=formulation)
    return {"variables": model.n_vars, "binary": model.n_binary, "continuous": model.n_vars - model.n_binary,
            "rows": model.n_rows, "nonzeros": model.nnz}


def _incumbent(problem: Problem, objective: str) -> np.ndarray | None:
    from .heuristic import greedy  # heuristic imports nothing from here at module level

    a = greedy(problem, objective)
    return a if a is not None and is_feasible(problem, a) else None


def milp(problem: Problem, objective: str = "latency", time_limit: float = 10.0, *, rel_gap: float = 1e-9,
         incumbent: np.ndarray | None = None, formulation: str = "sequence", with_breakdown: bool = True) -> Result:
    """Solve ``problem`` exactly with HiGHS (within ``time_limit`` seconds).

    ``incumbent``: a feasible assignment (e.g. the heuristic's); its value bounds the model (tighter
    big-Ms, ``C <= value``) and it is returned if HiGHS finds nothing better in time. Without one,
    the greedy provides it. Raises ``InfeasiblePlacement`` when no assignment is feasible."""
    _check_objective(objective)
    t0 = time.perf_counter()
    check_feasible(problem)
    if incumbent is not None and not is_feasible(problem, incumbent):
        incumbent = None
    if incumbent is None:
        incumbent = _incumbent(problem, objective)
    upper = evaluate(problem, incumbent, objective) if incumbent is not None else None
    model = build(problem, objective, upper, formulation)
    remaining = max(time_limit - (time.perf_counter() - t0), 0.05)
    res = scipy_milp(model.c, integrality=model.integrality, bounds=Bounds(model.lb, model.ub),
                     constraints=LinearConstraint(model.A, model.lo, model.hi),
                     options={"time_limit": remaining, "mip_rel_gap": rel_gap, "presolve": True})
    seconds = time.perf_counter() - t0
    gap = getattr(res, "mip_gap", None)
    gap = float(gap) if gap is not None and math.isfinite(gap) else None
    dual = getattr(res, "mip_dual_bound", None)
    bound = float(dual) * model.unit if dual is not None and math.isfinite(dual) else None
    message = str(res.message).strip().splitlines()[0] if res.message else ""
    if res.status == 2:
        raise infeasible_error()
    if res.status in (3, 4) and res.x is None:
        raise RuntimeError(f"HiGHS failed on the placement MILP: {message}")
    common = {"seconds": seconds, "bound": bound, "with_breakdown": with_breakdown}
    if res.x is None:  # a limit stopped HiGHS before any integer solution
        if incumbent is None:
            raise TimeoutError(f"the MILP found no feasible placement within {time_limit:g} s ({message})")
        return make_result(problem, incumbent, objective, "milp", optimal=False, gap=None,
                           status=f"time limit reached before an integer solution; returned the incumbent "
                                  f"({message})", **common)
    optimal = res.status == 0
    value = float(res.fun) * model.unit
    assignment = model.decode(res.x)
    if upper is not None and evaluate(problem, assignment, objective) > upper:
        # only possible when a limit stopped HiGHS: keep the (better) incumbent
        assignment, optimal = incumbent, False
        message = f"the incumbent is better; {message}"
    return make_result(problem, assignment, objective, "milp", optimal=optimal,
                       gap=gap if gap is not None else (0.0 if optimal else None),
                       status=message, model_value=value, **common)
