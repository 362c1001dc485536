"""Schedule helpers shared by the CPU rules."""

from __future__ import annotations

import concurrent.futures
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

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
# What a symbolic extent (batch, seq) counts as when deciding whether to parallelize.
SYMBOLIC_SIZE = 16
# The static inner part of an injective kernel with symbolic extents: at least this many
# elements per iteration of its parallel loop (see ``schedule_spatial``).
BODY_ELEMENTS = 64


@dataclass(frozen=True)
class Rule:
    """A default-schedule rule: ``apply(func, target, lanes[, variant]) -> Schedule | None``.

    None means "not mine". ``lanes`` is the float32 SIMD width of ``target``. A rule with
    ``variants > 1`` takes ``variant`` (0 = its default choice) and returns its alternatives
    (other register tiles) for the tuner to measure; past its last one it returns None. A rule
    may raise ``ScheduleError`` halfway: the caller then tries the next rule. ``finish(func,
    scheduled, target, lanes) -> PrimFunc | None``, if given, may replace the default schedule's
    function by one no schedule trace can express (the contraction's run-time dispatch on the
    row count: ``dispatch.py``); the tuner never sees it.
    """

    name: str
    description: str
    apply: Callable[..., Schedule | None]
    variants: int = 1
    finish: Callable[..., tirx.PrimFunc | None] | None = None


def normalized(func: tirx.PrimFunc) -> tuple[Schedule, list[SBlockInfo] | None]:
    """A fresh schedule with one loop per block iter, in order (dlight's normalization)."""
    sch = Schedule(func)
    return sch, normalize_prim_func(sch)


def one_reduction(func: tirx.PrimFunc) -> tuple[Schedule, list[SBlockInfo], SBlockInfo] | None:
    """``normalized(func)`` and its only reduction block; None if it does not normalize or has
    no reduction block or several."""
    sch, infos = normalized(func)
    reductions = [b for b in infos or [] if b.is_reduction()]
    return (sch, infos, reductions[0]) if len(reductions) == 1 else None


def scheduled(func: tirx.PrimFunc, schedule: Callable[..., bool], lanes: int, variant: int) -> Schedule | None:
    """A rule's ``apply``: ``schedule(sch, infos, lanes, variant)`` on a normalized copy of
    ``func``; None when the function does not normalize or the rule declines."""
    sch, infos = normalized(func)
    if infos is None or not schedule(sch, infos, lanes, variant):
        return None
    return sch


def func_layout_free(sch: Schedule) -> set[int]:
    """Parameter positions whose values are compile-time constants (AttachAttrLayoutFreeBuffers)."""
    attrs = sch.mod["main"].attrs
    return {int(i) for i in attrs["layout_free_buffers"]} if attrs and "layout_free_buffers" in attrs else set()


def is_constant(sch: Schedule, buffer) -> bool:
    """Whether ``buffer`` is a parameter holding a compile-time constant (packable)."""
    layout_free = func_layout_free(sch)
    return any(p.same_as(buffer) and pos in layout_free for pos, p in enumerate(sch.mod["main"].params))


def plain_index(indices, var: tirx.Var) -> int | None:
    """Position of ``var`` in ``indices`` if it appears exactly as one index, else None."""
    for pos, idx in enumerate(indices):
        if isinstance(idx, tirx.Var) and idx.same_as(var):
            return pos
    return None


def uses(expr, var: tirx.Var) -> bool:
    return any(v.same_as(var) for v in tirx.analysis.undefined_vars(expr))


def pack_panels(sch: Schedule, block, packs: list[tuple[int, int]], width: int) -> list[tirx.Buffer]:
    """Re-lay out constant operands ``[.., j, ..] -> [j // width, .., j % width]`` (one contiguous
    panel per tile column); ``packs`` holds (read index, position of j). The transform is a block
    annotated ``PREPROC``, which ``split_weight_packing_pass`` and FoldConstant run at compile time.
    Returns the packed buffers, in the order of ``packs``."""
    preprocs = []
    for idx, pos in packs:
        preproc = sch.cache_read(block, idx, "global")
        sch.annotate(preproc, PREPROC, True)
        sch.transform_layout(block, ("read", idx), _panel_map(pos, width))
        preprocs.append(preproc)
    return [sch.get(preproc).writes[0].source for preproc in preprocs]


