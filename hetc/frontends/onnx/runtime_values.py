"""Values only the run time knows that decide shapes: ONNX inputs that *are* shapes, counts or axes.

A node test, or a model, may feed Reshape's ``shape``, TopK's ``k``, OneHot's ``depth`` or a
Reduce's ``axes`` as a graph input. The output shape then depends on the data. Converters read
such a value at run time (``tensor_to_shape``, as TVM's own ONNX frontend does) and bind it to
fresh symbolic variables with ``match_cast``: the VM checks and binds them when it runs, and
every later shape is an expression of them, as with symbolic input dims.

- ``is_runtime(expr)``: the value is not known at compile time (not a constant or ShapeExpr).
- ``shape_vars(bb, tensor, prefix)``: an int vector of static length -> one fresh var per element.
- ``scalar_var(bb, tensor, prefix)``: a one-element int tensor -> one fresh var.
- ``fit(bb, expr, prefix)``: a tensor whose shape is unknown -> the same tensor with fresh dims.
- ``per_axis(bb, axis, rank, build)``: an op along an axis named at run time (same output shape
  for every axis).
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx


def is_runtime(expr: relax.Expr | None) -> bool:
    """True when ``expr`` is a tensor whose value only the run time knows."""
    return expr is not None and not isinstance(expr, (tvm.ir.GenericConst, relax.ShapeExpr)) and isinstance(
        getattr(expr, "ty", None), relax.TensorType)


def fresh(prefix: str, count: int) -> list[tirx.Var]:
    return [tirx.Var(f"{prefix}{i}" if count > 1 else prefix, "int64") for i in range(count)]


def shape_vars(bb: relax.BlockBuilder, tensor: relax.Expr, prefix: str) -> list[tirx.Var]:
    """The elements of the 1-D integer ``tensor`` (static length) as fresh symbolic vars."""
    tensor = bb.normalize(tensor)
    length = tensor.ty.shape.values[0] if tensor.ty.ndim == 1 else 1
    if not isinstance(length, tirx.IntImm):
        raise ValueError(f"the length of the {prefix} vector must be known at compile time")
    if tensor.ty.ndim != 1:
        tensor = bb.normalize(relax.op.reshape(tensor, [int(length)]))
    if str(tensor.ty.dtype) != "int64":
        tensor = bb.normalize(relax.op.astype(tensor, "int64"))
    # The VM builtin ``tensor_to_shape`` legalizes to, called directly: a ``relax.tensor_to_shape``
    # would be legalized by FoldConstant into a second match_cast whose vars replace these.
    shape = bb.emit(relax.op.call_pure_packed("vm.builtin.tensor_to_shape", tensor,
                                              ty_args=relax.ShapeType(ndim=int(length))))
    values = fresh(prefix, int(length))
    bb.match_cast(shape, relax.ShapeType(values))
    return values


def scalar_var(bb: relax.BlockBuilder, tensor: relax.Expr, prefix: str) -> tirx.Var:
    """The value of a one-element integer tensor as a fresh symbolic var."""
    one = bb.normalize(relax.op.reshape(tensor, [1]))
    return shape_vars(bb, one, prefix)[0]


def fit(bb: relax.BlockBuilder, expr: relax.Expr, prefix: str) -> relax.Expr:
    """``expr`` (a tensor of known rank) cast to fresh symbolic dims, so that later ops see a shape."""
    expr = bb.normalize(expr)
    ty = expr.ty
    if ty.shape is not None and hasattr(ty.shape, "values"):
        return expr
    return bb.match_cast(_bound(bb, expr), relax.TensorType(fresh(prefix, ty.ndim), ty.dtype))


def per_axis(bb: relax.BlockBuilder, axis: relax.Expr, rank: int, build, candidates=None) -> relax.Expr:
    """``build(a)`` for the axis ``a`` a run-time scalar names (negative wraps), when every axis
    gives the same output shape (CumSum, CumProd, DFT): each of the ``candidates`` axes (default:
    all) is computed and ``where`` picks one."""
    import numpy as np

    candidates = list(range(rank)) if candidates is None else list(candidates)

    axis = bb.normalize(relax.op.reshape(axis, []))
    if str(axis.ty.dtype) != "int64":
        axis = bb.normalize(relax.op.astype(axis, "int64"))
    axis = bb.normalize(relax.op.where(relax.op.less(axis, relax.const(0, "int64")),
                                       relax.op.add(axis, relax.const(rank, "int64")), axis))
    out = bb.normalize(build(candidates[-1]))
    for a in reversed(candidates[:-1]):
        pick = relax.op.equal(axis, relax.const(np.int64(a), "int64"))
        out = bb.normalize(relax.op.where(pick, bb.normalize(build(a)), out))
    return out


def _bound(bb: relax.BlockBuilder, expr: relax.Expr) -> relax.Expr:
    """``expr`` bound to a variable (the VM's codegen needs a variable as match_cast's value)."""
    return expr if isinstance(expr, relax.Var) else bb.emit(expr)
