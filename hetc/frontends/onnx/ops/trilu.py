"""Trilu (opset 14) with ``k`` given at run time.

TVM's converter needs a constant ``k``; those nodes are left to it. With a run-time ``k`` the
kept triangle is a mask computed by the graph: ``col - row >= k`` (upper) or ``<= k`` (lower)
over the last two axes, the rest set to zero.
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from .. import runtime_values as rv
from ..registry import Attrs, ConvertContext, converter
from ..shapes import static_dims


@converter("Trilu", since=14)
def trilu(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x = inputs[0]
    k = inputs[1] if len(inputs) > 1 else None
    if not rv.is_runtime(k):
        return NotImplemented
    bb = ctx.bb
    upper = bool(attrs.get("upper", 1))
    rows, cols = static_dims(x)[-2:]
    offset = relax.const(np.arange(cols)[None, :] - np.arange(rows)[:, None], "int64")  # col - row
    k = bb.normalize(relax.op.astype(relax.op.reshape(k, []), "int64"))
    keep = relax.op.greater_equal(offset, k) if upper else relax.op.less_equal(offset, k)
    zero = relax.const(np.zeros((), str(x.ty.dtype)), str(x.ty.dtype))
    return relax.op.where(bb.normalize(keep), x, zero)
