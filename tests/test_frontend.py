"""ONNX frontend: example models and hetc's converters against onnxruntime; registry rules."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import assert_close, ort_run
from onnx import helper
from onnx_util import make, tensor

import hetc
from hetc.errors import ConversionError, UnsupportedOpError, UsageError
from hetc.frontends.onnx import registry
from hetc.frontends.onnx.importer import converter_source, supported_ops


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_example_models_match_onnxruntime(examples, name):
    inputs = dict(np.load(examples / f"{name}_inputs.npz"))
    compiled = hetc.compile(examples / f"{name}.onnx", target="cpu")
    outputs = compiled.run(inputs)
    for actual, expected in zip(outputs.values(), ort_run(examples / f"{name}.onnx", inputs), strict=True):
        assert_close(actual, expected)


def _layer_norm_model(shape, axis, scale_shape, outputs=1, stash_type=None, bias=True):
    rng = np.random.default_rng(1)
    attrs = {"axis": axis, "epsilon": 1e-3}
    if stash_type is not None:
        attrs["stash_type"] = stash_type
    names = ["y", "mean", "inv_std"][:outputs]
    node = helper.make_node("LayerNormalization", ["x", "scale"] + (["bias"] if bias else []), names,
                            name="ln", **attrs)
    inits = {"scale": rng.uniform(0.5, 1.5, scale_shape).astype(np.float32)}
    if bias:
        inits["bias"] = rng.normal(0, 1, scale_shape).astype(np.float32)
    ax = axis % len(shape)
    stat_shape = list(shape[:ax]) + [1] * (len(shape) - ax)
    outs = [tensor("y", shape), tensor("mean", stat_shape), tensor("inv_std", stat_shape)][:outputs]
    return make([node], [tensor("x", shape)], outs, inits)


@pytest.mark.parametrize(("shape", "axis", "scale_shape", "outputs", "bias"), [
    ((2, 3, 8), -1, (8,), 1, True),  # fast path: relax.nn.layer_norm
    ((2, 3, 8), 1, (3, 8), 1, True),  # several normalized axes
    ((2, 3, 8), -2, (1, 8), 1, False),  # broadcast scale, no bias
    ((2, 3, 8), -1, (8,), 3, True),  # Mean and InvStdDev outputs (TVM returns placeholders)
    ((4, 5), 0, (4, 5), 3, True),  # axis 0: mean over everything
])
def test_layer_normalization_matches_onnxruntime(shape, axis, scale_shape, outputs, bias):
    model = _layer_norm_model(shape, axis, scale_shape, outputs, bias=bias)
    x = np.random.default_rng(0).normal(3, 2, shape).astype(np.float32)  # offset mean: catches centering bugs
    got = hetc.compile(model).run({"x": x})
    expected = ort_run(model, {"x": x})
    assert len(got) == outputs
    for actual, ref in zip(got.values(), expected, strict=True):
        assert_close(actual, ref)


def test_layer_normalization_rejects_unknown_stash_type():
    model = _layer_norm_model((2, 8), -1, (8,), stash_type=7)
    with pytest.raises(ConversionError, match=r"node 'ln' \(LayerNormalization\).*stash_type=7"):
        hetc.compile(model)


def test_hetc_converter_overrides_tvm_and_others_fall_back():
    assert converter_source("LayerNormalization", 17) == "hetc"
    assert converter_source("LayerNormalization", 16) is None  # ONNX defines it from opset 17
    assert converter_source("Attention", 23) != "tvm"  # TVM's entry is com.microsoft's Attention
    assert converter_source("Gelu", 19) is None and converter_source("Gelu", 20) == "tvm"
    assert converter_source("Conv", 17) == "hetc"  # SAME auto_pad; other Convs return NotImplemented to TVM's
    assert converter_source("MaxPool", 17) == "tvm"
    assert converter_source("NoSuchOp", 17) is None
    table = supported_ops(17)
    assert table["LayerNormalization"] == "hetc" and table["Relu"] == "tvm"


def test_registry_picks_newest_version_not_after_opset():
    calls = []
    try:
        registry.converter("HetcTestOp", since=5)(lambda ctx, i, a: calls.append(5))
        registry.converter("HetcTestOp", since=11)(lambda ctx, i, a: calls.append(11))
        assert registry.lookup("HetcTestOp", 4) is None
        assert registry.lookup("HetcTestOp", 10).since == 5
        assert registry.lookup("HetcTestOp", 11).since == 11
        assert registry.lookup("HetcTestOp", 20).since == 11
        with pytest.raises(ValueError, match="registered twice"):
            registry.converter("HetcTestOp", since=11)(lambda ctx, i, a: None)
    finally:
        registry._CONVERTERS.pop("HetcTestOp", None)


def test_unread_attribute_fails_conversion():
    """A converter that ignores an attribute must not silently succeed."""
    from tvm import relax

    from hetc.frontends.onnx import to_relax
    from hetc.frontends.onnx.loader import LoadedModel, TensorSpec

    registry.converter("Relu", since=14)(lambda ctx, inputs, attrs: relax.op.nn.relu(inputs[0]))
    try:
        node = helper.make_node("Relu", ["x"], ["y"], name="r")
        node.attribute.append(helper.make_attribute("surprise", 1))
        model = make([node], [tensor("x", (2, 2))], [tensor("y", (2, 2))])
        # The checker would reject the unknown attribute first; convert directly.
        loaded = LoadedModel(model, "test", 17, [TensorSpec("x", (2, 2), "float32")],
                             [TensorSpec("y", (2, 2), "float32")])
        with pytest.raises(ConversionError, match=r"node 'r' \(Relu\): attribute\(s\) surprise not handled"):
            to_relax(loaded)
    finally:
        registry._CONVERTERS.pop("Relu", None)


def test_all_unsupported_ops_reported_at_once():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("FancyOp", ["a"], ["b"], domain="acme"),
             helper.make_node("Frobnicate", ["b"], ["y"])]
    model = make(nodes, [tensor("x", (2,))], [tensor("y", (2,))])
    model.opset_import.append(helper.make_opsetid("acme", 1))
    with pytest.raises(UnsupportedOpError) as info:
        hetc.compile(model)
    assert info.value.ops == ["Frobnicate", "acme::FancyOp"]
    assert "Frobnicate" in str(info.value) and "acme::FancyOp" in str(info.value)


def test_unsupported_op_inside_if_branch_is_found():
    branch = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["z"])], "b", [],
                               [tensor("z", (2,))])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
    model = make([node], [tensor("c", (), np.bool_), tensor("x", (2,))], [tensor("y", (2,))])
    with pytest.raises(UnsupportedOpError, match="Frobnicate"):
        hetc.compile(model)


def _dynamic_mlp():
    w = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    return make([node], [tensor("x", ("batch", 8))], [tensor("y", ("batch", 4))], {"w": w}), w


def test_input_shapes_bind_dynamic_dims():
    model, w = _dynamic_mlp()
    compiled = hetc.compile(model, input_shapes={"x": (3, 8)})
    assert compiled.manifest.inputs[0].shape == (3, 8)
    assert compiled.manifest.outputs[0].shape == (3, 4)
    x = np.random.default_rng(1).normal(size=(3, 8)).astype(np.float32)
    assert_close(compiled.run({"x": x})["y"], x @ w)


@pytest.mark.parametrize(("shapes", "error", "match"), [
    ({"x": (3,)}, UsageError, "rank 2"),
    ({"x": (3, 9)}, UsageError, "fixed to 8"),
    ({"nope": (1, 8)}, UsageError, "unknown input"),
    ({"x": (-1, 8)}, UsageError, "negative"),
])
def test_bad_input_shapes_are_rejected(shapes, error, match):
    model, _ = _dynamic_mlp()
    with pytest.raises(error, match=match):
        hetc.compile(model, input_shapes=shapes)


def test_integer_and_bool_io_round_trip():
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Greater", ["s", "b"], ["g"])]
    model = make(nodes, [tensor("a", (5,), np.int64), tensor("b", (5,), np.int64)],
                 [tensor("s", (5,), np.int64), tensor("g", (5,), np.bool_)])
    a, b = np.array([-3, 0, 2, 7, -1], np.int64), np.array([1, 1, -2, 0, 0], np.int64)
    got = hetc.compile(model).run({"a": a, "b": b})
    np.testing.assert_array_equal(got["s"], a + b)
    np.testing.assert_array_equal(got["g"], (a + b) > b)
    assert got["g"].dtype == np.bool_


def test_model_proto_is_not_modified(examples):
    model = onnx.load(examples / "mlp.onnx")
    before = model.SerializeToString()
    hetc.compile(model)
    assert model.SerializeToString() == before


def test_shape_output_is_an_int64_tensor():
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Shape", ["x"], ["t"], start=1)]
    model = make(nodes, [tensor("x", (2, 3, 4))], [tensor("s", (3,), np.int64), tensor("t", (2,), np.int64)])
    got = hetc.compile(model).run({"x": np.zeros((2, 3, 4), np.float32)})
    np.testing.assert_array_equal(got["s"], np.array([2, 3, 4], np.int64))
    np.testing.assert_array_equal(got["t"], np.array([3, 4], np.int64))
    assert got["s"].dtype == np.int64


def test_data_dependent_output_shape(tmp_path):
    """Unique's output length depends on the values: the manifest records None for that dim."""
    node = helper.make_node("Unique", ["x"], ["y"], sorted=1)
    model = make([node], [tensor("x", (6,))], [tensor("y", ("n",))], opset=17)
    compiled = hetc.compile(model)
    assert compiled.manifest.outputs[0].shape == (None,)
    x = np.array([3, 1, 3, 2, 1, 3], np.float32)
    np.testing.assert_array_equal(compiled.run({"x": x})["y"], ort_run(model, {"x": x})[0])
    reloaded = hetc.load(compiled.save(tmp_path / "u"))
    assert reloaded.manifest.outputs[0].shape == (None,)
    np.testing.assert_array_equal(reloaded.run({"x": x})["y"], [1, 2, 3])
