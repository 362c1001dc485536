"""Resize (opsets 10, 11, 13, 18, 19) and Upsample (opsets 7, 9).

TVM's converter needs constant scales/sizes of one exact form, supports 2D/3D only and gives
wrong values for several modes (cubic downsampling, tf_crop_and_resize with axes, antialias).
hetc's converter implements the spec for any rank: Resize is separable, so each resized axis
is resampled on its own, in the order the ONNX reference does it. For each axis the sampling
indices and weights are computed at conversion time in numpy (a port of the reference's
``_interpolate_1d_along_axis``: every ``coordinate_transformation_mode``, nearest with every
``nearest_mode``, linear, cubic with ``cubic_coeff_a``/``exclude_outside``, antialias); the
graph then does one ``take`` along the axis and a weighted sum over the kernel taps. Nearest
sampling (every row one weight of 1) is a single ``take``, exact for every dtype.
``tf_crop_and_resize`` writes ``extrapolation_value`` where the source coordinate is outside
the input.

Scales, sizes and roi decide the output shape and the sampling grid. Constants (initializers,
folded values, inputs frozen with ``constant_inputs=``) take the path above; graph inputs are
resampled with indices and weights computed at run time (``resize_dynamic``). Integer inputs interpolated with
linear/cubic weights are computed in float, rounded and saturated back (the reference's
``saturate_cast``).

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
from .resize_dynamic import resize_runtime

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


# --------------------------------------------------------------------------- coefficients
# Ports of onnx/reference/ops/op_resize.py (ratio in (0, 1]: an integer source coordinate
# prefers the pixel on its left).


def _nearest_coeffs(mode: str):
    def fn(ratio: float, scale: float) -> np.ndarray:
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        if mode == "round_prefer_floor":
            return np.array([ratio <= 0.5, ratio > 0.5], dtype=np.float64)
        if mode == "round_prefer_ceil":
            return np.array([ratio < 0.5, ratio >= 0.5], dtype=np.float64)
        if mode == "floor":
            return np.array([1.0, 0.0])
        return np.array([0.0, 1.0])  # ceil
    return fn


def _linear_coeffs(antialias: bool):
    def fn(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([1 - ratio, ratio])
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        footprint = 2 - 2 * start
        args = (np.arange(start, start + footprint) - ratio) * scale
        coeffs = np.clip(1 - np.abs(args), 0, 1)
        return coeffs / coeffs.sum()
    return fn


def _cubic_coeffs(a: float, antialias: bool):
    def plain(ratio: float, scale: float) -> np.ndarray:
        r, s = ratio, 1 - ratio
        return np.array([
            ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
            ((a + 2) * r - (a + 3)) * r * r + 1,
            ((a + 2) * s - (a + 3)) * s * s + 1,
            ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a,
        ])

    def kernel(x: float) -> float:
        x = abs(x)
        if x <= 1:
            return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
        if x < 2:
            return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a
        return 0.0

    def anti(ratio: float, scale: float) -> np.ndarray:
        scale = min(scale, 1.0)
        i_start = int(np.floor(-2 / scale) + 1)
        coeffs = np.array([kernel(scale * (i - ratio)) for i in range(i_start, 2 - i_start)])
        return coeffs / coeffs.sum()

    return anti if antialias else plain


def _source_coords(mode: str, out_len: int, in_len: int, scale: float, roi) -> tuple[np.ndarray, np.ndarray | None]:
    y = np.arange(out_len, dtype=np.float64)
    out_width = scale * in_len
    extrapolated = None
    if mode == "align_corners":
        x = np.zeros(out_len) if out_width == 1 else y * (in_len - 1) / (out_width - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        lo, hi = roi
        if out_width == 1:
            x = np.full(out_len, (hi - lo) * (in_len - 1) / 2)
        else:
            x = y * (hi - lo) * (in_len - 1) / (out_width - 1)
        x = x + lo * (in_len - 1)
        extrapolated = (x < 0) | (x > in_len - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(out_len, -0.5) if out_width == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "tf_half_pixel_for_nn":
        x = (y + 0.5) / scale
    else:  # half_pixel_symmetric
        offset = in_len / 2 * (1 - out_len / out_width)
        x = offset + (y + 0.5) / scale - 0.5
    return x, extrapolated


def axis_weights(in_len: int, out_len: int, scale: float, get_coeffs, coord_mode: str, roi,
                 exclude_outside: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(indices [out, n] clamped into the input, weights [out, n], extrapolated mask or None)."""
    x, extrapolated = _source_coords(coord_mode, out_len, in_len, scale, roi)
    x_int = np.floor(x)
    ratios = np.where(x == x_int, 1.0, x - x_int)
    coeffs = np.stack([np.asarray(get_coeffs(float(r), scale), dtype=np.float64) for r in ratios])
    n = coeffs.shape[1]
    pad = math.ceil(n / 2)
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        base = -((n - 1) // 2)
        offset = np.where(frac <= 0.5, base, base + 1)
    idx = (p + offset)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((idx < 0) | (idx >= in_len), 0.0, coeffs)
        total = coeffs.sum(axis=-1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, in_len - 1), coeffs, extrapolated


def _simple_nearest(in_len: int, out_len: int, scale: float) -> tuple[np.ndarray, np.ndarray, None]:
    """Pre-opset-11 nearest: asymmetric, floor when upsampling, ceil when downsampling."""
    x = np.arange(out_len, dtype=np.float64) / scale
    idx = np.ceil(x) if scale < 1 else np.floor(x)
    return np.clip(idx.astype(np.int64), 0, in_len - 1)[:, None], np.ones((out_len, 1)), None


# --------------------------------------------------------------------------- graph


def _resample_axis(bb: relax.BlockBuilder, x: relax.Expr, axis: int, idx: np.ndarray, w: np.ndarray,
                   extrapolated: np.ndarray | None, extrapolation_value: float, work_dtype: str) -> relax.Expr:
    """Resample ``x`` (already in ``work_dtype`` unless the weights are a pure selection)."""
    rank = x.ty.ndim
    shape = dims(x)
    out_len = idx.shape[0]
    keep = np.any(w != 0, axis=0)  # drop taps that are never used
    if not keep.any():
        keep[0] = True
    idx, w = idx[:, keep], w[:, keep]
    picks = (np.count_nonzero(w, axis=1) == 1) & (np.abs(w.sum(axis=1) - 1) == 0)
    if picks.all():  # nearest: one exact gather
        sel = idx[np.arange(out_len), np.argmax(w != 0, axis=1)]
        y = bb.normalize(relax.op.take(x, relax.const(sel.astype(np.int64), "int64"), axis=axis))
    else:
        n = idx.shape[1]
        gathered = bb.normalize(relax.op.take(x, relax.const(idx.reshape(-1).astype(np.int64), "int64"), axis=axis))
        split = shape[:axis] + [out_len, n] + shape[axis + 1:]
        gathered = bb.normalize(relax.op.reshape(gathered, split))
        wshape = [out_len, n] + [1] * (rank - axis - 1)
        weights = relax.const(w.reshape(wshape).astype(work_dtype), work_dtype)
        y = bb.normalize(relax.op.sum(relax.op.multiply(gathered, weights), axis=axis + 1))
    if extrapolated is not None and extrapolated.any():
        mshape = [out_len] + [1] * (rank - axis - 1)
        mask = relax.const(extrapolated.reshape(mshape), "bool")
        fill = scalar(extrapolation_value, str(y.ty.dtype))
        y = bb.normalize(relax.op.where(mask, fill, y))
    return y


def _work_dtype(dtype: str) -> str:
    if dtype in ("float32", "float64"):
        return dtype
    if dtype in ("int32", "uint32", "int64", "uint64"):
        return "float64"
    return "float32"  # float16, bfloat16, small integers


def resample(ctx: ConvertContext, x: relax.Expr, plan: list[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]],
             out_shape: list[int], extrapolation_value: float = 0.0) -> relax.Expr:
    """Apply per-axis (axis, indices, weights, extrapolated) resampling in order."""
    bb = ctx.bb
    dtype = str(x.ty.dtype)
    if any(isinstance(d, int) and d == 0 for d in out_shape):
        return relax.op.zeros(out_shape, dtype)
    if any(isinstance(d, int) and d == 0 for d in dims(x)):
        raise ctx.error(f"cannot resize an empty input of shape {dims(x)} to {out_shape}")
    work = _work_dtype(dtype)
    selection_only = all(((np.count_nonzero(w, axis=1) == 1) & (w.sum(axis=1) == 1)).all() for _, _, w, _ in plan)
    y = x
    if not selection_only and dtype != work:
        y = bb.normalize(relax.op.astype(x, work))
    for axis, idx, w, extrapolated in plan:
        y = _resample_axis(bb, y, axis, idx, w, extrapolated, extrapolation_value, work)
    if str(y.ty.dtype) != dtype:
        if dtype in _INT_DTYPES:
            info = np.iinfo(_INT_DTYPES[dtype])
            y = relax.op.clip(relax.op.round(y), float(info.min), float(info.max))
        y = relax.op.astype(y, dtype)
    return y


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

    scales_e, sizes_e, roi_e = (e if _present(e) else None for e in (scales_e, sizes_e, roi_e))
    if coord != "tf_crop_and_resize" and not rv.is_runtime(scales_e) and not rv.is_runtime(sizes_e):
        axes, scales_e, sizes_e = _keep_symbolic_axes(ctx, in_shape, axes, scales_e, sizes_e, policy)
        if not axes:
            return x  # only symbolic axes, each left as it is
    if any(rv.is_runtime(e) for e in (scales_e, sizes_e, roi_e if coord == "tf_crop_and_resize" else None)) \
            or any(not isinstance(in_shape[a], int) for a in axes):
        if (scales_e is None) == (sizes_e is None):
            raise ctx.error("exactly one of the inputs 'scales' and 'sizes' must be given (non-empty)")
        return _cast_back(resize_runtime(
            ctx, x, axes, scales_e, sizes_e, roi_e, mode=mode, coord=coord, nearest_mode=nearest_mode,
            cubic_a=cubic_a, exclude_outside=exclude_outside, extrapolation_value=extrapolation_value,
            antialias=antialias, policy=policy, work_dtype=_run_dtype(str(x.ty.dtype), mode)), str(x.ty.dtype))
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

    if mode == "nearest":
        get_coeffs = _nearest_coeffs(nearest_mode) if nearest_mode else None
    elif mode == "linear":
        get_coeffs = _linear_coeffs(antialias)
    else:
        get_coeffs = _cubic_coeffs(cubic_a, antialias)

    plan = []
    for a in axes:
        scale, n_in, n_out = full_scales[a], in_shape[a], out_shape[a]
        identity = (math.isclose(scale, 1.0) and (n_out is n_in or n_out == n_in)
                    and (full_roi is None or (math.isclose(full_roi[a][0], 0.0) and math.isclose(full_roi[a][1], 1.0))))
        if identity or n_out == 0 or n_in == 0:
            continue
        if get_coeffs is None:
            plan.append((a, *_simple_nearest(n_in, n_out, scale)))
        else:
            plan.append((a, *axis_weights(n_in, n_out, scale, get_coeffs, coord,
                                          None if full_roi is None else full_roi[a], exclude_outside)))
    return resample(ctx, x, plan, out_shape, extrapolation_value)


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


