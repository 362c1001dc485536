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
    x = np.moveaxis(w, axis, -1).astype(np.int16)
    return x[..., 0::2], x[..., 1::2]


def safe(w: np.ndarray, axis: int) -> bool:
    """Whether every adjacent pair along ``axis`` of int8 ``w`` sums within +-128 (``vpmaddubsw``
    is exact on it for any uint8 input). An odd axis is not: its last element has no pair."""
    if w.dtype != np.int8 or w.shape[axis] % 2:
        return False
    w0, w1 = _pairs(w, axis)
    return w0.size == 0 or int(np.abs(w0 + w1).max()) <= LIMIT


def split(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """``(w_s, w_c)``, int8 both, ``w_s + w_c == w``: ``w_s`` safe along ``axis`` (even
    length), ``w_c`` nonzero only at the larger (in magnitude) weight of each unsafe pair, by
    the pair's excess over +-128 (at most 128 in magnitude: int8)."""
    w0, w1 = _pairs(w, axis)
    total = w0 + w1
    excess = total - np.clip(total, -LIMIT, LIMIT)
    first = np.abs(w0) >= np.abs(w1)
    c = np.zeros(w0.shape[:-1] + (2 * w0.shape[-1],), np.int16)
    c[..., 0::2] = np.where(first, excess, 0)
    c[..., 1::2] = np.where(first, 0, excess)
    w_c = np.moveaxis(c, -1, axis).astype(np.int8)
    return (w.astype(np.int16) - w_c).astype(np.int8), w_c


def entries(w_c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The nonzeros of a ``[K, N]`` correction weight as flat lists ``(rows, columns, values)``,
    int32, in row-major order (the rows of ``a`` read in order)."""
    rows, cols = np.nonzero(w_c)
    return rows.astype(np.int32), cols.astype(np.int32), w_c[rows, cols].astype(np.int32)


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


def correction(bb: relax.BlockBuilder, a: relax.Expr, w_c: np.ndarray) -> relax.Expr:
    """``a @ w_c`` in int32 for uint8 ``a [.., M, K]`` and a sparse int8 ``w_c [K, N]``: each
    row's products with the nonzeros only (``entries``), scattered into zeros. One pass over
    the int32 output (written here, read by the kernel that adds it): for BERT-base's
    dynamic int8 (about 0.1-0.3 nonzeros per column) far less than the int16 rows of
    ``vpmaddwd`` cost."""
    rows, cols, vals = entries(w_c)

    def kernel(x, r, c, v):
        return te.extern([(*x.shape[:-1], w_c.shape[1])], [x, r, c, v],
                         lambda ins, outs: _scatter_ir(*ins, outs[0]), dtype=["int32"], name="int8_pair_correction")

    return bb.emit_te(kernel, a, relax.const(rows), relax.const(cols), relax.const(vals),
                      primfunc_name_hint="int8_pair_correction")


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
