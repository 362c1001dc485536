"""Resize (opsets 10, 11, 13, 18, 19) and Upsample (opsets 7, 9).

TVM's converter needs constant scales/sizes of one exact form, supports 2D/3D only and gives
wrong values for several modes (cubic downsampling, tf_crop_and_resize with axes, antialias).
hetc's converter implements the spec for any rank: Resize is separable, so each resized axis
is resampled on its own, in the order the ONNX reference does it. For each axis one formula
(the reference's ``op_resize.py``) gives the source coordinate of every output position for
the ``coordinate_transformation_mode``, then the kernel taps: ``nearest`` (one tap, rounded by
``nearest_mode``), ``linear`` (two), ``cubic`` (four, ``cubic_coeff_a``, ``exclude_outside``),
``antialias`` (the kernel stretched by the downscaling factor), indices clamped into the input
and ``tf_crop_and_resize``'s ``extrapolation_value`` outside it. The graph does one ``take``
of the [out, taps] indices along the axis and a weighted sum over the taps; a pure selection
(every row one weight of 1) is a single ``take``, exact for every dtype.

Scales, sizes and roi decide the output shape and the sampling grid. When they are constants
(initializers, folded values, inputs frozen with ``constant_inputs=``) the formula runs in
numpy at conversion time and the indices and weights are constant tables, without the taps no
row uses (``hetc.frontends.onnx.tables``); when they are graph inputs the same formula is
emitted as Relax ops, each output length a fresh symbolic dim (antialias then computes every
tap the kernel could reach, ``2 x support x n`` per output position for an axis of length
``n``). Integer inputs interpolated with linear/cubic weights are computed in float, rounded
and saturated back (the reference's ``saturate_cast``).

Resize-10 and Upsample use the pre-11 semantics: asymmetric coordinates, nearest taking the
floor when upsampling and the ceiling when downsampling (what onnxruntime does).
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax, tirx

from .. import runtime_values as rv
from ..registry import Attrs, ConvertContext, converter
from ..shapes import dims
from ..shapes import static_dims as _dims
from ..tables import NumpyMath, RelaxMath

_COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_INT_DTYPES = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16,
               "int32": np.int32, "uint32": np.uint32, "int64": np.int64, "uint64": np.uint64}


# --------------------------------------------------------------------------- constants


def const_value(ctx: ConvertContext, expr, what: str) -> np.ndarray | None:
    """The value of a constant input (None when absent or empty-shaped); error otherwise."""
    if expr is None:
        return None
    if isinstance(expr, tvm.ir.GenericConst):
        value = expr.value.numpy()
        return None if value.size == 0 else value
    if isinstance(expr, relax.ShapeExpr):
        return np.array([int(v) for v in expr.values], dtype=np.int64)
    try:
        if 0 in _dims(expr):
            return None  # an empty tensor: same as absent
    except (AttributeError, TypeError, ValueError):
        pass
    raise ctx.error(f"input '{what}' must be a constant (an initializer, a folded value or an input "
                    "frozen with constant_inputs=), it decides the output shape")




def scalar(value: float, dtype: str) -> relax.Expr:
    """A scalar constant of ``dtype`` (integers rounded and saturated like the reference)."""
    if dtype in _INT_DTYPES:
        info = np.iinfo(_INT_DTYPES[dtype])
        return relax.const(np.array(np.clip(np.round(value), info.min, info.max), dtype=_INT_DTYPES[dtype]), dtype)
    if dtype in ("float16", "float32", "float64", "bool"):
        return relax.const(np.array(value, dtype=dtype), dtype)
    return relax.op.astype(relax.const(np.array(value, dtype="float32"), "float32"), dtype)


# --------------------------------------------------------------------------- sampling
# One formula per axis (the ONNX reference's ``op_resize.py``), evaluated by numpy when the
# scales, sizes and roi are constants (``NumpyMath``: constant index and weight tables) and
# emitted as Relax ops when they arrive at run time (``RelaxMath``).


def _source_coords(m, mode: str, y, scale, in_len: int, out_len, roi):
    """The source coordinate of every output position ``y`` (float64; ``scale`` and ``out_len``
    scalars, ``roi`` the axis's (start, end) or None)."""
    out_width = m.multiply(scale, float(in_len))
    is_one = m.equal(out_width, 1.0)
    half = m.add(y, 0.5)
    if mode == "align_corners":
        return m.where(is_one, 0.0, m.divide(m.multiply(y, float(in_len - 1)), m.subtract(out_width, 1.0)))
    if mode == "asymmetric":
        return m.divide(y, scale)
    if mode == "tf_crop_and_resize":
        lo, hi = roi
        width = m.subtract(hi, lo)
        x = m.where(is_one, m.divide(m.multiply(width, float(in_len - 1)), 2.0),
                    m.divide(m.multiply(m.multiply(y, width), float(in_len - 1)), m.subtract(out_width, 1.0)))
        return m.add(x, m.multiply(lo, float(in_len - 1)))
    if mode == "pytorch_half_pixel":
        return m.where(is_one, -0.5, m.subtract(m.divide(half, scale), 0.5))
    if mode == "half_pixel":
        return m.subtract(m.divide(half, scale), 0.5)
    if mode == "tf_half_pixel_for_nn":
        return m.divide(half, scale)
    # half_pixel_symmetric
    offset = m.multiply(in_len / 2, m.subtract(1.0, m.divide(m.astype(out_len, "float64"), out_width)))
    return m.subtract(m.add(offset, m.divide(half, scale)), 0.5)


def _cubic_weights(m, r, a: float) -> list:
    """The four cubic coefficients for the fractional offset ``r`` (taps -1, 0, 1, 2)."""
    def poly(t, coeffs):
        out = coeffs[0]
        for c in coeffs[1:]:
            out = m.add(m.multiply(out, t), c)
        return out
    s = m.subtract(1.0, r)
    far = [a, -5 * a, 8 * a, -4 * a]  # a t^3 - 5a t^2 + 8a t - 4a, for 1 < t < 2
    near = [a + 2, -(a + 3), 0.0, 1.0]  # (a + 2) t^3 - (a + 3) t^2 + 1, for t <= 1
    return [poly(m.add(r, 1.0), far), poly(r, near), poly(s, near), poly(m.add(s, 1.0), far)]


def _antialias_taps(m, frac, scale, n: int, mode: str, a: float):
    """Antialiased taps: the kernel stretched by ``1 / min(scale, 1)``, normalised to sum 1. Every
    tap it can reach is computed: with a constant scale ``support / scale``, with a run-time one
    ``support * n`` input positions either side (the output has at least one element, so the
    scale is at least ``1 / n``); the others get weight 0."""
    support = 1 if mode == "linear" else 2
    reach = support * n + 1 if m.runtime else math.ceil(support / min(float(scale), 1.0)) + 1
    stretch = m.minimum(scale, 1.0)
    offsets = list(range(-reach, reach + 1))
    weights = []
    for o in offsets:
        d = m.abs(m.multiply(m.subtract(float(o), frac), stretch))
        if mode == "linear":
            w = m.maximum(m.subtract(1.0, d), 0.0)
        else:
            d2 = m.multiply(d, d)
            d3 = m.multiply(d2, d)
            near = m.add(m.subtract(m.multiply(a + 2, d3), m.multiply(a + 3, d2)), 1.0)
            far = m.subtract(m.add(m.subtract(m.multiply(a, d3), m.multiply(5 * a, d2)), m.multiply(8 * a, d)),
                             4 * a)
            w = m.where(m.less_equal(d, 1.0), near, m.where(m.less(d, 2.0), far, 0.0))
        weights.append(w)
    total = weights[0]
    for w in weights[1:]:
        total = m.add(total, w)
    return offsets, [m.divide(w, total) for w in weights]


def _axis_taps(m, n: int, out_len, scale, roi, spec: dict):
    """The sampling of one axis of ``n`` elements resized to ``out_len``: (indices per tap, clamped
    into the axis; weights per tap, None for nearest; the extrapolated positions, or None)."""
    y = m.arange(out_len, "float64")
    src = _source_coords(m, spec["coord"], y, scale, n, out_len, roi)
    extrapolated = None
    if spec["coord"] == "tf_crop_and_resize":
        extrapolated = m.logical_or(m.less(src, 0.0), m.greater(src, float(n - 1)))

    def clamp(index):
        return m.minimum(m.maximum(index, 0), n - 1)

    if spec["mode"] == "nearest":
        nearest_mode = spec["nearest_mode"]
        if nearest_mode is None:  # Resize-10 / Upsample: floor when upsampling, ceil when downsampling
            rounded = m.where(m.less(scale, 1.0), m.ceil(src), m.floor(src))
        else:
            rounded = {"round_prefer_floor": lambda: m.ceil(m.subtract(src, 0.5)),
                       "round_prefer_ceil": lambda: m.floor(m.add(src, 0.5)),
                       "floor": lambda: m.floor(src), "ceil": lambda: m.ceil(src)}[nearest_mode]()
        return [clamp(m.astype(rounded, "int64"))], None, extrapolated
    base = m.floor(src)
    frac = m.subtract(src, base)
    first = m.astype(base, "int64")
    if spec["antialias"]:
        offsets, weights = _antialias_taps(m, frac, scale, n, spec["mode"], spec["cubic_a"])
    elif spec["mode"] == "linear":
        offsets, weights = [0, 1], [m.subtract(1.0, frac), frac]
    else:
        offsets, weights = [-1, 0, 1, 2], _cubic_weights(m, frac, spec["cubic_a"])
    index = [m.add(first, o) for o in offsets]
    if spec["exclude_outside"]:
        weights = [m.where(m.logical_and(m.greater_equal(i, 0), m.less(i, n)), w, 0.0)
                   for i, w in zip(index, weights)]
        total = weights[0]
        for w in weights[1:]:
            total = m.add(total, w)
        total = m.where(m.equal(total, 0.0), 1.0, total)
        weights = [m.divide(w, total) for w in weights]
    return [clamp(i) for i in index], weights, extrapolated


def _tables(index: list, weights: list | None):
    """Constant taps as [out, taps] tables without the taps no row uses; weights None when every
    row picks one element (a pure selection: ``index`` then [out, 1])."""
    idx = np.stack(index, axis=1)
    if weights is None:
        return idx, None
    w = np.stack(weights, axis=1)
    keep = np.any(w != 0, axis=0)
    if not keep.any():
        keep[0] = True
    idx, w = idx[:, keep], w[:, keep]
    picks = (np.count_nonzero(w, axis=1) == 1) & (np.abs(w.sum(axis=1) - 1) == 0)
    if picks.all():
        return idx[np.arange(len(idx)), np.argmax(w != 0, axis=1)][:, None], None
    return idx, w


def _resample_axis(ctx: ConvertContext, m, x: relax.Expr, axis: int, out_len, idx, w, extrapolated,
                   extrapolation_value: float) -> relax.Expr:
    """``x`` resampled along ``axis``: one gather of the [out, taps] indices ``idx``, then the
    sum over taps weighted by ``w`` (None: a pure selection, one tap)."""
    bb = ctx.bb
    rank = x.ty.ndim
    shape = dims(x)
    taps = int(idx.shape[1]) if not m.runtime else len(idx)
    if m.runtime:
        idx = bb.normalize(relax.op.stack(idx, axis=1)) if taps > 1 else idx[0]
        w = None if w is None else bb.normalize(relax.op.stack(w, axis=1))
    if w is None and taps == 1:
        y = bb.normalize(relax.op.take(x, m.table(m.reshape(idx, [out_len]), "int64"), axis=axis))
    else:
        flat = m.table(m.reshape(idx, [out_len * taps]), "int64")
        gathered = bb.normalize(relax.op.take(x, flat, axis=axis))
        split = shape[:axis] + [out_len, taps] + shape[axis + 1:]
        gathered = bb.normalize(relax.op.reshape(gathered, relax.ShapeExpr(split)))
        work = str(x.ty.dtype)
        weights = m.table(m.reshape(w, [out_len, taps] + [1] * (rank - axis - 1)), work)
        y = bb.normalize(relax.op.sum(relax.op.multiply(gathered, weights), axis=axis + 1))
    if extrapolated is not None and (m.runtime or extrapolated.any()):
        mask = m.table(m.reshape(extrapolated, [out_len] + [1] * (rank - axis - 1)), "bool")
        y = bb.normalize(relax.op.where(mask, scalar(extrapolation_value, str(y.ty.dtype)), y))
    return y


def _work_dtype(dtype: str) -> str:
    if dtype in ("float32", "float64"):
        return dtype
    if dtype in ("int32", "uint32", "int64", "uint64"):
        return "float64"
    return "float32"  # float16, bfloat16, small integers


def resample(ctx: ConvertContext, m, x: relax.Expr, steps: list, out_shape: list, spec: dict) -> relax.Expr:
    """Resample ``x`` along each of ``steps`` ``(axis, scale, out_len, roi)`` in order."""
    bb = ctx.bb
    dtype = str(x.ty.dtype)
    if any(isinstance(d, int) and d == 0 for d in out_shape):
        return relax.op.zeros(out_shape, dtype)
    if any(isinstance(d, int) and d == 0 for d in dims(x)):
        raise ctx.error(f"cannot resize an empty input of shape {dims(x)} to {out_shape}")
    plans = []
    for axis, scale, out_len, roi in steps:
        n = dims(x)[axis]
        if m.runtime:
            index, weights, extrapolated = _axis_taps(m, n, out_len, scale, roi, spec)
        else:
            with np.errstate(all="ignore"):
                index, weights, extrapolated = _axis_taps(m, n, out_len, scale, roi, spec)
            index, weights = _tables(index, weights)
        plans.append((axis, out_len, index, weights, extrapolated))
    selection_only = all(w is None for *_, w, _ in plans)
    y = x
    if not selection_only and dtype != _work_dtype(dtype):
        y = bb.normalize(relax.op.astype(x, _work_dtype(dtype)))
    for axis, out_len, index, weights, extrapolated in plans:
        y = _resample_axis(ctx, m, y, axis, out_len, index, weights, extrapolated,
                           spec["extrapolation_value"])
    return _cast_back(y, dtype)


# --------------------------------------------------------------------------- Resize


def _resize(ctx: ConvertContext, inputs: list, attrs: Attrs):
    opset = ctx.opset
    inputs = list(inputs) + [None] * 4
    x = inputs[0]
    rank = x.ty.ndim
    in_shape = dims(x)  # symbolic where only axes left alone (a batch) or resized at run time
    if opset < 11:
        roi_e, scales_e, sizes_e = None, inputs[1], None
    else:
        roi_e, scales_e, sizes_e = inputs[1], inputs[2], inputs[3]

    mode = attrs.reject("mode", lambda v: v in ("nearest", "linear", "cubic") and (opset >= 11 or v != "cubic"),
                        "nearest")
    if opset >= 11:
        coord = attrs.reject("coordinate_transformation_mode", lambda v: v in _COORD_MODES, "half_pixel")
        cubic_a = float(attrs.get("cubic_coeff_a", -0.75))
        exclude_outside = bool(attrs.reject("exclude_outside", lambda v: v in (0, 1), 0))
        extrapolation_value = float(attrs.get("extrapolation_value", 0.0))
        nearest_mode = attrs.reject("nearest_mode", lambda v: v in _NEAREST_MODES, "round_prefer_floor")
    else:
        coord, cubic_a, exclude_outside, extrapolation_value, nearest_mode = "asymmetric", -0.75, False, 0.0, None
    if opset >= 18:
        antialias = bool(attrs.reject("antialias", lambda v: v in (0, 1), 0))
        axes = attrs.get("axes", None)
        policy = attrs.reject("keep_aspect_ratio_policy", lambda v: v in ("stretch", "not_larger", "not_smaller"),
                              "stretch")
    else:
        antialias, axes, policy = False, None, "stretch"

    if axes is None:
        axes = list(range(rank))
    else:
        axes = [int(a) for a in axes]
        if any(not -rank <= a < rank for a in axes):
            raise ctx.error(f"axes={axes} out of range for rank {rank}")
        axes = [a + rank if a < 0 else a for a in axes]
        if len(set(axes)) != len(axes):
            raise ctx.error(f"axes={axes} has duplicates")

    spec = {"mode": mode, "coord": coord, "nearest_mode": nearest_mode, "cubic_a": cubic_a,
            "exclude_outside": exclude_outside, "extrapolation_value": extrapolation_value,
            "antialias": antialias and mode != "nearest"}
    scales_e, sizes_e, roi_e = (e if _present(e) else None for e in (scales_e, sizes_e, roi_e))
    if coord != "tf_crop_and_resize" and not rv.is_runtime(scales_e) and not rv.is_runtime(sizes_e):
        axes, scales_e, sizes_e = _keep_symbolic_axes(ctx, in_shape, axes, scales_e, sizes_e, policy)
        if not axes:
            return x  # only symbolic axes, each left as it is
    if any(rv.is_runtime(e) for e in (scales_e, sizes_e, roi_e if coord == "tf_crop_and_resize" else None)) \
            or any(not isinstance(in_shape[a], int) for a in axes):
        if (scales_e is None) == (sizes_e is None):
            raise ctx.error("exactly one of the inputs 'scales' and 'sizes' must be given (non-empty)")
        return _resize_runtime(ctx, x, axes, scales_e, sizes_e, roi_e, policy, spec)
    scales = const_value(ctx, scales_e, "scales")
    sizes = const_value(ctx, sizes_e, "sizes")
    roi = const_value(ctx, roi_e, "roi") if coord == "tf_crop_and_resize" else None
    if (scales is None) == (sizes is None):
        raise ctx.error("exactly one of the inputs 'scales' and 'sizes' must be given (non-empty)")

    full_scales = [1.0] * rank
    out_shape = list(in_shape)
    if scales is not None:
        scales = scales.astype(np.float64).reshape(-1)
        if scales.size != len(axes):
            raise ctx.error(f"input 'scales' has {scales.size} values, expected {len(axes)}")
        if (scales <= 0).any():
            raise ctx.error(f"input 'scales' must be positive, got {scales.tolist()}")
        for a, s in zip(axes, scales):
            full_scales[a] = float(s)
            out_shape[a] = int(s * in_shape[a]) if isinstance(in_shape[a], int) else in_shape[a]  # symbolic: s == 1
    else:
        sizes = sizes.astype(np.int64).reshape(-1)
        if sizes.size != len(axes):
            raise ctx.error(f"input 'sizes' has {sizes.size} values, expected {len(axes)}")
        if (sizes < 0).any():
            raise ctx.error(f"input 'sizes' must be non-negative, got {sizes.tolist()}")
        ratios = [int(s) / in_shape[a] if in_shape[a] else 1.0 for a, s in zip(axes, sizes)]
        if policy == "stretch":
            for a, s, r in zip(axes, sizes, ratios):
                full_scales[a], out_shape[a] = r, int(s)
        else:
            scale = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                full_scales[a], out_shape[a] = scale, int(scale * in_shape[a] + 0.5)

    full_roi = None
    if coord == "tf_crop_and_resize":
        full_roi = [(0.0, 1.0)] * rank
        if roi is not None:
            roi = roi.astype(np.float64).reshape(-1)
            if roi.size != 2 * len(axes):
                raise ctx.error(f"input 'roi' has {roi.size} values, expected {2 * len(axes)}")
            for i, a in enumerate(axes):
                full_roi[a] = (float(roi[i]), float(roi[len(axes) + i]))

    steps = []
    for a in axes:
        scale, n_in, n_out = full_scales[a], in_shape[a], out_shape[a]
        identity = (math.isclose(scale, 1.0) and (n_out is n_in or n_out == n_in)
                    and (full_roi is None or (math.isclose(full_roi[a][0], 0.0) and math.isclose(full_roi[a][1], 1.0))))
        if identity or n_out == 0 or n_in == 0:
            continue
        steps.append((a, scale, n_out, None if full_roi is None else full_roi[a]))
    return resample(ctx, NumpyMath(ctx), x, steps, out_shape, spec)


def _vector(m, expr):
    """A constant or run-time input as a float64 vector."""
    if isinstance(expr, tvm.ir.GenericConst):
        return expr.value.numpy().astype(np.float64).reshape(-1)
    if isinstance(expr, relax.ShapeExpr):
        return np.array([int(v) for v in expr.values], np.float64)
    return m.astype(m.reshape(expr, [-1]), "float64")


def _resize_runtime(ctx: ConvertContext, x: relax.Expr, axes: list[int], scales_e, sizes_e, roi_e,
                    policy: str, spec: dict) -> relax.Expr:
    """Resize with scales, sizes or roi known at run time: the output lengths (fresh symbolic
    dims) computed by the graph as the constant path does in Python, then the same sampling."""
    bb = ctx.bb
    m = RelaxMath(ctx)
    in_len = np.array([_dims(x)[a] for a in axes], np.float64)
    if scales_e is not None:
        scales = _vector(m, scales_e)
        lengths = m.floor(m.multiply(scales, in_len))
    else:
        sizes = _vector(m, sizes_e)
        ratios = m.divide(sizes, in_len)
        if policy == "stretch":
            scales, lengths = ratios, sizes
        else:
            pick = relax.op.min if policy == "not_larger" else relax.op.max
            one = bb.normalize(pick(ratios, axis=0, keepdims=True))
            scales = bb.normalize(relax.op.broadcast_to(one, [len(axes)]))
            lengths = m.floor(m.add(m.multiply(scales, in_len), 0.5))
    lengths = m.astype(lengths, "int64")
    roi = None
    if spec["coord"] == "tf_crop_and_resize":
        roi = _vector(m, roi_e) if roi_e is not None else np.array([0.0] * len(axes) + [1.0] * len(axes))
    steps, out_shape = [], list(dims(x))
    for i, a in enumerate(axes):
        out_shape[a] = rv.scalar_var(bb, m.element(lengths, i), "resized")
        bounds = None if roi is None else (m.element(roi, i), m.element(roi, len(axes) + i))
        steps.append((a, m.element(scales, i), out_shape[a], bounds))
    return resample(ctx, m, x, steps, out_shape, spec)


def _keep_symbolic_axes(ctx: ConvertContext, in_shape: list, axes: list[int], scales_e, sizes_e, policy: str):
    """``(axes, scales, sizes)`` without the symbolic axes (a batch) that the resize leaves as
    they are: scale exactly 1, or a size (a ``ShapeExpr`` element) equal to the input's dim, as
    exporters write ``Concat(Shape(x)[:2], (h, w))``. Any other resize of a symbolic axis goes
    to the run-time path."""
    symbolic = [a for a in axes if not isinstance(in_shape[a], int)]
    if not symbolic:
        return axes, scales_e, sizes_e
    if scales_e is not None and sizes_e is None:
        scales = const_value(ctx, scales_e, "scales")
        if scales is None or scales.size != len(axes):
            return axes, scales_e, sizes_e  # the checks that follow name the problem
        scales = scales.reshape(-1)
        keep = [i for i, a in enumerate(axes) if a not in symbolic or float(scales[i]) != 1.0]
        return [axes[i] for i in keep], relax.const(scales[keep].astype(np.float32), "float32"), None
    if isinstance(sizes_e, relax.ShapeExpr) and scales_e is None and policy == "stretch" \
            and len(sizes_e.values) == len(axes):
        values = list(sizes_e.values)
        same = [a in symbolic and rv.same_dim(v, in_shape[a]) for a, v in zip(axes, values)]
        keep = [i for i in range(len(axes)) if not same[i]]
        if all(isinstance(values[i], tirx.IntImm) for i in keep):
            sizes = np.array([int(values[i]) for i in keep], np.int64)
            return [axes[i] for i in keep], None, relax.const(sizes, "int64")
    return axes, scales_e, sizes_e


def _present(expr) -> bool:
    """An optional input that is given and not an empty tensor."""
    if expr is None:
        return False
    ty = getattr(expr, "ty", None)
    shape = getattr(ty, "shape", None)
    return not (shape is not None and hasattr(shape, "values")
                and any(isinstance(d, tvm.tirx.IntImm) and int(d) == 0 for d in shape.values))


def _cast_back(y: relax.Expr, dtype: str) -> relax.Expr:
    """``y`` in ``dtype``, integers rounded and saturated like the reference."""
    if str(y.ty.dtype) == dtype:
        return y
    if dtype in _INT_DTYPES:
        info = np.iinfo(_INT_DTYPES[dtype])
        y = relax.op.clip(relax.op.round(y), float(info.min), float(info.max))
    return relax.op.astype(y, dtype)


# One entry: the opset-specific differences (10, 11, 13, 18, 19) are handled inside, from ctx.opset.
@converter("Resize", since=10)
def resize_converter(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _resize(ctx, inputs, attrs)


# --------------------------------------------------------------------------- Upsample


def _upsample(ctx: ConvertContext, x: relax.Expr, scales, mode: str):
    rank = x.ty.ndim
    spec = {"mode": mode, "coord": "asymmetric", "nearest_mode": None, "cubic_a": -0.75,
            "exclude_outside": False, "extrapolation_value": 0.0, "antialias": False}
    if rv.is_runtime(scales):
        return _resize_runtime(ctx, x, list(range(rank)), scales, None, None, "stretch", spec)
    in_shape = _dims(x)
    scales = np.asarray(scales, dtype=np.float64).reshape(-1)
    if scales.size != rank:
        raise ctx.error(f"scales has {scales.size} values, expected one per input dim ({rank})")
    if (scales < 1).any():
        raise ctx.error(f"scales must be >= 1, got {scales.tolist()}")
    out_shape = [int(s * d) for s, d in zip(scales, in_shape)]
    steps = [(a, float(scales[a]), out_shape[a], None) for a in range(rank) if scales[a] != 1 and in_shape[a]]
    return resample(ctx, NumpyMath(ctx), x, steps, out_shape, spec)


@converter("Upsample", since=7)
def upsample_7(ctx: ConvertContext, inputs: list, attrs: Attrs):
    mode = attrs.reject("mode", lambda v: v in ("nearest", "linear"), "nearest")
    scales = attrs.get("scales", None)
    if scales is None:
        raise ctx.error("attribute 'scales' is required")
    return _upsample(ctx, inputs[0], scales, mode)


@converter("Upsample", since=9)
def upsample_9(ctx: ConvertContext, inputs: list, attrs: Attrs):
    mode = attrs.reject("mode", lambda v: v in ("nearest", "linear"), "nearest")
    scales = inputs[1] if len(inputs) > 1 else None
    scales = scales if rv.is_runtime(scales) else const_value(ctx, scales, "scales")
    if scales is None:
        raise ctx.error("input 'scales' is required")
    return _upsample(ctx, inputs[0], scales, mode)
