"""The placement problem as plain arrays, the two objectives, and the solvers' result.

This is the numeric core shared by every placement solver (``milp``, ``chain``, ``heuristic``,
``solve``): arrays in, a ``Result`` out; nothing here knows about TVM or OpGraphs.

The problem
-----------
``n`` nodes (ops), numbered in a topological order, ``d`` devices. Node ``i`` takes
``times[i, k]`` seconds on device ``k`` (``inf``: ``k`` cannot run it). An edge ``(p, i)`` moves
``edge_bytes`` when ``p`` and ``i`` are on different devices; a transfer of ``b`` bytes from
device ``a`` to device ``c != a`` takes ``latency[a, c] + b / bandwidth[a, c]`` seconds
(``Problem.transfer``). The model's inputs live on device ``home``: node ``i`` reads
``input_bytes[i]`` of them and produces ``output_bytes[i]`` of model outputs, which are
delivered to ``home``. An assignment ``a`` (int[n]) is feasible when every node is on a device
that can run it (finite time), pinned nodes are on their device (``pinned[i] >= 0``), and the
weights on each device fit: ``sum(memory[i] for a[i] == k) <= capacity[k]``.

Objective "latency": one inference, with overlap (the contract every solver shares)
--------------------------------------------------------------------------------------
Each device runs its ops one at a time in node-index order (no reordering); transfers do not
occupy the devices, and a link carries any number of transfers at once::

    start_i  = max( finish of the previous op (smaller index) on device a_i,
                    max over edges (p, i): finish_p + transfer(a_p, a_i, edge_bytes),
                    transfer(home, a_i, input_bytes_i) if input_bytes_i > 0 else 0 )
    finish_i = start_i + times[i, a_i]
    latency  = max_i finish_i + (transfer(a_i, home, output_bytes_i) if output_bytes_i > 0 else 0)

(``transfer(a, a, .) = 0``; an edge with 0 bytes between two devices still pays the latency.)
Parallel branches on different devices overlap; ops on one device never do.

Objective "throughput": a pipelined stream of inputs
----------------------------------------------------
Every device and every directed link is a pipeline stage; the period (seconds per inference,
throughput = 1 / period) is that of the busiest stage::

    period = max( max_k sum_{i: a_i = k} times[i, k],
                  max_{x != y} bytes(x -> y) / bandwidth[x, y] )

where ``bytes(x -> y)`` sums ``edge_bytes`` over edges with ``a_src = x, a_dst = y``, plus
``input_bytes`` of nodes on ``y`` when ``x == home`` and ``output_bytes`` of nodes on ``x`` when
``y == home``. Link latencies do not limit the period.

``evaluate`` computes either objective (a 10,000-node, 20,000-edge latency evaluation takes a
few milliseconds: the predecessors are kept in CSR form, the transfer costs are computed with
numpy, and one loop in node order does the max-plus recursion); ``evaluate_batch`` evaluates
many assignments of a small problem at once (brute force); ``breakdown`` gives the schedule,
busy times and transfers for reports. ``check_feasible`` raises ``InfeasiblePlacement`` with a
one-line reason when no assignment can satisfy the constraints for a simple reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..errors import HetcError

OBJECTIVES = ("latency", "throughput")


class InfeasiblePlacement(HetcError, ValueError):
    """No assignment satisfies the constraints; the message is one line naming the cause (the
    CLI prints it as such, exit 1)."""


def _fmt_bytes(b: float) -> str:
    if not math.isfinite(b):
        return "inf bytes"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= size:
            return f"{b / size:.3g} {unit}"
    return f"{b:.0f} bytes"


def _array(value, dtype, shape: tuple[int, ...], name: str) -> np.ndarray:
    arr = np.array(value, dtype=dtype)  # a copy: the problem must not change under the caller
    if arr.shape != shape:
        raise ValueError(f"Problem.{name} has shape {arr.shape}, expected {shape}")
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class Problem:
    """A placement problem (see the module docstring). Arrays left ``None`` get neutral
    defaults: no edges, free transfers (infinite bandwidth, zero latency), no weights,
    unlimited capacity, nothing pinned, no model inputs or outputs. Every array is copied,
    validated and made read-only."""

    times: np.ndarray
    edges: np.ndarray = None  # type: ignore[assignment]
    edge_bytes: np.ndarray = None  # type: ignore[assignment]
    bandwidth: np.ndarray = None  # type: ignore[assignment]
    latency: np.ndarray = None  # type: ignore[assignment]
    memory: np.ndarray = None  # type: ignore[assignment]
    capacity: np.ndarray = None  # type: ignore[assignment]
    pinned: np.ndarray = None  # type: ignore[assignment]
    input_bytes: np.ndarray = None  # type: ignore[assignment]
    output_bytes: np.ndarray = None  # type: ignore[assignment]
    home: int = 0
    names: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()

    def __post_init__(self):
        times = np.array(self.times, dtype=float)
        if times.ndim != 2 or times.shape[0] < 1 or times.shape[1] < 1:
            raise ValueError(f"Problem.times must be a non-empty [n, d] array, got shape {times.shape}")
        n, d = times.shape
        edges = np.zeros((0, 2), dtype=np.int64) if self.edges is None else np.asarray(self.edges)
        if edges.size == 0:
            edges = edges.reshape(0, 2)
        m = edges.shape[0]
        defaults = {
            "edges": (edges, np.int64, (m, 2)),
            "edge_bytes": (np.zeros(m), float, (m,)),
            "bandwidth": (np.full((d, d), np.inf), float, (d, d)),
            "latency": (np.zeros((d, d)), float, (d, d)),
            "memory": (np.zeros(n), float, (n,)),
            "capacity": (np.full(d, np.inf), float, (d,)),
            "pinned": (np.full(n, -1), np.int64, (n,)),
            "input_bytes": (np.zeros(n), float, (n,)),
            "output_bytes": (np.zeros(n), float, (n,)),
        }
        set_ = object.__setattr__
        set_(self, "times", _array(times, float, (n, d), "times"))
        for name, (default, dtype, shape) in defaults.items():
            value = getattr(self, name)
            set_(self, name, _array(default if value is None else value, dtype, shape, name))
        set_(self, "home", int(self.home))
        set_(self, "names", tuple(self.names))
        set_(self, "devices", tuple(self.devices))
        self._validate()

    def _validate(self):
        n, d = self.times.shape
        t = self.times
        if np.isnan(t).any() or (t < 0).any() or np.isneginf(t).any():
            raise ValueError("Problem.times must be >= 0 (inf where a device cannot run a node)")
        e = self.edges
        if len(e) and ((e < 0).any() or (e >= n).any()):
            raise ValueError(f"Problem.edges must hold node indices in [0, {n})")
        if len(e) and (e[:, 0] >= e[:, 1]).any():
            j = int(np.argmax(e[:, 0] >= e[:, 1]))
            raise ValueError(f"Problem.edges[{j}] = {tuple(e[j])}: nodes must be numbered in a topological "
                             "order (src < dst)")
        off = ~np.eye(d, dtype=bool)
        for name, arr, finite in (("edge_bytes", self.edge_bytes, True), ("memory", self.memory, True),
                                  ("input_bytes", self.input_bytes, True),
                                  ("output_bytes", self.output_bytes, True),
                                  ("capacity", self.capacity, False), ("latency", self.latency[off], True)):
            if np.isnan(arr).any() or (arr < 0).any() or (finite and not np.isfinite(arr).all()):
                raise ValueError(f"Problem.{name} must be {'finite and ' if finite else ''}>= 0")
        bw = self.bandwidth[off]
        if np.isnan(bw).any() or (bw <= 0).any():
            raise ValueError("Problem.bandwidth must be > 0 between distinct devices (inf: free)")
        if ((self.pinned < -1) | (self.pinned >= d)).any():
            raise ValueError(f"Problem.pinned must be -1 (free) or a device index in [0, {d})")
        if not 0 <= self.home < d:
            raise ValueError(f"Problem.home = {self.home} is not a device index in [0, {d})")
        if self.names and len(self.names) != n:
            raise ValueError(f"Problem.names has {len(self.names)} entries for {n} nodes")
        if self.devices and len(self.devices) != d:
            raise ValueError(f"Problem.devices has {len(self.devices)} entries for {d} devices")

    # ---- sizes and names ---------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self.times.shape[0]

    @property
    def d(self) -> int:
        return self.times.shape[1]

    @property
    def m(self) -> int:
        return self.edges.shape[0]

    def node_name(self, i: int) -> str:
        return self.names[i] if self.names else f"node {i}"

    def device_name(self, k: int) -> str:
        return self.devices[k] if self.devices else f"device {k}"

    # ---- transfers ---------------------------------------------------------------------------
    def transfer(self, a: int, b: int, nbytes: float) -> float:
        """Seconds to move ``nbytes`` from device ``a`` to device ``b`` (0 when ``a == b``)."""
        if a == b:
            return 0.0
        return float(self.latency[a, b] + nbytes / self.bandwidth[a, b])

    @cached_property
    def lat0(self) -> np.ndarray:
        """``latency`` with a zero diagonal."""
        out = self.latency.copy()
        np.fill_diagonal(out, 0.0)
        return out

    @cached_property
    def inv_bandwidth(self) -> np.ndarray:
        """``1 / bandwidth`` with a zero diagonal (0 for infinite bandwidth)."""
        out = np.zeros_like(self.bandwidth)
        off = ~np.eye(self.d, dtype=bool)
        out[off] = 1.0 / self.bandwidth[off]
        return out

    def transfer_matrix(self, nbytes: float) -> np.ndarray:
        """float[d, d]: ``transfer(a, b, nbytes)`` for every pair."""
        return self.lat0 + nbytes * self.inv_bandwidth

    @cached_property
    def input_cost(self) -> np.ndarray:
        """float[n, d]: seconds for node i's model inputs to reach device k (0 without inputs)."""
        cost = self.lat0[self.home][None, :] + self.input_bytes[:, None] * self.inv_bandwidth[self.home][None, :]
        cost[self.input_bytes <= 0] = 0.0
        return cost

    @cached_property
    def output_cost(self) -> np.ndarray:
        """float[n, d]: seconds to deliver node i's model outputs from device k to home."""
        cost = self.lat0[:, self.home][None, :] + self.output_bytes[:, None] * self.inv_bandwidth[:, self.home][None, :]
        cost[self.output_bytes <= 0] = 0.0
        return cost

    @cached_property
    def edge_cost(self) -> np.ndarray:
        """float[m, d, d]: seconds of edge e's transfer from device a to device b (0 when a == b)."""
        return self.lat0[None] + self.edge_bytes[:, None, None] * self.inv_bandwidth[None]

    # ---- structure ---------------------------------------------------------------------------
    @cached_property
    def allowed(self) -> np.ndarray:
        """bool[n, d]: device k can run node i, it is not pinned elsewhere, and its weights fit."""
        ok = np.isfinite(self.times) & (self.memory[:, None] <= self.capacity[None, :])
        pinned = self.pinned >= 0
        pin_mask = np.zeros_like(ok)
        pin_mask[np.nonzero(pinned)[0], self.pinned[pinned]] = True
        ok[pinned] &= pin_mask[pinned]
        ok.setflags(write=False)
        return ok

    @cached_property
    def preds(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR of the in-edges: ``(indptr[n + 1], edge ids sorted by destination, then source)``;
        the edges into node i are ``eid[indptr[i]:indptr[i + 1]]``."""
        eid = np.lexsort((self.edges[:, 0], self.edges[:, 1])) if self.m else np.zeros(0, np.int64)
        indptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.edges[:, 1], minlength=self.n), out=indptr[1:])
        return indptr, eid

    @cached_property
    def succs(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR of the out-edges, like ``preds``."""
        eid = np.lexsort((self.edges[:, 1], self.edges[:, 0])) if self.m else np.zeros(0, np.int64)
        indptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.edges[:, 0], minlength=self.n), out=indptr[1:])
        return indptr, eid

    @cached_property
    def _loop_data(self) -> tuple[list[int], list[int], np.ndarray, np.ndarray, np.ndarray]:
        """Python lists for the latency loop: indptr, sources in CSR order; and edge arrays
        (src, dst, bytes) in CSR order."""
        indptr, eid = self.preds
        src = self.edges[eid, 0]
        dst = self.edges[eid, 1]
        return indptr.tolist(), src.tolist(), src, dst, self.edge_bytes[eid]

    @cached_property
    def is_chain(self) -> bool:
        """Every node i > 0 has exactly the edge (i - 1, i) and there are no other edges."""
        if self.m != self.n - 1:
            return False
        e = self.edges[np.lexsort((self.edges[:, 0], self.edges[:, 1]))]
        return bool(np.array_equal(e[:, 1], np.arange(1, self.n)) and np.array_equal(e[:, 0], np.arange(self.n - 1)))


