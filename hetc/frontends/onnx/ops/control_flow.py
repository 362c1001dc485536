"""Ops with subgraphs, as Relax control flow: If, Loop, Scan, SequenceMap.

The importer converts their bodies with ``convert_subgraph`` (its own node loop, hetc's
converters) and binds their outputs one by one (``_construct_one``). One converter per op
covers every opset (If and Loop 1-23, Scan 9-23; later versions only add types).

- ``If``: each branch becomes a function of the outer-scope values it uses, called under a
  ``relax.If``, so only the taken branch runs (TVM's importer computes both). Functions, not
  branch-local bindings: TVM 0.27's ``StaticPlanBlockMemory`` lets one branch use storage only
  the other allocates (the VM crashes). A condition known at compile time converts one branch.
- ``Loop`` and ``Scan``: with a trip count known at compile time, at most ``UNROLL``, and a
  condition that cannot end the loop early, the body is converted once per iteration, inline.
  Otherwise one iteration becomes a function (state, trip count, outer values -> next state) and
  the loop a recursive one (Relax has no loop): ``if cond and i < trip and budget > 0: return
  self(step(state), budget - 1)``. The VM recurses on the C stack (about 3000 calls deep), so
  there are three levels, each running the one below with a budget of ``BUDGET``: ``BUDGET**2``
  iterations per call of the top one. A loop-carried dim that changes between iterations is a
  parameter's own symbolic dim; scan outputs are carried flat, concatenated, and reshaped at the
  end to ``[iterations, *element shape]``. Loop-carried sequences (Relax tuples) need the
  unrolled form. ``to_relax`` puts these functions' bindings in dataflow blocks (fusion).
- ``Scan``: a Loop over the scan axis, each scan input's slice taken in the body; opset 8's batch
  axis (static) is looped over at compile time, its ``sequence_lens`` is not supported.
- ``SequenceMap``: sequences are Relax tuples of known length; the body is converted per element.
"""

from __future__ import annotations

import numpy as np
import onnx
import tvm
import tvm_ffi
from tvm import relax, tirx

from .. import runtime_values, symbolic
from ..registry import Attrs, ConvertContext, converter
from ..shapes import dims as _dims

UNROLL = 16  # most iterations converted inline
BUDGET = 128  # iterations per call of the loop function below (recursion depth per level)
_LEVELS = 3
_INT64_MAX = 2**63 - 1


def _i64(value) -> relax.Expr:
    return relax.const(np.int64(value), "int64")


def _scalar(bb: relax.BlockBuilder, x: relax.Expr, dtype: str) -> relax.Expr:
    """A one-element tensor as a scalar of ``dtype`` (a constant stays one)."""
    value = _constant(x)
    if value is not None:
        return relax.const(value.reshape(()).astype(dtype), dtype)
    x = bb.normalize(x)
    if x.ty.ndim != 0:
        x = bb.normalize(relax.op.reshape(x, []))
    return x if str(x.ty.dtype) == dtype else bb.normalize(relax.op.astype(x, dtype))


def _as_declared(bb: relax.BlockBuilder, x: relax.Expr, value_info: onnx.ValueInfoProto) -> relax.Expr:
    """A scalar reshaped to [1] where the body declares its input (iteration number, condition) so."""
    t = value_info.type.tensor_type
    if t.HasField("shape") and len(t.shape.dim) == 1:
        value = _constant(x)  # an unrolled iteration's number stays a constant (its uses fold)
        return relax.const(value.reshape(1)) if value is not None else bb.normalize(relax.op.reshape(x, [1]))
    return x


def _constant(expr: relax.Expr | None) -> np.ndarray | None:
    return expr.value.numpy() if isinstance(expr, tvm.ir.GenericConst) else None


