"""Running a named, flat pass pipeline and reporting what each stage changed.

A pipeline is a plain list of ``Stage``s; backends build theirs from the phase functions
in ``hetc.passes.phases`` (see ``hetc/backends/<target>/pipeline.py``). No stage decides
its own position.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import tvm
from tvm import relax

from ..errors import CompileError, HetcError
from ..native_log import release_frames


@dataclass(frozen=True)
class Stage:
    """One named step: ``make()`` returns the TVM pass (or pass sequence) to run."""

    name: str
    description: str
    make: Callable[[], tvm.transform.Pass]


@dataclass(frozen=True)
class ModuleStats:
    relax_calls: int  # calls to Relax operators, call_tir included, over all Relax functions
    relax_functions: int
    tir_functions: int


@dataclass(frozen=True)
class StageReport:
    stage: str
    before: ModuleStats
    after: ModuleStats
    seconds: float

    def to_json(self) -> dict:
        return asdict(self)


def module_stats(mod: tvm.IRModule) -> ModuleStats:
    calls = relax_funcs = tir_funcs = 0

    def visit(expr) -> None:
        nonlocal calls
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            calls += 1

    for _, func in mod.functions.items():
        if isinstance(func, relax.Function):
            relax_funcs += 1
            relax.analysis.post_order_visit(func, visit)
        elif isinstance(func, tvm.tirx.PrimFunc):
            tir_funcs += 1
    return ModuleStats(calls, relax_funcs, tir_funcs)


def run_pipeline(mod: tvm.IRModule, stages: Sequence[Stage]) -> tuple[tvm.IRModule, list[StageReport]]:
    """Apply ``stages`` in order; a failing stage raises CompileError naming it."""
    reports = []
    before = module_stats(mod)
    for stage in stages:
        start = time.perf_counter()
        try:
            with tvm.transform.PassContext(opt_level=3):
                mod = stage.make()(mod)
        except HetcError:
            raise  # already a one-line, user-facing error (a bad tuning database, ...)
        except Exception as err:
            first = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
            release_frames(err)
            raise CompileError(f"pass stage '{stage.name}' failed: {first}") from err
        after = module_stats(mod)
        reports.append(StageReport(stage.name, before, after, time.perf_counter() - start))
        before = after
    return mod, reports