# ---- feasibility -----------------------------------------------------------------------------
def check_feasible(problem: Problem) -> None:
    """Raise ``InfeasiblePlacement`` (one line) when a simple cause makes every assignment
    infeasible: a node no device can run, a pin to a device that cannot run the node or hold
    its weights, a node whose weights fit on no device that runs it, the weights of the nodes
    that have only one possible device exceeding that device's capacity, or all the weights
    exceeding all the capacity. Passing does not prove feasibility (that is bin packing); the
    solvers raise ``infeasible_error()`` when they prove there is no feasible assignment."""
    p = problem
    finite = np.isfinite(p.times)
    pinned = p.pinned >= 0
    pin = np.where(pinned, p.pinned, 0)
    rows = np.arange(p.n)
    bad = (~finite.any(axis=1) | (pinned & ~finite[rows, pin]) | (pinned & (p.memory > p.capacity[pin]))
           | ~p.allowed.any(axis=1))
    for i in np.flatnonzero(bad)[:1].tolist():  # the first offending node, in the order below
        name = p.node_name(i)
        if not finite[i].any():
            raise InfeasiblePlacement(f"{name} runs on no device (its time is inf on every device)")
        k = int(p.pinned[i])
        if k >= 0 and not finite[i, k]:
            raise InfeasiblePlacement(f"{name} is pinned to {p.device_name(k)}, which cannot run it")
        if k >= 0 and p.memory[i] > p.capacity[k]:
            raise InfeasiblePlacement(f"{name} is pinned to {p.device_name(k)}, but its weights "
                                      f"({_fmt_bytes(p.memory[i])}) exceed that device's capacity "
                                      f"({_fmt_bytes(p.capacity[k])})")
        raise InfeasiblePlacement(f"the weights of {name} ({_fmt_bytes(p.memory[i])}) fit on no device "
                                  "that can run it")
    forced = p.allowed.sum(axis=1) == 1
    if forced.any():
        dev = np.argmax(p.allowed[forced], axis=1)
        load = np.bincount(dev, weights=p.memory[forced], minlength=p.d)
        for k in range(p.d):
            if load[k] > p.capacity[k]:
                raise InfeasiblePlacement(f"the weights of the nodes pinned to or only runnable on "
                                          f"{p.device_name(k)} ({_fmt_bytes(load[k])}) exceed its capacity "
                                          f"({_fmt_bytes(p.capacity[k])})")
    total = p.memory.sum()
    if total > p.capacity.sum():
        raise InfeasiblePlacement(f"the weights of all nodes ({_fmt_bytes(total)}) exceed the capacity of all "
                                  f"devices together ({_fmt_bytes(p.capacity.sum())})")


