"""The Winograd transforms' rule: the kernels ``hetc/backends/cpu/winograd.py`` writes around
a conv's batched GEMM (the GEMM itself is the contraction rule's).

Both transforms are explicit sums selected by a tile position (``Select(pos == k, ...)``):

    input:  V[e, p, c]     parallel over tiles p; per tile, the alpha^2 positions e unrolled,
                           each a vector along channels c (the selects fold to one sum each;
                           LLVM loads each input vector of the tile once for all of them)
    output: y[n, y, x, k]  parallel over output tiles; the m x m positions unrolled, a vector
                           along k, the fused epilogue (bias, residual, relu) on each vector

The vector loop encloses the unrolled position loops: TVM vectorizes before it unrolls, and a
select on a position inside a vector loop became a vector select of every branch, each one
computed (LLVM folded them away, after seconds of compile time per kernel). With the position
loops inside, their selects stay scalar and the simplifier drops them when it unrolls.

The zero padding of the input is a separate parallel pass (inlined, every load of the
unrolled sums would carry a bounds check).
"""

from __future__ import annotations

from tvm import tirx
from tvm.s_tir import Schedule
from tvm.target import Target

from ..winograd import INPUT_BLOCK, OUTPUT_BLOCK, TILES
from .common import Rule, schedule_spatial

# Parallel tasks to aim for before the channel loop joins the parallel loop.
MIN_TASKS = 16


def apply(func: tirx.PrimFunc, target: Target, lanes: int) -> Schedule | None:
    del target
    if not any(_positions(p) for p in func.params):
        return None  # no [alpha^2, tiles, channels] buffer: not a transform (cheaper than printing it)
    # Not dlight's normalization: it drops unit loops (one tile, a batch of 1), and the
    # transforms' loops are known by position as te.compute wrote them.
    sch = Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    kinds = [_kind(str(sch.get(b).name_hint)) for b in blocks]
    if "input" in kinds:
        at = kinds.index("input")
        for block in blocks[:at]:  # the zero padding
            schedule_spatial(sch, block, lanes)
        e, p, c = sch.get_loops(blocks[at])
        outer, inner = _channels(sch, c, lanes)
        sch.reorder(p, *outer, *inner, e)  # the vector loop outside the unrolled one: see above
        sch.parallel(p)
        sch.unroll(e)
        return sch
    if "output" not in kinds:
        return None
    at = kinds.index("output")
    m = int(str(sch.get(blocks[at]).name_hint).rsplit("_f", 1)[1])
    for block in blocks[at:-1]:  # the transform and its elementwise epilogue as one block
        sch.compute_inline(block)
    n, y, x, k = sch.get_loops(blocks[-1])
    yo, yi = sch.split(y, [None, m])
    xo, xi = sch.split(x, [None, m])
    outer, inner = _channels(sch, k, lanes)
    sch.reorder(n, yo, xo, *outer, *inner, yi, xi)
    tiles = sch.fuse(n, yo, xo)
    extent = sch.get(tiles).extent
    if outer and isinstance(extent, tirx.IntImm) and int(extent) < MIN_TASKS:
        tiles = sch.fuse(tiles, outer[0])
    sch.parallel(tiles)
    sch.unroll(yi)
    sch.unroll(xi)
    return sch


def _channels(sch: Schedule, loop, lanes: int) -> tuple[list, list]:
    """The channel loop as (outer, inner): inner a SIMD vector when the channels fill whole ones."""
    extent = sch.get(loop).extent
    if isinstance(extent, tirx.IntImm) and lanes and int(extent) % lanes == 0:
        co, ci = sch.split(loop, [None, lanes])
        sch.vectorize(ci)
        return [co], [ci]
    return [], [loop]


def _positions(buffer) -> bool:
    """Whether ``buffer`` could be V or M: [alpha^2 tile positions, tiles, channels]."""
    shape = getattr(buffer, "shape", ())  # a scalar parameter has none
    return len(shape) == 3 and isinstance(shape[0], tirx.IntImm) and int(shape[0]) in {(m + 2) ** 2 for m in TILES}


def _kind(name: str) -> str | None:
    """"input" or "output" for a transform's block (named ``<prefix>_f<m>``), else None."""
    for kind, prefix in (("input", INPUT_BLOCK), ("output", OUTPUT_BLOCK)):
        if name.startswith(prefix + "_f") and name[len(prefix) + 2:].isdigit():
            return kind
    return None


RULE = Rule("winograd", "Winograd transforms: tile positions unrolled, channels vectorized", apply)
