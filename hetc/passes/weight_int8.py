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


def _int8_matmul(x, q, scale):
    from tvm import te

    k = te.reduce_axis((0, q.shape[0]), "k")
    acc = te.compute((*x.shape[:-1], q.shape[1]),
                     lambda *i: te.sum(x[(*i[:-1], k)] * q[k, i[-1]].astype(x.dtype), axis=k), name="matmul_w8")
    return te.compute(acc.shape, lambda *i: acc(*i) * scale[i[-1]], name="dequantize")


@relax.expr_functor.mutator
class _Int8Weights(relax.PyExprMutator):
    def __init__(self, mod) -> None:
        super().__init__(mod)
        self.count = 0

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
        return self.builder_.call_te(_int8_matmul, x, relax.const(q), relax.const(scale),
                                     primfunc_name_hint="matmul_w8")


def weight_int8_pass() -> tvm.transform.Pass:
    """The rewrite over every Relax function (module docstring)."""

    @tvm.transform.module_pass(opt_level=0, name="HetcWeightInt8")
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        mutator = _Int8Weights(mod)
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                mutator.builder_.update_func(gv, mutator.visit_expr(func))
        return mutator.builder_.get()

    return apply
