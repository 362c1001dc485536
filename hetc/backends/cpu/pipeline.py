"""The CPU pass pipeline and its default schedule.

Until tuned/rule-based schedules land, every PrimFunc gets one schedule step: the leading
data-parallel loops of each block are fused and run in parallel over the worker threads.
"""

from __future__ import annotations

import logging
import math

import tvm
from tvm import tirx
from tvm.s_tir import Schedule, ScheduleError
from tvm.s_tir.dlight.analysis import normalize_prim_func

from ...options import CompileOptions
from ...passes.phases import fusion_passes, inference_passes, layout_passes, legalize_passes, simplify_passes
from ...passes.pipeline import Stage

log = logging.getLogger(__name__)


# Below this many block iterations a parallel region costs more than it saves (a thread-pool
# launch is a few microseconds; one iteration of a naive kernel a few nanoseconds).
MIN_PARALLEL_ITERATIONS = 4096


def parallelize(func: tirx.PrimFunc, min_extent: int = 2,
                min_iterations: int = MIN_PARALLEL_ITERATIONS) -> tirx.PrimFunc:
    """Fuse each block's leading spatial loops into one parallel loop, for blocks with enough work."""
    sch = Schedule(func)
    try:
        infos = normalize_prim_func(sch)
    except (ScheduleError, tvm.error.TVMError, ValueError) as err:
        log.debug("parallelize: cannot normalize %s: %s", func.attrs, err)
        return func
    for info in infos or []:
        doms = [it.dom for it in info.iters]
        if not all(isinstance(d, int | tirx.IntImm) for d in doms) or math.prod(int(d) for d in doms) < min_iterations:
            continue
        prefix = []
        for it in info.iters:
            if it.kind != "S" or not isinstance(it.dom, int | tirx.IntImm):
                break
            prefix.append(it.loop_rv)
        if not prefix:
            continue
        try:
            loop = sch.fuse(*prefix) if len(prefix) > 1 else prefix[0]
            if int(sch.get(loop).extent) >= min_extent:
                sch.parallel(loop)
        except (ScheduleError, tvm.error.TVMError) as err:
            log.debug("parallelize: skipped block %s: %s", info.name, err)
    return sch.mod["main"]


@tvm.transform.module_pass(opt_level=0, name="HetcCPUParallelize")
def parallelize_pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    updates = {gv: parallelize(func) for gv, func in mod.functions.items()
               if isinstance(func, tirx.PrimFunc)}
    for gv, func in updates.items():
        mod[gv] = func
    return mod


def schedule_passes(options: CompileOptions) -> list[Stage]:
    if options.threads <= 1:
        return []
    return [Stage("cpu_parallelize", "run each kernel's outer data-parallel loops on all threads",
                  lambda: parallelize_pass)]


def stages(options: CompileOptions) -> list[Stage]:
    """The CPU pipeline, in order."""
    return (
        inference_passes()
        + simplify_passes()
        + layout_passes(options.layout)
        + legalize_passes()
        + fusion_passes()
        + schedule_passes(options)
    )
