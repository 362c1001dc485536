"""Relax -> ONNX for the ops an Ascend region may hold: the region subgraph CANN compiles.

``region_model(func)`` writes a merged BYOC function (``"Codegen": "hetc_ascend"``; composite
functions inside are inlined) as an ONNX model in opset ``spec.OPSET``: parameters become
graph inputs ``input<k>``, constants initializers, results graph outputs ``output<k>``; it
passes ``onnx.checker`` and shape inference. ``op_reason(call)`` writes one call on its own and
checks the nodes against CANN's table (``support.check``): the partitioner's test.

Writers are keyed by Relax op name (``@writes("relax.add")``) and get the ``_Graph`` being
built, the call, and the ONNX names of its tensor arguments; they return the output's name or
raise ``Unsupported`` with the reason. A Relax op may become several ONNX nodes (layer norm
is written as ReduceMean/Sub/Mul/Sqrt/Div, which CANN's parser list has, as torch exports it
before opset 17). To add an op: write its writer here and make sure the ONNX ops it emits are
in ``support.TABLE``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dataclasses import dataclass

from .spec import OPSET, TensorIO


class Unsupported(Exception):
    """The Relax call cannot be written for CANN; the message says why."""


@dataclass(frozen=True)
class Shaped:
    """A tensor's dtype and shape: ints, and for symbolic dims their expression as text
    (``"seq"``, ``"batch * seq"``): ONNX ``dim_param``s, ATC ``-1``s built for gears."""

    shape: tuple[int | str, ...]
    dtype: str


def tensor_of(ty) -> Shaped | None:
    """The ``Shaped`` of a Relax tensor type, or None (not a tensor, or an unknown shape or rank)."""
    from tvm import relax, tirx

    if not isinstance(ty, relax.TensorType) or ty.shape is None or not hasattr(ty.shape, "values"):
        return None
    dims = tuple(int(d) if isinstance(d, (int, tirx.IntImm)) else str(d) for d in ty.shape.values)
    return Shaped(dims, str(ty.dtype))

_ELEM = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "int64": TensorProto.INT64,
         "int32": TensorProto.INT32, "int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "bool": TensorProto.BOOL}


def elem_type(dtype: str) -> int:
    try:
        return _ELEM[dtype]
    except KeyError:
        raise Unsupported(f"dtype {dtype} has no ONNX tensor type hetc writes") from None


class _Graph:
    """Nodes, initializers and the dtype of every value, with unique names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.dtypes: dict[str, str] = {}
        self._count = 0
        self._consts: dict = {}  # Relax constant -> initializer (TVM objects hash by identity)

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def const(self, array: np.ndarray, hint: str = "const") -> str:
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(np.require(array, requirements="C"), name))
        self.dtypes[name] = str(array.dtype)
        return name

    def constant(self, expr) -> str:
        """A Relax constant as an initializer (one per constant object)."""
        if expr not in self._consts:
            self._consts[expr] = self.const(expr.value.numpy(), "w")
        return self._consts[expr]

    def node(self, op_type: str, inputs: Sequence[str], dtype: str, **attrs) -> str:
        out = self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=out, **attrs))
        self.dtypes[out] = dtype
        return out


Writer = Callable[[_Graph, object, list[str]], str]
WRITERS: dict[str, Writer] = {}


def writes(*ops: str):
    def register(fn: Writer) -> Writer:
        for op in ops:
            if op in WRITERS:
                raise ValueError(f"two ONNX writers for {op}")
            WRITERS[op] = fn
        return fn

    return register


def _out(call) -> Shaped:
    info = tensor_of(call.ty)
    if info is None:
        raise Unsupported("its result is not a tensor with a known shape")
    return info


def _attr(call, name: str, default=None):
    attrs = call.attrs
    return getattr(attrs, name, default) if attrs is not None else default


def _ints(value) -> list[int]:
    return [int(v) for v in value]


def _simple(onnx_op: str):
    def write(g: _Graph, call, args: list[str]) -> str:
        return g.node(onnx_op, args, _out(call).dtype)

    return write


for _relax, _onnx in {
    "relax.add": "Add", "relax.subtract": "Sub", "relax.multiply": "Mul", "relax.divide": "Div",
    "relax.power": "Pow", "relax.maximum": "Max", "relax.minimum": "Min", "relax.less": "Less",
    "relax.greater": "Greater", "relax.equal": "Equal", "relax.less_equal": "LessOrEqual",
    "relax.greater_equal": "GreaterOrEqual", "relax.logical_and": "And", "relax.logical_or": "Or",
    "relax.logical_not": "Not", "relax.nn.relu": "Relu", "relax.sigmoid": "Sigmoid", "relax.tanh": "Tanh",
    "relax.erf": "Erf", "relax.exp": "Exp", "relax.log": "Log", "relax.sqrt": "Sqrt", "relax.abs": "Abs",
    "relax.negative": "Neg", "relax.floor": "Floor", "relax.ceil": "Ceil", "relax.sin": "Sin", "relax.cos": "Cos",
    "relax.where": "Where",
}.items():
    writes(_relax)(_simple(_onnx))


