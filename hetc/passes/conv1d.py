"""conv1d as conv2d over a height of one.

A ``relax.nn.conv1d`` got TVM's default loop nest: audio feature extractors (wav2vec2, HuBERT,
Data2Vec: strided 512-channel convs over thousands of samples) ran 8-15x onnxruntime per layer.
As a channels-last conv2d, ``[N, 1, L, C]`` with an ``[O, 1, k, C/groups]`` kernel (the layout
hetc's CPU conv2d schedules take, so ConvertLayout leaves it alone; TVM 0.27's ConvertLayout
lost a variable around NCHW reshaped convs in wav2vec2), it gets hetc's conv2d schedules
(depthwise and grouped ones included: this runs before ``grouped_conv``): 0.6-0.7x onnxruntime
on those layers (docs/cpu.md). The single-channel first layer (``C = 1``, kernel 10, stride 5)
is not faster either way. NCW/OIW only; the batch and length may be symbolic.
"""

from __future__ import annotations

from tvm import relax, tirx

from .pipeline import call_rewrite_pass, out_dtype


def as_conv2d(call: relax.Call) -> relax.Expr | None:
    """``call`` (a ``relax.nn.conv1d``) as a channels-last conv2d between transposes, or None."""
    attrs = call.attrs
    x, w = call.args
    if str(attrs.data_layout) != "NCW" or str(attrs.kernel_layout) != "OIW" or str(attrs.out_layout) != "NCW":
        return None
    if not (hasattr(getattr(x.ty, "shape", None), "values") and hasattr(getattr(w.ty, "shape", None), "values")):
        return None
    n, c, length = x.ty.shape.values
    o, ci, k = w.ty.shape.values
    if not all(isinstance(v, tirx.IntImm) for v in (c, o, ci, k)):
        return None
    (stride,), (dilation,) = (int(s) for s in attrs.strides), (int(d) for d in attrs.dilation)
    left, right = (int(p) for p in attrs.padding)
    rows = relax.op.reshape(relax.op.permute_dims(x, [0, 2, 1]), relax.ShapeExpr([n, 1, length, c]))
    kernel = relax.op.permute_dims(relax.op.reshape(w, [int(o), int(ci), 1, int(k)]), [0, 2, 3, 1])
    y = relax.op.nn.conv2d(rows, kernel, (1, stride), (0, left, 0, right), (1, dilation), int(attrs.groups),
                           data_layout="NHWC", kernel_layout="OHWI", out_dtype=out_dtype(attrs))
    span = length + left + right - dilation * (int(k) - 1) - 1
    width = span // stride + 1 if isinstance(span, int) else tirx.floordiv(span, stride) + 1
    return relax.op.permute_dims(relax.op.reshape(y, relax.ShapeExpr([n, width, o])), [0, 2, 1])


conv1d_as_conv2d_pass = call_rewrite_pass("HetcConv1dAsConv2d", "relax.nn.conv1d", as_conv2d)