def _subgraphs(node: onnx.NodeProto):
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def outer_names(graph: onnx.GraphProto) -> list[str]:
    """Names ``graph`` (or a graph nested in it) uses but does not define: outer-scope values."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {name for node in graph.node for name in node.output}
    used = []
    for node in graph.node:
        used += node.input
        for sub in _subgraphs(node):
            used += outer_names(sub)
    used += [v.name for v in graph.output]
    return list(dict.fromkeys(n for n in used if n and n not in defined))


def _has_if(graph: onnx.GraphProto) -> bool:
    return any(node.op_type == "If" or any(_has_if(g) for g in _subgraphs(node)) for node in graph.node)


def _scoped(bb: relax.BlockBuilder, build) -> relax.SeqExpr:
    """``build()``'s bindings and result as the body of a branch."""
    bb.begin_scope()
    bb._begin_binding_block()
    try:
        result = build()
    finally:
        block = bb._end_block()
        bb.end_scope()
    return relax.SeqExpr([block], result)


def _function(bb: relax.BlockBuilder, name: str, params: list, build, ret=None) -> tvm.ir.GlobalVar:
    """Add the function ``params -> build()`` (its bindings) to the module. With ``ret`` its
    GlobalVar exists (typed) while ``build`` runs, for a recursive call."""
    gv = bb.add_func(relax.Function.create_empty(params, ret), name) if ret is not None else None
    bb.begin_scope(params)
    bb._begin_binding_block()
    try:
        result = build(gv)
    finally:
        block = bb._end_block()
    try:
        body = bb.normalize(relax.SeqExpr([block], result))
    finally:
        bb.end_scope()
    func = relax.Function(params, body, ret, is_pure=True)
    if gv is None:
        return bb.add_func(func, name)
    bb.update_func(gv, func)
    return gv


def _item(bb: relax.BlockBuilder, seq: relax.Expr, k: int) -> relax.Expr:
    return seq.fields[k] if isinstance(seq, relax.Tuple) else bb.emit(relax.TupleGetItem(seq, k))


def _stack(bb: relax.BlockBuilder, elems: list) -> relax.Expr:
    return bb.normalize(relax.op.concat([relax.op.expand_dims(e, [0]) for e in elems], axis=0))


# --- If ---------------------------------------------------------------------------------------

@converter("If", since=1)
def if_(ctx: ConvertContext, inputs: list, attrs: Attrs):
    bb, importer = ctx.bb, ctx.importer
    branches = attrs.get("then_branch"), attrs.get("else_branch")
    value = _constant(inputs[0])
    if value is not None:  # only the taken branch is converted
        return importer.convert_subgraph(branches[0] if bool(value.reshape(-1)[0]) else branches[1], {})
    if bb.current_block_is_dataflow():
        raise ctx.error("an If inside a dataflow block is not supported")
    cond = _scalar(bb, inputs[0], "bool")
    for branch in branches:
        if len(branch.output) != ctx.num_outputs:
            raise ctx.error(f"branch '{branch.name}' has {len(branch.output)} output(s), the node "
                            f"{ctx.num_outputs}")
    calls = [_subgraph_function(ctx, branch, f"{_name(ctx, 'if')}_{tag}")
             for branch, tag in zip(branches, ("then", "else"))]
    then, other = (_scoped(bb, lambda c=c: bb.emit(c)) for c in calls)
    out = bb.emit(relax.If(cond, then, other))
    return [bb.emit(relax.TupleGetItem(out, k)) for k in range(ctx.num_outputs)]


def _subgraph_function(ctx: ConvertContext, graph: onnx.GraphProto, name: str) -> relax.Call:
    """``graph`` as a function of the outer-scope values it uses, and the call of it. An If's
    branches are functions: TVM 0.27's ``StaticPlanBlockMemory`` lets one branch use storage
    that only the other allocates (a crash in the VM)."""
    bb = ctx.bb
    names = outer_names(graph)
    outer = _outer_values(ctx, names)
    dims = _Dims()
    params = [relax.Var(f"outer{k}", dims.type(e.ty)) for k, e in enumerate(outer) if _passed(e)]

    def build(_):
        it = iter(params)
        values = {n: _inside(bb, next(it)) if _passed(e) else e for n, e in zip(names, outer)}
        return relax.Tuple(ctx.importer.convert_subgraph(graph, values, inherit=False))

    return relax.Call(_function(bb, name, params, build), [e for e in outer if _passed(e)])


