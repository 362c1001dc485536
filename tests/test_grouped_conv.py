"""Grouped conv2d: as one conv2d per group (hetc/passes/grouped_conv.py, for targets without a
grouped kernel and for wide groups) and as the CPU's one grouped kernel
(hetc/backends/cpu/grouped_conv.py: groups a batch axis, narrow groups merged block-diagonally):
ResNeXt/RegNet shapes, strides, dilation, bias, a symbolic batch, AVX2 and AVX-512 code,
against onnxruntime; depthwise and very many groups are left as they were."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from onnx import TensorProto, helper, numpy_helper

import hetc
from hetc.backends.cpu import grouped_conv as cpu_grouped
from hetc.frontends.onnx import load_model, to_relax
from hetc.passes.grouped_conv import MAX_GROUPS, split_grouped_conv_pass
from hetc.passes.pipeline import relax_op_counts

RNG = np.random.default_rng(1)


def _grouped(cin, cout, groups, kernel=3, weight_input=False, relu=False, **attrs):
    w = (RNG.standard_normal((cout, cin // groups, kernel, kernel)) * 0.2).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", cin, 12, 12])]
    if weight_input:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape)))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if relu else "y"], group=groups, **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    graph = helper.make_graph(
        nodes, "gconv", inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", cout, "h", "w"])],
        [numpy_helper.from_array(b, "b")] + ([] if weight_input else [numpy_helper.from_array(w, "w")]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("cin,cout,groups,attrs", [
    (16, 16, 4, {"pads": [1, 1, 1, 1]}),  # RegNet: group width 4
    (32, 64, 8, {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # ResNeXt's strided 3x3, width x2
    (12, 6, 3, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    (8, 8, 2, {}),
])
def test_split_grouped_conv_matches_onnxruntime(cin, cout, groups, attrs, monkeypatch):
    model = _grouped(cin, cout, groups, **attrs)
    counts = relax_op_counts(split_grouped_conv_pass()(to_relax(load_model(model))))
    assert counts["relax.nn.conv2d"] == groups and counts["relax.concat"] == 1
    monkeypatch.setattr(cpu_grouped, "MIN_SPLIT_WIDTH", 1)  # every grouped conv split on the CPU too
    compiled = hetc.compile(model, "cpu")
    assert not any("grouped" in name for name in compiled.report["kernels"])
    for n in (1, 3):
        x = {"x": RNG.standard_normal((n, cin, 12, 12)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


@pytest.mark.parametrize("cin,groups", [(8, 8), (2 * (MAX_GROUPS + 1), MAX_GROUPS + 1)])
def test_depthwise_and_very_many_groups_are_left_alone(cin, groups):
    model = _grouped(cin, cin, groups, pads=[1, 1, 1, 1])
    assert relax_op_counts(split_grouped_conv_pass()(to_relax(load_model(model))))["relax.nn.conv2d"] == 1


@pytest.mark.parametrize("cin, multiplier, attrs", [
    (16, 2, {"kernel": 3, "pads": [1, 1, 1, 1], "strides": [2, 2]}),  # timm PiT's pooling conv
    (8, 3, {"kernel": 3, "pads": [1, 1, 1, 1]}),
])
def test_depthwise_with_a_channel_multiplier_runs_as_depthwise(cin, multiplier, attrs):
    """``groups == in_channels`` with ``m`` outputs per channel: the input's channels repeated,
    then a plain depthwise conv on one of hetc's kernels (it was TVM's generic loop nest)."""
    model = _grouped(cin, cin * multiplier, cin, **attrs)
    counts = relax_op_counts(split_grouped_conv_pass()(to_relax(load_model(model))))
    assert counts["relax.repeat"] == 1 and counts["relax.nn.conv2d"] == 1
    compiled = hetc.compile(model, "cpu")
    rules = [r for n, r in compiled.report["kernels"].items() if "conv2d" in n]
    assert rules and "generic" not in rules, compiled.report["kernels"]
    for n in (1, 2):
        x = {"x": RNG.standard_normal((n, cin, 12, 12)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


@pytest.mark.parametrize("cpu", [None, "haswell"])
@pytest.mark.parametrize("cin,cout,groups,attrs", [
    (24, 24, 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # RegNet: 8 a group (merged on AVX-512)
    (32, 32, 8, {"pads": [1, 1, 1, 1]}),  # ResNeXt: 4 a group (merged)
    (38, 38, 19, {"pads": [1, 1, 1, 1]}),  # 19 groups (prime: no merge) of 2
    (48, 96, 3, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),  # 32 outputs a group
    (64, 64, 2, {"kernel": 1}),  # a grouped 1x1
])
def test_grouped_conv_is_one_kernel(cin, cout, groups, attrs, cpu):
    """The CPU's grouped kernel: one call for the layer, on the contraction rule (with the bias
    and ReLU), equal to onnxruntime at two batch sizes, on AVX-512 and AVX2 (8 lanes) code."""
    model = _grouped(cin, cout, groups, relu=True, **attrs)
    compiled = hetc.compile(model, "cpu", cpu=cpu)
    grouped = {name: rule for name, rule in compiled.report["kernels"].items() if "grouped_conv2d" in name}
    assert len(grouped) == 1 and set(grouped.values()) == {"contraction"}, compiled.report["kernels"]
    assert "relu" in next(iter(grouped))
    for n in (1, 3):
        x = {"x": RNG.standard_normal((n, cin, 12, 12)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


def test_grouped_conv_with_a_runtime_weight():
    """A weight that is a graph input (no compile-time merge): the same kernel, by group."""
    model = _grouped(16, 16, 4, weight_input=True, pads=[1, 1, 1, 1])
    compiled = hetc.compile(model, "cpu")
    assert any("grouped_conv2d" in name for name in compiled.report["kernels"])
    w = (RNG.standard_normal((16, 4, 3, 3)) * 0.2).astype(np.float32)
    for n in (1, 2):
        x = {"x": RNG.standard_normal((n, 16, 12, 12)).astype(np.float32), "w": w}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


def test_wide_groups_are_split_not_merged():
    """Groups of MIN_SPLIT_WIDTH input channels or more: split into plain convs on the CPU."""
    width = cpu_grouped.MIN_SPLIT_WIDTH
    model = _grouped(2 * width, 2 * width, 2, kernel=1)
    compiled = hetc.compile(model, "cpu")
    assert not any("grouped" in name for name in compiled.report["kernels"])
    x = {"x": RNG.standard_normal((2, 2 * width, 12, 12)).astype(np.float32)}
    assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


@pytest.mark.parametrize("groups,per_group,lanes,merge", [(46, 8, 16, 2), (32, 4, 16, 4), (32, 4, 8, 2),
                                                          (19, 8, 16, 1), (3, 8, 16, 1), (8, 32, 16, 1)])
def test_merged_groups(groups, per_group, lanes, merge):
    assert cpu_grouped.merged_groups(groups, per_group, lanes) == merge


def test_block_diagonal_weight_computes_the_same_conv():
    """Merging groups: each merged group's weight is block-diagonal, so the grouped product of
    the merged weight equals the original (checked as matrices: outputs x inputs per tap)."""
    groups, per_group, width, merge = 6, 3, 2, 3
    weight = RNG.standard_normal((groups * per_group, 3, 3, width)).astype(np.float32)
    merged = cpu_grouped.block_diagonal(weight, groups, merge)
    assert merged.shape == (groups // merge, merge * per_group, 3, 3, merge * width)
    x = RNG.standard_normal(groups * width).astype(np.float32)  # one input pixel, all channels
    want = np.concatenate([weight[g * per_group:(g + 1) * per_group, 1, 2] @ x[g * width:(g + 1) * width]
                           for g in range(groups)])
    got = np.concatenate([merged[m, :, 1, 2] @ x[m * merge * width:(m + 1) * merge * width]
                          for m in range(groups // merge)])
    np.testing.assert_allclose(got, want, rtol=1e-6)
