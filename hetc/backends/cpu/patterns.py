"""What the CPU target can run: every Relax op TVM can legalize to TIR, in CPU dtypes."""

from __future__ import annotations

from functools import cache

from ...graph import OpNode

DTYPES = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64",
                    "uint8", "uint16", "uint32", "uint64", "bool"})

# Ops the Relax VM executes itself instead of through legalized TIR.
_VM_BUILTINS = frozenset({"relax.shape_of", "relax.null_value", "relax.call_tir",
                          "relax.call_dps_packed", "relax.call_pure_packed"})


@cache
def _legalizable(op_name: str) -> bool:
    import tvm

    try:
        return tvm.ir.Op.get(op_name).get_attr("FLegalize") is not None
    except (ValueError, tvm.error.TVMError, AttributeError):
        return False


def supports(node: OpNode) -> bool:
    if node.op not in _VM_BUILTINS and not _legalizable(node.op):
        return False
    return all(t.dtype in DTYPES for t in node.inputs + node.outputs)
