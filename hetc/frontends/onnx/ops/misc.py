"""Ops TVM 0.27 has no converter for, each small: BitCast, CumProd, LpNormalization, Swish,
SwiGLU, Celu, Det, the window functions, MelWeightMatrix, DFT, STFT and Col2Im.

All follow ``onnx.reference``:

- ``BitCast`` (26) reinterprets the bits (a TE ``reinterpret``); bool <-> 8-bit ints is a
  value cast (bool is one byte, 0/1).
- ``CumProd`` (26): ``relax.cumprod`` with ``exclusive``; ``reverse`` flips the axis around
  it. An ``axis`` input known only at run time computes every axis and picks one.
- ``LpNormalization`` (22; 1 for the older type list): ``p`` 1 or 2; a zero norm gives 0.
- ``Swish`` (24) ``x * sigmoid(alpha x)``; ``SwiGLU`` (28) ``swish(a) * b``; ``Celu`` (12).
- ``Det`` (22): closed forms for 1x1, 2x2 and 3x3 matrices (batched); larger ones are
  rejected.
- ``HannWindow``/``HammingWindow``/``BlackmanWindow``/``MelWeightMatrix`` (17): the outputs
  depend only on scalar inputs; constant ones are computed as the reference does and emitted
  as constants, run-time ones computed by the graph (``_window_runtime``; MelWeightMatrix's
  one formula, ``hetc.frontends.onnx.tables``, either way).
- ``DFT`` (17, 20) is a matmul with cos/sin matrices along the signal axis (zero padding or
  truncation to ``dft_length``, ``onesided``, ``inverse``, irfft for ``inverse`` +
  ``onesided``); a ``dft_length`` input must be a constant. float16/bfloat16 are
  computed in float32. A run-time ``axis`` computes every axis and picks one
  (``runtime_values.per_axis``). ``STFT`` (17) gathers frames, multiplies the window, then runs
  the same DFT along the frame axis; ``frame_step``/``frame_length`` may be run-time values
  (the frame count and length then symbolic dims, the DFT's cos/sin tables computed by the
  graph from the same formula, ``hetc.frontends.onnx.tables``).
- ``Col2Im`` (18): a scatter-add of every (block offset, block) column into the flattened
  image, with positions that fall in the padding sent to a discarded slot; the positions are
  one formula (``hetc.frontends.onnx.tables``): a constant table for constant
  ``image_shape``/``block_shape``, computed by the graph for run-time ones.
"""

from __future__ import annotations

import numpy as np
import tvm
from onnx import helper
from tvm import relax, te, tirx

from .. import runtime_values as rv
from ..registry import Attrs, ConvertContext, converter
from ..shapes import dims
from ..shapes import static_dims as _dims
from ..tables import math_for

_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")




def _opt(inputs: list, i: int):
    return inputs[i] if len(inputs) > i else None


def _const_array(ctx: ConvertContext, expr, name: str) -> np.ndarray:
    """The value of a constant input; a clear error if it is computed at run time."""
    if isinstance(expr, tvm.ir.GenericConst):
        return expr.value.numpy()
    if isinstance(expr, relax.ShapeExpr):
        return np.array([int(v) for v in expr.values], dtype=np.int64)
    raise ctx.error(f"input {name} must be a constant (freeze it with --constant-input)")


def _onnx_dtype(ctx: ConvertContext, code: int, attr: str) -> str:
    try:
        np_dtype = helper.tensor_dtype_to_np_dtype(int(code))
    except (KeyError, ValueError, TypeError):
        raise ctx.error(f"attribute {attr}={code} is not a supported tensor type") from None
    if int(code) == 16:
        return "bfloat16"
    name = np.dtype(np_dtype).name
    if np.dtype(np_dtype).kind not in "biuf":
        raise ctx.error(f"attribute {attr}={code} is not a supported tensor type")
    return name


def _const(value: np.ndarray, dtype: str) -> relax.Expr:
    """A constant of ``dtype`` (bfloat16 via a float32 constant and a cast)."""
    if dtype == "bfloat16":
        return relax.op.astype(relax.const(np.asarray(value, np.float32), "float32"), dtype)
    return relax.const(np.asarray(value).astype(dtype), dtype)


def _compute_dtype(dtype: str) -> str:
    return "float32" if dtype in ("float16", "bfloat16") else dtype


# ----------------------------------------------------------------------------- BitCast

