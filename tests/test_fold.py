"""ONNX-level folding of shape computations, Shape values reaching tensor ops, and
``constant_inputs``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import assert_close, ort_run, run_cli, save
from onnx import helper
from onnx_util import make, tensor

import hetc
from hetc.errors import UsageError
from hetc.frontends.onnx import load_model
from hetc.frontends.onnx.fold import fold_shape_computations


def _dynamic_reshape_model() -> onnx.ModelProto:
    """Flatten the last two dims with a shape computed at run time, as exporters write it."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "ax"], ["d0u"]),
        helper.make_node("Concat", ["d0u", "minus1"], ["new_shape"], axis=0),
        helper.make_node("Reshape", ["x", "new_shape"], ["flat"]),
        helper.make_node("ReduceSum", ["flat", "sum_axes"], ["y"], keepdims=0),  # axes computed too
        helper.make_node("Size", ["x"], ["n"]),
        helper.make_node("Cast", ["n"], ["nf"], to=onnx.TensorProto.FLOAT),
        helper.make_node("Div", ["y", "nf"], ["z"]),
    ]
    inits = {"i0": np.array(0, np.int64), "ax": np.array([0], np.int64), "minus1": np.array([-1], np.int64),
             "sum_axes": np.array([1], np.int64)}
    return make(nodes, [tensor("x", ("batch", 3, 4))], [tensor("z", ("batch",))], inits)


def test_shape_chains_fold_to_constants_and_match_onnxruntime():
    model = _dynamic_reshape_model()
    loaded = load_model(model, {"x": (2, 3, 4)})
    ops = [n.op_type for n in loaded.proto.graph.node]
    # Shape/Gather/Unsqueeze/Concat/Size folded; Cast yields a float, left to FoldConstant
    assert ops == ["Reshape", "ReduceSum", "Cast", "Div"]
    x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype(np.float32)
    got = hetc.compile(model, input_shapes={"x": (2, 3, 4)}).run({"x": x})["z"]
    assert_close(got, ort_run(model, {"x": x})[0])


def test_float_computations_are_not_folded():
    nodes = [helper.make_node("Mul", ["a", "b"], ["c"]), helper.make_node("Add", ["x", "c"], ["y"])]
    model = make(nodes, [tensor("x", (2,))], [tensor("y", (2,))],
                 {"a": np.array([1.5, 2], np.float32), "b": np.array([2, 3], np.float32)})
    inferred = onnx.shape_inference.infer_shapes(model)
    assert fold_shape_computations(inferred, 17) == 0


def test_shape_value_feeding_a_non_shape_op():
    # Size(Shape(x)) and Sub on a shape: TVM's walker rejects ShapeExpr inputs for these ops.
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Sub", ["s", "one"], ["t"])]
    model = make(nodes, [tensor("x", (2, 5))], [tensor("t", (2,), np.int64)], {"one": np.array(1, np.int64)})
    got = hetc.compile(model).run({"x": np.zeros((2, 5), np.float32)})["t"]
    np.testing.assert_array_equal(got, [1, 4])


def _axes_input_model() -> onnx.ModelProto:
    node = helper.make_node("ReduceMax", ["x", "axes"], ["y"], keepdims=1)
    return make([node], [tensor("x", (2, 3, 4)), tensor("axes", (1,), np.int64)], [tensor("y", (2, 1, 4))], opset=18)


def test_constant_inputs_freeze_shape_deciding_inputs(tmp_path):
    model = _axes_input_model()
    x = np.random.default_rng(1).normal(size=(2, 3, 4)).astype(np.float32)
    axes = np.array([1], np.int64)
    compiled = hetc.compile(model, constant_inputs={"axes": axes})
    assert [s.name for s in compiled.manifest.inputs] == ["x"]
    assert compiled.report["constant_inputs"] == ["axes"]
    assert_close(compiled.run({"x": x})["y"], ort_run(model, {"x": x, "axes": axes})[0])

    np.save(tmp_path / "axes.npy", axes)
    out = tmp_path / "art"
    result = run_cli("compile", save(model, tmp_path / "m.onnx"), "-o", out, "--constant-input",
                     f"axes={tmp_path / 'axes.npy'}")
    assert result.code == 0, result.stderr
    assert [i["name"] for i in hetc.load(out).manifest.to_json()["inputs"]] == ["x"]


@pytest.mark.parametrize(("values", "match"), [
    ({"nope": np.array([1], np.int64)}, "not inputs of the model"),
    ({"axes": np.array([1], np.int32)}, "dtype int32, the model declares int64"),
    ({"axes": np.array([1, 2], np.int64)}, "does not admit"),
])
def test_bad_constant_inputs(values, match):
    with pytest.raises(UsageError, match=match):
        hetc.compile(_axes_input_model(), constant_inputs=values)
