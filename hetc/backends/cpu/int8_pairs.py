"""Exact ``vpmaddubsw`` on AVX2: weights split so that no pair of products saturates.

Without VNNI, the fast uint8 x int8 step is ``vpmaddubsw`` (onnxruntime's AVX2 kernels): it
adds each pair of products ``a[2i] w[2i] + a[2i+1] w[2i+1]`` into an int16, saturating. With
uint8 ``a`` that sum stays in int16 for every input exactly when ``|w[2i] + w[2i+1]| <= 128``
(a pair of mixed signs always does; one of equal signs reaches ``255 (w0 + w1)``). ``safe``
checks that along one axis of a weight.

A weight with some unsafe pairs (onnxruntime's default quantization: 0.03-0.3% of BERT-base's
dynamic int8 pairs, 1-14% of a per-channel conv's) is split at compile time,

    W = W_s + W_c        W_s: every pair safe        W_c: one nonzero per unsafe pair

(the pair's larger weight gives up the excess over 128, which keeps its sign), so that
``a @ W = a @ W_s + a @ W_c``: the first on ``vpmaddubsw`` (``schedules/int8.PMADDUBSW``), the
second a sparse correction (``correction``) over the few nonzeros. Both in int32:
the result is the exact integer one.

``mark_pass`` (stage ``mark_safe_pairs``) records, on each kernel, which constant int8
parameters are safe along which axes at every call site (``schedules/int8.SAFE_PAIRS``); the
int8 rule takes ``vpmaddubsw`` only where its weight is marked along the reduction axis.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

LIMIT = 128  # the largest |w0 + w1| whose products' sum fits int16 for any uint8 inputs


def _pairs(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.moveaxis(w, axis, -1)
    return x[..., 0::2].astype(np.int16), x[..., 1::2]


def _sums(w: np.ndarray, axis: int) -> np.ndarray:
    """Each adjacent pair's sum along ``axis`` (int16), pairs last."""
    w0, w1 = _pairs(w, axis)
    return w0 + w1


def safe(w: np.ndarray, axis: int) -> bool:
    """Whether every adjacent pair along ``axis`` of int8 ``w`` sums within +-128 (``vpmaddubsw``
    is exact on it for any uint8 input). An odd axis is not: its last element has no pair."""
    if w.dtype != np.int8 or w.shape[axis] % 2:
        return False
    total = _sums(w, axis)
    return total.size == 0 or (int(total.max()) <= LIMIT and int(total.min()) >= -LIMIT)


def excess(w: np.ndarray, axis: int) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """The nonzeros of ``split``'s ``w_c``: ``(index, values)``, ``index`` a tuple of index
    arrays into ``w`` (in row-major order), ``values`` int32. Only the (few) unsafe pairs are
    visited after one pass over the pair sums."""
    total = _sums(w, axis)
    pairs = np.nonzero((total > LIMIT) | (total < -LIMIT))
    x = np.moveaxis(w, axis, -1)
    lead, j = pairs[:-1], pairs[-1]
    w0, w1 = x[(*lead, 2 * j)].astype(np.int32), x[(*lead, 2 * j + 1)].astype(np.int32)
    t = w0 + w1
    values = t - np.clip(t, -LIMIT, LIMIT)
    last = 2 * j + (np.abs(w0) < np.abs(w1))  # the larger weight of the pair gives up the excess
    index = list(lead) + [last]
    index.insert(axis, index.pop())  # the pair axis back in its place
    order = np.lexsort(index[::-1])
    return tuple(i[order] for i in index), values[order]


def split(w: np.ndarray, axis: int, found=None) -> tuple[np.ndarray, np.ndarray]:
    """``(w_s, w_c)``, int8 both, ``w_s + w_c == w``: ``w_s`` safe along ``axis`` (even
    length), ``w_c`` nonzero only at the larger (in magnitude) weight of each unsafe pair, by
    the pair's excess over +-128 (at most 128 in magnitude: int8). ``found``: ``excess(w,
    axis)`` if the caller has it."""
    index, values = excess(w, axis) if found is None else found
    w_c = np.zeros_like(w)
    w_c[index] = values
    w_s = w.copy()
    w_s[index] = (w[index].astype(np.int32) - values).astype(np.int8)
    return w_s, w_c


def _scatter_ir(a, rows, cols, vals, out):
    """``out[p] = 0``, then for each nonzero ``e``: ``out[p, cols[e]] += a[p, rows[e]] vals[e]``,
    for every row ``p`` (the leading axes, in parallel). The zeroing is a contiguous run LLVM
    turns into a memset."""
    lead = list(out.shape[:-1])
    total = lead[0] if lead else 1
    for d in lead[1:]:
        total = total * d
    with IRBuilder() as ib, T.seq_scope():
        a, rows, cols, vals, out = (T.buffer_proxy(b) for b in (a, rows, cols, vals, out))
        with T.parallel(0, total) as p:
            index, rest = [], p
            for d in reversed(lead):
                index.append(tirx.floormod(rest, d))
                rest = tirx.floordiv(rest, d)
            index = index[::-1]
            with T.serial(0, out.shape[-1]) as n:
                out[(*index, n)] = tirx.const(0, "int32")
            with T.serial(0, rows.shape[0]) as e:
                at = (*index, cols[e])
                out[at] = out[at] + a[(*index, rows[e])].astype("int32") * vals[e]
    return ib.get()


