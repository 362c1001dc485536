"""Split (opsets 13, 18) into one part, with the ``split`` sizes given at run time, or constant
sizes of an axis whose extent is symbolic.

TVM's converter needs constant sizes; those nodes are left to it. Run-time sizes become fresh
symbolic dims (``runtime_values.shape_vars``) and each output is a ``strided_slice`` from the
running sum of the sizes before it. Constant sizes of a symbolic axis (a mixture-of-experts
layer splits ``NonZero``'s rows, one per expert hit when traced): TVM gives the last part the
extent ``axis - offset``, not its size, and a later Squeeze of it fails; here the axis is cast to
the sizes' sum (ONNX requires they match; the VM checks it when it runs), so every part has its
static size.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, tirx

from .. import runtime_values as rv
from ..registry import Attrs, ConvertContext, converter
from ..shapes import dims


def _split(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x, sizes = inputs[0], inputs[1] if len(inputs) > 1 else None
    if isinstance(sizes, tvm.ir.GenericConst):
        return _constant_sizes(ctx, x, sizes.value.numpy(), attrs)
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


def _constant_sizes(ctx: ConvertContext, x: relax.Expr, sizes, attrs: Attrs):
    """Constant ``sizes`` along a symbolic axis: the axis cast to their sum, then split."""
    if sizes.ndim != 1 or not len(sizes) or not hasattr(x.ty.shape, "values"):
        return NotImplemented
    rank = x.ty.ndim
    axis = int(attrs.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    attrs.get("num_outputs")  # implied by the sizes' length
    shape = list(x.ty.shape.values)
    if not 0 <= axis < rank or isinstance(shape[axis], tirx.IntImm) or (sizes < 0).any():
        return NotImplemented  # a static axis (or a bad node): TVM's converter and its checks
    shape[axis] = tirx.IntImm("int64", int(sizes.sum()))
    x = x if isinstance(x, relax.Var) else ctx.bb.emit(x)
    x = ctx.bb.match_cast(x, relax.TensorType(shape, x.ty.dtype))  # checked by the VM at run time
    if len(sizes) == 1:
        return relax.Tuple([x])
    return relax.op.split(x, np.cumsum(sizes[:-1]).tolist(), axis)


@converter("Split", since=13)
def split_13(ctx: ConvertContext, inputs: list, attrs: Attrs):
    if ctx.num_outputs == 1:
        # One part: the input. (TVM's ``split`` into one section is typed as a tensor, not a
        # tuple of one, which ConvertLayout's split rule rejects: "Invalid Call" -- every
        # torchvision detector splits its batch of images so, and kept NCHW convs: 30x slower.)
        attrs.get("axis")
        attrs.get("num_outputs")
        return inputs[0]
    return _split(ctx, inputs, attrs)
