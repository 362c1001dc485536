"""The fallback rule: every block gets its data-parallel loops in parallel, SIMD-wide where it can.

Spatial (injective) blocks are fused into one loop, vectorized by the SIMD width when the
innermost extent allows it, and run in parallel. Other blocks (reductions no other rule took)
get their leading spatial loops fused and parallel.
"""

from __future__ import annotations

import math

from tvm import tirx
from tvm.s_tir import Schedule, ScheduleError
from tvm.target import Target

from .common import MIN_PARALLEL_ITERATIONS, SYMBOLIC_SIZE, Rule, normalized, schedule_spatial


def apply(func: tirx.PrimFunc, target: Target, lanes: int) -> Schedule | None:
    del target
    sch, infos = normalized(func)
    if infos is None:
        return None
    for info in infos:
        try:
            _schedule_block(sch, info, lanes)
        except ScheduleError:
            continue  # a failed primitive leaves the schedule as it was; the block stays serial
    return sch


def _schedule_block(sch, info, lanes: int) -> None:
    doms = [it.dom if isinstance(it.dom, int) else SYMBOLIC_SIZE for it in info.iters]
    if all(it.kind == "S" for it in info.iters):
        schedule_spatial(sch, info.block_rv, lanes)
        return
    if math.prod(doms) < MIN_PARALLEL_ITERATIONS:
        return
    prefix = []
    for it in info.iters:
        if it.kind != "S":
            break
        prefix.append(it.loop_rv)
    if prefix:
        loop = sch.fuse(*prefix) if len(prefix) > 1 else prefix[0]
        extent = sch.get(loop).extent
        if not isinstance(extent, tirx.IntImm) or int(extent) >= 2:
            sch.parallel(loop)


RULE = Rule("generic", "parallel outer loops, vectorized inner loop of injective blocks", apply)
