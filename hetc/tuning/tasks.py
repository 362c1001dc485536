"""Tuning tasks: which targets can be tuned, and the tasks of a model with their weights.

A task is one distinct PrimFunc of the module after fusion (the backend's
``pre_schedule_stages``), the unit MetaSchedule searches schedules for. Its *weight* is how many
times the model calls it (structurally equal PrimFuncs are one task), and its *cost*,
``weight x max(FLOPs, elements read and written)``, estimates its share of the model's run time
for the budget (``hetc.tuning.budget``): FLOPs for compute-bound kernels, memory traffic for
layout changes and other element-wise kernels.

Tunable targets are registered explicitly in ``TUNABLE`` (one entry per backend that can apply
a tuning database: its pre-schedule stages and its TVM target).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from ..errors import UsageError
from ..options import CompileOptions
from ..passes.pipeline import Stage
from .specialize import symbolic_dims
from .specialize import workload as specialized_workload


@dataclass(frozen=True)
class TuningSupport:
    """What tuning needs from a backend."""

    pre_schedule_stages: Callable[[CompileOptions], list[Stage]]  # the module tasks come from
    tvm_target: Callable[[CompileOptions], tvm.target.Target]  # the target tasks are tuned for
    # (PrimFunc, target, limit) -> [(name, traced Schedule)]: the backend's default schedule and
    # its alternatives, measured before the search so a tuned kernel never loses to the default
    default_schedules: Callable[..., list] | None = None
    # raises a HetcError when the device that measures candidates is absent (None: always present)
    require_device: Callable[[], object] | None = None


def _cpu() -> TuningSupport:
    from ..backends.cpu.codegen import llvm_target
    from ..backends.cpu.pipeline import pre_schedule_stages
    from ..backends.cpu.schedules import variants

    return TuningSupport(pre_schedule_stages, llvm_target, variants)


def _cuda() -> TuningSupport:
    from ..backends.cuda.codegen import cuda_target
    from ..backends.cuda.pipeline import pre_schedule_stages, variants
    from ..backends.cuda.runtime import gpu_device

    return TuningSupport(pre_schedule_stages, cuda_target, variants,
                         lambda: gpu_device(needed_by="tuning for cuda (it measures every candidate on the GPU)"))


# target name -> factory (imports the backend only when that target is tuned)
TUNABLE: dict[str, Callable[[], TuningSupport]] = {"cpu": _cpu, "cuda": _cuda}


def device_kind(target: tvm.target.Target) -> str:
    """The TVM runtime device a target's kernels are measured on ("cpu" for llvm, "cuda", ...)."""
    return {"llvm": "cpu"}.get(target.kind.name, target.kind.name)


def tuning_support(target_name: str) -> TuningSupport:
    try:
        return TUNABLE[target_name]()
    except KeyError:
        raise UsageError(f"target '{target_name}' cannot be tuned yet; tuning supports: "
                         f"{', '.join(TUNABLE)}") from None


@dataclass
class Task:
    """One tuning task."""

    name: str  # the PrimFunc's name in the module (the first one, when several share the task)
    weight: int  # calls per model run
    flops: float  # per call
    elements: int  # elements of all buffer parameters (read + written) per call
    mod: tvm.IRModule  # the workload MetaSchedule tunes and the database is keyed by
    symbolic: tvm.tirx.PrimFunc | None = None  # a dynamic model's kernel that ``mod`` specialises

    @property
    def cost(self) -> float:
        return self.weight * max(self.flops, float(self.elements))


def _elements(mod: tvm.IRModule) -> int:
    total = 0
    for func in mod.functions.values():
        if isinstance(func, tvm.tirx.PrimFunc):
            for param in func.params:  # buffer parameters carry their shape (scalars do not)
                try:
                    shape = list(param.shape)
                except (AttributeError, RuntimeError, TypeError):
                    continue
                total += math.prod(int(d) if isinstance(d, int | tvm.tirx.IntImm) else 1 for d in shape)
    return total


def _flops(mod: tvm.IRModule) -> float:
    try:
        return float(tvm.s_tir.analysis.estimate_tir_flops(mod))
    except Exception:  # noqa: BLE001 - symbolic extents and the like: fall back to memory traffic
        return 0.0


def extract(mod: tvm.IRModule, target: tvm.target.Target, sizes: Mapping[str, int] | None = None) -> list[Task]:
    """The tasks of a fused module, most expensive first (already-scheduled PrimFuncs are left out).

    A model with symbolic dims is tuned at representative ``sizes`` ({"batch": 4}): each
    symbolic kernel becomes its specialisation at those sizes (``specialize.workload``), kernels
    with the same specialisation one task; kernels that take a dim ``sizes`` does not give
    (a value known only at run time: a detector's box count, also in a model whose inputs are
    all static) are left out.
    """
    tasks: list[Task] = []
    for extracted in ms.relax_integration.extract_tasks(mod, target, module_equality="structural"):
        workload = extracted.dispatched[0]
        func = next(iter(workload.functions.values()))
        if func.attrs is not None and bool(func.attrs.get("tirx.is_scheduled", False)):
            continue
        symbolic = bool(symbolic_dims(func))
        if symbolic:
            # a static model's symbolic kernel takes a value known only at run time (a
            # detector's kept box count): left out, as are those ``sizes`` does not size
            workload = None if sizes is None else specialized_workload(func, sizes)
            if workload is None:
                continue
            same = next((t for t in tasks if tvm_ffi.structural_equal(t.mod, workload)), None)
            if same is not None:
                same.weight += int(extracted.weight)
                continue
        tasks.append(Task(extracted.task_name, int(extracted.weight), _flops(workload), _elements(workload),
                          workload, func if symbolic else None))
    tasks.sort(key=lambda t: -t.cost)
    return tasks
