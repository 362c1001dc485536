"""Range (opset 11) with start, limit or delta given at run time.

Constant inputs (and shape arithmetic on symbolic dims, which the importer evaluates) are left
to TVM's converter. At run time the length ``max(ceil((limit - start) / delta), 0)`` is computed
in float64 and becomes a fresh symbolic dim; the output is ``start + arange(length) * delta``.
"""

from __future__ import annotations

from tvm import relax

from .. import runtime_values as rv
from ..registry import Attrs, ConvertContext, converter


@converter("Range", since=11)
def range_converter(ctx: ConvertContext, inputs: list, attrs: Attrs):
    if not any(rv.is_runtime(e) for e in inputs):
        return NotImplemented
    bb = ctx.bb
    dtype = str(inputs[0].ty.dtype)
    start, limit, delta = (bb.normalize(relax.op.reshape(e, [])) for e in inputs)
    wide = [bb.normalize(relax.op.astype(e, "float64")) for e in (start, limit, delta)]
    count = relax.op.ceil(relax.op.divide(relax.op.subtract(wide[1], wide[0]), wide[2]))
    count = relax.op.astype(relax.op.maximum(count, relax.const(0.0, "float64")), "int64")
    length = rv.scalar_var(bb, bb.normalize(count), "range")
    steps = relax.op.multiply(relax.op.arange(0, length, 1, dtype), delta)
    return relax.op.add(bb.normalize(steps), start)
