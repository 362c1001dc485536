"""Detection ops whose output size only the run time knows: NonZero, NonMaxSuppression; and
RoiAlign (opset 10 and 16, avg and max).

NonZero and NonMaxSuppression run one sequential TIR kernel each (``te.extern``) that writes
its rows into an output of the largest possible size (every element; every box of every
class) and their number into a one-element tensor; the converter binds that number to a fresh
symbolic dim (``runtime_values.scalar_var``) and slices the rows off. Nothing is a Python
function: an artifact runs with the TVM runtime alone (TVM's own NonZero calls the Python
global ``relax.run.nonzero``). The kernels are serial loops for the CPU.

RoiAlign is a TE compute with ONNX's (onnxruntime's) sampling: an adaptive grid
(``sampling_ratio`` 0: ``ceil(roi size / output size)`` samples per bin, a run-time extent),
``half_pixel`` or ``output_half_pixel`` coordinates, and ``max`` taking the largest of the
four weighted corner values of every sample, as onnxruntime does (TVM's converter takes the
largest interpolated value).
"""

from __future__ import annotations

import numpy as np
from tvm import relax, te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from .. import runtime_values as rv
from ..registry import Attrs, ConvertContext, converter

I64 = "int64"


def _i64(value) -> tirx.PrimExpr:
    return tirx.const(value, I64)


def _as_vector(bb: relax.BlockBuilder, x: relax.Expr, dtype: str) -> relax.Expr:
    """A scalar or one-element input as a ``[1]`` tensor of ``dtype``."""
    x = bb.normalize(relax.op.reshape(x, [1]))
    return x if str(x.ty.dtype) == dtype else bb.normalize(relax.op.astype(x, dtype))


def _slice_rows(bb: relax.BlockBuilder, rows: relax.Expr, count: relax.Expr, axis: int, prefix: str):
    """``rows`` cut along ``axis`` to the run-time length in the ``[1]`` tensor ``count``."""
    n = rv.scalar_var(bb, count, prefix)
    return relax.op.strided_slice(rows, [axis], [0], [n], assume_inbound=True)


# ----------------------------------------------------------------------------- NonZero

def _nonzero_ir(x, out, count):
    dims = list(x.shape)
    with IRBuilder() as ib, T.seq_scope():
        flat = T.buffer_proxy(x)
        out = T.buffer_proxy(out)
        count = T.buffer_proxy(count)
        total = T.buffer_proxy(T.alloc_buffer((1,), I64, scope="local"))
        total[0] = _i64(0)
        with T.serial(0, x.shape[0] if len(dims) == 1 else _prod(dims)) as i:
            index = _unravel(i, dims)
            value = flat[tuple(index)]
            with T.If(value if x.dtype == "bool" else value != tirx.const(0, x.dtype)), T.Then():
                for d, value in enumerate(index):
                    out[d, total[0]] = value
                total[0] = total[0] + _i64(1)
        count[0] = total[0]
    return ib.get()


def _prod(dims):
    size = dims[0]
    for d in dims[1:]:
        size = size * d  # int64 dims; static ones fold
    return size


def _unravel(i, dims):
    index = []
    for d in reversed(dims):
        index.append(tirx.floormod(i, d))
        i = tirx.floordiv(i, d)
    return index[::-1]


@converter("NonZero", since=9)
def nonzero(ctx: ConvertContext, inputs: list, attrs: Attrs):
    bb = ctx.bb
    x = inputs[0]
    if x.ty.ndim == 0:
        x = bb.normalize(relax.op.reshape(x, [1]))
    rank = x.ty.ndim

    def kernel(t):
        size = _prod(t.shape)
        return te.extern([(rank, size), (1,)], [t], lambda ins, outs: _nonzero_ir(ins[0], *outs),
                         dtype=[I64, I64], name="nonzero")

    both = bb.emit_te(kernel, x, primfunc_name_hint="nonzero")
    rows, count = (bb.emit(relax.TupleGetItem(both, i)) for i in range(2))
    return _slice_rows(bb, rows, count, 1, "nonzero")


