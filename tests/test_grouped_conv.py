"""A grouped conv2d as one conv2d per group (hetc/passes/grouped_conv.py): ResNeXt/RegNet
shapes, strides, dilation, bias, a symbolic batch, against onnxruntime; depthwise and very
many groups are left as they were."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from onnx import TensorProto, helper, numpy_helper

import hetc
from hetc.frontends.onnx import load_model, to_relax
from hetc.passes.grouped_conv import MAX_GROUPS, split_grouped_conv_pass
from hetc.passes.pipeline import relax_op_counts

RNG = np.random.default_rng(1)


def _grouped(cin, cout, groups, kernel=3, **attrs):
    w = (RNG.standard_normal((cout, cin // groups, kernel, kernel)) * 0.2).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=groups, **attrs)], "gconv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", cin, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", cout, "h", "w"])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("cin,cout,groups,attrs", [
    (16, 16, 4, {"pads": [1, 1, 1, 1]}),  # RegNet: group width 4
    (32, 64, 8, {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # ResNeXt's strided 3x3, width x2
    (12, 6, 3, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    (8, 8, 2, {}),
])
def test_grouped_conv_matches_onnxruntime(cin, cout, groups, attrs):
    model = _grouped(cin, cout, groups, **attrs)
    counts = relax_op_counts(split_grouped_conv_pass(to_relax(load_model(model))))
    assert counts["relax.nn.conv2d"] == groups and counts["relax.concat"] == 1
    compiled = hetc.compile(model, "cpu")
    for n in (1, 3):
        x = {"x": RNG.standard_normal((n, cin, 12, 12)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


@pytest.mark.parametrize("cin,groups", [(8, 8), (2 * (MAX_GROUPS + 1), MAX_GROUPS + 1)])
def test_depthwise_and_very_many_groups_are_left_alone(cin, groups):
    model = _grouped(cin, cin, groups, pads=[1, 1, 1, 1])
    assert relax_op_counts(split_grouped_conv_pass(to_relax(load_model(model))))["relax.nn.conv2d"] == 1


@pytest.mark.parametrize("cin, multiplier, attrs", [
    (16, 2, {"kernel": 3, "pads": [1, 1, 1, 1], "strides": [2, 2]}),  # timm PiT's pooling conv
    (8, 3, {"kernel": 3, "pads": [1, 1, 1, 1]}),
])
def test_depthwise_with_a_channel_multiplier_runs_as_depthwise(cin, multiplier, attrs):
    """``groups == in_channels`` with ``m`` outputs per channel: the input's channels repeated,
    then a plain depthwise conv on one of hetc's kernels (it was TVM's generic loop nest)."""
    model = _grouped(cin, cin * multiplier, cin, **attrs)
    counts = relax_op_counts(split_grouped_conv_pass(to_relax(load_model(model))))
    assert counts["relax.repeat"] == 1 and counts["relax.nn.conv2d"] == 1
    compiled = hetc.compile(model, "cpu")
    rules = [r for n, r in compiled.report["kernels"].items() if "conv2d" in n]
    assert rules and "generic" not in rules, compiled.report["kernels"]
    for n in (1, 2):
        x = {"x": RNG.standard_normal((n, cin, 12, 12)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)