@writes("relax.matmul")
def _matmul(g: _Graph, call, args: list[str]) -> str:
    out = _out(call)
    if out.dtype != tensor_of(call.args[0].ty).dtype:
        raise Unsupported(f"matmul accumulating into {out.dtype}")
    return g.node("MatMul", args, out.dtype)


@writes("relax.nn.softmax", "relax.nn.log_softmax")
def _softmax(g: _Graph, call, args: list[str]) -> str:
    op = "Softmax" if call.op.name == "relax.nn.softmax" else "LogSoftmax"
    return g.node(op, args, _out(call).dtype, axis=int(_attr(call, "axis", -1)))


@writes("relax.nn.leakyrelu")
def _leaky(g: _Graph, call, args: list[str]) -> str:
    return g.node("LeakyRelu", args, _out(call).dtype, alpha=float(_attr(call, "alpha")))


@writes("relax.clip")
def _clip(g: _Graph, call, args: list[str]) -> str:
    dtype = _out(call).dtype
    bounds = [g.const(np.array(float(v.value), dtype), "bound") for v in call.args[1:]]
    return g.node("Clip", [args[0], *bounds], dtype)


def _layout(call, data: str, kernel: str | None = None) -> None:
    if str(_attr(call, "data_layout", _attr(call, "layout", data))) != data:
        raise Unsupported(f"layout {_attr(call, 'data_layout', _attr(call, 'layout'))} (ONNX takes {data})")
    if str(_attr(call, "out_layout", data)) != data:
        raise Unsupported(f"output layout {_attr(call, 'out_layout')} (ONNX gives {data})")
    if kernel is not None and str(_attr(call, "kernel_layout")) != kernel:
        raise Unsupported(f"kernel layout {_attr(call, 'kernel_layout')} (ONNX takes {kernel})")


@writes("relax.nn.conv2d")
def _conv2d(g: _Graph, call, args: list[str]) -> str:
    _layout(call, "NCHW", "OIHW")
    out = _out(call)
    if str(_attr(call, "out_dtype") or "") not in ("", "void", out.dtype):
        raise Unsupported("conv2d accumulating into another dtype")
    kernel = tensor_of(call.args[1].ty)
    return g.node("Conv", args, out.dtype, kernel_shape=list(kernel.shape[2:]), strides=_ints(call.attrs.strides),
                  pads=_ints(call.attrs.padding), dilations=_ints(call.attrs.dilation), group=int(call.attrs.groups))


@writes("relax.nn.max_pool2d", "relax.nn.avg_pool2d")
def _pool2d(g: _Graph, call, args: list[str]) -> str:
    _layout(call, "NCHW")
    attrs = {"kernel_shape": _ints(call.attrs.pool_size), "strides": _ints(call.attrs.strides),
             "pads": _ints(call.attrs.padding), "ceil_mode": int(bool(call.attrs.ceil_mode))}
    if call.op.name == "relax.nn.max_pool2d":
        return g.node("MaxPool", args, _out(call).dtype, dilations=_ints(call.attrs.dilation), **attrs)
    if not _ones(call.attrs.dilation):
        raise Unsupported("average pooling with dilation (ONNX AveragePool has none in opset 13)")
    return g.node("AveragePool", args, _out(call).dtype, count_include_pad=int(bool(call.attrs.count_include_pad)),
                  **attrs)


def _ones(values) -> bool:
    return all(int(v) == 1 for v in values)


@writes("relax.nn.adaptive_avg_pool2d")
def _adaptive_pool(g: _Graph, call, args: list[str]) -> str:
    _layout(call, "NCHW")
    out = _out(call)
    if tuple(out.shape[2:]) != (1, 1):
        raise Unsupported(f"adaptive pooling to {list(out.shape[2:])} (only global pooling, 1x1)")
    return g.node("GlobalAveragePool", args, out.dtype)


def _axes(call, rank: int) -> list[int]:
    axes = _attr(call, "axis")
    return list(range(rank)) if axes is None else [int(a) % rank for a in axes]


@writes("relax.mean", "relax.max", "relax.min")
def _reduce(g: _Graph, call, args: list[str]) -> str:
    rank = len(tensor_of(call.args[0].ty).shape)
    op = {"relax.mean": "ReduceMean", "relax.max": "ReduceMax", "relax.min": "ReduceMin"}[call.op.name]
    return g.node(op, args, _out(call).dtype, axes=_axes(call, rank), keepdims=int(bool(call.attrs.keepdims)))


