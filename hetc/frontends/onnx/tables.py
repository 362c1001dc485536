"""One formula for an op's index and weight tables, evaluated by numpy or emitted as Relax ops.

Pad, CenterCropPad, Col2Im, MelWeightMatrix and STFT compute tables (gather indices, scatter
positions, mel triangles, DFT matrices) from values that decide the output shape. Each
converter writes that formula once against ``m``, one of:

- ``NumpyMath()``: every deciding value is a constant. The formula runs at conversion time
  and ``m.table`` makes the result a Relax constant: the compiled code only reads it (no
  kernel per formula step, no FoldConstant build per step).
- ``RelaxMath(ctx)``: some value arrives at run time. The same steps become Relax ops on
  tensors; sizes are ints or symbolic dims (``tirx`` vars), and ``m.check`` guards values
  with ``runtime_values.checked`` where ``NumpyMath`` raises a ``ConversionError``.

Operands may be Python numbers, numpy arrays, Relax tensors or (Relax) PrimExpr dims; a
Python number takes the dtype of the tensor beside it (as numpy's weak scalars do). The
numeric primitives numpy has natively (``log1p``, ``expm1``, float ``//``) are emulated in
Relax with the same rounding (see ``RelaxMath``).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, tirx

from . import runtime_values as rv

op = relax.op


def _is_tensor(x) -> bool:
    return isinstance(getattr(x, "ty", None), relax.TensorType)


def _is_dim(x) -> bool:
    """A PrimExpr size (a symbolic dim, or an ``IntImm``)."""
    return isinstance(x, tvm.ir.Expr) and isinstance(getattr(x, "ty", None), tvm.ir.PrimType)


class NumpyMath:
    """Evaluates a table formula at conversion time."""

    runtime = False

    def __init__(self, ctx=None):
        self.ctx = ctx

    def table(self, value, dtype: str | None = None) -> relax.Expr:
        value = np.ascontiguousarray(value)
        if dtype is not None:
            value = value.astype(dtype)
        return relax.const(value, str(value.dtype))

    def check(self, value, ok, message: str):
        if not np.all(ok):
            raise self.ctx.error(message)
        return value

    def dims(self, values, prefix: str = "dim") -> list[int]:
        return [int(v) for v in np.asarray(values).reshape(-1)]

    def arange(self, n, dtype: str = "int64"):
        return np.arange(int(n), dtype=dtype)

    def reshape(self, x, shape):
        return np.reshape(x, [int(d) for d in shape])

    def astype(self, x, dtype: str):
        return np.asarray(x).astype(dtype)

    def where(self, cond, a, b):
        return np.where(cond, a, b)

    def stack(self, values):
        return np.stack([np.asarray(v) for v in values])

    def slice(self, x, begin, end):
        return np.asarray(x)[int(begin):int(end)]

    def element(self, vector, i: int):
        return np.asarray(vector).reshape(-1)[i]

    def broadcast_to(self, x, shape):
        return np.broadcast_to(x, [int(d) for d in shape])

    add, subtract, multiply, divide = np.add, np.subtract, np.multiply, np.divide
    floor_divide, floor_mod, minimum, maximum = np.floor_divide, np.mod, np.minimum, np.maximum
    less, less_equal, greater, greater_equal = np.less, np.less_equal, np.greater, np.greater_equal
    equal = np.equal
    logical_and, logical_or = np.logical_and, np.logical_or
    floor, ceil, abs, cos, sin = np.floor, np.ceil, np.abs, np.cos, np.sin
    log1p, expm1 = np.log1p, np.expm1
    float_floor_divide = np.floor_divide


class RelaxMath:
    """Emits a table formula as Relax ops (values known at run time)."""

    runtime = True

    def __init__(self, ctx):
        self.ctx = ctx
        self.bb = ctx.bb

    # ---- operands
    def _tensor(self, x, dtype: str | None = None) -> relax.Expr:
        if _is_tensor(x):
            return x
        if isinstance(x, tvm.ir.Expr) and not _is_dim(x):  # a Relax call not yet normalized
            return self.bb.normalize(x)
        if _is_dim(x):  # a dim, as an int64 scalar tensor
            if isinstance(x, tirx.IntImm):
                x = int(x)
            else:
                t = op.reshape(op.shape_to_tensor(relax.ShapeExpr([x])), [])
                return self.bb.normalize(t if dtype in (None, "int64") else op.astype(t, dtype))
        value = np.asarray(x)
        if dtype is None:
            dtype = {"b": "bool", "f": "float64"}.get(value.dtype.kind, "int64")
        return relax.const(value.astype(dtype), dtype)

    def _pair(self, a, b) -> tuple[relax.Expr, relax.Expr]:
        a, b = (self.bb.normalize(v) if isinstance(v, tvm.ir.Expr) and not _is_dim(v) else v for v in (a, b))
        known = next((str(v.ty.dtype) for v in (a, b) if _is_tensor(v)), None)
        if known is None and any(isinstance(v, float) for v in (a, b)):
            known = "float64"
        return self._tensor(a, known), self._tensor(b, known)

    def _binary(self, fn):
        return lambda a, b: self.bb.normalize(fn(*self._pair(a, b)))

    def __getattr__(self, name: str):
        binary = {"add", "subtract", "multiply", "divide", "floor_divide", "floor_mod", "minimum", "maximum",
                  "less", "less_equal", "greater", "greater_equal", "equal", "logical_and", "logical_or"}
        if name in binary:
            return self._binary(getattr(op, name))
        if name in ("floor", "ceil", "abs", "cos", "sin"):
            return lambda x: self.bb.normalize(getattr(op, name)(self._tensor(x)))
        raise AttributeError(name)

    def table(self, value, dtype: str | None = None) -> relax.Expr:
        value = self._tensor(value)
        return self.bb.normalize(op.astype(value, dtype)) if dtype and str(value.ty.dtype) != dtype else value

    def check(self, value, ok, message: str):
        return rv.checked(self.bb, self._tensor(value), self._tensor(ok), f"{self.ctx.label}: {message}")

    def dims(self, values, prefix: str = "dim") -> list:
        """A vector of run-time sizes as fresh symbolic dims."""
        return rv.shape_vars(self.bb, self._tensor(values), prefix)

    def arange(self, n, dtype: str = "int64") -> relax.Expr:
        return self.bb.normalize(op.arange(0, n, 1, dtype))

    def reshape(self, x, shape) -> relax.Expr:
        return self.bb.normalize(op.reshape(self._tensor(x), relax.ShapeExpr(list(shape))))

    def astype(self, x, dtype: str) -> relax.Expr:
        x = self._tensor(x)
        return x if str(x.ty.dtype) == dtype else self.bb.normalize(op.astype(x, dtype))

    def where(self, cond, a, b) -> relax.Expr:
        a, b = self._pair(a, b)
        return self.bb.normalize(op.where(self._tensor(cond), a, b))

    def stack(self, values) -> relax.Expr:
        """Scalars (tensors or dims) as one int64 vector."""
        parts = [op.reshape(self._tensor(v, "int64"), [1]) for v in values]
        return self.bb.normalize(op.concat(parts, axis=0))

    def broadcast_to(self, x, shape) -> relax.Expr:
        return self.bb.normalize(op.broadcast_to(self._tensor(x), relax.ShapeExpr(list(shape))))

    def slice(self, x, begin, end) -> relax.Expr:
        """``x[begin:end]`` along axis 0 (in bounds)."""
        return self.bb.normalize(op.strided_slice(self._tensor(x), [0], [begin], [end], assume_inbound=True))

    def element(self, vector, i: int) -> relax.Expr:
        return self.bb.normalize(op.take(self._tensor(vector), relax.const(np.int64(i), "int64"), axis=0))

    # ---- numpy's own primitives, with numpy's rounding
    def log1p(self, x) -> relax.Expr:
        """``log1p`` in ``x``'s float type, from float64 (``1 + x`` is exact there)."""
        x = self._tensor(x)
        one_plus = op.add(self.astype(x, "float64"), relax.const(1.0, "float64"))
        return self.astype(op.log(one_plus), str(x.ty.dtype))

    def expm1(self, y) -> relax.Expr:
        """``exp(y) - 1`` without the cancellation near 0 (Kahan: ``(u - 1) y / log u``)."""
        y = self._tensor(y)
        u = self.bb.normalize(op.exp(y))
        um1 = self.subtract(u, 1.0)
        exact = op.divide(op.multiply(um1, y), op.log(u))
        exact = self.where(self.equal(um1, -1.0), -1.0, self.bb.normalize(exact))
        return self.where(self.equal(u, 1.0), y, exact)

    def float_floor_divide(self, a, b) -> relax.Expr:
        """Python's (and numpy's) float ``a // b`` for ``b > 0``: from ``fmod``, not ``floor(a / b)``."""
        a, b = self._pair(a, b)
        mod = self.bb.normalize(op.mod(a, b))
        div = self.divide(self.subtract(a, mod), b)
        div = self.where(self.less(mod, 0.0), self.subtract(div, 1.0), div)
        floor = self.floor(div)
        return self.where(self.greater(self.subtract(div, floor), 0.5), self.add(floor, 1.0), floor)


def math_for(ctx, *values) -> NumpyMath | RelaxMath:
    """``RelaxMath`` when any of ``values`` is known only at run time, else ``NumpyMath``."""
    if any(rv.is_runtime(v) or (_is_dim(v) and not isinstance(v, tirx.IntImm)) for v in values):
        return RelaxMath(ctx)
    return NumpyMath(ctx)
