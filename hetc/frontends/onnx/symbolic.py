"""Shape arithmetic on symbolic dims, at import time.

Exporters compute shapes at run time: ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``,
``Range(0, Shape(x)[1])`` for positions, ``ConstantOfShape(Concat(batch, 1))`` for masks.
With static input shapes ``fold.py`` folds these chains to constants before conversion. With
symbolic dims (``batch``, ``seq``) their values are expressions of those dims, known at
compile time as TIR ``PrimExpr``s: this module evaluates them, so that Reshape gets the shape
``[batch, seq, 12, 64]`` and Range gets ``arange(0, seq)`` instead of a tensor whose value
(and so whose output shape) only the run time knows.

A known value is a small numpy ``object`` array whose elements are Python ints or PrimExprs.
``evaluate`` computes a node's outputs from its inputs' known values (None: not an op this
module knows, or an input not known); ``emit`` turns a known value into a Relax expression:
a constant when static, a ``ShapeExpr`` for an int64 vector (what TVM's converters take as a
shape), else a tensor made from one.

To teach it an op, add a function ``(node attrs, input values, opset) -> list of outputs`` to
``_OPS``. Elementwise integer ops go through ``_elementwise``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np
import onnx
import tvm
from onnx import helper
from tvm import relax, tirx
from tvm.sym.analyzer import Analyzer

MAX_ELEMENTS = 64  # shape arithmetic is small; bigger integer tensors are data, not shapes
_ANALYZER = Analyzer()


def declare(var: tirx.Var, low: int, high: int) -> None:
    """Tell the simplifier that symbolic dim ``var`` lies in ``[low, high]`` (so that, e.g.,
    ``batch == -1`` folds to false and ``max(seq, 0)`` to ``seq``)."""
    _ANALYZER.bind(var, tvm.ir.Range(int(low), int(high) + 1))


def declare_like(var: tirx.Var, dim) -> None:
    """Give ``var`` (a function's own copy of a caller's dim) the range known for ``dim``."""
    bound = _ANALYZER.const_int_bound(dim)
    low, high = bound.min_value, bound.max_value
    if low > bound.NEG_INF or high < bound.POS_INF:
        declare(var, low if low > bound.NEG_INF else -(2**62), high if high < bound.POS_INF else 2**62)


def simplify(value):
    """A PrimExpr simplified, as an int when it is a constant."""
    if isinstance(value, (int, np.integer, bool, np.bool_)):
        return int(value)
    value = _ANALYZER.simplify(value)
    return int(value.value) if isinstance(value, tirx.IntImm) else value


def simplify_within(value, dims):
    """``simplify`` knowing that ``dims``, the dims of a tensor that exists, are >= 0 (a slice
    of ``n`` up to ``min(a, n)`` ends there, not at ``max(min(a, n), 0)``, the bound another
    path to the same length does not write)."""
    symbols = [prim(d) >= 0 for d in dims if not isinstance(d, (int, np.integer, tirx.IntImm))]
    if not symbols:
        return simplify(value)
    with _ANALYZER.constraint_scope(tirx.all(*symbols)):
        return simplify(value)


def prim(value) -> tirx.PrimExpr:
    """An int or PrimExpr as an int64 PrimExpr."""
    return tirx.const(int(value), "int64") if isinstance(value, (int, np.integer)) else value


def is_static(value: np.ndarray) -> bool:
    return all(isinstance(v, (int, np.integer)) for v in value.flat)


def known(array: np.ndarray) -> np.ndarray | None:
    """A constant's value as a known value (integer and small), else None."""
    if array.dtype.kind not in "iub" or array.size > MAX_ELEMENTS:
        return None
    result = np.empty(array.shape, object)
    result.flat[:] = [int(v) for v in array.flat]
    return result


