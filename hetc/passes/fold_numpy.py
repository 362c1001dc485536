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
undefined there), a reduction (``_reduction``: float sums and means in float64, rounded
once) or a ``split`` (a tuple of constants, whose items read as constants), its dtype is in ``_DTYPES`` (float ops only on floats: an int
``divide``'s rounding is TVM's own) and numpy's result has the call's static shape and dtype
(numpy's type promotion differing from Relax's leaves the call alone); anything else is left
to ``FoldConstant``. ``fold_constants_pass`` runs ``FoldConstant`` only where a call could fold:
it legalizes every call of the module to look for constant ones (867 calls, 1.2 s of a ResNet-50
int8 compile on a 2-core AMD EPYC, LLVM ``znver3``: AVX2, twice per compile) even when numpy has left
none. To add an op, add its numpy equivalent to one of the tables (only ops
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
_COMPARE = {"relax.less": np.less, "relax.greater": np.greater, "relax.less_equal": np.less_equal,
            "relax.greater_equal": np.greater_equal, "relax.equal": np.equal, "relax.not_equal": np.not_equal}
_BINARY |= _COMPARE
_LAYOUT = {"relax.reshape", "relax.permute_dims", "relax.expand_dims", "relax.squeeze"}
_FLOATS = {"float32", "float64"}
_INTS = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32"}
_DTYPES = _FLOATS | _INTS | {"bool"}  # bool: comparisons, and ``where``/``take``/layout ops carrying it
_BOOL_OPS = {*_COMPARE, "relax.where", "relax.take", *_LAYOUT}
_FLOAT_ONLY = {"relax.sqrt", "relax.divide"}
_REDUCTIONS = {"relax.sum", "relax.mean", "relax.max", "relax.min"}


@mutator
class _Folder(PyExprMutator):  # pylint: disable=abstract-method
    def visit_var_(self, var: relax.Var) -> relax.Expr:  # pylint: disable=arguments-renamed
        """A variable bound to a constant reads as the constant, as FoldConstant leaves them
        (passes after it match weights as constants: Winograd, the int8 rewrite)."""
        bound = self.lookup_binding(var)
        return bound if isinstance(bound, tvm.ir.GenericConst) else var

    def visit_dataflow_var_(self, var: relax.DataflowVar) -> relax.Expr:  # pylint: disable=arguments-renamed
        return self.visit_var_(var)

    def visit_tuple_getitem_(self, item: relax.TupleGetItem) -> relax.Expr:  # pylint: disable=arguments-renamed
        """An item of a tuple of constants (a folded ``split``) reads as that constant."""
        item = super().visit_tuple_getitem_(item)
        value = item.tuple_value if isinstance(item, relax.TupleGetItem) else None
        if isinstance(value, relax.Var):
            value = self.lookup_binding(value)
        if isinstance(value, relax.Tuple) and isinstance(value.fields[item.index], tvm.ir.GenericConst):
            return value.fields[item.index]
        return item

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        if not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op):
            return call
        if call.op.name == "relax.split":
            return self._split(call)
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
        if str(call.ty.dtype) == "bool" and name not in _BOOL_OPS:
            return None
        if name == "relax.shape_to_tensor":  # of a static shape (``shape_of`` a tensor whose shape is known)
            dims = getattr(call.args[0].ty, "values", None)
            if dims is None or not all(isinstance(d, tvm.tirx.IntImm) for d in dims):
                return None
            return np.array([int(d) for d in dims], np.int64)
        if name == "relax.where":
            args = [self._constant(a) for a in call.args]
            return None if any(a is None for a in args) else np.where(*args)
        if name == "relax.take":
            return self._take(call)
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
        if name in _REDUCTIONS:
            return self._reduction(call)
        if name not in _LAYOUT:
            return None
        data = self._constant(call.args[0])
        if data is None:
            return None
        if name == "relax.permute_dims":
            axes = call.attrs.axes
            return np.transpose(data, None if axes is None else [int(a) for a in axes])
        return data.reshape(shape)  # reshape, expand_dims, squeeze: the same elements in order

    def _split(self, call: relax.Call) -> relax.Expr:
        """``split`` of a constant as a tuple of constants (a grouped conv's weight split per
        group: dm_nfnet_f0 split 22 weights, each piece then transposed and packed by a kernel
        that FoldConstant built), where numpy's pieces have the call's static shapes."""
        data = self._constant(call.args[0])
        fields = getattr(call.ty, "fields", None)
        if data is None or fields is None:
            return call
        shapes = [getattr(f, "shape", None) for f in fields]
        if not all(isinstance(sh, relax.ShapeExpr) and all(isinstance(d, tvm.tirx.IntImm) for d in sh.values)
                   for sh in shapes):
            return call
        sections = call.attrs.indices_or_sections
        sections = int(sections) if isinstance(sections, (int, tvm.tirx.IntImm)) else [int(i) for i in sections]
        try:
            pieces = np.split(data, sections, axis=int(call.attrs.axis))
        except ValueError:  # sections that do not divide the axis: Relax's rule, not numpy's
            return call
        if [list(p.shape) for p in pieces] != [[int(d) for d in sh.values] for sh in shapes]:
            return call
        return relax.Tuple([relax.const(np.ascontiguousarray(p), data.dtype.name) for p in pieces])

    def _take(self, call: relax.Call) -> np.ndarray | None:
        """``take`` of a constant at constant indices: ``wrap`` and ``clip`` as numpy's modes
        (TVM's are the same), ``fast`` only with every index in range (else undefined)."""
        data, indices = self._constant(call.args[0]), self._constant(call.args[1])
        mode = str(call.attrs.mode)
        if data is None or indices is None or indices.dtype.kind not in "iu" or mode not in ("wrap", "clip", "fast"):
            return None
        axis = None if call.attrs.axis is None else int(call.attrs.axis)
        size = data.size if axis is None else data.shape[axis]
        if mode == "fast" and (size == 0 or indices.min(initial=0) < 0 or indices.max(initial=0) >= size):
            return None
        return np.take(data, indices, axis=axis, mode="raise" if mode == "fast" else mode)

    def _reduction(self, call: relax.Call) -> np.ndarray | None:
        """``sum``, ``mean``, ``max`` or ``min`` of a constant. Integer sums (the column sums of
        a quantized matmul's weight, its zero-point term) are exact in any order, wrapping as the
        kernel's int arithmetic does; so are ``max`` and ``min``. A float ``sum`` or ``mean``
        (NFNet's weight standardization: a mean and a variance per conv weight, 184 means
        that FoldConstant built a kernel for, 46 of timm dm_nfnet_f0's 91 s compile on a 2-core
        AMD EPYC, LLVM ``znver3``) is accumulated in float64 and rounded once: not bit for bit a
        float32 kernel's order, whose rounding depends on that order, but within about half an
        ulp of the exact value."""
        data = self._constant(call.args[0])
        dtype, name = str(call.ty.dtype), call.op.name
        if data is None or data.size == 0:
            return None
        integer = data.dtype.kind in "iu" and dtype in _INTS and name != "relax.mean"  # (a mean rounds)
        if not (integer or (data.dtype.name == dtype and dtype in _FLOATS)):
            return None
        axes = call.attrs.axis
        axes = None if axes is None else tuple(int(a) for a in axes)
        keep = bool(call.attrs.keepdims)
        if name in ("relax.max", "relax.min"):
            return (np.max if name == "relax.max" else np.min)(data, axis=axes, keepdims=keep)
        wide = np.float64 if data.dtype.kind == "f" else dtype
        with np.errstate(all="ignore"):
            reduce = np.mean if name == "relax.mean" else np.sum
            return reduce(data, axis=axes, keepdims=keep, dtype=wide).astype(dtype)