# ----------------------------------------------------------------------------- NonMaxSuppression

def _corners(boxes, b, i, center: bool):
    """(x_min, x_max, y_min, y_max) of box ``i``: ``[y1, x1, y2, x2]`` in any corner order, or
    ``[x_center, y_center, width, height]``."""
    if center:
        xc, yc, w, h = (boxes[b, i, k] for k in range(4))
        half_w, half_h = w / tirx.const(2, "float32"), h / tirx.const(2, "float32")
        return xc - half_w, xc + half_w, yc - half_h, yc + half_h
    y1, x1, y2, x2 = (boxes[b, i, k] for k in range(4))
    return tirx.min(x1, x2), tirx.max(x1, x2), tirx.min(y1, y2), tirx.max(y1, y2)


def _suppresses(boxes, b, i, j, iou, center: bool):
    """Box ``j`` suppresses box ``i``: their IoU exceeds ``iou`` (onnxruntime's tests, in its order)."""
    x1a, x2a, y1a, y2a = _corners(boxes, b, i, center)
    x1b, x2b, y1b, y2b = _corners(boxes, b, j, center)
    ix1, ix2 = tirx.max(x1a, x1b), tirx.min(x2a, x2b)
    iy1, iy2 = tirx.max(y1a, y1b), tirx.min(y2a, y2b)
    inter = (ix2 - ix1) * (iy2 - iy1)
    area_a = (x2a - x1a) * (y2a - y1a)
    area_b = (x2b - x1b) * (y2b - y1b)
    union = area_a + area_b - inter
    zero = tirx.const(0, "float32")
    return tirx.all(ix2 > ix1, iy2 > iy1, inter > zero, area_a > zero, area_b > zero, union > zero,
                    inter / union > iou)


def _nms_ir(boxes, scores, order, max_out, iou, threshold, out, count, center: bool, has_threshold: bool):
    batch, classes, n = scores.shape
    with IRBuilder() as ib, T.seq_scope():
        boxes, scores, order = T.buffer_proxy(boxes), T.buffer_proxy(scores), T.buffer_proxy(order)
        max_out, iou = T.buffer_proxy(max_out), T.buffer_proxy(iou)
        threshold = T.buffer_proxy(threshold) if has_threshold else None
        out, count = T.buffer_proxy(out), T.buffer_proxy(count)
        total = T.buffer_proxy(T.alloc_buffer((1,), I64, scope="local"))
        kept = T.buffer_proxy(T.alloc_buffer((1,), I64, scope="local"))
        keep = T.buffer_proxy(T.alloc_buffer((1,), "int32", scope="local"))
        total[0] = _i64(0)
        with T.serial(0, batch) as b:
            with T.serial(0, classes) as c:
                kept[0] = _i64(0)
                with T.serial(0, n) as k:
                    box = order[b, c, k]
                    wanted = kept[0] < max_out[0]
                    if has_threshold:
                        wanted = tirx.all(wanted, scores[b, c, box] > threshold[0])
                    with T.If(wanted):
                        with T.Then():
                            keep[0] = 1
                            with T.serial(0, kept[0]) as j:
                                other = out[total[0] + j, 2]
                                with T.If(tirx.all(keep[0] == 1, _suppresses(boxes, b, box, other, iou[0], center))):
                                    with T.Then():
                                        keep[0] = 0
                            with T.If(keep[0] == 1), T.Then():
                                row = total[0] + kept[0]
                                out[row, 0] = tirx.Cast(I64, b)
                                out[row, 1] = tirx.Cast(I64, c)
                                out[row, 2] = box
                                kept[0] = kept[0] + _i64(1)
                total[0] = total[0] + kept[0]
        count[0] = total[0]
    return ib.get()


