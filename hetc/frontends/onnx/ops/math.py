"""Elementwise math: Pow.

ONNX's Pow lets base and exponent differ in type (T, T1) and returns the base's type; TVM's
converter requires one dtype, and TVM's power takes floats only. A float base takes the
exponent cast to its type; an integer base is raised in float64 and truncated back.
"""

from __future__ import annotations

from tvm import relax

from ..registry import Attrs, ConvertContext, converter


@converter("Pow", since=7)
def power(ctx: ConvertContext, inputs: list, attrs: Attrs):
    base, exponent = inputs
    base_dtype, exp_dtype = str(base.ty.dtype), str(exponent.ty.dtype)
    if base_dtype.startswith(("float", "bfloat")):
        return relax.op.power(base, exponent if exp_dtype == base_dtype else relax.op.astype(exponent, base_dtype))
    # TVM's power is float-only: integer bases go through float64 (exact up to 2**53).
    wide = relax.op.power(relax.op.astype(base, "float64"), relax.op.astype(exponent, "float64"))
    return relax.op.astype(wide, base_dtype)
