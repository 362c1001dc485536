"""The fallback rule: every block gets its data-parallel loops in parallel, SIMD-wide where it can.

Elementwise chains and copies are first inlined into the blocks that read them
(``_inline_chains``). Spatial (injective) blocks are fused into one loop, vectorized by the
SIMD width when the innermost extent allows it, and run in parallel. Other blocks (reductions
no other rule took) get their leading spatial loops fused and parallel.
"""

from __future__ import annotations

import math

import tvm
from tvm import tirx
from tvm.s_tir import Schedule, ScheduleError
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.target import Target

from .common import MIN_PARALLEL_ITERATIONS, SYMBOLIC_SIZE, Rule, normalized, schedule_spatial


def apply(func: tirx.PrimFunc, target: Target, lanes: int) -> Schedule | None:
    del target
    sch, infos = normalized(func)
    if infos is None:
        return None
    if _inline_chains(sch, infos):
        infos = normalize_prim_func(sch)
        if infos is None:
            return None
    for info in infos:
        try:
            _schedule_block(sch, info, lanes)
        except ScheduleError:
            continue  # a failed primitive leaves the schedule as it was; the block stays serial
    return sch


def _inline_chains(sch: Schedule, infos) -> bool:
    """Inline elementwise chains and copies into the block that consumes them; True if any.

    FuseTIR leaves one block per fused op, each writing a whole intermediate buffer: a GELU
    (divide, erf, add, multiply, multiply) was five parallel passes over 1.5 MB, an input
    quantization (divide, round, add, clip, cast, transpose, pad) seven. A block is inlined
    when it is spatial and either a plain copy (transpose, reshape: the consumer reads through
    the index map) or computes a value whose single consumer is a spatial block of the same
    shape (an elementwise chain). Values read by several blocks stay materialized (inlining
    would compute them once per reader), so do the function's outputs."""
    changed = False
    for info in infos[:-1]:
        block = info.block_rv
        if not all(it.kind == "S" for it in info.iters):
            continue
        stmt = sch.get(block)
        if not isinstance(stmt.body, tirx.BufferStore) or len(stmt.writes) != 1:
            continue
        consumers = sch.get_consumers(block)
        if not consumers:
            continue
        shape = [str(d) for d in stmt.writes[0].source.shape]
        copy = isinstance(stmt.body.value, tvm.ir.TensorLoad)
        elementwise = len(consumers) == 1 and all(
            len(sch.get(c).writes) == 1 and [str(d) for d in sch.get(c).writes[0].source.shape] == shape
            and all(int(iv.iter_type) == tirx.IterVar.DataPar for iv in sch.get(c).iter_vars)
            for c in consumers)
        if not (copy or elementwise):
            continue
        try:
            sch.compute_inline(block)
            changed = True
        except ScheduleError:
            continue
    return changed


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