def infeasible_error() -> InfeasiblePlacement:
    """The generic error when a solver proves that no assignment fits the capacities."""
    return InfeasiblePlacement("no placement satisfies the memory capacities")


def violations(problem: Problem, assignment) -> list[str]:
    """What makes ``assignment`` infeasible (empty when it is feasible)."""
    p = problem
    a = np.asarray(assignment, dtype=np.int64)
    if a.shape != (p.n,) or (a < 0).any() or (a >= p.d).any():
        return [f"assignment must be int[{p.n}] with values in [0, {p.d})"]
    out = []
    t = p.times[np.arange(p.n), a]
    for i in np.nonzero(~np.isfinite(t))[0]:
        out.append(f"{p.node_name(i)} cannot run on {p.device_name(a[i])}")
    for i in np.nonzero((p.pinned >= 0) & (p.pinned != a))[0]:
        out.append(f"{p.node_name(i)} is pinned to {p.device_name(p.pinned[i])}, not {p.device_name(a[i])}")
    load = np.bincount(a, weights=p.memory, minlength=p.d)
    for k in np.nonzero(load > p.capacity)[0]:
        out.append(f"weights on {p.device_name(k)} ({_fmt_bytes(load[k])}) exceed its capacity "
                   f"({_fmt_bytes(p.capacity[k])})")
    return out


