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

from collections.abc import Callable

import numpy as np
import tvm
from tvm import relax

from ...passes.pipeline import call_rewrite_pass, out_dtype

SMALLEST = 8  # fewer output channels are left alone (padding would multiply the work)
WIDER = 1.15  # output widths are padded by at most this factor (ragged rows, below)


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


def pad_width(call: relax.Call, lanes: int, row_score: Callable[[int, int, int, int], float]) -> relax.Expr | None:
    """The form of a static-shape conv2d (NHWC) whose output width leaves no good register
    tile, computed over a wider output and sliced back; None where it does not apply.

    The contraction tile's rows must be a box in the output's ``oh x ow`` (``gemm.is_box``):
    a divisor of ``ow`` or whole rows of it. At 17x17 (Inception-v3's middle stage, DeepLabV3's
    ASPP at 65x65/4) that is one row, each weight vector reloaded per output pixel: a 960->256
    3x3 conv ran 3.7x onnxruntime (24.4 ms; 2-core Zen 5, AVX-512, LLVM ``znver5``). With
    the input padded on the right (zeros, in the conv's own padding) the output is
    ``ow' <= WIDER * ow`` wide, ``ow'`` chosen for the best tile score with the extra columns
    counted as waste, and the slice drops them. ``row_score(oh, ow, channels, lanes)`` scores
    the best tile (``schedules.gemm.conv_row_score``)."""
    attrs = call.attrs
    x, w = call.args
    if (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != ("NHWC", "OHWI", "NHWC"):
        return None
    out_shape = getattr(getattr(call.ty, "shape", None), "values", None)
    if out_shape is None or not all(isinstance(d, tvm.tirx.IntImm) for d in out_shape[1:]):
        return None
    if str(call.ty.dtype) != "float32" or int(attrs.groups) != 1:
        return None
    _, oh, ow, outputs = (int(d) if isinstance(d, tvm.tirx.IntImm) else d for d in out_shape)
    columns = outputs if outputs % 4 == 0 else outputs + (-outputs % lanes)
    now = row_score(oh, ow, columns, lanes)
    best, wider = now, ow
    for width in range(ow + 1, int(ow * WIDER) + 1):
        score = row_score(oh, width, columns, lanes) * ow / width
        if score > best:
            best, wider = score, width
    if best <= 1.25 * now:
        return None
    top, left, bottom, right = (int(v) for v in attrs.padding)
    right += (wider - ow) * int(attrs.strides[1])
    conv = relax.op.nn.conv2d(x, w, attrs.strides, [top, left, bottom, right], attrs.dilation, 1, "NHWC", "OHWI",
                              "NHWC", out_dtype=out_dtype(attrs))
    return relax.op.strided_slice(conv, axes=[2], begin=[0], end=[ow], assume_inbound=True)


def _channels(x: relax.Expr) -> int | None:
    shape = getattr(x.ty, "shape", None)
    last = shape.values[-1] if hasattr(shape, "values") else None
    return int(last) if isinstance(last, tvm.tirx.IntImm) else None


def ragged_conv_pass(width: int, row_score: Callable[[int, int, int, int], float]) -> tvm.transform.Pass:
    """``pad_width`` then ``pad_outputs`` on every conv2d, ``width`` the float32 lanes of a vector."""

    def rewrite(call: relax.Call) -> relax.Expr | None:
        wider = pad_width(call, width, row_score)
        if wider is not None:
            conv = wider.args[0]
            padded = pad_outputs(conv, width)
            return wider if padded is None else relax.op.strided_slice(
                padded, axes=[2], begin=[0], end=[int(call.ty.shape.values[2])], assume_inbound=True)
        return pad_outputs(call, width)

    return call_rewrite_pass("HetcRaggedConvOutputs", "relax.nn.conv2d", rewrite)
