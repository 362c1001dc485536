"""A transposed conv whose stride equals its kernel as a matmul and a depth-to-space.

With ``stride == kernel`` (no padding, no output padding, no dilation, one group) the windows
of a transposed conv do not overlap: each input pixel writes its own ``kh x kw`` block,

    y[n, o, i*kh + a, j*kw + b] = sum_c x[n, c, i, j] * w[c, o, a, b]

one matmul ``[n*h*w, C] x [C, O*kh*kw]`` and a reshuffle. TVM lowers conv2d_transpose to a
scalar loop nest (only NCHW/IOHW): torchvision Mask R-CNN's mask head, a 2x2 stride-2
transposed conv over 100 regions of 256 x 14 x 14, took about 40% of its run (2-core
Zen 5, AVX-512). As a matmul it
gets hetc's contraction kernel (packed weight) and the reshuffle is a copy. The upsampling
decoders of U-Nets, segmentation heads and DPT use the same 2x2/stride-2 form.
"""

from __future__ import annotations

from tvm import relax, tirx

from .pipeline import call_rewrite_pass, out_dtype


def as_matmul(call: relax.Call) -> relax.Expr | None:
    """The matmul form of a ``relax.nn.conv2d_transpose`` call, or None where it does not apply."""
    attrs = call.attrs
    x, w = call.args
    if (int(attrs.groups) != 1 or (str(attrs.data_layout), str(attrs.kernel_layout)) != ("NCHW", "IOHW")
            or str(attrs.out_layout) not in ("", "NCHW")):
        return None
    if not (hasattr(getattr(x.ty, "shape", None), "values") and hasattr(getattr(w.ty, "shape", None), "values")):
        return None
    c, o, kh, kw = w.ty.shape.values
    if not all(isinstance(v, tirx.IntImm) for v in (c, o, kh, kw)):
        return None
    kh, kw, c, o = int(kh), int(kw), int(c), int(o)
    if ([int(s) for s in attrs.strides] != [kh, kw] or any(int(p) for p in attrs.padding)
            or any(int(p) for p in attrs.output_padding) or any(int(d) != 1 for d in attrs.dilation)):
        return None
    n, _, h, wd = x.ty.shape.values
    rows = relax.op.permute_dims(x, [0, 2, 3, 1])  # [n, h, w, C]
    y = relax.op.matmul(rows, relax.op.reshape(w, [c, o * kh * kw]), out_dtype=out_dtype(attrs))  # [n, h, w, O*kh*kw]
    y = relax.op.reshape(y, relax.ShapeExpr([n, h, wd, o, kh, kw]))
    y = relax.op.permute_dims(y, [0, 3, 1, 4, 2, 5])  # [n, O, h, kh, w, kw]
    return relax.op.reshape(y, relax.ShapeExpr([n, o, h * kh, wd * kw]))


conv_transpose_as_matmul_pass = call_rewrite_pass("HetcConvTransposeAsMatmul", "relax.nn.conv2d_transpose",
                                                  as_matmul)