def _panel_map(pos: int, width: int):
    """``[.., j, ..] -> [j // width, .., j % width]`` with j at ``pos`` (transform_layout reads
    the map's parameters as the buffer's axes, so ``pos`` is bound here, not as a default)."""

    def index_map(*axes):
        rest = [a for k, a in enumerate(axes) if k != pos]
        return (axes[pos] // width, *rest, axes[pos] % width)

    return index_map


def inline_chain(sch: Schedule, acc, infos: list[SBlockInfo], main: SBlockInfo, first=()):
    """Fold the blocks after ``main`` into one epilogue block reading the accumulator ``acc``.

    ``acc`` is the cache-write block of ``main``; ``first``: blocks that come before the
    original consumers (``pad_einsum``'s copy out of the padded result). Returns the block
    that stores the final tile.
    """
    consumers = list(first) + [b.block_rv for b in infos[infos.index(main) + 1:]]
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


def float_of_bytes(block) -> bool:
    """A block writing floats that reads 8-bit integers (no bool): TIR's typing makes it cast
    each to float before any arithmetic (int8 weights dequantized in a matmul's loop), and
    that vector code (``sitofp <16 x i8>``) LLVM takes, which ``vector_dtypes`` would refuse."""
    writes = [tvm.runtime.DataType(str(region.source.dtype)) for region in block.writes]
    if not writes or any(dtype.type_code != tvm.runtime.DataTypeCode.FLOAT or dtype.bits < 16 for dtype in writes):
        return False
    return all(str(region.source.dtype) != "bool" for region in block.reads)


def byte_copy(block) -> bool:
    """A copy of 8-bit integers, maybe padded (``if_then_else(in bounds, x[..], constant)``):
    vector code LLVM takes (no 8-bit arithmetic, no bool vectors in the data), which
    ``vector_dtypes`` would otherwise refuse (the uint8 padding before an int8 conv)."""
    body = block.body
    if not isinstance(body, tirx.BufferStore) or str(body.buffer.dtype) not in ("int8", "uint8"):
        return False
    return _padded_byte_load(body.value) == str(body.buffer.dtype)


def _padded_byte_load(value) -> str | None:
    """The dtype of ``x[..]`` when ``value`` is a load of 8-bit integers, maybe padded
    (``if_then_else(in bounds, x[..], constant)``); else None."""
    if isinstance(value, tvm.ir.Call) and str(getattr(value.op, "name", "")) == "prim.if_then_else":
        value, other = value.args[1], value.args[2]
        if not isinstance(other, tirx.IntImm):
            return None
    if isinstance(value, tvm.ir.TensorLoad) and str(value.source.dtype) in ("int8", "uint8"):
        return str(value.source.dtype)
    return None


def widening_copy(block) -> bool:
    """A copy of 8-bit integers, maybe padded, cast to a wider integer: ``Cast(int16,
    if_then_else(in bounds, x[..], constant))``, an int8 conv's input widened to int16 for
    ``vpmaddwd`` (``backends/cpu/int8.py``). LLVM takes its vector code (a zero or sign
    extension of a byte vector); left scalar, the division of the fused index and a byte load
    per element took 0.4 ms for a 58x58x64 pad (2-core AMD EPYC, LLVM znver3)."""
    body = block.body
    if not isinstance(body, tirx.BufferStore) or not isinstance(body.value, tirx.Cast):
        return False
    dtype = tvm.runtime.DataType(str(body.buffer.dtype))
    if dtype.type_code not in (tvm.runtime.DataTypeCode.INT, tvm.runtime.DataTypeCode.UINT) or dtype.bits < 16:
        return False
    return _padded_byte_load(body.value.value) is not None


# Longest printed function a schedule edits as text and parses back (characters: run-time
# dispatch, ``dispatch.py``; prefetches, ``prefetch.py``). The printer writes an expression shared
# within a kernel once per use: an SE gate's sigmoid, the scale and a SiLU inlined into one
# epilogue printed as a 96,000-character line, and parsing such a kernel back took 4.7 s (timm's
# nf_regnet_b0: 50 s of a 74 s compile on a Zen 3, LLVM znver3). Longer ones keep the schedule
# as it is. A decoder's matmul kernels print in 5,000-9,300 characters before combining (tiny
# Llama and GPT-2 exports).
MAX_SCRIPT = 50_000

# Side of the square tile a transposing copy moves at a time (``transpose_tiled``).
TRANSPOSE_TILE = 16


def _transposed_axis(block) -> int | None:
    """For a copy ``out[..., v_w] = in[..., v_r, ...]`` whose contiguous output axis (its
    innermost iter ``v_w``) is not the input's contiguous axis (the load's last index is
    another iter ``v_r``): the position of ``v_r`` among the block's iters. None for anything
    else (the load's last index an expression, a computed value, a reduction)."""
    body = block.body
    if not isinstance(body, tirx.BufferStore) or not isinstance(body.value, tvm.ir.TensorLoad):
        return None
    names = [iv.var for iv in block.iter_vars]
    if any(int(iv.iter_type) != tirx.IterVar.DataPar for iv in block.iter_vars) or len(names) < 2:
        return None
    if not (body.indices and body.value.indices):  # a scalar broadcast (a pad block of symbolic size)
        return None
    last_out, last_in = body.indices[-1], body.value.indices[-1]
    if not (isinstance(last_out, tirx.Var) and last_out.same_as(names[-1]) and isinstance(last_in, tirx.Var)):
        return None
    found = [k for k, var in enumerate(names[:-1]) if var.same_as(last_in)]
    return found[0] if found else None


def transpose_tiled(sch: Schedule, block, min_iterations: int = MIN_PARALLEL_ITERATIONS) -> bool:
    """A transposing copy (``_transposed_axis``) in tiles: the output's contiguous axis and the
    input's, each split by up to ``TRANSPOSE_TILE``, their tile loops innermost, vector stores
    along the output's axis; the rest fused and parallel. Done row by row instead, each
    output vector gathers elements a whole input row apart, and every input line is pulled
    into the cache once per element it holds: NHWC -> NCHW of a 56x56x256 feature map (the
    layout change at a CNN's output) took 2.1 ms, 3 GB/s (2-core Intel Xeon, LLVM
    ``emeraldrapids``, AVX-512). False (nothing done) where it does not apply: no such axes,
    either one symbolic or shorter than a tile, or the loops not one per iter."""
    stmt = sch.get(block)
    pos = _transposed_axis(stmt)
    loops = sch.get_loops(block)
    if pos is None or len(loops) != len(stmt.iter_vars):
        return False
    extents = [sch.get(loop).extent for loop in loops]
    tile = TRANSPOSE_TILE
    if not all(isinstance(extents[k], tirx.IntImm) for k in (pos, -1)) or int(extents[pos]) < tile:
        return False
    if int(extents[-1]) < tile:
        return _transpose_narrow(sch, loops, extents, pos, min_iterations)
    # Tiles of whole vectors where a vector width divides the axis (56 pixels: 7 x 8; 28: 7 x
    # 4); otherwise a tail tile, and scalar stores (vectors under a guard ran slower).
    width = next((w for w in (tile, tile // 2, tile // 4) if int(extents[-1]) % w == 0), tile)
    rows = next((r for r in (tile, tile // 2) if int(extents[pos]) % r == 0), tile)
    vectorize = vector_dtypes(stmt) and int(extents[-1]) % width == 0 and int(extents[pos]) % rows == 0
    wo, wi = sch.split(loops[-1], [None, width])
    ro, ri = sch.split(loops[pos], [None, rows])
    outer = [loop for k, loop in enumerate(loops[:-1]) if k != pos]
    sch.reorder(*outer, ro, wo, ri, wi)
    fused = sch.fuse(*outer, ro, wo)
    total = _iterations(extents)
    if total >= min_iterations:
        sch.parallel(fused)
    if vectorize:
        sch.vectorize(wi)
    return True


def _iterations(extents) -> int:
    """Iterations of a loop nest of ``extents``, a symbolic extent counted as ``SYMBOLIC_SIZE``."""
    return math.prod(int(e) if isinstance(e, tirx.IntImm) else SYMBOLIC_SIZE for e in extents)


# Longest contiguous output axis ``_transpose_narrow`` unrolls (an image's channels: RGB, RGBA).
NARROW_TRANSPOSE = 4


def _transpose_narrow(sch: Schedule, loops, extents, pos: int, min_iterations: int) -> bool:
    """A transposing copy whose contiguous output axis is shorter than a tile: an NCHW image's
    3 channels moved last (NHWC), the first kernel of every CNN on the CPU. Fused whole, the
    copy divided its index per element and gathered an element at a time: 0.19 ms for a
    224x224 RGB image (2-core AMD EPYC, LLVM ``znver3``, AVX2). Here the loops outside the
    input's contiguous axis run in parallel and each output row is written in order, the
    channels unrolled: one load from each plane, the stores contiguous."""
    if int(extents[-1]) > NARROW_TRANSPOSE:
        return False
    outer = [loop for k, loop in enumerate(loops[:-1]) if k != pos]
    sch.reorder(*outer, loops[pos], loops[-1])
    sch.unroll(loops[-1])
    if outer and _iterations(extents) >= min_iterations:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    return True


def schedule_spatial(sch: Schedule, block, lanes: int,
                     min_iterations: int = MIN_PARALLEL_ITERATIONS) -> None:
    """An injective block: all loops fused, SIMD-wide inner part vectorized, the rest parallel.

    With symbolic extents, the fused index would be split back into the block's indices by
    division by symbolic extents, a 64-bit division per element (a 12x128x128 attention
    epilogue spent 8 ms there, 6x its static build). So the loops split in two: an inner body
    (a static suffix of at least ``BODY_ELEMENTS``, or a symbolic innermost loop) with no
    division by a symbol, and the loops around it fused into the parallel loop, whose
    divisions run once per body."""
    loops = sch.get_loops(block)
    extents = [sch.get(loop).extent for loop in loops]
    if not loops:
        return
    if transpose_tiled(sch, block, min_iterations):
        return
    # A symbolic extent (batch, seq) counts as SYMBOLIC_SIZE iterations: big enough to run in
    # parallel and vectorized, small enough that a kernel of a few static iterations stays serial.
    total = _iterations(extents)
    static = [isinstance(e, tirx.IntImm) for e in extents]
    body_at = len(loops)
    if not all(static):
        if not static[-1]:
            body_at = len(loops) - 1 if len(loops) > 1 else len(loops)
        else:
            size = 1
            while body_at > 0 and static[body_at - 1] and size < BODY_ELEMENTS:
                body_at -= 1
                size *= int(extents[body_at])
    outer, body = loops[:body_at], loops[body_at:]
    if not outer:
        outer, body = body, []
    inner = None
    if body and all(static[body_at:]):
        inner = sch.fuse(*body) if len(body) > 1 else body[0]
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    vec_loop = inner if body else fused
    if byte_copy(sch.get(block)) and isinstance(extents[-1], tirx.IntImm):
        # a vector register of bytes, or the widest part of one that divides the channels
        # (a pad of MobileNetV2's 96 or 144 uint8 channels ran scalar, ~1 ns a byte on a Zen 4)
        lanes = next((w for w in (4 * lanes, 2 * lanes, lanes, lanes // 2) if int(extents[-1]) % w == 0), 4 * lanes)
    widening = widening_copy(sch.get(block))
    if widening and isinstance(extents[-1], tirx.IntImm):  # a register of the wider values
        lanes = next((w for w in (2 * lanes, lanes, lanes // 2) if int(extents[-1]) % w == 0), 2 * lanes)
    if (vec_loop is not None and isinstance(extents[-1], tirx.IntImm) and int(extents[-1]) % lanes == 0
            and total >= 4 * lanes and (vector_dtypes(sch.get(block)) or byte_copy(sch.get(block)) or widening)):
        rest, vec = sch.split(vec_loop, [None, lanes])
        sch.vectorize(vec)
        if not body:
            fused = rest
    if total >= min_iterations:
        sch.parallel(fused)


_T = TypeVar("_T")


def on_fresh_stack(make: Callable[[], _T]) -> _T:
    """``make()`` on a thread of its own: for building tensor intrinsics with TVMScript, whose
    ``T.prim_func`` calls ``inspect.stack()`` and so reads the source of every frame above it.
    From inside a compile's pass stack, registering int8's 15 intrinsics cost 1.15 s of
    ResNet-50 int8's compile (2-core AMD EPYC, LLVM ``znver3``: AVX2); from a new thread's
    few frames, 0.18 s for the one an AVX2 compile uses."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(make).result()
