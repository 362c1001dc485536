"""Row reductions with their elementwise neighbours (softmax, layer norm, mean): TVM's dlight CPU rule.

dlight's ``cpu.Reduction`` parallelizes the leading spatial axes, computes every block of the
row under that loop and vectorizes the injective blocks. A row of symbolic length (softmax over
``seq``) keeps its loops whole: dlight would split them by the vector width with a guard on
the tail, which TVM scalarizes (every element then runs under two conditions: 8x slower than
the static build on a 12x128x128 softmax); a plain loop of run-time length LLVM vectorizes.
So does a static row no vector width divides (a softmax over PiT's 962 tokens: split by 16
with a guarded tail, it ran scalar, 4.3 ms a call for 2 x 962 x 962 on a Zen 5, AVX-512).
"""

from __future__ import annotations

from tvm import tirx
from tvm.s_tir import Schedule
from tvm.s_tir.dlight.cpu import Reduction
from tvm.target import Target

from .common import Rule, normalized


def _ragged_inner(sch, block_rv, vec_lanes: int) -> bool:
    """The innermost loop is symbolic, or longer than a vector and not a multiple of one."""
    loops = sch.get_loops(block_rv)
    if not loops:
        return False
    extent = sch.get(loops[-1]).extent
    return not isinstance(extent, tirx.IntImm) or (int(extent) > vec_lanes and int(extent) % vec_lanes != 0)


def _lane_partial_loops(sch, block_rv):
    """(lane loop, step loop) of a block of partial results per lane, ``part[.., l] (+)=
    f(x[.., o * L + l])`` (the CPU's softmax: ``pipeline._fast_softmax``), whose iters end with
    the lane (spatial) and the steps (reduction), run by its two innermost loops; else None."""
    block = sch.get(block_rv)
    loops = sch.get_loops(block_rv)
    if len(block.iter_vars) < 2 or len(loops) < 2:
        return None
    lane, step = block.iter_vars[-2:]
    if lane.iter_type != tirx.IterVar.DataPar or step.iter_type != tirx.IterVar.CommReduce:
        return None
    if not any(_lane_strided(read.region[-1].min, step.var, lane.var) for read in block.reads):
        return None
    extents = [sch.get(loop).extent for loop in loops[-2:]]
    if not all(isinstance(e, tirx.IntImm) and isinstance(it.dom.extent, tirx.IntImm) and int(e) == int(it.dom.extent)
               for e, it in zip(extents, (lane, step))):
        return None
    return loops[-2], loops[-1]


def _lane_strided(index, step, lane) -> bool:
    """``index`` is ``step * c + lane`` for a constant ``c``."""
    if not isinstance(index, tirx.Add):
        return False
    scaled, plain = index.a, index.b
    return (isinstance(plain, tirx.Var) and plain.same_as(lane) and isinstance(scaled, tirx.Mul)
            and isinstance(scaled.a, tirx.Var) and scaled.a.same_as(step) and isinstance(scaled.b, tirx.IntImm))


class _RowReduction(Reduction):
    """dlight's rule, leaving loops of symbolic or ragged extent unsplit (see the module
    docstring), and with blocks of partial results per lane (``_lane_partial_loops``) looping over
    the steps outside and the lanes inside, vectorized: the max and sum of a softmax row then
    run in vector registers, not as one scalar chain."""

    @staticmethod
    def _vectorize_inner(sch, block_rv, vec_lanes):
        if not _ragged_inner(sch, block_rv, vec_lanes):
            Reduction._vectorize_inner(sch, block_rv, vec_lanes)

    @staticmethod
    def _unroll_reduction_inner(sch, block_rv, vec_lanes):
        partial = _lane_partial_loops(sch, block_rv)
        if partial is not None:
            lane, step = partial
            sch.reorder(step, lane)
            sch.vectorize(lane)
            sch.decompose_reduction(block_rv, step)  # the init's lane loop stays vectorized
            return
        if not _ragged_inner(sch, block_rv, vec_lanes):
            Reduction._unroll_reduction_inner(sch, block_rv, vec_lanes)


def _reduces_rows(func: tirx.PrimFunc) -> bool:
    """Every reduction reads its operands along contiguous rows: the last index of each operand
    that the reduction walks is one of its reduction iters (softmax, layer norm, mean)."""
    sch, infos = normalized(func)
    if infos is None:
        return False
    for info in infos:
        if not info.is_reduction():
            continue
        reduce = [it.var for it in info.iters if it.kind == "R"]
        for read in sch.get(info.block_rv).reads:
            used = [v for r in read.region for v in tirx.analysis.undefined_vars(r.min)]
            if not any(u.same_as(v) for u in used for v in reduce):
                continue  # a per-row value (the mean in a variance)
            last = read.region[-1].min
            iters = [it.var for it in info.iters]
            if len(iters) >= 2 and _lane_strided(last, iters[-1], iters[-2]):
                continue  # a softmax's partial results per lane (``_lane_partial_loops``)
            if not isinstance(last, tirx.Var) or not any(last.same_as(v) for v in reduce):
                return False
    return True


def _shares_rows(func: tirx.PrimFunc) -> bool:
    """Every block starts with the same spatial (row) axes, the ones dlight parallelizes.

    A single row (GPT-2's layer norm when decoding one token) loses its unit axes: the
    reductions keep an axis of extent 1 and the output block starts with the 768 columns,
    which dlight would then take for rows, recomputing the whole row's mean and variance
    for every column (80x slower than the generic rule)."""
    _, infos = normalized(func)
    if not infos:
        return False
    leading = []
    for info in infos:
        dims = []
        for it in info.iters:
            if it.kind != "S":
                break
            dims.append(str(it.dom))
        leading.append(dims)
    count = min(len(d) for d in leading)
    return count > 0 and all(d[:count] == leading[0][:count] for d in leading)


def apply(func: tirx.PrimFunc, target: Target, lanes: int) -> Schedule | None:
    del lanes
    if not _reduces_rows(func) or not _shares_rows(func):
        return None
    result = _RowReduction().apply(func, target, False)
    if isinstance(result, list):
        result = result[0] if result else None
    return result


RULE = Rule("row-reduction", "softmax/layer-norm style rows: parallel rows, vectorized elementwise (dlight)",
            apply)
