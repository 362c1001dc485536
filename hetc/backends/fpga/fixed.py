"""Bit-exact numpy emulation of Xilinx ``ap_fixed<W,I,Q,O>`` / ``ap_ufixed`` conversions.

A fixed-point value of type ``t`` is ``k * 2**-F`` with ``F = t.width - t.integer`` fractional
bits and an integer ``k`` in ``[-2**(W-1), 2**(W-1))`` (signed) or ``[0, 2**W)`` (unsigned).
Converting a real number to ``t`` (what ``ap_fixed``'s constructor from ``double``, and every
assignment from a wider fixed-point type, does) first rounds to a multiple of ``2**-F``:

- ``AP_TRN``: toward minus infinity (floor)
- ``AP_RND``: to nearest, ties toward plus infinity
- ``AP_RND_CONV``: to nearest, ties to even

then handles overflow: ``AP_WRAP`` keeps the low ``W`` bits (two's complement modulo ``2**W``),
``AP_SAT`` clamps to the type's range. A float ``NumType`` means C++ ``float``: rounding to
float32 (round to nearest even).

Everything is done in integer arithmetic on the exact ``(mantissa, exponent)`` of the doubles,
so the results are exact for every width up to 64 (``test_fpga_fixed.py`` checks them against
the real ``ap_fixed.h``). Non-finite inputs, which ``ap_fixed`` leaves undefined, become 0
(NaN, and infinities under ``AP_WRAP``) or the range limits (infinities under ``AP_SAT``).

To add a rounding or overflow mode: extend ``_round_up`` / ``_overflow`` and add its C++ name to
the modes that ``test_fpga_fixed.py`` compiles.
"""

from __future__ import annotations

import math

import numpy as np

from .layers import NumType

ROUNDING = ("AP_TRN", "AP_RND", "AP_RND_CONV")
OVERFLOW = ("AP_WRAP", "AP_SAT")
_MAX_SHIFT = 63  # right shifts beyond this give the same floor/rounding for |m| <= 2**62


def frac_bits(t: NumType) -> int:
    """Fractional bits ``F = W - I`` (may be negative: ``ap_fixed<8,10>`` steps by 4)."""
    return t.width - t.integer


def _check(t: NumType) -> None:
    if not 1 <= t.width <= 64:
        raise ValueError(f"{t}: width must be 1..64")
    if t.rounding not in ROUNDING or t.overflow not in OVERFLOW:
        raise ValueError(f"{t}: unsupported mode (rounding {ROUNDING}, overflow {OVERFLOW})")


def type_range(t: NumType) -> tuple[float, float]:
    """(smallest, largest) value of a fixed-point type."""
    step = 2.0 ** -frac_bits(t)
    lo, hi = (-(2 ** (t.width - 1)), 2 ** (t.width - 1) - 1) if t.signed else (0, 2**t.width - 1)
    return lo * step, hi * step


def _round_up(m: np.ndarray, s: np.ndarray, rounding: str) -> np.ndarray:
    """floor(m / 2**s) + (1 where the rounding mode rounds up), for s > 0 (int64 arrays)."""
    s = np.minimum(s, _MAX_SHIFT)
    floor = m >> s
    if rounding == "AP_TRN":
        return floor
    rem = m - (floor << s)  # in [0, 2**s)
    half = np.int64(1) << (s - 1)
    up = rem >= half if rounding == "AP_RND" else (rem > half) | ((rem == half) & (floor & 1 == 1))
    return floor + up


