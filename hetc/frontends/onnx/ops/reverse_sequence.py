"""ReverseSequence (opsets 10 and 28; 28 only adds types), which TVM's table lacks.

Along ``time_axis`` the first ``sequence_lens[b]`` elements of each batch slice ``b`` (along
``batch_axis``) are reversed and the rest copied: a ``gather_elements`` along the time axis at
``t' = lens[b] - 1 - t`` where ``t < lens[b]``, else ``t``.
"""

from __future__ import annotations

from tvm import relax

from ..registry import Attrs, ConvertContext, converter


def _along(bb, v: relax.Expr, axis: int, rank: int) -> relax.Expr:
    """1-D ``v`` shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    return bb.normalize(relax.op.reshape(bb.normalize(v), [-1 if i == axis else 1 for i in range(rank)]))


@converter("ReverseSequence", since=10)
def reverse_sequence(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x, lens = inputs[0], inputs[1]
    rank = x.ty.ndim
    batch_axis, time_axis = int(attrs.get("batch_axis", 1)), int(attrs.get("time_axis", 0))
    if rank < 2 or sorted((batch_axis, time_axis)) != [0, 1]:
        raise ctx.error(f"batch_axis={batch_axis} and time_axis={time_axis} must be 0 and 1 (input rank {rank})")
    if lens.ty.ndim != 1:
        raise ctx.error("input sequence_lens must be 1-D")
    bb = ctx.bb
    steps = x.ty.shape.values[time_axis]
    t = _along(bb, relax.op.arange(0, steps, 1, dtype="int64"), time_axis, rank)
    n = _along(bb, relax.op.astype(lens, "int64"), batch_axis, rank)
    index = relax.op.where(relax.op.less(t, n), relax.op.subtract(relax.op.subtract(n, relax.const(1, "int64")), t), t)
    index = bb.normalize(relax.op.broadcast_to(bb.normalize(index), x.ty.shape))
    return relax.op.gather_elements(x, index, axis=time_axis)
