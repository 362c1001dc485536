"""ONNX -> Relax conversion: hetc's converters first, TVM's ``from_onnx`` table otherwise.

``HetcGraphImporter`` subclasses TVM's importer and overrides only operator dispatch, so
TVM's graph walking, initializer handling and ``If`` support are reused unchanged.
"""

from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np
import onnx
import tvm
from onnx import helper
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as tvm_onnx

from ...errors import ConversionError, HetcError
from ...native_log import release_frames
from . import (
    ops,  # noqa: F401  (registers hetc's converters)
    registry,
    symbolic,
)
from .loader import LoadedModel, _first_line

# Ops TVM's importer handles itself rather than through its converter table.
_BUILTIN_OPS = {"Constant", "If"}
# TVM's table is keyed by op name alone; these entries convert another domain's op of the same
# name (com.microsoft Attention), not the ONNX op, so they must not be used.
_TVM_WRONG_DOMAIN = {"Attention"}


def _tvm_table() -> dict:
    return tvm_onnx._get_convert_map()  # TVM has no public accessor for its table


def _onnx_defines(op_type: str, opset: int) -> bool:
    try:
        onnx.defs.get_schema(op_type, opset, "")
        return True
    except onnx.defs.SchemaError:
        return False


def converter_source(op_type: str, opset: int) -> str | None:
    """Who converts default-domain ``op_type`` at ``opset``: 'hetc', 'tvm', or None.

    TVM's table does not know opsets, so a TVM converter counts only for ops ONNX defines
    at ``opset``.
    """
    if registry.lookup(op_type, opset) is not None:
        return "hetc"
    in_tvm = (op_type in _tvm_table() and op_type not in _TVM_WRONG_DOMAIN) or op_type in _BUILTIN_OPS
    return "tvm" if in_tvm and _onnx_defines(op_type, opset) else None


def supported_ops(opset: int) -> dict[str, str]:
    """Every convertible op type at ``opset`` -> its converter's source."""
    names = set(_tvm_table()) | set(registry.registered()) | _BUILTIN_OPS
    table = {name: converter_source(name, opset) for name in sorted(names)}
    return {k: v for k, v in table.items() if v is not None}


# Ops TVM's graph walker lets take a ShapeExpr (the value of a Shape node) as input; any
# other op gets "Node cannot handle ShapeExpr inputs" (copied from TVM 0.27's _construct_nodes).
_SHAPE_COMPATIBLE_OPS = {"Reshape", "Resize", "ConstantOfShape", "Gather", "Slice", "Shape", "Expand",
                         "Concat", "Equal", "Where", "Cast", "CastLike", "Squeeze"}


