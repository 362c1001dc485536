"""Schedule helpers shared by the CPU rules."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.s_tir import Schedule
from tvm.s_tir.dlight.analysis import SBlockInfo, normalize_prim_func

# Block annotation of a weight layout transform that SplitLayoutRewritePreproc moves out of
# the kernel (MetaSchedule's convention, used by the default schedules too).
PREPROC = "meta_schedule.layout_rewrite_preproc"

# Below this many iterations a parallel region costs more than it saves (a thread-pool launch
# is a few microseconds; one iteration of a simple kernel a few nanoseconds).
MIN_PARALLEL_ITERATIONS = 4096


@dataclass(frozen=True)
class Rule:
    """A default-schedule rule: ``apply(func, target, lanes[, variant]) -> Schedule | None``.

    None means "not mine". ``lanes`` is the float32 SIMD width of ``target``. A rule with
    ``variants > 1`` takes ``variant`` (0 = its default choice) and returns its alternatives
    (other register tiles) for the tuner to measure; past its last one it returns None. A rule
    may raise ``ScheduleError`` halfway: the caller then tries the next rule.
    """

    name: str
    description: str
    apply: Callable[..., Schedule | None]
    variants: int = 1


def normalized(func: tirx.PrimFunc) -> tuple[Schedule, list[SBlockInfo] | None]:
    """A fresh schedule with one loop per block iter, in order (dlight's normalization)."""
    sch = Schedule(func)
    return sch, normalize_prim_func(sch)


def func_layout_free(sch: Schedule) -> set[int]:
    """Parameter positions whose values are compile-time constants (AttachAttrLayoutFreeBuffers)."""
    attrs = sch.mod["main"].attrs
    return {int(i) for i in attrs["layout_free_buffers"]} if attrs and "layout_free_buffers" in attrs else set()


def inline_chain(sch: Schedule, acc, infos: list[SBlockInfo], main: SBlockInfo):
    """Fold the blocks after ``main`` into one epilogue block reading the accumulator ``acc``.

    ``acc`` is the cache-write block of ``main``. Returns the block that stores the final tile.
    """
    consumers = [b.block_rv for b in infos[infos.index(main) + 1:]]
    if not consumers:
        return acc
    sch.compute_inline(acc)
    for block in consumers[:-1]:
        sch.compute_inline(block)
    return consumers[-1]


def vectorize_tail(sch: Schedule, block, lanes: int) -> None:
    """Vectorize a block's innermost loop by the SIMD width and unroll the rest of the tile."""
    loops = sch.get_loops(block)
    inner = loops[-1]
    extent = sch.get(inner).extent
    if not isinstance(extent, tirx.IntImm) or int(extent) % lanes:
        return
    if int(extent) > lanes:
        outer, inner = sch.split(inner, [None, lanes])
        sch.unroll(outer)
    sch.vectorize(inner)


def vector_dtypes(block) -> bool:
    """Whether explicit vectorization is safe for the block's buffers: LLVM rejects TVM's vector
    code for bool and 8-bit element types (``or <16 x i8>, <16 x i1>``); those loops are left
    to LLVM's own vectorizer."""
    for region in list(block.reads) + list(block.writes):
        dtype = str(region.source.dtype)
        if dtype == "bool" or tvm.runtime.DataType(dtype).bits < 16:
            return False
    return True


def schedule_spatial(sch: Schedule, block, lanes: int,
                     min_iterations: int = MIN_PARALLEL_ITERATIONS) -> None:
    """An injective block: all loops fused, SIMD-wide inner part vectorized, the rest parallel."""
    loops = sch.get_loops(block)
    extents = [sch.get(loop).extent for loop in loops]
    if not loops or not all(isinstance(e, tirx.IntImm) for e in extents):
        return
    total = math.prod(int(e) for e in extents)
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    if int(extents[-1]) % lanes == 0 and total >= 4 * lanes and vector_dtypes(sch.get(block)):
        fused, vec = sch.split(fused, [None, lanes])
        sch.vectorize(vec)
    if total >= min_iterations:
        sch.parallel(fused)
