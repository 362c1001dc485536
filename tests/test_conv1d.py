"""conv1d as conv2d over a height of one (hetc/passes/conv1d.py): audio feature-extractor
shapes, padding, dilation, grouped and depthwise convs (wav2vec2's positional conv), a symbolic
batch and length, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from onnx import TensorProto, helper, numpy_helper

import hetc
from hetc.frontends.onnx import load_model, to_relax
from hetc.passes.conv1d import conv1d_as_conv2d_pass
from hetc.passes.pipeline import relax_op_counts

RNG = np.random.default_rng(2)


def _conv1d(cin, cout, kernel, groups=1, **attrs):
    w = (RNG.standard_normal((cout, cin // groups, kernel)) * 0.2).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=groups, **attrs)], "c1d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", cin, "t"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", cout, "frames"])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("cin,cout,kernel,groups,attrs", [
    (1, 16, 10, 1, {"strides": [5]}),  # wav2vec2's first feature conv
    (16, 16, 3, 1, {"strides": [2]}),
    (8, 12, 3, 1, {"pads": [2, 1], "dilations": [2]}),
    (16, 16, 8, 4, {"pads": [4, 4]}),  # wav2vec2's positional conv: grouped, even kernel
    (8, 8, 3, 8, {"pads": [1, 1]}),  # depthwise
])
def test_conv1d_matches_onnxruntime(cin, cout, kernel, groups, attrs):
    model = _conv1d(cin, cout, kernel, groups, **attrs)
    counts = relax_op_counts(conv1d_as_conv2d_pass(to_relax(load_model(model))))
    assert counts["relax.nn.conv1d"] == 0 and counts["relax.nn.conv2d"] == 1
    compiled = hetc.compile(model, "cpu")
    for n, t in ((1, 40), (3, 57)):
        x = {"x": RNG.standard_normal((n, cin, t)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


@pytest.mark.parametrize("cin,cout,kernel,groups,attrs", [
    (1, 16, 10, 1, {"strides": [5]}),
    (16, 16, 3, 1, {"strides": [2]}),
    (8, 12, 3, 1, {"pads": [2, 1], "dilations": [2]}),
    (16, 16, 8, 4, {"pads": [4, 4]}),
])
def test_symbolic_length_conv1d_gets_a_register_tile(cin, cout, kernel, groups, attrs):
    """Over a symbolic length a conv's output rows are padded to whole tiles through an in-kernel
    im2col copy (``gemm._reindex_windows``); without it pad_einsum refused the windowed read and
    the conv ran TVM's default loop nest ("generic"), 4-10x slower on wav2vec2's extractor (2-core Zen 5, AVX-512)."""
    compiled = hetc.compile(_conv1d(cin, cout, kernel, groups, **attrs), "cpu")
    rules = {name: rule for name, rule in compiled.report["kernels"].items() if "conv" in name}
    assert rules and set(rules.values()) == {"contraction"}, rules
