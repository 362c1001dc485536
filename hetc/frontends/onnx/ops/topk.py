"""TopK (opset 11) with ``k`` given at run time, or of an integer type TVM's sort lacks.

TVM's converter needs a constant ``k``; those nodes are left to it. A run-time ``k`` sorts the
whole axis with the same ``topk`` kernel (so ties order as with a constant ``k``) and keeps
the first ``k`` along the axis, ``k`` a fresh symbolic dim (``runtime_values.scalar_var``).
The axis may have a run-time length too (values NonZero picked): the kernel then sorts it
whole (``k = -1``).

TVM's sort kernel (``tvm.contrib.sort``) takes no int16, uint16, uint32 or uint64: those sort
an int64 key of the same order (uint64 with its top bit flipped) and gather their values.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .. import runtime_values as rv
from ..registry import Attrs, ConvertContext, converter
from ..shapes import dims

_KEYED = {"int16", "uint16", "uint32", "uint64"}


def _sort_key(bb: relax.BlockBuilder, x: relax.Expr) -> relax.Expr:
    """An int64 tensor ordered as ``x``."""
    key = bb.normalize(relax.op.astype(x, "int64"))  # uint64: wraps, the top bit to the sign
    if str(x.ty.dtype) == "uint64":
        key = bb.normalize(relax.op.bitwise_xor(key, relax.const(np.int64(-(2**63)), "int64")))
    return key


@converter("TopK", since=11)
def topk(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x, k_in = inputs[0], inputs[1]
    runtime_k = rv.is_runtime(k_in)
    keyed = str(x.ty.dtype) in _KEYED
    if not runtime_k and not keyed:
        return NotImplemented
    bb = ctx.bb
    rank = x.ty.ndim
    axis = int(attrs.get("axis", -1))
    axis = axis + rank if axis < 0 else axis
    largest = int(attrs.get("largest", 1))
    attrs.reject("sorted", lambda v: v == 1, 1)
    source = _sort_key(bb, x) if keyed else x
    if runtime_k:
        size = dims(x)[axis]
        count = size if isinstance(size, int) else -1  # -1: the whole axis, of a symbolic length
    elif isinstance(k_in, tvm.ir.GenericConst):
        count = int(k_in.value.numpy().reshape(-1)[0])
    else:
        raise ctx.error(f"k must be a constant or a run-time tensor for input type {x.ty.dtype}")
    both = bb.normalize(relax.op.topk(source, count, axis, ret_type="both", largest=bool(largest), dtype="int64"))
    values, indices = (bb.normalize(relax.TupleGetItem(both, i)) for i in range(2))
    if keyed:
        values = bb.normalize(relax.op.gather_elements(x, indices, axis))
    if not runtime_k:
        return relax.Tuple([values, indices])
    k = rv.scalar_var(bb, k_in, "k")
    return relax.Tuple([bb.normalize(relax.op.strided_slice(p, [axis], [0], [k], assume_inbound=True))
                        for p in (values, indices)])