@converter("NonMaxSuppression", since=10)
def non_max_suppression(ctx: ConvertContext, inputs: list, attrs: Attrs):
    bb = ctx.bb
    boxes, scores = inputs[0], inputs[1]
    optional = [inputs[i] if len(inputs) > i else None for i in (2, 3, 4)]
    center = attrs.reject("center_point_box", lambda v: v in (0, 1), 0) == 1
    if boxes.ty.ndim != 3 or scores.ty.ndim != 3:
        raise ctx.error(f"boxes and scores must be 3-D, got ranks {boxes.ty.ndim} and {scores.ty.ndim}")
    if str(boxes.ty.dtype) != "float32" or str(scores.ty.dtype) != "float32":
        raise ctx.error(f"boxes and scores must be float32, got {boxes.ty.dtype} and {scores.ty.dtype}")
    max_out, iou, threshold = optional
    max_out = _as_vector(bb, max_out, I64) if max_out is not None else relax.const(np.zeros(1, np.int64))
    iou = _as_vector(bb, iou, "float32") if iou is not None else relax.const(np.zeros(1, np.float32))
    has_threshold = threshold is not None
    threshold = _as_vector(bb, threshold, "float32") if has_threshold else relax.const(np.zeros(1, np.float32))
    # stable descending order of each class's scores (ties: the lower box index first, as in onnxruntime)
    order = bb.normalize(relax.op.topk(scores, -1, 2, ret_type="indices", largest=True, dtype=I64))

    def kernel(b, s, o, m, i, t):
        rows = _prod(s.shape)  # at most every box of every class of every batch
        return te.extern([(rows, 3), (1,)], [b, s, o, m, i, t],
                         lambda ins, outs: _nms_ir(*ins, *outs, center, has_threshold),
                         dtype=[I64, I64], name="non_max_suppression")

    both = bb.emit_te(kernel, boxes, scores, order, max_out, iou, threshold,
                      primfunc_name_hint="non_max_suppression")
    rows, count = (bb.emit(relax.TupleGetItem(both, i)) for i in range(2))
    return _slice_rows(bb, rows, count, 0, "nms")


# ----------------------------------------------------------------------------- RoiAlign

