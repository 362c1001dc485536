"""Placement heuristic: HEFT-style greedy, then local search, under a time budget.

``greedy`` visits the nodes in index order (a topological order) and puts each on the allowed
device with room for its weights that gives, with the choices made so far,

* latency: the earliest finish (plus the delivery of its model outputs), the devices' queues
  and the transfers from its predecessors included (HEFT's earliest-finish rule, without
  reordering since devices run ops in index order);
* throughput: the smallest period of the partial placement, ties broken by the least work the
  node adds (its time plus the transfer times it causes).

The memory of nodes that have a single possible device is reserved first, so greedy choices do
not take it. If the greedy still runs out of room (bin packing), a feasibility MILP (HiGHS,
minimizing the total time) gives the starting point instead.

``local_search`` then applies improving moves until none is left or the time budget is spent.
A move sends a group of nodes to another device: one node; its index run (the maximal set of
consecutive indices on its device); for latency, the critical-path sub-paths of 2 to 4 nodes
starting at it and its maximal same-device segment of the critical path; for throughput, a
swap with a random node on another device. Moves are generated lazily in a random order (fixed
seed) and the first improving one is taken. Only moves that can improve are tried: for
latency, moves of nodes on the current critical path (moving any other node leaves that path,
and so the latency, at least as long); for throughput, moves of nodes that load a bottleneck
device or link. Throughput moves are compared by the leximax order of all resource times
(period first, then the next busiest device or link, ...), so relieving one of several tied
bottlenecks counts as progress.

Latency moves are evaluated incrementally: the schedule is recomputed from the first moved
node on and stops as soon as it is back in step with the current one (same device queues, no
changed node with successors ahead). On device-saturated schedules a change still ripples to
the end, so a move on a 10,000-node graph costs ~3 ms (a full evaluation ~6 ms) and the default
2 s budget tries a few hundred of them. Throughput moves update the device and link loads by
the moved nodes' contributions (~10 us). When the search reaches a local optimum before the
budget is spent, random kicks (1-3 critical/bottleneck nodes moved at random, then local search
again, the best assignment kept) use the rest, until ``kicks`` kicks in a row brought nothing.
"""

from __future__ import annotations

import math
import random
import time

import numpy as np

from .problem import (
    Problem,
    Result,
    _check_objective,
    check_feasible,
    evaluate,
    infeasible_error,
    is_feasible,
    loads,
    make_result,
    schedule,
)

_EPS = 1e-12  # relative improvement a move must make


# ---- greedy ----------------------------------------------------------------------------------
def _reserved(p: Problem) -> tuple[np.ndarray, np.ndarray]:
    """(forced[n] bool, capacity left per device after the weights of forced nodes)."""
    forced = p.allowed.sum(axis=1) == 1
    dev = np.argmax(p.allowed, axis=1)
    left = p.capacity - np.bincount(dev[forced], weights=p.memory[forced], minlength=p.d)
    return forced, left


def greedy(problem: Problem, objective: str = "latency") -> np.ndarray | None:
    """The greedy assignment (see the module docstring); None if it runs out of memory."""
    _check_objective(objective)
    p = problem
    n, d = p.n, p.d
    forced, left = _reserved(p)
    if (left < 0).any():
        return None
    allowed = p.allowed
    a = np.full(n, -1, dtype=np.int64)
    indptr, eid = p.preds
    src = p.edges[:, 0]
    if objective == "latency":
        free = np.zeros(d)
        fin = np.zeros(n)
        for i in range(n):
            ok = allowed[i] if forced[i] else allowed[i] & (left >= p.memory[i])
            if not ok.any():
                return None
            s = np.maximum(free, p.input_cost[i])
            for e in eid[indptr[i]:indptr[i + 1]]:
                q = src[e]
                np.maximum(s, fin[q] + p.edge_cost[e, a[q]], out=s)
            f = s + p.times[i]
            score = np.where(ok, f + p.output_cost[i], np.inf)
            best = np.flatnonzero(score == score.min())
            k = int(best[np.argmin(p.times[i, best])])
            a[i] = k
            fin[i] = f[k]
            free[k] = f[k]
            if not forced[i]:
                left[k] -= p.memory[i]
        return a
    busy = np.zeros(d)
    link = np.zeros((d, d))
    inv = p.inv_bandwidth
    h = p.home
    for i in range(n):
        ok = allowed[i] if forced[i] else allowed[i] & (left >= p.memory[i])
        if not ok.any():
            return None
        best_key, best_k, best_add = None, -1, None
        for k in np.flatnonzero(ok):
            add = np.zeros((d, d))
            for e in eid[indptr[i]:indptr[i + 1]]:
                add[a[src[e]], k] += p.edge_bytes[e]
            add[h, k] += p.input_bytes[i]
            add[k, h] += p.output_bytes[i]
            np.fill_diagonal(add, 0.0)
            nb = busy.copy()
            nb[k] += p.times[i, k]
            per = max(nb.max(), ((link + add) * inv).max())
            work = p.times[i, k] + (add * inv).sum()
            key = (per, work)
            if best_key is None or key < best_key:
                best_key, best_k, best_add = key, int(k), add
        a[i] = best_k
        busy[best_k] += p.times[i, best_k]
        link += best_add
        if not forced[i]:
            left[best_k] -= p.memory[i]
    return a


