"""The sliding-window rule: depthwise conv2d and pooling in NHWC.

These are reductions over a window (``kh``, ``kw``) where every operand is indexed by the
channel ``c``: no operand is shared across output pixels, so the contraction rule's register
tile (pixels x channels, one broadcast per row) buys nothing, and every multiply-add costs a
load. What can be shared is the input itself: output pixels ``x`` and ``x + 1`` read the
same input columns shifted by one tap. The schedule makes that reuse visible to LLVM:

    parallel for (c_o, y_o):                      # a band of output rows, one 16-channel panel
      for y_i, x_o:
        acc[T][16] = 0                            # T output pixels of one row, in registers
        for kh:
          for kw (unrolled):
            for t in T (unrolled):                # loads of input column x*s + t*s + kw:
              acc[t] += in[.., x*s+t*s+kw, c] * w[kh, kw, c]   # one load serves up to kw taps
        epilogue on the tile, stored once

Unrolled, the loads of one ``kh`` row are ``T*s + kw_extent - s`` distinct vectors for
``T * kw_extent`` multiply-adds, and LLVM keeps each in a register. Padding stays inlined as a
conditional load (or, for the ``band`` variants, is computed into a small per-task buffer);
the weight is packed to ``[c_o, kh, kw, c_i]`` at compile time like the contraction rule's.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx
from tvm.s_tir import Schedule
from tvm.s_tir.dlight.analysis import SBlockInfo
from tvm.target import Target

from .common import Rule, inline_chain, is_constant, pack_panels, plain_index, scheduled, uses, vectorize_tail

MAX_PIXELS = 8  # output pixels per tile (accumulator vectors: pixels x panel vectors)


@dataclass(frozen=True)
class Window:
    vectors: int  # SIMD vectors per channel panel
    pixels: int  # output pixels per register tile (divides the output width)
    band: int  # output rows per task
    padded_buffer: bool  # padding computed into a per-task buffer instead of conditional loads


def window_candidates(channels: int, width: int, height: int, lanes: int) -> list[Window]:
    """Tiles to try, default first. Panels: two vectors where the channels divide so (each
    task then reads whole 128-byte runs of a pixel, which the prefetchers follow; one-vector
    panels of a wide pixel were up to 1.5x slower on memory-bound layers), else one. Pixels: divisors of the output width near ``MAX_PIXELS``. Then row
    bands with a padded buffer."""
    if lanes < 4 or channels % lanes:
        return []
    pixels = sorted((p for p in range(2, MAX_PIXELS + 1) if width % p == 0), reverse=True)[:2] or [1]
    panels = [v for v in (1, 2, 3, 4) if channels % (v * lanes) == 0]
    preferred = 2 if channels % (2 * lanes) == 0 else 1
    panels.sort(key=lambda v: v != preferred)
    found = [Window(v, p, 1, False) for v in panels[:2] for p in pixels]
    found += [Window(preferred, pixels[0], b, True) for b in (2, 4) if height % b == 0]
    return found


def apply(func: tirx.PrimFunc, target: Target, lanes: int, variant: int = 0) -> Schedule | None:
    return scheduled(func, _schedule, lanes, variant)


def _schedule(sch: Schedule, infos: list[SBlockInfo], lanes: int, variant: int) -> bool:
    reductions = [b for b in infos if b.is_reduction()]
    if len(reductions) != 1 or any(it.kind == "O" for b in infos for it in b.iters):
        return False
    main = reductions[0]
    kinds = [it.kind for it in main.iters]
    if len(kinds) < 5 or kinds[-2:] != ["R", "R"] or "R" in kinds[:-2]:
        return False
    if not all(isinstance(it.dom, int) for it in main.iters[-5:]):
        return False  # symbolic leading axes (batch) are fine: they only join the parallel loop
    *_, y, x, c, ry, rx = main.iters
    block = sch.get(main.block_rv)
    # Every operand read under the window is indexed by the channel (depthwise, pooling): as
    # the innermost index, or anywhere in a constant (packed to [c_o, .., c_i] below); the
    # output is [.., y, x, c].
    packs = []
    for idx, read in enumerate(block.reads):
        indices = [r.min for r in read.region]
        if not any(uses(e, ry.var) or uses(e, rx.var) for e in indices):
            continue
        pos = plain_index(indices, c.var)
        if pos is None or any(uses(e, c.var) for k, e in enumerate(indices) if k != pos):
            return False
        if pos != len(indices) - 1:
            if not is_constant(sch, read.source):
                return False
            packs.append((idx, pos))
    (write,) = block.writes
    out_index = [r.min for r in write.region if not isinstance(r.min, tirx.IntImm)]
    if len(out_index) != len(main.iters) - 2 or not all(
            isinstance(e, tirx.Var) and e.same_as(it.var) for e, it in zip(out_index, main.iters)):
        return False
    windows = window_candidates(c.dom, x.dom, y.dom, lanes)
    if variant >= len(windows):
        return False
    win = windows[variant]
    vj = win.vectors * lanes

    pack_panels(sch, main.block_rv, packs, vj)  # weights [.., c, ..] -> [c // vj, .., c % vj]

    producers = list(reversed(infos[:infos.index(main)]))
    loops = sch.get_loops(main.block_rv)[-len(main.iters):]
    *louter, ly, lx, lc, lry, lrx = loops
    co, ci = sch.split(lc, [None, vj])
    yo, yi = sch.split(ly, [None, win.band])
    xo, xi = sch.split(lx, [None, win.pixels])
    sch.reorder(*louter, co, yo, yi, xo, lry, lrx, xi, ci)
    acc = sch.cache_write(main.block_rv, 0, "local")
    epilogue = inline_chain(sch, acc, infos, main)
    sch.reverse_compute_at(epilogue, xo, preserve_unit_loops=True)
    task = sch.fuse(*louter, co, yo)
    sch.parallel(task)
    for producer in producers:
        if win.padded_buffer and producer is producers[-1]:
            sch.compute_at(producer.block_rv, task, preserve_unit_loops=True)
            vectorize_tail(sch, producer.block_rv, lanes)
        else:
            sch.compute_inline(producer.block_rv)
    sch.unroll(lrx)
    sch.unroll(xi)
    if win.vectors > 1:
        cv, cl = sch.split(ci, [None, lanes])
        sch.unroll(cv)
        sch.vectorize(cl)
    else:
        sch.vectorize(ci)
    sch.decompose_reduction(main.block_rv, lry)
    vectorize_tail(sch, epilogue, lanes)
    return True


RULE = Rule("sliding-window", "depthwise conv and pooling: channel panels, unrolled window with input reuse",
            apply, variants=8)
