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

from ... import crash, narrow
from ...errors import CompileError, ConversionError, HetcError, first_line
from ...native_log import release_frames
from . import (
    dim_cast,
    fold,
    ops,  # noqa: F401  (registers hetc's converters)
    registry,
    runtime_values,
    symbolic,
)
from .loader import LoadedModel

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


# Ops with subgraphs, converted by hetc (ops/control_flow.py) through ``_construct_one``.
_SUBGRAPH_OPS = {"If", "Loop", "Scan", "SequenceMap"}

# Ops TVM's graph walker lets take a ShapeExpr (the value of a Shape node) as input; any
# other op gets "Node cannot handle ShapeExpr inputs" (copied from TVM 0.27's _construct_nodes).
_SHAPE_COMPATIBLE_OPS = {"Reshape", "Resize", "ConstantOfShape", "Gather", "Slice", "Shape", "Expand",
                         "Concat", "Equal", "Where", "Cast", "CastLike", "Squeeze"}


# Of those, the ones that take ShapeExprs only when every input is one: a Concat of a shape
# with a tensor (MobileViT: ``Concat(Shape(x)[:1], Unsqueeze(h * w), ...)``), or a Gather from a
# shape at run-time indices, gets tensors (symbolic.py evaluates the ones known at compile time).
_ALL_OR_NO_SHAPES = {"Concat", "Equal", "Where", "Gather"}