def _name(ctx: ConvertContext, default: str) -> str:
    """A function name from the node's name."""
    name = "".join(ch if ch.isalnum() else "_" for ch in ctx.node.strip("<>"))
    return default if ctx.node == "<unnamed>" or not name else name


# --- loops ------------------------------------------------------------------------------------

VARYING = "loop_state_dim"  # the name of a parameter's dim that changes between iterations


class _Dims:
    """One function's parameter types: the caller's dims mapped to the function's own symbolic
    vars (a caller var to the same function var, equal caller expressions to one var of their
    own, a dim that changes between iterations to a fresh one)."""

    def __init__(self) -> None:
        self.vars: dict = {}  # caller var -> function var
        self.exprs: list = []  # (caller expression, function var)
        self.caller: dict = {}  # function var -> caller dim

    def dim(self, d, fresh: bool = False):
        if isinstance(d, tirx.IntImm) and not fresh:
            return d
        if isinstance(d, tirx.Var) and not fresh:
            if d not in self.vars:
                self.vars[d] = tirx.Var(d.name, "int64")
                self.caller[self.vars[d]] = d
                symbolic.declare_like(self.vars[d], d)  # ``seq >= 1`` holds inside too
            return self.vars[d]
        if fresh:
            return tirx.Var(VARYING, "int64")
        # ``k + k_1`` for the boxes and ``k + k_1`` for their scores stay one dim inside (else
        # adding them infers no shape: torchvision's batched NMS)
        for expr, var in self.exprs:
            if tvm_ffi.structural_equal(expr, d):
                return var
        var = tirx.Var("loop_dim", "int64")
        self.exprs.append((d, var))
        self.caller[var] = d
        symbolic.declare_like(var, d)
        return var

    def type(self, ty, fresh_axes=()):
        if isinstance(ty, relax.TensorType):
            if ty.shape is None or not hasattr(ty.shape, "values"):
                return relax.TensorType(ndim=ty.ndim, dtype=ty.dtype)
            return relax.TensorType([self.dim(d, i in fresh_axes) for i, d in enumerate(ty.shape.values)],
                                    ty.dtype)
        if isinstance(ty, relax.ShapeType):
            if ty.values is None:
                return relax.ShapeType(ndim=ty.ndim)
            return relax.ShapeType([self.dim(d) for d in ty.values])
        if isinstance(ty, relax.TupleType):
            return relax.TupleType([self.type(f) for f in ty.fields])
        raise ValueError(f"an outer-scope value of type {ty} cannot be passed into a loop body")

    def to_caller(self, d):
        """A function dim as the caller's dim, or None where it has none (a dim of the body's own)."""
        if isinstance(d, tirx.IntImm):
            return d
        return self.caller.get(d) if isinstance(d, tirx.Var) else None


def _passed(expr: relax.Expr) -> bool:
    """A value the loop function takes as a parameter (constants are used as they are)."""
    if isinstance(expr, tvm.ir.GenericConst):
        return False
    if isinstance(expr, relax.ShapeExpr):
        return not all(isinstance(v, tirx.IntImm) for v in expr.values)
    return True


def _inside(bb: relax.BlockBuilder, param: relax.Var) -> relax.Expr:
    """How the body sees a parameter: a shape as a ShapeExpr of its dims, a sequence as a tuple."""
    ty = param.ty
    if isinstance(ty, relax.ShapeType) and ty.values is not None:
        return relax.ShapeExpr(ty.values)
    if isinstance(ty, relax.TupleType):
        return relax.Tuple([bb.emit(relax.TupleGetItem(param, k)) for k in range(len(ty.fields))])
    return param


