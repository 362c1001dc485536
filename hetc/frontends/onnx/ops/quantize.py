"""Quantization ops: QuantizeLinear, DequantizeLinear, QLinearMatMul, QLinearConv, ConvInteger.

TVM's QuantizeLinear/DequantizeLinear converters have no blocked quantization, no float8 and
no ``output_dtype``/``precision``; QLinearMatMul, QLinearConv and ConvInteger are missing.
These converters follow the spec and ``onnx.reference.ops``:

- scale / zero point are per tensor (scalar or one element), per axis (1-D of the length of
  ``x.shape[axis]``, negative ``axis`` allowed) or blocked (``block_size`` > 0: same rank as
  ``x``, ``ceil(x.shape[axis] / block_size)`` along ``axis``; repeated then cut);
- QuantizeLinear divides in ``precision``'s type (opset 23) or else ``y_scale``'s, rounds half
  to even (``tir.nearbyint``, never ``round``, which is half away from zero on CUDA), adds the
  zero point and saturates to the target's range; the target type is the zero point's, else
  ``output_dtype``, else uint8 (a zero point contradicting ``output_dtype`` is an error);
- DequantizeLinear computes ``(x - zero_point) * scale`` in float32 (float64 for int32 ``x``)
  and casts to ``output_dtype`` (opset 23), else to the scale's type;
- float8 ``float8e4m3fn`` and ``float8e5m2`` are encoded and decoded bit by bit (TVM's casts
  get subnormals, -0, inf and overflow wrong): round half to even, ``saturate`` clamps to the
  largest finite value (inf included), otherwise overflow gives NaN (e4m3fn) or inf (e5m2);
  their zero point must be zero and is not added;
- 2- and 4-bit types (int2/uint2/int4/uint4/float4e2m1) are uint8 tensors of one element per
  byte (``hetc/narrow.py``): the integer ones quantize and dequantize as the 8-bit types do, with
  their ranges; float4e2m1 is encoded like a float8 type (``cast.py``; it always saturates, its
  zero point is added before the rounding) and dequantized without its zero point, as the
  reference does;
- float6 and the fnuz float8 types are refused with a ConversionError naming the input or
  attribute: TVM's fnuz float8 encodings are wrong;
- QLinearMatMul (per-row ``a``, per-column ``b`` scales and zero points) and QLinearConv
  (per-output-channel ``w`` scale and zero point, int32 bias) compute exactly in int32, then
  requantize in float64 like the reference; ConvInteger is the int32 convolution alone.
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax, te, tirx

from .... import narrow
from ..registry import Attrs, ConvertContext, converter
from ..shapes import static_dims as _dims
from .cast import _decode as _decode_table
from .cast import _encode as _encode_narrow
from .conv import CONV_OPS, same_pads

# ONNX TensorProto data type codes hetc can quantize to, and their ranges.
_INT_RANGES = {
    "uint8": (0, 255),
    "int8": (-128, 127),
    "uint16": (0, 65535),
    "int16": (-32768, 32767),
}
_FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
_SUB_INT = {"uint4": (0, 15), "int4": (-8, 7), "uint2": (0, 3), "int2": (-2, 1)}
_F4 = "float4_e2m1fn"
_ONNX_DTYPES = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    10: "float16", 11: "float64", 16: "bfloat16", 17: "float8_e4m3fn", 18: "float8_e4m3fnuz",
    19: "float8_e5m2", 20: "float8_e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4_e2m1fn",
    24: "float8_e8m0fnu", 25: "uint2", 26: "int2", 27: "float6_e2m3fn", 28: "float6_e3m2fn",
}
_FLOATS = ("float16", "bfloat16", "float32", "float64")
_WHY = {
    "float6_e2m3fn": "TVM cannot store sub-byte tensors",
    "float6_e3m2fn": "TVM cannot store sub-byte tensors",
    "float8_e4m3fnuz": "TVM's fnuz float8 encodings are wrong",
    "float8_e5m2fnuz": "TVM's fnuz float8 encodings are wrong",
}


def _dt(expr: relax.Expr) -> str:
    return str(expr.ty.dtype)




def _unsupported(ctx: ConvertContext, what: str, dtype: str):
    why = _WHY.get(dtype, "not a quantized type hetc supports")
    return ctx.error(f"{what} has dtype {dtype}, which is not supported ({why}); supported: "
                     f"{', '.join(list(_INT_RANGES) + list(_SUB_INT) + list(_FLOAT8) + [_F4])}")


def _sub_int_values(x: relax.Expr, dtype: str) -> relax.Expr:
    """The int32 values of int4/uint4/int2/uint2 bytes (signed ones sign-extended)."""
    v = relax.op.astype(x, "int32")
    if dtype.startswith("u"):
        return v
    half = relax.const(1 << (narrow.BITS[dtype] - 1), "int32")
    return relax.op.subtract(relax.op.bitwise_xor(v, half), half)


def _opt(inputs: list, i: int):
    return inputs[i] if len(inputs) > i else None


def _static(ctx: ConvertContext, expr: relax.Expr, name: str) -> list[int]:
    if not isinstance(expr.ty, relax.TensorType) or expr.ty.shape is None:
        raise ctx.error(f"input {name} must have a static shape")
    try:
        return _dims(expr)
    except TypeError as err:
        raise ctx.error(f"input {name} must have a static shape") from err


def _round_half_even(bb: relax.BlockBuilder, x: relax.Expr) -> relax.Expr:
    """Round half to even: ``relax.round``, which hetc lowers to ``tir.nearbyint`` on every
    target (``passes.phases.ROUNDING``); an elementwise op, so the layout passes carry it."""
    del bb
    return relax.op.round(x)


def _saturate(x: relax.Expr, lo: float, hi: float, dtype: str) -> relax.Expr:
    """``clip(x, lo, hi)`` (x of ``dtype``) as maximum/minimum with constants: Relax's clip has
    no layout rule, and ConvertLayout would leave every quantized conv's output in NCHW behind
    a transpose."""
    return relax.op.minimum(relax.op.maximum(x, relax.const(lo, dtype)), relax.const(hi, dtype))


def _param(ctx: ConvertContext, p: relax.Expr, x_dims: list[int], axis: int, block: int,
           name: str) -> relax.Expr:
    """Scale/zero point ``p`` made broadcastable to ``x`` (per tensor, per axis or blocked)."""
    dims = _static(ctx, p, name)
    rank = len(x_dims)
    if math.prod(dims) == 1:
        return relax.op.reshape(p, []) if dims else p
    if not -rank <= axis < rank:
        raise ctx.error(f"attribute axis={axis} is out of range for input x of rank {rank}")
    axis %= rank
    if block <= 0:
        if len(dims) != 1 or dims[0] != x_dims[axis]:
            raise ctx.error(f"input {name} has shape {dims}; per-axis quantization along axis "
                            f"{axis} needs a 1-D tensor of {x_dims[axis]} elements (or a scalar)")
        shape = [1] * rank
        shape[axis] = dims[0]
        return relax.op.reshape(p, shape)
    want = list(x_dims)
    want[axis] = -(-x_dims[axis] // block)
    if dims != want:
        raise ctx.error(f"input {name} has shape {dims}; blocked quantization (axis {axis}, "
                        f"block_size {block}) of x {x_dims} needs {want}")
    p = relax.op.repeat(p, block, axis)
    if want[axis] * block != x_dims[axis]:
        p = relax.op.strided_slice(p, [axis], [0], [x_dims[axis]])
    return p


# --- float8 bit-level encoding / decoding ---------------------------------------------------

# dtype: (mantissa bits, exponent bias, largest finite code, NaN code, overflow code)
_F8 = {
    "float8_e4m3fn": (3, 7, 0x7E, 0x7F, 0x7F),  # no inf: overflow is NaN
    "float8_e5m2": (2, 15, 0x7B, 0x7E, 0x7C),  # overflow is inf
}


def _encode_f8(bb: relax.BlockBuilder, x: relax.Expr, dtype: str, saturate: bool) -> relax.Expr:
    """float32 -> float8 with round half to even, exactly as ml_dtypes / onnx saturate_cast."""
    mbits, bias, max_code, nan_code, over_code = _F8[dtype]
    shift = 23 - mbits
    min_normal_bits = (127 - bias + 1) << 23  # float32 bits of the smallest normal
    sub_scale = float(2.0 ** (bias - 1 + mbits))  # 1 / (smallest subnormal)

    def f(t):
        def cell(*i):
            v = t(*i)
            u = tirx.reinterpret("int32", v)
            sign = tirx.Cast("int32", tirx.shift_right(u, 31) & 1)
            a = u & 0x7FFFFFFF
            lsb = tirx.shift_right(a, shift) & 1
            normal = tirx.shift_right(a + ((1 << (shift - 1)) - 1) + lsb, shift) - (
                (127 - bias) << mbits)
            sub = tirx.Cast("int32", tirx.nearbyint(tirx.abs(v) * tirx.const(sub_scale, "float32")))
            mag = tirx.Select(a < min_normal_bits, sub, normal)
            mag = tirx.Select(mag > max_code, max_code if saturate else over_code, mag)
            mag = tirx.Select(a > 0x7F800000, nan_code, mag)
            code = tirx.Cast("uint8", (sign << 7) | mag)
            return tirx.reinterpret(dtype, code)

        return te.compute(t.shape, cell, "encode_f8")

    return bb.emit_te(f, bb.normalize(x))


def _decode_f8(bb: relax.BlockBuilder, x: relax.Expr) -> relax.Expr:
    """float8 -> float32, exactly."""
    dtype = _dt(x)
    mbits, bias, _, _, _ = _F8[dtype]
    ebits = 7 - mbits

    def f(t):
        def cell(*i):
            b = tirx.Cast("int32", tirx.reinterpret("uint8", t(*i)))
            sign = tirx.shift_right(b, 7) & 1
            exp = tirx.shift_right(b, mbits) & ((1 << ebits) - 1)
            man = b & ((1 << mbits) - 1)
            normal = tirx.reinterpret("float32", (sign << 31) | ((exp - bias + 127) << 23)
                                      | (man << (23 - mbits)))
            mag = tirx.Cast("float32", man) * tirx.const(2.0 ** (1 - bias - mbits), "float32")
            sub = tirx.Select(sign == 1, -mag, mag)
            if dtype == "float8_e4m3fn":
                special = tirx.Select((exp == 15) & (man == 7), tirx.const(float("nan"), "float32"),
                                      normal)
            else:
                inf = tirx.Select(sign == 1, tirx.const(float("-inf"), "float32"),
                                  tirx.const(float("inf"), "float32"))
                special = tirx.Select(exp == 31, tirx.Select(man == 0, inf,
                                                             tirx.const(float("nan"), "float32")),
                                      normal)
            return tirx.Select(exp == 0, sub, special)

        return te.compute(t.shape, cell, "decode_f8")

    return bb.emit_te(f, bb.normalize(x))


# --- QuantizeLinear -----------------------------------------------------------------------


def _quantize(ctx: ConvertContext, inputs: list, attrs: Attrs, version: int):
    bb = ctx.bb
    x, scale, zp = inputs[0], inputs[1], _opt(inputs, 2)
    axis = int(attrs.get("axis", 1))
    saturate = bool(attrs.reject("saturate", lambda v: v in (0, 1), 1)) if version >= 19 else True
    block = int(attrs.reject("block_size", lambda v: v >= 0, 0)) if version >= 21 else 0
    out_code = int(attrs.get("output_dtype", 0)) if version >= 21 else 0
    precision = int(attrs.get("precision", 0)) if version >= 23 else 0

    if out_code and out_code not in _ONNX_DTYPES:
        raise ctx.error(f"attribute output_dtype={out_code} is not a known ONNX type")
    target = _ONNX_DTYPES.get(out_code, "uint8") if out_code else None
    if zp is not None:
        zdt = narrow.onnx_dtype(ctx, zp, 2)
        if target is not None and zdt != target:
            raise ctx.error(f"input y_zero_point has dtype {zdt} but attribute output_dtype "
                            f"says {target}")
        target = zdt
    target = target or "uint8"
    if target not in _INT_RANGES and target not in _FLOAT8 and target not in _SUB_INT and target != _F4:
        what = "input y_zero_point" if zp is not None else f"attribute output_dtype={out_code}: output"
        raise _unsupported(ctx, what, target)

    xdt, sdt = _dt(x), _dt(scale)
    if xdt not in _FLOATS + ("int32",):
        raise ctx.error(f"input x has dtype {xdt}; QuantizeLinear takes float or int32")
    if sdt not in _FLOATS + ("int32",):
        raise ctx.error(f"input y_scale has dtype {sdt}, which is not supported")
    if precision:
        div = _ONNX_DTYPES.get(precision)
        if div not in _FLOATS:
            raise ctx.error(f"attribute precision={precision} is not supported (float types only)")
    else:
        div = sdt if sdt in _FLOATS else "float64"
    x_dims = _static(ctx, x, "x")
    s = _param(ctx, scale, x_dims, axis, block, "y_scale")
    xs = relax.op.astype(x, div) if xdt != div else x
    s = relax.op.astype(s, div) if sdt != div else s
    q = bb.normalize(relax.op.divide(xs, s))

    if target in _FLOAT8:
        if zp is not None:
            _check_zero_f8(ctx, zp, "y_zero_point")
        if div != "float32":
            q = relax.op.astype(q, "float32")
        return _encode_f8(bb, q, target, saturate)
    if target == _F4:
        if div != "float32":
            q = relax.op.astype(q, "float32")
        if zp is not None:
            q = relax.op.add(q, _decode_table(ctx, bb.normalize(_param(ctx, zp, x_dims, axis, block, "y_zero_point")), _F4))
        return _encode_narrow(ctx, bb.normalize(q), "float32", _F4, True, "up")

    wide = "float64" if div == "float64" else "float32"
    q = _round_half_even(bb, q)
    if div != wide:
        q = relax.op.astype(q, wide)
    if zp is not None:
        z = _param(ctx, zp, x_dims, axis, block, "y_zero_point")
        q = relax.op.add(q, relax.op.astype(_sub_int_values(z, target) if target in _SUB_INT else z, wide))
    if target in _SUB_INT:  # saturated, then its bits
        lo, hi = _SUB_INT[target]
        q = relax.op.astype(_saturate(q, lo, hi, wide), "int32")
        return relax.op.astype(relax.op.bitwise_and(q, relax.const((1 << narrow.BITS[target]) - 1, "int32")),
                               narrow.CONTAINER)
    lo, hi = _INT_RANGES[target]
    q = _saturate(q, lo, hi, wide)
    return relax.op.astype(q, target)


def _check_zero_f8(ctx: ConvertContext, zp: relax.Expr, name: str) -> None:
    """A float8 zero point must be zero (the spec); check it when it is a constant."""
    if isinstance(zp, tvm.ir.GenericConst):
        raw = zp.value.numpy()
        if np.any(raw.astype(np.float32) != 0):
            raise ctx.error(f"input {name} must be zero for float8 types")


@converter("QuantizeLinear", since=10)
def quantize_linear_10(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _quantize(ctx, inputs, attrs, 10)


@converter("QuantizeLinear", since=13)
def quantize_linear_13(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _quantize(ctx, inputs, attrs, 13)


@converter("QuantizeLinear", since=19)
def quantize_linear_19(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _quantize(ctx, inputs, attrs, 19)


@converter("QuantizeLinear", since=21)
def quantize_linear_21(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _quantize(ctx, inputs, attrs, 21)


@converter("QuantizeLinear", since=23)
def quantize_linear_23(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _quantize(ctx, inputs, attrs, 23)


@converter("QuantizeLinear", since=24)
def quantize_linear_24(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _quantize(ctx, inputs, attrs, 24)


@converter("QuantizeLinear", since=25)
def quantize_linear_25(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _quantize(ctx, inputs, attrs, 25)


# --- DequantizeLinear ---------------------------------------------------------------------


def _dequantize(ctx: ConvertContext, inputs: list, attrs: Attrs, version: int):
    bb = ctx.bb
    x, scale, zp = inputs[0], inputs[1], _opt(inputs, 2)
    axis = int(attrs.get("axis", 1))
    block = int(attrs.reject("block_size", lambda v: v >= 0, 0)) if version >= 21 else 0
    out_code = int(attrs.get("output_dtype", 0)) if version >= 23 else 0

    xdt, sdt = narrow.onnx_dtype(ctx, x, 0), _dt(scale)
    if xdt not in _INT_RANGES and xdt not in _FLOAT8 and xdt not in _SUB_INT and xdt not in ("int32", _F4):
        raise _unsupported(ctx, "input x", xdt)
    if sdt not in _FLOATS:
        raise ctx.error(f"input x_scale has dtype {sdt}, which is not supported "
                        f"(float16, bfloat16, float32, float64)")
    if zp is not None and xdt != _F4 and narrow.onnx_dtype(ctx, zp, 2) != xdt:
        raise ctx.error(f"input x_zero_point has dtype {narrow.onnx_dtype(ctx, zp, 2)}, x has {xdt}")
    out = _ONNX_DTYPES.get(out_code) if out_code else sdt
    if out not in _FLOATS:
        raise ctx.error(f"attribute output_dtype={out_code} is not supported (float types only)")

    x_dims = _static(ctx, x, "x")
    s = _param(ctx, scale, x_dims, axis, block, "x_scale")
    if xdt in _FLOAT8:
        if zp is not None:
            _check_zero_f8(ctx, zp, "x_zero_point")
        v, wide = _decode_f8(bb, x), "float32"
    elif xdt == _F4:  # the reference ignores a float4e2m1 zero point
        v, wide = _decode_table(ctx, x, _F4), "float32"
    elif xdt in _SUB_INT:
        wide = "float32"
        v = _sub_int_values(x, xdt)
        if zp is not None:
            v = relax.op.subtract(v, _sub_int_values(_param(ctx, zp, x_dims, axis, block, "x_zero_point"), xdt))
        v = relax.op.astype(v, wide)
    elif xdt == "int32":  # the difference may not fit int32: subtract in float64
        wide = "float64"
        v = relax.op.astype(x, wide)
        if zp is not None:
            v = relax.op.subtract(v, relax.op.astype(_param(ctx, zp, x_dims, axis, block,
                                                            "x_zero_point"), wide))
    else:  # 8/16-bit: the difference is exact in int32, the float32 product is the reference's
        wide = "float32"
        v = relax.op.astype(x, "int32")
        if zp is not None:
            v = relax.op.subtract(v, relax.op.astype(_param(ctx, zp, x_dims, axis, block,
                                                            "x_zero_point"), "int32"))
        v = relax.op.astype(v, wide)
    y = relax.op.multiply(v, relax.op.astype(s, wide) if sdt != wide else s)
    return relax.op.astype(y, out) if out != wide else y


@converter("DequantizeLinear", since=10)
def dequantize_linear_10(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _dequantize(ctx, inputs, attrs, 10)


@converter("DequantizeLinear", since=13)
def dequantize_linear_13(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _dequantize(ctx, inputs, attrs, 13)


@converter("DequantizeLinear", since=19)
def dequantize_linear_19(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _dequantize(ctx, inputs, attrs, 19)


@converter("DequantizeLinear", since=21)
def dequantize_linear_21(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _dequantize(ctx, inputs, attrs, 21)


@converter("DequantizeLinear", since=23)
def dequantize_linear_23(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _dequantize(ctx, inputs, attrs, 23)


@converter("DequantizeLinear", since=24)
def dequantize_linear_24(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _dequantize(ctx, inputs, attrs, 24)


@converter("DequantizeLinear", since=25)
def dequantize_linear_25(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _dequantize(ctx, inputs, attrs, 25)


# --- QLinearMatMul, QLinearConv, ConvInteger ----------------------------------------------


def _int8ish(ctx: ConvertContext, expr: relax.Expr, name: str) -> None:
    if _dt(expr) not in ("int8", "uint8"):
        raise ctx.error(f"input {name} has dtype {_dt(expr)}; int8 or uint8 expected")


def _minus_zp(x: relax.Expr, zp: relax.Expr | None) -> relax.Expr:
    x = relax.op.astype(x, "int32")
    return x if zp is None else relax.op.subtract(x, relax.op.astype(zp, "int32"))


def _vector(ctx: ConvertContext, p: relax.Expr, n: int, name: str, what: str) -> tuple[relax.Expr, bool]:
    """(p as a scalar, False) or (p as its n elements, True): per-tensor or per-row/column."""
    dims = _static(ctx, p, name)
    if math.prod(dims) == 1:
        return (relax.op.reshape(p, []) if dims else p), False
    if len(dims) == 1 and dims[0] == n:
        return p, True
    raise ctx.error(f"input {name} has shape {dims}; a scalar or {n} elements ({what}) expected")


def _requantize(ctx: ConvertContext, acc: relax.Expr, mult: relax.Expr, y_zp: relax.Expr | None,
                out: str, wide: str = "float32") -> relax.Expr:
    """acc (int32) * mult + y_zero_point, rounded half to even, saturated to ``out``; in
    ``wide``: float32 for float32 scales, as onnxruntime computes it (``float(acc) * scale``,
    MLAS's requantization). The ONNX reference's numpy promotes to float64: the two differ
    only where the product lies within float32's rounding of a half (one step, rarely)."""
    y = relax.op.multiply(relax.op.astype(acc, wide), relax.op.astype(mult, wide))
    y = _round_half_even(ctx.bb, y)
    if y_zp is not None:
        y = relax.op.add(y, relax.op.astype(y_zp, wide))
    lo, hi = _INT_RANGES[out]
    return relax.op.astype(_saturate(y, lo, hi, wide), out)


def _qlinear_operands(ctx: ConvertContext, lhs, lhs_scale, rhs, rhs_scale, y_scale, y_zp) -> str:
    """Check the required inputs and 8-bit operands of QLinearMatMul/QLinearConv; the output dtype."""
    for name, v in (lhs, lhs_scale, rhs, rhs_scale, y_scale):
        if v is None:
            raise ctx.error(f"input {name} is required")
    _int8ish(ctx, lhs[1], lhs[0])
    _int8ish(ctx, rhs[1], rhs[0])
    out = _dt(y_zp) if y_zp is not None else _dt(lhs[1])
    if out not in ("int8", "uint8"):
        raise ctx.error(f"input y_zero_point has dtype {out}; int8 or uint8 expected")
    return out


def _qlinear_matmul(ctx: ConvertContext, inputs: list, attrs: Attrs):
    inputs = list(inputs) + [None] * (8 - len(inputs))
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = inputs[:8]
    out = _qlinear_operands(ctx, ("a", a), ("a_scale", a_s), ("b", b), ("b_scale", b_s), ("y_scale", y_s), y_zp)
    a_dims, b_dims = _static(ctx, a, "a"), _static(ctx, b, "b")
    if len(a_dims) < 2 or len(b_dims) < 2:
        raise ctx.error("inputs a and b must have rank >= 2")
    m, n = a_dims[-2], b_dims[-1]
    sdt = _dt(a_s)
    for name, v in (("a_scale", a_s), ("b_scale", b_s), ("y_scale", y_s)):
        if _dt(v) not in _FLOATS:
            raise ctx.error(f"input {name} has dtype {_dt(v)}; a float type expected")
        if _dt(v) != sdt:
            raise ctx.error(f"input {name} has dtype {_dt(v)}, a_scale has {sdt}")

    def row(p, name, n_, per):
        p, vec = _vector(ctx, p, n_, name, per)
        return relax.op.reshape(p, [n_, 1]) if vec and per == "per row" else p

    a_zp = None if a_zp is None else row(a_zp, "a_zero_point", m, "per row")
    b_zp = None if b_zp is None else row(b_zp, "b_zero_point", n, "per column")
    y_zp = None if y_zp is None else _vector(ctx, y_zp, 1, "y_zero_point", "per tensor")[0]
    acc = relax.op.matmul(_minus_zp(a, a_zp), _minus_zp(b, b_zp), out_dtype="int32")
    mult = relax.op.divide(relax.op.multiply(row(a_s, "a_scale", m, "per row"),
                                             row(b_s, "b_scale", n, "per column")),
                           _vector(ctx, y_s, 1, "y_scale", "per tensor")[0])
    return _requantize(ctx, acc, mult, y_zp, out, "float64" if sdt == "float64" else "float32")


@converter("QLinearMatMul", since=10)
def qlinear_matmul_10(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _qlinear_matmul(ctx, inputs, attrs)


@converter("QLinearMatMul", since=21)
def qlinear_matmul_21(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _qlinear_matmul(ctx, inputs, attrs)


def _conv_int32(ctx: ConvertContext, x: relax.Expr, w: relax.Expr, x_dims: list[int],
                w_dims: list[int], attrs: Attrs) -> relax.Expr:
    """N-d convolution of int32 x and w (NC... / OI...) following ONNX Conv's attributes."""
    rank = len(x_dims)
    if rank not in (3, 4, 5) or len(w_dims) != rank:
        raise ctx.error(f"inputs x {x_dims} and w {w_dims}: 1-D, 2-D or 3-D convolutions only")
    nd = rank - 2
    spatial = x_dims[2:]
    kernel = list(attrs.get("kernel_shape", w_dims[2:]))
    if kernel != w_dims[2:]:
        raise ctx.error(f"attribute kernel_shape={kernel} differs from w's shape {w_dims[2:]}")
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    group = int(attrs.get("group", 1))
    auto_pad = attrs.reject("auto_pad", lambda v: v in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"),
                            "NOTSET")
    pads = list(attrs.get("pads", [0] * (2 * nd)))
    if len(strides) != nd or len(dilations) != nd or len(pads) != 2 * nd:
        raise ctx.error(f"attributes strides/dilations/pads do not match {nd} spatial dims")
    if auto_pad == "VALID":
        pads = [0] * (2 * nd)
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = same_pads(spatial, kernel, strides, dilations, auto_pad == "SAME_UPPER")
    if x_dims[1] != w_dims[1] * group:
        raise ctx.error(f"x has {x_dims[1]} channels, w expects {w_dims[1]} x group {group}")
    conv = CONV_OPS[nd][0]
    return conv(x, w, strides=strides, padding=pads, dilation=dilations, groups=group,
                out_dtype="int32")


@converter("QLinearConv", since=10)
def qlinear_conv(ctx: ConvertContext, inputs: list, attrs: Attrs):
    inputs = list(inputs) + [None] * (9 - len(inputs))
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, bias = inputs[:9]
    out = _qlinear_operands(ctx, ("x", x), ("x_scale", x_s), ("w", w), ("w_scale", w_s), ("y_scale", y_s), y_zp)
    x_dims, w_dims = _static(ctx, x, "x"), _static(ctx, w, "w")
    m, nd = w_dims[0], len(w_dims) - 2

    def per_channel(p, name):  # [1, m, 1, ...]: the output's rank, so ConvertLayout can carry it to NHWC
        p, vec = _vector(ctx, p, m, name, "per output channel")
        return relax.op.reshape(p, [1, m] + [1] * nd) if vec else p

    x_zp = None if x_zp is None else _vector(ctx, x_zp, 1, "x_zero_point", "per tensor")[0]
    w_zp_b = None
    if w_zp is not None:
        w_zp_b, vec = _vector(ctx, w_zp, m, "w_zero_point", "per output channel")
        if vec:
            w_zp_b = relax.op.reshape(w_zp_b, [m] + [1] * (len(w_dims) - 1))
    acc = _conv_int32(ctx, _minus_zp(x, x_zp), _minus_zp(w, w_zp_b), x_dims, w_dims, attrs)
    if bias is not None:
        if _dt(bias) != "int32" or _static(ctx, bias, "B") != [m]:
            raise ctx.error(f"input B must be int32 of shape [{m}]")
        acc = relax.op.add(acc, relax.op.reshape(bias, [1, m] + [1] * nd))
    for name, v in (("x_scale", x_s), ("w_scale", w_s), ("y_scale", y_s)):
        if _dt(v) != "float32":
            raise ctx.error(f"input {name} has dtype {_dt(v)}; float32 expected")
    mult = relax.op.divide(relax.op.multiply(_vector(ctx, x_s, 1, "x_scale", "per tensor")[0],
                                             per_channel(w_s, "w_scale")),
                           _vector(ctx, y_s, 1, "y_scale", "per tensor")[0])
    y_zp = None if y_zp is None else _vector(ctx, y_zp, 1, "y_zero_point", "per tensor")[0]
    return _requantize(ctx, acc, mult, y_zp, out)


@converter("ConvInteger", since=10)
def conv_integer(ctx: ConvertContext, inputs: list, attrs: Attrs):
    inputs = list(inputs) + [None] * (4 - len(inputs))
    x, w, x_zp, w_zp = inputs[:4]
    _int8ish(ctx, x, "x")
    _int8ish(ctx, w, "w")
    x_dims, w_dims = _static(ctx, x, "x"), _static(ctx, w, "w")
    m = w_dims[0]
    if x_zp is not None:
        x_zp = _vector(ctx, x_zp, 1, "x_zero_point", "per tensor")[0]
    if w_zp is not None:
        w_zp, vec = _vector(ctx, w_zp, m, "w_zero_point", "per output channel")
        if vec:
            w_zp = relax.op.reshape(w_zp, [m] + [1] * (len(w_dims) - 1))
    return _conv_int32(ctx, _minus_zp(x, x_zp), _minus_zp(w, w_zp), x_dims, w_dims, attrs)


def _scalar_or_none(expr: relax.Expr | None) -> bool:
    """A missing zero point, or one of a single element."""
    if expr is None:
        return True
    shape = expr.ty.shape if isinstance(expr.ty, relax.TensorType) else None
    return shape is not None and all(isinstance(d, tirx.IntImm) and int(d) == 1 for d in shape.values)


def _zero_constant(expr: relax.Expr | None) -> bool:
    """A zero point that is a constant zero: its term is zero, and computing it is not free
    (onnxruntime's dynamic quantization writes the weight's zero point as a 0 initializer;
    its term needs a sum over every row of the activation)."""
    return isinstance(expr, tvm.ir.GenericConst) and not expr.value.numpy().any()


@converter("MatMulInteger", since=10)
def matmul_integer(ctx: ConvertContext, inputs: list, attrs: Attrs):
    """uint8 ``a`` x int8 ``b`` with per-tensor zero points (what onnxruntime's dynamic
    quantization writes) as ``matmul(a, b)`` on the raw 8-bit values, then the zero-point terms:

        sum_k (a - za)(b - zb) = sum_k a b - za colsum(b) - zb rowsum(a) + K za zb

    so that the CPU's int8 rule can run the product with ``vpdpbusd`` (exact in int32, like
    the spec's form). Other dtypes and per-row/column zero points take TVM's converter."""
    inputs = list(inputs) + [None] * (4 - len(inputs))
    a, b, a_zp, b_zp = inputs[:4]
    if (_dt(a) != "uint8" or _dt(b) != "int8" or not _scalar_or_none(a_zp) or not _scalar_or_none(b_zp)
            or a.ty.ndim < 2 or b.ty.ndim != 2):
        from tvm.relax.frontend.onnx import onnx_frontend

        return onnx_frontend.MatMulInteger._impl_v10(ctx.bb, inputs, {}, {})
    k = b.ty.shape.values[0]
    a_zp, b_zp = (None if _zero_constant(zp) else zp for zp in (a_zp, b_zp))
    acc = relax.op.matmul(a, b, out_dtype="int32")
    if a_zp is not None:
        za = relax.op.astype(relax.op.reshape(a_zp, []), "int32")
        colsum = relax.op.sum(relax.op.astype(b, "int32"), axis=[0])
        acc = relax.op.subtract(acc, relax.op.multiply(za, colsum))
    if b_zp is not None:
        zb = relax.op.astype(relax.op.reshape(b_zp, []), "int32")
        rowsum = relax.op.sum(relax.op.astype(a, "int32"), axis=[-1], keepdims=True)
        acc = relax.op.subtract(acc, relax.op.multiply(zb, rowsum))
        if a_zp is not None:
            kzz = relax.op.multiply(relax.op.multiply(za, zb), relax.const(int(k), "int32"))
            acc = relax.op.add(acc, kzz)
    return acc
