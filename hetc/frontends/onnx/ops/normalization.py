"""Normalization ops: LayerNormalization.

TVM's converter returns placeholder constants for the optional Mean and InvStdDev outputs,
ignores ``stash_type`` and requires scale to have the full normalized shape; this one
implements the spec (opset 17): ``axis`` (negative allowed), ``epsilon``, ``stash_type``,
broadcastable Scale/B, and all three outputs.
"""

from __future__ import annotations

from tvm import relax

from ..registry import Attrs, ConvertContext, converter

_STASH_DTYPES = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}


def _dims(expr: relax.Expr) -> list[int]:
    return [int(d) for d in expr.ty.shape.values]


@converter("LayerNormalization", since=17)
def layer_normalization(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    epsilon = float(attrs.get("epsilon", 1e-5))
    stash = attrs.reject("stash_type", lambda v: v in _STASH_DTYPES, 1)
    rank = x.ty.ndim
    axis = int(attrs.get("axis", -1))
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    axes = list(range(axis, rank))
    dtype = x.ty.dtype
    full = _dims(x)[axis:]
    simple_scale = _dims(scale) == full and (bias is None or _dims(bias) == full)
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