def _to_units(m: np.ndarray, s: np.ndarray, t: NumType) -> np.ndarray:
    """The integer ``k`` of ``t`` nearest (by ``t``'s modes) to the exact value ``m * 2**-s``
    (``m``, ``s``: int64 arrays, ``|m| <= 2**62``; ``AP_SAT`` compares in doubles, exact while
    the rounded ``k`` has at most 53 significant bits, always so for ``m`` from a double)."""
    w = t.width
    right = s > 0
    k = np.where(right, _round_up(m, np.where(right, s, 1), t.rounding), 0)
    left = np.where(right, 0, -s)  # k = m << left: exact unless it overflows the type
    if t.overflow == "AP_SAT":
        lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if t.signed else (0, (1 << w) - 1)
        if hi >= 1 << 63:
            raise ValueError(f"{t}: ap_ufixed<64,...> does not fit the int64 emulation")
        # exact as a double: an integer of at most 62 bits from a right shift, or m * 2**left
        with np.errstate(over="ignore"):
            value = np.where(right, k.astype(np.float64), np.ldexp(m.astype(np.float64), np.minimum(left, 2000)))
        small = np.where(right, k, m << np.minimum(left, 62))  # valid where it does not overflow
        return np.where(value >= float(hi + 1), np.int64(hi),
                        np.where(value < float(lo), np.int64(lo), small)).astype(np.int64)
    # AP_WRAP: keep the low W bits of the two's complement integer (uint64 arithmetic is modulo 2**64).
    shifted = np.where(left < 64, m.astype(np.uint64) << np.minimum(left, 63).astype(np.uint64), np.uint64(0))
    u = np.where(right, k.astype(np.uint64), shifted)
    if not t.signed and w == 64:
        raise ValueError(f"{t}: ap_ufixed<64,...> does not fit the int64 emulation")
    unused = np.uint64(64 - w)
    if t.signed:  # sign-extend bit W-1
        return (u << unused).view(np.int64) >> unused.astype(np.int64)
    return (u & np.uint64((1 << w) - 1)).astype(np.int64)


def to_units(x: np.ndarray, t: NumType) -> np.ndarray:
    """``x`` (doubles) converted to ``t``, as the integers ``k`` (int64) of ``k * 2**-F``."""
    _check(t)
    x = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(x)
    mant, exp = np.frexp(np.where(finite, x, 0.0))
    m = np.ldexp(mant, 53).astype(np.int64)  # exact: x == m * 2**(exp - 53)
    s = (53 - exp.astype(np.int64)) - frac_bits(t)  # x * 2**F == m * 2**-s
    k = _to_units(m, s, t)
    if not finite.all():
        lo, hi = type_range(t)
        f = frac_bits(t)
        sat = t.overflow == "AP_SAT"
        k = np.where(np.isposinf(x), round(hi * 2.0**f) if sat else 0, k)
        k = np.where(np.isneginf(x), round(lo * 2.0**f) if sat else 0, k)
        k = np.where(np.isnan(x), 0, k)
    return k.astype(np.int64)


def from_units(k: np.ndarray, t: NumType) -> np.ndarray:
    """The values (float64) of the integers ``k`` of type ``t``."""
    return np.ldexp(np.asarray(k).astype(np.float64), -frac_bits(t))


def requantize(k: np.ndarray, frac: int, t: NumType) -> np.ndarray:
    """Integers ``k * 2**-frac`` (an exact fixed-point value, ``|k| <= 2**62``; ``< 2**53`` when
    ``t`` saturates) converted to ``t``, as ``t``'s integers: what assigning a wider
    ``ap_fixed`` to a ``t`` variable does."""
    _check(t)
    k = np.asarray(k, dtype=np.int64)
    return _to_units(k, np.full(k.shape, frac - frac_bits(t), dtype=np.int64), t)


def quantize(x: np.ndarray, t: NumType) -> np.ndarray:
    """``x`` converted to ``t`` (``t(x)`` in C++), as float64 values: exactly ``t``'s values up to
    53 bits wide (wider types: ``to_units`` holds the exact integers)."""
    x = np.asarray(x, dtype=np.float64)
    if t.is_float:
        return x.astype(np.float32).astype(np.float64)
    return from_units(to_units(x, t), t)


def int_bits_for(max_abs: float, signed: bool = True) -> int:
    """Integer bits (the sign bit included when ``signed``) a type needs to hold every value in
    ``[-max_abs, max_abs]`` (``[0, max_abs]`` unsigned): the smallest ``I`` with
    ``2**(I - signed) > max_abs``. Values in the type's top step, ``(2**(I-signed) - 2**-F,
    2**(I-signed))``, still overflow when rounded up. The result may be 0 or negative for small
    ranges (``ap_fixed<16,0>`` holds ``[-0.5, 0.5)``); ``max_abs <= 0`` gives ``int(signed)``."""
    if not math.isfinite(max_abs):
        raise ValueError(f"range {max_abs} is not finite")
    if max_abs <= 0:
        return int(signed)
    return math.frexp(max_abs)[1] + int(signed)  # max_abs = m * 2**e, 0.5 <= m < 1