def correction(bb: relax.BlockBuilder, a: relax.Expr, found, n_out: int) -> relax.Expr:
    """``a @ w_c`` in int32 for uint8 ``a [.., M, K]`` and ``w_c [K, n_out]`` given by its
    nonzeros ``found`` (``excess(w, 0)``): each row's products with them only, scattered into
    zeros. One pass over the int32 output (written here, read by the kernel that adds it): for
    BERT-base's dynamic int8 (about 0.1-0.3 nonzeros per column) far less than the int16 rows
    of ``vpmaddwd`` cost."""
    (rows, cols), vals = found
    rows, cols, vals = rows.astype(np.int32), cols.astype(np.int32), vals.astype(np.int32)

    def kernel(x, r, c, v):
        return te.extern([(*x.shape[:-1], n_out)], [x, r, c, v],
                         lambda ins, outs: _scatter_ir(*ins, outs[0]), dtype=["int32"], name="int8_pair_correction")

    return bb.emit_te(kernel, a, relax.const(rows), relax.const(cols), relax.const(vals),
                      primfunc_name_hint="int8_pair_correction")


LANES = 8  # output positions per vector of the conv correction
# A conv is split where the correction's predicted cost (``correction_cost``) is at most this
# fraction of the vpmaddubsw conv's time, which saves a third of vpmaddwd's (1.53x its rate)
SPLIT_COST = 0.12


def correction_cost(w: np.ndarray, unsafe: int) -> float:
    """The conv correction's time over the ``vpmaddubsw`` conv's, predicted per output from
    the instructions each takes (``3 K / 32`` for the conv, 3 per 32 products): the
    channels-first copy of the input (``3 C`` per output position, shared by ``O`` channels),
    storing and re-reading the int32 output (about 2), and 3 per ``LANES`` outputs for each
    nonzero of ``w_c`` (``unsafe`` of them, one per unsafe pair). Calibrated on ResNet-50 int8
    (2-core AMD EPYC, LLVM znver3: AVX2): the measured cost was about twice this, so
    ``SPLIT_COST`` is a quarter of the saving."""
    o, kh, kw, c = w.shape
    k = kh * kw * c
    conv = 3 * k / 32
    return (3 * c / o + 2 + 3 / LANES * unsafe / o) / conv


def conv_split(w: np.ndarray, stride: tuple[int, int], found=None) -> bool:
    """Whether an ``[O, KH, KW, C]`` int8 conv weight (C a multiple of 4) with unsafe pairs
    should be split, not widened for ``vpmaddwd``: stride 1 (the correction reads adjacent
    inputs) and a correction predicted cheap (``correction_cost``): ResNet-50's 3x3 convs and
    its 1x1 convs of 1024-2048 outputs, not the narrow 1x1 ones, whose copy of the input is
    shared by few outputs and whose short K has more unsafe pairs per product. ``found``:
    ``excess(w, 3)`` if the caller has it."""
    if tuple(stride) != (1, 1):
        return False
    found = excess(w, 3) if found is None else found
    return correction_cost(w, found[1].size) <= SPLIT_COST


def _planes_ir(xp, xt):
    """``xt[n, c, h Wp + w] = xp[n, h, w, c]`` (channels first, each plane flattened), zeros
    after the last row; rows ``(n, h)`` in parallel, each read from L1 once per channel."""
    n_img, hp, wp, c = (int(d) for d in xp.shape)
    size = int(xt.shape[2])
    with IRBuilder() as ib, T.seq_scope():
        xp, xt = T.buffer_proxy(xp), T.buffer_proxy(xt)
        with T.parallel(0, n_img * hp) as p:
            n, h = p // hp, p % hp
            with T.serial(0, c) as ch, T.serial(0, wp) as w:
                xt[n, ch, h * wp + w] = xp[n, h, w, ch]
        with T.serial(0, n_img) as n, T.serial(0, c) as ch, T.serial(0, size - hp * wp) as t:
            xt[n, ch, hp * wp + t] = tirx.const(0, "uint8")
    return ib.get()


