"""Squeeze (opsets 1, 11, 13) of axes whose extent only the run time knows.

TVM's converter refuses a symbolic extent ("cannot be proven to be 1"), yet ONNX models squeeze
them: a mixture-of-experts layer squeezes one row of ``NonZero``'s output (a data-dependent
count), a dynamic-shape model a dim that is 1 for every valid input. Such an axis is cast to 1
(a ``match_cast``: the VM checks it when it runs, as onnxruntime does) and then squeezed; a
static extent other than 1 is refused. Constant data, shape values and squeezing every unit
dim (no axes) are left to TVM's converter.
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx

from ..registry import Attrs, ConvertContext, converter
from ..shapes import dims


def _squeeze(ctx: ConvertContext, x: relax.Expr, axes) -> relax.Expr:
    if axes is None or isinstance(x, (tvm.ir.GenericConst, relax.ShapeExpr)) or not isinstance(
            getattr(x, "ty", None), relax.TensorType) or not hasattr(x.ty.shape, "values"):
        return NotImplemented
    shape = dims(x)
    rank = len(shape)
    axes = sorted({int(a) + rank if int(a) < 0 else int(a) for a in axes})
    if any(not 0 <= a < rank for a in axes):
        raise ctx.error(f"axes {axes} out of range for a rank-{rank} input")
    unknown = [a for a in axes if not isinstance(shape[a], int)]
    for a in axes:
        if isinstance(shape[a], int) and shape[a] != 1:
            raise ctx.error(f"axis {a} has size {shape[a]}; only axes of size 1 can be squeezed")
    if not unknown:
        return NotImplemented  # static unit axes: TVM's converter
    cast = [tirx.IntImm("int64", 1) if i in unknown else d for i, d in enumerate(x.ty.shape.values)]
    x = x if isinstance(x, relax.Var) else ctx.bb.emit(x)
    x = ctx.bb.match_cast(x, relax.TensorType(cast, x.ty.dtype))  # checked by the VM at run time
    return relax.op.squeeze(x, axes)


@converter("Squeeze", since=1)
def squeeze_1(ctx: ConvertContext, inputs: list, attrs: Attrs):
    axes = attrs.get("axes")
    return _squeeze(ctx, inputs[0], list(axes) if axes is not None else None)


@converter("Squeeze", since=13)
def squeeze_13(ctx: ConvertContext, inputs: list, attrs: Attrs):
    axes = inputs[1] if len(inputs) > 1 else None
    if axes is not None and not isinstance(axes, tvm.ir.GenericConst):
        return NotImplemented  # run-time axes: TVM's converter
    return _squeeze(ctx, inputs[0], None if axes is None else axes.value.numpy().reshape(-1).tolist())