def _roi_align(x, rois, batch_index, out_h: int, out_w: int, ratio: int, scale: float, half_pixel: bool,
               max_mode: bool):
    _, channels, height, width = x.shape
    dtype = x.dtype
    num = rois.shape[0]

    def const(v):
        return tirx.const(v, dtype)

    def geometry(r, ph, pw):
        offset = const(0.5 if half_pixel else 0.0)
        start_w, start_h = rois[r, 0] * const(scale) - offset, rois[r, 1] * const(scale) - offset
        roi_w = rois[r, 2] * const(scale) - offset - start_w
        roi_h = rois[r, 3] * const(scale) - offset - start_h
        if not half_pixel:
            roi_w, roi_h = tirx.max(roi_w, const(1)), tirx.max(roi_h, const(1))
        bin_h, bin_w = roi_h / const(out_h), roi_w / const(out_w)
        if ratio > 0:
            grid_h = grid_w = tirx.const(ratio, "int32")
        else:
            grid_h = tirx.Cast("int32", tirx.ceil(roi_h / const(out_h)))
            grid_w = tirx.Cast("int32", tirx.ceil(roi_w / const(out_w)))
        y0 = start_h + tirx.Cast(dtype, ph) * bin_h
        x0 = start_w + tirx.Cast(dtype, pw) * bin_w
        return y0, x0, bin_h, bin_w, grid_h, grid_w

    def sample(n, c, y, xx):
        """onnxruntime's bilinear sample: the four weighted corners (all 0 outside)."""
        outside = tirx.any(y < const(-1), y > tirx.Cast(dtype, height), xx < const(-1),
                           xx > tirx.Cast(dtype, width))
        y, xx = tirx.max(y, const(0)), tirx.max(xx, const(0))
        corners = []
        for v, size in ((y, height), (xx, width)):
            low = tirx.Cast("int64", v)
            last = tirx.Cast("int64", size) - _i64(1)
            at_end = low >= last
            low = tirx.Select(at_end, last, low)
            high = tirx.Select(at_end, last, low + _i64(1))
            frac = tirx.Select(at_end, const(0), v - tirx.Cast(dtype, low))
            corners.append((low, high, frac))
        (y_low, y_high, ly), (x_low, x_high, lx) = corners
        hy, hx = const(1) - ly, const(1) - lx
        weighted = [hy * hx * x[n, c, y_low, x_low], hy * lx * x[n, c, y_low, x_high],
                    ly * hx * x[n, c, y_high, x_low], ly * lx * x[n, c, y_high, x_high]]
        return [tirx.Select(outside, const(0), w) for w in weighted]

    def pooled(r, c, ph, pw):
        y0, x0, bin_h, bin_w, grid_h, grid_w = geometry(r, ph, pw)
        iy = te.reduce_axis((0, grid_h), name="iy")
        ix = te.reduce_axis((0, grid_w), name="ix")
        y = y0 + (tirx.Cast(dtype, iy) + const(0.5)) * bin_h / tirx.Cast(dtype, grid_h)
        xx = x0 + (tirx.Cast(dtype, ix) + const(0.5)) * bin_w / tirx.Cast(dtype, grid_w)
        n = batch_index[r]
        w = sample(n, c, y, xx)
        if max_mode:
            return te.max(tirx.max(tirx.max(tirx.max(w[0], w[1]), w[2]), w[3]), axis=[iy, ix])
        return te.sum(w[0] + w[1] + w[2] + w[3], axis=[iy, ix])

    shape = (num, channels, out_h, out_w)
    total = te.compute(shape, pooled, name="roi_align_pool")
    if max_mode:
        return total

    def average(r, c, ph, pw):
        *_, grid_h, grid_w = geometry(r, ph, pw)
        return total[r, c, ph, pw] / tirx.Cast(dtype, tirx.max(grid_h * grid_w, 1))

    return te.compute(shape, average, name="roi_align")


def _roi_align_converter(default_mode: str):
    def convert(ctx: ConvertContext, inputs: list, attrs: Attrs):
        x, rois, batch_index = inputs
        mode = attrs.reject("mode", lambda v: v in ("avg", "max"), "avg")
        transform = attrs.reject("coordinate_transformation_mode",
                                 lambda v: v in ("half_pixel", "output_half_pixel"), default_mode)
        out_h = int(attrs.reject("output_height", lambda v: v >= 1, 1))
        out_w = int(attrs.reject("output_width", lambda v: v >= 1, 1))
        ratio = int(attrs.reject("sampling_ratio", lambda v: v >= 0, 0))
        scale = float(attrs.get("spatial_scale", 1.0))
        if x.ty.ndim != 4 or rois.ty.ndim != 2 or batch_index.ty.ndim != 1:
            raise ctx.error(f"needs X of rank 4, rois of rank 2 and batch_indices of rank 1, got ranks "
                            f"{x.ty.ndim}, {rois.ty.ndim}, {batch_index.ty.ndim}")
        if str(rois.ty.dtype) != str(x.ty.dtype):
            rois = relax.op.astype(rois, str(x.ty.dtype))
        if str(batch_index.ty.dtype) != I64:
            batch_index = relax.op.astype(batch_index, I64)
        bb = ctx.bb
        return bb.emit_te(_roi_align, bb.normalize(x), bb.normalize(rois), bb.normalize(batch_index),
                          out_h, out_w, ratio, scale, transform == "half_pixel", mode == "max",
                          primfunc_name_hint="roi_align")
    return convert


converter("RoiAlign", since=10)(_roi_align_converter("output_half_pixel"))
converter("RoiAlign", since=16)(_roi_align_converter("half_pixel"))