def is_feasible(problem: Problem, assignment) -> bool:
    return not violations(problem, assignment)


# ---- evaluators ------------------------------------------------------------------------------
def _check_objective(objective: str) -> None:
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")


def schedule(problem: Problem, assignment) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The latency schedule of ``assignment``: ``(start, finish, end)`` per node, where ``end``
    adds the delivery of the node's model outputs to home. ``latency = end.max()``."""
    p = problem
    a = np.asarray(assignment, dtype=np.int64)
    n = p.n
    indptr, srcl, src, dst, nbytes = p._loop_data
    rows = np.arange(n)
    t = p.times[rows, a].tolist()
    ea, eb = a[src], a[dst]
    cost = (p.lat0[ea, eb] + nbytes * p.inv_bandwidth[ea, eb]).tolist()
    ready = p.input_cost[rows, a].tolist()
    al = a.tolist()
    free = [0.0] * p.d
    start = [0.0] * n
    fin = [0.0] * n
    lo = 0
    for i in range(n):
        k = al[i]
        s = free[k]
        v = ready[i]
        if v > s:  # noqa: PLR1730 (an if is ~3x faster than max() in this hot loop)
            s = v
        hi = indptr[i + 1]
        for e in range(lo, hi):
            v = fin[srcl[e]] + cost[e]
            if v > s:  # noqa: PLR1730
                s = v
        lo = hi
        f = s + t[i]
        start[i] = s
        fin[i] = f
        free[k] = f
    finish = np.array(fin)
    return np.array(start), finish, finish + p.output_cost[rows, a]


