"""Ops expanded into their ONNX function bodies (hetc/frontends/onnx/functions.py), and float
max/min reductions that start from -inf/+inf (passes/phases.py), which that body relies on."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_util import IR_VERSION, tensor

import hetc


def test_flex_attention_with_score_mod_is_expanded():
    """ai.onnx.preview FlexAttention (no converter) runs as its function body, its score_mod
    subgraph (a causal -inf mask, so a row's max is -inf nowhere) inlined."""
    mask = np.triu(np.full((3, 3), -np.inf, np.float32), 1).reshape(1, 1, 3, 3)
    score_mod = helper.make_graph(
        [helper.make_node("Add", ["scores", "mask"], ["out"])], "causal",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["B", "H", "L", "S"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["B", "H", "L", "S"])],
        [helper.make_tensor("mask", TensorProto.FLOAT, mask.shape, mask.ravel())])
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview",
                            score_mod=score_mod, scale=0.3)
    graph = helper.make_graph([node], "flex", [tensor("Q", [1, 4, 3, 8]), tensor("K", [1, 2, 3, 8]),
                                               tensor("V", [1, 2, 3, 5])], [tensor("Y", [1, 4, 3, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26),
                                                    helper.make_opsetid("ai.onnx.preview", 1)])
    model.ir_version = IR_VERSION
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in
             (("Q", (1, 4, 3, 8)), ("K", (1, 2, 3, 8)), ("V", (1, 2, 3, 5)))}
    got = hetc.compile(model).run(feeds)["Y"]
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_reduce_max_min_of_infinities():
    """A row of -inf has max -inf (TVM's reduction started from the lowest finite float)."""
    x = np.array([[-np.inf, -np.inf, -np.inf], [1.0, -np.inf, 2.0], [np.inf, np.inf, np.inf]], np.float32)
    nodes = [helper.make_node("ReduceMax", ["x", "axes"], ["mx"], keepdims=0),
             helper.make_node("ReduceMin", ["x", "axes"], ["mn"], keepdims=1)]
    graph = helper.make_graph(nodes, "r", [tensor("x", [3, 3])], [tensor("mx", [3]), tensor("mn", [3, 1])],
                              [helper.make_tensor("axes", TensorProto.INT64, [1], [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = IR_VERSION
    got = hetc.compile(model).run({"x": x})
    want = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(got["mx"], want[0])
    np.testing.assert_array_equal(got["mn"], want[1])
