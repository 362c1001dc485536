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
- ``per_axis(bb, axis, rank, build, candidates, label)``: an op along an axis named at run time.
- ``same_dim(a, b)``: two dims (ints or PrimExprs) are the same dim.
- ``checked(bb, value, ok, message)``: ``value``, once the run has found ``ok`` true; else the
  run stops with ``message`` (a run-time value out of range, as ``InputError`` in the runtime).
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, tirx

from ...errors import RUNTIME_CHECK
from .shapes import dims


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


def per_axis(bb: relax.BlockBuilder, axis: relax.Expr, rank: int, build, candidates=None,
             label: str = "") -> relax.Expr:
    """``build(a)`` for the axis ``a`` a run-time scalar names (negative wraps): each of the
    ``candidates`` axes (default: all) is computed and ``where`` picks one (CumSum, CumProd, DFT).
    Outputs whose shapes differ (a one-sided DFT) are zero-padded to a common static shape,
    picked, and cut to the picked one's shape, whose differing dims are fresh symbolic dims. An
    axis outside the candidates stops the run with an error that starts with ``label``."""
    candidates = list(range(rank)) if candidates is None else list(candidates)
    axis = bb.normalize(relax.op.reshape(axis, []))
    if str(axis.ty.dtype) != "int64":
        axis = bb.normalize(relax.op.astype(axis, "int64"))
    axis = bb.normalize(relax.op.where(relax.op.less(axis, _i64(0)), relax.op.add(axis, _i64(rank)), axis))
    named = [bb.normalize(relax.op.equal(axis, _i64(a))) for a in candidates]
    ok = named[0]
    for pick in named[1:]:
        ok = bb.normalize(relax.op.logical_or(ok, pick))
    allowed = ", ".join(str(a) for a in candidates)
    axis = checked(bb, axis, ok, f"{label}: the run-time axis must be one of {allowed} "
                                 f"(negative: counted from the end of rank {rank})")
    named = [bb.normalize(relax.op.equal(axis, _i64(a))) for a in candidates]  # of the checked axis
    outs = [bb.normalize(build(a)) for a in candidates]
    shapes = [dims(o) for o in outs]
    differ = [d for d in range(len(shapes[0])) if any(not same_dim(s[d], shapes[0][d]) for s in shapes)]
    if differ:
        if not all(isinstance(s[d], int) for s in shapes for d in differ):
            raise ValueError(f"the dims a run-time axis changes must be static, got {shapes}")
        full = [max(s[d] for s in shapes) if d in differ else shapes[0][d] for d in range(len(shapes[0]))]
        outs = [_pad_end(bb, o, full) for o in outs]
    out, sizes = outs[-1], _i64([shapes[-1][d] for d in differ])
    for pick, o, shape in reversed(list(zip(named[:-1], outs[:-1], shapes[:-1]))):
        out = bb.normalize(relax.op.where(pick, o, out))
        if differ:
            sizes = bb.normalize(relax.op.where(pick, _i64([shape[d] for d in differ]), sizes))
    if not differ:
        return out
    values = shape_vars(bb, sizes, "axis_dim")
    return relax.op.strided_slice(out, differ, [0] * len(differ), values, assume_inbound=True)


def checked(bb: relax.BlockBuilder, value: relax.Expr, ok: relax.Expr, message: str) -> relax.Expr:
    """``value`` as the run passes it on once the boolean tensor ``ok`` is all true; otherwise
    the run stops with ``message``. Checks a run-time value before it is used (bound to a dim,
    divided by): the VM's ``match_shape`` asserts the flag with ``message`` as its context, and
    the check travels in a tuple with ``value`` so that no pass drops it as unused."""
    flag = bb.normalize(relax.op.astype(ok, "int64"))
    if flag.ty.ndim:
        flag = bb.normalize(relax.op.min(flag))
    flag = bb.normalize(relax.op.reshape(flag, [1]))
    shape = bb.emit(relax.op.call_pure_packed("vm.builtin.tensor_to_shape", flag,
                                              ty_args=relax.ShapeType(ndim=1)))
    one = tirx.IntImm("int64", 1)
    assert_equal_to_imm = tirx.IntImm("int64", 0)  # MatchShapeCode::kAssertEqualToImm
    check = bb.emit(relax.op.call_pure_packed(
        "vm.builtin.match_shape", shape, bb.emit(relax.op.null_value()), one, assert_equal_to_imm, one,
        tvm.ir.StringImm(f"{RUNTIME_CHECK}{message} |"), ty_args=relax.ObjectType()))
    value = _bound(bb, bb.normalize(value))
    pair = bb.emit(relax.op.call_pure_packed("vm.builtin.make_tuple", value, check,
                                             ty_args=relax.TupleType([value.ty, relax.ObjectType()])))
    return bb.emit(relax.op.call_pure_packed("vm.builtin.tuple_getitem", pair, tirx.IntImm("int64", 0),
                                             ty_args=value.ty))


def _i64(value) -> relax.Expr:
    return relax.const(np.asarray(value, np.int64), "int64")


def same_dim(a, b) -> bool:
    """Two dims (ints or PrimExprs) are the same dim."""
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    return bool(tvm_ffi.structural_equal(a, b))


def _pad_end(bb: relax.BlockBuilder, x: relax.Expr, full: list) -> relax.Expr:
    """``x`` zero-padded at the end of each dim to the static ``full`` shape."""
    width = []
    for have, want in zip(dims(x), full):
        width += [0, want - have if isinstance(have, int) else 0]
    return x if not any(width) else bb.normalize(relax.op.nn.pad(x, width))


def _bound(bb: relax.BlockBuilder, expr: relax.Expr) -> relax.Expr:
    """``expr`` bound to a variable (the VM's codegen needs a variable as match_cast's value)."""
    return expr if isinstance(expr, relax.Var) else bb.emit(expr)
