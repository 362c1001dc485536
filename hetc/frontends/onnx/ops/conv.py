"""Conv (opsets 1, 11) with ``auto_pad`` SAME_UPPER/SAME_LOWER: explicit pads; every other Conv
goes to TVM's converter.

torch exports ``nn.Conv2d(padding="same")`` with ``auto_pad="SAME_UPPER"`` (transformers'
EfficientNet: every depthwise conv and every 1x1), as tf2onnx does TensorFlow's "same" convs.
TVM's converter padded the input for it with an NCHW ``topi.nn.pad`` (``emit_te``: a
``call_tir`` that no layout rule sees), so in an NHWC model each such conv got a transpose, a
scalar pad and a transpose back: 32 of EfficientNet's 120 ms (per-kernel profile, 2-core AMD
EPYC, LLVM ``znver3``, AVX2; weights whose activations vanished), 1.07x -> 0.74x onnxruntime on
weights that keep them O(1) (docs/cpu.md); and with symbolic spatial dims and a stride its
numpy arithmetic failed on the PrimExprs. Here the pads ONNX specifies for the mode (``same_pads``) are the
conv's own, which layout conversion and the CPU schedules handle as any conv's; an axis whose
total depends on a symbolic length (``n mod stride``) is padded before the conv by blocks of
expression widths (``tensor.pad_symbolic``).
"""

from __future__ import annotations

from tvm import relax, tirx

from .. import symbolic
from ..registry import Attrs, ConvertContext, converter
from ..shapes import dims as _any_dims
from .tensor import pad_symbolic

# spatial dims -> (Relax conv op, data layout, kernel layout) of ONNX's channels-first convs
CONV_OPS = {1: (relax.op.nn.conv1d, "NCW", "OIW"), 2: (relax.op.nn.conv2d, "NCHW", "OIHW"),
            3: (relax.op.nn.conv3d, "NCDHW", "OIDHW")}


def _split(total, upper: bool):
    """(begin, end) of a SAME pad of ``total``: the odd element at the end (upper) or start."""
    small = total // 2 if isinstance(total, int) else symbolic.simplify(tirx.floordiv(total, 2))
    big = total - small if isinstance(total, int) else symbolic.simplify(total - small)
    return (small, big) if upper else (big, small)


def same_pads(spatial, kernel, strides, dilations, upper: bool) -> list:
    """ONNX's ``pads`` ([begins..., ends...]) for ``auto_pad`` SAME_UPPER (``upper``) or
    SAME_LOWER: ``total = max((ceil(n / s) - 1) * s + (k - 1) * d + 1 - n, 0)`` per axis; an
    int, or a PrimExpr where ``n`` is symbolic and ``s > 1`` (for ``s = 1`` it is ``(k - 1) d``)."""
    begins, ends = [], []
    for n, k, s, d in zip(spatial, kernel, strides, dilations):
        span = (k - 1) * d + 1
        if isinstance(n, int):
            total = max((-(-n // s) - 1) * s + span - n, 0)
        elif s == 1:
            total = span - 1
        else:
            n = symbolic.prim(n)
            total = symbolic.simplify(tirx.max((tirx.floordiv(n + (s - 1), s) - 1) * s + span - n, 0))
        begin, end = _split(total, upper)
        begins.append(begin)
        ends.append(end)
    return begins + ends


@converter("Conv", since=1)
def conv(ctx: ConvertContext, inputs: list, attrs: Attrs):
    mode = attrs.get("auto_pad", "NOTSET")
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        return NotImplemented
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    nd = x.ty.ndim - 2
    if nd not in CONV_OPS:
        raise ctx.error(f"a conv of {nd} spatial dims is not supported")
    kernel = list(attrs.get("kernel_shape") or _any_dims(w)[2:])
    if len(kernel) != nd or not all(isinstance(k, int) for k in kernel):
        raise ctx.error(f"kernel_shape {kernel} must be {nd} static sizes")
    strides = list(attrs.get("strides") or [1] * nd)
    dilations = list(attrs.get("dilations") or [1] * nd)
    attrs.get("pads")  # not used with auto_pad (the ONNX spec: one or the other)
    pads = same_pads(_any_dims(x)[2:], kernel, strides, dilations, mode == "SAME_UPPER")
    # an axis whose pads depend on a symbolic length is padded before the conv, both sides
    widths = [(0, 0)] * (2 + nd)
    for i in range(nd):
        if not (isinstance(pads[i], int) and isinstance(pads[nd + i], int)):
            widths[2 + i] = (pads[i], pads[nd + i])
            pads[i] = pads[nd + i] = 0
    if any(w != (0, 0) for w in widths):
        x = pad_symbolic(ctx, x, widths, relax.const(0, str(x.ty.dtype)))
    op, data_layout, kernel_layout = CONV_OPS[nd]
    out = ctx.bb.normalize(op(x, w, strides=strides, padding=pads, dilation=dilations,
                              groups=int(attrs.get("group", 1)), data_layout=data_layout,
                              kernel_layout=kernel_layout))
    if bias is not None:
        out = relax.op.add(out, relax.op.reshape(bias, [1, -1] + [1] * nd))
    return out
