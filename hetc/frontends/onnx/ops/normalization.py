"""Normalization ops: LayerNormalization, RMSNormalization.

LayerNormalization: TVM's converter returns placeholder constants for the optional Mean and
InvStdDev outputs, ignores ``stash_type`` and requires scale to have the full normalized
shape; this one implements the spec (opset 17): ``axis`` (negative allowed), ``epsilon``,
``stash_type``, broadcastable Scale/B, and all three outputs.

RMSNormalization: TVM's converter emits ``relax.nn.rms_norm`` for every axis, which fails to
build when the reduction covers all dimensions (axis 0), and casts Scale into the stash type.
This one follows the spec's function body (opset 23): X is cast to ``stash_type``, normalized
there, cast back to X's dtype, then multiplied by a broadcastable Scale.
"""

from __future__ import annotations

from tvm import relax

from ..registry import Attrs, ConvertContext, converter
from ..shapes import dims as _dims
from ..shapes import is_static

_STASH_DTYPES = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}




def _normalized_axes(ctx: ConvertContext, x: relax.Expr, attrs: Attrs) -> list[int]:
    rank = x.ty.ndim
    axis = int(attrs.get("axis", -1))
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is out of range for rank {rank}")
    return list(range(axis % rank, rank))


@converter("LayerNormalization", since=17)
def layer_normalization(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    epsilon = float(attrs.get("epsilon", 1e-5))
    stash = attrs.reject("stash_type", lambda v: v in _STASH_DTYPES, 1)
    axes = _normalized_axes(ctx, x, attrs)
    axis = axes[0]
    dtype = x.ty.dtype
    full = _dims(x)[axis:]  # normalized dims: static in every model seen, symbolic allowed
    simple_scale = is_static(full) and _dims(scale) == full and (bias is None or _dims(bias) == full)
    if ctx.num_outputs == 1 and simple_scale and _STASH_DTYPES[stash] == dtype:
        if bias is None:
            bias = relax.op.zeros(relax.ShapeExpr(full), dtype)
        return relax.op.nn.layer_norm(x, scale, bias, axes, epsilon)

    # Spec decomposition, computed in the stash type.
    bb, stash_dtype = ctx.bb, _STASH_DTYPES[stash]
    xs = bb.normalize(relax.op.astype(x, stash_dtype)) if stash_dtype != dtype else x
    mean = bb.normalize(relax.op.mean(xs, axes, keepdims=True))
    centered = bb.normalize(relax.op.subtract(xs, mean))
    var = relax.op.mean(relax.op.multiply(centered, centered), axes, keepdims=True)
    inv_std = bb.normalize(
        relax.op.rsqrt(relax.op.add(var, relax.const(epsilon, stash_dtype)))
    )
    normalized = relax.op.multiply(centered, inv_std)
    if stash_dtype != dtype:
        normalized = relax.op.astype(normalized, dtype)
    y = relax.op.multiply(normalized, scale)
    if bias is not None:
        y = relax.op.add(y, bias)
    if ctx.num_outputs <= 1:
        return y
    return relax.Tuple([y, mean, inv_std][: ctx.num_outputs])


@converter("RMSNormalization", since=23)
def rms_normalization(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x, scale = inputs[0], inputs[1]
    epsilon = float(attrs.get("epsilon", 1e-5))
    stash = attrs.reject("stash_type", lambda v: v in _STASH_DTYPES, 1)
    axes = _normalized_axes(ctx, x, attrs)
    dtype, stash_dtype = x.ty.dtype, _STASH_DTYPES[stash]
    full = _dims(x)[axes[0]:]
    # relax.nn.rms_norm is exact when nothing is cast, and builds only when some axis is kept.
    if axes[0] > 0 and stash_dtype == dtype == scale.ty.dtype and _dims(scale) == full:
        return relax.op.nn.rms_norm(x, scale, axes, epsilon)

    bb = ctx.bb
    xs = bb.normalize(relax.op.astype(x, stash_dtype)) if stash_dtype != dtype else x
    mean_square = relax.op.mean(relax.op.multiply(xs, xs), axes, keepdims=True)
    inv_rms = relax.op.rsqrt(relax.op.add(mean_square, relax.const(epsilon, stash_dtype)))
    normalized = relax.op.multiply(xs, inv_rms)
    if stash_dtype != dtype:
        normalized = relax.op.astype(normalized, dtype)
    if scale.ty.dtype != dtype:  # Y has Scale's type
        normalized = relax.op.astype(normalized, scale.ty.dtype)
    return relax.op.multiply(normalized, scale)