class _Loop:
    """One Loop or Scan: ``step(i, cond, trip, carried, outer, inline)`` converts one iteration
    and returns (the condition for the next one or None, carried values, scan elements);
    ``outer`` are the outer-scope values the step uses (parameters of the loop function)."""

    def __init__(self, ctx: ConvertContext, step, carried: list, outer: list, trip: relax.Expr | None,
                 cond: relax.Expr | None) -> None:
        self.ctx, self.bb, self.step = ctx, ctx.bb, step
        self.carried, self.outer, self.trip, self.cond = carried, outer, trip, cond

    def unrolled(self, count: int) -> tuple[list, list]:
        carried, elems = self.carried, []
        for i in range(count):
            true = relax.const(True, "bool")
            _, carried, out = self.step(_i64(i), true, _i64(count), carried, self.outer, True)
            elems.append(out)
        return carried, [_stack(self.bb, [e[k] for e in elems]) for k in range(len(elems[0]))]

    # The recursive form. A function's parameters: the state (iteration, condition, carried
    # values, flat scan outputs, scan element shapes), the trip count, the budget, outer values.

    def _signature(self, fresh: list, elems: list | None):
        dims = _Dims()
        state = [relax.Var("iteration", relax.TensorType([], "int64")),
                 relax.Var("cond", relax.TensorType([], "bool"))]
        state += [relax.Var(f"state{k}", dims.type(c.ty, fresh[k])) for k, c in enumerate(self.carried)]
        for k, e in enumerate(elems or []):
            state.append(relax.Var(f"scan{k}", relax.TensorType([tirx.Var("scan_len", "int64")], e.ty.dtype)))
        for k, e in enumerate(elems or []):
            state.append(relax.Var(f"scan{k}_shape", relax.ShapeType(ndim=e.ty.ndim)))
        trip = relax.Var("trip", relax.TensorType([], "int64"))
        budget = relax.Var("budget", relax.TensorType([], "int64"))
        outer = [relax.Var(f"outer{k}", dims.type(e.ty)) for k, e in enumerate(self.outer) if _passed(e)]
        return dims, state, trip, budget, outer

    def _step_in(self, state, trip, outer_params):
        params = iter(outer_params)
        outer = [_inside(self.bb, next(params)) if _passed(e) else e for e in self.outer]
        n = len(self.carried)
        importer = self.ctx.importer
        saved = importer.varying_dims
        # the parameters' own dims (a dim that changes between iterations): the importer does not
        # fix them to the sizes ONNX inferred from the first iteration
        importer.varying_dims = saved | {d for p in state[2:2 + n] if isinstance(p.ty, relax.TensorType)
                                         and hasattr(p.ty.shape, "values") for d in p.ty.shape.values
                                         if isinstance(d, tirx.Var) and d.name == VARYING}
        try:
            return self.step(state[0], state[1], trip, state[2:2 + n], outer, False)
        finally:
            importer.varying_dims = saved

    def _probe(self, fresh: list):
        """Convert one iteration to learn the body's output types; its bindings are dropped."""
        dims, state, trip, budget, outer = self._signature(fresh, None)
        self.bb.begin_scope([*state, trip, budget, *outer])
        self.bb._begin_binding_block()
        try:
            _, carried, elems = self._step_in(state, trip, outer)
            carried, elems = [self.bb.normalize(c) for c in carried], [self.bb.normalize(e) for e in elems]
        finally:
            self.bb._end_block()
            self.bb.end_scope()
        changed = []
        for k, (param, out) in enumerate(zip(state[2:], carried)):
            p, o = param.ty, out.ty
            if not isinstance(o, relax.TensorType) or str(o.dtype) != str(p.dtype) or o.ndim != p.ndim:
                raise self.ctx.error(f"loop-carried value {k} changes type from {p} to {o} in the body")
            if hasattr(p.shape, "values") and hasattr(o.shape, "values"):  # both shapes known
                changed.append({a for a, (x, y) in enumerate(zip(p.shape.values, o.shape.values))
                                if not runtime_values.same_dim(_int(x), _int(y))})
            else:
                changed.append(set(range(p.ndim)))
        for k, e in enumerate(elems):
            if not isinstance(e.ty, relax.TensorType) or e.ty.ndim < 0:
                raise self.ctx.error(f"scan output {k} is not a tensor of known rank")
        return dims, changed, elems

    def recursive(self) -> tuple[list, list]:
        bb = self.bb
        for k, c in enumerate(self.carried):
            if not isinstance(c.ty, relax.TensorType):
                raise self.ctx.error(f"loop-carried value {k} is not a tensor (a sequence?): that needs a "
                                     f"trip count known at compile time, at most {UNROLL}, and no early exit")
        self.carried = [runtime_values.fit(bb, c, "loop_state") if c.ty.ndim >= 0 else c
                        for c in self.carried]
        fresh = [set() for _ in self.carried]
        for _ in range(3):  # a dim that changes is made the parameter's own; its change may change others
            dims, changed, elems = self._probe(fresh)
            grown = [c - f for c, f in zip(changed, fresh)]
            if not any(grown):
                break
            fresh = [f | g for f, g in zip(fresh, grown)]
        varying = [bool(c) for c in changed]
        name = _name(self.ctx, "loop")
        callee = self._step_function(f"{name}_body", fresh, elems)
        for level in range(_LEVELS):
            callee = self._level(f"{name}_loop{level}", fresh, varying, elems, callee, level)
        state = [_i64(0), self.cond if self.cond is not None else relax.const(True, "bool"), *self.carried]
        state += [relax.op.zeros(relax.ShapeExpr([0]), e.ty.dtype) for e in elems]
        state += [relax.ShapeExpr([0] * e.ty.ndim) for e in elems]
        trip = self.trip if self.trip is not None else _i64(_INT64_MAX)
        passed = [e for e in self.outer if _passed(e)]
        result = bb.emit(relax.Call(callee, [*state, trip, _i64(_INT64_MAX), *passed]))
        items = [bb.emit(relax.TupleGetItem(result, k)) for k in range(len(state))]
        n, m = len(self.carried), len(elems)
        carried = [runtime_values.fit(bb, c, "loop_state") for c in items[2:2 + n]]
        if not elems:
            return carried, []
        count = runtime_values.scalar_var(bb, items[0], "loop_count")
        scans = []
        for e, flat, shape in zip(elems, items[2 + n:2 + n + m], items[2 + n + m:]):
            known = [dims.to_caller(d) for d in e.ty.shape.values] if hasattr(e.ty.shape, "values") else None
            if known is None or any(d is None for d in known):  # the body's own dims: as the run found them
                known = runtime_values.fresh("scan_dim", e.ty.ndim)
                bb.match_cast(shape, relax.ShapeType(known))
            flat = runtime_values.fit(bb, flat, "scan_size")
            scans.append(bb.normalize(relax.op.reshape(flat, relax.ShapeExpr([count, *known]))))
        return carried, scans

    def _step_function(self, name: str, fresh: list, elems: list) -> tvm.ir.GlobalVar:
        """One iteration as a function of the state, the trip count and the outer values, giving
        the next state: the body's bindings are a function's own (top-level) blocks, where hetc's
        passes find and fuse them, not nested in a branch."""
        bb = self.bb
        _, state, trip, _, outer = self._signature(fresh, elems)
        n = len(self.carried)

        def build(_):
            cond, carried, now = self._step_in(state, trip, outer)
            nxt = [bb.normalize(relax.op.add(state[0], _i64(1))),
                   _scalar(bb, cond, "bool") if self.cond is not None else state[1], *carried]
            for flat, e in zip(state[2 + n:2 + n + len(now)], now):
                nxt.append(bb.normalize(relax.op.concat([flat, relax.op.reshape(e, [-1])], axis=0)))
            nxt += [bb.normalize(relax.op.shape_of(e)) for e in now]
            return relax.Tuple(nxt)

        return _function(bb, name, [*state, trip, *outer], build)

    def _level(self, name: str, fresh: list, varying: list, elems: list, callee,
               level: int) -> tvm.ir.GlobalVar:
        """``if go: return self(callee(state), budget - 1) else: return state`` where ``callee`` is
        the step function (level 0) or the level below, run with a budget of ``BUDGET``."""
        bb = self.bb
        _, state, trip, budget, outer = self._signature(fresh, elems)
        n = len(self.carried)
        ret = [p.ty if not varying[k] else relax.TensorType(ndim=p.ty.ndim, dtype=p.ty.dtype)
               for k, p in enumerate(state[2:2 + n])]
        ret += [relax.TensorType(ndim=p.ty.ndim, dtype=p.ty.dtype) if isinstance(p.ty, relax.TensorType)
                else p.ty for p in state[2 + n:]]  # the flat scan outputs grow
        ret = relax.TupleType([state[0].ty, state[1].ty, *ret])

        def build(gv):
            def advance():
                budget_below = [] if level == 0 else [_i64(BUDGET)]
                r = bb.emit(relax.Call(callee, [*state, trip, *budget_below, *outer]))
                nxt = [bb.emit(relax.TupleGetItem(r, k)) for k in range(len(state))]
                rest = bb.normalize(relax.op.subtract(budget, _i64(1)))
                return bb.emit(relax.Call(gv, [*nxt, trip, rest, *outer]))

            go = relax.op.logical_and(state[1], relax.op.less(state[0], trip))
            go = bb.emit(relax.op.logical_and(go, relax.op.greater(budget, _i64(0))))
            return bb.emit(relax.If(go, _scoped(bb, advance), relax.SeqExpr([], relax.Tuple(state))))

        return _function(bb, name, [*state, trip, budget, *outer], build, ret)


