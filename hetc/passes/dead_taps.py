"""Drop the kernel taps of a conv2d that read only padding, for every output.

A dilated conv on a small feature map reads mostly zeros: DeepLabV3's ASPP convs (3x3,
dilation 12, 24 and 36) on torchvision's 64x64 input see an 8x8 map, where every tap but the
centre lands in the padding for all outputs; the conv is a 1x1 conv in disguise, computed as
nine times the work (DeepLabV3-MobileNetV3's TorchScript export ran 2.13x onnxruntime, 1.00x
with this and the round's other changes; 2-core Zen 5, LLVM ``znver5``, AVX-512). Such taps are dropped here: the kernel is cut to its
live taps along each spatial axis and the padding shifted so that every output reads what it
read before. Exact: a dropped tap only ever multiplied zeros.

A tap ``t`` of an axis is dead when ``o*stride + t*dilation - pad_before`` is outside
``[0, size)`` for every output ``o``; only runs of dead taps at the kernel's ends are dropped
(a dead tap between live ones would change the dilation). Static spatial sizes only; the
batch may be symbolic. A cut that would need a negative padding is not made.
"""

from __future__ import annotations

from tvm import relax, tirx

from .pipeline import call_rewrite_pass, out_dtype


def live_taps(size: int, kernel: int, stride: int, dilation: int, before: int, after: int) -> tuple[int, int]:
    """The first and last live tap of one axis (``first > last``: none)."""
    outputs = (size + before + after - dilation * (kernel - 1) - 1) // stride + 1
    live = [t for t in range(kernel)
            if any(0 <= o * stride + t * dilation - before < size for o in range(outputs))]
    return (live[0], live[-1]) if live else (kernel, -1)


def _static(values) -> list[int] | None:
    return [int(v) for v in values] if all(isinstance(v, tirx.IntImm) for v in values) else None


def drop_dead_taps(call: relax.Call) -> relax.Expr | None:
    """The conv2d ``call`` with its dead end taps dropped, or None when it has none."""
    attrs = call.attrs
    x, w = call.args
    data_layout, kernel_layout = str(attrs.data_layout), str(attrs.kernel_layout)
    if sorted(data_layout) != sorted("NCHW") or sorted(kernel_layout) != sorted("OIHW"):
        return None
    x_shape = getattr(getattr(x.ty, "shape", None), "values", None)
    w_shape = getattr(getattr(w.ty, "shape", None), "values", None)
    if x_shape is None or w_shape is None:
        return None
    sizes = _static([x_shape[data_layout.index(a)] for a in "HW"])
    kernels = _static([w_shape[kernel_layout.index(a)] for a in "HW"])
    if sizes is None or kernels is None:
        return None
    strides, dilation = [int(v) for v in attrs.strides], [int(v) for v in attrs.dilation]
    top, left, bottom, right = (int(v) for v in attrs.padding)
    pads = [(top, bottom), (left, right)]
    begin, end, new_pads = [], [], []
    for axis in range(2):
        first, last = live_taps(sizes[axis], kernels[axis], strides[axis], dilation[axis], *pads[axis])
        if first > last:
            return None  # no live tap (an all-padding output): left to the conv
        before = pads[axis][0] - first * dilation[axis]
        after = pads[axis][1] - (kernels[axis] - 1 - last) * dilation[axis]
        if before < 0 or after < 0:
            return None
        begin.append(first)
        end.append(last + 1)
        new_pads.append((before, after))
    if begin == [0, 0] and end == kernels:
        return None
    weight = relax.op.strided_slice(w, axes=[kernel_layout.index("H"), kernel_layout.index("W")], begin=begin,
                                    end=end, assume_inbound=True)
    padding = [new_pads[0][0], new_pads[1][0], new_pads[0][1], new_pads[1][1]]
    # an axis left with one tap has no dilation (a 1x1 conv: the plain 1x1 kernels take it)
    dilation = [1 if e - b == 1 else d for b, e, d in zip(begin, end, dilation)]
    return relax.op.nn.conv2d(x, weight, attrs.strides, padding, dilation, int(attrs.groups), data_layout,
                              kernel_layout, str(attrs.out_layout), out_dtype=out_dtype(attrs))


dead_taps_pass = call_rewrite_pass("HetcDropDeadTaps", "relax.nn.conv2d", drop_dead_taps)
