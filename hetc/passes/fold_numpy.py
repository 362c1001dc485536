"""Constant folding of cheap Relax ops with numpy, before TVM's ``FoldConstant``.

``FoldConstant`` evaluates each foldable call by legalizing it and building the kernel with
LLVM, one build per distinct shape: ~35 ms each on the project's 2-core Zen 5 (AVX-512). The
BatchNorms of a torchvision MobileNetV2 export decompose into 417 such calls on constants
(sqrt, divide, multiply, subtract, add, reshape of 52 BatchNorms' parameters), and folding
them took 15 s of a 19 s compile there.
numpy evaluates them in microseconds with the same IEEE results: each op here is one correctly
rounded operation (or a copy), and broadcasting follows the same rules as Relax's.

The same goes for the weights of quantized models: a QDQ export keeps every weight as int8
with a DequantizeLinear (``astype``, an int32 ``subtract`` of the zero point, ``astype``,
``multiply`` by the scale), 118+ kernels to build for a MobileNetV2.

A call is folded when every argument is a constant (or a variable bound to one), the op is in
``_UNARY``/``_BINARY``/``_LAYOUT``, is ``astype`` (not float to int: out-of-range values are
undefined there) or is an integer ``sum`` (exact in any order), its dtype is in ``_DTYPES`` (float ops only on floats: an int
``divide``'s rounding is TVM's own) and numpy's result has the call's static shape and dtype
(numpy's type promotion differing from Relax's leaves the call alone); anything else is left
to ``FoldConstant``. To add an op, add its numpy equivalent to one of the tables (only ops
whose result numpy rounds exactly as TVM's kernel does: no transcendental functions, whose
libm results may differ by an ulp).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .pipeline import rewrite_functions

_UNARY = {"relax.sqrt": np.sqrt, "relax.negative": np.negative, "relax.abs": np.abs}
_BINARY = {"relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
           "relax.divide": np.divide, "relax.maximum": np.maximum, "relax.minimum": np.minimum}
_LAYOUT = {"relax.reshape", "relax.permute_dims", "relax.expand_dims", "relax.squeeze"}
_FLOATS = {"float32", "float64"}
_INTS = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32"}
_DTYPES = _FLOATS | _INTS
_FLOAT_ONLY = {"relax.sqrt", "relax.divide"}


@mutator
class _Folder(PyExprMutator):  # pylint: disable=abstract-method
    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        if not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op):
            return call
        out = call.ty
        if not (isinstance(out, relax.TensorType) and str(out.dtype) in _DTYPES):
            return call
        if not isinstance(out.shape, relax.ShapeExpr) or not all(
                isinstance(d, tvm.tirx.IntImm) for d in out.shape.values):
            return call  # unknown rank, or a shape held in a variable, or symbolic dims
        shape = [int(d) for d in out.shape.values]
        value = self._evaluate(call, shape)
        if value is None or list(value.shape) != shape or value.dtype.name != str(out.dtype):
            return call
        # np.require, not np.ascontiguousarray: that makes a 0-d result (1,), and a rank-1
        # constant broadcast onto a conv's output stops ConvertLayout there (a transpose back
        # to NCHW after every quantized conv's requantize: a zero point is a scalar)
        return relax.const(np.require(value, requirements="C"), str(out.dtype))

    def _constant(self, arg) -> np.ndarray | None:
        if isinstance(arg, relax.Var):
            bound = self.lookup_binding(arg)
            arg = bound if bound is not None else arg
        if isinstance(arg, (tvm.tirx.FloatImm, tvm.tirx.IntImm)):  # a scalar such as BatchNorm's epsilon
            return np.array(arg.value, dtype=str(arg.ty))
        return arg.value.numpy() if isinstance(arg, tvm.ir.GenericConst) else None

    def _evaluate(self, call: relax.Call, shape: list[int]) -> np.ndarray | None:
        name = call.op.name
        if name in _FLOAT_ONLY and str(call.ty.dtype) not in _FLOATS:
            return None
        if name == "relax.astype":
            data = self._constant(call.args[0])
            if data is None or data.dtype.name not in _DTYPES or (
                    data.dtype.kind == "f" and str(call.ty.dtype) not in _FLOATS):
                return None
            return data.astype(str(call.ty.dtype))
        if name in _UNARY or name in _BINARY:
            args = [self._constant(a) for a in call.args]
            if any(a is None for a in args):
                return None
            with np.errstate(all="ignore"):  # inf/nan as the kernel would produce them
                return (_UNARY.get(name) or _BINARY[name])(*args)
        if name == "relax.sum":
            return self._integer_sum(call)
        if name not in _LAYOUT:
            return None
        data = self._constant(call.args[0])
        if data is None:
            return None
        if name == "relax.permute_dims":
            axes = call.attrs.axes
            return np.transpose(data, None if axes is None else [int(a) for a in axes])
        return data.reshape(shape)  # reshape, expand_dims, squeeze: the same elements in order

    def _integer_sum(self, call: relax.Call) -> np.ndarray | None:
        """An integer ``sum`` (the column sums of a quantized matmul's weight, its zero-point
        term): exact in any order, wrapping as the kernel's int arithmetic does. Float sums
        are left to ``FoldConstant``: their rounding depends on the order."""
        data = self._constant(call.args[0])
        dtype = str(call.ty.dtype)
        if data is None or data.dtype.kind not in "iu" or dtype not in _INTS:
            return None
        axes = call.attrs.axis
        axes = None if axes is None else tuple(int(a) for a in axes)
        with np.errstate(all="ignore"):
            return np.sum(data, axis=axes, keepdims=bool(call.attrs.keepdims), dtype=dtype)


@tvm.transform.module_pass(opt_level=0, name="HetcFoldNumpy")
def fold_numpy_pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    return rewrite_functions(_Folder(mod), mod)