def _outer_values(ctx: ConvertContext, names: list[str]) -> list:
    missing = [name for name in names if name not in ctx.importer._nodes]
    if missing:
        raise ctx.error(f"the body uses {', '.join(missing)}, defined nowhere")
    return [ctx.importer._nodes[name] for name in names]


def _int(d):
    return int(d) if isinstance(d, tirx.IntImm) else d


def _unrollable(ctx: ConvertContext, count: int | None, body: onnx.GraphProto) -> bool:
    """Convert the loop inline: a small count known at compile time, and no If that would land
    in a dataflow block (TVM's importer opens one for a graph without a top-level If)."""
    in_dataflow = ctx.bb.current_block_is_dataflow()
    return count is not None and 0 < count <= UNROLL and not (in_dataflow and _has_if(body))


# --- Loop -------------------------------------------------------------------------------------

def _keeps_cond(ctx: ConvertContext, body: onnx.GraphProto) -> bool:
    """The body's condition output is its condition input (or a constant true, the body's or
    the enclosing graph's, as torch's exporter writes it): no early exit."""
    cond_in, cond_out = body.input[1].name, body.output[0].name
    for node in body.node:
        if cond_out in node.output:
            if node.op_type == "Identity" and node.input[0] == cond_in:
                return True
            if node.op_type == "Identity":
                value = _constant(ctx.importer._nodes.get(node.input[0]))
                return value is not None and value.size == 1 and bool(value.reshape(-1)[0])
            if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
                value = onnx.numpy_helper.to_array(node.attribute[0].t)
                return value.size == 1 and bool(value.reshape(-1)[0])
            return False
    return cond_out == cond_in


