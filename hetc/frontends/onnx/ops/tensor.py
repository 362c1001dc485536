"""Pad (opsets 2, 11, 13, 18, 19), OneHot (9, 11) and CenterCropPad (18).

TVM's Pad converter needs constant pads and a Python-float value, has no ``axes`` input and no
``wrap`` mode and does not crop for negative pads; its OneHot needs a constant depth and
ignores negative indices; it has no CenterCropPad. hetc's converters:

- Pad: negative pads crop first (``strided_slice``), then positive pads are applied axis by
  axis: ``constant`` concatenates blocks filled with ``constant_value`` (which may be a
  runtime input), ``edge``/``reflect``/``wrap`` gather along the axis with indices computed
  like ``numpy.pad`` (the ONNX reference), so pads longer than the axis reflect or wrap again.
- OneHot: ``indices`` (any numeric type, negative ones wrapped from opset 11, out-of-range ones
  all off) compared with ``arange(depth)`` on the new ``axis``; ``values`` may be a runtime
  input.
- CenterCropPad: a centred crop (``strided_slice``) or zero pad per axis of ``axes``.

``pads``, ``axes``, ``depth`` and ``shape`` decide the output shape. Constants (initializers,
folded values, inputs frozen with ``constant_inputs=``) give static shapes; inputs known only
at run time give fresh symbolic dims (a symbolic ``depth`` for OneHot). Pad and CenterCropPad
then gather every axis (``gather_pad_axis``): output position ``o`` reads input position
``o - before``, mapped by the mode (``constant`` masks what falls outside with the pad value,
``edge`` clamps, ``reflect`` folds with period ``2 (n - 1)``, ``wrap`` takes it modulo ``n``), the
output length ``n + before + after`` a fresh symbolic dim; negative widths crop the same way.
The index formula (``_source_index``) is the one the static ``edge``/``reflect``/``wrap`` pads
use, evaluated there in numpy to a constant table (``hetc.frontends.onnx.tables``).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, tirx

from .. import runtime_values as rv
from .. import symbolic
from ..registry import Attrs, ConvertContext, converter
from ..shapes import dims as _any_dims
from ..shapes import static_dims as _dims
from ..tables import NumpyMath, RelaxMath
from .resize import const_value, scalar


def _norm_axes(ctx: ConvertContext, axes, rank: int, what: str) -> list[int]:
    axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    if any(not -rank <= a < rank for a in axes):
        raise ctx.error(f"{what}={axes} out of range for rank {rank}")
    axes = [a + rank if a < 0 else a for a in axes]
    if len(set(axes)) != len(axes):
        raise ctx.error(f"{what}={axes} has duplicates")
    return axes


def _crop(bb, x: relax.Expr, axis: int, begin: int, end: int) -> relax.Expr:
    return bb.normalize(relax.op.strided_slice(x, [axis], [begin], [end], assume_inbound=True))


def _pad_constant(bb, x: relax.Expr, axis: int, before, after, value: relax.Expr) -> relax.Expr:
    """``x`` with blocks of ``value`` concatenated on ``axis``; widths are ints or non-negative
    PrimExprs."""
    shape = _any_dims(x)  # symbolic dims (a batch) carry over to the pad blocks

    def block(width) -> relax.Expr:
        dims = list(shape)
        dims[axis] = width
        # broadcast_to, not full: TVM's legalization of full rejects an inf/NaN constant
        return bb.normalize(relax.op.broadcast_to(value, dims))

    def used(width) -> bool:
        return not (isinstance(width, int) and width == 0)

    parts = ([block(before)] if used(before) else []) + [x] + ([block(after)] if used(after) else [])
    return bb.normalize(relax.op.concat(parts, axis=axis)) if len(parts) > 1 else x


def pad_symbolic(ctx: ConvertContext, x: relax.Expr, widths: list, value: relax.Expr) -> relax.Expr:
    """Constant-mode pad by widths that are expressions of symbolic dims (torch's ``F.pad`` by a
    length computed from ``x.size(1)``: SEW pads its upsampled sequence back to the input's).
    Per axis, what a negative width removes is cropped (``strided_slice``) and blocks of
    ``max(width, 0)`` are concatenated; the simplifier drops the parts it proves empty."""
    bb = ctx.bb
    for axis, (b, a) in enumerate(widths):
        if isinstance(b, int) and isinstance(a, int) and not (b or a):
            continue
        n = _any_dims(x)[axis]
        lo, hi = (symbolic.simplify(tirx.max(-symbolic.prim(w), 0)) for w in (b, a))
        if not (isinstance(lo, int) and isinstance(hi, int) and lo == hi == 0):
            end = symbolic.simplify(symbolic.prim(n) - symbolic.prim(hi))
            x = bb.normalize(relax.op.strided_slice(x, [axis], [symbolic.prim(lo)], [symbolic.prim(end)],
                                                    assume_inbound=True))
        before, after = (symbolic.simplify(tirx.max(symbolic.prim(w), 0)) for w in (b, a))
        x = _pad_constant(bb, x, axis, before, after, value)
    return x


def _source_index(m, pos, n, mode: str):
    """The position in an axis of ``n`` elements that each padded position ``pos`` (output
    index - before) reads: clamped (``edge``; ``constant`` masks it after), modulo ``n``
    (``wrap``) or folded with period ``2 (n - 1)`` (``reflect``), as ``numpy.pad``."""
    if mode in ("constant", "edge"):
        return m.minimum(m.maximum(pos, 0), m.maximum(m.subtract(n, 1), 0))
    if mode == "wrap":
        return m.floor_mod(pos, m.maximum(n, 1))
    period = m.maximum(m.multiply(m.subtract(n, 1), 2), 1)  # 1 for one element: always position 0
    folded = m.floor_mod(pos, period)
    return m.where(m.less(folded, n), folded, m.subtract(period, folded))


def gather_pad_axis(ctx: ConvertContext, m, x: relax.Expr, axis: int, before, after, mode: str,
                    value: relax.Expr | None) -> relax.Expr:
    """``x`` padded along ``axis`` by ``before``/``after`` (ints with ``NumpyMath``, PrimExprs
    known at run time with ``RelaxMath``); negative widths crop first, as ``pad_tensor`` does."""
    bb = ctx.bb
    n = _any_dims(x)[axis]  # static: the axes before it may already have run-time lengths
    if not isinstance(n, int):
        raise ctx.error(f"mode={mode!r} pads axis {axis}, whose size {n} is symbolic; bind it with --input-shape")
    out_len = n + before + after
    if n == 0:
        if value is None:
            raise ctx.error(f"mode={mode!r} cannot pad axis {axis}, which is empty")
        full = list(_any_dims(x))
        full[axis] = out_len
        return bb.normalize(relax.op.broadcast_to(value, relax.ShapeExpr(full)))
    pos = m.subtract(m.arange(out_len), before)
    if mode == "constant":  # what a crop removes is never read
        src = _source_index(m, pos, n, mode)
    else:  # pad what is left of the axis once negative widths have cropped it
        lo, hi = m.maximum(m.multiply(before, -1), 0), m.maximum(m.multiply(after, -1), 0)
        kept = m.subtract(m.subtract(n, lo), hi)
        src = m.add(_source_index(m, m.subtract(pos, lo), kept, mode), lo)
    y = bb.normalize(relax.op.take(x, m.table(src, "int64"), axis=axis))
    if mode != "constant":
        return y
    inside = m.logical_and(m.greater_equal(pos, 0), m.less(pos, n))
    inside = m.table(m.reshape(inside, [out_len] + [1] * (x.ty.ndim - axis - 1)))
    return bb.normalize(relax.op.where(inside, y, value))


def _pad_gather(ctx: ConvertContext, x: relax.Expr, axis: int, before: int, after: int,
                mode: str) -> relax.Expr:
    n = _any_dims(x)[axis]
    if n == 0:
        raise ctx.error(f"mode={mode!r} cannot pad axis {axis}, which is empty")
    return gather_pad_axis(ctx, NumpyMath(ctx), x, axis, before, after, mode, None)


def _pad_runtime(ctx: ConvertContext, x: relax.Expr, pads: relax.Expr, axes, mode: str,
                 value: relax.Expr | None) -> relax.Expr:
    """Pad with a run-time ``pads`` vector (``[begin..., end...]`` over ``axes``: a list of ints,
    or a run-time tensor): every axis gathered, since which ones the widths leave unchanged is data."""
    bb = ctx.bb
    m = RelaxMath(ctx)
    rank = x.ty.ndim
    pads = m.astype(pads, "int64")
    count = _dims(pads)[0] // 2
    if isinstance(axes, list):
        which = np.zeros((count, rank), np.int64)
        which[np.arange(count), axes] = 1
    else:  # run-time axes: a one-hot [count, rank] of the (wrapped) axes
        axes = m.astype(m.reshape(axes, [count, 1]), "int64")
        axes = m.where(m.less(axes, 0), m.add(axes, rank), axes)
        which = m.astype(m.equal(axes, np.arange(rank).reshape(1, rank)), "int64")
    halves = m.reshape(pads, [2, count, 1])
    widths = bb.normalize(relax.op.sum(m.multiply(halves, which), axis=1))  # [2, rank]
    values = m.dims(m.reshape(widths, [2 * rank]), "pad")
    for axis in range(rank):
        x = gather_pad_axis(ctx, m, x, axis, values[axis], values[rank + axis], mode, value)
    return x


def pad_tensor(ctx: ConvertContext, x: relax.Expr, widths: list[tuple[int, int]], mode: str,
               value: relax.Expr | None) -> relax.Expr:
    """Crop for negative widths, then pad ``widths`` (per axis) in ``mode``. Axes left alone
    may be symbolic; an axis cropped must be static."""
    bb = ctx.bb
    shape = _any_dims(x)
    for axis, (b, a) in enumerate(widths):
        if b < 0 or a < 0:
            if not isinstance(shape[axis], int):
                raise ctx.error(f"negative pads crop axis {axis}, whose size {shape[axis]} is symbolic; "
                                "bind it with --input-shape")
            begin, end = max(-b, 0), shape[axis] - max(-a, 0)
            if end < begin:
                raise ctx.error(f"negative pads {(b, a)} remove more than the {shape[axis]} elements of axis {axis}")
            x = _crop(bb, x, axis, begin, end)
    numpy_mode = {"edge": "edge", "reflect": "reflect", "wrap": "wrap"}
    fill = _finite_constant(value) if mode == "constant" else None
    if fill is not None and any(b > 0 or a > 0 for b, a in widths):
        # one nn.pad: it has a layout rule (stays NHWC between convs) and fuses with its producer
        flat = [max(w, 0) for pair in widths for w in pair]
        return bb.normalize(relax.op.nn.pad(x, flat, pad_value=fill))
    for axis, (b, a) in enumerate(widths):
        b, a = max(b, 0), max(a, 0)
        if not (b or a):
            continue
        if mode == "constant":
            x = _pad_constant(bb, x, axis, b, a, value)
        else:
            x = _pad_gather(ctx, x, axis, b, a, numpy_mode[mode])
    return x


def _finite_constant(value: relax.Expr | None) -> float | None:
    """``value`` as a Python float when it is a finite compile-time constant that a float
    holds exactly, else None (a run-time value, inf/NaN, or a large int64)."""
    if not isinstance(value, tvm.ir.GenericConst):
        return None
    v = value.value.numpy().reshape(-1)[0]
    f = float(v)
    return f if np.isfinite(f) and (np.asarray(v).dtype.kind == "f" or abs(f) < 2 ** 53) else None


def _value_scalar(ctx: ConvertContext, expr, dtype: str) -> relax.Expr:
    """constant_value as a scalar of ``dtype``: a constant, or a runtime scalar/1-element tensor."""
    if expr is None:
        return scalar(0, dtype)
    if isinstance(expr, (tvm.ir.GenericConst, relax.ShapeExpr)):
        value = const_value(ctx, expr, "constant_value")
        if value is None:
            return scalar(0, dtype)
        v = value.reshape(-1)[0]
        if value.dtype.kind in "iub" and dtype.startswith(("int", "uint", "bool")):
            return relax.const(np.array(v).astype(dtype), dtype)  # exact, also for large int64
        return scalar(float(v), dtype)
    if int(np.prod(_dims(expr))) != 1:
        raise ctx.error(f"input 'constant_value' must hold one value, got shape {_dims(expr)}")
    v = relax.op.reshape(expr, [])
    return v if str(expr.ty.dtype) == dtype else relax.op.astype(v, dtype)


_PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad(ctx: ConvertContext, inputs: list, attrs: Attrs):
    opset = ctx.opset
    x = inputs[0]
    rank = x.ty.ndim
    dtype = str(x.ty.dtype)
    mode = attrs.reject("mode", lambda v: v in _PAD_MODES, "constant")
    if opset < 11:
        pads = attrs.get("pads", None)
        if pads is None:
            raise ctx.error("attribute 'pads' is required")
        pads = np.asarray(pads, dtype=np.int64)
        value = scalar(float(attrs.get("value", 0.0)), dtype)
        axes = list(range(rank))
    else:
        inputs = list(inputs) + [None] * 3
        axes_in = inputs[3] if opset >= 18 else None
        known = ctx.known(1)
        if mode == "constant" and known is not None and not symbolic.is_static(known) and not rv.is_runtime(axes_in):
            axes_v = const_value(ctx, axes_in, "axes") if axes_in is not None else None
            axes = list(range(rank)) if axes_v is None else _norm_axes(ctx, axes_v, rank, "axes")
            pads = [symbolic.simplify(v) for v in known.reshape(-1)]
            if len(pads) != 2 * len(axes):
                raise ctx.error(f"pads has {len(pads)} values, expected {2 * len(axes)} (2 per axis)")
            widths = [(0, 0)] * rank
            for i, a in enumerate(axes):
                widths[a] = (pads[i], pads[len(axes) + i])
            return pad_symbolic(ctx, x, widths, _value_scalar(ctx, inputs[2], dtype))
        if rv.is_runtime(inputs[1]) or rv.is_runtime(axes_in):  # widths known at run time only
            value = _value_scalar(ctx, inputs[2], dtype) if mode == "constant" else None
            axes = axes_in if rv.is_runtime(axes_in) else list(range(rank)) if axes_in is None else _norm_axes(
                ctx, const_value(ctx, axes_in, "axes"), rank, "axes")
            return _pad_runtime(ctx, x, inputs[1], axes, mode, value)
        pads = const_value(ctx, inputs[1], "pads")
        if pads is None:
            pads = np.zeros(0, np.int64)
        value = _value_scalar(ctx, inputs[2], dtype) if mode == "constant" else None
        axes_v = const_value(ctx, inputs[3], "axes") if opset >= 18 else None
        axes = list(range(rank)) if axes_v is None else _norm_axes(ctx, axes_v, rank, "axes")
    pads = pads.astype(np.int64).reshape(-1)
    if pads.size != 2 * len(axes):
        raise ctx.error(f"pads has {pads.size} values, expected {2 * len(axes)} (2 per axis)")
    widths = [(0, 0)] * rank
    for i, a in enumerate(axes):
        widths[a] = (int(pads[i]), int(pads[len(axes) + i]))
    return pad_tensor(ctx, x, widths, mode, value)


# One entry: the opset-specific differences (2, 11, 13, 18, 19) are handled inside, from ctx.opset.
@converter("Pad", since=2)
def pad_converter(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _pad(ctx, inputs, attrs)


# --------------------------------------------------------------------------- OneHot


def _one_hot(ctx: ConvertContext, inputs: list, attrs: Attrs, wrap_negative: bool):
    indices, depth_e, values = inputs[0], inputs[1], inputs[2]
    bb = ctx.bb
    rank = indices.ty.ndim
    axis = int(attrs.get("axis", -1))
    if not -(rank + 1) <= axis <= rank:
        raise ctx.error(f"axis={axis} out of range for indices of rank {rank}")
    if axis < 0:
        axis += rank + 1
    if rv.is_runtime(depth_e):  # known at run time only: a symbolic depth
        if str(depth_e.ty.dtype).startswith("float"):
            depth_e = bb.normalize(relax.op.astype(relax.op.floor(depth_e), "int64"))
        depth = rv.scalar_var(bb, depth_e, "depth")
    else:
        depth_v = const_value(ctx, depth_e, "depth")
        if depth_v is None or depth_v.size != 1:
            raise ctx.error("input 'depth' must hold one value")
        depth = int(depth_v.reshape(-1)[0])
        if depth < 0:
            raise ctx.error(f"input 'depth' must be non-negative, got {depth}")
    if values.ty.ndim != 1 or _dims(values)[0] != 2:
        raise ctx.error("input 'values' must be [off_value, on_value]")
    idtype = str(indices.ty.dtype)
    idx = indices if idtype == "int64" else bb.normalize(relax.op.astype(indices, "int64"))
    depth_t = relax.const(depth, "int64") if isinstance(depth, int) else bb.normalize(
        relax.op.shape_to_tensor(relax.ShapeExpr([depth])))
    if wrap_negative:
        idx = bb.normalize(relax.op.where(relax.op.less(idx, relax.const(0, "int64")),
                                          relax.op.add(idx, depth_t), idx))
    idx = bb.normalize(relax.op.expand_dims(idx, axis))
    if isinstance(depth, int):
        targets = relax.const(np.arange(depth, dtype=np.int64).reshape([depth] + [1] * (rank - axis)), "int64")
    else:
        ramp = relax.op.arange(0, depth, 1, "int64")
        targets = bb.normalize(relax.op.reshape(ramp, [depth] + [1] * (rank - axis)))
    hit = bb.normalize(relax.op.equal(idx, targets))
    off = bb.normalize(relax.op.take(values, relax.const(0, "int64"), axis=0))
    on = bb.normalize(relax.op.take(values, relax.const(1, "int64"), axis=0))
    return relax.op.where(hit, on, off)


@converter("OneHot", since=9)
def one_hot_9(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _one_hot(ctx, inputs, attrs, wrap_negative=False)


@converter("OneHot", since=11)
def one_hot_11(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _one_hot(ctx, inputs, attrs, wrap_negative=True)


# --------------------------------------------------------------------------- CenterCropPad


@converter("CenterCropPad", since=18)
def center_crop_pad(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x = inputs[0]
    rank = x.ty.ndim
    shape = _dims(x)
    axes_attr = attrs.get("axes", None)
    axes = list(range(rank)) if axes_attr is None else _norm_axes(ctx, axes_attr, rank, "axes")
    if rv.is_runtime(inputs[1]):  # a centred crop or zero pad (the odd element at the end) to run-time sizes
        m = RelaxMath(ctx)
        zero = scalar(0, str(x.ty.dtype))
        for axis, size in zip(axes, m.dims(inputs[1], "crop")):
            before = tirx.truncdiv(size - shape[axis], 2)
            x = gather_pad_axis(ctx, m, x, axis, before, size - shape[axis] - before, "constant", zero)
        return x
    target = const_value(ctx, inputs[1], "shape")
    target = np.zeros(0, np.int64) if target is None else target.astype(np.int64).reshape(-1)
    if target.size != len(axes):
        raise ctx.error(f"input 'shape' has {target.size} values, expected {len(axes)}")
    if (target < 0).any():
        raise ctx.error(f"input 'shape' must be non-negative, got {target.tolist()}")
    widths = [(0, 0)] * rank
    for a, t in zip(axes, target.tolist()):
        diff = t - shape[a]  # > 0: pad (extra on the end), < 0: crop (extra removed from the end)
        if diff >= 0:
            widths[a] = (diff // 2, diff - diff // 2)
        else:
            cut = -diff
            widths[a] = (-(cut // 2), -(cut - cut // 2))
    return pad_tensor(ctx, x, widths, "constant", scalar(0, str(x.ty.dtype)))