def _conv_scatter_ir(xt, starts, chans, taps, vals, out, width: int, row: int):
    """For each output row ``(n, oh)`` (in parallel) and channel ``o``: a vector of ``row``
    positions (``W'`` rounded up to ``LANES``), the sum over the channel's nonzeros ``e`` of
    ``xt[n, chans[e], oh Wp + ow + taps[e]] * vals[e]``; its first ``W'`` stored."""
    n_img, rows, cols, channels = (int(d) for d in out.shape)
    with IRBuilder() as ib, T.seq_scope():
        xt, starts, chans, taps, vals, out = (T.buffer_proxy(b) for b in (xt, starts, chans, taps, vals, out))
        with T.parallel(0, n_img * rows) as p:
            n, oh = p // rows, p % rows
            acc = T.buffer_proxy(T.alloc_buffer((row,), "int32", scope="local"))
            with T.serial(0, channels) as o:
                with T.vectorized(0, row) as i:
                    acc[i] = tirx.const(0, "int32")
                with T.serial(starts[o], starts[o + 1]) as e, T.vectorized(0, row) as i:
                    acc[i] = acc[i] + xt[n, chans[e], oh * width + i + taps[e]].astype("int32") * vals[e]
                with T.serial(0, cols) as i:
                    out[n, oh, i, o] = acc[i]
    return ib.get()


def conv_correction(bb: relax.BlockBuilder, xp: relax.Expr, found, channels: int, dilation: tuple[int, int],
                    out_hw: tuple[int, int]) -> relax.Expr:
    """``conv2d(xp, w_c)`` (NHWC, stride 1, no padding: ``xp`` padded already) in int32 for a
    sparse ``w_c [O = channels, KH, KW, C]`` given by its nonzeros ``found`` (``excess(w, 3)``). The input, channels first and each plane flattened
    (``xt [N, C, Hp Wp + tail]``, ``_planes_ir``), is read a row of outputs at a time: the
    output ``(oh, ow)`` reads ``oh Wp + ow + kh d Wp + kw d`` of its plane, so each nonzero
    weight is one vector load, multiply and add per ``LANES`` outputs (``_conv_scatter_ir``)."""
    n_img, hp, wp, c = (int(d) for d in xp.ty.shape.values)
    out_h, out_w = out_hw
    dh, dw = dilation
    (o, kh, kw, ci), vals = found
    starts = np.searchsorted(o, np.arange(channels + 1)).astype(np.int32)
    taps = (kh * dh * wp + kw * dw).astype(np.int32)
    row = -(-out_w // LANES) * LANES
    size = max(hp * wp, (out_h - 1) * wp + row + int(taps.max(initial=0)))
    xt = bb.emit_te(lambda x: te.extern([(n_img, c, size)], [x], lambda ins, outs: _planes_ir(ins[0], outs[0]),
                                        dtype=["uint8"], name="int8_planes"), xp, primfunc_name_hint="int8_planes")

    def kernel(x, st, ch, tp, v):
        return te.extern([(n_img, out_h, out_w, channels)], [x, st, ch, tp, v],
                         lambda ins, outs: _conv_scatter_ir(*ins, outs[0], wp, row), dtype=["int32"],
                         name="int8_pair_conv_correction")

    return bb.emit_te(kernel, xt, relax.const(starts), relax.const(ci.astype(np.int32)), relax.const(taps),
                      relax.const(vals.astype(np.int32)), primfunc_name_hint="int8_pair_conv_correction")


def mark_pass() -> tvm.transform.Pass:
    """Record on each PrimFunc (attribute ``schedules/int8.SAFE_PAIRS``: parameter position ->
    axes) the constant int8 parameters that are ``safe`` along an axis at every call site."""
    from .schedules.int8 import SAFE_PAIRS

    @tvm.transform.module_pass(opt_level=0, name="HetcMarkSafePairs")
    def mark(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        found: dict[tvm.ir.GlobalVar, dict[int, set[int]]] = {}
        call_tir = tvm.ir.Op.get("relax.call_tir")

        def axes_of(const) -> set[int]:
            value = const.value.numpy()
            return {axis for axis in range(value.ndim) if safe(value, axis)}

        for gv, func in mod.functions.items():
            if not isinstance(func, relax.Function):
                continue
            for binding in relax.analysis.get_var2val(func).values():
                if not (isinstance(binding, relax.Call) and binding.op.same_as(call_tir)):
                    continue
                callee, args = binding.args[0], binding.args[1]
                args = list(args.fields) if isinstance(args, relax.Tuple) else [args]
                marks = {}
                for pos, arg in enumerate(args):
                    if isinstance(arg, tvm.ir.GenericConst) and str(arg.value.dtype) == "int8":
                        axes = axes_of(arg)
                        if axes:
                            marks[pos] = axes
                known = found.get(callee)
                found[callee] = marks if known is None else {
                    pos: known[pos] & marks[pos] for pos in known.keys() & marks.keys() if known[pos] & marks[pos]}
        for gv, marks in found.items():
            if marks and gv in mod.functions and isinstance(mod[gv], tvm.tirx.PrimFunc):
                mod[gv] = mod[gv].with_attr(SAFE_PAIRS, {pos: sorted(axes) for pos, axes in marks.items()})
        return mod

    return mark
