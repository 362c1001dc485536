"""What the CPU target can run, in CPU dtypes: Relax ops TVM legalizes to TIR, ops the build
pipeline dispatches to TIR itself (sort/scan/sampling), and ops the VM runs as packed calls."""

from __future__ import annotations

from functools import cache

from ...graph import OpNode

DTYPES = frozenset({"bfloat16", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
                    "uint8", "uint16", "uint32", "uint64", "bool",
                    # float8: hetc's Cast/CastLike (frontends/onnx/ops/cast.py) convert them exactly
                    # (bit patterns in TE); TVM's own relax.astype to/from them is wrong, do not emit it
                    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"})

# Ops the Relax VM executes itself instead of through legalized TIR.
_VM_BUILTINS = frozenset({"relax.shape_of", "relax.null_value", "relax.call_tir", "relax.call_tir_inplace",
                          "relax.call_dps_packed", "relax.call_pure_packed", "relax.call_inplace_packed",
                          "relax.call_builtin_with_ctx", "relax.tensor_to_shape", "relax.hint_on_device",
                          "relax.to_vdevice", "relax.builtin.stop_lift_params"})
# Ops without FLegalize that tvm.compile's default pipeline lowers (DispatchSortScan, DispatchSampling).
_DISPATCHED = frozenset({"relax.sort", "relax.argsort", "relax.topk", "relax.cumsum", "relax.cumprod",
                         "relax.multinomial_from_uniform"})


@cache
def _legalizable(op_name: str) -> bool:
    import tvm

    try:
        op = tvm.ir.Op.get(op_name)
        return op.get_attr("FLegalize") is not None or op.get_attr("FCallPacked") is not None
    except (ValueError, RuntimeError, AttributeError):
        return False


def supports(node: OpNode) -> bool:
    if node.op not in _VM_BUILTINS | _DISPATCHED and not _legalizable(node.op):
        return False
    return all(t.dtype in DTYPES for t in node.inputs + node.outputs)
