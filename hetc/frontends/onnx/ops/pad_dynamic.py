"""Pad and CenterCropPad with pads, axes or the target shape given at run time.

The widths decide the output shape, so each axis becomes a gather: output position ``o`` reads
input position ``o - before`` (mapped by the mode: ``constant`` masks what falls outside with the
pad value, ``edge`` clamps, ``reflect`` folds with period ``2 (n - 1)``, ``wrap`` takes it modulo
``n``), the output length ``n + before + after`` being a fresh symbolic dim. Negative widths crop
the same way. Every axis is gathered, since which ones the widths leave unchanged is data.
"""

from __future__ import annotations

import numpy as np
from tvm import relax, tirx

from .. import runtime_values as rv
from ..shapes import dims, static_dims


def _i64(value) -> relax.Expr:
    return relax.const(np.asarray(value, np.int64), "int64")


def gather_pad_axis(bb, x: relax.Expr, axis: int, before, out_len, mode: str,
                    value: relax.Expr | None) -> relax.Expr:
    """``x`` padded (or cropped) along ``axis`` to ``out_len``, input position 0 at ``before``
    (both PrimExprs known at run time)."""
    n = dims(x)[axis]  # static: the axes before it may already have run-time lengths
    if not isinstance(n, int):
        raise ValueError(f"axis {axis} needs a static length, got {n}")
    rank = x.ty.ndim
    pos = bb.normalize(relax.op.subtract(relax.op.arange(0, out_len, 1, "int64"),
                                         relax.op.shape_to_tensor(relax.ShapeExpr([before]))))
    if mode == "constant" or n == 0:
        src = relax.op.minimum(relax.op.maximum(pos, _i64(0)), _i64(max(n - 1, 0)))
    elif mode == "edge":
        src = relax.op.minimum(relax.op.maximum(pos, _i64(0)), _i64(n - 1))
    elif mode == "wrap":
        src = relax.op.floor_mod(pos, _i64(n))
    elif n == 1:  # reflect on one element
        src = relax.op.multiply(pos, _i64(0))
    else:  # reflect
        period = 2 * (n - 1)
        folded = bb.normalize(relax.op.floor_mod(pos, _i64(period)))
        src = relax.op.where(relax.op.less(folded, _i64(n)), folded, relax.op.subtract(_i64(period), folded))
    if n == 0:  # nothing to read: all padding
        full = list(dims(x))
        full[axis] = out_len
        return relax.op.broadcast_to(value, relax.ShapeExpr(full))
    y = bb.normalize(relax.op.take(x, bb.normalize(src), axis=axis))
    if mode != "constant":
        return y
    inside = relax.op.logical_and(relax.op.greater_equal(pos, _i64(0)), relax.op.less(pos, _i64(n)))
    inside = bb.normalize(relax.op.reshape(inside, relax.ShapeExpr([out_len] + [1] * (rank - axis - 1))))
    return relax.op.where(inside, y, value)


def pad_runtime(ctx, x: relax.Expr, pads: relax.Expr, axes, mode: str,
                value: relax.Expr | None) -> relax.Expr:
    """Pad with a run-time ``pads`` vector (``[begin..., end...]`` over ``axes``: a list of ints,
    or a run-time tensor)."""
    bb = ctx.bb
    rank = x.ty.ndim
    pads = bb.normalize(relax.op.astype(pads, "int64")) if str(pads.ty.dtype) != "int64" else pads
    count = static_dims(pads)[0] // 2
    if isinstance(axes, list):
        which = np.zeros((count, rank), np.int64)
        which[np.arange(count), axes] = 1
        which = _i64(which)
    else:  # run-time axes: a one-hot [count, rank] of the (wrapped) axes
        axes = bb.normalize(relax.op.astype(relax.op.reshape(axes, [count, 1]), "int64"))
        axes = relax.op.where(relax.op.less(axes, _i64(0)), relax.op.add(axes, _i64(rank)), axes)
        which = relax.op.astype(relax.op.equal(axes, _i64(np.arange(rank).reshape(1, rank))), "int64")
    which = bb.normalize(which)
    halves = bb.normalize(relax.op.reshape(pads, [2, count, 1]))
    widths = bb.normalize(relax.op.sum(relax.op.multiply(halves, which), axis=1))  # [2, rank]
    values = rv.shape_vars(bb, bb.normalize(relax.op.reshape(widths, [2 * rank])), "pad")
    shape = static_dims(x)
    for axis in range(rank):
        before, after = values[axis], values[rank + axis]
        x = bb.normalize(gather_pad_axis(bb, x, axis, before, shape[axis] + before + after, mode, value))
    return x


def center_crop_pad_runtime(ctx, x: relax.Expr, target: relax.Expr, axes: list[int]) -> relax.Expr:
    """CenterCropPad to a run-time ``target`` shape over ``axes``: a centred crop or zero pad
    (the odd element at the end), one gather per axis."""
    bb = ctx.bb
    sizes = rv.shape_vars(bb, target, "crop")
    shape = static_dims(x)
    zero = relax.const(np.zeros((), str(x.ty.dtype)), str(x.ty.dtype))
    for axis, size in zip(axes, sizes):
        before = tirx.truncdiv(size - shape[axis], 2)
        x = bb.normalize(gather_pad_axis(bb, x, axis, before, size, "constant", zero))
    return x
