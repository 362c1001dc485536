"""The full-reduction rule: a whole tensor reduced to one value (min, max, sum).

DynamicQuantizeLinear takes the min and the max of its whole input to choose a scale: in a
dynamically quantized BERT-base that is 72 reductions of up to 128 x 3072 floats per call.
With no spatial axis to run in parallel, the generic rule left each one serial and scalar
(0.22 ms each, 7.9 ms of a 53 ms BERT-base int8 call on 2 Zen 4 cores). Here the reduction
is factored (``rfactor``) into partial results, one per chunk and SIMD lane:

    parallel for p in chunks:                  # claimed from the pool like any parallel loop
      part[p][0:lanes] = identity
      for k:  part[p][:] = op(part[p][:], x[p, k, 0:lanes])      # one vector op per step
    out = op over part                           # chunks x lanes values, serial

Exact for min and max and integer sums; a float sum is added in a different order than a
serial loop (pairwise-like, no less accurate). Producers (a cast, an absolute value) are
inlined into the partial loop; consumers of the single value stay as they are.
"""

from __future__ import annotations

import math

from tvm import tirx
from tvm.s_tir import Schedule
from tvm.target import Target

from .common import Rule, one_reduction

MIN_ELEMENTS = 1 << 14  # below this, one core's serial loop is as fast as waking the pool
CHUNKS = (16, 8, 4, 2)  # partial results per lane; more than threads, so the pool can balance


def apply(func: tirx.PrimFunc, target: Target, lanes: int) -> Schedule | None:
    del target
    found = one_reduction(func)
    if found is None:
        return None
    sch, infos, main = found
    if not all(isinstance(it.dom, int) for it in main.iters):
        return None
    if any(it.kind == "S" and it.dom != 1 for it in main.iters) or any(it.kind not in "SR" for it in main.iters):
        return None
    reduce = [it for it in main.iters if it.kind == "R"]
    total = math.prod(it.dom for it in reduce)
    if total < MIN_ELEMENTS or total % lanes:
        return None
    chunks = next((c for c in CHUNKS if (total // lanes) % c == 0), None)
    if chunks is None:
        return None
    for producer in reversed(infos[:infos.index(main)]):
        if not all(it.kind == "S" for it in producer.iters):
            return None
        sch.compute_inline(producer.block_rv)
    loops = sch.get_loops(main.block_rv)[-len(main.iters):]
    by_var = dict(zip([it.var for it in main.iters], loops))
    fused = sch.fuse(*[by_var[it.var] for it in reduce])
    p, k, v = sch.split(fused, [chunks, None, lanes])
    sch.reorder(p, v, k)
    pv = sch.fuse(p, v)
    part = sch.rfactor(pv, 0)
    *_, pv, k = sch.get_loops(part)
    p, v = sch.split(pv, [chunks, lanes])
    sch.reorder(p, k, v)
    sch.parallel(p)
    init = sch.decompose_reduction(part, k)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.unroll(v)  # a loop under the reduction loop: TVM will not vectorize it, LLVM SLP does
    return sch


RULE = Rule("full-reduction", "a whole tensor to one value (min/max/sum): parallel vector partials (rfactor)",
            apply)
