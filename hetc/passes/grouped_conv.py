"""A grouped conv2d as one conv2d per group, concatenated.

hetc's conv2d schedules (register-blocked micro-kernels, packed weights, Winograd) and its
depthwise kernel cover ``groups == 1`` and ``groups == channels``; a conv in between (ResNeXt's
32 groups, RegNet's group width 8-16) got TVM's default loop nest: 5-26x onnxruntime per layer
(a 64-channel, 4-group 3x3 conv at 28x28: 26x). Split into its groups, each is an ordinary
conv2d on a channel slice (the weight slices fold at compile time), and the outputs are
concatenated on the channel axis: 1.3-2.2x onnxruntime on the same layers (docs/cpu.md).

Applies to NCHW/OIHW and NHWC/OHWI convs with ``1 < groups < in_channels`` and at most ``MAX_GROUPS``
groups (each group is a kernel call); a symbolic batch is fine. A depthwise conv with a channel
multiplier (``groups == in_channels``, ``m * in_channels`` outputs: timm's PiT pools so, 5x
onnxruntime on TVM's generic loop nest, 2-core Zen 5, AVX-512) becomes a plain depthwise conv on the input with each
channel repeated ``m`` times.
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import relax, tirx

from .pipeline import call_rewrite_pass, out_dtype

MAX_GROUPS = 64


def split_groups(call: relax.Call, keep: Callable[[relax.Call], bool] | None = None) -> relax.Expr | None:
    """The per-group form of a grouped ``relax.nn.conv2d`` call, or None where it does not apply
    or ``keep(call)`` says the target has a kernel for it whole (the CPU's
    ``backends/cpu/grouped_conv.takes_whole``)."""
    attrs = call.attrs
    groups = int(attrs.groups)
    x, w = call.args
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    if groups <= 1 or layouts not in (("NCHW", "OIHW", "NCHW"), ("NHWC", "OHWI", "NHWC")):
        return None
    if not (hasattr(getattr(x.ty, "shape", None), "values") and hasattr(getattr(w.ty, "shape", None), "values")):
        return None
    axis = layouts[0].index("C")
    channels, outputs = x.ty.shape.values[axis], w.ty.shape.values[0]
    if not isinstance(channels, tirx.IntImm) or not isinstance(outputs, tirx.IntImm):
        return None
    if int(channels) == groups:
        if int(outputs) == groups or int(outputs) % groups:
            return None  # depthwise: hetc's sliding-window kernel
        # a depthwise conv with a channel multiplier m (PiT's pooling: 2 outputs per channel):
        # each input channel repeated m times (output o reads channel o // m), then depthwise
        return relax.op.nn.conv2d(relax.op.repeat(x, int(outputs) // groups, axis=axis), w, attrs.strides,
                                  attrs.padding, attrs.dilation, int(outputs), *layouts, out_dtype=out_dtype(attrs))
    if groups > MAX_GROUPS or (keep is not None and keep(call)):
        return None
    xs, ws = relax.op.split(x, groups, axis=axis), relax.op.split(w, groups, axis=0)
    parts = [relax.op.nn.conv2d(relax.TupleGetItem(xs, g), relax.TupleGetItem(ws, g), attrs.strides, attrs.padding,
                                attrs.dilation, 1, *layouts, out_dtype=out_dtype(attrs)) for g in range(groups)]
    return relax.op.concat(parts, axis=axis)


def split_grouped_conv_pass(keep: Callable[[relax.Call], bool] | None = None) -> tvm.transform.Pass:
    """``split_groups`` on every conv2d."""
    return call_rewrite_pass("HetcSplitGroupedConv", "relax.nn.conv2d", lambda call: split_groups(call, keep))
