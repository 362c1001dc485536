"""Reduce* with ``axes`` given at run time (ReduceSum from opset 13, the others from 18).

TVM's converters need constant axes; those nodes are left to them (``NotImplemented``). With
run-time axes the set of reduced axes, and so the output shape, is data: for every axis ``i``
of the (static-rank) input the converter computes the reduction along ``i`` and keeps either
it or the unreduced tensor, by slicing ``concat([reduced, x], i)`` at run time
(``dynamic_strided_slice``) to ``[0, 1)`` or ``[1, n + 1)``; the result gets fresh symbolic
dims (``runtime_values.fit``). The composite reductions (L1, L2, LogSum, LogSumExp, SumSquare)
are built from sum/max the way TVM builds them for constant axes. ``keepdims=0`` drops the
reduced axes with a reshape to a shape gathered at run time (the output rank is the input rank
minus the number of axes, which must not repeat).
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from .. import runtime_values as rv
from ..registry import Attrs, ConvertContext, converter
from ..shapes import dims


def _i64(values) -> relax.Expr:
    return relax.const(np.asarray(values, np.int64), "int64")


def _axis_flags(bb, axes: relax.Expr, rank: int) -> relax.Expr:
    """A bool vector [rank]: whether each input axis is in ``axes`` (negative axes wrap)."""
    axes = bb.normalize(relax.op.astype(axes, "int64")) if str(axes.ty.dtype) != "int64" else axes
    axes = bb.normalize(relax.op.reshape(axes, [-1, 1]))
    axes = bb.normalize(relax.op.where(relax.op.less(axes, _i64(0)), relax.op.add(axes, _i64(rank)), axes))
    hits = bb.normalize(relax.op.equal(axes, _i64(np.arange(rank).reshape(1, rank))))
    return bb.normalize(relax.op.greater(relax.op.max(relax.op.astype(hits, "int32"), axis=0),
                                         relax.const(0, "int32")))


def _reduce_flagged(bb, x: relax.Expr, flags: relax.Expr, op) -> relax.Expr:
    """``op`` (keepdims) along every axis whose flag is set at run time; other axes untouched."""
    rank = x.ty.ndim
    # Empty axes first, while the shape is still static: a reduction over an axis whose run-time
    # length is 0 never runs its initialisation (TIR initialises at the first iteration).
    for i in sorted(range(rank), key=lambda a: dims(x)[a] != 0):
        reduced = bb.normalize(op(x, [i], keepdims=True))
        both = bb.normalize(relax.op.concat([reduced, x], axis=i))
        flag = bb.normalize(relax.op.take(flags, relax.const(i, "int64"), axis=0))
        this = relax.const(np.arange(rank) == i, "bool")
        both_dims = bb.normalize(relax.op.shape_to_tensor(relax.op.shape_of(both)))
        begin = relax.op.where(relax.op.logical_and(this, relax.op.logical_not(flag)), _i64(1), _i64(0))
        end = relax.op.where(relax.op.logical_and(this, flag), _i64(1), both_dims)
        sliced = relax.op.dynamic_strided_slice(both, bb.normalize(begin), bb.normalize(end),
                                                _i64(np.ones(rank)))
        x = rv.fit(bb, sliced, "reduced")
    return x


def _drop_reduced(bb, y: relax.Expr, flags: relax.Expr, count: int) -> relax.Expr:
    """``y`` (keepdims form) without its flagged axes: ``count`` of them, flagged at run time."""
    rank = y.ty.ndim
    order = bb.normalize(relax.op.argsort(
        relax.op.add(relax.op.multiply(relax.op.astype(flags, "int64"), _i64(rank)), _i64(np.arange(rank)))))
    kept = bb.normalize(relax.op.strided_slice(order, [0], [0], [rank - count]))
    sizes = bb.normalize(relax.op.take(relax.op.shape_to_tensor(relax.op.shape_of(y)), kept, axis=0))
    if rank - count == 0:
        return relax.op.reshape(y, [])
    return relax.op.reshape(y, relax.ShapeExpr(rv.shape_vars(bb, sizes, "kept")))


def _log_sum_exp(x: relax.Expr, axes, keepdims: bool) -> relax.Expr:
    """log(sum(exp(x))) shifted by the max, as TVM computes it for constant axes. Along one axis
    at a time it composes: LSE over {i, j} is LSE along j of LSE along i."""
    top = relax.op.max(x, axes, keepdims=True)
    out = relax.op.add(relax.op.log(relax.op.sum(relax.op.exp(relax.op.subtract(x, top)), axes, keepdims=True)),
                       top)
    return out if keepdims else relax.op.squeeze(out, axes)


_PRIMITIVE = {"sum": relax.op.sum, "max": relax.op.max, "min": relax.op.min, "prod": relax.op.prod,
              "mean": relax.op.mean, "log_sum_exp": _log_sum_exp}


def _compose(kind: str, bb, x: relax.Expr, reduce) -> relax.Expr:
    """Reduce ``kind`` of ``x`` (keepdims form) from ``reduce(primitive name, tensor)``."""
    if kind in _PRIMITIVE:
        return reduce(kind, x)
    if kind == "l1":
        return reduce("sum", relax.op.abs(x))
    if kind == "sum_square":
        return reduce("sum", relax.op.multiply(x, x))
    if kind == "l2":
        return relax.op.sqrt(reduce("sum", relax.op.multiply(x, x)))
    if kind == "log_sum":
        return relax.op.log(reduce("sum", x))
    return reduce("log_sum_exp", x)


def _reduce(kind: str, ctx: ConvertContext, inputs: list, attrs: Attrs):
    axes = inputs[1] if len(inputs) > 1 else None
    if not rv.is_runtime(axes):
        return NotImplemented  # constant or absent axes: TVM's converter
    bb = ctx.bb
    x = inputs[0]
    keepdims = bool(attrs.get("keepdims", 1))
    noop = bool(attrs.get("noop_with_empty_axes", 0))
    rank = x.ty.ndim
    count = dims(axes)[0] if axes.ty.ndim == 1 else 1
    if not isinstance(count, int):
        raise ctx.error("the number of axes must be known at compile time")
    if count == 0:
        if noop:
            return x
        y = bb.normalize(_compose(kind, bb, x, lambda op, t: _PRIMITIVE[op](t, None, keepdims=True)))
        return y if keepdims else relax.op.reshape(y, [])
    if count > rank:
        raise ctx.error(f"{count} axes for an input of rank {rank}")
    flags = _axis_flags(bb, axes, rank)
    y = bb.normalize(_compose(kind, bb, x, lambda op, t: _reduce_flagged(bb, bb.normalize(t), flags,
                                                                          _PRIMITIVE[op])))
    return y if keepdims else _drop_reduced(bb, y, flags, count)


def _register(op_type: str, kind: str, since: int) -> None:
    converter(op_type, since=since)(lambda ctx, inputs, attrs: _reduce(kind, ctx, inputs, attrs))


for _op, _kind in [("ReduceMax", "max"), ("ReduceMin", "min"), ("ReduceMean", "mean"), ("ReduceProd", "prod"),
                   ("ReduceL1", "l1"), ("ReduceL2", "l2"), ("ReduceLogSum", "log_sum"),
                   ("ReduceLogSumExp", "log_sum_exp"), ("ReduceSumSquare", "sum_square")]:
    _register(_op, _kind, 18)
_register("ReduceSum", "sum", 13)