@converter("Loop", since=1)
def loop(ctx: ConvertContext, inputs: list, attrs: Attrs):
    bb, importer = ctx.bb, ctx.importer
    body = attrs.get("body")
    trip = inputs[0] if inputs else None
    cond = inputs[1] if len(inputs) > 1 else None
    carried = [x for x in inputs[2:]]
    n = len(carried)
    if len(body.input) != n + 2 or len(body.output) < n + 1:
        raise ctx.error(f"the body takes {len(body.input)} input(s) and gives {len(body.output)} output(s) "
                        f"for {n} loop-carried value(s): it must take {n + 2} and give at least {n + 1}")
    if any(c is None for c in carried):
        raise ctx.error("a missing loop-carried input is not supported")
    trip = _scalar(bb, trip, "int64") if trip is not None else None
    cond = _scalar(bb, cond, "bool") if cond is not None else None
    names = outer_names(body)
    outer = _outer_values(ctx, names)
    inputs_info = list(body.input)

    def step(i, c, _trip, values, outer_values, inline):
        bound = {inputs_info[0].name: _as_declared(bb, i, inputs_info[0]),
                 inputs_info[1].name: _as_declared(bb, c, inputs_info[1])}
        bound.update((v.name, x) for v, x in zip(inputs_info[2:], values))
        if not inline:
            bound.update(zip(names, outer_values))
        outs = importer.convert_subgraph(body, bound, inherit=inline)
        return outs[0], outs[1:1 + n], outs[1 + n:]

    count_value, cond_value = _constant(trip), _constant(cond)
    count = int(count_value) if count_value is not None else None
    # one iteration (a trip count of 1 and a true condition) needs no exit test
    endless = cond is None or (cond_value is not None and bool(cond_value) and (count == 1 or _keeps_cond(ctx, body)))
    if cond_value is not None and not bool(cond_value):
        count = 0  # the body never runs
    looped = _Loop(ctx, step, carried, outer, trip, cond)
    if count == 0 and len(body.output) == n + 1:
        return carried
    if endless and _unrollable(ctx, count, body):
        final, scans = looped.unrolled(count)
    else:
        final, scans = looped.recursive()
    return [*final, *scans]


