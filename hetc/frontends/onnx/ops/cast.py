"""Cast and CastLike.

TVM's ``relax.astype`` is used only between the ordinary types (bool, integers, float16,
bfloat16, float32, float64). Its float8 conversions are wrong (overflow wraps instead of
saturating; the ``fnuz`` encodings are off by a factor of two), so casts from and to the
float8 types are done here exactly:

- to float8: the ONNX rounding (round to nearest even) and the ``saturate`` rules are
  computed on the source's bit pattern with integer arithmetic (TE), and the resulting byte
  is reinterpreted as the float8 type (``float8e8m0`` follows ``round_mode``, as
  ``onnx.numpy_helper.to_float8e8m0``); float64 is rounded to float32 first, as the ONNX
  reference (ml_dtypes) does;
- from float8: the byte indexes a 256-entry float32 table of the type's values.

The sub-byte types (int4, uint4, int2, uint2, float4e2m1) are uint8 tensors of one element per
byte (``hetc/narrow.py``; the ONNX type comes from ``ctx.input_types``): to an integer one, the value
is truncated toward zero and wrapped to its bits (ml_dtypes' ``astype``); to float4e2m1, rounded
to nearest even and saturated like a float8 type (NaN gives a zero of the opposite sign, as
ml_dtypes does); from them, int4/int2 are sign-extended, float4e2m1 read from a table.

Casts to bool are ``x != 0`` (NaN is true). Float to integer truncates toward zero (LLVM);
NaN and out-of-range values are undefined in ONNX and follow LLVM (they differ from numpy).
Strings and complex numbers are rejected.
"""

from __future__ import annotations

import numpy as np
from tvm import relax, te, tirx

from .... import narrow
from ..registry import Attrs, ConvertContext, converter

# ONNX TensorProto.DataType -> TVM dtype (None: not supported, with the ONNX name for errors)
_ONNX_DTYPES: dict[int, str] = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16",
    17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2", 20: "float8_e5m2fnuz",
    24: "float8_e8m0fnu", **narrow.ONNX_TYPES,
}
_UNSUPPORTED: dict[int, str] = {
    0: "UNDEFINED", 8: "STRING", 14: "COMPLEX64", 15: "COMPLEX128", 27: "FLOAT6E2M3", 28: "FLOAT6E3M2",
}
# Cast-1 spells `to` as a string
_ONNX_NAMES = {
    "FLOAT": 1, "UINT8": 2, "INT8": 3, "UINT16": 4, "INT16": 5, "INT32": 6, "INT64": 7,
    "STRING": 8, "BOOL": 9, "FLOAT16": 10, "DOUBLE": 11, "UINT32": 12, "UINT64": 13,
    "COMPLEX64": 14, "COMPLEX128": 15, "BFLOAT16": 16,
}
_ORDINARY = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                       "float16", "bfloat16", "float32", "float64"})
_FLOATS = {  # source float formats: (total bits, exponent bits, mantissa bits)
    "float16": (16, 5, 10), "bfloat16": (16, 8, 7), "float32": (32, 8, 23),
}


class _F8:
    """A float8 (or float4) format with 1 sign bit: exponent/mantissa bits, bias, largest finite
    code, and the codes of NaN (None: a zero of the opposite sign) and of an overflow without
    saturation (before the sign)."""

    def __init__(self, ebits: int, mbits: int, bias: int, maxc: int, nan: int | None, overflow: int, uz: bool):
        self.ebits, self.mbits, self.bias, self.maxc = ebits, mbits, bias, maxc
        self.nan, self.overflow, self.uz = nan, overflow, uz
        self.sign = 1 + ebits + mbits - 1  # the sign bit's position


_F8_FORMATS = {
    # fn: no inf, NaN = S.1111.111; overflow without saturation -> NaN
    "float8_e4m3fn": _F8(4, 3, 7, 0x7E, 0x7F, 0x7F, False),
    # IEEE-like: inf = S.11111.00, overflow without saturation -> inf
    "float8_e5m2": _F8(5, 2, 15, 0x7B, 0x7F, 0x7C, False),
    # fnuz: no inf, no -0, NaN = 0x80 (unsigned)
    "float8_e4m3fnuz": _F8(4, 3, 8, 0x7F, 0x80, 0x80, True),
    "float8_e5m2fnuz": _F8(5, 2, 16, 0x7F, 0x80, 0x80, True),
}
_NARROW = frozenset(_F8_FORMATS) | {"float8_e8m0fnu"}
# float4e2m1: no inf, no NaN, always saturates (ml_dtypes' astype, the ONNX reference)
_F4 = _F8(2, 1, 1, 0x7, None, 0x7, False)


