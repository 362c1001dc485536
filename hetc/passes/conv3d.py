"""conv3d as one conv2d: the depth taps stacked into the input channels.

hetc's conv2d kernels are scheduled (register-blocked micro-kernels, packed weights, Winograd);
a conv3d gets TVM's default loop nest, which ran torchvision's ``r3d_18`` 34x slower than
onnxruntime (a 64-channel 3x3x3 layer on 8x28x28: 24x). For ``groups == 1`` and NCDHW:

    x: [N, C, D, H, W]  --pad depth-->  for each depth tap t: x[:, :, t*dd : ... : sd]  (D' planes)
    concat over t on the channels   -> [N, kd*C, D', H, W]
    -> [N, D', kd*C, H, W] -> [N*D', kd*C, H, W]
    conv2d with w: [O, C, kd, kh, kw] -> [O, kd, C, kh, kw] -> [O, kd*C, kh, kw]
    -> [N*D', O, H', W'] -> [N, D', O, H', W'] -> [N, O, D', H', W']

The weight transform is folded at compile time; the input is copied ``kd`` times (the im2col of
the depth axis only). The batch may be symbolic. Grouped and other-layout conv3ds are left alone.
"""

from __future__ import annotations

from tvm import relax, tirx

from .pipeline import call_rewrite_pass


def _depth_out(depth, pad: int, taps: int, stride: int, dilation: int):
    size = depth + pad - dilation * (taps - 1) - 1
    return size // stride + 1 if isinstance(size, int) else tirx.floordiv(size, stride) + 1


def as_conv2d(call: relax.Call) -> relax.Expr | None:
    """The conv2d form of a ``relax.nn.conv3d`` call, or None where it does not apply."""
    attrs = call.attrs
    x, w = call.args
    if (int(attrs.groups) != 1 or str(attrs.data_layout) != "NCDHW" or str(attrs.kernel_layout) != "OIDHW"
            or str(attrs.out_layout) != "NCDHW"):
        return None
    xs, ws = x.ty, w.ty
    if not (isinstance(xs, relax.TensorType) and isinstance(ws, relax.TensorType)
            and hasattr(xs.shape, "values") and hasattr(ws.shape, "values")):
        return None
    n, c, d, h, wd = [int(v) if isinstance(v, tirx.IntImm) else v for v in xs.shape.values]
    o, ci, kd, kh, kw = [int(v) if isinstance(v, tirx.IntImm) else v for v in ws.shape.values]
    if not all(isinstance(v, int) for v in (c, ci, kd, kh, kw, h, wd)) or c != ci:
        return None  # channels, kernel and the plane must be static (the batch and depth may not)
    sd, sh, sw = (int(v) for v in attrs.strides)
    dd, dh, dw = (int(v) for v in attrs.dilation)
    front, top, left, back, bottom, right = (int(v) for v in attrs.padding)
    if front or back:
        x = relax.op.nn.pad(x, [0, 0, 0, 0, front, back, 0, 0, 0, 0])
    d_out = _depth_out(d, front + back, kd, sd, dd)
    if isinstance(d_out, int) and d_out <= 0:
        return None
    taps = [relax.op.strided_slice(x, [2], [t * dd], [t * dd + sd * (d_out - 1) + 1], [sd], assume_inbound=True)
            for t in range(kd)]
    stacked = relax.op.concat(taps, axis=1) if kd > 1 else taps[0]
    planes = relax.op.reshape(relax.op.permute_dims(stacked, [0, 2, 1, 3, 4]),
                              relax.ShapeExpr([n * d_out, kd * c, h, wd]))
    kernel = relax.op.reshape(relax.op.permute_dims(w, [0, 2, 1, 3, 4]), [o, kd * c, kh, kw])
    y = relax.op.nn.conv2d(planes, kernel, strides=(sh, sw), padding=(top, left, bottom, right),
                           dilation=(dh, dw), out_dtype=None if attrs.out_dtype is None else str(attrs.out_dtype))
    h_out = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    w_out = (wd + left + right - dw * (kw - 1) - 1) // sw + 1
    y = relax.op.reshape(y, relax.ShapeExpr([n, d_out, o, h_out, w_out]))
    return relax.op.permute_dims(y, [0, 2, 1, 3, 4])


conv3d_as_conv2d_pass = call_rewrite_pass("HetcConv3dAsConv2d", "relax.nn.conv3d", as_conv2d)
