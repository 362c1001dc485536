"""Weight-only int8: constant matmul weights stored as int8 with a float scale per output
channel, dequantized inside the matmul (``hetc compile --weights int8``).

A decoding step at batch 1 reads every weight once and does two flops per weight: its time is
the bytes of the weights over the memory bandwidth. Stored as int8 they are a quarter of the
float32 bytes. ``scale[n] = max_k |w[k, n]| / 127`` (symmetric, per output channel), chosen at
compile time from the float32 weights; ``q = round(w / scale)``, |q| <= 127. ``R.matmul(x, W)``
with ``W`` a float32 constant of at least ``MIN_ELEMENTS`` elements is rewritten (the LM head
included); the embedding tables (gathered, not multiplied) and everything else stay float32.
The rewrite runs after constant folding (a transposed weight is a constant by then) and before
legalization; the weights are packed at compile time, and fusion appends the bias add.

Two kernels, by what the CPU has (``schedules/int8.instruction``):

- **An integer dot product** (AVX512-VNNI's ``vpdpwssd``, else AVX2's ``vpmaddwd``), for
  symbolic rows (decoding) or at most ``STATIC_ROWS`` static ones: each row of ``x`` is
  rounded to int16 in the kernel, ``xq = round(x * bound / p)`` with ``p = max_k |x|`` the
  row's peak, and the int8 weights are sign-extended and multiplied into exact int32 sums:

      out[.., n] = sum_k xq[.., k] * q[k, n]  *  p / bound * scale[n]

  ``bound = min(32767, (2**31 - 1) // (127 K))`` (``row_bound``), so that no sum of K products
  can overflow. Two instructions per 32 weights instead of six (``vpmovsxbd``, ``vcvtdq2ps``,
  FMA per 16): converting each int8 to float had made the float kernel compute-bound (a
  1x768 @ 768x768 chain of 94 MB read 10 GB/s with it, 19 GB/s with this one; 2-core Intel
  Xeon, LLVM emeraldrapids, AVX-512 + VNNI). The rounding adds a relative error of at most
  ``0.5 / bound`` of the row's peak per activation: 2.3e-5 at K = 768, 9.1e-5 at K = 3072,
  below the weights' own ``0.5 / 127`` of a column's peak. ``schedules/int8.py`` schedules it
  (``stage_rows``: one-row tiles over prefetched panels for symbolic rows).
- **Otherwise** (and for an odd K), the float kernel (the CPU's contraction rule): each
  loaded int8 converted to float in registers, multiplied and accumulated in float32, the sum
  scaled by the column's scale: ``out[.., n] = scale[n] * sum_k x[.., k] * float(q[k, n])``.
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax

MIN_ELEMENTS = 4096  # smaller weights stay float32 (nothing to gain)
PANEL_COLUMNS = 64  # a one-row tile's columns in the int16 form (4 AVX-512 vectors)
# Static rows beyond this many keep the float kernel: its tiles of several rows reuse each
# converted weight vector, where the int16 form's row tiles are smaller (37 static rows of a
# 768 x 768 matmul: 1.26 ms float, 2.39 ms int16; 2-core Intel Xeon, LLVM emeraldrapids).
STATIC_ROWS = 8


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


def _quantized_matmul(x, q, scale, bound: int, columns: int):
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
    return te.compute((*rows, columns), lambda *i: acc(*i).astype("float32") * (again[i[:-1]] * (1 / limit) * scale[i[-1]]),
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
        leading = x.ty.shape.values[:-1]
        many = all(isinstance(d, tvm.tirx.IntImm) for d in leading) and math.prod(int(d) for d in leading) > STATIC_ROWS
        if not self.words or many or q.shape[0] % 2:  # (the int16 steps take the rows two at a time)
            return self.builder_.call_te(_int8_matmul, x, relax.const(q), relax.const(scale),
                                         primfunc_name_hint="matmul_w8")
        columns = q.shape[1]
        if columns % 16:
            # Zero columns up to whole panels, computed and never read: GPT-2's LM head (50257
            # columns, no vector width divides them) is the largest weight of its model.
            extra = -columns % PANEL_COLUMNS
            q, scale = np.pad(q, [(0, 0), (0, extra)]), np.pad(scale, [(0, extra)], constant_values=1)
        return self.builder_.call_te(_quantized_matmul, x, relax.const(q), relax.const(scale), row_bound(q.shape[0]),
                                     columns, primfunc_name_hint="matmul_w8")


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