def latency(problem: Problem, assignment) -> float:
    """Single-inference latency (seconds) of ``assignment``; inf if a node is on a device that
    cannot run it. Pins and capacities are not checked (see ``violations``)."""
    return float(schedule(problem, assignment)[2].max())


def loads(problem: Problem, assignment) -> tuple[np.ndarray, np.ndarray]:
    """``(busy[d], link_bytes[d, d])``: the seconds each device computes per inference and the
    bytes each directed link moves per inference (edges, model inputs and outputs)."""
    p = problem
    a = np.asarray(assignment, dtype=np.int64)
    d = p.d
    busy = np.bincount(a, weights=p.times[np.arange(p.n), a], minlength=d)
    idx = a[p.edges[:, 0]] * d + a[p.edges[:, 1]]
    link = np.bincount(idx, weights=p.edge_bytes, minlength=d * d).astype(float)  # int when m == 0
    link += np.bincount(p.home * d + a, weights=p.input_bytes, minlength=d * d)
    link += np.bincount(a * d + p.home, weights=p.output_bytes, minlength=d * d)
    link = link.reshape(d, d)
    np.fill_diagonal(link, 0.0)
    return busy, link


def period(problem: Problem, assignment) -> float:
    """Pipeline period (seconds per inference) of ``assignment``: the busiest device or link."""
    busy, link = loads(problem, assignment)
    return float(max(busy.max(), (link * problem.inv_bandwidth).max()))


