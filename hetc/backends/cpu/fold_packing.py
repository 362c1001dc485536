"""Weight packing at compile time with numpy, instead of a kernel build and run per weight.

The default schedules re-lay out constant weights (the contraction rule's column panels, the
int8 rule's ``[j / 16, .., k / 4, 16, 4]``, the sliding-window rule's channel panels);
``SplitLayoutRewritePreproc`` moves each layout change into a function of its own,
``call_tir(prepack, weight)``, for ``FoldConstant`` to evaluate. It builds every such function
with LLVM and runs its serial loop: 2.6 s of a 14 s BERT-base int8 compile on 2 Zen 4 cores
(84 weights, 4 distinct functions).

A prepack function is one copy block under its loop nest:

    for v0, .., vn in grid(extents):
        out[f(v0, .., vn)] = [cast](in[g(v0, .., vn)])

with ``f`` and ``g`` made of ``+ - * // %`` and constants. This pass evaluates ``f`` and ``g``
on numpy index grids and scatters the weight once, exactly what the loop stores. A call whose
function has any other shape (several blocks, a condition, arithmetic on the value), or whose
stores do not cover its output exactly once, is left to ``FoldConstant``, which runs after.
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from ...passes.pipeline import rewrite_functions

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
_BINARY = {tirx.Add: np.add, tirx.Sub: np.subtract, tirx.Mul: np.multiply,
           tirx.FloorDiv: np.floor_divide, tirx.FloorMod: np.mod}


class _Unsupported(Exception):
    pass


def _index(expr, grids: dict):
    """``expr`` (an index expression of the loop variables) on numpy grids."""
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, tirx.Var):
        for var, grid in grids.items():
            if var.same_as(expr):
                return grid
        raise _Unsupported(f"unknown variable {expr}")
    if isinstance(expr, tirx.Cast) and str(expr.dtype).startswith(("int", "uint")):
        return _index(expr.value, grids)
    op = _BINARY.get(type(expr))
    if op is None:
        raise _Unsupported(type(expr).__name__)
    return op(_index(expr.a, grids), _index(expr.b, grids))


def _copy_block(func: tirx.PrimFunc):
    """(loop vars, extents, store) of the function's single copy block, or raises."""
    node = func.body
    if isinstance(node, tvm.s_tir.SBlockRealize) and node.block.name_hint == "root":
        if node.block.alloc_buffers:
            raise _Unsupported("intermediate buffers")
        node = node.block.body
    loops = []
    while isinstance(node, tirx.For):
        if not (isinstance(node.min, tirx.IntImm) and int(node.min) == 0 and isinstance(node.extent, tirx.IntImm)):
            raise _Unsupported("loop bounds")
        loops.append((node.loop_var, int(node.extent)))
        node = node.body
    if not isinstance(node, tvm.s_tir.SBlockRealize) or not (isinstance(node.predicate, tirx.IntImm)
                                                              and int(node.predicate) == 1):
        raise _Unsupported("not one unconditional block")
    block = node.block
    if block.init is not None or not isinstance(block.body, tirx.BufferStore):
        raise _Unsupported("block body")
    # block vars bound to plain loop variables (what SplitLayoutRewritePreproc writes)
    binding = {}
    for iv, value in zip(block.iter_vars, node.iter_values):
        if not isinstance(value, tirx.Var):
            raise _Unsupported("block binding")
        binding[iv.var] = value
    return loops, binding, block.body


