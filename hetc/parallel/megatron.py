"""The Megatron sharding plan of a Relax function: which linear layers split how over ``tp`` ranks.

Found on the graph after hetc's passes, whatever the exporter's spelling, by a forward
dataflow analysis. Every value is replicated (``R``), split on one axis (``S(axis)``) or a
partial sum (``P``, what a row-parallel matmul leaves until its all-reduce):

- a matmul by a constant 2-D weight with a replicated input is a *column* candidate: its
  weight splits on the output features (``S[1]``) and its result is ``S(last)``;
- a split value flows through elementwise ops (broadcasting a replicated operand of size 1
  on the split axis, or splitting a constant bias with it), the head reshapes and
  transposes (the split axis follows the data: a reshape keeps it when the elements before
  it and the split boundaries coincide), softmax and reductions over other axes, slices and
  concatenations along other axes (rotary embeddings), ``expand_dims``/``broadcast_to``
  (grouped-query attention's ``repeat_kv``) and attention's batched matmuls (two values split
  on the same batch axis: the heads);
- a matmul by a constant weight of a value split on its contracted (last) axis is
  *row-parallel*: its weight splits on the input features (``S[0]``) and its result is ``P``;
  TVM's distributed passes put one all-reduce where a partial sum is first used.

A column candidate whose split values reach anything else -- a layer norm or a reduction
over the split axis, a model output, a replicated operand of full size, an op not listed --
or never reach a row-parallel matmul, stays replicated with the reason recorded, and the
analysis runs again without it (its partners in the same block then fail in turn: a query
split without its keys meets a replicated operand). Candidates that share row-parallel
matmuls form one *block* (attention: Q, K, V and the output projection; MLP: the up/gate
projections and the down projection), which costs one all-reduce per row-parallel result.

Placements are per use (the call and its argument), not per constant: exporters and CSE
share one constant (a zero bias) between layers and between split and replicated roles.

To let a split value through another op, add it to ``_ELEMENTWISE``/``_BROADCASTING`` or
give it a rule in ``_Analysis._call`` that says where the split axis goes (or fail); TVM's
distributed passes must be able to shard it too (they work on the legalized TIR).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax

from ..frontends.onnx import shapes

_ELEMENTWISE = {
    "relax.erf", "relax.tanh", "relax.exp", "relax.sigmoid", "relax.nn.gelu", "relax.nn.gelu_tanh",
    "relax.nn.relu", "relax.nn.silu", "relax.astype", "relax.isnan", "relax.isinf", "relax.negative",
    "relax.sqrt", "relax.rsqrt", "relax.abs", "relax.log", "relax.cos", "relax.sin", "relax.clip",
    "relax.square", "relax.logical_not", "relax.nn.leakyrelu", "relax.floor", "relax.ceil", "relax.round",
}
_BROADCASTING = {
    "relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.power", "relax.maximum",
    "relax.minimum", "relax.where", "relax.equal", "relax.not_equal", "relax.less", "relax.less_equal",
    "relax.greater", "relax.greater_equal", "relax.logical_and", "relax.logical_or", "relax.floor_divide",
}
_OUTPUT = "reaches a model output (split, it would need an all-gather there; not done)"
_REDUCTIONS = {"relax.mean", "relax.sum", "relax.max", "relax.min", "relax.prod"}


@dataclass(frozen=True)
class Split:
    """A value split on ``axis`` over the ranks, by the column candidates ``roots``."""

    axis: int
    roots: frozenset


@dataclass(frozen=True)
class Partial:
    """A row-parallel matmul's result: each rank holds a partial sum."""

    rows: frozenset  # the row-parallel calls it comes from


@dataclass
class ShardPlan:
    """Which weights split how, per use: (call, argument index) -> placement text ("S[k]")."""

    tp: int
    placements: list = field(default_factory=list)  # [(call, arg index, "S[k]")]
    blocks: list = field(default_factory=list)  # [{"kind", "columns", "rows", "allreduce_bytes"}]
    replicated: list = field(default_factory=list)  # [{"layer", "reason"}]
    split_values: set = field(default_factory=set)  # names of the bound values each rank holds a split of
    row_values: set = field(default_factory=set)  # names of the row-parallel results (all-reduced)

    @property
    def columns(self) -> int:
        return sum(len(b["columns"]) for b in self.blocks)

    @property
    def allreduces(self) -> int:
        return sum(len(b["rows"]) for b in self.blocks)

    def describe(self) -> dict:
        return {"tp": self.tp, "column_parallel": self.columns, "row_parallel": self.allreduces,
                "sharded_weights": sum(p.startswith("S[") for _, _, p in self.placements),
                "blocks": self.blocks, "replicated": self.replicated}