def feasible_start(problem: Problem, time_limit: float = 5.0) -> np.ndarray:
    """A feasible assignment from a MILP with only the assignment and memory rows (minimizing
    the total compute time); raises ``InfeasiblePlacement`` if there is none."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    from .milp import _common_rows, _Rows, _x_index

    p = problem
    xi, nx = _x_index(p)
    rows = _Rows()
    _common_rows(p, rows, xi)
    A, lo, hi = rows.matrix(nx)
    idx = np.nonzero(xi >= 0)
    scale = np.where(p.allowed, p.times, 0.0).max() or 1.0
    c = p.times[idx] / scale
    res = milp(c, integrality=np.ones(nx), bounds=Bounds(0, 1), constraints=LinearConstraint(A, lo, hi),
               options={"time_limit": time_limit, "mip_rel_gap": 0.05})
    if res.status == 2:
        raise infeasible_error()
    if res.x is None:
        raise TimeoutError(f"no placement satisfying the memory capacities found within {time_limit:g} s")
    vals = np.where(xi >= 0, res.x[np.maximum(xi, 0)], -1.0)
    return np.argmax(vals, axis=1).astype(np.int64)


# ---- incremental evaluators ------------------------------------------------------------------
class _Latency:
    """The current assignment's schedule, and the latency of a move computed from the first
    moved node on, with an early exit once the schedule is back in step."""

    def __init__(self, p: Problem, a: np.ndarray):
        self.p = p
        indptr, srcl, _, _, nbytes = p._loop_data
        self.indptr, self.srcl = indptr, srcl
        self.nbytes = nbytes.tolist()
        self.times = p.times.tolist()
        self.incost = p.input_cost.tolist()
        self.outcost = p.output_cost.tolist()
        self.lat0 = p.lat0.tolist()
        self.invbw = p.inv_bandwidth.tolist()
        sptr, seid = p.succs
        last = np.full(p.n, -1, dtype=np.int64)
        has = np.diff(sptr) > 0
        last[has] = np.maximum.reduceat(p.edges[seid, 1], sptr[:-1][has])
        self.last_succ = last.tolist()
        self.set(a)

    def set(self, a: np.ndarray):
        p = self.p
        self.a_arr = np.asarray(a, dtype=np.int64).copy()
        self.a = self.a_arr.tolist()
        start, finish, end = schedule(p, self.a_arr)
        self.start = start
        self.finish_arr = finish
        self.fin = finish.tolist()
        self.value = float(end.max())
        self.sufmax = np.maximum.accumulate(end[::-1])[::-1].tolist() + [-math.inf]
        pre = np.empty(p.n + 1)
        pre[0] = -math.inf
        np.maximum.accumulate(end, out=pre[1:])
        self.premax = pre.tolist()
        # free_before[i][k]: when device k is free before node i (finishes increase along a device)
        fb = np.zeros((p.n + 1, p.d))
        for k in range(p.d):
            col = np.where(self.a_arr == k, finish, 0.0)
            fb[1:, k] = np.maximum.accumulate(col)
        self.free_before = fb.tolist()
        a_src = self.a_arr[p._loop_data[2]]
        a_dst = self.a_arr[p._loop_data[3]]
        self.cost = (p.lat0[a_src, a_dst] + p._loop_data[4] * p.inv_bandwidth[a_src, a_dst]).tolist()

    def try_move(self, changes: dict[int, int]) -> tuple[float]:
        a0 = self.a
        i0, i1 = min(changes), max(changes)
        a = a0.copy()
        for i, k in changes.items():
            a[i] = k
        fin = self.fin.copy()
        base = self.fin
        free = self.free_before[i0].copy()
        fb = self.free_before
        best = self.premax[i0]
        indptr, srcl, cost, nbytes = self.indptr, self.srcl, self.cost, self.nbytes
        times, incost, outcost, lat0, invbw = self.times, self.incost, self.outcost, self.lat0, self.invbw
        last_succ = self.last_succ
        pending = -1
        n = len(a)
        for j in range(i0, n):
            if j > i1 and pending < j and free == fb[j]:
                return (max(best, self.sufmax[j]),)
            kj = a[j]
            s = free[kj]
            v = incost[j][kj]
            if v > s:  # noqa: PLR1730 (hot loop)
                s = v
            moved_j = kj != a0[j]
            for e in range(indptr[j], indptr[j + 1]):
                q = srcl[e]
                kq = a[q]
                if moved_j or kq != a0[q]:
                    c = 0.0 if kq == kj else lat0[kq][kj] + nbytes[e] * invbw[kq][kj]
                else:
                    c = cost[e]
                v = fin[q] + c
                if v > s:  # noqa: PLR1730
                    s = v
            f = s + times[j][kj]
            fin[j] = f
            free[kj] = f
            v = f + outcost[j][kj]
            if v > best:  # noqa: PLR1730
                best = v
            if (f != base[j] or moved_j) and last_succ[j] > pending:
                pending = last_succ[j]
        return (best,)

    @property
    def key(self) -> tuple[float]:
        return (self.value,)

    def better(self, new: tuple[float], cur: tuple[float]) -> bool:
        return new[0] < cur[0] * (1 - _EPS)

    def candidates(self) -> list[int]:
        return self.critical_path()

    def critical_path(self) -> list[int]:
        """Nodes of one critical path, from its last node back to its first."""
        p = self.p
        a, fin, start = self.a, self.fin, self.start.tolist()
        end = (self.finish_arr + p.output_cost[np.arange(p.n), self.a_arr])
        j = int(np.argmax(end))
        prev_on = [-1] * p.n
        last = [-1] * p.d
        for i in range(p.n):
            prev_on[i] = last[a[i]]
            last[a[i]] = i
        path = [j]
        while True:
            s = start[j]
            q = prev_on[j]
            nxt = -1
            if q >= 0 and fin[q] == s:
                nxt = q
            else:
                for e in range(self.indptr[j], self.indptr[j + 1]):
                    q = self.srcl[e]
                    if fin[q] + self.cost[e] == s:
                        nxt = q
                        break
            if nxt < 0 or s <= 0:
                return path
            path.append(nxt)
            j = nxt


class _Throughput:
    """Device busy times and link bytes of the current assignment, updated by moves. Moves
    are compared by the leximax order of the resource times (busy times and link times, sorted
    in decreasing order): the period first, then the next busiest resource, and so on, so that
    a move relieving one of several tied bottlenecks counts as progress."""

    def __init__(self, p: Problem, a: np.ndarray):
        self.p = p
        d = p.d
        self.d = d
        self.times = p.times.tolist()
        inv = p.inv_bandwidth.reshape(-1)
        self.links = [x for x in range(d * d) if inv[x] > 0]
        self.inv = inv.tolist()
        self.inb = p.input_bytes.tolist()
        self.outb = p.output_bytes.tolist()
        sptr, seid = p.succs
        pptr, peid = p.preds
        self.inc = [np.concatenate([peid[pptr[i]:pptr[i + 1]], seid[sptr[i]:sptr[i + 1]]]).tolist()
                    for i in range(p.n)]
        self.esrc = p.edges[:, 0].tolist()
        self.edst = p.edges[:, 1].tolist()
        self.ebytes = p.edge_bytes.tolist()
        self.set(a)

    def set(self, a: np.ndarray):
        self.a = np.asarray(a, dtype=np.int64).tolist()
        busy, link = loads(self.p, np.asarray(self.a))
        self.busy = busy.tolist()
        self.link = link.reshape(-1).tolist()
        self.key = self._key(self.busy, self.link)
        self.value = self.key[0]

    def _resources(self, busy, link) -> list[float]:
        return busy + [link[x] * self.inv[x] for x in self.links]

    def _key(self, busy, link) -> tuple[float, ...]:
        return tuple(sorted(self._resources(busy, link), reverse=True))

    def better(self, new: tuple[float, ...], cur: tuple[float, ...]) -> bool:
        tol = cur[0] * _EPS
        for x, y in zip(new, cur, strict=True):
            if x < y - tol:
                return True
            if x > y + tol:
                return False
        return False

    def try_move(self, changes: dict[int, int]) -> tuple[float, ...]:
        d, a, h = self.d, self.a, self.p.home
        busy = self.busy.copy()
        link = self.link.copy()
        edges = set()
        for i, k in changes.items():
            o = a[i]
            busy[o] -= self.times[i][o]
            busy[k] += self.times[i][k]
            if self.inb[i]:
                if o != h:
                    link[h * d + o] -= self.inb[i]
                if k != h:
                    link[h * d + k] += self.inb[i]
            if self.outb[i]:
                if o != h:
                    link[o * d + h] -= self.outb[i]
                if k != h:
                    link[k * d + h] += self.outb[i]
            edges.update(self.inc[i])
        for e in edges:
            q, j, b = self.esrc[e], self.edst[e], self.ebytes[e]
            ao, bo = a[q], a[j]
            an, bn = changes.get(q, ao), changes.get(j, bo)
            if ao != bo:
                link[ao * d + bo] -= b
            if an != bn:
                link[an * d + bn] += b
        return self._key(busy, link)

    def candidates(self, threshold: float = 0.999) -> list[int]:
        """Nodes that load a device or link busier than ``threshold`` x the period."""
        d, a = self.d, self.a
        cut = self.value * threshold
        devs = {k for k in range(d) if self.busy[k] >= cut}
        links = {(x // d, x % d) for x in self.links if self.link[x] * self.inv[x] >= cut}
        out = [i for i in range(len(a)) if a[i] in devs]
        if links:
            h = self.p.home
            for e in range(len(self.esrc)):
                if (a[self.esrc[e]], a[self.edst[e]]) in links:
                    out.extend((self.esrc[e], self.edst[e]))
            for i in range(len(a)):
                if (self.inb[i] and (h, a[i]) in links) or (self.outb[i] and (a[i], h) in links):
                    out.append(i)
        return sorted(set(out))


# ---- local search ----------------------------------------------------------------------------
def _index_run(a: list[int], i: int) -> list[int]:
    lo, hi = i, i
    while lo > 0 and a[lo - 1] == a[i]:
        lo -= 1
    while hi + 1 < len(a) and a[hi + 1] == a[i]:
        hi += 1
    return list(range(lo, hi + 1))


class _Search:
    SWAPS = 24  # throughput: swap partners tried per candidate node

    def __init__(self, p: Problem, a: np.ndarray, objective: str, deadline: float, seed: int):
        self.p = p
        self.objective = objective
        self.deadline = deadline
        self.rng = random.Random(seed)
        self.allowed = [set(np.flatnonzero(p.allowed[i]).tolist()) for i in range(p.n)]
        self.mem = p.memory.tolist()
        self.cap = p.capacity.tolist()
        self.ev = _Latency(p, a) if objective == "latency" else _Throughput(p, a)
        self.load = np.bincount(a, weights=p.memory, minlength=p.d).tolist()
        self.evaluated = 0
        self.accepted = 0

    def set(self, a: np.ndarray):
        self.ev.set(a)
        self.load = np.bincount(a, weights=self.p.memory, minlength=self.p.d).tolist()

    def fits(self, changes: dict[int, int]) -> bool:
        a = self.ev.a
        delta: dict[int, float] = {}
        for i, k in changes.items():
            if k not in self.allowed[i]:
                return False
            o = a[i]
            if o != k and self.mem[i]:
                delta[k] = delta.get(k, 0.0) + self.mem[i]
                delta[o] = delta.get(o, 0.0) - self.mem[i]
        return all(self.load[k] + v <= self.cap[k] for k, v in delta.items() if v > 0)

    def apply(self, changes: dict[int, int]):
        a = np.array(self.ev.a, dtype=np.int64)
        for i, k in changes.items():
            a[i] = k
        self.set(a)
        self.accepted += 1

    def moves(self):
        """Candidate moves (dicts node -> device), generated lazily in a random order: for each
        candidate node, the node alone, its index run, and for latency the critical-path
        segments starting at it (its maximal same-device segment and the next 1-3 path nodes),
        each to every other device; for throughput also swaps with a few random nodes."""
        ev, d, rng = self.ev, self.p.d, self.rng
        a = ev.a
        nodes = ev.candidates()
        pos = {j: x for x, j in enumerate(nodes)} if self.objective == "latency" else None
        order = nodes.copy()
        rng.shuffle(order)
        n = len(a)
        for i in order:
            groups = [(i,), tuple(_index_run(a, i))]
            if pos is not None:
                x = pos[i]
                groups.extend(tuple(nodes[x:x + length]) for length in (2, 3, 4) if x + length <= len(nodes))
                y = x
                while y + 1 < len(nodes) and a[nodes[y + 1]] == a[i]:
                    y += 1
                groups.append(tuple(nodes[x:y + 1]))
            cand = list({(g, k) for g in groups for k in range(d) if any(a[j] != k for j in g)})
            cand.sort()
            rng.shuffle(cand)
            for g, k in cand:
                yield dict.fromkeys(g, k)
            if pos is None:
                for j in rng.sample(range(n), min(self.SWAPS, n)):
                    if a[j] != a[i]:
                        yield {i: a[j], j: a[i]}

    def descend(self) -> bool:
        """First-improvement local search to a local optimum; False if the deadline hit.
        Latency regenerates its moves after each accepted one (the critical path moved);
        throughput finishes the sweep and regenerates when a sweep accepted something."""
        ev = self.ev
        sweep = self.objective == "throughput"
        while True:
            improved = False
            for changes in self.moves():
                if time.perf_counter() > self.deadline:
                    return False
                if not self.fits(changes) or all(ev.a[i] == k for i, k in changes.items()):
                    continue
                self.evaluated += 1
                if ev.better(ev.try_move(changes), ev.key):
                    self.apply(changes)
                    improved = True
                    if not sweep:
                        break
            if not improved:
                return True

    def kick(self, size: int):
        ev = self.ev
        pool = ev.candidates() or list(range(self.p.n))
        for i in self.rng.sample(pool, min(size, len(pool))):
            options = [k for k in self.allowed[i] if k != ev.a[i] and self.fits({i: k})]
            if options:
                self.apply({i: self.rng.choice(sorted(options))})


def local_search(problem: Problem, assignment: np.ndarray, objective: str = "latency", time_budget: float = 2.0,
                 seed: int = 0, kicks: int = 200) -> tuple[np.ndarray, dict]:
    """Improve a feasible ``assignment`` (see the module docstring); returns the best
    assignment and statistics (moves evaluated / accepted, kicks, whether it converged)."""
    deadline = time.perf_counter() + time_budget
    search = _Search(problem, np.asarray(assignment, dtype=np.int64), objective, deadline, seed)
    converged = search.descend()
    ev = search.ev
    best_a, best_key = np.array(ev.a), ev.key
    fruitless = done = 0
    while converged and fruitless < kicks and time.perf_counter() < deadline:
        search.kick(size=1 + search.rng.randrange(3))
        done += 1
        search.descend()
        if ev.better(ev.key, best_key):
            best_a, best_key = np.array(ev.a), ev.key
            fruitless = 0
        else:
            fruitless += 1
            search.set(best_a)
    return best_a, {"evaluated": search.evaluated, "accepted": search.accepted, "kicks": done,
                    "converged": converged}


def heuristic(problem: Problem, objective: str = "latency", time_budget: float = 2.0, seed: int = 0,
              kicks: int = 200, with_breakdown: bool = True) -> Result:
    """Greedy + local search within ``time_budget`` seconds (see the module docstring)."""
    _check_objective(objective)
    t0 = time.perf_counter()
    check_feasible(problem)
    a = greedy(problem, objective)
    start = "greedy"
    if a is None:
        a = feasible_start(problem, time_limit=max(time_budget, 1.0))
        start = "feasibility MILP"
    g = evaluate(problem, a, objective)
    remaining = time_budget - (time.perf_counter() - t0)
    best, stats = local_search(problem, a, objective, time_budget=max(remaining, 0.0), seed=seed, kicks=kicks)
    assert is_feasible(problem, best)
    seconds = time.perf_counter() - t0
    status = (f"{start} {g:.6g} s -> local search ({stats['evaluated']} moves tried, {stats['accepted']} taken, "
              f"{stats['kicks']} kicks{'' if stats['converged'] else ', time budget reached'})")
    return make_result(problem, best, objective, "heuristic", optimal=False, gap=None, seconds=seconds,
                       status=status, with_breakdown=with_breakdown)
