"""Reshape with its ``shape`` given at run time (opsets 5 and 14, ``allowzero``).

TVM's converter needs a constant shape (or a ShapeExpr, as shape arithmetic gives); those nodes
are left to it. A run-time shape is resolved at run time as ONNX defines it: a 0 copies the
input's dim at that position (unless ``allowzero``), a -1 takes what is left of the element
count; the result becomes fresh symbolic dims (``runtime_values.shape_vars``).
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from .. import runtime_values as rv
from ..registry import Attrs, ConvertContext, converter
from ..shapes import dims


def _i64(values) -> relax.Expr:
    return relax.const(np.asarray(values, np.int64), "int64")


def runtime_target_shape(bb, x: relax.Expr, shape: relax.Expr, allowzero: bool) -> relax.Expr:
    """Reshape's ``shape`` input with 0 and -1 resolved against ``x``'s shape, at run time."""
    shape = bb.normalize(relax.op.astype(shape, "int64")) if str(shape.ty.dtype) != "int64" else shape
    count, rank = dims(shape)[0], x.ty.ndim
    in_dims = bb.normalize(relax.op.shape_to_tensor(relax.op.shape_of(x)))
    if not allowzero and count:
        padded = in_dims if rank >= count else relax.op.concat([in_dims, _i64(np.ones(count - rank))], axis=0)
        padded = bb.normalize(relax.op.strided_slice(padded, [0], [0], [count]))
        shape = bb.normalize(relax.op.where(relax.op.equal(shape, _i64(0)), padded, shape))
    unknown = bb.normalize(relax.op.equal(shape, _i64(-1)))
    known = bb.normalize(relax.op.prod(relax.op.where(unknown, _i64(1), shape)))
    total = bb.normalize(relax.op.prod(in_dims)) if rank else _i64(1)
    rest = relax.op.floor_divide(total, relax.op.maximum(known, _i64(1)))
    return bb.normalize(relax.op.where(unknown, rest, shape))


def _reshape(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x, shape = inputs[0], inputs[1]
    allowzero = bool(attrs.get("allowzero", 0))
    if not rv.is_runtime(shape) or not isinstance(x.ty, relax.TensorType):
        return NotImplemented  # constant shape, or shape values: TVM's converter
    if not isinstance(dims(shape)[0], int):
        raise ctx.error("the length of input 'shape' must be known at compile time")
    target = runtime_target_shape(ctx.bb, x, shape, allowzero)
    return relax.op.reshape(x, relax.ShapeExpr(rv.shape_vars(ctx.bb, target, "reshape")))


@converter("Reshape", since=5)
def reshape_converter(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _reshape(ctx, inputs, attrs)
