"""Slice (opsets 10+) whose starts or ends are symbolic: bounds clamped to the dims first.

TVM's converter emits a ``strided_slice`` with ``assume_inbound=True`` whenever a start or end
is symbolic, so nothing clamps them. ONNX's exporters write such slices with negative or
unbounded values: T5's relative position bias, ``bias[:, :, -seq:, :]``, is ``starts = -seq``,
``ends = INT64_MAX``, which became an extent of ``seq + INT64_MAX`` and failed code generation
(``Literal value 36893488147419103228 exceeds range of int64``). Here each start and end is
resolved as the ONNX spec says (a negative value counts from the end, then clamped to
``[0, dim]``), simplified over the declared dim ranges (``min(INT64_MAX, seq)`` is ``seq``), and
the slice is then in bounds, as TVM assumes. Integer bounds on a symbolic dim are resolved
here too: TVM's clamping leaves ``min(INT64_MAX, d)``, which its simplifier cannot reduce (and
overflows on in sums). MPT's ALiBi table (a constant of 128 positions) sliced ``[128 - seq:]``
took the same path. Negative steps, run-time bounds and integer bounds on static dims are left
to TVM's converter.
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx

from .. import symbolic
from ..registry import Attrs, ConvertContext, converter

_HUGE = 2**62  # bounds past any dim: ONNX's "to the end" is INT64_MAX (and INT64_MIN backwards)


def _values(expr) -> list | None:
    """The elements of a compile-time vector (ints and PrimExprs), None for an absent input,
    NotImplemented for one only the run time knows."""
    if expr is None:
        return None
    if isinstance(expr, tvm.ir.GenericConst):
        return [int(v) for v in expr.value.numpy().reshape(-1)]
    if isinstance(expr, relax.ShapeExpr):
        return [int(v) if isinstance(v, tirx.IntImm) else v for v in expr.values]
    return NotImplemented


def _resolve(value, dim):
    """An ONNX start or end as an index in ``[0, dim]`` (an int, or a simplified PrimExpr)."""
    zero = tirx.const(0, "int64")
    if isinstance(value, int):
        if value >= _HUGE:  # "to the end" (INT64_MAX): the dim itself, not min(INT64_MAX, dim),
            return symbolic.simplify(dim)  # which TVM's simplifier cannot reduce without a range
        if value <= -_HUGE:
            return 0
        v = tirx.const(value, "int64")
        index = v + dim if value < 0 else v
    else:
        index = tirx.Select(value < zero, value + dim, value)
    return symbolic.simplify_within(tirx.max(tirx.min(index, dim), zero), [dim])


@converter("Slice", since=10)
def slice_(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x = inputs[0]
    if isinstance(x, relax.ShapeExpr) or not isinstance(getattr(x, "ty", None), relax.TensorType) or not hasattr(
            x.ty.shape, "values"):
        return NotImplemented  # a shape value: TVM's converter slices its dims
    parts = [_values(inputs[i]) if len(inputs) > i else None for i in range(1, 5)]
    if any(p is NotImplemented for p in parts):
        return NotImplemented  # run-time bounds, axes or steps
    starts, ends, axes, steps = parts
    rank = x.ty.ndim
    axes = list(range(len(starts))) if axes is None else axes
    shape = x.ty.shape.values
    if all(isinstance(v, int) for v in [*starts, *ends]) and all(
            isinstance(a, int) and -rank <= a < rank and isinstance(shape[a % rank], tirx.IntImm) for a in axes):
        return NotImplemented  # integers on static dims: TVM clamps them
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error(f"starts, ends, axes and steps have lengths {len(starts)}, {len(ends)}, "
                        f"{len(axes)} and {len(steps)}")
    if not all(isinstance(a, int) and -rank <= a < rank for a in axes):
        raise ctx.error(f"axes {axes} are not axes of a rank-{rank} input")
    if not all(isinstance(s, int) and s > 0 for s in steps):
        return NotImplemented  # a negative or symbolic step: TVM's converter
    axes = [a % rank for a in axes]
    begin = [_resolve(s, shape[a]) for s, a in zip(starts, axes)]
    end = [_resolve(e, shape[a]) for e, a in zip(ends, axes)]
    end = [symbolic.simplify_within(tirx.max(symbolic.prim(e), symbolic.prim(b)), [shape[a]])
           for b, e, a in zip(begin, end, axes)]  # empty, not negative
    return relax.op.strided_slice(x, axes, begin, end, steps, assume_inbound=True)