class HetcGraphImporter(tvm_onnx.ONNXGraphImporter):
    """TVM's importer with hetc's converter registry in front of TVM's table."""

    def _check_for_unsupported_ops(self, graph):  # done by the loader, over all graphs
        return None

    def _construct_nodes(self, graph):
        """TVM's node loop, one node at a time, so that shape arithmetic on symbolic dims is
        evaluated at compile time (``symbolic``), and an op that cannot take a Shape node's
        ShapeExpr gets it as an int64 tensor instead of failing (e.g. Shape -> Size, Sub)."""
        self._known: dict[str, np.ndarray] = {}
        self._inferred = {v.name: [d.dim_value if d.HasField("dim_value") else None
                                   for d in v.type.tensor_type.shape.dim]
                          for v in [*graph.value_info, *graph.output] if v.type.tensor_type.HasField("shape")}
        self._note_types(graph)
        for node in graph.node:
            self._node_now = node
            crash.set_stage(f"convert ({node.op_type} node '{node.name}')")
            sub_byte = any(self._types.get(n) in narrow.ONNX_TYPES for n in [*node.input, *node.output])
            if not sub_byte and (self._evaluate_symbolic(node) or self._evaluate_static(node)):
                continue
            shapes = {name: self._nodes[name] for name in node.input
                      if name and isinstance(self._nodes.get(name), relax.Expr)
                      and isinstance(self._nodes[name].ty, relax.ShapeType)}
            if node.op_type in _BROADCASTING:
                self._unify_dims(node)
            mixed = node.op_type in _ALL_OR_NO_SHAPES and len(shapes) < len([n for n in node.input if n])
            if (node.op_type in _SHAPE_COMPATIBLE_OPS and not mixed) or not shapes:
                self._construct_one(node)
            else:
                for name, shape in shapes.items():
                    self._nodes[name] = self.bb.normalize(relax.op.shape_to_tensor(shape))
                try:
                    self._construct_one(node)
                finally:
                    self._nodes.update(shapes)  # later shape-aware consumers still see the ShapeExpr
            self._fit_unknown_shapes(node)
            self._note_output_types(node)

    def _construct_one(self, node: onnx.NodeProto) -> None:
        """Convert one node with TVM's loop; an op with subgraphs (ops/control_flow.py) with
        hetc's converter, its outputs bound one by one (TVM's loop computes both branches of
        an If, and splits an output that is a sequence into its tensors)."""
        if node.op_type not in _SUBGRAPH_OPS:
            super()._construct_nodes(_OneNode(node))
            return
        attrs = self._parse_attr(node.attribute)
        attrs["tvm_custom"] = {"name": node.name, "num_outputs": len(node.output)}
        inputs = [self._nodes[name] if name else None for name in node.input]
        outputs = self._convert_operator(node.op_type, inputs, attrs, self.opset)
        self._nodes.update((name, value) for name, value in zip(node.output, outputs) if name)

    def convert_subgraph(self, graph: onnx.GraphProto, values: dict, inherit: bool = True) -> list:
        """Convert the body ``graph`` of an If, Loop or Scan into the block being built and return
        its outputs: ``values`` binds its inputs (and the outer names a body that became a
        function of its own uses); with ``inherit`` the enclosing graphs' names stay visible."""
        saved = self._nodes, self._known, self._inferred
        self._nodes = {**(self._nodes if inherit else {}), **values}
        try:
            for init in graph.initializer:
                self._nodes[init.name] = relax.const(self._parse_array(init))
            self._construct_nodes(graph)
            return [self._nodes[out.name] for out in graph.output]
        finally:
            self._nodes, self._known, self._inferred = saved

    def _note_types(self, graph) -> None:
        """ONNX element types of the graph's values (``self._types``, kept across subgraphs)."""
        if not hasattr(self, "_types"):
            self._types: dict[str, int] = {}
        for v in [*graph.input, *graph.value_info, *graph.output]:
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type:
                self._types.setdefault(v.name, v.type.tensor_type.elem_type)
        for t in graph.initializer:
            self._types.setdefault(t.name, t.data_type)

    def _note_output_types(self, node: onnx.NodeProto) -> None:
        """Types shape inference left out: Cast's ``to``, CastLike's target, else input 0's."""
        for name in node.output:
            if not name or name in self._types:
                continue
            if node.op_type == "Cast":
                to = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "to"), None)
                if isinstance(to, int):
                    self._types[name] = to
            elif node.op_type == "CastLike" and len(node.input) > 1 and node.input[1] in self._types:
                self._types[name] = self._types[node.input[1]]
            elif node.op_type in _SAME_TYPE_OPS and node.input and node.input[0] in self._types:
                self._types[name] = self._types[node.input[0]]

    def _parse_array(self, tensor_proto):
        """An initializer; a sub-byte one as its bytes (hetc/narrow.py)."""
        if tensor_proto.data_type in narrow.ONNX_TYPES:
            array = onnx.numpy_helper.to_array(tensor_proto).reshape(tuple(tensor_proto.dims))
            return tvm.runtime.tensor(np.ascontiguousarray(narrow.to_raw(array)))
        return super()._parse_array(tensor_proto)

    def _unify_dims(self, node: onnx.NodeProto) -> None:
        """Inputs of a broadcasting op (dims aligned from the right) whose dims TVM cannot
        match: two different expressions (``min(max(L, 0), L + 1)`` and ``L``), or a symbolic dim against a static one other than 1 (a reshape to a run-time
        shape, then a LayerNorm's scale): the later input is cast to the first's dim, the
        symbolic one to the static one (a ``match_cast``, checked at run time, as onnxruntime
        checks them when it runs). Without it TVM infers no output shape, and nothing after it
        can be legalized."""
        names = [n for n in node.input if n]
        exprs = [self._nodes.get(n) for n in names]
        if len(exprs) < 2 or not all(isinstance(e, relax.Expr) and isinstance(e.ty, relax.TensorType)
                                     and hasattr(e.ty.shape, "values") for e in exprs):
            return
        rank = max(e.ty.ndim for e in exprs)
        skip = None  # Concat: the axis it joins along may differ
        if node.op_type == "Concat":
            axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), None)
            if axis is None or not -rank <= axis < rank or any(e.ty.ndim != rank for e in exprs):
                return
            skip = rank - 1 - (axis % rank)  # counted from the right
        target = [None] * rank  # per axis, from the right: the dim every input must have
        for expr in exprs:
            for i, d in enumerate(reversed(list(expr.ty.shape.values))):
                t = target[i]
                if t is None or (isinstance(t, tvm.tirx.IntImm) and int(t) == 1) or (
                        not isinstance(t, tvm.tirx.IntImm) and isinstance(d, tvm.tirx.IntImm) and int(d) != 1):
                    target[i] = d
        target = [dim_cast.canonical(t) for t in target]  # ``seq``, not ``min(INT64_MAX, seq) - ...``
        for name, expr in zip(names, exprs):
            dims = list(expr.ty.shape.values)
            fixed = [t if _differ(t, d) and len(dims) - 1 - i != skip else d
                     for i, (d, t) in enumerate(zip(dims, reversed(target[:len(dims)])))]
            if any(f is not d for f, d in zip(fixed, dims)):
                self._nodes[name] = dim_cast.cast_dims(self.bb, expr, fixed)

    def _fit_unknown_shapes(self, node: onnx.NodeProto) -> None:
        """Give an output of known rank but unknown shape fresh symbolic dims, and make static
        the dims ONNX infers as static (a ``match_cast`` the VM checks), so that the converters
        after it, which need dims, see them: TVM's
        broadcasting infers no shape from two dims it cannot prove equal (wav2vec2's positional
        conv, ``L + 1`` sliced by one, added to ``L``), nor does a reshape to a run-time shape."""
        for name in node.output:
            expr = self._nodes.get(name) if name else None
            ty = getattr(expr, "ty", None) if isinstance(expr, relax.Expr) else None
            if not isinstance(ty, relax.TensorType) or ty.ndim <= 0:
                continue
            if not hasattr(ty.shape, "values"):
                expr = self._nodes[name] = runtime_values.fit(self.bb, expr, f"{node.op_type.lower()}_dim")
            # A dim ONNX's shape inference knows statically (it propagates the values of shape
            # arithmetic, float steps included) that the conversion left symbolic: a reshape to a
            # run-time shape, as MobileViT's unfold computes it. The cast makes it static.
            inferred = self._inferred.get(name)
            dims = list(expr.ty.shape.values)
            if inferred is None or len(inferred) != len(dims):
                continue
            # ...but not a dim that changes between a loop's iterations: ONNX infers a loop body
            # from the first iteration's state (Mask R-CNN's pasted masks, ``cat(res, mask)``, as
            # ``[1, h, w]`` in every iteration)
            fixed = [tvm.tirx.IntImm("int64", i) if i is not None and not isinstance(d, tvm.tirx.IntImm)
                     and not self._varies(d) else d for d, i in zip(dims, inferred)]
            if any(f is not d for f, d in zip(fixed, dims)):
                self._nodes[name] = self.bb.match_cast(expr, relax.TensorType(fixed, expr.ty.dtype))

    # The symbolic dims of the loop state that change between iterations, while a recursive
    # loop body is converted (ops/control_flow.py sets them).
    varying_dims: frozenset = frozenset()

    def _varies(self, dim) -> bool:
        return bool(self.varying_dims) and any(v in self.varying_dims for v in tvm.tirx.analysis.undefined_vars(dim))

    def known_value(self, name: str) -> np.ndarray | None:
        """The compile-time value of a small integer tensor (ints and symbolic PrimExprs), or None
        (``ConvertContext.known`` for converters)."""
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
            values = [self.known_value(name) if name else None for name in node.input]
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

    def _evaluate_static(self, node: onnx.NodeProto) -> bool:
        """Bind the outputs of a node whose inputs are all small constants (static shape values
        included) to constants, evaluated by ONNX's reference implementation, as ``fold.py``
        does before conversion: float steps of shape arithmetic that depend on a static part of
        a symbolic shape (MobileViT's ``ceil(h / patch) * patch`` from ``Shape(x)[2]``, with a
        symbolic batch), which ``symbolic`` (integers only) does not evaluate."""
        if node.domain not in registry.DEFAULT_DOMAINS or node.op_type in fold.NONDETERMINISTIC or any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return False
        known = {}
        for name in node.input:
            if not name:
                continue
            expr = self._nodes.get(name)
            if not isinstance(expr, tvm.ir.GenericConst):
                value = self._known.get(name)
                if value is None or not symbolic.is_static(value):
                    return False
                known[name] = np.array([int(v) for v in value.flat], np.int64).reshape(value.shape)
                continue
            known[name] = expr.value.numpy()
        if not known or any(v.size > symbolic.MAX_ELEMENTS for v in known.values()):
            return False
        outputs = fold.evaluate_node(node, known, self.opset)
        if outputs is None or any(np.asarray(o).size > symbolic.MAX_ELEMENTS for o in outputs):
            return False
        for name, value in zip(node.output, outputs):
            value = np.asarray(value)
            if not name:
                continue
            const = relax.const(value, str(value.dtype))
            self._nodes[name] = const
            integer = symbolic.known(value)
            if integer is not None:
                self._known[name] = integer
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
            onnx_node = getattr(self, "_node_now", None)
            types = tuple(self._types.get(n, 0) if n else 0 for n in onnx_node.input) if onnx_node else ()
            ctx = registry.ConvertContext(self.bb, node, op_name, opset, custom.get("num_outputs", 1), types,
                                          importer=self)
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
            raise ConversionError(f"node '{node}' ({op_name}): {first_line(err)}") from err