def static_dims(expr) -> list[int] | None:
    """``shapes.static_dims`` of a tensor-typed expression; None where a dim is unknown or
    symbolic (the value is then left replicated)."""
    if not isinstance(getattr(expr, "ty", None), relax.TensorType):
        return None
    try:
        return shapes.static_dims(expr)
    except ValueError:
        return None


def _fields(expr) -> list:
    """The items of a Relax tuple or shape argument."""
    return list(expr.fields) if isinstance(expr, relax.Tuple) else list(expr.values)


def _is_const(expr) -> bool:
    return isinstance(expr, tvm.ir.GenericConst)


def _weight(call) -> list[int] | None:
    """[in, out] if ``call`` is a matmul by a constant 2-D weight, else None."""
    if isinstance(call, relax.Call) and call.op.name == "relax.matmul" and _is_const(call.args[1]):
        dims = static_dims(call.args[1])
        return dims if dims is not None and len(dims) == 2 else None
    return None


def _describe(call) -> str:
    w = _weight(call)
    return f"matmul [{w[0]}->{w[1]}]"


class _Failed(Exception):
    def __init__(self, roots, reason: str) -> None:
        super().__init__(reason)
        self.roots, self.reason = frozenset(roots), reason


class _Analysis:
    """One forward pass with the column candidates ``columns``; raises ``_Failed`` naming the
    candidates to drop."""

    def __init__(self, fn: relax.Function, tp: int, columns: set) -> None:
        self.fn, self.tp, self.columns = fn, tp, columns
        self.state: dict = {}  # var -> Split | Partial (absent: replicated)
        self.placements: list = []
        self.rows: dict = {}  # row call -> the roots feeding it
        self.reached: dict = {}  # root -> row calls its split values reach
        self.attention: set = set()  # roots whose split values meet in a batched matmul

    def run(self) -> None:
        body = self.fn.body
        result = body.body
        for block in body.blocks:
            for b in block.bindings:
                value = b.value
                if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                    out = self._call(b.var, value)
                elif isinstance(value, relax.TupleGetItem):
                    out = self.state.get(value.tuple_value) if isinstance(value.tuple_value, relax.Var) else None
                    out = out[int(value.index)] if isinstance(out, tuple) else out
                elif isinstance(value, relax.Tuple) and b.var.same_as(result):
                    split = [s for s in (self._get(f) for f in value.fields) if isinstance(s, Split)]
                    if split:
                        self._fail(split, _OUTPUT)
                    out = None
                elif isinstance(value, relax.Tuple):  # its fields' states, for TupleGetItem
                    out = tuple(self._get(f) for f in value.fields)
                    out = out if any(out) else None
                elif isinstance(value, relax.Var):
                    out = self._get(value)
                else:
                    out = self._fail_inputs(value, "an unsupported binding")
                if out is not None:
                    self.state[b.var] = out
        s = self._get(result)
        if isinstance(s, Split):
            raise _Failed(s.roots, _OUTPUT)
        for root in self.columns:
            if not self.reached.get(root) and root not in self.rows:
                raise _Failed({root}, "no row-parallel matmul consumes its split result")

    def _get(self, expr):
        """The state of an argument: Split, or None (replicated; a partial sum is all-reduced
        where it is used). A tuple is split when all its fields are, on one axis."""
        if isinstance(expr, relax.Tuple):
            return self._combine([self._get(f) for f in expr.fields])
        s = self.state.get(expr) if isinstance(expr, relax.Var) else None
        if isinstance(s, tuple):  # a tuple variable used whole
            return self._combine(list(s))
        return None if isinstance(s, Partial) else s

    def _combine(self, states):
        """A tuple's state: split when all its fields are, on one axis."""
        split = [s for s in states if isinstance(s, Split)]
        if not split:
            return None
        if len(split) < len(states) or len({s.axis for s in split}) > 1:
            self._fail(split, "a tuple mixing split and replicated values")
        return Split(split[0].axis, frozenset().union(*(s.roots for s in split)))

    def _fail(self, splits, reason: str):
        raise _Failed(frozenset().union(*(s.roots for s in splits)), reason)

    def _fail_inputs(self, value, reason: str):
        args = value.args if isinstance(value, relax.Call) else []
        split = [s for s in (self._get(a) for a in args) if isinstance(s, Split)]
        if split:
            self._fail(split, reason)

    def _call(self, var, call):
        op = call.op.name
        args = list(call.args)
        states = [self._get(a) for a in args]
        split = [s for s in states if isinstance(s, Split)]
        w = _weight(call)
        if w is not None:
            if not split:
                if call in self.columns:
                    return Split(len(static_dims(var)) - 1, frozenset({call}))
                return None
            s = states[0]
            if s.axis != len(static_dims(args[0])) - 1:  # a batch axis: the rows stay independent
                return s
            if w[0] % self.tp:
                self._fail([s], f"its row-parallel partner {_describe(call)} has {w[0]} input features, "
                                f"not divisible by {self.tp}")
            self.placements.append((call, 1, "S[0]"))
            self.rows[call] = s.roots
            for root in s.roots:
                self.reached.setdefault(root, set()).add(call)
            return Partial(frozenset({call}))
        if not split:
            return None
        roots = frozenset().union(*(s.roots for s in split))
        out = static_dims(var)
        if out is None:
            self._fail(split, f"{op} has a result of unknown shape")
        if op in _ELEMENTWISE:
            return states[0] if isinstance(states[0], Split) else self._fail(split, f"{op} of a split value")
        if op in _BROADCASTING:
            return self._broadcast(call, args, states, out, roots)
        s, dims = states[0], static_dims(args[0])
        if s is None:
            return self._fail(split, f"{op} with a split value as a secondary input")
        if op == "relax.reshape":
            return self._reshape(s, dims, out, roots)
        if op == "relax.permute_dims":
            axes = list(call.attrs.axes) if call.attrs.axes is not None else list(range(len(dims)))[::-1]
            return Split([int(a) for a in axes].index(s.axis), roots)
        if op in ("relax.nn.softmax", "relax.nn.log_softmax"):
            return s if int(call.attrs.axis) % len(dims) != s.axis else self._fail(split, f"{op} over the split axis")
        if op in _REDUCTIONS:
            axes = ([int(a) % len(dims) for a in call.attrs.axis] if call.attrs.axis is not None
                    else list(range(len(dims))))
            if s.axis in axes:
                return self._fail(split, f"{op} over the split features (needs an all-reduce of its own)")
            return Split(s.axis if call.attrs.keepdims else s.axis - sum(a < s.axis for a in axes), roots)
        if op == "relax.strided_slice":  # (data, axes, begin, end, strides)
            if s.axis in [int(getattr(a, "value", a)) % len(dims) for a in _fields(args[1])]:
                return self._fail(split, "a slice along the split axis")
            return s
        if op == "relax.split":
            return s if int(call.attrs.axis) % len(dims) != s.axis else self._fail(split, "a split along the split axis")
        if op == "relax.concat":
            return s if int(call.attrs.axis) % len(out) != s.axis else self._fail(split, "a concatenation along the split axis")
        if op == "relax.expand_dims":
            added = sorted(int(a) % len(out) for a in call.attrs.axis)
            axis = s.axis
            for a in added:
                axis += a <= axis
            return Split(axis, roots)
        if op == "relax.broadcast_to":
            axis = s.axis + len(out) - len(dims)
            return Split(axis, roots) if out[axis] == dims[s.axis] else self._fail(split, "a broadcast of the split axis")
        if op == "relax.matmul":
            self.attention |= roots
            return self._batched_matmul(args, states, out, roots)
        return self._fail(split, f"{op} (no sharding rule)")

    def _broadcast(self, call, args, states, out, roots):
        axes = {s.axis + len(out) - len(static_dims(a)) for a, s in zip(args, states, strict=True) if isinstance(s, Split)}
        if len(axes) > 1:
            raise _Failed(roots, f"{call.op.name} of values split on different axes")
        axis = axes.pop()
        for k, (a, s) in enumerate(zip(args, states, strict=True)):
            if isinstance(s, Split):
                continue
            dims = static_dims(a)
            if dims is None:
                raise _Failed(roots, f"{call.op.name} with an operand of unknown shape")
            at = axis - (len(out) - len(dims))
            if at < 0 or dims[at] == 1:
                continue  # broadcast along the split axis: every rank uses it whole
            if _is_const(a) and dims[at] % self.tp == 0:
                self.placements.append((call, k, f"S[{at}]"))  # a bias: split with the features
                continue
            raise _Failed(roots, f"{call.op.name} with a replicated operand of full size on the split axis")
        return Split(axis, roots)

    def _reshape(self, s: Split, dims, out, roots):
        before = int(np.prod(dims[:s.axis]))
        for b in range(len(out)):
            if int(np.prod(out[:b])) == before and out[b] % self.tp == 0 and out[b] != 1:
                return Split(b, roots)
        raise _Failed(roots, f"a reshape {dims} -> {out} that moves the split boundaries (heads not divisible "
                             f"by {self.tp}?)")

    def _batched_matmul(self, args, states, out, roots):
        axes = set()
        for a, s in zip(args, states, strict=True):
            dims = static_dims(a)
            if isinstance(s, Split):
                if s.axis >= len(dims) - 2:
                    raise _Failed(roots, "a matmul contracting or keeping a split row/column axis of a non-weight")
                axes.add(s.axis + len(out) - len(dims))
        if len(axes) > 1:
            raise _Failed(roots, "a batched matmul of values split on different axes")
        axis = axes.pop()
        for a, s in zip(args, states, strict=True):
            if s is None:
                dims = static_dims(a)
                at = axis - (len(out) - len(dims))
                if at >= 0 and dims[at] != 1:
                    raise _Failed(roots, "a batched matmul with a replicated operand of full size on the split axis")
        return Split(axis, roots)