def evaluate(problem: Problem, assignment, objective: str = "latency") -> float:
    """The objective ("latency" or "throughput", the latter as the period in seconds)."""
    _check_objective(objective)
    return latency(problem, assignment) if objective == "latency" else period(problem, assignment)


def evaluate_batch(problem: Problem, assignments: np.ndarray, objective: str = "latency",
                   check_memory: bool = True) -> np.ndarray:
    """float[B]: the objective of each row of ``assignments`` (int[B, n]), vectorised over the
    rows (for brute force on small problems); inf where the memory capacities are exceeded
    (``check_memory``) or a node is on a device that cannot run it. Pins are not checked."""
    _check_objective(objective)
    p = problem
    A = np.asarray(assignments, dtype=np.int64)
    B, n = A.shape
    d = p.d
    rows = np.arange(B)
    T = p.times[np.arange(n)[None, :], A]  # [B, n]
    if objective == "latency":
        indptr_a, eid = p.preds
        free = np.zeros((B, d))
        fin = np.empty((B, n))
        out = np.zeros(B)
        for i in range(n):
            ai = A[:, i]
            s = np.maximum(free[rows, ai], p.input_cost[i, ai])
            for e in eid[indptr_a[i]:indptr_a[i + 1]]:
                q = p.edges[e, 0]
                np.maximum(s, fin[:, q] + p.edge_cost[e][A[:, q], ai], out=s)
            f = s + T[:, i]
            fin[:, i] = f
            free[rows, ai] = f
            np.maximum(out, f + p.output_cost[i, ai], out=out)
        value = out
    else:
        busy = np.zeros((B, d))
        for k in range(d):
            busy[:, k] = np.where(A == k, T, 0.0).sum(axis=1)
        link = np.zeros((B, d * d))
        for e in range(p.m):
            link[rows, A[:, p.edges[e, 0]] * d + A[:, p.edges[e, 1]]] += p.edge_bytes[e]
        for i in range(n):
            if p.input_bytes[i] > 0:
                link[rows, p.home * d + A[:, i]] += p.input_bytes[i]
            if p.output_bytes[i] > 0:
                link[rows, A[:, i] * d + p.home] += p.output_bytes[i]
        value = np.maximum(busy.max(axis=1), (link * p.inv_bandwidth.reshape(-1)[None, :]).max(axis=1))
    if check_memory and np.isfinite(p.capacity).any():
        for k in range(d):
            if math.isfinite(p.capacity[k]):
                over = np.where(A == k, p.memory[None, :], 0.0).sum(axis=1) > p.capacity[k]
                value[over] = np.inf
    return value


# ---- breakdown and result --------------------------------------------------------------------
@dataclass
class Transfers:
    """The transfers an assignment makes (one row each). ``src``/``dst`` are node indices, -1
    for the model inputs (at home) / outputs (delivered to home); ``seconds`` includes the
    link latency."""

    src: np.ndarray
    dst: np.ndarray
    from_device: np.ndarray
    to_device: np.ndarray
    nbytes: np.ndarray
    seconds: np.ndarray

    def __len__(self) -> int:
        return len(self.src)


