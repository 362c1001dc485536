"""conv2d with an output-channel count no vector width divides: padded to one that does.

The contraction rule's register tile is a number of SIMD vectors wide; where no width of 4 or
more divides the output channels it declines, and TVM's default loop nest runs the conv,
scalar (torchvision's r2plus1d_18 has (2+1)-D "mid planes" of 230, 460 and 921 channels: one
such 3x3 conv took 313 ms of a 420 ms model, 5x onnxruntime, on a 2-core Zen 5, AVX-512). Its column padding
(``Schedule.pad_einsum``) needs plain einsum indices, which a conv's strided window is not.

So here, before the kernels exist, such a conv (NHWC/OHWI, ``groups == 1``, a compile-time
constant weight, float) gets zero filters appended up to a multiple of the CPU's float32
vector width (8 with AVX2, 16 with AVX-512), and its output is sliced back to the real
channels. The extra filters cost less than a vector of multiply-adds per row.

A depthwise conv (``groups`` == input == output channels, ``[C, kh, kw, 1]``) whose channels no
vector width divides is declined by the sliding-window rule, and the contraction rule's tile
for it was the slowest kernel of timm's ReXNet (channels 162, 228, 300, ...: one 24x24x162
3x3 layer 3.9 ms, 40x its sliding-window time; 2-core Zen 5, AVX-512). Its input gets zero channels appended too
(the copy is a pad, inlined by the sliding-window rule), the groups grow with them, and the
output is sliced back.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ...passes.pipeline import call_rewrite_pass, out_dtype

SMALLEST = 8  # fewer output channels are left alone (padding would multiply the work)


def pad_outputs(call: relax.Call, width: int) -> relax.Expr | None:
    """The form of a ``relax.nn.conv2d`` call with its outputs padded to a multiple of
    ``width``, or None where it does not apply."""
    attrs = call.attrs
    x, w = call.args
    if ((str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != ("NHWC", "OHWI", "NHWC")
            or not isinstance(w, tvm.ir.GenericConst)):
        return None
    weight = w.value.numpy()
    outputs, groups = weight.shape[0], int(attrs.groups)
    depthwise = groups == outputs and weight.shape[3] == 1 and _channels(x) == outputs
    if groups != 1 and not depthwise:
        return None
    if weight.dtype.kind != "f" or outputs < SMALLEST or outputs % (width if depthwise else 4) == 0:
        return None  # (a width of 4 divides it: the contraction rule takes it as it is)
    extra = -outputs % width
    padded = np.concatenate([weight, np.zeros((extra, *weight.shape[1:]), weight.dtype)])
    if depthwise:
        x = relax.op.nn.pad(x, [0, 0, 0, 0, 0, 0, 0, extra])
    conv = relax.op.nn.conv2d(x, relax.const(padded), attrs.strides, attrs.padding, attrs.dilation,
                              outputs + extra if depthwise else 1, "NHWC", "OHWI", "NHWC", out_dtype=out_dtype(attrs))
    return relax.op.strided_slice(conv, axes=[3], begin=[0], end=[outputs], assume_inbound=True)


def _channels(x: relax.Expr) -> int | None:
    shape = getattr(x.ty, "shape", None)
    last = shape.values[-1] if hasattr(shape, "values") else None
    return int(last) if isinstance(last, tvm.tirx.IntImm) else None


def ragged_conv_pass(width: int) -> tvm.transform.Pass:
    """``pad_outputs`` on every conv2d, ``width`` the float32 lanes of a vector."""
    return call_rewrite_pass("HetcRaggedConvOutputs", "relax.nn.conv2d", lambda call: pad_outputs(call, width))
