"""A grouped conv2d as one kernel: the groups a batch axis of one contraction.

``passes/grouped_conv.py`` splits a grouped conv into one conv per group (a kernel call each,
then a concat). With RegNet's group width of 8 and up to 55 groups a layer, the calls cost
more than the arithmetic: timm's RegNet ran 276 one-group kernels, 1.6x onnxruntime (2-core
Zen 5, LLVM ``znver5``, AVX-512). On the CPU a grouped conv (NHWC/OHWI, float32) is instead
lowered here to one TE compute

    out[n, g, oh, ow, o] = sum_{kh, kw, i} x[n, oh*s + kh*d, ow*s + kw*d, g*gi + i] * w[g, o, kh, kw, i]

with the weight rearranged by group at compile time. ``g`` indexes both operands, so the
contraction rule (``schedules/gemm.py``) takes it as a batch axis, like a batched matmul's:
rows ``n, oh, ow`` (the window copied in the kernel), columns ``o``. The output is then read
back as ``[n, oh, ow, g*go + o]`` in the same kernel, with the bias and activation.

A group whose outputs fill less than a vector (RegNet's 8 on AVX-512, ResNeXt's 4) is merged
with its neighbours into one block-diagonal group (``merged_groups``), which costs no extra
vector instructions. Wide groups (``MIN_SPLIT_WIDTH`` input channels or more) are still split
before the layout passes: each part is an ordinary conv, big enough for the plain conv tile.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te, tirx, topi

from ...passes.pipeline import out_dtype

MIN_SPLIT_WIDTH = 64


def takes_whole(call: relax.Call) -> bool:
    """Whether the CPU's grouped kernel takes this grouped ``relax.nn.conv2d`` (any layout):
    float32, static shapes, 2..``MIN_SPLIT_WIDTH - 1`` input channels a group. The split pass
    leaves these whole (``passes/grouped_conv.split_groups``' ``keep``)."""
    attrs = call.attrs
    x, w = call.args
    groups = int(attrs.groups)
    w_shape = getattr(getattr(w.ty, "shape", None), "values", None)
    x_shape = getattr(getattr(x.ty, "shape", None), "values", None)
    if groups <= 1 or w_shape is None or x_shape is None or not all(isinstance(d, tirx.IntImm) for d in w_shape):
        return False
    kernel, data = str(attrs.kernel_layout), str(attrs.data_layout)
    outputs, width = int(w_shape[kernel.index("O")]), int(w_shape[kernel.index("I")])
    channels = x_shape[data.index("C")]
    if not isinstance(channels, tirx.IntImm) or int(channels) != width * groups or outputs % groups:
        return False
    if width == 1 or width >= MIN_SPLIT_WIDTH:
        return False  # depthwise (its own kernel) / wide groups (split into plain convs)
    return str(x.ty.dtype) == str(w.ty.dtype) == "float32" and out_dtype(attrs) in (None, "float32")


def applies(call: relax.Call) -> bool:
    """Whether ``call`` is a grouped conv this lowers: ``takes_whole``, in NHWC/OHWI."""
    layouts = (str(call.attrs.data_layout), str(call.attrs.kernel_layout), str(call.attrs.out_layout))
    return layouts == ("NHWC", "OHWI", "NHWC") and takes_whole(call)


def grouped_conv2d_nhwc(x: te.Tensor, w: te.Tensor, strides, padding, dilation, groups: int) -> te.Tensor:
    """The TE compute of a grouped NHWC/OHWI conv2d, through a ``[n, oh, ow, group, o]`` contraction."""
    n, h, wd, _ = x.shape
    _, per_group, kh, kw, width = (int(v) for v in w.shape)
    outputs = groups * per_group
    (sh, sw), (dh, dw) = (int(v) for v in strides), (int(v) for v in dilation)
    top, left, bottom, right = (int(v) for v in padding)
    if top or left or bottom or right:
        x = topi.nn.pad(x, [0, top, left, 0], [0, bottom, right, 0], name="pad_temp")
    oh = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + left + right - (kw - 1) * dw - 1) // sw + 1
    rh, rw, ri = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw"), te.reduce_axis((0, width), "rc")
    out = te.compute(
        (n, groups, oh, ow, per_group),
        lambda b, g, y, z, o: te.sum(x[b, y * sh + rh * dh, z * sw + rw * dw, g * width + ri]
                                     * w[g, o, rh, rw, ri], axis=[rh, rw, ri]),
        name="grouped_conv")
    return te.compute((n, oh, ow, outputs), lambda b, y, z, c: out[b, c // per_group, y, z, c % per_group],
                      name="T_reshape")


def block_diagonal(weight: np.ndarray, groups: int, merge: int) -> np.ndarray:
    """An OHWI grouped-conv weight as ``[groups / merge, merge * o, kh, kw, merge * i]``: each
    ``merge`` consecutive groups one group whose weight is block-diagonal (zeros between them)."""
    outputs, kh, kw, width = weight.shape
    per_group = outputs // groups
    by_group = weight.reshape(groups // merge, merge, per_group, kh, kw, width)
    out = np.zeros((groups // merge, merge, per_group, kh, kw, merge, width), weight.dtype)
    for k in range(merge):
        out[:, k, :, :, :, k, :] = by_group[:, k]
    return out.reshape(groups // merge, merge * per_group, kh, kw, merge * width)


def merged_groups(groups: int, per_group: int, lanes: int) -> int:
    """How many consecutive groups to merge so that a group's outputs fill a vector: the
    largest divisor ``k`` of ``groups`` with ``k * per_group <= lanes``. Each multiply-add of
    the merged (block-diagonal) group is a whole vector where the unmerged one used
    ``per_group`` of its lanes, so the vector instructions do not grow: RegNet's 8 outputs a
    group on AVX-512 (16 lanes) merge in pairs, ResNeXt's 4 in fours."""
    return max((k for k in range(1, groups + 1) if groups % k == 0 and k * per_group <= lanes), default=1)


def legalization(lanes: int):
    """``relax.nn.conv2d``'s CPU lowering for ``lanes`` float32 lanes a vector: grouped convs
    through ``grouped_conv2d_nhwc`` (groups merged where their outputs are fewer than a
    vector and the weight is a constant), the rest TVM's own."""

    def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        if not applies(call):
            return call.op.get_attr("FLegalize")(bb, call)
        attrs = call.attrs
        groups = int(attrs.groups)
        outputs, kh, kw, width = (int(v) for v in call.args[1].ty.shape.values)
        if isinstance(call.args[1], tvm.ir.GenericConst):
            merge = merged_groups(groups, outputs // groups, lanes)
            weight = relax.const(block_diagonal(call.args[1].value.numpy(), groups, merge))
            groups //= merge
        else:  # a run-time weight: by group, [g, o, kh, kw, i] (a reshape kernel)
            weight = bb.emit(bb.call_te(topi.reshape, call.args[1], (groups, outputs // groups, kh, kw, width),
                                        primfunc_name_hint="reshape"))
        return bb.call_te(grouped_conv2d_nhwc, call.args[0], weight, attrs.strides, attrs.padding, attrs.dilation,
                          groups, primfunc_name_hint="grouped_conv2d")

    return legalize
