"""The CUDA pipeline: hetc's graph passes, TVM's GPU default schedules (dlight), tuned records.

Every PrimFunc must end up with GPU thread bindings: TVM builds an unscheduled PrimFunc for a
GPU target as host code without a word (TVM_NOTES.md), so ``check_device_kernels`` turns that
into a compile error naming the functions.
"""

from __future__ import annotations

import logging

import tvm
from tvm import tirx
from tvm.s_tir import dlight as dl

from ...errors import CompileError
from ...options import CompileOptions
from ...passes.phases import fusion_passes, inference_passes, layout_passes, legalize_passes, simplify_passes
from ...passes.pipeline import Stage
from .codegen import cuda_target

log = logging.getLogger(__name__)

RULE_ATTR = "hetc.schedule_rule"  # which dlight rule scheduled a kernel (report.json "kernels")


def gpu_rules() -> list:
    """dlight's GPU rules, in the order TVM's own CUDA pipeline tries them (Fallback last)."""
    return [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]


def _target_of(func: tirx.PrimFunc, default: tvm.target.Target) -> tvm.target.Target:
    return (func.attrs or {}).get("target") or default


def _is_scheduled(func: tirx.PrimFunc) -> bool:
    attrs = func.attrs or {}
    return bool(attrs.get("tirx.is_scheduled") or attrs.get("tir.is_scheduled"))


def gpu_schedule_pass(target: tvm.target.Target) -> tvm.transform.Pass:
    """dlight's default schedule for every unscheduled PrimFunc whose ``target`` attribute is a
    GPU target (or that has none, in a module built for ``target``); others are left alone."""

    @tvm.transform.module_pass(opt_level=0, name="HetcGPUDefaultSchedules")
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        updates = {}
        for gv, func in mod.functions.items():
            if not isinstance(func, tirx.PrimFunc) or _is_scheduled(func):
                continue
            func_target = _target_of(func, target)
            if func_target.kind.name == "cuda" and (found := variants(func, func_target)):
                rule, sch = found[0]
                updates[gv] = sch.mod["main"].with_attr("tirx.is_scheduled", True).with_attr(RULE_ATTR, rule)
        for gv, func in updates.items():
            mod[gv] = func
        return mod

    return apply


def variants(func: tirx.PrimFunc, target: tvm.target.Target, limit: int = 1) -> list[tuple[str, object]]:
    """The default (dlight) schedule of ``func`` as ``[(name, Schedule)]``, for the tuner to
    measure before its search (dlight has one schedule per kernel: no alternatives)."""
    with target:
        for rule in gpu_rules():
            try:
                sch = rule.apply(func, target, False)
            except Exception as err:  # noqa: BLE001 - a rule asserting on a pattern it half-matches
                # (Matmul: "consumers of the cache-write stage that are not properly inlined" on a
                # matmul whose epilogue it cannot inline): the next rule, Fallback last, as TVM's own
                log.debug("dlight %s failed on a kernel, trying the next rule: %s", type(rule).__name__, err)
                continue
            if sch is not None:
                return [(f"dlight.{type(rule).__name__}", sch[0] if isinstance(sch, list) else sch)][:limit]
    return []


def _has_thread_binding(func: tirx.PrimFunc) -> bool:
    # TVM 0.27's Python API has no TIR visitor (no stmt_functor); the printed form names every
    # GPU loop binding ("blockIdx.x", "threadIdx.x") of a scheduled or lowered function.
    text = func.script()
    return "threadIdx." in text or "blockIdx." in text


def host_kernels(mod: tvm.IRModule, target: tvm.target.Target) -> list[str]:
    """Names of the PrimFuncs meant for a GPU that have no GPU thread bindings (would run on the host)."""
    return sorted(gv.name_hint for gv, func in mod.functions.items()
                  if isinstance(func, tirx.PrimFunc) and _target_of(func, target).kind.name == "cuda"
                  and not _has_thread_binding(func))


def check_device_kernels(mod: tvm.IRModule, target: tvm.target.Target) -> None:
    """Raise CompileError if a GPU function was not scheduled for the GPU."""
    missing = host_kernels(mod, target)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise CompileError(f"{len(missing)} kernel(s) got no GPU schedule and would run as host code: {shown}")


def _check_pass(target: tvm.target.Target) -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="HetcCheckDeviceKernels")
    def check(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        check_device_kernels(mod, target)
        return mod

    return check


def pre_schedule_stages(options: CompileOptions) -> list[Stage]:
    """Everything before scheduling (the module ``hetc tune --target cuda`` extracts tasks from).
    Convolutions keep ONNX's NCHW unless ``--layout NHWC``: dlight has no layout preference."""
    return (inference_passes() + simplify_passes() + layout_passes(options.layout) + legalize_passes()
            + fusion_passes())


def schedule_stages(options: CompileOptions) -> list[Stage]:
    target = cuda_target(options)
    stages = []
    if options.database is not None:
        from ...tuning.database import apply_database_pass

        stages.append(Stage("apply_tuning_database", "use the best tuned schedule for every task the database has",
                            lambda: apply_database_pass(options.database, target)))
    return stages + [
        Stage("gpu_default_schedules", "dlight GPU schedules (matmul, GEMV, reductions, fallback)",
              lambda: gpu_schedule_pass(target)),
        Stage("check_device_kernels", "every kernel has GPU thread bindings", lambda: _check_pass(target)),
    ]


def stages(options: CompileOptions) -> list[Stage]:
    """The CUDA pipeline, in order."""
    return pre_schedule_stages(options) + schedule_stages(options)
