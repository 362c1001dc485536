"""Sub-byte ONNX tensor types: int4, uint4, int2, uint2 and float4e2m1.

TVM packs these types two or four to a byte, and its CPU code generation indexes such buffers
as one element per byte (a kernel reading an int4 tensor reads past its end). hetc therefore
holds one element per byte: a tensor of one of these types is a ``uint8`` tensor in Relax
whose every byte is ml_dtypes' encoding of the element (its low 4 or 2 bits, the rest zero).
A numpy (ml_dtypes) array crosses into and out of a compiled model as a view of its bytes
(``to_raw``, ``from_raw``); ops that only move data (Reshape, Transpose, ...) work on the
bytes unchanged; Cast, CastLike, QuantizeLinear and DequantizeLinear learn the ONNX type of
their inputs from ``ConvertContext.input_types`` (the Relax dtype says only ``uint8``).
"""

from __future__ import annotations

import numpy as np

# ONNX TensorProto data type -> the ml_dtypes name (the manifest's dtype)
ONNX_TYPES: dict[int, str] = {21: "uint4", 22: "int4", 23: "float4_e2m1fn", 25: "uint2", 26: "int2"}
BITS: dict[str, int] = {"uint4": 4, "int4": 4, "float4_e2m1fn": 4, "uint2": 2, "int2": 2}
CONTAINER = "uint8"


def is_narrow(dtype: str) -> bool:
    return dtype in BITS


def container(dtype: str) -> str:
    """The Relax dtype that holds a tensor of ``dtype`` (a numpy/ml_dtypes name)."""
    return CONTAINER if dtype in BITS else dtype


def to_raw(array: np.ndarray) -> np.ndarray:
    """An ml_dtypes sub-byte array as its bytes (a view); any other array unchanged."""
    return array.view(np.uint8) if array.dtype.name in BITS else array


def from_raw(array: np.ndarray, dtype: str) -> np.ndarray:
    """The bytes of a compiled model's output viewed as ``dtype`` where that is a sub-byte type."""
    if dtype not in BITS:
        return array
    import ml_dtypes

    return array.view(getattr(ml_dtypes, dtype))


def onnx_dtype(ctx, x, i: int) -> str:
    """Input ``i`` (Relax expr ``x``) of a converter's node: its dtype as ONNX sees it, a
    sub-byte type's name where the uint8 tensor holds one (``ctx.input_types``)."""
    code = ctx.input_types[i] if i < len(ctx.input_types) else 0
    dtype = str(x.ty.dtype)
    return ONNX_TYPES[code] if code in ONNX_TYPES and dtype == CONTAINER else dtype
