"""Softmax over a last axis of symbolic length (a decoder's attention over ``past + seq``
positions, an encoder's over a symbolic ``seq``): one hand-written kernel, rows in parallel.

TOPI's softmax (``pipeline._fast_softmax`` takes the static lengths) leaves a row of symbolic
length to loops no schedule rule splits into vectors: its max, exponentials and sums ran one
element at a time, 1.5-1.7 ns each. Llama 134M's 1,024-token prompt spent 200-250 ms of 1.6 s
in it, a decoding step at batch 4 and past 2000 1.8 ms (2-core Intel Xeon, LLVM
emeraldrapids, AVX-512). Per row, here: the max in ``LANES`` partial maxima over whole vectors,
then across them and the scalar tail; ``exp(x - max)`` (TOPI's polynomial ``fast_exp``,
written out below) stored and summed the same way; the row scaled by one reciprocal.
"""

from __future__ import annotations

import math

from tvm import relax, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ...tir_builder import finished, param

LANES = 16  # partial maxima and sums per row: one AVX-512 vector, two AVX2 ones


def fast_exp(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """TOPI's ``fast_exp`` for float32 (``topi/elemwise.h``): ``2^n * p(f)`` with ``x = n ln2 + f``
    and a degree-7 polynomial ``p``, the argument clamped to +-88.376; relative error about 1e-7."""
    f32 = "float32"

    def c(v):
        return tirx.const(v, f32)

    clamped = tirx.max(tirx.min(x, c(88.3762626647950)), c(-88.3762626647949))
    n = tirx.floor(clamped * c(1.44269504088896341) + c(0.5))
    f = clamped - n * c(0.6931471805599453)
    y = c(1.9875691500e-4)
    for p in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        y = y * f + c(p)
    y = y * f * f + f + c(1.0)
    scale = tirx.reinterpret(f32, tirx.shift_left(tirx.Cast("int32", n + c(127.0)), tirx.const(23, "int32")))
    return tirx.max(scale * y, x)


def kernel(shape, dtype: str = "float32") -> tirx.PrimFunc:
    """``out = softmax(x, axis=-1)`` for ``x`` of ``shape`` (static dims as ints; each symbolic
    one gets a variable of its own)."""
    dims = [int(d) if isinstance(d, (int, tirx.IntImm)) else tirx.Var(f"n{i}", "int64") for i, d in enumerate(shape)]
    with IRBuilder() as ib, T.prim_func():
        T.func_attr({"tir.noalias": True, "tir.is_scheduled": True, "hetc.schedule_rule": "softmax_rows",
                     "op_pattern": 8})
        x = param("x", dims, dtype)
        out = param("out", dims, dtype)
        with T.sblock("root"):  # the body a root block, as Relax's passes expect (RewriteDataflowReshape)
            n, rows = dims[-1], math.prod(dims[:-1])
            flat_x = T.decl_buffer((rows * n,), dtype, data=x.data, layout=None)
            flat = T.decl_buffer((rows * n,), dtype, data=out.data, layout=None)
            steps = n // LANES
            rest = n - steps * LANES
            with T.parallel(0, rows) as r:
                base = T.bind(r * n)
                tail = T.bind(base + steps * LANES)
                part = T.decl_buffer((LANES,), dtype, scope="global", layout=None)
                one = T.decl_buffer((1,), dtype, scope="global", layout=None)
                lowest = tirx.min_value(dtype)
                # the row's max
                with T.vectorized(0, LANES) as lane:
                    T.buffer_store(part, lowest, [lane])
                with T.serial(0, steps) as o, T.vectorized(0, LANES) as lane:
                    T.buffer_store(part, tirx.max(part[lane], flat_x[base + o * LANES + lane]), [lane])
                T.buffer_store(one, lowest, [0])
                with T.serial(0, LANES) as lane:
                    T.buffer_store(one, tirx.max(one[0], part[lane]), [0])
                with T.serial(0, rest) as t:
                    T.buffer_store(one, tirx.max(one[0], flat_x[tail + t]), [0])
                top = T.bind(one[0])
                # exp(x - max), stored, and its sum
                with T.vectorized(0, LANES) as lane:
                    T.buffer_store(part, tirx.const(0, dtype), [lane])
                with T.serial(0, steps) as o:
                    with T.vectorized(0, LANES) as lane:
                        T.buffer_store(flat, fast_exp(flat_x[base + o * LANES + lane] - top), [base + o * LANES + lane])
                    with T.vectorized(0, LANES) as lane:
                        T.buffer_store(part, part[lane] + flat[base + o * LANES + lane], [lane])
                T.buffer_store(one, tirx.const(0, dtype), [0])
                with T.serial(0, LANES) as lane:
                    T.buffer_store(one, one[0] + part[lane], [0])
                with T.serial(0, rest) as t:
                    T.buffer_store(flat, fast_exp(flat_x[tail + t] - top), [tail + t])
                    T.buffer_store(one, one[0] + flat[tail + t], [0])
                inverse = T.bind(tirx.const(1, dtype) / one[0])
                with T.serial(0, steps) as o, T.vectorized(0, LANES) as lane:
                    T.buffer_store(flat, flat[base + o * LANES + lane] * inverse, [base + o * LANES + lane])
                with T.serial(0, rest) as t:
                    T.buffer_store(flat, flat[tail + t] * inverse, [tail + t])
    return finished(ib)


def takes(call: relax.Call) -> bool:
    """A float32 softmax over the last axis, whose length is symbolic."""
    shape = call.args[0].ty.shape
    if str(call.args[0].ty.dtype) != "float32" or shape is None or not hasattr(shape, "values"):
        return False
    rank = len(shape.values)
    return rank >= 1 and int(call.attrs.axis) % rank == rank - 1 and not isinstance(shape.values[-1], tirx.IntImm)


def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """``call`` (``takes``) as a call of ``kernel``."""
    x = call.args[0]
    func = bb.add_func(kernel(x.ty.shape.values), "softmax_rows")
    return relax.call_tir(func, [x], relax.TensorType(list(x.ty.shape.values), x.ty.dtype))
