"""AffineGrid (opset 20) with ``size`` given at run time.

TVM's converter needs a constant ``size``; those nodes are left to it. A run-time ``size``
(``[N, C, H, W]`` or ``[N, C, D, H, W]``) becomes fresh symbolic dims (``relax.image.affine_grid``
needs static ones), and the grid is built as ONNX's reference builds it: per spatial axis of
length ``L`` the normalised coordinates ``-1 + 2 i / (L - 1)`` (``align_corners``) or
``(2 i + 1) / L - 1``, a base grid ``(x, y[, z], 1)`` over every position, multiplied by ``theta``.
"""

from __future__ import annotations

from tvm import relax

from .. import runtime_values as rv
from ..registry import Attrs, ConvertContext, converter
from ..shapes import dims


@converter("AffineGrid", since=20)
def affine_grid(ctx: ConvertContext, inputs: list, attrs: Attrs):
    theta, size = inputs[0], inputs[1]
    if not rv.is_runtime(size):
        return NotImplemented
    align_corners = bool(attrs.get("align_corners", 0))
    count = dims(size)[0]
    if count not in (4, 5):
        raise ctx.error("input 'size' must be [N, C, H, W] or [N, C, D, H, W]")
    bb = ctx.bb
    spatial = rv.shape_vars(bb, size, "grid")[2:]
    dtype = str(theta.ty.dtype)
    nd = len(spatial)

    def coords(axis: int) -> relax.Expr:
        """Normalised coordinates along spatial ``axis``, shaped to broadcast over the grid."""
        length = spatial[axis]
        i = relax.op.arange(0, length, 1, dtype)
        span = relax.op.astype(relax.op.shape_to_tensor(relax.ShapeExpr([length])), dtype)
        one = relax.const(1.0, dtype)
        if align_corners:
            c = relax.op.subtract(relax.op.divide(relax.op.multiply(i, relax.const(2.0, dtype)),
                                                  relax.op.maximum(relax.op.subtract(span, one), one)), one)
        else:
            c = relax.op.subtract(relax.op.divide(relax.op.add(relax.op.multiply(i, relax.const(2.0, dtype)), one),
                                                  span), one)
        shape = [1] * nd
        shape[axis] = length
        column = bb.normalize(relax.op.reshape(bb.normalize(c), relax.ShapeExpr(shape)))
        return bb.normalize(relax.op.broadcast_to(column, relax.ShapeExpr(spatial)))

    parts = [coords(a) for a in reversed(range(nd))]  # x (the last axis) first
    parts.append(bb.normalize(relax.op.ones(relax.ShapeExpr(spatial), dtype)))
    base = bb.normalize(relax.op.concat([relax.op.expand_dims(p, [nd]) for p in parts], axis=nd))
    total = spatial[0]
    for d in spatial[1:]:
        total = total * d
    base = bb.normalize(relax.op.reshape(base, relax.ShapeExpr([total, nd + 1])))
    out = bb.normalize(relax.op.matmul(base, relax.op.permute_dims(theta, [0, 2, 1])))  # [N, positions, nd]
    return relax.op.reshape(out, relax.ShapeExpr([dims(theta)[0], *spatial, nd]))
