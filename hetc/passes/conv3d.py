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

In NDHWC (the CPU converts conv3d layouts with its conv2ds, ``phases.layout_passes``, and runs
this after) the activations need no transposes: ``[N, D, H, W, C]`` with the depth taps
concatenated on C is ``[N*D', H, W, kd*C]``, a view when ``kd == 1`` (the "spatial" ``1 x kh x
kw`` convs of (2+1)-D and S3D models); a conv over depth only (their "temporal" ``kd x 1 x 1``)
is a ``kd x 1`` conv2d over ``[N, D, H*W, C]``, a view too. Per layer that removed four
transposes of the activations and, for the temporal convs, the ``kd``-fold copy.
"""

from __future__ import annotations

from tvm import relax, tirx

from .pipeline import call_rewrite_pass, out_dtype


def _depth_out(depth, pad: int, taps: int, stride: int, dilation: int):
    size = depth + pad - dilation * (taps - 1) - 1
    return size // stride + 1 if isinstance(size, int) else tirx.floordiv(size, stride) + 1


def as_conv2d(call: relax.Call) -> relax.Expr | None:
    """The conv2d form of a ``relax.nn.conv3d`` call (NCDHW or NDHWC), or None where it does not apply."""
    attrs = call.attrs
    x, w = call.args
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    if int(attrs.groups) != 1 or layouts not in (("NCDHW", "OIDHW", "NCDHW"), ("NDHWC", "ODHWI", "NDHWC")):
        return None
    xs, ws = x.ty, w.ty
    if not (isinstance(xs, relax.TensorType) and isinstance(ws, relax.TensorType)
            and hasattr(xs.shape, "values") and hasattr(ws.shape, "values")):
        return None
    dims = dict(zip(layouts[0], (int(v) if isinstance(v, tirx.IntImm) else v for v in xs.shape.values)))
    kdims = dict(zip(layouts[1], (int(v) if isinstance(v, tirx.IntImm) else v for v in ws.shape.values)))
    n, c, d, h, wd = (dims[a] for a in "NCDHW")
    o, ci, kd, kh, kw = (kdims[a] for a in "OIDHW")
    if not all(isinstance(v, int) for v in (c, ci, kd, kh, kw, h, wd)) or c != ci:
        return None  # channels, kernel and the plane must be static (the batch and depth may not)
    geometry = _Geometry(attrs, h, wd, kh, kw)
    if geometry.d_out(d, kd) is None:
        return None
    lower = _ncdhw if layouts[0] == "NCDHW" else _ndhwc
    return lower(x, w, geometry, (n, c, d, h, wd), (o, kd, kh, kw))


class _Geometry:
    """Strides, dilations, padding and output sizes of a conv3d."""

    def __init__(self, attrs, h: int, wd: int, kh: int, kw: int) -> None:
        self.sd, self.sh, self.sw = (int(v) for v in attrs.strides)
        self.dd, self.dh, self.dw = (int(v) for v in attrs.dilation)
        self.front, self.top, self.left, self.back, self.bottom, self.right = (int(v) for v in attrs.padding)
        self.out_dtype = out_dtype(attrs)
        self.h_out = (h + self.top + self.bottom - self.dh * (kh - 1) - 1) // self.sh + 1
        self.w_out = (wd + self.left + self.right - self.dw * (kw - 1) - 1) // self.sw + 1
        self.plain = (self.sh, self.sw, self.dh, self.dw, self.top, self.left, self.bottom, self.right) == (
            1, 1, 1, 1, 0, 0, 0, 0)

    def d_out(self, depth, taps: int):
        out = _depth_out(depth, self.front + self.back, taps, self.sd, self.dd)
        return None if isinstance(out, int) and out <= 0 else out

    def plane_conv(self, planes, kernel, layouts: tuple[str, str, str]):
        return relax.op.nn.conv2d(planes, kernel, strides=(self.sh, self.sw),
                                  padding=(self.top, self.left, self.bottom, self.right),
                                  dilation=(self.dh, self.dw), data_layout=layouts[0], kernel_layout=layouts[1],
                                  out_layout=layouts[2], out_dtype=self.out_dtype)


def _depth_taps(x, geo: _Geometry, depth_axis: int, channel_axis: int, d, kd: int):
    """The input padded in depth, its ``kd`` tap slices concatenated on the channels."""
    if geo.front or geo.back:
        pad = [0, 0] * 5
        pad[2 * depth_axis], pad[2 * depth_axis + 1] = geo.front, geo.back
        x = relax.op.nn.pad(x, pad)
    d_out = geo.d_out(d, kd)
    if kd == 1 and geo.sd == 1 and not (geo.front or geo.back):
        return x, d_out
    taps = [relax.op.strided_slice(x, [depth_axis], [t * geo.dd], [t * geo.dd + geo.sd * (d_out - 1) + 1], [geo.sd],
                                   assume_inbound=True) for t in range(kd)]
    return (relax.op.concat(taps, axis=channel_axis) if kd > 1 else taps[0]), d_out


def _ncdhw(x, w, geo: _Geometry, sizes: tuple, kernel_sizes: tuple):
    (n, c, d, h, wd), (o, kd, kh, kw) = sizes, kernel_sizes
    stacked, d_out = _depth_taps(x, geo, 2, 1, d, kd)
    planes = relax.op.reshape(relax.op.permute_dims(stacked, [0, 2, 1, 3, 4]), relax.ShapeExpr([n * d_out, kd * c, h, wd]))
    kernel = relax.op.reshape(relax.op.permute_dims(w, [0, 2, 1, 3, 4]), [o, kd * c, kh, kw])
    y = geo.plane_conv(planes, kernel, ("NCHW", "OIHW", "NCHW"))
    y = relax.op.reshape(y, relax.ShapeExpr([n, d_out, o, geo.h_out, geo.w_out]))
    return relax.op.permute_dims(y, [0, 2, 1, 3, 4])


def _ndhwc(x, w, geo: _Geometry, sizes: tuple, kernel_sizes: tuple):
    """NDHWC: no transposes of the activations. A conv over depth only (a (2+1)-D or S3D
    "temporal" conv, ``kd x 1 x 1``) is a conv2d over ``[n, d, h*w, c]``, a view; any other is a
    conv2d over ``[n*d', h, w, kd*c]`` (a view when ``kd == 1``: the "spatial" ``1 x kh x kw``)."""
    (n, c, d, h, wd), (o, kd, kh, kw) = sizes, kernel_sizes
    if kh == kw == 1 and geo.plain and kd > 1:
        planes = relax.op.reshape(x, relax.ShapeExpr([n, d, h * wd, c]))
        kernel = relax.op.reshape(w, [o, kd, 1, c])
        conv = relax.op.nn.conv2d(planes, kernel, strides=(geo.sd, 1), padding=(geo.front, 0, geo.back, 0),
                                  dilation=(geo.dd, 1), data_layout="NHWC", kernel_layout="OHWI",
                                  out_layout="NHWC", out_dtype=geo.out_dtype)
        return relax.op.reshape(conv, relax.ShapeExpr([n, geo.d_out(d, kd), h, wd, o]))
    stacked, d_out = _depth_taps(x, geo, 1, 4, d, kd)
    planes = relax.op.reshape(stacked, relax.ShapeExpr([n * d_out, h, wd, kd * c]))
    # [o, kd, kh, kw, c] -> [o, kh, kw, kd, c]: the stacked channels are tap-major
    kernel = relax.op.reshape(relax.op.permute_dims(w, [0, 2, 3, 1, 4]), [o, kh, kw, kd * c])
    y = geo.plane_conv(planes, kernel, ("NHWC", "OHWI", "NHWC"))
    return relax.op.reshape(y, relax.ShapeExpr([n, d_out, geo.h_out, geo.w_out, o]))


conv3d_as_conv2d_pass = call_rewrite_pass("HetcConv3dAsConv2d", "relax.nn.conv3d", as_conv2d)