# --- Scan -------------------------------------------------------------------------------------

def _scan(ctx: ConvertContext, body: onnx.GraphProto, states: list, xs: list, in_axes: list,
          in_reverse: list, out_axes: list, out_reverse: list) -> list:
    """Scan (opset 9 semantics) of ``xs`` along ``in_axes``."""
    bb, importer = ctx.bb, ctx.importer
    n, m = len(states), len(xs)
    if m < 1:
        raise ctx.error("num_scan_inputs is 0: a Scan needs at least one scan input")
    lengths = [_dims(x)[a] for x, a in zip(xs, in_axes)]
    length = lengths[0]
    if len({d for d in lengths if isinstance(d, int)}) > 1:
        raise ctx.error(f"scan inputs have different lengths {lengths} along their scan axes")
    names = outer_names(body)
    outer = [*xs, *_outer_values(ctx, names)]
    if isinstance(length, int):
        trip = _i64(length)
    else:
        trip = bb.normalize(relax.op.reshape(relax.op.shape_to_tensor(relax.ShapeExpr([length])), []))

    def step(i, _c, trip_now, values, outer_values, inline):
        bound = dict(zip([v.name for v in body.input[:n]], values))
        for v, x, axis, rev in zip(body.input[n:], outer_values[:m], in_axes, in_reverse):
            index = bb.normalize(relax.op.subtract(relax.op.subtract(trip_now, _i64(1)), i)) if rev else i
            bound[v.name] = bb.normalize(relax.op.take(x, index, axis=axis))
        if not inline:
            bound.update(zip(names, outer_values[m:]))
        outs = importer.convert_subgraph(body, bound, inherit=inline)
        return None, outs[:n], outs[n:]

    looped = _Loop(ctx, step, states, outer, trip, None)
    if _unrollable(ctx, length if isinstance(length, int) else None, body):
        final, scans = looped.unrolled(length)
    else:
        final, scans = looped.recursive()
    outs = []
    for y, axis, rev in zip(scans, out_axes, out_reverse):
        if rev:
            y = bb.normalize(relax.op.flip(y, axis=0))
        rank = y.ty.ndim
        axis = axis + rank if axis < 0 else axis
        if axis:
            order = list(range(1, rank))
            order.insert(axis, 0)
            y = bb.normalize(relax.op.permute_dims(y, order))
        outs.append(y)
    return [*final, *outs]


def _axes(ctx: ConvertContext, attrs: Attrs, name: str, count: int, ranks: list | None) -> list[int]:
    values = list(attrs.get(name, [0] * count))
    if len(values) != count:
        raise ctx.error(f"{name} has {len(values)} value(s) for {count} tensor(s)")
    if ranks is not None:
        for v, r in zip(values, ranks):
            if not -r <= v < r:
                raise ctx.error(f"{name} value {v} is out of range for rank {r}")
        values = [v % r for v, r in zip(values, ranks)]
    return values


