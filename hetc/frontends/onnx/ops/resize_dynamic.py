"""Resize and Upsample with ``scales``, ``sizes`` or ``roi`` given at run time.

``resize.py`` computes the sampling indices and weights at conversion time; when the values that
decide them arrive as graph inputs they are computed by the graph instead, with the same
formulas (ONNX's reference ``op_resize.py``): per resized axis, the output length (a fresh
symbolic dim), the source coordinate of every output position for the
``coordinate_transformation_mode``, then ``nearest`` (one ``take``, rounded by ``nearest_mode``),
``linear`` (two taps) or ``cubic`` (four taps, ``cubic_coeff_a``, ``exclude_outside``), indices
clamped into the input (edge padding) and ``tf_crop_and_resize``'s ``extrapolation_value``
outside it. ``antialias`` stretches the kernel by the (run-time) downscaling factor: every tap it
could reach is computed, about ``2 x support x n`` per output position for an axis of length
``n``, so it costs far more than with constant scales.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .. import runtime_values as rv
from ..shapes import dims, static_dims


def _f64(value) -> relax.Expr:
    return relax.const(np.asarray(value, np.float64), "float64")


def _i64(value) -> relax.Expr:
    return relax.const(np.asarray(value, np.int64), "int64")


def _vector(bb, expr) -> relax.Expr:
    """A constant or run-time input as a float64 vector."""
    if isinstance(expr, tvm.ir.GenericConst):
        return _f64(expr.value.numpy().astype(np.float64).reshape(-1))
    if isinstance(expr, relax.ShapeExpr):
        return _f64([int(v) for v in expr.values])
    return bb.normalize(relax.op.astype(relax.op.reshape(expr, [-1]), "float64"))


def _pick(bb, vector: relax.Expr, i: int) -> relax.Expr:
    return bb.normalize(relax.op.take(vector, _i64(i), axis=0))


def _source_coords(bb, mode: str, y, scale, in_len: int, out_len, roi):
    """Source coordinate of every output position ``y`` (float64 tensors; scale, out_len, roi
    bounds are scalars)."""
    out_width = bb.normalize(relax.op.multiply(scale, _f64(in_len)))
    is_one = relax.op.equal(out_width, _f64(1.0))
    half = relax.op.add(y, _f64(0.5))
    if mode == "align_corners":
        return relax.op.where(is_one, _f64(0.0), relax.op.divide(relax.op.multiply(y, _f64(in_len - 1)),
                                                                  relax.op.subtract(out_width, _f64(1.0))))
    if mode == "asymmetric":
        return relax.op.divide(y, scale)
    if mode == "tf_crop_and_resize":
        lo, hi = roi
        span = relax.op.multiply(relax.op.subtract(hi, lo), _f64(in_len - 1))
        x = relax.op.where(is_one, relax.op.divide(span, _f64(2.0)),
                           relax.op.divide(relax.op.multiply(y, span), relax.op.subtract(out_width, _f64(1.0))))
        return relax.op.add(x, relax.op.multiply(lo, _f64(in_len - 1)))
    if mode == "pytorch_half_pixel":
        return relax.op.where(is_one, _f64(-0.5), relax.op.subtract(relax.op.divide(half, scale), _f64(0.5)))
    if mode == "half_pixel":
        return relax.op.subtract(relax.op.divide(half, scale), _f64(0.5))
    if mode == "tf_half_pixel_for_nn":
        return relax.op.divide(half, scale)
    # half_pixel_symmetric
    ratio = relax.op.divide(relax.op.astype(out_len, "float64"), out_width)
    offset = relax.op.multiply(_f64(in_len / 2), relax.op.subtract(_f64(1.0), ratio))
    return relax.op.add(offset, relax.op.subtract(relax.op.divide(half, scale), _f64(0.5)))


def _cubic_weights(r, a: float) -> list:
    """The four cubic coefficients for the fractional offset ``r`` (taps -1, 0, 1, 2)."""
    def poly(t, coeffs):
        out = _f64(coeffs[0])
        for c in coeffs[1:]:
            out = relax.op.add(relax.op.multiply(out, t), _f64(c))
        return out
    s = relax.op.subtract(_f64(1.0), r)
    r1, s1 = relax.op.add(r, _f64(1.0)), relax.op.add(s, _f64(1.0))
    far = [a, -5 * a, 8 * a, -4 * a]  # a t^3 - 5a t^2 + 8a t - 4a, for 1 < t < 2
    near = [a + 2, -(a + 3), 0.0, 1.0]  # (a + 2) t^3 - (a + 3) t^2 + 1, for t <= 1
    return [poly(r1, far), poly(r, near), poly(s, near), poly(s1, far)]


def _antialias_taps(bb, frac, scale, n: int, mode: str, a: float):
    """Antialiased taps: the kernel stretched by ``1 / min(scale, 1)``, normalised to sum 1. Its
    width depends on the run-time scale, so every tap it can reach is computed: the output is at
    least one element, so the scale is at least ``1 / n`` and the kernel reaches at most
    ``support * n`` input positions either side (the others get weight 0)."""
    support = 1 if mode == "linear" else 2
    reach = support * n + 1
    stretch = bb.normalize(relax.op.minimum(scale, _f64(1.0)))
    offsets = list(range(-reach, reach + 1))
    weights = []
    for o in offsets:
        d = bb.normalize(relax.op.abs(relax.op.multiply(relax.op.subtract(_f64(o), frac), stretch)))
        if mode == "linear":
            w = relax.op.maximum(relax.op.subtract(_f64(1.0), d), _f64(0.0))
        else:
            d2, d3 = relax.op.multiply(d, d), relax.op.multiply(relax.op.multiply(d, d), d)
            near = relax.op.add(relax.op.subtract(relax.op.multiply(_f64(a + 2), d3), relax.op.multiply(_f64(a + 3), d2)),
                                _f64(1.0))
            far = relax.op.subtract(relax.op.add(relax.op.subtract(relax.op.multiply(_f64(a), d3),
                                                                   relax.op.multiply(_f64(5 * a), d2)),
                                                 relax.op.multiply(_f64(8 * a), d)), _f64(4 * a))
            w = relax.op.where(relax.op.less_equal(d, _f64(1.0)), near,
                               relax.op.where(relax.op.less(d, _f64(2.0)), far, _f64(0.0)))
        weights.append(bb.normalize(w))
    total = weights[0]
    for w in weights[1:]:
        total = relax.op.add(total, w)
    total = bb.normalize(total)
    return offsets, [relax.op.divide(w, total) for w in weights]


def resample_axis(ctx, x: relax.Expr, axis: int, scale, out_len, mode: str, coord: str, nearest_mode,
                  cubic_a: float, exclude_outside: bool, roi, extrapolation_value: float,
                  antialias: bool = False) -> relax.Expr:
    """``x`` (in its work dtype) resampled along ``axis`` to the run-time length ``out_len``."""
    bb = ctx.bb
    n = dims(x)[axis]  # static: only the axes already resampled have run-time lengths
    rank = x.ty.ndim
    length = rv.scalar_var(bb, out_len, "resized")
    y = bb.normalize(relax.op.arange(0, length, 1, "float64"))
    src = bb.normalize(_source_coords(bb, coord, y, scale, n, out_len, roi))
    column = [length] + [1] * (rank - axis - 1)

    def gather(index) -> relax.Expr:
        index = relax.op.minimum(relax.op.maximum(index, _i64(0)), _i64(n - 1))
        return bb.normalize(relax.op.take(x, bb.normalize(index), axis=axis))

    def weight(w) -> relax.Expr:
        return bb.normalize(relax.op.astype(relax.op.reshape(w, relax.ShapeExpr(column)), str(x.ty.dtype)))

    if mode == "nearest":
        if nearest_mode is None:  # Resize-10 / Upsample: floor when upsampling, ceil when downsampling
            rounded = relax.op.where(relax.op.less(scale, _f64(1.0)), relax.op.ceil(src), relax.op.floor(src))
        else:
            rounded = {"round_prefer_floor": lambda: relax.op.ceil(relax.op.subtract(src, _f64(0.5))),
                       "round_prefer_ceil": lambda: relax.op.floor(relax.op.add(src, _f64(0.5))),
                       "floor": lambda: relax.op.floor(src), "ceil": lambda: relax.op.ceil(src)}[nearest_mode]()
        out = gather(relax.op.astype(rounded, "int64"))
    else:
        base = bb.normalize(relax.op.floor(src))
        frac = bb.normalize(relax.op.subtract(src, base))
        first = bb.normalize(relax.op.astype(base, "int64"))
        if antialias:
            offsets, weights = _antialias_taps(bb, frac, scale, n, mode, cubic_a)
        elif mode == "linear":
            offsets, weights = [0, 1], [relax.op.subtract(_f64(1.0), frac), frac]
        else:
            offsets, weights = [-1, 0, 1, 2], _cubic_weights(frac, cubic_a)
        weights = [bb.normalize(w) for w in weights]
        if exclude_outside:
            inside = [relax.op.astype(relax.op.logical_and(
                relax.op.greater_equal(relax.op.add(first, _i64(o)), _i64(0)),
                relax.op.less(relax.op.add(first, _i64(o)), _i64(n))), "float64") for o in offsets]
            weights = [bb.normalize(relax.op.multiply(w, m)) for w, m in zip(weights, inside)]
            total = weights[0]
            for w in weights[1:]:
                total = relax.op.add(total, w)
            total = bb.normalize(relax.op.where(relax.op.equal(total, _f64(0.0)), _f64(1.0), total))
            weights = [bb.normalize(relax.op.divide(w, total)) for w in weights]
        out = None
        for o, w in zip(offsets, weights):
            term = relax.op.multiply(gather(relax.op.add(first, _i64(o))), weight(w))
            out = term if out is None else relax.op.add(out, term)
        out = bb.normalize(out)
    if coord == "tf_crop_and_resize":
        outside = relax.op.logical_or(relax.op.less(src, _f64(0.0)), relax.op.greater(src, _f64(n - 1)))
        outside = bb.normalize(relax.op.reshape(outside, relax.ShapeExpr(column)))
        fill = relax.const(np.asarray(extrapolation_value, str(x.ty.dtype)), str(x.ty.dtype))
        out = relax.op.where(outside, fill, out)
    return bb.normalize(out)


def resize_runtime(ctx, x: relax.Expr, axes: list[int], scales_e, sizes_e, roi_e, *, mode: str, coord: str,
                   nearest_mode, cubic_a: float, exclude_outside: bool, extrapolation_value: float,
                   antialias: bool, policy: str, work_dtype: str) -> relax.Expr:
    """Resize ``x`` along ``axes`` with scales/sizes/roi known at run time (see the module doc)."""
    bb = ctx.bb
    in_shape = static_dims(x)
    in_len = _f64([in_shape[a] for a in axes])
    if scales_e is not None:
        scales = _vector(bb, scales_e)
        lengths = bb.normalize(relax.op.floor(relax.op.multiply(scales, in_len)))
    else:
        sizes = _vector(bb, sizes_e)
        ratios = bb.normalize(relax.op.divide(sizes, in_len))
        if policy == "stretch":
            scales, lengths = ratios, sizes
        else:
            pick = relax.op.min if policy == "not_larger" else relax.op.max
            one = bb.normalize(pick(ratios, axis=0, keepdims=True))
            scales = bb.normalize(relax.op.broadcast_to(one, [len(axes)]))
            lengths = relax.op.floor(relax.op.add(relax.op.multiply(scales, in_len), _f64(0.5)))
    lengths = bb.normalize(relax.op.astype(lengths, "int64"))
    roi = None
    if coord == "tf_crop_and_resize":
        roi = _vector(bb, roi_e) if roi_e is not None else _f64([0.0] * len(axes) + [1.0] * len(axes))
    dtype = str(x.ty.dtype)
    y = bb.normalize(relax.op.astype(x, work_dtype)) if dtype != work_dtype else x
    for i, a in enumerate(axes):
        bounds = None if roi is None else (_pick(bb, roi, i), _pick(bb, roi, len(axes) + i))
        y = resample_axis(ctx, y, a, _pick(bb, scales, i), _pick(bb, lengths, i), mode, coord, nearest_mode,
                          cubic_a, exclude_outside, bounds, extrapolation_value, antialias and mode != "nearest")
    return y
