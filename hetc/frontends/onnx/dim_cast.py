"""Giving a tensor other dims that are equal at run time, without tripping TVM's passes.

The importer unifies the dims of a broadcasting op's inputs (``importer._unify_dims``): a
slice-and-pad leaves ``min(9223372036854775807, seq) - min(1, seq) + 1`` where its neighbour
has ``seq``. A ``match_cast`` of that tensor to ``seq`` looks harmless, but TVM 0.27's
``CanonicalizeBindings`` reads every bare variable of a ``match_cast`` pattern as a
definition (``seq := min(..., seq) - min(1, seq) + 1``) and substitutes it into every later
shape, each substitution feeding the next, until the native stack overflows (MobileBERT and
Funnel, issue 31). So:

- dims equal over the declared dim ranges (``symbolic.simplify``) need no check: a ``reshape``
  to the new dims (a view at run time);
- a pattern variable that the value's own dim contains (``seq`` from ``f(seq)``) is checked at
  run time (``runtime_values.checked``), then reshaped;
- any other difference stays a ``match_cast`` (the VM checks it; its pattern defines nothing
  that refers to itself).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tvm import relax, tirx

from . import runtime_values, symbolic


def _is_static(dim) -> bool:
    return isinstance(dim, (int, np.integer, tirx.IntImm))


def equal_in_range(a, b) -> bool:
    """``a == b`` for every size in the declared dim ranges (provably)."""
    if _is_static(a) and _is_static(b):
        return int(a) == int(b)
    return symbolic.simplify(a - b) == 0


def canonical(dim):
    """``dim`` simplified over the declared ranges (``min(9223372036854775807, seq) - min(1, seq)
    + 1`` is ``seq``), as an int64 PrimExpr."""
    if _is_static(dim):
        return dim
    value = symbolic.simplify(dim)
    return tirx.IntImm("int64", value) if isinstance(value, int) else value


def _self_referential(pattern, dim) -> bool:
    """A bare variable in the pattern that the value's dim is a different expression of."""
    return (isinstance(pattern, tirx.Var) and not _is_static(dim) and not pattern.same_as(dim)
            and any(v.same_as(pattern) for v in tirx.analysis.undefined_vars(dim)))


def cast_dims(bb: relax.BlockBuilder, expr: relax.Expr, dims: Sequence) -> relax.Expr:
    """``expr`` (a tensor with a known shape) with shape ``dims``, equal to its own at run time."""
    have = list(expr.ty.shape.values)
    changed = [(d, f) for d, f in zip(have, dims) if d is not f]
    if all(equal_in_range(d, f) for d, f in changed):
        return bb.normalize(relax.op.reshape(expr, relax.ShapeExpr(list(dims))))
    if not any(_self_referential(f, d) for d, f in changed):
        return bb.match_cast(expr, relax.TensorType(list(dims), expr.ty.dtype))
    ok = relax.op.equal(relax.op.shape_to_tensor(relax.ShapeExpr([d for d, _ in changed])),
                        relax.op.shape_to_tensor(relax.ShapeExpr([f for _, f in changed])))
    shape = ", ".join(str(d) for d in have)
    checked = runtime_values.checked(bb, expr, bb.normalize(ok), f"a tensor of shape ({shape}) meets one of "
                                     f"shape ({', '.join(str(f) for f in dims)}) and the sizes differ")
    return bb.normalize(relax.op.reshape(checked, relax.ShapeExpr(list(dims))))
