"""The recurrent loop of ONNX LSTM / GRU / RNN as one hand-written TIR kernel.

The converter (``ops/rnn.py``) computes the input projections ``X·W^T + Wb (+ Rb)`` of the
whole sequence in one matmul; this kernel runs the time loop over them. Sequence length and
batch are symbolic, so the loop is a serial TIR loop, not unrolled. Every (direction, batch
row) is an independent recurrence: the outer loop runs them in parallel, and each runs its
steps with its state in per-thread buffers. A step is a GEMV ``h·R^T`` in blocks of ``JT``
outputs (vectorized over them, accumulated in registers), then the gate math, vectorized over
the hidden units with a rational tanh (sigmoid from it) instead of libm calls. R is packed
transposed in blocks of ``JT`` outputs, ``rt[d, j // JT, k, j % JT] = R[d, j, k]``, so that a
block streams contiguous memory: unpacked, a block's rows are 4 KB apart at H = 256 and fall
in a few cache sets (measured 3x slower on a Zen 5, AVX-512). At batch 1 a step reads all of R (1 MB at H = 256):
the kernel runs at about the L2 bandwidth, as onnxruntime's GEMV does.

Buffers (``layout`` 0 / 1 as ONNX):
    xw   (T, B, D*G*H) / (B, T, D*G*H)   projections, both biases (GRU with
                                         linear_before_reset: not the h gate's Rb)
    rt   (D, G*H / JT, H, JT)            recurrent weights, transposed in blocks (``pack_r``)
    rbh  (D, H)                          GRU linear_before_reset only: the h gate's Rb
    p    (D, 3*H)                        LSTM peepholes, when given
    h0, c0  (D, B, H) / (B, D, H)        initial states, when given (else zeros)
    lens (B,) int32                      sequence_lens, when given
    y    (T, D, B, H) / (B, T, D, H), yh (and LSTM's yc) (D, B, H) / (B, D, H)
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ...tir_builder import finished, param

GATES = {"lstm": 4, "gru": 3, "rnn": 1}
# activation name (lower case) -> (uses alpha, uses beta, default alpha, default beta), as onnxruntime
ACTIVATIONS = {
    "relu": (False, False, 0.0, 0.0), "tanh": (False, False, 0.0, 0.0), "sigmoid": (False, False, 0.0, 0.0),
    "affine": (True, True, 1.0, 0.0), "leakyrelu": (True, False, 0.01, 0.0),
    "thresholdedrelu": (True, False, 1.0, 0.0), "scaledtanh": (True, True, 1.0, 1.0),
    "hardsigmoid": (True, True, 0.2, 0.5), "elu": (True, False, 1.0, 0.0),
    "softsign": (False, False, 0.0, 0.0),
    "softplus": (False, False, 0.0, 0.0),
}


@dataclass(frozen=True)
class Activation:
    name: str  # lower case, a key of ACTIVATIONS
    alpha: float = 0.0
    beta: float = 0.0

    def __call__(self, x: tirx.PrimExpr, dt: str) -> tirx.PrimExpr:
        a, b = tirx.const(self.alpha, dt), tirx.const(self.beta, dt)
        one, zero = tirx.const(1, dt), tirx.const(0, dt)
        name = self.name
        if name == "tanh":
            return _tanh(x, dt)
        if name == "sigmoid":
            return _sigmoid(x, dt)
        if name == "relu":
            return tirx.max(x, zero)
        if name == "affine":
            return a * x + b
        if name == "leakyrelu":
            return tirx.Select(x >= zero, x, a * x)
        if name == "thresholdedrelu":
            return tirx.Select(x > a, x, zero)
        if name == "scaledtanh":
            return a * _tanh(b * x, dt)
        if name == "hardsigmoid":
            return tirx.min(tirx.max(a * x + b, zero), one)
        if name == "elu":
            return tirx.Select(x >= zero, x, a * (tirx.exp(x) - one))
        if name == "softsign":
            return x / (one + tirx.abs(x))
        if name == "softplus":  # log(1 + e^x), without overflow for large x
            return tirx.max(x, zero) + tirx.log(one + tirx.exp(-tirx.abs(x)))
        raise ValueError(f"unknown activation {name}")


def _tanh(x: tirx.PrimExpr, dt: str) -> tirx.PrimExpr:
    """float32: TVM's ``fast_tanh`` rational approximation (vectorizes; error ~1e-7)."""
    if dt != "float32":
        return tirx.tanh(x)
    c = lambda v: tirx.const(v, "float32")
    x = tirx.max(tirx.min(x, c(9.0)), c(-9.0))
    x2 = x * x
    p = c(-2.76076847742355e-16)
    for a in (2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08, 1.48572235717979e-05,
              6.37261928875436e-04, 4.89352455891786e-03):
        p = x2 * p + c(a)
    q = c(1.19825839466702e-06)
    for b in (1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03):
        q = x2 * q + c(b)
    return x * p / q


