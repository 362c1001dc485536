"""Split (opsets 13, 18) with the ``split`` sizes given at run time.

TVM's converter needs constant sizes; those nodes are left to it. Run-time sizes become fresh
symbolic dims (``runtime_values.shape_vars``) and each output is a ``strided_slice`` from the
running sum of the sizes before it.
"""

from __future__ import annotations

from tvm import relax, tirx

from .. import runtime_values as rv
from ..registry import Attrs, ConvertContext, converter
from ..shapes import dims


def _split(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x, sizes = inputs[0], inputs[1] if len(inputs) > 1 else None
    if not rv.is_runtime(sizes) or 0 in dims(sizes):
        return NotImplemented
    rank = x.ty.ndim
    axis = int(attrs.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    attrs.get("num_outputs")  # implied by the sizes' length
    parts, begin = [], tirx.const(0, "int64")
    for size in rv.shape_vars(ctx.bb, sizes, "split"):
        part = relax.op.strided_slice(x, [axis], [begin], [begin + size], assume_inbound=True)
        parts.append(ctx.bb.normalize(part))
        begin = begin + size
    return relax.Tuple(parts)


@converter("Split", since=13)
def split_13(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _split(ctx, inputs, attrs)