def _i64(v: int) -> tirx.PrimExpr:
    return tirx.const(v, "int64")


class _Lets:
    """Named intermediate values, wrapped around the result as nested ``Let``s: without them
    TE inlines every use and the expression (and LLVM's compile time) grows several-fold."""

    def __init__(self) -> None:
        self.bindings: list[tuple[tirx.Var, tirx.PrimExpr]] = []

    def __call__(self, name: str, value: tirx.PrimExpr, dtype: str = "int64") -> tirx.Var:
        var = tirx.Var(name, dtype)
        self.bindings.append((var, value))
        return var

    def wrap(self, body: tirx.PrimExpr) -> tirx.PrimExpr:
        for var, value in reversed(self.bindings):
            body = tirx.Let(var, value, body)
        return body


def _encode_f8(v: tirx.PrimExpr, src: str, fmt: _F8, saturate: bool) -> tirx.PrimExpr:
    """The float8 byte (uint8) of float value ``v`` of dtype ``src``: round to nearest even."""
    total, se, sm = _FLOATS[src]
    ut = f"uint{total}"
    let = _Lets()
    bits = let("bits", tirx.reinterpret(ut, v), ut)
    sign = (bits >> tirx.const(total - 1, ut)).astype("int64")
    sexp = let("sexp", ((bits >> tirx.const(sm, ut)) & tirx.const((1 << se) - 1, ut)).astype("int64"))
    mant = let("mant", (bits & tirx.const((1 << sm) - 1, ut)).astype("int64"))
    sbias, emax = (1 << (se - 1)) - 1, (1 << se) - 1
    is_nan = tirx.all(sexp == _i64(emax), mant != _i64(0))
    is_inf = tirx.all(sexp == _i64(emax), mant == _i64(0))
    # |v| = sig * 2**e_eff exactly
    sig = let("sig", mant + tirx.Select(sexp > _i64(0), _i64(1 << sm), _i64(0)))
    e_eff = tirx.max(sexp, _i64(1)) - _i64(sbias + sm)
    # biased target exponent (1 in the subnormal range); target quantum 2**(t_exp - bias - mbits)
    t_exp = let("t_exp", tirx.max(sexp - _i64(sbias - fmt.bias), _i64(1)))
    # right shift from the source's quantum to the target's: >= sm - mbits >= 4; past sm + 3
    # everything (the rounding bit included) is shifted out anyway
    shift = let("shift", tirx.min(t_exp - _i64(fmt.bias + fmt.mbits) - e_eff, _i64(sm + 3)))
    # round to nearest even: add half an ulp, less one unless the kept part is odd. (Spelled
    # with comparisons of the remainder and half, TVM's simplifier dropped the tie case for
    # float16 sources.)
    odd = (sig >> shift) & _i64(1)
    n = (sig + (_i64(1) << (shift - _i64(1))) - _i64(1) + odd) >> shift
    # a carry out of the mantissa moves to the next binade by itself
    code = let("code", ((t_exp - _i64(1)) << _i64(fmt.mbits)) + n)
    over = tirx.any(is_inf, code > _i64(fmt.maxc))
    mag = let("mag", tirx.Select(over, _i64(fmt.maxc if saturate else fmt.overflow), code))
    if fmt.uz:
        # no negative zero; NaN (and unsaturated overflow) is the unsigned 0x80
        res = tirx.Select(tirx.any(mag == _i64(0), mag == _i64(0x80)), mag, mag | (sign << _i64(7)))
        res = tirx.Select(is_nan, _i64(fmt.nan), res)
    elif fmt.nan is None:
        res = tirx.Select(is_nan, (_i64(1) - sign) << _i64(fmt.sign), mag | (sign << _i64(fmt.sign)))
    else:
        res = tirx.Select(is_nan, _i64(fmt.nan), mag) | (sign << _i64(fmt.sign))
    return let.wrap(res.astype("uint8"))


