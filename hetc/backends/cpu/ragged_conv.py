"""conv2d shapes the register tile fits badly: output channels and widths padded, sliced back.

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

A static-shape conv can also have channels a vector divides but no wider panel does (2000, 400),
or an output width whose divisors leave a tile of one to three rows (17): ``pad_tile`` pads
either where the tile it gets then scores better, its padding counted as waste.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import tvm
from tvm import relax

from ...passes.pipeline import call_rewrite_pass, out_dtype

SMALLEST = 8  # fewer output channels are left alone (padding would multiply the work)
WIDER = 1.15  # output widths are padded by at most this factor (``pad_tile``)


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
    padded = _zero_filters(weight, extra)
    if depthwise:
        x = relax.op.nn.pad(x, [0, 0, 0, 0, 0, 0, 0, extra])
    conv = relax.op.nn.conv2d(x, relax.const(padded), attrs.strides, attrs.padding, attrs.dilation,
                              outputs + extra if depthwise else 1, "NHWC", "OHWI", "NHWC", out_dtype=out_dtype(attrs))
    return relax.op.strided_slice(conv, axes=[3], begin=[0], end=[outputs], assume_inbound=True)


def pad_tile(call: relax.Call, lanes: int, tiles: ModuleType) -> relax.Expr | None:
    """The form of a static-shape conv2d (NHWC, one group, a constant float weight) computed
    with more output channels and/or a wider output, then sliced back, where that gives a better
    register tile; None where it does not apply or would not pay.

    The contraction tile is ``rows x vj``: ``vj`` (up to four vectors) must divide the output
    channels and the rows must be a box in ``oh x ow`` (``gemm.is_box``: a divisor of ``ow`` or
    whole rows of it). 2000 channels (wav2letter; 400, 208, 440 in RegNets) allow a one-vector
    panel, 17 pixels a row (Inception-v3's middle stage) a one-row tile: each load then feeds one
    or a few multiply-adds. A 960->256 3x3 conv at 17x17 ran 3.7x onnxruntime (24.4 ms; 2-core
    Zen 5, AVX-512, LLVM ``znver5``). So the channels of a one-vector panel may be rounded up to
    2-4 vectors and the output widened up to ``WIDER * ow`` (zeros appended on the right, in the
    conv's own padding), the candidate whose best tile scores best with its padding counted as
    waste, where it beats the plain tile. ``tiles`` is ``schedules.gemm``, whose tile model this
    uses (``conv_row_tile``, ``one_vector_panels``, ``worth_padding``); passed in, so that this
    module stays out of the schedules' import cycle. Channel counts no width of 4 divides are
    padded to a vector either way (``pad_outputs``)."""
    attrs = call.attrs
    x, w = call.args
    if ((str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != ("NHWC", "OHWI", "NHWC")
            or not isinstance(w, tvm.ir.GenericConst) or int(attrs.groups) != 1):
        return None
    out_shape = getattr(getattr(call.ty, "shape", None), "values", None)
    if out_shape is None or not all(isinstance(d, tvm.tirx.IntImm) for d in out_shape[1:]):
        return None
    weight = w.value.numpy()
    _, oh, ow, outputs = (int(d) if isinstance(d, tvm.tirx.IntImm) else d for d in out_shape)
    if weight.dtype.kind != "f" or outputs < SMALLEST:
        return None

    def value(columns: int, width: int) -> float:
        return tiles.conv_row_tile(oh, width, columns, lanes)[1] * outputs / columns * ow / width

    def best(widths) -> tuple[int, int]:
        return max(((c, wd) for c in sorted(counts) for wd in widths), key=lambda cw: value(*cw))

    base = outputs if outputs % 4 == 0 else outputs + (-outputs % lanes)
    counts = {base}
    if tiles.one_vector_panels(base, lanes):  # 2000 = 125 vectors of 16
        counts |= {outputs + (-outputs % (k * lanes)) for k in (2, 3, 4)}
    columns, wider = best(range(ow, int(ow * WIDER) + 1))
    rows, score = tiles.conv_row_tile(oh, ow, base, lanes)
    plain = score * outputs / base  # the plain tile (no padding), scored as ``value`` scores
    # A conv with no padding of its own (1x1) reads a widened input from a zero-padded copy, a
    # pass over its whole input that the conv did not have: there the wider tile must score
    # PAD_GAIN better, as for a tile of many rows. ResNet-50's 1x1 convs at 56 and 28 pixels a
    # row, on AVX2, took 6 x 16 tiles over 60 and 30 (scored 5% above their own 2 x 32), and ran
    # 1.22-1.32x onnxruntime against 1.04-1.15x unwidened (2-core Zen 3, LLVM znver3).
    if wider != ow and not any(int(v) for v in attrs.padding) and not tiles.worth_padding(
            tiles.MIN_TILE_ROWS, plain, value(columns, wider)):
        columns, wider = best([ow])
    if not tiles.worth_padding(rows, plain, value(columns, wider)):
        columns, wider = base, ow
    if (columns, wider) == (outputs, ow):
        return None
    top, left, bottom, right = (int(v) for v in attrs.padding)
    right += (wider - ow) * int(attrs.strides[1])
    conv = relax.op.nn.conv2d(x, relax.const(_zero_filters(weight, columns - outputs)), attrs.strides,
                              [top, left, bottom, right], attrs.dilation, 1, "NHWC", "OHWI", "NHWC",
                              out_dtype=out_dtype(attrs))
    return relax.op.strided_slice(conv, axes=[2, 3], begin=[0, 0], end=[ow, outputs], assume_inbound=True)


def _zero_filters(weight: np.ndarray, count: int) -> np.ndarray:
    """``weight`` (OHWI) with ``count`` all-zero output filters appended."""
    return np.concatenate([weight, np.zeros((count, *weight.shape[1:]), weight.dtype)])


def _channels(x: relax.Expr) -> int | None:
    shape = getattr(x.ty, "shape", None)
    last = shape.values[-1] if hasattr(shape, "values") else None
    return int(last) if isinstance(last, tvm.tirx.IntImm) else None


def ragged_conv_pass(width: int, tiles: ModuleType) -> tvm.transform.Pass:
    """``pad_tile`` on every static-shape conv2d, ``pad_outputs`` on the rest (depthwise, symbolic
    sizes); ``width`` the float32 lanes of a vector, ``tiles`` the tile model (``pad_tile``)."""

    def rewrite(call: relax.Call) -> relax.Expr | None:
        padded = pad_tile(call, width, tiles)
        return padded if padded is not None else pad_outputs(call, width)

    return call_rewrite_pass("HetcRaggedConvOutputs", "relax.nn.conv2d", rewrite)
