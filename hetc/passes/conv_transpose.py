"""A strided transposed conv (1-D or 2-D) as one matmul, an overlap-add and a depth-to-space.

Each input pixel of a transposed conv writes a ``k``-wide window of the output, ``s`` apart.
With the kernel cut into ``r = k / s`` blocks of ``s`` taps, every output position gets
exactly one term from each block:

    y[n, o, u*s + b] = sum_q P[n, u - q, q, o, b],  P[n, t, q, o, b] = sum_c x[n, c, t] w[c, o, q*s + b]

so the whole op is one matmul ``[n*T, C] x [C, r*O*s]`` (hetc's contraction kernel, packed
weight), ``r`` shifted copies of its blocks added (zero-padded by ``q`` and ``r-1-q`` along
``t``), a reshuffle, and a crop of the pads. ``stride == kernel`` (``r = 1``: Mask R-CNN's
mask head, U-Net decoders) needs no adds; ``kernel = 2 x stride`` (Conv-TasNet's and HiFi-GAN's
audio decoders, DCGAN's 4x4/stride-2) adds two blocks per axis. A kernel that is not a
multiple of the stride (3x3, stride 2, output padding 1) is zero-padded to the next multiple
that also covers the output padding. TVM lowers conv1d/conv2d_transpose to a scalar loop nest
(only NCW/NCHW): Mask R-CNN's 2x2 mask head took about 40% of its run, Conv-TasNet's decoder
(16 taps, stride 8) 80% (2-core Zen 5, AVX-512). One group, no dilation and at most
``MAX_TERMS`` blocks only; the batch and spatial dims may be symbolic.
"""

from __future__ import annotations

import itertools
import math

from tvm import relax, tirx

from .pipeline import call_rewrite_pass, out_dtype

_LAYOUTS = {1: ("NCW", "IOW"), 2: ("NCHW", "IOHW")}
MAX_TERMS = 16  # shifted blocks to add (a stride-1 3x3 has 9); more stay on TVM's lowering


def as_matmul(call: relax.Call) -> relax.Expr | None:
    """The matmul form of a ``relax.nn.conv1d/conv2d_transpose`` call, or None where it does not apply."""
    attrs = call.attrs
    x, w = call.args
    if not (hasattr(getattr(x.ty, "shape", None), "values") and hasattr(getattr(w.ty, "shape", None), "values")):
        return None
    dims = len(w.ty.shape.values) - 2
    if (dims not in _LAYOUTS or int(attrs.groups) != 1
            or (str(attrs.data_layout), str(attrs.kernel_layout)) != _LAYOUTS[dims]
            or str(attrs.out_layout) not in ("", _LAYOUTS[dims][0])
            or any(int(d) != 1 for d in attrs.dilation)):
        return None
    c, o, *kernel = w.ty.shape.values
    if not all(isinstance(v, tirx.IntImm) for v in (c, o, *kernel)):
        return None
    c, o, kernel = int(c), int(o), [int(k) for k in kernel]
    strides = [int(s) for s in attrs.strides]
    extra = [int(p) for p in attrs.output_padding]
    pads = [int(p) for p in attrs.padding]  # begin..., end...
    if any(not 0 <= e < s for e, s in zip(extra, strides)):
        return None
    # taps per axis: the kernel and the output padding, rounded up to whole strides
    taps = [math.ceil((k + e) / s) * s for k, e, s in zip(kernel, extra, strides)]
    blocks = [t // s for t, s in zip(taps, strides)]
    if math.prod(blocks) > MAX_TERMS:
        return None
    n, _, *size = x.ty.shape.values

    if taps != kernel:  # zero taps: the kernel padded at its end
        w = relax.op.nn.pad(w, [0, 0, 0, 0] + [v for t, k in zip(taps, kernel) for v in (0, t - k)])
    # weight [C, O, r1*s1, ...] -> [C, r1, ..., O, s1, ...]: a matmul column per (q, o, b)
    w = relax.op.reshape(w, [c, o, *[v for r, s in zip(blocks, strides) for v in (r, s)]])
    order = [0, *[2 + 2 * a for a in range(dims)], 1, *[3 + 2 * a for a in range(dims)]]
    w = relax.op.reshape(relax.op.permute_dims(w, order), [c, math.prod(blocks) * o * math.prod(strides)])
    rows = relax.op.permute_dims(x, [0, *range(2, 2 + dims), 1])  # [n, *size, C]
    p = relax.op.matmul(rows, w, out_dtype=out_dtype(attrs))
    p = relax.op.reshape(p, relax.ShapeExpr([n, *size, *blocks, o, *strides]))

    total = None
    for q in itertools.product(*map(range, blocks)):  # overlap-add: block q shifted by q along each axis
        term = relax.op.strided_slice(p, list(range(1 + dims, 1 + 2 * dims)), list(q), [v + 1 for v in q])
        term = relax.op.reshape(term, relax.ShapeExpr([n, *size, o, *strides]))
        if math.prod(blocks) > 1:
            widths = [0, 0] + [v for a in range(dims) for v in (q[a], blocks[a] - 1 - q[a])] + [0, 0] * (1 + dims)
            term = relax.op.nn.pad(term, widths)
        total = term if total is None else relax.op.add(total, term)
    grown = [v + r - 1 for v, r in zip(size, blocks)]
    # [n, *grown, O, *s] -> [n, O, grown1, s1, ...] -> [n, O, grown1*s1, ...]
    y = relax.op.permute_dims(total, [0, 1 + dims, *[v for a in range(dims) for v in (1 + a, 2 + dims + a)]])
    full = [g * s for g, s in zip(grown, strides)]
    y = relax.op.reshape(y, relax.ShapeExpr([n, o, *full]))
    out = [s * (v - 1) + e + k - pads[a] - pads[dims + a]
           for a, (v, s, e, k) in enumerate(zip(size, strides, extra, kernel))]
    if any(pads) or taps != kernel:
        y = relax.op.strided_slice(y, list(range(2, 2 + dims)), pads[:dims],
                                   [b + v for b, v in zip(pads[:dims], out)], assume_inbound=True)
    return y


conv_transpose_as_matmul_pass = call_rewrite_pass(
    "HetcConvTransposeAsMatmul", ("relax.nn.conv1d_transpose", "relax.nn.conv2d_transpose"), as_matmul)
