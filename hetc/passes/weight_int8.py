"""Weight-only int8: constant matmul weights stored as int8 with a float scale per output
channel, dequantized inside the matmul's inner loop (``hetc compile --weights int8``).

A decoding step at batch 1 reads every weight once and does two flops per weight: its time is
the bytes of the weights over the memory bandwidth. Stored as int8 they are a quarter of the
float32 bytes; the kernel converts each loaded int8 to float in registers, multiplies and
accumulates in float32, and scales the finished sum by the column's scale:

    out[.., n] = scale[n] * sum_k x[.., k] * float(q[k, n])      q = round(w / scale), |q| <= 127

``scale[n] = max_k |w[k, n]| / 127`` (symmetric, per output channel), chosen at compile time
from the float32 weights. ``R.matmul(x, W)`` with ``W`` a float32 constant of at least
``MIN_ELEMENTS`` elements is rewritten (the LM head included); activations, the embedding
tables (gathered, not multiplied) and everything else stay float32. The rewrite runs after
constant folding (a transposed weight is a constant by then) and before legalization; the
CPU's contraction rule schedules the kernel (packing the int8 weights at compile time, as it
packs float ones), and fusion appends the bias add to it.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

MIN_ELEMENTS = 4096  # smaller weights stay float32 (nothing to gain)


def quantize(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 q, float32 scale) with ``q * scale ~ weight``, one scale per column (output channel)."""
    peak = np.abs(weight).max(axis=0)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(weight / scale), -127, 127).astype(np.int8)
    return q, scale


def row_bound(depth: int) -> int:
    """The largest |x| an int16 activation row may take so that no int32 sum of ``depth``
    products with int8 weights (|q| <= 127) can overflow."""
    return min(32767, (2**31 - 1) // (127 * depth))


def reference(x: np.ndarray, q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """What the int16-activation kernel computes (``_quantized_matmul``), in numpy (float64 sums
    of the same integers): for tests."""
    bound = float(row_bound(q.shape[0]))
    peak = np.abs(x).max(axis=-1, keepdims=True).astype(np.float32)
    inverse = np.where(peak > 0, np.float32(bound) / np.where(peak > 0, peak, 1), 0).astype(np.float32)
    scaled = (x * inverse).astype(np.float32)
    xq = np.clip(np.sign(scaled) * np.floor(np.abs(scaled) + 0.5), -bound, bound)  # round half away from zero
    return (xq.astype(np.float64) @ q.astype(np.float64)) * (peak.astype(np.float64) / bound) * scale


def _quantized_matmul(x, q, scale, bound: int):
    """``x @ (q * scale)`` with ``x``'s rows rounded to int16 in the kernel: per row its peak
    ``p = max_k |x[.., k]|``, ``xq = round(x * bound / p)`` (|xq| <= ``bound``), then exact int32
    sums ``sum_k xq[.., k] * q[k, n]``, scaled by ``p / bound * scale[n]``. One kernel: each
    tile rounds its rows itself, then a pass scales the sums (``schedules/int8.py``)."""
    from tvm import te

    depth, rows = int(q.shape[0]), x.shape[:-1]
    lanes = 16 if depth % 16 == 0 else 1  # the peak in 16 lanes first (vectorized), then across them

    def row_peak(name):
        o = te.reduce_axis((0, depth // lanes), "o")
        part = te.compute((*rows, lanes), lambda *i: te.max(te.abs(x[(*i[:-1], o * lanes + i[-1])]), axis=o),
                          name=f"{name}_part")
        lane = te.reduce_axis((0, lanes), "lane")
        return te.compute(rows, lambda *i: te.max(part[(*i, lane)], axis=lane), name=name)

    peak = row_peak("row_peak")
    zero, limit = tvm.tirx.const(0, "float32"), float(bound)

    def rounded(*i):
        inverse = tvm.tirx.Select(peak(*i[:-1]) > zero, limit / peak(*i[:-1]), zero)
        value = tvm.tirx.round(x(*i) * inverse)
        return tvm.tirx.max(tvm.tirx.min(value, limit), -limit).astype("int16")

    xq = te.compute(x.shape, rounded, name="quantize_rows")
    k = te.reduce_axis((0, depth), "k")
    acc = te.compute((*rows, q.shape[1]),
                     lambda *i: te.sum(xq[(*i[:-1], k)].astype("int32") * q[k, i[-1]].astype("int32"), axis=k),
                     name="matmul_w8")
    # The peak again for the scaling pass: the contraction's tile computes its rows' peaks in
    # its own loop, which a pass after that loop cannot read (a schedule's blocks after the loop
    # may only read what the loop writes whole: here the int32 sums).
    again = row_peak("row_peak_again")
    return te.compute(acc.shape, lambda *i: acc(*i).astype("float32") * (again[i[:-1]] * (1 / limit) * scale[i[-1]]),
                      name="dequantize")


def _int8_matmul(x, q, scale):
    from tvm import te

    k = te.reduce_axis((0, q.shape[0]), "k")
    acc = te.compute((*x.shape[:-1], q.shape[1]),
                     lambda *i: te.sum(x[(*i[:-1], k)] * q[k, i[-1]].astype(x.dtype), axis=k), name="matmul_w8")
    return te.compute(acc.shape, lambda *i: acc(*i) * scale[i[-1]], name="dequantize")


@relax.expr_functor.mutator
class _Int8Weights(relax.PyExprMutator):
    def __init__(self, mod, words: bool) -> None:
        super().__init__(mod)
        self.count, self.words = 0, words

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.matmul" and len(call.args) == 2):
            return call
        x, weight = call.args
        if not (isinstance(weight, tvm.ir.Constant) and str(weight.value.dtype) == "float32"
                and len(weight.value.shape) == 2 and str(x.ty.dtype) == "float32" and len(x.ty.shape.values) >= 2
                and int(np.prod(weight.value.shape)) >= MIN_ELEMENTS):
            return call
        q, scale = quantize(weight.value.numpy())
        self.count += 1
        if not self.words:
            return self.builder_.call_te(_int8_matmul, x, relax.const(q), relax.const(scale),
                                         primfunc_name_hint="matmul_w8")
        return self.builder_.call_te(_quantized_matmul, x, relax.const(q), relax.const(scale), row_bound(q.shape[0]),
                                     primfunc_name_hint="matmul_w8")


def weight_int8_pass(words: bool = False) -> tvm.transform.Pass:
    """The rewrite over every Relax function (module docstring); ``words``: the int16
    activation form, for CPUs with an integer dot product."""

    @tvm.transform.module_pass(opt_level=0, name="HetcWeightInt8")
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        mutator = _Int8Weights(mod, words)
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                mutator.builder_.update_func(gv, mutator.visit_expr(func))
        return mutator.builder_.get()

    return apply