def megatron_plan(fn: relax.Function, tp: int) -> ShardPlan:
    """The column/row blocks of ``fn`` for ``tp`` ranks (see the module docstring)."""
    bindings = [b for block in fn.body.blocks for b in block.bindings]
    columns, reasons = set(), {}
    for b in bindings:
        w = _weight(b.value)
        if w is None:
            continue
        if static_dims(b.var) is None:
            reasons[b.value] = "its result has a symbolic shape"
        elif w[1] % tp:
            reasons[b.value] = f"{w[1]} output features are not divisible by {tp}"
        else:
            columns.add(b.value)
    while True:
        analysis = _Analysis(fn, tp, set(columns))
        try:
            analysis.run()
            break
        except _Failed as failed:
            for root in failed.roots:
                reasons.setdefault(root, failed.reason)
            columns -= failed.roots
    columns -= set(analysis.rows)  # a candidate fed by a split value is row-parallel instead
    plan = ShardPlan(tp, placements=[(c, 1, "S[1]") for c in columns] + analysis.placements)
    plan.split_values = {str(v.name) for v, s in analysis.state.items() if isinstance(s, Split)}
    plan.row_values = {str(b.var.name) for b in bindings if b.value in analysis.rows}
    # blocks: columns grouped by the row-parallel matmuls they reach
    groups: list[tuple[set, set]] = []
    for row, feeding in analysis.rows.items():
        merged = ({row}, set(feeding))
        for g in [g for g in groups if g[1] & merged[1]]:
            groups.remove(g)
            merged[0].update(g[0])
            merged[1].update(g[1])
        groups.append(merged)
    order = {b.value: i for i, b in enumerate(bindings)}
    bound = {b.value: b.var for b in bindings}
    for rows, cols in sorted(groups, key=lambda g: min(order[c] for c in g[1])):
        cols, rows = sorted(cols, key=order.get), sorted(rows, key=order.get)
        row_out = [static_dims(bound[r]) for r in rows]
        plan.blocks.append({
            "kind": "attention" if set(cols) & analysis.attention else "mlp",
            "columns": [_describe(c) for c in cols], "rows": [_describe(r) for r in rows],
            "allreduce_bytes": [int(np.prod(d)) * 4 for d in row_out]})
    for call, reason in sorted(reasons.items(), key=lambda kv: order[kv[0]]):
        if call not in columns and call not in analysis.rows:
            plan.replicated.append({"layer": _describe(call), "reason": reason})
    for b in bindings:
        if isinstance(b.value, relax.Call) and getattr(b.value.op, "name", None) == "relax.take" \
                and _is_const(b.value.args[0]) and len(static_dims(b.value.args[0]) or ()) == 2:
            rows, width = static_dims(b.value.args[0])
            plan.replicated.append({"layer": f"embedding [{rows}x{width}]",
                                    "reason": "a vocabulary-parallel lookup (masked gather and all-reduce) is not done"})
    return plan