# Ops whose inputs broadcast (numpy rules; a LayerNorm's scale and bias against the input's last
# dims) or must agree (Concat, but on its axis), whose inputs' dims ``_unify_dims`` checks.
_BROADCASTING = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Equal", "Less",
                 "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where", "PRelu",
                 "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "LayerNormalization", "Concat"}


def _differ(target, dim) -> bool:
    """``dim`` must be cast to ``target``: ``dim`` is symbolic and not the same expression as
    ``target`` (a symbolic dim, or a static one other than 1). Expressions equal over the dims'
    ranges are cast too: TVM's shape inference does not know the ranges."""
    if isinstance(dim, tvm.tirx.IntImm) or (isinstance(target, tvm.tirx.IntImm) and int(target) == 1):
        return False
    return not runtime_values.same_dim(target, dim)


# Ops whose output has input 0's element type (for ``_note_output_types``).
_SAME_TYPE_OPS = {"Identity", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Pad", "Slice",
                  "Gather", "Concat", "Expand", "Tile", "Split"}

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


def to_relax(model: LoadedModel, value_shapes: dict | None = None) -> tvm.IRModule:
    """Convert a loaded model to a Relax IRModule with weights as constants; each symbolic
    input dim is one int64 TIR variable of its name, known to lie in its declared range.

    ``value_shapes``, if given, receives the static shape and dtype the conversion found for
    each ONNX value, ``name -> (shape, dtype)``: shape computations that ONNX's own inference
    cannot follow (``Shape -> Gather -> Concat`` after the inputs were fixed) come out static
    here (``--pp`` cuts the ONNX graph with them)."""
    symbols = {name: tvm.tirx.Var(name, "int64") for name in model.dims}
    for name, (low, high) in model.dims.items():
        symbolic.declare(symbols[name], low, high)
    shapes = {spec.name: [symbols[d] if isinstance(d, str) else d for d in spec.shape] for spec in model.inputs}
    dtypes = {spec.name: narrow.container(spec.dtype) for spec in model.inputs}
    importer = HetcGraphImporter(shapes, dtypes, keep_params_in_input=False, sanitize=True)
    # TVM prints the failing node to stdout before re-raising and warns on every renamed
    # input; hetc reports both itself.
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            mod = importer.from_onnx(model.proto.graph, model.opset)
        except Exception as err:
            del importer
            release_frames(err)
            if isinstance(err, HetcError):
                raise
            raise ConversionError(f"{model.name}: conversion to Relax failed: {first_line(err)}") from err
    if value_shapes is not None:
        value_shapes.update(_static_values(importer._nodes))
    if sum(isinstance(f, relax.Function) for f in mod.functions.values()) > 1:
        # the functions control flow made (ops/control_flow.py), and a main with an If, bind
        # outside dataflow blocks: put their pure runs in some, so that they are fused too
        mod = _closed(mod, relax.transform.ConvertToDataflow()(mod))
    check_outputs(mod, model)
    narrow_dims(mod, model)
    return mod