@dataclass
class Breakdown:
    """Where the time goes for one assignment. ``start``/``finish``/``end`` are the latency
    schedule (``end`` adds output delivery); ``busy[k]`` the seconds device k computes;
    ``link_bytes[x, y]`` the bytes moved from x to y per inference and ``link_seconds[x, y]``
    = link_bytes / bandwidth (what limits the period)."""

    start: np.ndarray
    finish: np.ndarray
    end: np.ndarray
    busy: np.ndarray
    link_bytes: np.ndarray
    link_seconds: np.ndarray
    transfers: Transfers
    latency: float
    period: float

    def to_dict(self) -> dict:
        return {"latency": self.latency, "period": self.period, "busy": self.busy.tolist(),
                "link_bytes": self.link_bytes.tolist(), "link_seconds": self.link_seconds.tolist(),
                "transfers": len(self.transfers)}


def breakdown(problem: Problem, assignment) -> Breakdown:
    p = problem
    a = np.asarray(assignment, dtype=np.int64)
    start, finish, end = schedule(p, a)
    busy, link = loads(p, a)
    src, dst = p.edges[:, 0], p.edges[:, 1]
    cross = a[src] != a[dst]
    nodes = np.arange(p.n)
    inp = (p.input_bytes > 0) & (a != p.home)
    out = (p.output_bytes > 0) & (a != p.home)
    home_in = np.full(int(inp.sum()), p.home)
    home_out = np.full(int(out.sum()), p.home)
    fr = np.concatenate([a[src[cross]], home_in, a[out]])
    to = np.concatenate([a[dst[cross]], a[inp], home_out])
    nbytes = np.concatenate([p.edge_bytes[cross], p.input_bytes[inp], p.output_bytes[out]])
    transfers = Transfers(
        src=np.concatenate([src[cross], np.full(len(home_in), -1), nodes[out]]),
        dst=np.concatenate([dst[cross], nodes[inp], np.full(len(home_out), -1)]),
        from_device=fr, to_device=to, nbytes=nbytes,
        seconds=p.lat0[fr, to] + nbytes * p.inv_bandwidth[fr, to])
    link_seconds = link * p.inv_bandwidth
    return Breakdown(start=start, finish=finish, end=end, busy=busy, link_bytes=link, link_seconds=link_seconds,
                     transfers=transfers, latency=float(end.max()),
                     period=float(max(busy.max(), link_seconds.max())))


@dataclass
class Result:
    """A solver's answer. ``objective`` is the evaluator's value of ``assignment`` (seconds:
    latency, or the period for "throughput"); ``bound`` a proven lower bound on the optimum
    where the solver has one (MILP dual bound, equal to ``objective`` when optimal); ``gap``
    the relative MIP gap HiGHS reported (None for solvers that prove nothing)."""

    assignment: np.ndarray
    objective: float
    objective_kind: str
    solver: str
    optimal: bool
    gap: float | None
    seconds: float
    status: str
    bound: float | None = None
    model_value: float | None = None  # the solver's own value (MILP: HiGHS's objective, in seconds)
    breakdown: Breakdown | None = field(default=None, repr=False)

    @property
    def throughput(self) -> float:
        """Inferences per second (only meaningful for objective_kind "throughput")."""
        return 1.0 / self.objective if self.objective > 0 else math.inf

    def to_dict(self) -> dict:
        out = {"assignment": self.assignment.tolist(), "objective": self.objective,
               "objective_kind": self.objective_kind, "solver": self.solver, "optimal": self.optimal,
               "gap": self.gap, "seconds": self.seconds, "status": self.status, "bound": self.bound,
               "model_value": self.model_value}
        if self.breakdown is not None:
            out["breakdown"] = self.breakdown.to_dict()
        return out


def make_result(problem: Problem, assignment, objective: str, solver: str, *, optimal: bool,
                gap: float | None, seconds: float, status: str, bound: float | None = None,
                model_value: float | None = None, with_breakdown: bool = True) -> Result:
    """A ``Result`` whose objective is the evaluator's value of ``assignment``."""
    a = np.asarray(assignment, dtype=np.int64).copy()
    bd = breakdown(problem, a) if with_breakdown else None
    if bd is not None:
        value = bd.latency if objective == "latency" else bd.period
    else:
        value = evaluate(problem, a, objective)
    return Result(assignment=a, objective=value, objective_kind=objective, solver=solver, optimal=optimal,
                  gap=gap, seconds=seconds, status=status, bound=bound, model_value=model_value, breakdown=bd)