def plan(func: tirx.PrimFunc) -> tuple[int, np.ndarray, int, list[int], str]:
    """How ``func`` (a prepack function: one copy block) moves elements: (position of the
    parameter it reads, the source row of each output row, the rows' length (``_run_length``),
    output shape, output dtype). Raises ``_Unsupported`` for any other function."""
    loops, binding, store = _copy_block(func)
    params = list(func.params)  # TVM 0.27: the buffers themselves
    out_buffer = params[-1]
    if not store.buffer.same_as(out_buffer):
        raise _Unsupported("stores elsewhere")
    value = store.value
    if isinstance(value, tirx.Cast):
        value = value.value
    if not isinstance(value, tvm.ir.TensorLoad):
        raise _Unsupported("value is not a load")
    position = next((k for k, p in enumerate(params[:-1]) if p.same_as(value.source)), None)
    if position is None:
        raise _Unsupported("load from a non-parameter")
    extents = [e for _, e in loops]
    out_shape = [int(d) for d in out_buffer.shape]
    src_shape = [int(d) for d in value.source.shape]
    if math.prod(extents) != math.prod(out_shape):
        raise _Unsupported("stores do not cover the output once")
    axes = np.ix_(*[np.arange(e, dtype=np.int64) for e in extents]) if extents else []
    loop_grids = {var: grid for (var, _), grid in zip(loops, axes)}
    grids = {bv: loop_grids.get(lv) for bv, lv in binding.items()}
    if any(g is None for g in grids.values()):
        raise _Unsupported("block bound to something else")

    # flat indices in int32 where they fit: half the bytes through every pass below
    dtype = np.int32 if max(math.prod(src_shape), math.prod(out_shape)) < 2**31 else np.int64

    def flat(indices, shape):
        # each index on the open grids (broadcastable, mostly small), bounds checked there, then
        # the row-major sum accumulated in place in the one array of the weight's size (a sum
        # of broadcasts allocated a full-size array per term: 1.8 s of ResNet-50's compile)
        parts = [np.asarray(_index(i, grids), dtype=np.int64) for i in indices]
        if any(p.min() < 0 or p.max() >= d for p, d in zip(parts, shape)):
            raise _Unsupported("index out of bounds")
        strides = np.cumprod([1, *shape[:0:-1]])[::-1] if shape else []
        total = np.zeros(extents or [1], dtype)
        for part, stride in zip(parts, strides):
            total += (part * int(stride)).astype(dtype)
        return total.ravel()

    src, out = flat(value.indices, src_shape), flat(store.indices, out_shape)
    covered = np.zeros(out.size, bool)  # out has as many stores as the output has elements:
    covered[out] = True                  # all covered means each exactly once
    if not covered.all():
        raise _Unsupported("stores overlap")
    order = np.empty_like(src)  # the source element of each output element: one gather per weight
    order[out] = src
    run = _run_length(order)
    return position, order[::run] // run, run, out_shape, str(out_buffer.dtype)


# Longest run of consecutive elements a pack moves as one row (64 float32: four cache lines).
MAX_RUN = 64


def _run_length(order: np.ndarray) -> int:
    """The longest ``L`` (up to ``MAX_RUN``) such that ``order`` is runs of ``L`` consecutive
    source elements, each starting at a multiple of ``L``: a packed weight's column panels are
    runs of 16 or 8. Gathered as rows of ``L``, a 4096 x 4096 weight packed in 0.027 s, element
    by element in 0.105 s (2-core AMD EPYC, LLVM ``znver3``, AVX2); element by element, timm's
    mobilenetv5_300m_enc spent 5.5 s of its compile in these gathers."""
    if order.size < 2 or order[1] != order[0] + 1:  # (a conv's OHWI weight in panels of O: no runs)
        return 1
    breaks = np.flatnonzero(np.diff(order) != 1) + 1
    run = math.gcd(int(np.gcd.reduce(breaks)) if breaks.size else 0, order.size, MAX_RUN)
    while run > 1 and (order[::run] % run).any():
        run //= 2
    return max(run, 1)


def pack(moves: tuple, args: list[np.ndarray]) -> np.ndarray:
    """What a prepack function whose ``plan`` is ``moves`` writes to its output given ``args``."""
    position, rows, run, shape, dtype = moves
    flat = np.ascontiguousarray(args[position]).reshape(-1, run)
    return flat.take(rows, axis=0).astype(dtype, copy=False).reshape(shape)


@mutator
class _Packer(PyExprMutator):  # pylint: disable=abstract-method
    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.mod = mod
        self.count = 0
        self.plans: dict = {}  # global var -> plan, or None where the function is not a copy

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        if not (isinstance(call, relax.Call) and call.op.same_as(_CALL_TIR)):
            return call
        gv, args = call.args[0], call.args[1]
        func = self.mod[gv] if gv in self.mod.functions else None
        if not isinstance(func, tirx.PrimFunc) or not isinstance(args, relax.Tuple):
            return call
        values = []
        for arg in args.fields:
            if isinstance(arg, relax.Var):
                bound = self.lookup_binding(arg)
                arg = arg if bound is None else bound
            if not isinstance(arg, tvm.ir.GenericConst):
                return call
            values.append(arg.value.numpy())
        if gv not in self.plans:
            try:
                self.plans[gv] = plan(func)
            except _Unsupported:
                self.plans[gv] = None
        if self.plans[gv] is None or len(values) != len(func.params) - 1:
            return call
        packed = pack(self.plans[gv], values)
        out = call.ty
        if not isinstance(out, relax.TensorType) or list(packed.shape) != [int(d) for d in out.shape.values]:
            return call
        self.count += 1
        return relax.const(packed, str(out.dtype))


@tvm.transform.module_pass(opt_level=0, name="HetcFoldPackingNumpy")
def fold_packing_pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Prepack calls on constant weights evaluated with numpy (see the module docstring)."""
    return rewrite_functions(_Packer(mod), mod)