def _closed(before: tvm.IRModule, after: tvm.IRModule) -> tvm.IRModule:
    """``after`` with each function that a pass left using variables it does not bind put back
    as it was ``before``. TVM 0.27's ConvertToDataflow does that to a ``match_cast`` of a tensor
    whose shape is a shape variable (Mask R-CNN's paste_masks Loop body: ``ConstantOfShape`` of a
    run-time shape): the function would fail later with no shape to legalize."""
    for gv, func in list(after.functions.items()):
        if isinstance(func, relax.Function) and relax.analysis.free_vars(func):
            after[gv] = before[gv]
    return after


def _pairs(call: relax.Call) -> list[tuple]:
    """Dims an op takes to be equal without checking them (a matmul's reduction lengths, a
    conv's input channels): (dim, dim) pairs, ints or PrimExprs."""
    def shape(i):
        ty = call.args[i].ty
        return list(ty.shape.values) if isinstance(ty, relax.TensorType) and isinstance(
            ty.shape, relax.ShapeExpr) else None

    name = call.op.name if isinstance(call.op, tvm.ir.Op) else ""
    if name == "relax.matmul":
        a, b = shape(0), shape(1)
        if a and b:
            return [(a[-1], b[-2] if len(b) > 1 else b[0])]
    elif name in ("relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d") and call.attrs.data_layout.startswith("NC"):
        data, weight = shape(0), shape(1)
        if data and weight and isinstance(weight[1], tvm.tirx.IntImm):
            return [(data[1], tvm.tirx.IntImm("int64", int(weight[1]) * int(call.attrs.groups)))]
    return []