# ---- random instances (tests and benchmarks) -------------------------------------------------
_WINDOW = 20  # random_problem: a node reads nodes at most this far back


def random_problem(n: int, d: int = 3, seed: int = 0, *, edges_per_node: float = 2.0,
                   unsupported: float = 0.1, pin: float = 0.05, memory_slack: float | None = None,
                   io: bool = True, comm: float = 1.0) -> Problem:
    """A random DAG placement problem with realistic-looking numbers: ops of log-normal work,
    device 0 a slow host (home) and the others accelerators with op-dependent speed-ups;
    each node reads earlier nodes (at most 20 back, mostly recent ones), ``edges_per_node`` on average;
    edge sizes chosen so a transfer costs about ``comm`` times a typical op; a fraction
    ``unsupported`` of (node, accelerator) entries are inf; a fraction ``pin`` of nodes pinned;
    with ``memory_slack`` the accelerators' capacities are that multiple of an even share of
    the weights; with ``io`` the first node reads the model inputs and the sinks produce the
    outputs. The problem is not guaranteed feasible when capacities or pins bind."""
    rng = np.random.default_rng(seed)
    work = rng.lognormal(mean=0.0, sigma=1.0, size=n) * 1e-3  # seconds on the host
    times = np.empty((n, d))
    times[:, 0] = work
    for k in range(1, d):
        speedup = rng.lognormal(mean=math.log(3.0), sigma=0.8, size=n)
        times[:, k] = work / speedup
    if d > 1:
        mask = rng.random((n, d - 1)) < unsupported
        times[:, 1:][mask] = np.inf
    edges = []
    decay = 0.75 ** np.arange(_WINDOW)
    for i in range(1, n):
        w = min(i, _WINDOW)
        k = min(w, 1 + int(rng.poisson(max(edges_per_node - 1, 0.0))))
        dist = rng.choice(w, size=k, replace=False, p=decay[:w] / decay[:w].sum())
        edges.extend((i - 1 - int(j), i) for j in sorted(dist, reverse=True))
    edges_arr = np.array(edges, dtype=np.int64).reshape(-1, 2)
    bw = rng.uniform(2e9, 2e10, size=(d, d))
    lat = rng.uniform(5e-6, 5e-5, size=(d, d))
    np.fill_diagonal(bw, np.inf)
    np.fill_diagonal(lat, 0.0)
    typical = float(np.median(work)) / 2
    edge_bytes = rng.lognormal(mean=0.0, sigma=1.0, size=len(edges_arr)) * typical * comm * 1e10
    memory = rng.lognormal(mean=0.0, sigma=1.0, size=n) * 1e6
    capacity = np.full(d, np.inf)
    if memory_slack is not None and d > 1:
        capacity[1:] = memory.sum() / (d - 1) * memory_slack
    pinned = np.full(n, -1)
    for i in np.nonzero(rng.random(n) < pin)[0]:
        ok = np.nonzero(np.isfinite(times[i]))[0]
        pinned[i] = int(rng.choice(ok))
    input_bytes = np.zeros(n)
    output_bytes = np.zeros(n)
    if io:
        input_bytes[0] = typical * comm * 1e10
        has_succ = np.zeros(n, dtype=bool)
        has_succ[edges_arr[:, 0]] = True
        output_bytes[~has_succ] = typical * comm * 1e10 * 0.5
    return Problem(times=times, edges=edges_arr, edge_bytes=edge_bytes, bandwidth=bw, latency=lat,
                   memory=memory, capacity=capacity, pinned=pinned, input_bytes=input_bytes,
                   output_bytes=output_bytes, home=0)
