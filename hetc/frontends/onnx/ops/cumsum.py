"""CumSum (opsets 11, 14) with its ``axis`` given at run time.

TVM's converter needs a constant axis; those nodes are left to it. A run-time axis does not
change the output shape, so every axis is computed and ``where`` picks the one the value names
(``runtime_values.per_axis``); ``exclusive`` and ``reverse`` (a flip around the scan) as ONNX.
"""

from __future__ import annotations

from tvm import relax

from .. import runtime_values as rv
from ..registry import Attrs, ConvertContext, converter


@converter("CumSum", since=11)
def cumsum(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x, axis = inputs[0], inputs[1]
    if not rv.is_runtime(axis):
        return NotImplemented
    exclusive = attrs.reject("exclusive", lambda v: v in (0, 1), 0)
    reverse = attrs.reject("reverse", lambda v: v in (0, 1), 0)
    rank = x.ty.ndim
    if rank == 0:
        return x

    def along(a: int) -> relax.Expr:
        y = relax.op.flip(x, a) if reverse else x
        y = ctx.bb.normalize(relax.op.cumsum(y, axis=a, exclusive=bool(exclusive)))
        return relax.op.flip(y, a) if reverse else y

    return rv.per_axis(ctx.bb, axis, rank, along, label=ctx.label)
