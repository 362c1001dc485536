"""Tile (opsets 6, 13) with repeats not constant.

TVM's converter gives the output fresh dims (``tile_dim_i``, bound by ``R.tensor_to_shape`` +
``match_cast``) unrelated to the input's: torchvision's RAFT tiles its coordinate grid by
``[batch, 1, 1, 1]``, later ops cast those dims to ``batch``, legalizing ``tensor_to_shape``
binds them again, and the substitutions leave a dim no binding defines ("PrimExpr 1024 * (x *
(tile_dim_0 * 49 // x)) ... has not been computed" when the CPU code is generated). Here each
output dim is ``input dim * repeat``: repeats that shape arithmetic gives (a ShapeExpr, which
the importer passes as ``shape_to_tensor``) as they are, run-time ones read with
``runtime_values.shape_vars`` (the VM builtin, bound once). Constant repeats: ``topi.tile``, as
TVM's converter.
"""

from __future__ import annotations

import tvm
from tvm import relax, topi
from tvm.sym.analyzer import Analyzer

from .. import runtime_values as rv
from ..registry import Attrs, ConvertContext, converter


def _is_shape_value(expr) -> bool:
    """``expr`` is ``shape_to_tensor`` of a ShapeExpr (how the importer passes a shape value)."""
    return isinstance(expr, tvm.ir.Call) and isinstance(expr.op, tvm.ir.Op) and \
        expr.op.name == "relax.shape_to_tensor" and isinstance(expr.args[0], relax.ShapeExpr)


@converter("Tile", since=6)
def tile(ctx: ConvertContext, inputs: list, attrs: Attrs):
    data, reps = inputs
    if _is_shape_value(reps):  # known at compile time (shape arithmetic), given as a tensor
        repeats = list(reps.args[0].values)
    elif isinstance(reps, tvm.ir.GenericConst):  # constant: as TVM's converter
        return ctx.bb.emit_te(topi.tile, data, [int(r) for r in reps.value.numpy().reshape(-1)])
    elif rv.is_runtime(reps) and reps.ty.ndim == 1 and hasattr(reps.ty.shape, "values"):
        repeats = rv.shape_vars(ctx.bb, reps, "tile_repeat")
    else:
        raise ctx.error("the repeats must be a 1-D tensor of known length")
    if not hasattr(data.ty.shape, "values"):
        raise ctx.error("the input's shape must be known at compile time")
    shape = list(data.ty.shape.values)
    if len(repeats) != len(shape):
        raise ctx.error(f"{len(repeats)} repeats for a rank-{len(shape)} input (ONNX requires one per axis)")
    analyzer = Analyzer()
    return ctx.bb.emit_te(topi.dyn_tile, data, [analyzer.simplify(d * r) for d, r in zip(shape, repeats)],
                          len(repeats))
