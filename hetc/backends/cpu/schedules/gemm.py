"""The contraction rule: dense, matmul, batch matmul, conv2d (any stride, 1x1, depthwise) and pooling.

All of them are one reduction block ``C[s...] (+)= f(A[...], B[...])`` whose innermost output
axis ``j`` is contiguous in every operand that depends on it (NHWC activations, weights packed
at compile time). The schedule is the classic register-blocked micro-kernel:

    parallel for (outer spatial axes, j_o):        # one output panel per task
      for i_o:                                     # rows of the panel
        acc[rows][vj] = 0                          # registers
        for reduction axes (kh, kw, c / k):
          for i_i in rows (unrolled):
            for j_i in vj (unrolled x vectorized by the SIMD width):
              acc[i_i][j_i] (+)= A[..i..] * B'[j_o][..k..][j_i]
        epilogue (bias, residual, activation) on the tile, stored once

Constant operands indexed by ``j`` are re-laid out to ``[j_o, ..., j_i]`` (a contiguous
panel per task: ``common.pack_panels``). The transform is a preprocessing block annotated
``meta_schedule.layout_rewrite_preproc``: ``SplitLayoutRewritePreproc`` moves it out of the
kernel and ``FoldConstant`` runs it at compile time, the same mechanism MetaSchedule's tuned
records use.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tvm import tirx
from tvm.runtime import DataType
from tvm.s_tir import Schedule, ScheduleError
from tvm.s_tir.dlight.analysis import SBlockInfo
from tvm.target import Target

from . import prefetch
from .common import (
    Rule,
    float_of_bytes,
    inline_chain,
    is_constant,
    pack_panels,
    plain_index,
    schedule_spatial,
    scheduled,
    uses,
    vector_dtypes,
    vectorize_tail,
)
from .dispatch import with_dispatches

log = logging.getLogger(__name__)

MAX_ROWS = 14  # register-tile rows: unrolled, each a broadcast per reduction step
# Vector registers a tile may fill (accumulators + operand vectors + a broadcast): AVX-512 has
# 32, but tiles above 27 (8 rows x 3 vectors = 28) ran 1.4-1.8x slower than the next smaller
# tile on MobileNetV2's 1x1 convs and were no faster elsewhere; the rest hold the epilogue's
# constants. 16-register files (AVX2) keep all 16.
TILE_REGISTERS = 27
# A packed weight this small stays in every thread's cache whole, so tasks go row-block major
# (a thread writes whole output pixels; the activations are read once). Larger weights go
# panel major, so that a thread's run of tasks reuses one column panel. On MobileNetV2's
# expansion convs (K=16..24) row-major ran 1.5-1.8x faster; on K>=576 it ran ~10% slower.
SMALL_WEIGHT_BYTES = 64 * 1024
# Stands for a symbolic extent when choosing a tile: divisible by every candidate (rows up to
# MAX_ROWS, columns up to 4 vectors of 16 lanes), so the best tile wins on its own merits and a
# remainder is left to a guarded tail (split's predicate).
SYMBOLIC_EXTENT = 720720
# Fewer static tasks than this in the parallel loop of a symbolic kernel: parallelize the outer
# (batch, head) loops instead.
MIN_TASKS = 8
# A static row axis at least this long outside a symbolic innermost one (``[seq, batch]``) is
# the register tile's rows instead (``_symbolic_rows``).
MIN_STATIC_ROWS = 8
# A static row count whose best tile has fewer rows than this is padded to whole tiles of a
# better one where that scores better (the padding counted as waste): 17 tokens (a 1-row tile)
# ran a 17x768x3072 -> 768 MLP in 6.2 ms, padded 1.2 (2-core Zen 5, AVX-512). A tile of more
# rows only where the padded one scores PAD_GAIN times better (13 rows of 96 columns: 13 x 1
# vector, 14.9, against 7 x 3, 31.2): the score overrates fewer rows with more vectors (a 7x7
# conv's 7 x 2 tile beat 8 padded columns' 4 x 4, 0.48 against 0.64 ms on a 512 -> 512 3x3,
# scores 24.9 against 28).
MIN_TILE_ROWS = 4
PAD_GAIN = 1.5
# Rows of a leading-rows tile (``leading_rows``: one row per sequence of a decoding batch).
# Batches come in powers of two; the best-scored tile's 5 rows (7 with padded columns) padded
# batch 8 to 10 (14) rows: GPT-2's 768 x 50257 LM head at batch 8 ran 8.0 -> 5.9 ms with
# 4-row tiles, its 768 x 3072 MLP matmuls 7.6 -> 6.6 ms at batch 16, the same at batch 2-4
# (2-core AMD EPYC, LLVM znver4, AVX-512).
LEADING_TILE_ROWS = 4


def worth_padding(rows: int, score: float, padded_score: float) -> bool:
    """Whether a tile of ``rows`` rows scoring ``score`` is worth replacing by a padded tile
    scoring ``padded_score`` (its waste counted): see MIN_TILE_ROWS."""
    return padded_score > score and (rows < MIN_TILE_ROWS or padded_score > PAD_GAIN * score)


@dataclass(frozen=True)
class Tile:
    rows: int  # register rows (i_i)
    vj: int  # columns (j_i)
    width: int  # SIMD width the columns are vectorized by (0: not vectorized)


def is_box(rows: int, extents: Sequence[int]) -> bool:
    """Whether every run of ``rows`` consecutive indices of the fused axes ``extents``
    (innermost last) is a box: ``rows`` = (the extents inside some axis) x (a divisor of it)."""
    inside = 1
    for extent in reversed(list(extents) or [1]):
        if rows % inside == 0 and extent % (rows // inside) == 0:
            return True
        if rows % (inside * extent):
            return False
        inside *= extent
    return rows % inside == 0 and rows == inside


def tile_candidates(m: int, n: int, lanes: int, registers: int, row_extents: Sequence[int] = ()) -> list[Tile]:
    """Register tiles that fit, best first: most multiply-add lanes per load.

    ``rows`` must divide ``m`` and ``vj`` divide ``n`` (no predicated tails in the micro-kernel);
    the tile needs ``rows * vectors`` accumulators, ``vectors`` operand registers and one
    broadcast register. Columns that are not a multiple of the full SIMD width use half or
    quarter vectors (24 channels: three 8-wide vectors). ``m`` fuses the axes ``row_extents``
    (innermost last); a tile's rows must be a box in them (``is_box``), so that the epilogue
    can be computed at the tile. ``lanes=0`` (dtypes LLVM mis-vectorizes) gives scalar tiles. The tuner measures the first few; the default schedule takes the first.
    """
    scored = []
    for width in (w for w in (lanes, lanes // 2, lanes // 4) if w >= 4 and n % w == 0):  # none if lanes=0
        for vj in (v * width for v in (4, 3, 2, 1) if n % (v * width) == 0):
            vectors = vj // width
            for rows in range(1, min(m, MAX_ROWS) + 1):
                if m % rows or rows * vectors + vectors + 1 > registers or not is_box(rows, row_extents or [m]):
                    continue
                scored.append((-rows * vectors * width / (rows + vectors), -vj, Tile(rows, vj, width)))
    if not scored:  # odd column count: a scalar tile over a divisor of n
        vj = max(d for d in range(1, min(n, 32) + 1) if n % d == 0)
        rows = max(r for r in range(1, min(m, 4) + 1) if m % r == 0 and is_box(r, row_extents or [m]))
        return [Tile(rows, vj, 0)]
    return [tile for *_, tile in sorted(scored, key=lambda t: t[:2])]


def _score(tile: Tile) -> float:
    """Multiply-add lanes per load of a tile (``tile_candidates``' order)."""
    vectors = tile.vj // tile.width if tile.width else tile.vj
    return tile.rows * vectors * max(tile.width, 1) / (tile.rows + vectors)


def _padded_score(tile: Tile, rows: int) -> float:
    """``_score`` of a tile whose rows are padded up from ``rows``, the padding counted as waste."""
    return _score(tile) * rows / (-(-rows // tile.rows) * tile.rows)


def one_vector_panels(columns: int, lanes: int) -> bool:
    """Whether only a one-vector panel divides ``columns`` (a multiple of ``lanes``): no panel of
    2, 3 or 4 vectors (``tile_candidates``) does."""
    return all(columns % (v * lanes) for v in (2, 3, 4))


def conv_row_tile(rows: int, width: int, columns: int, lanes: int) -> tuple[int, float]:
    """The rows and ``_score`` of the best tile for a conv's output rows ``rows x width`` (static)
    and ``columns`` output channels: the tile's rows must be a box in them (``is_box``)."""
    registers = TILE_REGISTERS if lanes >= 16 else 16
    tiles = tile_candidates(rows * width, columns, lanes, registers, [rows, width])
    return (tiles[0].rows, _score(tiles[0])) if tiles else (0, 0.0)


def choose_tile(m: int, n: int, lanes: int, registers: int, row_extents: Sequence[int] = ()) -> Tile:
    """The default schedule's register tile (the best-scored candidate)."""
    return tile_candidates(m, n, lanes, registers, row_extents)[0]


def apply(func: tirx.PrimFunc, target: Target, lanes: int, variant: int = 0) -> Schedule | None:
    """Schedule with the ``variant``-th best register tile (None: not a contraction, or no such tile)."""
    return scheduled(func, _schedule, lanes, variant)


def finish(func: tirx.PrimFunc, general: tirx.PrimFunc, target: Target, lanes: int) -> tirx.PrimFunc | None:
    """The default schedule's final function: for symbolic rows, the special schedules beside
    it, taken at run time (``dispatch.py``): one row (``one_row``), else the leading row axis
    alone (``leading_rows``); then its weight prefetches (``prefetch.py``, where they pay on
    ``target``). None if nothing applies."""
    specials = [s for s in (one_row(func, lanes), leading_rows(func, lanes)) if s is not None]
    combined = with_dispatches(general, specials, prefetch.editor(target)) if specials else None
    if combined is not None:
        return combined
    fetched = prefetch.inject(general, target)
    return None if fetched is general else fetched


def _special(func: tirx.PrimFunc, lanes: int, key: str, what: str):
    """(``func`` scheduled with ``_schedule``'s option ``key``, the condition on its
    ``info[what]`` extent being 1), or None where the option declines."""
    info: dict = {}
    try:
        special = scheduled(func, functools.partial(_schedule, **{key: info}), lanes, 0)
    except (ScheduleError, RuntimeError, ValueError) as err:  # as a rule's apply may (_try)
        log.debug("no %s schedule for %s: %s", key, (func.attrs or {}).get("global_symbol"), err)
        return None
    return None if special is None else (special.mod["main"], info[what] == 1)


def one_row(func: tirx.PrimFunc, lanes: int):
    """For a contraction whose rows are symbolic: a one-row schedule of ``func`` (the default
    tile's columns, one row, no padding) and its condition (the row count is 1: a decoding
    step). GPT-2's weight matmuls at one row ran 10-20% faster than on the padded multi-row
    tile (Zen 5, AVX-512), as fast as in a build with one static row. None where it does not
    apply (static rows, or a one-row default tile)."""
    return _special(func, lanes, "one_row", "rows")


def leading_rows(func: tirx.PrimFunc, lanes: int):
    """For a contraction over several symbolic row axes (``[batch, seq]``, whose default tile
    runs along ``seq`` with the batch outside it): a schedule whose tile runs along the batch,
    and its condition (the other row axes are 1: a decoding step of several sequences). With
    the tile along ``seq`` such a step ran one tile of 5 padded rows per sequence, each
    re-reading the weight panel: a Llama step at batch 4 took 2.2-2.8x its batch-1 time
    (2-core Intel Xeon, LLVM emeraldrapids, AVX-512). None where it does not apply."""
    return _special(func, lanes, "leading", "rest")


def _schedule(sch: Schedule, infos: list[SBlockInfo], lanes: int, variant: int,
              one_row: dict | None = None, leading: dict | None = None) -> bool:
    """The rule. With ``one_row`` (a dict), the tile is cut to one row of the default tile's
    columns (same weight packing) and ``one_row["rows"]`` gets the row count (a PrimExpr); it
    declines unless the rows are symbolic. With ``leading`` (a dict), the tile's rows run along
    the first of several symbolic row axes (the batch of ``[batch, seq]``), the others outside
    it, and ``leading["rest"]`` gets their extent (a PrimExpr); it declines unless there are
    several."""
    reductions = [b for b in infos if b.is_reduction()]
    if len(reductions) != 1:
        return False
    main = reductions[0]
    block = sch.get(main.block_rv)
    spatial = [it for it in main.iters if it.kind == "S"]
    reduce = [it for it in main.iters if it.kind == "R"]
    if not spatial or not reduce or any(it.kind == "O" for it in main.iters):
        return False
    if [it.kind for it in main.iters] != ["S"] * len(spatial) + ["R"] * len(reduce):
        return False
    (write,) = block.writes
    out_index = [r.min for r in write.region if not isinstance(r.min, tirx.IntImm)]  # unit dims dropped
    if len(out_index) != len(spatial) or not all(
            isinstance(e, tirx.Var) and e.same_as(it.var) for e, it in zip(out_index, spatial)):
        return False
    j, jvar = spatial[-1], spatial[-1].var
    packs = []  # (read index, position of j in the operand)
    transposed = []  # (read index, position of j): run-time operands with j before k (K in Q @ K^T)
    shared = []  # index lists of operands loaded once per tile column and reused by every row
    runtime_j = False  # a run-time operand is indexed by j
    row_var = spatial[-2].var if len(spatial) > 1 else None
    for idx, read in enumerate(block.reads):
        indices = [r.min for r in read.region]
        if not any(uses(e, jvar) for e in indices):
            continue
        if row_var is None or not any(uses(e, row_var) for e in indices):
            shared.append(indices)
        pos = plain_index(indices, jvar)
        if pos is not None and is_constant(sch, read.source):
            packs.append((idx, pos))
        elif pos != len(indices) - 1:
            last = indices[-1]
            if pos is None or not any(isinstance(last, tirx.Var) and last.same_as(it.var) for it in reduce):
                return False  # j is strided in a runtime operand in a way a panel copy cannot fix
            transposed.append((idx, pos))  # copied per panel, j last, inside the kernel (below)
            runtime_j = True
        elif not read.source.same_as(block.writes[0].source):
            runtime_j = True
    operands = [read for read in block.reads if not read.source.same_as(block.writes[0].source)]
    if transposed and len(operands) == 1:
        return False  # a sum along the last axis (a norm's mean): the reduction rules', not a product
    # Axes a shared operand depends on (batch of a batched matmul) stay outside the tile; the
    # others are fused into one row axis M (n*oh*ow of a conv), the register tile's rows.
    batch = [it for it in spatial[:-1] if any(uses(e, it.var) for ind in shared for e in ind)]
    rows_axes = [it for it in spatial[:-1] if it not in batch]
    shared_batch = len(batch)  # axes a shared operand depends on (a batched matmul's batch)
    row_ids = {id(it) for it in rows_axes}
    if leading is not None:
        symbolic = [it for it in rows_axes if not _static(it)]
        if len(symbolic) < 2:
            return False
        leading["rest"] = math.prod([it.dom for it in symbolic[1:]])
        batch, rows_axes = [it for it in spatial[:-1] if it is not symbolic[0]], [symbolic[0]]
    else:
        batch, rows_axes = _symbolic_rows(spatial, batch, rows_axes)
    if rows_axes and not _static(rows_axes[0]):  # one symbolic row axis (seq): a guarded tail tile
        m, row_extents = SYMBOLIC_EXTENT, [SYMBOLIC_EXTENT]
    else:
        m, row_extents = math.prod(it.dom for it in rows_axes), [it.dom for it in rows_axes]
    n = j.dom if _static(j) else SYMBOLIC_EXTENT
    # A column count the SIMD width does not divide (GPT-2's 50257-word LM head) would get a
    # scalar tile; the operands are padded with zero columns instead -- packed weights at
    # compile time, a run-time operand (the keys of a ViT's Q @ K^T over 197 tokens) by a copy
    # per call, as for a symbolic column count -- and the tile's extra columns are not stored.
    # So is a packed weight whose columns no panel of 2-4 vectors divides (2000 = 125 x 16: a
    # 1-vector panel, a 51x2000x2000 matmul at 167 GFLOP/s; 2-core Zen 5, AVX-512), a few zero
    # vectors at compile time, for matmul-like rows (convs: ragged_conv.pad_tile, before the
    # kernels exist).
    vector_ok = vector_dtypes(block) or float_of_bytes(block)
    wide = _static(j) and lanes and vector_ok and j.dom >= 4 * lanes
    thin_panel = (packs and not runtime_j and len(rows_axes) <= 1 and one_vector_panels(j.dom, lanes)
                  and not any(_windowed(read) for read in block.reads)) if wide else False
    pad_columns = wide and (packs or runtime_j) and (j.dom % lanes != 0 or thin_panel)
    if pad_columns:
        n = SYMBOLIC_EXTENT
    registers = TILE_REGISTERS if lanes >= 16 else 16
    tiles = tile_candidates(m, n, lanes if vector_ok else 0, registers, row_extents)
    # A static row count with no good divisor (3137 tokens of CoaT, 197 of a ViT: prime or
    # nearly) leaves a tile of one or two rows, which reloads every weight vector per row; the
    # rows are padded to whole tiles instead, as for a symbolic count.
    # A short one (17 tokens of a ViT at 64x64, 50 at 224 with a 32-pixel patch) was worst:
    # a 1-row tile re-read each weight panel once per row (6.7x onnxruntime on a 17x768x3072
    # MLP, 2-core Zen 5, AVX-512); the padded tile is scored with its wasted rows counted.
    pad_rows = bool(rows_axes) and not _static(rows_axes[0])
    if (len(rows_axes) == 1 and _static(rows_axes[0]) and vector_ok
            and not any(_windowed(read) for read in block.reads)):
        padded_tiles = sorted(tile_candidates(SYMBOLIC_EXTENT, n, lanes, registers, [SYMBOLIC_EXTENT]),
                              key=lambda t: -_padded_score(t, m))
        if padded_tiles and tiles and worth_padding(tiles[0].rows, _score(tiles[0]),
                                                    _padded_score(padded_tiles[0], m)):
            tiles, pad_rows = padded_tiles, True
    if leading is not None:
        tiles = sorted(tiles, key=lambda t: t.rows != LEADING_TILE_ROWS)  # stable: best 4-row tile first
    if variant >= len(tiles):
        return False
    tile = tiles[variant]
    if one_row is not None:
        if not rows_axes or _static(rows_axes[0]) or tile.rows == 1:
            return False
        one_row["rows"] = math.prod([it.dom for it in spatial if id(it) in row_ids])
        tile = Tile(1, tile.vj, tile.width)

    # Symbolic rows (seq) or columns: the contraction runs on operands padded to whole tiles
    # (a copy of the runtime operand, zero rows/columns appended), so the micro-kernel has no
    # guard and its accumulator tile stays in registers; the epilogue stores only the real rows.
    padding = [tile.rows if pad_rows and it is rows_axes[0] else
               tile.vj if it is j and (not _static(it) or pad_columns) else 1 for it in main.iters]
    padded = []
    unpad = []
    im2col = []
    if any(p > 1 for p in padding):
        im2col = _reindex_windows(sch, main.block_rv, {idx for idx, _ in packs})
        before = {str(sch.get(b).name_hint) for b in sch.get_producers(main.block_rv)}
        sch.pad_einsum(main.block_rv, padding)
        padded = [b for b in sch.get_producers(main.block_rv) if str(sch.get(b).name_hint) not in before]
        unpad = sch.get_consumers(main.block_rv)

    packed = pack_panels(sch, main.block_rv, packs, tile.vj)  # weights, done once at compile time

    # Producers: plain copies/reshapes are inlined. Padding (a conditional) stays a separate
    # pass before a real contraction (its reduction loop must stay branch-free), but is inlined
    # into depthwise convs and pools, where every load is a vector along j anyway and a
    # separate pass would double the memory traffic. An RGB stem's padding (3 channels) was
    # inlined too, once: a bounds check on every broadcast of the micro-kernel, which made
    # ResNet-50's 7x7 stride-2 stem 2.6x slower than with the pass (4.74 against 1.82 ms, the
    # pass included; 2-core Zen 3, LLVM znver3, AVX2).
    per_channel = all(any(uses(r.min, jvar) for r in read.region) for read in block.reads
                      if any(uses(r.min, it.var) for r in read.region for it in reduce))
    for producer in reversed(infos[:infos.index(main)]):
        pblock = sch.get(producer.block_rv)
        if per_channel or im2col or not _has_condition(pblock.body):
            try:
                sch.compute_inline(producer.block_rv)
                continue
            except ScheduleError:
                pass
        schedule_spatial(sch, producer.block_rv, lanes)
    transposed_sources = [sch.get(main.block_rv).reads[idx].source for idx, _ in transposed]
    deferred = []  # padding of a transposed operand: inlined into its panel copy (below)
    for window in im2col:
        sch.compute_inline(window)  # into its padded copy: one pass writes the padded im2col
    for producer in padded:
        if all(is_constant(sch, read.source) for read in sch.get(producer).reads):
            sch.compute_inline(producer)  # a padded weight: into its packing, at compile time
        elif any(sch.get(producer).writes[0].source.same_as(src) for src in transposed_sources):
            deferred.append(producer)
        else:
            schedule_spatial(sch, producer, lanes)

    loops = {it.var: loop for it, loop in zip(main.iters, sch.get_loops(main.block_rv)[-len(main.iters):])}
    r_loops = [loops[it.var] for it in reduce]
    jo, ji = sch.split(loops[jvar], [None, tile.vj])
    tile_loops = [jo]
    ii = None
    panel_major = False
    weight_bytes = None
    if rows_axes:
        if len(rows_axes) > 1 and all(map(_static, rows_axes)) and rows_axes[-1].dom % tile.rows == 0:
            # The tile within the innermost row axis (ow): split that axis alone and fuse the
            # others with its outer part. Splitting the fused n*oh*ow instead puts the tile's
            # row index under a division by ow, and TVM then cannot bound the accumulator's
            # region: it stayed the whole output, in memory, not registers (ResNet-50's
            # 112x112 stem at batch 8: a 12e9-vector "local" buffer, std::bad_alloc).
            wo, ii = sch.split(loops[rows_axes[-1].var], [None, tile.rows])
            io = sch.fuse(*[loops[it.var] for it in rows_axes[:-1]], wo)
        else:
            mloop = sch.fuse(*[loops[it.var] for it in rows_axes]) if len(rows_axes) > 1 else loops[rows_axes[0].var]
            io, ii = sch.split(mloop, [None, tile.rows])
        tile_loops.append(io)
        itemsize = max((DataType(str(block.reads[idx].source.dtype)).bits // 8 for idx, _ in packs), default=4)
        weight_bytes = math.prod(it.dom for it in reduce) * j.dom * itemsize if all(map(_static, reduce + [j])) else None
        small = packs and weight_bytes is not None and weight_bytes <= SMALL_WEIGHT_BYTES
        # Symbolic rows (seq) under enough static column panels: panel major as in a static
        # build (a thread keeps its weight panel in cache while the rows stream), the column
        # panels parallel and the rows a serial loop inside (not fused: see below).
        panel_major = (not _static(rows_axes[0]) and _static(j) and not small
                       and j.dom // tile.vj >= MIN_TASKS)
        if (small or (not _static(rows_axes[0]) and not panel_major)) and not transposed:
            tile_loops.reverse()  # (symbolic rows go first: see the parallel loop below)
    outer = [loops[it.var] for it in batch]
    # Panel major over rows that are all symbolic (batch x seq into a weight matmul): every
    # row loop goes inside the panel loop, so that each weight panel is streamed once for all
    # rows. With the batch outside, each batch row re-streamed every panel (BERT-base at 4x64
    # on a Zen 3, AVX2: its 768x768 projections ran 1.8x slower than the static build).
    rows_inside = panel_major and outer and not shared_batch
    if rows_inside:
        sch.reorder(tile_loops[0], *outer, *tile_loops[1:], *r_loops, *([ii] if ii is not None else []), ji)
    else:
        sch.reorder(*outer, *tile_loops, *r_loops, *([ii] if ii is not None else []), ji)

    # A run-time operand indexed [.., j, .., k] (the keys of Q @ K^T read in place): each
    # column panel of it is copied with j last, [k][vj], at the panel loop, so that the
    # micro-kernel loads contiguous vectors along j as from a packed weight; the copy is
    # K x vj elements per panel, amortized over every row tile of the panel.
    for idx, pos in transposed:
        panel = sch.cache_read(main.block_rv, idx, "global")
        sch.transform_layout(main.block_rv, ("read", idx), _j_last(pos))
        sch.compute_at(panel, tile_loops[0], preserve_unit_loops=True)
        for producer in deferred:
            if sch.get(producer).writes[0].source.same_as(sch.get(panel).reads[0].source):
                sch.compute_inline(producer)
    acc = sch.cache_write(main.block_rv, 0, "local")
    if unpad:
        # The tile is stored whole into the padded result; the copy out of it with the epilogue
        # is a separate pass. (Computed at the tile under a guard on the real rows, the
        # accumulator stays a static tile but the kernel ran 1.7x slower on a 256x768x3072
        # matmul on a Zen 3, AVX2: LLVM no longer keeps the guarded tile in registers.)
        epilogue = acc
        tail = inline_chain(sch, unpad[0], infos, main, unpad[1:])
        schedule_spatial(sch, tail, lanes)
    else:
        epilogue = inline_chain(sch, acc, infos, main)
    sch.reverse_compute_at(epilogue, tile_loops[-1], preserve_unit_loops=True)
    # One task per register tile; the static chunking of a parallel loop hands each thread a
    # contiguous run of tiles: of one column panel (panel major), or of whole rows.
    # A loop fused after a symbolic one would be indexed modulo a symbolic extent, which the
    # simplifier cannot prove positive: the accumulator's index would stay symbolic and the tile
    # would leave the registers (3x slower). So only the loops from the last symbolic one on
    # are fused and parallel; the ones before it (a symbolic batch) stay serial around them.
    # When that leaves too few tasks (attention: rows and columns both symbolic), the outer
    # loops (batch x heads) are the parallel loop instead and the tiles run serially in a task
    # (a parallel region per row of tiles cost 10 ms per kernel on a loaded 2-core machine).
    order = [*outer, *tile_loops]
    if panel_major:
        order = order[:-1]  # the symbolic rows loop stays serial inside its panel
    static = [isinstance(sch.get(loop).extent, tirx.IntImm) for loop in order]
    first = max((k + panel_major for k, fixed in enumerate(static) if not fixed), default=0)
    tasks = math.prod(int(sch.get(loop).extent) for loop, fixed in zip(order[first:], static[first:]) if fixed)
    if rows_inside:
        sch.parallel(tile_loops[0])  # the static panels; every row loop runs inside
    elif tasks < MIN_TASKS and outer and first >= len(outer):
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    else:
        loops = order[first:]
        at = [k for k, loop in enumerate(loops) if loop.same_as(tile_loops[0])]
        if transposed and at:  # the panel copies sit at the panel loop: the rows loop stays inside
            loops = loops[:at[0] + 1]
        sch.parallel(sch.fuse(*loops) if len(loops) > 1 else loops[0])
    if ii is not None:
        sch.unroll(ii)
    if tile.width:
        jv, jl = sch.split(ji, [None, tile.width])
        sch.unroll(jv)
        sch.vectorize(jl)
    else:
        sch.unroll(ji)
    sch.decompose_reduction(main.block_rv, r_loops[0])
    if tile.width:
        vectorize_tail(sch, epilogue, tile.width)
    # A weight streamed from memory by a tile of several rows, or int8 weights by any tile:
    # prefetched (prefetch.py). Not where row loops run around the tile inside its panel (they
    # re-read the panel from cache), unless they are the ones a leading-rows or one-row
    # schedule runs at one iteration.
    int8_weights = len(packs) == 1 and str(packed[0].dtype) == "int8"
    rows_once = not outer or leading is not None or one_row is not None
    if (panel_major and rows_once and (tile.rows > 1 and one_row is None or int8_weights) and len(packs) == 1
            and len(r_loops) == 1 and weight_bytes is not None and weight_bytes >= prefetch.MIN_BYTES):
        prefetch.mark(sch, tile_loops[0], r_loops[0], packed[0], tile.vj)
    return True


def _j_last(pos: int):
    """``[.., j, ..] -> [.., j]``: the axis at ``pos`` moved last (transform_layout reads the
    map's parameters as the buffer's axes, so ``pos`` is bound here)."""

    def index_map(*axes):
        return (*[a for k, a in enumerate(axes) if k != pos], axes[pos])

    return index_map


def _reindex_windows(sch: Schedule, block, constant: set[int]) -> list:
    """The run-time operands a conv reads through windows (``x[oh * s + kh, ...]``) copied to
    buffers indexed by the block's own axes (im2col, ``reindex``), so that ``pad_einsum`` takes
    the block: a conv whose output rows are symbolic (audio over a symbolic sample count,
    images of any size) is padded to whole tiles like a matmul. Returns the copies' blocks."""
    windows = []
    for idx, read in enumerate(sch.get(block).reads):
        if idx in constant or not _windowed(read):
            continue
        windows.append(sch.reindex(block, ("read", idx)))
    return windows


def _windowed(read) -> bool:
    """An access indexed by more than plain iterators (a conv's ``oh * s + kh``): not einsum."""
    return not all(isinstance(r.min, (tirx.Var, tirx.IntImm)) for r in read.region)


def _static(it) -> bool:
    return isinstance(it.dom, int)


def _symbolic_rows(spatial: list, batch: list, rows_axes: list) -> tuple[list, list]:
    """Symbolic row axes (batch, seq) go outside the tile, like a batched matmul's batch axes,
    so that the register tile stays static: it spans the static axes after the last symbolic
    one (a conv's oh x ow). When no static axis follows (a matmul's seq), the tile's rows run
    along the last symbolic axis with a guarded tail."""
    last = max((k for k, it in enumerate(rows_axes) if not _static(it)), default=-1)
    if last < 0:
        return batch, rows_axes
    if last == len(rows_axes) - 1:
        before = rows_axes[last - 1] if last else None
        if before is not None and _static(before) and before.dom >= MIN_STATIC_ROWS:
            # [seq, batch] with the batch symbolic (torch's seq-first MultiheadAttention, as
            # torchvision's ViT exports it): the static seq is the tile's rows, the batch goes
            # outside. Along the batch, one image's 17 tokens ran as 17 tiles of 5 padded rows
            # (5x the multiply-adds: ViT-B/16's QKV projection 2.5x its MLP's time, 2-core
            # Zen 5, AVX-512).
            keep = id(before)
            return [it for it in spatial[:-1] if id(it) != keep], [before]
        last -= 1  # the innermost row axis is symbolic: it stays the tile's (tailed) row axis
    outer = {id(it) for it in batch + rows_axes[:last + 1]}
    return [it for it in spatial if id(it) in outer], rows_axes[last + 1:]


def _has_condition(stmt) -> bool:
    """Whether a block computes something conditional (padding), which inlining would put in
    the micro-kernel's inner loop."""
    return "if_then_else" in stmt.script()


RULE = Rule("contraction", "register-blocked micro-kernel for matmul/conv/pool (packed weights)", apply,
            variants=8, finish=finish)