def _encode_e8m0(v: tirx.PrimExpr, saturate: bool, round_mode: str) -> tirx.PrimExpr:
    """onnx.numpy_helper.to_float8e8m0 on float32 value ``v``: the exponent byte (uint8)."""
    bits = tirx.reinterpret("uint32", v).astype("int64")
    exponent = (bits >> _i64(23)) & _i64(0xFF)
    special = exponent == _i64(0xFF)
    if round_mode == "nearest":
        g = (bits & _i64(0x400000)) > _i64(0)
        r = (bits & _i64(0x200000)) > _i64(0)
        s = (bits & _i64(0x1FFFFF)) > _i64(0)
        lsb = exponent > _i64(0)
        round_up = tirx.all(g, tirx.any(r, s, lsb))
    elif round_mode == "up":
        round_up = (bits & _i64(0x7FFFFF)) > _i64(0)
    else:  # down
        round_up = tirx.const(False, "bool")
    if saturate:
        round_up = tirx.all(round_up, exponent != _i64(0xFE))
    exponent = exponent + tirx.Select(round_up, _i64(1), _i64(0))
    return tirx.Select(special, _i64(0xFF), exponent & _i64(0xFF)).astype("uint8")


def _f8_table(dtype: str) -> np.ndarray:
    """The float32 value of each byte (a sub-byte type's bytes hold its low bits)."""
    import ml_dtypes

    codes = np.arange(256, dtype=np.uint8)
    if narrow.is_narrow(dtype):
        codes &= (1 << narrow.BITS[dtype]) - 1
    return codes.view(getattr(ml_dtypes, dtype)).astype(np.float32)


def _decode(ctx: ConvertContext, x: relax.Expr, dtype: str) -> relax.Expr:
    """float8 tensor -> float32 tensor of the same values."""
    table = relax.const(_f8_table(dtype), "float32")

    def fn(a: te.Tensor, t: te.Tensor) -> te.Tensor:
        return te.compute(a.shape, lambda *i: t[tirx.reinterpret("uint8", a(*i)).astype("int32")],
                          name="decode_" + dtype)

    return ctx.bb.emit_te(fn, x, table, primfunc_name_hint="decode_" + dtype)


def _encode(ctx: ConvertContext, x: relax.Expr, src: str, to: str, saturate: bool, round_mode: str) -> relax.Expr:
    """Float tensor of dtype ``src`` (see _FLOATS) -> float8 tensor ``to`` (float4e2m1: its byte)."""
    if to == "float8_e8m0fnu":
        if src != "float32":  # the reference rounds to float32 first
            x = ctx.bb.normalize(relax.op.astype(x, "float32"))

        def elem(v):
            return _encode_e8m0(v, saturate, round_mode)
    else:
        fmt = _F4 if to == "float4_e2m1fn" else _F8_FORMATS[to]

        def elem(v):
            return _encode_f8(v, src, fmt, saturate or fmt is _F4)

    def fn(a: te.Tensor) -> te.Tensor:
        if narrow.is_narrow(to):
            return te.compute(a.shape, lambda *i: elem(a(*i)), name="encode_" + to)
        return te.compute(a.shape, lambda *i: tirx.reinterpret(to, elem(a(*i))), name="encode_" + to)

    return ctx.bb.emit_te(fn, x, primfunc_name_hint="encode_" + to)


def _decode_int(ctx: ConvertContext, x: relax.Expr, dtype: str) -> tuple[relax.Expr, str]:
    """int4/int2/uint4/uint2 bytes -> their values as int8 (sign-extended) or uint8 (as is)."""
    if dtype.startswith("u"):
        return x, "uint8"
    half = 1 << (narrow.BITS[dtype] - 1)

    def fn(a: te.Tensor) -> te.Tensor:
        return te.compute(a.shape, lambda *i: ((a(*i).astype("int32") ^ half) - half).astype("int8"),
                          name="decode_" + dtype)

    return ctx.bb.emit_te(fn, x, primfunc_name_hint="decode_" + dtype), "int8"


def _encode_int(x: relax.Expr, src: str, to: str) -> relax.Expr:
    """-> int4/int2/uint4/uint2 bytes: truncated toward zero, wrapped to the type's bits."""
    mask = relax.const((1 << narrow.BITS[to]) - 1, "int64")
    value = relax.op.astype(x, "int64") if src != "int64" else x
    return relax.op.astype(relax.op.bitwise_and(value, mask), narrow.CONTAINER)


