"""Shape helpers for converters: a Relax tensor's dims, static or symbolic.

A dim is an ``int`` when known at compile time and a TIR ``PrimExpr`` (a symbolic variable
such as ``batch``, or an expression of them) otherwise. Converters that can work with
symbolic dims read ``dims``; those that need the numbers read ``static_dims``, which raises
a ValueError naming the symbolic dims (the importer turns it into a one-line error that
names the node).
"""

from __future__ import annotations

from tvm import relax, tirx


def dims(expr: relax.Expr) -> list:
    """The dims of ``expr``'s shape: ints where static, PrimExprs where symbolic."""
    shape = expr.ty.shape
    if shape is None or not hasattr(shape, "values"):
        raise ValueError(f"the shape of a rank-{expr.ty.ndim} input is not known at compile time "
                         "(bind the symbolic dims with --input-shape)")
    return [int(d) if isinstance(d, tirx.IntImm) else d for d in shape.values]


def is_static(values) -> bool:
    return all(isinstance(d, int) for d in values)


def static_dims(expr: relax.Expr) -> list[int]:
    """The dims of ``expr``'s shape, all known at compile time, else a ValueError."""
    values = dims(expr)
    if not is_static(values):
        raise ValueError(f"needs a static input shape, got [{', '.join(str(d) for d in values)}] "
                         "(bind the dims with --input-shape)")
    return values
