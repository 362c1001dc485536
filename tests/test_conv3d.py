"""conv3d as one conv2d over depth-stacked channels (hetc/passes/conv3d.py): strides, padding,
dilation, depth-1 kernels, a symbolic batch (and depth), against onnxruntime; grouped conv3d
is left to TVM."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from onnx import TensorProto, helper, numpy_helper

import hetc
from hetc.frontends.onnx import load_model, to_relax
from hetc.passes.conv3d import conv3d_as_conv2d_pass
from hetc.passes.pipeline import relax_op_counts

RNG = np.random.default_rng(0)


def _conv3d(cin, cout, kernel, depth="d", groups=1, **attrs):
    w = (RNG.standard_normal((cout, cin // groups, *kernel)) * 0.2).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=groups, **attrs)], "c3d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", cin, depth, 9, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", cout, "do", "ho", "wo"])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


CASES = {
    "3x3x3 pad 1": ({"pads": [1] * 6}, (3, 3, 3)),
    "r3d stem 3x7x7 stride 1,2,2": ({"pads": [1, 3, 3, 1, 3, 3], "strides": [1, 2, 2]}, (3, 7, 7)),
    "depth stride 2, asymmetric pads": ({"pads": [0, 1, 1, 2, 1, 0], "strides": [2, 1, 1]}, (3, 3, 3)),
    "dilation 2": ({"pads": [2, 1, 1, 2, 1, 1], "dilations": [2, 1, 1]}, (3, 3, 3)),
    "1x1x1 projection, stride 2": ({"strides": [2, 2, 2]}, (1, 1, 1)),
    "temporal 3x1x1": ({"pads": [1, 0, 0, 1, 0, 0]}, (3, 1, 1)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_conv3d_matches_onnxruntime(case):
    attrs, kernel = CASES[case]
    model = _conv3d(4, 6, kernel, **attrs)
    mod = conv3d_as_conv2d_pass(to_relax(load_model(model)))
    counts = relax_op_counts(mod)
    assert counts["relax.nn.conv3d"] == 0 and counts["relax.nn.conv2d"] == 1
    compiled = hetc.compile(model, "cpu")
    for n, d in ((1, 5), (3, 8)):
        x = {"x": RNG.standard_normal((n, 4, d, 9, 10)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


def test_grouped_conv3d_is_left_alone():
    model = _conv3d(4, 4, (3, 3, 3), depth=5, groups=2, pads=[1] * 6)
    assert relax_op_counts(conv3d_as_conv2d_pass(to_relax(load_model(model))))["relax.nn.conv3d"] == 1
    x = {"x": RNG.standard_normal((2, 4, 5, 9, 10)).astype(np.float32)}
    assert_close(hetc.compile(model, "cpu").run(x)["y"], ort_run(model, x)[0], rel=1e-5)


def test_2plus1d_block_runs_channels_last_without_transposes():
    """A (2+1)-D block (1x3x3 spatial conv, ReLU, 3x1x1 temporal conv, ReLU): in NDHWC both
    convs read views of the activations, so the model's only copies are the two layout
    transposes at its input and output (there were four more a conv in NCDHW)."""
    w1 = (RNG.standard_normal((8, 4, 1, 3, 3)) * 0.2).astype(np.float32)
    w2 = (RNG.standard_normal((6, 8, 3, 1, 1)) * 0.2).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[0, 1, 1, 0, 1, 1]),
         helper.make_node("Relu", ["a"], ["b"]),
         helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 0, 0, 1, 0, 0], strides=[2, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "r2plus1d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 8, 9, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 6, 4, 9, 10])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    compiled = hetc.compile(model, "cpu")
    kernels = compiled.report["kernels"]
    assert sum("conv2d" in name for name in kernels) == 2, kernels
    assert sum("transpose" in name for name in kernels) == 2, kernels
    assert all(rule == "contraction" for name, rule in kernels.items() if "conv2d" in name), kernels
    for n in (1, 2):
        x = {"x": RNG.standard_normal((n, 4, 8, 9, 10)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


def test_conv3d_with_the_nchw_layout_option_still_becomes_a_conv2d():
    """``layout="NCHW"`` keeps ONNX's layouts: conv3d is then rewritten in NCDHW (by the layout
    stage, as the CPU leaves conv3ds to it), never left to TVM's loop nest."""
    model = _conv3d(4, 6, (3, 3, 3), pads=[1] * 6)
    compiled = hetc.compile(model, "cpu", layout="NCHW")
    assert not any("conv3d" in name for name in compiled.report["kernels"]), compiled.report["kernels"]
    x = {"x": RNG.standard_normal((2, 4, 5, 9, 10)).astype(np.float32)}
    assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)
