"""The dot-product rule: contractions whose reduction axis is contiguous in both operands.

``C[.., i, j] = sum_k A[.., i, k] * B[.., j, k]``: attention's ``Q @ K^T`` read in place
(``FuseTransposeMatmul``), where ``K`` is a run-time tensor (the KV cache) that cannot be
packed at compile time. ``j`` is strided in ``B``, so the register-blocked rule
(``gemm.py``), which vectorizes along ``j``, does not apply; a row reduction would run each
dot product scalar. Here each dot product is vectorized along ``k`` instead:

    parallel for (outer spatial axes, j_o):      # chunks of J_CHUNK outputs
      for j_i:
        acc[lanes] = 0                           # one vector register
        for k_o (unrolled):
          acc[:] += A[.., i, k_o, :] * B[.., j, k_o, :]
        C[.., i, j] = epilogue(sum(acc))         # horizontal sum, then bias/scale

(``rfactor`` of the lane axis: the ``lanes`` partial sums are the factored block.)
"""

from __future__ import annotations

from tvm import tirx
from tvm.s_tir import Schedule
from tvm.s_tir.dlight.analysis import SBlockInfo
from tvm.target import Target

from .common import Rule, scheduled, uses, vector_dtypes

# Outputs per parallel task along j: enough to amortize the task's index arithmetic (divisions
# by symbolic extents) and few enough that a short row still splits across threads.
J_CHUNK = 16
# Vector steps along k unrolled (a head dim of 64..128 at 8 or 16 lanes); longer rows loop.
MAX_UNROLL = 16


def apply(func: tirx.PrimFunc, target: Target, lanes: int) -> Schedule | None:
    return scheduled(func, _schedule, lanes, 0)


def _schedule(sch: Schedule, infos: list[SBlockInfo], lanes: int, variant: int) -> bool:
    del variant
    if not lanes:
        return False
    reductions = [b for b in infos if b.is_reduction()]
    if len(reductions) != 1 or infos[0] is not reductions[0]:
        return False  # producers (a padding pass) would need scheduling of their own
    main = reductions[0]
    block = sch.get(main.block_rv)
    kinds = [it.kind for it in main.iters]
    spatial = [it for it in main.iters if it.kind == "S"]
    if not spatial or kinds != ["S"] * len(spatial) + ["R"] or not vector_dtypes(block):
        return False
    k = main.iters[-1]
    if not isinstance(k.dom, int) or k.dom % lanes or k.dom < 2 * lanes:
        return False
    (write,) = block.writes
    operands = [r for r in block.reads if not r.source.same_as(write.source)]
    if len(operands) != 2:
        return False
    for read in operands:  # k is each operand's last, contiguous index
        last = read.region[-1].min
        if not (isinstance(last, tirx.Var) and last.same_as(k.var)):
            return False
        if any(uses(r.min, k.var) for r in read.region[:-1]):
            return False
    j = spatial[-1]
    users = [any(uses(r.min, j.var) for r in read.region) for read in operands]
    if sum(users) != 1:
        return False  # j must index one operand only (B's rows): a contraction, not a row sum

    *outer, jloop, kloop = sch.get_loops(main.block_rv)[-len(main.iters):]
    jo, ji = sch.split(jloop, [None, J_CHUNK])
    ko, ki = sch.split(kloop, [None, lanes])
    fused = sch.fuse(*outer, jo) if outer else jo
    rf = sch.rfactor(ki, factor_axis=len(spatial))  # rf[.., j, lane] = sum over k_o
    fused, ji, ko, ki = sch.get_loops(rf)[-4:]
    # The lane sums, then the epilogue, per output: the partial sums stay one vector register.
    for later in [main.block_rv] + [b.block_rv for b in infos[1:]]:
        sch.reverse_compute_at(later, ji, preserve_unit_loops=True)
    sch.set_scope(rf, 0, "local")
    if len(infos) > 1:  # the sum is an intermediate (else it is the function's output)
        sch.set_scope(main.block_rv, 0, "local")
    sch.parallel(fused)
    if k.dom // lanes <= MAX_UNROLL:
        sch.unroll(ko)
    sch.vectorize(ki)
    init = sch.decompose_reduction(rf, ko)
    sch.vectorize(sch.get_loops(init)[-1])
    return True


RULE = Rule("dot-product", "A @ B^T with k contiguous in both (attention scores): vectorized along k", apply)