def _sigmoid(x: tirx.PrimExpr, dt: str) -> tirx.PrimExpr:
    half = tirx.const(0.5, dt)
    return half + half * _tanh(half * x, dt)


@dataclass(frozen=True)
class Recurrence:
    """Everything the kernel is specialised for (static), per ONNX node."""

    cell: str  # "lstm" | "gru" | "rnn"
    hidden: int
    reverse: tuple[bool, ...]  # per direction
    activations: tuple[tuple[Activation, ...], ...]  # per direction: (f,) / (f, g) / (f, g, h)
    clip: float | None = None
    input_forget: bool = False
    linear_before_reset: bool = False
    peephole: bool = False
    layout: int = 0
    initial_h: bool = False
    initial_c: bool = False
    lens: bool = False
    dtype: str = "float32"

    @property
    def gates(self) -> int:
        return GATES[self.cell]


def tile(hidden: int) -> int:
    """Outputs per GEMV row block (``JT``): a divisor of ``hidden`` of at most 64 (8 AVX2 registers)."""
    for t in (64, 32, 16, 8):
        if hidden % t == 0:
            return t
    return max(d for d in range(1, min(hidden, 64) + 1) if hidden % d == 0)


def _vloop(n: int, body) -> None:
    """``body(j)`` for j < n, vectorized by 8 where n allows."""
    if n % 8 == 0:
        with T.serial(0, n // 8) as jo, T.vectorized(0, 8) as ji:
            body(jo * 8 + ji)
    else:
        with T.serial(0, n) as j:
            body(j)


def build(rec: Recurrence) -> tirx.PrimFunc:
    """The kernel for ``rec`` (buffers as in the module docstring)."""
    dt, H, D, G = rec.dtype, rec.hidden, len(rec.reverse), rec.gates
    GH = G * H
    n_t, n_b = tirx.Var("seq", "int64"), tirx.Var("batch", "int64")

    def seq_major(t, b):  # the (time, batch) part of an index, by layout
        return [t, b] if rec.layout == 0 else [b, t]

    state_shape = (D, n_b, H) if rec.layout == 0 else (n_b, D, H)
    with IRBuilder() as ib, T.prim_func():
        T.func_attr({"tir.noalias": True, "tir.is_scheduled": True, "hetc.schedule_rule": "rnn"})
        xw = param("xw", tuple(seq_major(n_t, n_b)) + (D * GH,), dt)
        rt = param("rt", (D, GH // tile(H), H, tile(H)), dt)
        rbh = param("rbh", (D, H), dt) if rec.cell == "gru" and rec.linear_before_reset else None
        p = param("p", (D, 3 * H), dt) if rec.peephole else None
        h0 = param("h0", state_shape, dt) if rec.initial_h else None
        c0 = param("c0", state_shape, dt) if rec.initial_c else None
        lens = param("lens", (n_b,), "int32") if rec.lens else None
        y_shape = (n_t, D, n_b, H) if rec.layout == 0 else (n_b, n_t, D, H)
        y = param("y", y_shape, dt)
        yh = param("yh", state_shape, dt)
        yc = param("yc", state_shape, dt) if rec.cell == "lstm" else None

        def state(buf, d, b, j):
            return buf[d, b, j] if rec.layout == 0 else buf[b, d, j]

        def store_state(buf, value, d, b, j):
            T.buffer_store(buf, value, [d, b, j] if rec.layout == 0 else [b, d, j])

        def store_y(value, t, d, b, j):
            T.buffer_store(y, value, [t, d, b, j] if rec.layout == 0 else [b, t, d, j])

        with T.parallel(0, D * n_b) as db:
            d_var, b = db // n_b, db % n_b
            # "global" scope: small buffers become allocas that LLVM keeps in registers
            # (the accumulators); "local" ones are heap workspaces it must store to every k
            h = T.decl_buffer((H,), dt, scope="global", layout=None)
            c = T.decl_buffer((H,), dt, scope="global", layout=None) if rec.cell == "lstm" else None
            g = T.decl_buffer((GH,), dt, scope="global", layout=None)
            acc = T.decl_buffer((tile(H),), dt, scope="global", layout=None)  # GEMV accumulators
            gru_rh = rec.cell == "gru" and not rec.linear_before_reset
            rh = T.decl_buffer((H,), dt, scope="global", layout=None) if gru_rh else None
            if rec.lens:
                length = T.bind(tirx.max(tirx.min(lens[b].astype("int64"), n_t), tirx.const(0, "int64")))
            else:
                length = n_t
            for d in range(D):
                with T.If(d_var == d) if D > 1 else _nothing():
                    with T.Then() if D > 1 else _nothing():
                        _direction(rec, d, b, n_t, length, xw, rt, rbh, p, h0, c0, h, c, g, acc, rh,
                                   seq_major, state, store_state, store_y, yh, yc)
    return finished(ib)


def pack_r(r, hidden: int):
    """The kernel's ``rt`` from ONNX's R ``(D, G*H, H)`` (a Relax expression)."""
    from tvm import relax

    d, gh, h = (int(v) for v in r.ty.shape.values)
    jt = tile(hidden)
    return relax.op.permute_dims(relax.op.reshape(r, (d, gh // jt, jt, h)), [0, 1, 3, 2])


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _direction(rec: Recurrence, d: int, b, n_t, length, xw, rt, rbh, p, h0, c0, h, c, g, acc, rh,
               seq_major, state, store_state, store_y, yh, yc) -> None:
    """One direction's recurrence for batch row ``b`` (``d`` static)."""
    dt, H, GH = rec.dtype, rec.hidden, rec.gates * rec.hidden
    zero = tirx.const(0, dt)
    one = tirx.const(1, dt)
    acts = rec.activations[d]

    def clip(x):
        if rec.clip is None:
            return x
        return tirx.min(tirx.max(x, tirx.const(-rec.clip, dt)), tirx.const(rec.clip, dt))

    def act(i, x):
        return acts[i](clip(x), dt)

    _vloop(H, lambda j: T.buffer_store(h, state(h0, d, b, j) if h0 is not None else zero, [j]))
    if c is not None:
        _vloop(H, lambda j: T.buffer_store(c, state(c0, d, b, j) if c0 is not None else zero, [j]))

    with T.serial(0, n_t) as s, T.If(s < length) if rec.lens else _nothing():
        with T.Then() if rec.lens else _nothing():
            t = T.bind(length - 1 - s) if rec.reverse[d] else s

            def xp(j):  # the input projection of gate row j at step t
                return xw[tuple(seq_major(t, b)) + (d * GH + j,)]

            if rec.cell == "lstm":
                _matvec(rec, rt, acc, d, h, g, 0, GH, xp)
                pi = (lambda j: p[d, j]) if rec.peephole else None

                def cell_update(j):
                    cp = c[j]
                    gi = g[j] + (p[d, j] * cp if pi else zero)
                    i = act(0, gi)
                    if rec.input_forget:
                        f = one - i
                    else:
                        f = act(0, g[2 * H + j] + (p[d, 2 * H + j] * cp if pi else zero))
                    T.buffer_store(c, f * cp + i * act(1, g[3 * H + j]), [j])
                    cn = c[j]  # the new cell state (``cp`` now reads it too)
                    o = act(0, g[H + j] + (p[d, H + j] * cn if pi else zero))
                    T.buffer_store(h, o * acts[2](cn, dt), [j])  # unclipped, as onnxruntime

                _vloop(H, cell_update)
            elif rec.cell == "gru":
                if rec.linear_before_reset:
                    _matvec(rec, rt, acc, d, h, g, 0, 2 * H, xp)
                    _matvec(rec, rt, acc, d, h, g, 2 * H, H, lambda j: rbh[d, j - 2 * H])

                    def gru_update(j):
                        z = act(0, g[j])
                        r = act(0, g[H + j])
                        hh = act(1, xp(2 * H + j) + r * g[2 * H + j])
                        T.buffer_store(h, (one - z) * hh + z * h[j], [j])
                else:
                    _matvec(rec, rt, acc, d, h, g, 0, 2 * H, xp)
                    _vloop(H, lambda j: T.buffer_store(rh, act(0, g[H + j]) * h[j], [j]))
                    _matvec(rec, rt, acc, d, rh, g, 2 * H, H, xp)

                    def gru_update(j):
                        z = act(0, g[j])
                        hh = act(1, g[2 * H + j])
                        T.buffer_store(h, (one - z) * hh + z * h[j], [j])

                _vloop(H, gru_update)
            else:
                _matvec(rec, rt, acc, d, h, g, 0, H, xp)
                _vloop(H, lambda j: T.buffer_store(h, act(0, g[j]), [j]))
            _vloop(H, lambda j: store_y(h[j], t, d, b, j))
        if rec.lens:  # steps past this row's length: zeros
            with T.Else():
                _vloop(H, lambda j: store_y(zero, s, d, b, j))

    _vloop(H, lambda j: store_state(yh, h[j], d, b, j))
    if yc is not None:
        _vloop(H, lambda j: store_state(yc, c[j], d, b, j))


def _matvec(rec: Recurrence, rt, acc, d: int, src, out, lo: int, n: int, init) -> None:
    """``out[j] = init(j) + sum_k src[k] * R[d, j, k]`` for ``lo <= j < lo + n``."""
    jt = tile(rec.hidden)  # divides lo and n (multiples of the hidden size)
    with T.serial(0, n // jt) as jo:
        base = lo + jo * jt
        with T.vectorized(0, jt) as ji:
            T.buffer_store(acc, init(base + ji), [ji])
        with T.serial(0, rec.hidden) as k, T.vectorized(0, jt) as ji:
            T.buffer_store(acc, acc[ji] + src[k] * rt[d, lo // jt + jo, k, ji], [ji])
        with T.vectorized(0, jt) as ji:
            T.buffer_store(out, acc[ji], [base + ji])
