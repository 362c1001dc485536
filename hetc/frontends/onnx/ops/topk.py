"""TopK (opset 11) with ``k`` given at run time.

TVM's converter needs a constant ``k``; those nodes are left to it. A run-time ``k`` sorts the
whole axis with the same ``topk`` kernel (so ties order as with a constant ``k``) and keeps
the first ``k`` along the axis, ``k`` a fresh symbolic dim (``runtime_values.scalar_var``).
"""

from __future__ import annotations

from tvm import relax

from .. import runtime_values as rv
from ..registry import Attrs, ConvertContext, converter
from ..shapes import dims


@converter("TopK", since=11)
def topk(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x, k_in = inputs[0], inputs[1]
    if not rv.is_runtime(k_in):
        return NotImplemented
    bb = ctx.bb
    rank = x.ty.ndim
    axis = int(attrs.get("axis", -1))
    axis = axis + rank if axis < 0 else axis
    largest = int(attrs.get("largest", 1))
    attrs.reject("sorted", lambda v: v == 1, 1)
    size = dims(x)[axis]
    k = rv.scalar_var(bb, k_in, "k")
    both = bb.normalize(relax.op.topk(x, size, axis, ret_type="both", largest=bool(largest), dtype="int64"))
    parts = [bb.normalize(relax.TupleGetItem(both, i)) for i in range(2)]
    return relax.Tuple([bb.normalize(relax.op.strided_slice(p, [axis], [0], [k], assume_inbound=True))
                        for p in parts])