def _run_dtype(dtype: str, mode: str) -> str:
    """The dtype run-time resampling computes in: the input's for nearest (a pure selection)."""
    return dtype if mode == "nearest" else _work_dtype(dtype)


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
    if rv.is_runtime(scales):
        dtype = str(x.ty.dtype)
        return _cast_back(resize_runtime(
            ctx, x, list(range(rank)), scales, None, None, mode=mode, coord="asymmetric", nearest_mode=None,
            cubic_a=-0.75, exclude_outside=False, extrapolation_value=0.0, antialias=False, policy="stretch",
            work_dtype=_run_dtype(dtype, mode)), dtype)
    in_shape = _dims(x)
    scales = np.asarray(scales, dtype=np.float64).reshape(-1)
    if scales.size != rank:
        raise ctx.error(f"scales has {scales.size} values, expected one per input dim ({rank})")
    if (scales < 1).any():
        raise ctx.error(f"scales must be >= 1, got {scales.tolist()}")
    out_shape = [int(s * d) for s, d in zip(scales, in_shape)]
    plan = []
    for a in range(rank):
        if scales[a] == 1 or in_shape[a] == 0:
            continue
        if mode == "nearest":
            plan.append((a, *_simple_nearest(in_shape[a], out_shape[a], float(scales[a]))))
        else:
            plan.append((a, *axis_weights(in_shape[a], out_shape[a], float(scales[a]), _linear_coeffs(False),
                                          "asymmetric", None, False)))
    return resample(ctx, x, plan, out_shape)


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