@converter("BitCast", since=26)
def bitcast(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x = inputs[0]
    src = str(x.ty.dtype)
    dst = _onnx_dtype(ctx, attrs.get("to"), "to")
    bits = {"bool": 8}

    def width(d: str) -> int:
        return bits.get(d) or tvm.runtime.DataType(d).bits

    if width(src) != width(dst):
        raise ctx.error(f"BitCast needs equal bit widths: input {src} ({width(src)} bits), "
                        f"to={dst} ({width(dst)} bits)")
    if src == dst:
        return x
    if dst == "bool":  # any nonzero byte reads as True
        return relax.op.not_equal(x, relax.const(0, src))
    if src == "bool":
        return relax.op.astype(x, dst)
    return ctx.bb.emit_te(
        lambda t: te.compute(t.shape, lambda *i: tirx.reinterpret(dst, t(*i)), name="bitcast"), x)


# ----------------------------------------------------------------------------- CumProd

@converter("CumProd", since=26)
def cumprod(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x, axis_in = inputs[0], inputs[1]
    exclusive = attrs.reject("exclusive", lambda v: v in (0, 1), 0)
    reverse = attrs.reject("reverse", lambda v: v in (0, 1), 0)
    rank = x.ty.ndim

    def along(axis: int) -> relax.Expr:
        y = relax.op.flip(x, axis) if reverse else x
        y = ctx.bb.normalize(relax.op.cumprod(y, axis=axis, exclusive=bool(exclusive)))
        return relax.op.flip(y, axis) if reverse else y

    if rank == 0:
        return x
    if rv.is_runtime(axis_in):  # an axis known at run time: every axis computed, one picked
        return rv.per_axis(ctx.bb, axis_in, rank, along, label=ctx.label)
    axis_arr = _const_array(ctx, axis_in, "axis").reshape(-1)
    if axis_arr.size != 1:
        raise ctx.error("input axis must be a scalar")
    axis = int(axis_arr[0])
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is out of range for rank {rank}")
    return along(axis % rank)


# ----------------------------------------------------------------------------- elementwise

@converter("LpNormalization", since=1)
def lp_normalization(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x = inputs[0]
    p = attrs.reject("p", lambda v: v in (1, 2), 2)
    rank = x.ty.ndim
    axis = int(attrs.get("axis", -1))
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    dtype = str(x.ty.dtype)
    if p == 1:
        norm = relax.op.sum(relax.op.abs(x), [axis], keepdims=True)
    else:
        norm = relax.op.sqrt(relax.op.sum(relax.op.multiply(x, x), [axis], keepdims=True))
    norm = ctx.bb.normalize(norm)
    zero = _const(np.array(0), dtype)
    is_zero = relax.op.equal(norm, zero)
    safe = relax.op.where(is_zero, _const(np.array(1), dtype), norm)
    return relax.op.where(is_zero, zero, relax.op.divide(x, safe))


def _swish(x: relax.Expr, alpha: float, dtype: str) -> relax.Expr:
    scaled = x if alpha == 1.0 else relax.op.multiply(x, _const(np.array(alpha), dtype))
    return relax.op.multiply(x, relax.op.sigmoid(scaled))


@converter("Swish", since=24)
def swish(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x = inputs[0]
    alpha = float(attrs.get("alpha", 1.0))
    return _swish(x, alpha, str(x.ty.dtype))


@converter("SwiGLU", since=28)
def swiglu(ctx: ConvertContext, inputs: list, attrs: Attrs):
    a, b = inputs[0], inputs[1]
    alpha = float(attrs.get("alpha", 1.0))
    if _dims(a) != _dims(b) or str(a.ty.dtype) != str(b.ty.dtype):
        raise ctx.error(f"inputs A and B must have the same shape and dtype, got "
                        f"{_dims(a)} {a.ty.dtype} and {_dims(b)} {b.ty.dtype}")
    return relax.op.multiply(_swish(a, alpha, str(a.ty.dtype)), b)


@converter("Celu", since=12)
def celu(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x = inputs[0]
    alpha = float(attrs.get("alpha", 1.0))
    dtype = str(x.ty.dtype)
    cdtype = _compute_dtype(dtype)
    xc = ctx.bb.normalize(relax.op.astype(x, cdtype)) if cdtype != dtype else x
    a = relax.const(alpha, cdtype)
    zero = relax.const(0.0, cdtype)
    # max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
    neg = relax.op.multiply(a, relax.op.subtract(relax.op.exp(relax.op.divide(xc, a)),
                                                 relax.const(1.0, cdtype)))
    y = relax.op.add(relax.op.maximum(xc, zero), relax.op.minimum(neg, zero))
    return relax.op.astype(y, dtype) if cdtype != dtype else y


@converter("Det", since=11)
def det(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x = inputs[0]
    bb = ctx.bb
    shape = _dims(x)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ctx.error(f"input must be [..., M, M], got {shape}")
    n = shape[-1]
    if n > 3:
        raise ctx.error(f"matrices larger than 3x3 are not supported (got {n}x{n})")
    dtype = str(x.ty.dtype)
    cdtype = _compute_dtype(dtype)
    if cdtype != dtype:
        x = bb.normalize(relax.op.astype(x, cdtype))
    batch = shape[:-2]

    def e(i: int, j: int) -> relax.Expr:
        return bb.normalize(relax.op.reshape(
            relax.op.strided_slice(x, [len(shape) - 2, len(shape) - 1], [i, j], [i + 1, j + 1]),
            batch))

    mul, sub, add = relax.op.multiply, relax.op.subtract, relax.op.add
    if n == 1:
        y = e(0, 0)
    elif n == 2:
        y = sub(mul(e(0, 0), e(1, 1)), mul(e(0, 1), e(1, 0)))
    else:
        def minor(i, j, k, m):
            return sub(mul(e(1, i), e(2, j)), mul(e(1, k), e(2, m)))
        y = add(sub(mul(e(0, 0), minor(1, 2, 2, 1)), mul(e(0, 1), minor(0, 2, 2, 0))),
                mul(e(0, 2), minor(0, 1, 1, 0)))
    return relax.op.astype(y, dtype) if cdtype != dtype else y


# ----------------------------------------------------------------------------- windows

def _window_size(ctx: ConvertContext, size) -> int:
    value = _const_array(ctx, size, "size").reshape(-1)
    if value.size != 1 or int(value[0]) < 0:
        raise ctx.error(f"input size must be a non-negative scalar, got {value.tolist()}")
    return int(value[0])


def _window(kind: str):
    def convert(ctx: ConvertContext, inputs: list, attrs: Attrs):
        periodic = attrs.reject("periodic", lambda v: v in (0, 1), 1)
        dtype = _onnx_dtype(ctx, attrs.get("output_datatype", 1), "output_datatype")
        if rv.is_runtime(inputs[0]):
            return _window_runtime(ctx, kind, inputs[0], bool(periodic), dtype)
        size = _window_size(ctx, inputs[0])
        np_dtype = np.float32 if dtype == "bfloat16" else np.dtype(dtype)
        n_1 = size if periodic else size - 1
        if kind == "blackman":
            ni = np.arange(size)
            res = (np.cos((ni * (np.pi * 2)) / n_1) * (-0.5) + np.cos((ni * (np.pi * 4)) / n_1)
                   * 0.08 + 0.42)
        else:
            ni = np.arange(size, dtype=np_dtype)
            with np.errstate(all="ignore"):
                if kind == "hann":
                    res = np.sin(ni * np.pi / n_1) ** 2
                else:
                    alpha = 25.0 / 46.0
                    res = alpha - np.cos(ni * np.pi * 2 / n_1) * (1 - alpha)
        return _const(np.asarray(res).astype(np_dtype), dtype)
    return convert


def _window_runtime(ctx: ConvertContext, kind: str, size_in: relax.Expr, periodic: bool,
                    dtype: str) -> relax.Expr:
    """A window whose size is known at run time: the same formulas on ``arange(size)`` in float64."""
    bb = ctx.bb
    size = rv.scalar_var(bb, size_in, "window")

    def f64(value: float) -> relax.Expr:
        return relax.const(np.float64(value), "float64")

    ni = bb.normalize(relax.op.arange(0, size, 1, "float64"))
    denominator = relax.ShapeExpr([size if periodic else size - 1])
    n_1 = relax.op.astype(relax.op.shape_to_tensor(denominator), "float64")
    phase = bb.normalize(relax.op.divide(relax.op.multiply(ni, f64(np.pi * 2)), n_1))  # 2 pi n / N
    if kind == "blackman":
        res = relax.op.add(relax.op.add(relax.op.multiply(relax.op.cos(phase), f64(-0.5)),
                                        relax.op.multiply(relax.op.cos(relax.op.multiply(phase, f64(2))), f64(0.08))),
                           f64(0.42))
    elif kind == "hann":
        half = relax.op.sin(relax.op.multiply(phase, f64(0.5)))
        res = relax.op.multiply(half, half)
    else:
        alpha = 25.0 / 46.0
        res = relax.op.subtract(f64(alpha), relax.op.multiply(relax.op.cos(phase), f64(1 - alpha)))
    return relax.op.astype(bb.normalize(res), dtype)


converter("HannWindow", since=17)(_window("hann"))
converter("HammingWindow", since=17)(_window("hamming"))
converter("BlackmanWindow", since=17)(_window("blackman"))


@converter("MelWeightMatrix", since=17)
def mel_weight_matrix(ctx: ConvertContext, inputs: list, attrs: Attrs):
    """The reference's arithmetic, dtype for dtype: ``log1p`` of the edge frequencies in their
    own float type, the mel grid in float64, float floor division for the spectrogram bin of
    each mel edge, then the triangles as masks. A constant when every input is one; else
    computed by the graph, the output dims fresh symbolic dims and the checks run-time checks."""
    dtype = _onnx_dtype(ctx, attrs.get("output_datatype", 1), "output_datatype")
    m = math_for(ctx, *inputs)
    names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")
    if m.runtime:
        vals = [m.reshape(e, [1]) for e in inputs]
        num_mel_bins, dft_length, sample_rate = (m.astype(v, "int64") for v in vals[:3])
    else:
        vals = [_const_array(ctx, v, n).reshape(-1)[0] for v, n in zip(inputs, names)]
        num_mel_bins, dft_length, sample_rate = (int(v) for v in vals[:3])
    positive = m.logical_and(m.logical_and(m.greater(num_mel_bins, 0), m.greater(dft_length, 0)),
                             m.greater(sample_rate, 0))
    sizes = m.check(m.stack([m.add(m.floor_divide(dft_length, 2), 1), num_mel_bins]), positive,
                    "num_mel_bins, dft_length and sample_rate must be positive")
    n_spec, n_mel = m.dims(sizes, "mel")

    def mel(hertz):  # 2595 * log1p(hertz / 700) / log(10), float64 at the end only
        scaled = m.multiply(2595, m.log1p(m.divide(hertz, 700)))
        return m.divide(m.astype(scaled, "float64"), np.log(10))

    low, high = mel(vals[3]), mel(vals[4])
    step = m.divide(m.subtract(high, low), m.astype(m.add(num_mel_bins, 2), "float64"))
    edges = m.add(m.multiply(m.arange(n_mel + 2, "float64"), step), low)
    hertz = m.multiply(700.0, m.expm1(m.multiply(m.divide(edges, 2595.0), np.log(10))))
    scaled = m.multiply(m.astype(m.add(dft_length, 1), "float64"), hertz)
    bins = m.astype(m.float_floor_divide(scaled, m.astype(sample_rate, "float64")), "int64")  # [n_mel + 2]
    lo, center, hi = (m.reshape(m.slice(bins, i, n_mel + i), [1, n_mel]) for i in range(3))
    inside = m.logical_and(m.logical_and(m.greater_equal(lo, 0), m.less_equal(lo, center)),
                           m.logical_and(m.less_equal(center, hi), m.less_equal(hi, n_spec)))
    lo = m.check(lo, inside, "the mel bands must lie within the dft_length // 2 + 1 spectrogram bins "
                 "(check lower_edge_hertz/upper_edge_hertz against sample_rate)")
    j = m.reshape(m.arange(n_spec), [n_spec, 1])

    def ratio(num, den):  # where den is 0 the ratio is not used
        return m.divide(m.astype(num, "float64"), m.astype(m.maximum(den, 1), "float64"))

    rising = m.logical_and(m.logical_and(m.greater_equal(j, lo), m.less_equal(j, center)),
                           m.greater(center, lo))
    peak = m.logical_and(m.equal(center, lo), m.equal(j, center))
    falling = m.logical_and(m.logical_and(m.greater_equal(j, center), m.less(j, hi)), m.greater(hi, center))
    out = m.where(peak, 1.0, 0.0)
    out = m.where(rising, ratio(m.subtract(j, lo), m.subtract(center, lo)), out)
    out = m.where(falling, ratio(m.subtract(hi, j), m.subtract(hi, center)), out)
    if dtype == "bfloat16":
        out = m.astype(out, "float32")
    return relax.op.astype(out, dtype) if m.runtime else _const(out, dtype)


# ----------------------------------------------------------------------------- DFT / STFT

def _dft_last(ctx: ConvertContext, re: relax.Expr, im: relax.Expr | None, length: int,
              inverse: bool, onesided: bool) -> list[relax.Expr]:
    """DFT along the last axis of real/imag parts (im None: real signal), as matmuls.

    Returns [real, imag], or [real] for the inverse one-sided (irfft) case."""
    bb = ctx.bb
    dtype = str(re.ty.dtype)
    n_in = dims(re)[-1]
    n = length
    m = math_for(ctx, n)
    if inverse and onesided:  # irfft: one-sided bins -> n real samples
        if m.runtime:
            raise ctx.error("an inverse one-sided DFT needs a constant length")
        j = np.arange(n_in)[:, None].astype(np.float64)
        k = j  # input bins
        out = np.arange(n)[None, :].astype(np.float64)
        used = min(n_in, n // 2 + 1)
        weight = np.where(k == 0, 1.0, 2.0)
        if n % 2 == 0:
            weight = np.where(k == n // 2, 1.0, weight)
        weight = np.where(k < used, weight, 0.0)
        angle = 2 * np.pi * ((k * out) % n) / n
        cos_m = weight * np.cos(angle) / n
        sin_m = weight * np.sin(angle) / n
        y = relax.op.matmul(re, _const(cos_m, dtype))
        if im is not None:
            y = relax.op.subtract(y, relax.op.matmul(im, _const(sin_m, dtype)))
        return [bb.normalize(y)]
    n_out = (n // 2 + 1 if isinstance(n, int) else tirx.floordiv(n, 2) + 1) if onesided else n
    # angle = 2 pi ((j k) mod n) / n, exact integers before the scaling; constant tables for a
    # constant n, else computed by the graph
    j = m.reshape(m.arange(n_in), [n_in, 1])
    k = m.reshape(m.arange(n_out), [1, n_out])
    angle = m.divide(m.multiply(m.astype(m.floor_mod(m.multiply(j, k), n), "float64"), 2 * np.pi),
                     m.astype(n, "float64"))
    cos_m, sin_m = m.cos(angle), m.sin(angle)
    if not (n_in is n or (isinstance(n_in, int) and isinstance(n, int) and n_in <= n)):
        valid = m.astype(m.less(j, n), "float64")  # truncation to n samples
        cos_m, sin_m = m.multiply(valid, cos_m), m.multiply(valid, sin_m)
    if inverse:  # e^{+i angle} / n
        n_f = m.astype(n, "float64")
        cos_m, sin_m = m.divide(cos_m, n_f), m.divide(m.multiply(sin_m, -1.0), n_f)
    cos_c, sin_c = m.table(cos_m, dtype), m.table(sin_m, dtype)
    # (re + i im)(cos - i sin) = (re cos + im sin) + i (im cos - re sin)
    real = relax.op.matmul(re, cos_c)
    imag = relax.op.negative(relax.op.matmul(re, sin_c))
    if im is not None:
        real = relax.op.add(real, relax.op.matmul(im, sin_c))
        imag = relax.op.add(imag, relax.op.matmul(im, cos_c))
    return [bb.normalize(real), bb.normalize(imag)]


def _dft(ctx: ConvertContext, x: relax.Expr, length: int | None, axis: int, inverse: bool,
         onesided: bool) -> relax.Expr:
    bb = ctx.bb
    dtype = str(x.ty.dtype)
    if dtype not in _FLOAT_DTYPES:
        raise ctx.error(f"input has dtype {dtype}; DFT takes float types")
    shape = dims(x)  # only the transformed axis and the last need static lengths
    rank = len(shape)
    if rank < 2 or shape[-1] not in (1, 2):
        raise ctx.error(f"input must end with a dimension of 1 (real) or 2 (complex), got {shape}")
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    if axis == rank - 1:
        raise ctx.error("axis must not be the last (real/imaginary) dimension")
    length = _signal_length(shape[axis], length, inverse, onesided)
    if isinstance(length, int) and length <= 0:
        raise ctx.error(f"dft_length must be positive, got {length}")
    if onesided and not inverse and shape[-1] == 2:
        raise ctx.error("onesided with a complex input is not supported")
    cdtype = _compute_dtype(dtype)
    if cdtype != dtype:
        x = bb.normalize(relax.op.astype(x, cdtype))
    perm = [d for d in range(rank - 1) if d != axis] + [axis]
    inv = [perm.index(d) for d in range(rank - 1)]

    def part(i: int) -> relax.Expr:
        p = relax.op.squeeze(relax.op.strided_slice(x, [rank - 1], [i], [i + 1]), [rank - 1])
        return bb.normalize(relax.op.permute_dims(p, perm))

    re = part(0)
    im = part(1) if shape[-1] == 2 else None
    outs = _dft_last(ctx, re, im, length, inverse, onesided)
    outs = [relax.op.expand_dims(relax.op.permute_dims(o, inv), [rank - 1]) for o in outs]
    y = relax.op.concat(outs, axis=rank - 1) if len(outs) > 1 else outs[0]
    return relax.op.astype(y, dtype) if cdtype != dtype else y


def _signal_length(n: int, length: int | None, inverse: bool, onesided: bool) -> int:
    """The DFT length along an axis of ``n`` elements: ``dft_length``, else what the axis holds
    (an irfft's ``n`` one-sided bins are ``2 (n - 1)`` samples)."""
    if length is not None:
        return length
    return 2 * (n - 1) if inverse and onesided else n


def _dft_length(ctx: ConvertContext, expr) -> int | None:
    if expr is None:
        return None
    value = _const_array(ctx, expr, "dft_length").reshape(-1)
    return int(value[0])


@converter("DFT", since=17)
def dft17(ctx: ConvertContext, inputs: list, attrs: Attrs):
    inverse = attrs.reject("inverse", lambda v: v in (0, 1), 0)
    onesided = attrs.reject("onesided", lambda v: v in (0, 1), 0)
    axis = int(attrs.get("axis", 1))
    return _dft(ctx, inputs[0], _dft_length(ctx, _opt(inputs, 1)), axis, bool(inverse),
                bool(onesided))


@converter("DFT", since=20)
def dft20(ctx: ConvertContext, inputs: list, attrs: Attrs):
    inverse = attrs.reject("inverse", lambda v: v in (0, 1), 0)
    onesided = attrs.reject("onesided", lambda v: v in (0, 1), 0)
    axis_in = _opt(inputs, 2)
    length = _dft_length(ctx, _opt(inputs, 1))
    if rv.is_runtime(axis_in):  # every signal axis transformed, the one named at run time picked
        x = inputs[0]
        rank = x.ty.ndim
        shape = dims(x)
        # the axes a DFT can run along: static, and not an irfft of a length-1 axis (no samples)
        candidates = [a for a in range(rank - 1) if isinstance(shape[a], int)
                      and _signal_length(shape[a], length, bool(inverse), bool(onesided)) > 0]
        if not candidates:
            raise ctx.error(f"no axis of input shape {shape} can be transformed")
        return rv.per_axis(ctx.bb, axis_in, rank,
                           lambda a: _dft(ctx, x, length, a, bool(inverse), bool(onesided)),
                           candidates=candidates, label=ctx.label)
    axis = -2 if axis_in is None else int(_const_array(ctx, axis_in, "axis").reshape(-1)[0])
    return _dft(ctx, inputs[0], length, axis, bool(inverse), bool(onesided))


@converter("STFT", since=17)
def stft(ctx: ConvertContext, inputs: list, attrs: Attrs):
    signal, step_in = inputs[0], inputs[1]
    window, length_in = _opt(inputs, 2), _opt(inputs, 3)
    onesided = attrs.reject("onesided", lambda v: v in (0, 1), 1)
    shape = _dims(signal)
    if len(shape) != 3 or shape[2] not in (1, 2):
        raise ctx.error(f"signal must be [batch, length, 1 or 2], got {shape}")

    def value(expr, name: str):  # an int, or the run-time scalar itself
        if expr is None or rv.is_runtime(expr):
            return expr
        return int(_const_array(ctx, expr, name).reshape(-1)[0])

    framed, frame_length = _stft_frames(ctx, signal, value(step_in, "frame_step"), window,
                                        value(length_in, "frame_length"))
    return _dft(ctx, framed, frame_length, 2, False, bool(onesided))


def _checked_scalar(ctx: ConvertContext, value: relax.Expr, low: int, high: int | None, name: str,
                    also: str = "") -> tirx.Var:
    """A run-time integer scalar, checked to lie in ``low..high`` (no upper bound: None), as a
    fresh symbolic var."""
    bb = ctx.bb
    value = bb.normalize(relax.op.astype(relax.op.reshape(value, [1]), "int64"))
    ok = relax.op.greater_equal(value, relax.const(np.int64(low), "int64"))
    if high is not None:
        ok = relax.op.logical_and(ok, relax.op.less_equal(value, relax.const(np.int64(high), "int64")))
    wanted = f"at least {low}" if high is None else str(low) if low == high else f"in {low}..{high}"
    value = rv.checked(bb, value, bb.normalize(ok), f"{ctx.label}: {name} must be {wanted}{also}")
    return rv.scalar_var(bb, value, name)


def _stft_frames(ctx: ConvertContext, signal: relax.Expr, step: int | relax.Expr, window: relax.Expr | None,
                 frame_length: int | relax.Expr | None) -> tuple[relax.Expr, int | tirx.Var]:
    """The windowed frames ``[batch, frames, frame_length, 1 or 2]`` and the frame length (an int,
    or a symbolic var when it is known only at run time). ``step`` and ``frame_length`` are ints
    or run-time scalars (checked: ``frame_step >= 1``, ``frame_length`` in ``1..length`` and the
    window's length); ``frame_length`` None takes the window's or the signal's length. Frame
    ``f`` starts at ``f * frame_step``; the frame count is ``1 + (length - frame_length) // frame_step``."""
    bb = ctx.bb
    batch, length, parts = _dims(signal)
    if window is not None:  # the window's length decides; a given frame_length must equal it
        size = _dims(window)[0]
        if isinstance(frame_length, int) and frame_length != size:
            raise ctx.error(f"window must have shape [{frame_length}], got [{size}]")
        if frame_length is not None and not isinstance(frame_length, int):
            _checked_scalar(ctx, frame_length, size, size, "frame_length", " (the window's length)")
        frame_length = size
    elif frame_length is None:
        frame_length = length
    elif not isinstance(frame_length, int):
        frame_length = _checked_scalar(ctx, frame_length, 1, length, "frame_length", " (the signal's length)")
    if isinstance(frame_length, int) and not 0 < frame_length <= length:
        raise ctx.error(f"frame_length {frame_length} is invalid for a signal of length {length}")
    if not isinstance(step, int):
        step = _checked_scalar(ctx, step, 1, None, "frame_step")
    elif step <= 0:
        raise ctx.error(f"frame_step must be positive, got {step}")
    frames = tirx.floordiv(length - frame_length, step) + 1
    m = math_for(ctx, step, frame_length)
    starts = m.multiply(m.arange(frames), step)
    index = m.add(m.reshape(starts, [frames, 1]), m.reshape(m.arange(frame_length), [1, frame_length]))
    index = m.table(m.reshape(index, [frames * frame_length]), "int64")
    framed = bb.normalize(relax.op.take(signal, index, axis=1))
    framed = bb.normalize(relax.op.reshape(framed, relax.ShapeExpr([batch, frames, frame_length, parts])))
    if window is not None:
        framed = bb.normalize(relax.op.multiply(framed, relax.op.reshape(window, [1, 1, frame_length, 1])))
    return framed, frame_length


# ----------------------------------------------------------------------------- Col2Im

@converter("Col2Im", since=18)
def col2im(ctx: ConvertContext, inputs: list, attrs: Attrs):
    """Every (block offset ``f``, column ``l``) pair's output position, unravelled per axis:
    ``col * stride - pad_begin + offset * dilation``, or the discard slot ``P`` outside the image;
    a constant table when ``image_shape``/``block_shape`` are constants, else computed by the
    graph with the channels, block size and image dims as fresh symbolic dims."""
    bb = ctx.bb
    x = inputs[0]
    m = math_for(ctx, inputs[1], inputs[2])
    shape = _dims(x)
    if len(shape) != 3:
        raise ctx.error(f"input must be [N, C * prod(block_shape), L], got {shape}")
    n, ck, length = shape
    if m.runtime:
        nd = _dims(inputs[1])[0]
        vectors = [m.astype(m.reshape(e, [nd]), "int64") for e in inputs[1:3]]
        img, blk = ([m.element(v, i) for i in range(nd)] for v in vectors)
    else:
        img = [int(v) for v in _const_array(ctx, inputs[1], "image_shape").reshape(-1)]
        blk = [int(v) for v in _const_array(ctx, inputs[2], "block_shape").reshape(-1)]
        nd = len(img)
        if len(blk) != nd or nd == 0:
            raise ctx.error(f"image_shape {img} and block_shape {blk} must have the same length")
    dilations = [int(v) for v in attrs.get("dilations", [1] * nd)]
    pads = [int(v) for v in attrs.get("pads", [0] * (2 * nd))]
    strides = [int(v) for v in attrs.get("strides", [1] * nd)]
    if len(dilations) != nd or len(pads) != 2 * nd or len(strides) != nd:
        raise ctx.error(f"dilations/pads/strides must have {nd}/{2 * nd}/{nd} values")

    def product(values):
        out = 1
        for v in values:
            out = m.multiply(out, v)
        return out

    k, p = product(blk), product(img)
    if not m.runtime and (k <= 0 or ck % k):
        raise ctx.error(f"input dim 1 ({ck}) is not divisible by prod(block_shape)={k}")
    c = m.floor_divide(ck, k)
    spans = [m.subtract(m.subtract(m.add(img[i], pads[i] + pads[i + nd]),
                                   m.multiply(dilations[i], m.subtract(blk[i], 1))), 1) for i in range(nd)]
    n_blocks = [m.add(m.floor_divide(spans[i], strides[i]), 1) for i in range(nd)]
    if not m.runtime and (int(np.prod(n_blocks)) != length or min(n_blocks) < 1):
        counts = [int(b) for b in n_blocks]
        raise ctx.error(f"input dim 2 ({length}) does not match the {counts} sliding blocks")
    *image_dims, c_dim, k_dim, p_dim = m.dims(m.stack(img + [c, k, p]), "col2im")
    f, cols = m.arange(k_dim), m.arange(length)
    flat = inside = None
    for i in range(nd):
        off = m.floor_mod(m.floor_divide(f, product(blk[i + 1:])), blk[i])
        col = m.floor_mod(m.floor_divide(cols, product(n_blocks[i + 1:])), n_blocks[i])
        pos = m.add(m.reshape(m.subtract(m.multiply(col, strides[i]), pads[i]), [1, length]),
                    m.reshape(m.multiply(off, dilations[i]), [k_dim, 1]))  # [K, L]
        ok = m.logical_and(m.greater_equal(pos, 0), m.less(pos, img[i]))
        inside = ok if inside is None else m.logical_and(inside, ok)
        term = m.multiply(m.minimum(m.maximum(pos, 0), m.subtract(img[i], 1)), product(img[i + 1:]))
        flat = term if flat is None else m.add(flat, term)
    flat = m.where(inside, flat, p)
    total = k_dim * length
    # a constant table in int32 where it fits: half the index traffic of the scatter (~25% faster)
    index_dtype = "int32" if not m.runtime and p < 2 ** 31 - 1 else "int64"
    index = m.table(m.broadcast_to(m.reshape(flat, [1, 1, total]), [n, c_dim, total]), index_dtype)
    data = bb.normalize(relax.op.reshape(x, relax.ShapeExpr([n, c_dim, total])))
    zeros = relax.op.zeros(relax.ShapeExpr([n, c_dim, p_dim + 1]), str(x.ty.dtype))
    out = bb.normalize(relax.op.scatter_elements(zeros, index, data, axis=2, reduction="add"))
    out = bb.normalize(relax.op.strided_slice(out, [2], [0], [p_dim], assume_inbound=True))
    return relax.op.reshape(out, relax.ShapeExpr([n, c_dim, *image_dims]))


# ----------------------------------------------------------------------------- DeformConv

@converter("DeformConv", since=19)
def deform_conv(ctx: ConvertContext, inputs: list, attrs: Attrs):
    """2D deformable convolution: bilinear sampling (zeros outside, as GridSample with
    align_corners=1) at the offset kernel positions, times the mask, then a grouped matmul."""
    bb = ctx.bb
    x, w, offset = inputs[0], inputs[1], inputs[2]
    bias, mask = _opt(inputs, 3), _opt(inputs, 4)
    xs, ws = _dims(x), _dims(w)
    if len(xs) != 4:
        raise ctx.error(f"only 2D deformable convolution is supported (X of rank 4), got rank {len(xs)}")
    n, c, h, wd = xs
    oc, cpg, kh, kw = ws
    kernel = [int(v) for v in attrs.get("kernel_shape", [kh, kw])]
    dil = [int(v) for v in attrs.get("dilations", [1, 1])]
    pads = [int(v) for v in attrs.get("pads", [0, 0, 0, 0])]
    strides = [int(v) for v in attrs.get("strides", [1, 1])]
    group = int(attrs.get("group", 1))
    og = int(attrs.get("offset_group", 1))
    if kernel != [kh, kw] or len(dil) != 2 or len(pads) != 4 or len(strides) != 2:
        raise ctx.error(f"kernel_shape {kernel}/dilations/pads/strides do not fit W {ws}")
    if group <= 0 or c != cpg * group or oc % group:
        raise ctx.error(f"X has {c} channels, W {ws} and group={group} do not match")
    if og <= 0 or c % og:
        raise ctx.error(f"offset_group={og} does not divide the {c} input channels")
    os_ = _dims(offset)
    k = kh * kw
    if len(os_) != 4 or os_[0] != n or os_[1] != og * 2 * k:
        raise ctx.error(f"offset must be [{n}, {og * 2 * k}, oH, oW], got {os_}")
    oh, ow = os_[2], os_[3]
    p = oh * ow
    dtype = str(x.ty.dtype)
    if dtype not in _FLOAT_DTYPES:
        raise ctx.error(f"X has dtype {dtype}; DeformConv takes float types")
    cdtype = _compute_dtype(dtype)

    def cast(e):
        return bb.normalize(relax.op.astype(e, cdtype)) if cdtype != dtype else e

    x, w, offset = cast(x), cast(w), cast(offset)
    # Kernel-grid positions without offsets: (kh, kw, oh, ow).
    base_h = (np.arange(kh)[:, None, None, None] * dil[0] - pads[0]
              + np.arange(oh)[None, None, :, None] * strides[0])
    base_w = (np.arange(kw)[None, :, None, None] * dil[1] - pads[1]
              + np.arange(ow)[None, None, None, :] * strides[1])
    base_h = np.broadcast_to(base_h, (kh, kw, oh, ow)).reshape(1, 1, k * p)
    base_w = np.broadcast_to(base_w, (kh, kw, oh, ow)).reshape(1, 1, k * p)
    off = bb.normalize(relax.op.reshape(offset, [n, og, k, 2, p]))

    def coord(i: int, base: np.ndarray) -> relax.Expr:
        o = relax.op.reshape(relax.op.strided_slice(off, [3], [i], [i + 1]), [n, og, k * p])
        return bb.normalize(relax.op.add(o, _const(base, cdtype)))

    y, xc = coord(0, base_h), coord(1, base_w)
    y0, x0 = bb.normalize(relax.op.floor(y)), bb.normalize(relax.op.floor(xc))
    ly, lx = bb.normalize(relax.op.subtract(y, y0)), bb.normalize(relax.op.subtract(xc, x0))
    one = relax.const(1.0, cdtype)
    data = bb.normalize(relax.op.reshape(x, [n, og, c // og, h * wd]))
    sampled = None
    for dy in (0, 1):
        for dx in (0, 1):
            yc = relax.op.add(y0, relax.const(float(dy), cdtype)) if dy else y0
            xcc = relax.op.add(x0, relax.const(float(dx), cdtype)) if dx else x0
            yi = bb.normalize(relax.op.astype(yc, "int64"))
            xi = bb.normalize(relax.op.astype(xcc, "int64"))
            valid = relax.op.logical_and(
                relax.op.logical_and(relax.op.greater_equal(yi, relax.const(0, "int64")),
                                     relax.op.less(yi, relax.const(h, "int64"))),
                relax.op.logical_and(relax.op.greater_equal(xi, relax.const(0, "int64")),
                                     relax.op.less(xi, relax.const(wd, "int64"))))
            wy = ly if dy else relax.op.subtract(one, ly)
            wx = lx if dx else relax.op.subtract(one, lx)
            weight = relax.op.where(valid, relax.op.multiply(wy, wx), relax.const(0.0, cdtype))
            idx = relax.op.add(
                relax.op.multiply(relax.op.clip(yi, 0, h - 1), relax.const(wd, "int64")),
                relax.op.clip(xi, 0, wd - 1))
            idx = relax.op.broadcast_to(relax.op.expand_dims(idx, [2]), [n, og, c // og, k * p])
            val = relax.op.gather_elements(data, bb.normalize(idx), axis=3)
            term = bb.normalize(relax.op.multiply(val, relax.op.expand_dims(weight, [2])))
            sampled = term if sampled is None else bb.normalize(relax.op.add(sampled, term))
    if mask is not None:
        if _dims(mask) != [n, og * k, oh, ow]:
            raise ctx.error(f"mask must be [{n}, {og * k}, {oh}, {ow}], got {_dims(mask)}")
        m = relax.op.reshape(cast(mask), [n, og, 1, k * p])
        sampled = bb.normalize(relax.op.multiply(sampled, m))
    cols = relax.op.reshape(sampled, [n, group, cpg * k, p])
    wg = relax.op.reshape(w, [1, group, oc // group, cpg * k])
    out = relax.op.reshape(relax.op.matmul(wg, cols), [n, oc, oh, ow])
    if bias is not None:
        out = relax.op.add(out, relax.op.reshape(cast(bias), [1, oc, 1, 1]))
    return relax.op.astype(out, dtype) if cdtype != dtype else out