def _dtype_of(ctx: ConvertContext, code, what: str) -> str:
    if isinstance(code, str):  # Cast-1
        if code.upper() not in _ONNX_NAMES:
            raise ctx.error(f"{what}={code!r} is not an ONNX type name")
        code = _ONNX_NAMES[code.upper()]
    code = int(code)
    if code in _ONNX_DTYPES:
        return _ONNX_DTYPES[code]
    name = _UNSUPPORTED.get(code, str(code))
    raise ctx.error(f"{what}: casting to {name} is not supported (the CPU target has no {name} tensors)")


def cast_to(ctx: ConvertContext, x: relax.Expr, to: str, saturate: bool, round_mode: str,
            src: str | None = None) -> relax.Expr:
    """``x`` (of ONNX dtype ``src``, default its Relax dtype) cast to ``to``."""
    src = src or str(x.ty.dtype)
    if src not in _ORDINARY and src not in _NARROW and not narrow.is_narrow(src):
        raise ctx.error(f"input 0 has dtype {src}: casting from {src} is not supported (the CPU target "
                        "has no tensors of that type)")
    if src == to:
        return x
    if narrow.is_narrow(src):  # to its values: int8/uint8, or float32 for float4e2m1
        if src == "float4_e2m1fn":
            x, src = _decode(ctx, x, src), "float32"
        else:
            x, src = _decode_int(ctx, x, src)
        return cast_to(ctx, x, to, saturate, round_mode, src)
    if to in _ORDINARY and src in _ORDINARY:
        if to == "bool":
            # x != 0 with NaN true (LLVM's ordered != says false)
            nonzero = relax.op.not_equal(x, relax.const(0, src))
            if src.startswith(("float", "bfloat")):
                nonzero = relax.op.logical_or(nonzero, relax.op.isnan(x))
            return nonzero
        return relax.op.astype(x, to)
    if src in _NARROW:
        x = _decode(ctx, x, src)
        src = "float32"
        if to in _ORDINARY:
            return cast_to(ctx, x, to, saturate, round_mode, src)
    if narrow.is_narrow(to) and to != "float4_e2m1fn":
        return _encode_int(x, src, to)
    if src not in _FLOATS:
        # integers and bool: exact in float32 within the float8 ranges; float64 is rounded to
        # float32 first, as the ONNX reference (ml_dtypes) does
        x = ctx.bb.normalize(relax.op.astype(x, "float32"))
        src = "float32"
    return _encode(ctx, x, src, to, saturate, round_mode)


def _cast_attrs(attrs: Attrs, opset: int) -> tuple[bool, str]:
    saturate = bool(attrs.reject("saturate", lambda v: v in (0, 1), 1)) if opset >= 19 else True
    round_mode = attrs.reject("round_mode", lambda v: v in ("up", "down", "nearest"), "up") if opset >= 24 else "up"
    return saturate, round_mode


# One entry: what changed across opsets 1-25 (saturate, round_mode, types) is read from ctx.opset.
@converter("Cast", since=1)
def cast(ctx: ConvertContext, inputs: list, attrs: Attrs):
    if "to" not in attrs.values:
        raise ctx.error("attribute 'to' is required")
    to = _dtype_of(ctx, attrs.get("to"), "attribute to")
    saturate, round_mode = _cast_attrs(attrs, ctx.opset)
    return cast_to(ctx, inputs[0], to, saturate, round_mode, narrow.onnx_dtype(ctx, inputs[0], 0))


# One entry, as for Cast.
@converter("CastLike", since=15)
def cast_like(ctx: ConvertContext, inputs: list, attrs: Attrs):
    to = narrow.onnx_dtype(ctx, inputs[1], 1)
    if to not in _ORDINARY and to not in _NARROW and not narrow.is_narrow(to):
        raise ctx.error(f"input 1 (target_type) has dtype {to}: casting to {to} is not supported (the CPU "
                        "target has no tensors of that type)")
    saturate, round_mode = _cast_attrs(attrs, ctx.opset)
    return cast_to(ctx, inputs[0], to, saturate, round_mode, narrow.onnx_dtype(ctx, inputs[0], 0))
