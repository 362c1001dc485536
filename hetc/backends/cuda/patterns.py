"""What the CUDA target can run: the ops the CPU target can (TVM legalizes them to TIR that
dlight schedules for the GPU), in the dtypes CUDA code generation handles."""

from __future__ import annotations

from ...graph import OpNode
from ..cpu import patterns as cpu_patterns

# float8 casts are hetc's own bit-pattern TE (CPU only); the rest TVM's CUDA codegen emits.
DTYPES = frozenset({"bfloat16", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
                    "uint8", "uint16", "uint32", "uint64", "bool"})


def supports(node: OpNode) -> bool:
    return cpu_patterns.supports(node) and all(t.dtype in DTYPES for t in node.inputs + node.outputs)
