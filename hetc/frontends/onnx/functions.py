"""Ops without a converter that ONNX defines as a function of other ops are expanded.

Some ONNX ops come with a function body in their schema (``FlexAttention`` of
``ai.onnx.preview``, whose body also inlines its ``score_mod``/``prob_mod`` subgraphs). A node of
such an op that neither hetc nor TVM converts is replaced, before the model is checked, by that
body (built for the node's attributes and input types when the body depends on them), so its
ops are converted one by one. Nodes inside subgraphs are left alone.
"""

from __future__ import annotations

import onnx
import onnx.inliner
from onnx import helper

_DOMAIN = "hetc.expanded"  # the temporary local functions' domain


def _schema(node: onnx.NodeProto, opsets: dict[str, int]):
    domain = "" if node.domain == "ai.onnx" else node.domain
    try:
        schema = onnx.defs.get_schema(node.op_type, opsets.get(domain, 1), domain)
    except onnx.defs.SchemaError:
        return None
    return schema if schema.has_function or schema.has_context_dependent_function else None


def _body(node: onnx.NodeProto, schema, types: dict[str, onnx.TypeProto]) -> onnx.FunctionProto | None:
    if schema.has_function:
        return schema.function_body
    if any(name and name not in types for name in node.input):
        return None  # the body depends on input types shape inference did not give
    raw = schema.get_context_dependent_function(
        node.SerializeToString(), [types[name].SerializeToString() for name in node.input if name])
    function = onnx.FunctionProto()
    function.ParseFromString(raw)
    return function


def expand_unsupported(model: onnx.ModelProto, supported) -> onnx.ModelProto:
    """``model`` with every top-level node that ``supported(domain, op_type)`` rejects and whose
    schema has a function body replaced by that body (the model itself if there is none)."""
    opsets = {o.domain: o.version for o in model.opset_import}
    opsets[""] = opsets.get("", opsets.get("ai.onnx", 1))
    todo = [(i, node, schema) for i, node in enumerate(model.graph.node)
            if not supported(node.domain, node.op_type) and (schema := _schema(node, opsets)) is not None]
    if not todo:
        return model
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - types of inputs only; without them no body is built
        inferred = model
    graph = inferred.graph
    types = {v.name: v.type for v in [*graph.input, *graph.value_info, *graph.output]}
    types.update({t.name: helper.make_tensor_type_proto(t.data_type, list(t.dims)) for t in graph.initializer})
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for i, node, schema in todo:
        body = _body(node, schema, types)
        if body is None:
            continue
        function = onnx.FunctionProto()
        function.CopyFrom(body)
        function.domain, function.name = _DOMAIN, f"{node.op_type}_{i}"
        imports = {o.domain: o.version for o in function.opset_import}
        imports.setdefault("", opsets[""])
        del function.opset_import[:]
        function.opset_import.extend(helper.make_opsetid(d, v) for d, v in imports.items())
        out.functions.append(function)
        target = out.graph.node[i]
        target.domain, target.op_type = _DOMAIN, function.name
        del target.attribute[:]  # the body was built for them (attribute references are kept)
        target.attribute.extend(a for a in node.attribute if a.name in function.attribute)
    if not out.functions:
        return model
    if _DOMAIN not in {o.domain for o in out.opset_import}:
        out.opset_import.append(helper.make_opsetid(_DOMAIN, 1))
    out = onnx.inliner.inline_local_functions(out)
    kept = [o for o in out.opset_import if o.domain != _DOMAIN]
    del out.opset_import[:]
    out.opset_import.extend(kept)
    return out