def narrow_dims(mod: tvm.IRModule, model: LoadedModel) -> None:
    """A symbolic input dim the graph uses where only one size works (a matmul reducing it
    against a static length, a conv taking it as its channels) gets that size as its range
    (``model.dims``, hence the manifest's), so that a run with another size is refused before
    it reads out of bounds; a CompileError where the declared range does not contain it."""
    pairs: list[tuple] = []

    def visit(expr) -> None:
        if isinstance(expr, relax.Call):
            pairs.extend(_pairs(expr))

    relax.analysis.post_order_visit(mod["main"], visit)
    for a, b in pairs:
        for var, size in ((a, b), (b, a)):
            if isinstance(var, tvm.tirx.Var) and var.name in model.dims and isinstance(size, tvm.tirx.IntImm):
                low, high = model.dims[var.name]
                if not low <= int(size) <= high:
                    raise CompileError(f"{model.name}: symbolic dim '{var.name}' must be {int(size)} (an op reduces "
                                       f"or convolves it against a static size {int(size)}), but its range is "
                                       f"{low}..{high}")
                model.dims[var.name] = (int(size), int(size))


def check_outputs(mod: tvm.IRModule, model: LoadedModel) -> None:
    """A CompileError where the converted ``main`` returns another dtype or static shape than the
    output specs (the manifest's) say: an artifact must not describe its outputs wrongly."""
    ret = mod["main"].ret_ty
    results = list(ret.fields) if isinstance(ret, relax.TupleType) else [ret]
    if len(results) != len(model.outputs):
        raise CompileError(f"{model.name}: the converted graph returns {len(results)} value(s), the model "
                           f"declares {len(model.outputs)} output(s)")
    for spec, result in zip(model.outputs, results):
        if not isinstance(result, relax.TensorType):
            continue
        dims = None
        if isinstance(result.shape, relax.ShapeExpr):
            dims = [int(v) if isinstance(v, tvm.tirx.IntImm) else None for v in result.shape.values]
        if str(result.dtype) not in ("", narrow.container(spec.dtype)):
            problem = f"dtype {result.dtype}, the model says {spec.dtype}"
        elif dims is not None and (len(dims) != len(spec.shape) or any(
                isinstance(a, int) and b is not None and a != b for a, b in zip(spec.shape, dims))):
            problem = (f"shape [{', '.join('?' if d is None else str(d) for d in dims)}], the model says "
                       f"[{', '.join(str(d) for d in spec.shape)}]")
        else:
            continue
        raise CompileError(f"{model.name}: output '{spec.name}' is computed with {problem}; hetc does not "
                           "write an artifact that describes its outputs wrongly")


def _static_values(nodes: dict) -> dict:
    """``name -> (shape, dtype)`` for the importer's values of static tensor or shape type."""
    out = {}
    for name, expr in nodes.items():
        ty = getattr(expr, "ty", None)
        if isinstance(ty, relax.TensorType) and ty.shape is not None:
            try:
                out[name] = (tuple(int(d) for d in ty.shape), str(ty.dtype))
            except TypeError:  # symbolic
                continue
        elif isinstance(ty, relax.ShapeType) and ty.ndim >= 0:
            out[name] = ((int(ty.ndim),), "int64")
    return out