@writes("relax.sum")
def _sum(g: _Graph, call, args: list[str]) -> str:  # opset 13: ReduceSum takes its axes as an input
    rank = len(tensor_of(call.args[0].ty).shape)
    axes = g.const(np.array(_axes(call, rank), np.int64), "axes")
    return g.node("ReduceSum", [args[0], axes], _out(call).dtype, keepdims=int(bool(call.attrs.keepdims)))


@writes("relax.reshape")
def _reshape(g: _Graph, call, args: list[str]) -> str:
    """A constant target shape: 0 copies the input's dim at that axis (the batch stays free for
    ATC's gears), and one symbolic dim that is no input dim at its axis becomes -1 (inferred)."""
    out = _out(call)
    data = tensor_of(call.args[0].ty)
    shape = list(out.shape)
    if shape and data.shape and shape[0] == data.shape[0]:
        shape[0] = 0
    for axis, dim in enumerate(shape):
        if isinstance(dim, str) and axis < len(data.shape) and data.shape[axis] == dim:
            shape[axis] = 0
    free = [axis for axis, dim in enumerate(shape) if isinstance(dim, str)]
    if len(free) > 1:
        raise Unsupported(f"reshape to {list(out.shape)}: more than one symbolic dim to infer")
    for axis in free:
        shape[axis] = -1
    return g.node("Reshape", [args[0], g.const(np.array(shape, np.int64), "shape")], out.dtype)


@writes("relax.permute_dims")
def _transpose(g: _Graph, call, args: list[str]) -> str:
    rank = len(tensor_of(call.args[0].ty).shape)
    axes = call.attrs.axes
    perm = list(reversed(range(rank))) if axes is None else [int(a) % rank for a in axes]
    return g.node("Transpose", args, _out(call).dtype, perm=perm)


@writes("relax.expand_dims")
def _unsqueeze(g: _Graph, call, args: list[str]) -> str:
    rank = len(_out(call).shape)
    axes = g.const(np.array([int(a) % rank for a in call.attrs.axis], np.int64), "axes")
    return g.node("Unsqueeze", [args[0], axes], _out(call).dtype)


@writes("relax.squeeze")
def _squeeze(g: _Graph, call, args: list[str]) -> str:
    data = tensor_of(call.args[0].ty)
    axes = _attr(call, "axis")
    if axes is None:
        axes = [i for i, d in enumerate(data.shape) if isinstance(d, int) and d == 1]
    else:
        axes = [int(a) % len(data.shape) for a in axes]
    return g.node("Squeeze", [args[0], g.const(np.array(axes, np.int64), "axes")], _out(call).dtype)


@writes("relax.astype")
def _cast(g: _Graph, call, args: list[str]) -> str:
    out = _out(call)
    return g.node("Cast", args, out.dtype, to=elem_type(out.dtype))


@writes("relax.take")
def _gather(g: _Graph, call, args: list[str]) -> str:
    if str(_attr(call, "mode", "fast")) not in ("fast", "wrap"):
        raise Unsupported(f"take with mode {call.attrs.mode} (ONNX Gather wraps negative indices only)")
    data = tensor_of(call.args[0].ty)
    axis = _attr(call, "axis")
    axis = 0 if axis is None else int(axis) % len(data.shape)
    return g.node("Gather", args, _out(call).dtype, axis=axis)


@writes("relax.nn.layer_norm")
def _layer_norm(g: _Graph, call, args: list[str]) -> str:
    """(x - mean) / sqrt(var + eps) * gamma + beta, as torch exports it before opset 17."""
    out = _out(call)
    rank = len(out.shape)
    axes = [int(a) % rank for a in call.attrs.axes]
    x, gamma, beta = args
    mean = g.node("ReduceMean", [x], out.dtype, axes=axes, keepdims=1)
    diff = g.node("Sub", [x, mean], out.dtype)
    var = g.node("ReduceMean", [g.node("Mul", [diff, diff], out.dtype)], out.dtype, axes=axes, keepdims=1)
    eps = g.const(np.array(float(call.attrs.epsilon), out.dtype), "eps")
    y = g.node("Div", [diff, g.node("Sqrt", [g.node("Add", [var, eps], out.dtype)], out.dtype)], out.dtype)
    if bool(call.attrs.scale):
        y = g.node("Mul", [y, gamma], out.dtype)
    if bool(call.attrs.center):
        y = g.node("Add", [y, beta], out.dtype)
    return y


# -- one call, and whole regions -----------------------------------------------------------------