@tvm.transform.module_pass(opt_level=0, name="HetcFoldNumpy")
def fold_numpy_pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    return rewrite_functions(_Folder(mod), mod)


@tvm.transform.module_pass(opt_level=0, name="HetcFoldConstants")
def fold_constants_pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """``relax.transform.FoldConstant``, skipped when no call has only constant inputs: each
    fold makes its users' inputs constant, so if none can fold at the start, none ever can.
    Skipped, the bindings of constants that ``_Folder`` read into their uses are dropped as
    FoldConstant drops them (the same module, checked on the example models)."""
    return relax.transform.FoldConstant()(mod) if _may_fold(mod) else relax.transform.DeadCodeElimination()(mod)


def _may_fold(mod: tvm.IRModule) -> bool:
    """Whether any call in ``mod``'s Relax functions reads no value computed at run time: every
    argument a constant, a non-variable leaf (a shape, a primitive value, a function), a
    ``shape_of`` a tensor of static shape, or a variable bound to one of those (through tuples
    and aliases). Conservative: a call with no arguments counts, and so does a ``call_tir`` on
    constants."""
    bound: dict = {}  # every binding of every Relax function (normalized Relax binds every call)
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            bound.update(relax.analysis.get_var2val(func))

    def known(expr, depth: int = 0) -> bool:
        if depth > 64:
            return True  # (conservative)
        if isinstance(expr, relax.Var):
            value = bound.get(expr)  # None: a parameter; a call's result is checked as a call
            return value is not None and not isinstance(value, relax.If) and known(value, depth + 1)
        if isinstance(expr, relax.Tuple):
            return all(known(f, depth + 1) for f in expr.fields)
        if isinstance(expr, relax.TupleGetItem):
            return known(expr.tuple_value, depth + 1)
        if isinstance(expr, relax.Call) and _is_op(expr, "relax.shape_of"):
            shape = getattr(expr.args[0].ty, "shape", None)  # FoldConstant folds a static one
            return isinstance(shape, relax.ShapeExpr) and all(isinstance(d, tvm.tirx.IntImm) for d in shape.values)
        return not isinstance(expr, (relax.Call, relax.If, relax.SeqExpr))

    # a static shape_of is counted where something reads it (alone it folds to a shape: no work)
    return any(isinstance(value, relax.Call) and not _is_op(value, "relax.shape_of")
               and all(known(arg) for arg in value.args) for value in bound.values())


def _is_op(call: relax.Call, name: str) -> bool:
    return isinstance(call.op, tvm.ir.Op) and call.op.name == name