class HetcGraphImporter(tvm_onnx.ONNXGraphImporter):
    """TVM's importer with hetc's converter registry in front of TVM's table."""

    def _check_for_unsupported_ops(self, graph):  # done by the loader, over all graphs
        return None

    def _construct_nodes(self, graph):
        """TVM's node loop, one node at a time, so that shape arithmetic on symbolic dims is
        evaluated at compile time (``symbolic``), and an op that cannot take a Shape node's
        ShapeExpr gets it as an int64 tensor instead of failing (e.g. Shape -> Size, Sub)."""
        self._known: dict[str, np.ndarray] = {}
        for node in graph.node:
            if self._evaluate_symbolic(node):
                continue
            shapes = {name: self._nodes[name] for name in node.input
                      if name and isinstance(self._nodes.get(name), relax.Expr)
                      and isinstance(self._nodes[name].ty, relax.ShapeType)}
            if node.op_type in _SHAPE_COMPATIBLE_OPS or not shapes:
                super()._construct_nodes(_OneNode(node))
                continue
            for name, shape in shapes.items():
                self._nodes[name] = self.bb.normalize(relax.op.shape_to_tensor(shape))
            try:
                super()._construct_nodes(_OneNode(node))
            finally:
                self._nodes.update(shapes)  # later shape-aware consumers still see the ShapeExpr

    def _value(self, name: str) -> np.ndarray | None:
        """The compile-time value of a small integer tensor (ints and symbolic PrimExprs), or None."""
        if name in self._known:
            return self._known[name]
        expr = self._nodes.get(name)
        if isinstance(expr, tvm.ir.GenericConst):
            return symbolic.known(expr.value.numpy())
        if isinstance(expr, relax.ShapeExpr):
            return symbolic.shape_value(expr)
        return None

    def _evaluate_symbolic(self, node: onnx.NodeProto) -> bool:
        """Bind ``node``'s outputs to their compile-time values if shape arithmetic gives them."""
        if node.domain not in registry.DEFAULT_DOMAINS or not node.input or not node.input[0]:
            return False
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type in ("Shape", "Size"):
            value = symbolic.shape_value(self._nodes[node.input[0]], attrs.get("start"), attrs.get("end"))
            if value is None:
                return False  # unknown rank
            # static: a constant (the loader's fold.py folds these where ONNX shape inference
            # knows the shape; where it does not, the Relax shape is still known here)
            if node.op_type == "Size":
                value = np.array(symbolic.simplify(tvm.tirx.const(1, "int64") * np.prod(value)), object)
            outputs = [value]
        else:
            values = [self._value(name) if name else None for name in node.input]
            if any(v is None for v, name in zip(values, node.input) if name):
                return False
            if node.op_type == "Range":
                ramp = symbolic.emit_range(self.bb, values, self._dtype_of(node.input[0]))
                if ramp is None:
                    return False
                self._nodes[node.output[0]] = ramp
                return True
            outputs = symbolic.evaluate(node, attrs, values, self.opset)
            if outputs is None:
                return False
        dtype = _output_dtype(node, attrs, self._dtype_of(node.input[1 if node.op_type == "Where" else 0]))
        for name, value in zip(node.output, outputs):
            self._known[name] = value
            self._nodes[name] = symbolic.emit(self.bb, value, dtype)
        return True

    def _dtype_of(self, name: str) -> str:
        expr = self._nodes[name]
        return "int64" if isinstance(expr.ty, relax.ShapeType) else str(expr.ty.dtype)

    def _convert_operator(self, op_name, inputs, attrs, opset):
        custom = attrs.pop("tvm_custom", {})
        node = custom.get("name") or "<unnamed>"
        entry = registry.lookup(op_name, opset)
        try:
            if entry is None:
                attrs["tvm_custom"] = custom
                return super()._convert_operator(op_name, inputs, attrs, opset)
            ctx = registry.ConvertContext(self.bb, node, op_name, opset, custom.get("num_outputs", 1))
            tracked = registry.Attrs(node, op_name, attrs)
            result = entry.fn(ctx, list(inputs), tracked)
            if result is NotImplemented:  # a form hetc leaves to TVM's converter
                attrs["tvm_custom"] = custom
                return super()._convert_operator(op_name, inputs, attrs, opset)
            if tracked.unread():
                raise ctx.error(f"attribute(s) {', '.join(tracked.unread())} not handled by hetc's "
                                "converter")
            return self.bb.normalize(result) if isinstance(result, relax.Expr) else result
        except HetcError:
            raise
        except Exception as err:
            raise ConversionError(f"node '{node}' ({op_name}): {_first_line(err)}") from err


_BOOL_RESULTS = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Not"}


def _output_dtype(node: onnx.NodeProto, attrs: dict, input_dtype: str) -> str:
    if node.op_type in ("Shape", "Size"):
        return "int64"
    if node.op_type == "Cast":
        return np.dtype(helper.tensor_dtype_to_np_dtype(attrs["to"])).name
    if node.op_type == "ConstantOfShape":
        fill = attrs.get("value")
        return onnx.numpy_helper.to_array(fill).dtype.name if fill is not None else "float32"
    return "bool" if node.op_type in _BOOL_RESULTS else input_dtype


class _OneNode:
    """The part of a GraphProto that TVM's ``_construct_nodes`` reads: its nodes."""

    def __init__(self, node) -> None:
        self.node = [node]


def to_relax(model: LoadedModel) -> tvm.IRModule:
    """Convert a loaded model to a Relax IRModule with weights as constants; each symbolic
    input dim is one int64 TIR variable of its name, known to lie in its declared range."""
    symbols = {name: tvm.tirx.Var(name, "int64") for name in model.dims}
    for name, (low, high) in model.dims.items():
        symbolic.declare(symbols[name], low, high)
    shapes = {spec.name: [symbols[d] if isinstance(d, str) else d for d in spec.shape] for spec in model.inputs}
    dtypes = {spec.name: spec.dtype for spec in model.inputs}
    importer = HetcGraphImporter(shapes, dtypes, keep_params_in_input=False, sanitize=True)
    # TVM prints the failing node to stdout before re-raising and warns on every renamed
    # input; hetc reports both itself.
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            return importer.from_onnx(model.proto.graph, model.opset)
        except Exception as err:
            del importer
            release_frames(err)
            if isinstance(err, HetcError):
                raise
            raise ConversionError(f"{model.name}: conversion to Relax failed: {_first_line(err)}") from err