def _truncdiv(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return int(a / b) if b else 0
    return tirx.truncdiv(prim(a), prim(b))


def _truncmod(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a - b * int(a / b) if b else 0
    return tirx.truncmod(prim(a), prim(b))


def _compare(fn):
    def apply(a, b):
        if isinstance(a, int) and isinstance(b, int):
            return int(fn(a, b))
        return tirx.Select(fn(prim(a), prim(b)), prim(1), prim(0))
    return apply


def _minmax(pick):
    def apply(a, b):
        if isinstance(a, int) and isinstance(b, int):
            return pick(a, b)
        return (tirx.max if pick is max else tirx.min)(prim(a), prim(b))
    return apply


_BINARY: dict[str, Callable] = {
    "Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "Div": _truncdiv, "Mod": _truncmod,
    "Equal": _compare(operator.eq), "Less": _compare(operator.lt), "Greater": _compare(operator.gt),
    "LessOrEqual": _compare(operator.le), "GreaterOrEqual": _compare(operator.ge),
    "Max": _minmax(max), "Min": _minmax(min),
    "And": lambda a, b: a * b if isinstance(a, int) and isinstance(b, int) else tirx.Select(
        tirx.all(prim(a) != 0, prim(b) != 0), prim(1), prim(0)),
    "Or": lambda a, b: int(bool(a) or bool(b)) if isinstance(a, int) and isinstance(b, int) else tirx.Select(
        tirx.any(prim(a) != 0, prim(b) != 0), prim(1), prim(0)),
}
_UNARY: dict[str, Callable] = {
    "Neg": operator.neg, "Identity": lambda a: a,
    "Abs": lambda a: abs(a) if isinstance(a, int) else tirx.abs(a),
    "Not": lambda a: int(not a) if isinstance(a, int) else tirx.Select(a == 0, prim(1), prim(0)),
}


def _map(fn, *arrays: np.ndarray) -> np.ndarray:
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    items = [np.broadcast_to(a, shape).ravel() for a in arrays]
    out = np.empty(shape, object)
    out.flat[:] = [simplify(fn(*args)) for args in zip(*items)] if out.size else []
    return out


def _axes(attrs, values, pos: int, opset: int, since: int):
    """Axes from an attribute (before ``since``) or from input ``pos``."""
    if opset < since:
        return attrs.get("axes")
    if len(values) > pos and values[pos] is not None:
        return [int(a) for a in values[pos].flat]
    return None


def _unsqueeze(attrs, values, opset):
    axes = _axes(attrs, values, 1, opset, 13)
    x = values[0]
    rank = x.ndim + len(axes)
    shape = list(x.shape)
    for a in sorted(a % rank for a in axes):
        shape.insert(a, 1)
    return [x.reshape(shape)]


def _squeeze(attrs, values, opset):
    axes = _axes(attrs, values, 1, opset, 13)
    x = values[0]
    if axes is None:
        return [x.reshape([d for d in x.shape if d != 1])]
    return [np.squeeze(x, tuple(a % x.ndim for a in axes))]


def _gather(attrs, values, opset):
    x, idx = values
    if not is_static(idx):
        return None
    axis = attrs.get("axis", 0) % x.ndim
    return [np.take(x, np.array(idx, np.int64).reshape(idx.shape) % x.shape[axis], axis=axis)]


def _concat(attrs, values, opset):
    return [np.concatenate(values, axis=attrs["axis"])]


def _slice(attrs, values, opset):
    x = values[0]
    if opset < 10:
        starts, ends, axes, steps = attrs["starts"], attrs["ends"], attrs.get("axes"), None
    else:
        if any(v is not None and not is_static(v) for v in values[1:]):
            return None
        starts, ends = (list(values[i].flat) for i in (1, 2))
        axes = list(values[3].flat) if len(values) > 3 and values[3] is not None else None
        steps = list(values[4].flat) if len(values) > 4 and values[4] is not None else None
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps or [1] * len(starts)
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a % x.ndim] = slice(int(s), int(e), int(st))
    return [x[tuple(index)]]


def _reshape(attrs, values, opset):
    x, shape = values
    if not is_static(shape):
        return None
    target = [int(d) for d in shape.flat]
    target = [x.shape[i] if d == 0 and not attrs.get("allowzero", 0) else d for i, d in enumerate(target)]
    return [x.reshape(target)]


def _cast(attrs, values, opset):
    kind = np.dtype(helper.tensor_dtype_to_np_dtype(attrs["to"])).kind
    if kind not in "iub":
        return None
    if kind == "b":
        return [_map(lambda a: int(a != 0) if isinstance(a, int) else tirx.Select(a != 0, prim(1), prim(0)),
                     values[0])]
    return [values[0]]


def _where(attrs, values, opset):
    cond, a, b = values
    return [_map(lambda c, x, y: (x if c else y) if isinstance(c, int)
                 else tirx.Select(c != 0, prim(x), prim(y)), cond, a, b)]


def _shape(attrs, values, opset, dims=None):
    return None  # computed from the tensor's type by the importer (``shape_value``)


def _range(attrs, values, opset):
    start, limit, delta = (v.flat[0] for v in values)
    if not all(isinstance(v, int) for v in (start, limit, delta)) or not delta:
        return None  # a symbolic length: ``emit_range`` makes an arange
    out = np.empty(len(range(start, limit, delta)), object)
    out[:] = list(range(start, limit, delta))
    return [out] if out.size <= MAX_ELEMENTS else None


def _constant_of_shape(attrs, values, opset):
    shape = values[0]
    if not is_static(shape) or int(np.prod([int(d) for d in shape.flat])) > MAX_ELEMENTS:
        return None
    fill = attrs.get("value")
    fill = onnx.numpy_helper.to_array(fill).ravel()[0] if fill is not None else 0
    if np.asarray(fill).dtype.kind not in "iub":
        return None
    out = np.empty([int(d) for d in shape.flat], object)
    out.fill(int(fill))
    return [out]


def _expand(attrs, values, opset):
    x, shape = values
    if not is_static(shape):
        return None
    target = np.broadcast_shapes(x.shape, tuple(int(d) for d in shape.flat))
    return [np.broadcast_to(x, target).copy()] if int(np.prod(target)) <= MAX_ELEMENTS else None


def _reduce(fn):
    def apply(attrs, values, opset):
        x = values[0]
        axes = _axes(attrs, values, 1, opset, 18)
        keep = bool(attrs.get("keepdims", 1))
        axes = tuple(range(x.ndim)) if not axes else tuple(a % x.ndim for a in axes)
        out = x
        for a in sorted(axes, reverse=True):
            # 0-d arrays: indexing a 1-D object array gives its element, not an array
            parts = [np.asarray(out.take(i, axis=a), object) for i in range(out.shape[a])]
            acc = parts[0]
            for p in parts[1:]:
                acc = _map(fn, acc, p)
            out = np.expand_dims(acc, a) if keep else acc
        return [np.asarray(out, object)]
    return apply


_OPS: dict[str, Callable] = {
    "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "Gather": _gather, "Concat": _concat, "Slice": _slice,
    "Reshape": _reshape, "Cast": _cast, "Where": _where, "Range": _range, "ConstantOfShape": _constant_of_shape,
    "Expand": _expand, "ReduceProd": _reduce(operator.mul), "ReduceSum": _reduce(operator.add),
    "ReduceMax": _reduce(_minmax(max)), "ReduceMin": _reduce(_minmax(min)),
    "Transpose": lambda attrs, values, opset: [np.transpose(values[0], attrs.get("perm"))],
    "Flatten": lambda attrs, values, opset: [values[0].reshape(
        int(np.prod(values[0].shape[:attrs.get("axis", 1) % max(values[0].ndim, 1)])), -1)],
}


def evaluate(node: onnx.NodeProto, attrs: dict, values: list, opset: int) -> list[np.ndarray] | None:
    """The known values of ``node``'s outputs, or None. ``values``: each input's known value
    (None for an empty optional input)."""
    op = node.op_type
    try:
        if op in _BINARY and len(values) == 2:
            return [_map(_BINARY[op], *values)]
        if op in _UNARY and len(values) == 1:
            return [_map(_UNARY[op], values[0])]
        if op in ("Max", "Min", "Sum") and values:
            fn = _BINARY.get(op, operator.add)
            out = values[0]
            for v in values[1:]:
                out = _map(fn, out, v)
            return [out]
        if op in _OPS:
            result = _OPS[op](attrs, values, opset)
            return None if result is None else [_map(lambda a: a, np.asarray(r, object)) for r in result]
    except (ValueError, IndexError, KeyError, TypeError) as err:  # not evaluable here: convert as usual
        _ = err
        return None
    return None


def emit(bb: relax.BlockBuilder, value: np.ndarray, dtype: str) -> relax.Expr:
    """A Relax expression holding ``value`` as a tensor of ``dtype`` (int64 vectors: a ShapeExpr)."""
    if is_static(value):
        return relax.const(np.array([int(v) for v in value.flat], dtype).reshape(value.shape), dtype)
    flat = [prim(v) for v in value.flat]
    if value.ndim == 1 and dtype == "int64":
        return relax.ShapeExpr(flat)
    tensor = bb.normalize(relax.op.shape_to_tensor(relax.ShapeExpr(flat)))
    tensor = bb.normalize(relax.op.reshape(tensor, list(value.shape)))
    return bb.normalize(relax.op.astype(tensor, dtype)) if dtype != "int64" else tensor


def emit_range(bb: relax.BlockBuilder, values: list, dtype: str) -> relax.Expr | None:
    """``Range`` with known but symbolic start/limit/delta: an arange of symbolic length."""
    start, limit, delta = (simplify(v.flat[0]) for v in values)
    if not isinstance(delta, int) or delta == 0:
        return None
    length = simplify(tirx.max(tirx.floordiv(prim(limit) - prim(start) + (delta - 1 if delta > 0 else delta + 1),
                                             prim(delta)), prim(0)))
    ramp = bb.normalize(relax.op.arange(0, prim(length), 1, dtype))
    if delta != 1:
        ramp = bb.normalize(relax.op.multiply(ramp, relax.const(delta, dtype)))
    if not (isinstance(start, int) and start == 0):
        offset = emit(bb, np.array(start, object), "int64")
        ramp = bb.normalize(relax.op.add(ramp, relax.op.astype(offset, dtype) if dtype != "int64" else offset))
    return ramp


def shape_value(expr: relax.Expr, start: int | None = None, end: int | None = None) -> np.ndarray | None:
    """The known value of ``Shape(expr)`` (with ONNX's start/end), or None when the rank is unknown."""
    shape = getattr(expr.ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        return None
    dims = [simplify(d) for d in shape.values]
    rank = len(dims)
    lo, hi = (max(0, min(rank, i + rank if i < 0 else i)) for i in (start or 0, rank if end is None else end))
    out = np.empty(max(hi - lo, 0), object)
    out[:] = dims[lo:hi]
    return out