def _directions(ctx: ConvertContext, attrs: Attrs, name: str, count: int) -> list[bool]:
    values = list(attrs.get(name, [0] * count))
    if len(values) != count or any(v not in (0, 1) for v in values):
        raise ctx.error(f"{name}={values} must be {count} value(s), each 0 or 1")
    return [bool(v) for v in values]


@converter("Scan", since=9)
def scan(ctx: ConvertContext, inputs: list, attrs: Attrs):
    body = attrs.get("body")
    m = int(attrs.get("num_scan_inputs"))
    n = len(inputs) - m
    k = len(body.output) - n
    if n < 0 or len(body.input) != len(inputs) or k < 0 or any(x is None for x in inputs):
        raise ctx.error(f"{len(inputs)} input(s) and num_scan_inputs={m} do not match the body's "
                        f"{len(body.input)} input(s) and {len(body.output)} output(s)")
    states, xs = inputs[:n], inputs[n:]
    in_axes = _axes(ctx, attrs, "scan_input_axes", m, [x.ty.ndim for x in xs])
    in_rev = _directions(ctx, attrs, "scan_input_directions", m)
    out_axes = _axes(ctx, attrs, "scan_output_axes", k, None)
    out_rev = _directions(ctx, attrs, "scan_output_directions", k)
    return _scan(ctx, body, states, xs, in_axes, in_rev, out_axes, out_rev)


@converter("Scan", since=8)
def scan8(ctx: ConvertContext, inputs: list, attrs: Attrs):
    """Opset 8: axis 0 of every input and output is a batch; each batch row is scanned on its own
    along axis 1."""
    bb = ctx.bb
    body = attrs.get("body")
    m = int(attrs.get("num_scan_inputs"))
    if inputs and inputs[0] is not None:
        raise ctx.error("input sequence_lens is not supported")
    inputs = inputs[1:]
    n = len(inputs) - m
    k = len(body.output) - n
    if n < 0 or len(body.input) != len(inputs) or k < 0 or any(x is None for x in inputs):
        raise ctx.error(f"{len(inputs)} input(s) and num_scan_inputs={m} do not match the body's "
                        f"{len(body.input)} input(s) and {len(body.output)} output(s)")
    directions = _directions(ctx, attrs, "directions", m)
    batch = _dims(inputs[0])[0]
    if not isinstance(batch, int):
        raise ctx.error(f"the batch dim must be known at compile time, got {batch}")
    rows = []
    for b in range(batch):
        row = [bb.normalize(relax.op.take(x, _i64(b), axis=0)) for x in inputs]
        rows.append(_scan(ctx, body, row[:n], row[n:], [0] * m, directions, [0] * k, [False] * k))
    return [_stack(bb, [r[j] for r in rows]) for j in range(n + k)]


# --- SequenceMap ------------------------------------------------------------------------------

@converter("SequenceMap", since=17)
def sequence_map(ctx: ConvertContext, inputs: list, attrs: Attrs):
    bb, importer = ctx.bb, ctx.importer
    body = attrs.get("body")
    if len(body.input) != len(inputs) or len(body.output) != ctx.num_outputs:
        raise ctx.error(f"the body takes {len(body.input)} input(s) and gives {len(body.output)}; the node "
                        f"has {len(inputs)} and {ctx.num_outputs}")
    if bb.current_block_is_dataflow() and _has_if(body):
        raise ctx.error("a body with an If is not supported here (the graph has no top-level If)")
    sequences = [isinstance(x.ty, relax.TupleType) for x in inputs]
    length = len(inputs[0].ty.fields) if sequences[0] else None
    if length is None or any(s and len(x.ty.fields) != length for s, x in zip(sequences, inputs)):
        raise ctx.error("input 0 must be a sequence, and every sequence input as long as it")
    results = []
    for k in range(length):
        bound = {v.name: _item(bb, x, k) if s else x for v, x, s in zip(body.input, inputs, sequences)}
        results.append(importer.convert_subgraph(body, bound))
    return [relax.Tuple([r[j] for r in results]) for j in range(ctx.num_outputs)]
