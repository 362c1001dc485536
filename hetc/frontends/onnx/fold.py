"""Folding shape computations at the ONNX level, before conversion.

Exporters and ONNX function bodies compute shapes, axes and pads at run time: ``Shape ->
Gather -> Unsqueeze -> Concat -> Reshape``. With every input shape bound those values are
constants, but TVM's converters only accept constants there ("Only constant axes currently
supported", "Reshape requires the input new shape to be Shape"). This pass replaces

- ``Shape`` / ``Size`` of a tensor whose inferred shape is static, and
- any deterministic default-domain node whose inputs are all constants and whose outputs
  are integer or bool tensors (shape arithmetic)

with initializers, evaluated by ONNX's reference implementation. Float computations are
left to the graph passes (``FoldConstant``), so numerics stay on one path; where a float step
of shape arithmetic decides a shape (``int(sqrt(n))``), the importer evaluates it
(``HetcGraphImporter._evaluate_static``).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

# Ops whose outputs are not a function of their inputs alone.
NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                    "Bernoulli", "Dropout"}
_MAX_ELEMENTS = 1 << 16  # shape arithmetic is small; bigger integer tensors stay runtime values


def _static_shape(value: onnx.ValueInfoProto | None) -> tuple[int, ...] | None:
    if value is None or not value.type.tensor_type.HasField("shape"):
        return None
    dims = value.type.tensor_type.shape.dim
    if any(not d.HasField("dim_value") for d in dims):
        return None
    return tuple(d.dim_value for d in dims)


def _is_integer(value: onnx.ValueInfoProto | None) -> bool:
    if value is None or not value.type.HasField("tensor_type"):
        return False
    dtype = helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
    return np.dtype(dtype).kind in "iub"


def _shape_value(node: onnx.NodeProto, shape: tuple[int, ...]) -> np.ndarray:
    if node.op_type == "Size":
        return np.array(int(np.prod(shape)), np.int64)
    attrs = {a.name: a.i for a in node.attribute}
    rank = len(shape)
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    start, end = (max(0, min(rank, i + rank if i < 0 else i)) for i in (start, end))
    return np.array(shape[start:end], np.int64)


def _result_size(node: onnx.NodeProto, known: dict[str, np.ndarray], infos: dict) -> int | None:
    """How many elements ``node``'s largest output has, from its inferred shape or, for the ops
    that make a tensor of a size their input values give, from those values; None if unknown."""
    sizes = [_static_shape(infos.get(o)) for o in node.output if o]
    if sizes and all(s is not None for s in sizes):
        return max(int(np.prod(s, dtype=object)) for s in sizes)
    values = [known[n] for n in node.input if n]
    try:
        if node.op_type == "ConstantOfShape":
            return int(np.prod(values[0].astype(object)))
        if node.op_type == "Expand":
            shape = np.broadcast_shapes(values[0].shape, tuple(int(d) for d in values[1]))
            return int(np.prod(shape, dtype=object))
        if node.op_type == "Tile":
            return int(np.prod(np.array(values[0].shape, object) * values[1].astype(object)))
        if node.op_type == "Range":
            start, limit, delta = (v.item() for v in values[:3])
            return max(0, int(np.ceil((limit - start) / delta))) if delta else None
    except (ValueError, TypeError, IndexError, OverflowError, ZeroDivisionError):
        return None
    return 0  # bounded by its inputs' sizes


def evaluate_node(node: onnx.NodeProto, known: dict[str, np.ndarray], opset: int) -> list[np.ndarray] | None:
    inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(known[name].dtype), None)
              for name in node.input if name]
    outputs = [helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None)
               for name in node.output if name]
    graph = helper.make_graph([node], "fold", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        return ReferenceEvaluator(model).run(None, {n: known[n] for n in node.input if n})
    except Exception:  # noqa: BLE001 - not foldable here; the converter sees the node as is
        return None


def fold_shape_computations(model: onnx.ModelProto, opset: int) -> int:
    """Fold in place (``model`` must have inferred shapes); returns how many nodes were folded."""
    graph = model.graph
    infos = {v.name: v for v in [*graph.value_info, *graph.input, *graph.output]}
    known = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    graph_outputs = {v.name for v in graph.output}
    kept, folded = [], 0
    for node in graph.node:
        values = None
        has_subgraph = any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                           for a in node.attribute)
        if node.domain not in ("", "ai.onnx") or has_subgraph or node.op_type in NONDETERMINISTIC:
            pass
        elif node.op_type in ("Shape", "Size") and (shape := _static_shape(infos.get(node.input[0]))) is not None:
            values = [_shape_value(node, shape)]
        elif (all(name in known for name in node.input if name)
              and all(known[n].size <= _MAX_ELEMENTS for n in node.input if n)
              and (size := _result_size(node, known, infos)) is not None and size <= _MAX_ELEMENTS
              and all(_is_integer(infos.get(o)) for o in node.output if o)):
            values = evaluate_node(node, known, opset)
        if values is None or any(o in graph_outputs for o in node.output):
            kept.append(node)
            continue
        for name, value in zip([o for o in node.output if o], values):
            known[name] = np.asarray(value)
            graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        folded += 1
    del graph.node[:]
    graph.node.extend(kept)
    return folded