def _tensor_args(call) -> list:
    from tvm import relax

    return [a for a in call.args if isinstance(getattr(a, "ty", None), relax.TensorType)]


def op_reason(call) -> str | None:
    """Why CANN cannot take this Relax call (None: it can): no writer, an unknown shape, an
    attribute or dtype outside CANN's table, or only constant inputs. Symbolic dims are taken:
    the region is built for the dims' gears (``pipeline.Gears``)."""
    import tvm

    from . import support

    name = str(call.op.name)
    if name not in WRITERS:
        return f"{name.removeprefix('relax.')} has no CANN ONNX mapping in hetc"
    args = _tensor_args(call)
    infos = [tensor_of(a.ty) for a in args]
    if any(i is None for i in infos) or tensor_of(call.ty) is None:
        return "data-dependent or non-tensor shapes (CANN regions are built for known shapes or gears)"
    if args and all(isinstance(a, tvm.ir.GenericConst) for a in args):
        return "all inputs are constants (CANN's parser folds such nodes away)"
    g = _Graph()
    names = []
    for k, (arg, info) in enumerate(zip(args, infos)):
        if isinstance(arg, tvm.ir.GenericConst):
            names.append(g.constant(arg))
        else:
            names.append(f"x{k}")
            g.dtypes[names[-1]] = info.dtype
    try:
        WRITERS[name](g, call, names)
    except Unsupported as err:
        return str(err)
    reason = support.check(g.nodes, g.dtypes)
    if reason is None and tensor_of(call.ty).dtype not in _ELEM:
        return f"its result's dtype {tensor_of(call.ty).dtype} has no ONNX tensor type hetc writes"
    return reason


def region_model(func, name: str) -> tuple[onnx.ModelProto, list[TensorIO], list[TensorIO]]:
    """The ONNX model of a merged region function, and its inputs and outputs."""
    import tvm
    from tvm import relax

    g = _Graph()
    env: dict = {}
    inputs = []
    for k, param in enumerate(func.params):
        info = tensor_of(param.ty)
        if info is None:
            raise Unsupported(f"region input {param.name} is not a tensor with a known shape")
        env[param] = f"input{k}"
        g.dtypes[env[param]] = info.dtype
        inputs.append(TensorIO(env[param], info.dtype, info.shape))

    def value(expr) -> str | None:
        if isinstance(expr, tvm.ir.GenericConst):
            return g.constant(expr)
        if isinstance(expr, relax.ShapeExpr):
            return None  # a reshape's target shape: the writer reads it from the result's type
        return env[expr]

    def walk(fn, args: list[str]) -> str | list:
        scope = dict(zip(fn.params, args))
        env.update(scope)
        local = {}
        for block in fn.body.blocks:
            for binding in block.bindings:
                v, var = binding.value, binding.var
                if isinstance(v, relax.Function):
                    local[var] = v
                elif isinstance(v, relax.Call) and (v.op in local or isinstance(v.op, relax.Function)):
                    env[var] = walk(local.get(v.op, v.op), [value(a) for a in v.args])
                elif isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.Op):
                    writer = WRITERS.get(str(v.op.name))
                    if writer is None:
                        raise Unsupported(f"{v.op.name} has no CANN ONNX mapping in hetc")
                    env[var] = writer(g, v, [value(a) for a in _tensor_args(v)])
                elif isinstance(v, relax.Var):
                    env[var] = env[v]
                elif isinstance(v, relax.Tuple):
                    env[var] = [value(f) for f in v.fields]
                elif isinstance(v, relax.TupleGetItem):
                    env[var] = env[v.tuple_value][v.index]
                else:
                    raise Unsupported(f"unexpected binding {type(v).__name__} in region {name}")
        result = fn.body.body
        if isinstance(result, relax.Tuple):
            return [value(f) for f in result.fields]
        return value(result)

    result = walk(func, [env[p] for p in func.params])
    results = result if isinstance(result, list) else [result]
    types = list(func.ret_ty.fields) if isinstance(func.ret_ty, relax.TupleType) else [func.ret_ty]
    outputs = []
    for k, (ref, ty) in enumerate(zip(results, types)):
        info = tensor_of(ty)
        if info is None:
            raise Unsupported(f"region output {k} is not a tensor with a known shape")
        out = f"output{k}"
        g.nodes.append(helper.make_node("Identity", [ref], [out], name=out))
        outputs.append(TensorIO(out, info.dtype, info.shape))

    graph = helper.make_graph(
        g.nodes, name,
        [helper.make_tensor_value_info(t.name, elem_type(t.dtype), list(t.shape)) for t in inputs],
        [helper.make_tensor_value_info(t.name, elem_type(t.dtype), list(t.shape)) for t in outputs],
        g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="hetc", ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model, inputs, outputs
