"""Model loading: bad files and the external-data path check."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import external_data_helper, helper
from onnx_util import make, tensor

import hetc
from hetc.errors import ModelLoadError, UnsafePathError
from hetc.frontends.onnx import load_model

WEIGHT = np.arange(64, dtype=np.float32).reshape(8, 8) / 10


def _model() -> onnx.ModelProto:
    return make([helper.make_node("MatMul", ["x", "w"], ["y"])], [tensor("x", (1, 8))],
                [tensor("y", (1, 8))], {"w": WEIGHT})


def _with_external(location: str) -> onnx.ModelProto:
    model = _model()
    tensor_proto = model.graph.initializer[0]
    external_data_helper.set_external_data(tensor_proto, location=location, offset=0,
                                           length=WEIGHT.nbytes)
    tensor_proto.data_location = onnx.TensorProto.EXTERNAL
    tensor_proto.ClearField("raw_data")
    tensor_proto.ClearField("float_data")
    return model


def test_external_data_inside_model_dir_loads(tmp_path):
    model_dir = tmp_path / "m"
    (model_dir / "weights").mkdir(parents=True)
    (model_dir / "weights" / "w.bin").write_bytes(WEIGHT.tobytes())
    onnx.save(_with_external("weights/w.bin"), model_dir / "model.onnx")
    x = np.ones((1, 8), np.float32)
    out = hetc.compile(model_dir / "model.onnx").run({"x": x})["y"]
    np.testing.assert_allclose(out, x @ WEIGHT, rtol=1e-6)


@pytest.mark.parametrize("location", ["../w.bin", "sub/../../w.bin"])
def test_external_data_escaping_with_dotdot_is_rejected(tmp_path, location):
    model_dir = tmp_path / "m"
    (model_dir / "sub").mkdir(parents=True)
    (tmp_path / "w.bin").write_bytes(WEIGHT.tobytes())  # exists, so only the path rule stops it
    onnx.save(_with_external(location), model_dir / "model.onnx")
    with pytest.raises(UnsafePathError, match="escapes the model's directory"):
        load_model(model_dir / "model.onnx")


def test_external_data_absolute_path_is_rejected(tmp_path):
    (tmp_path / "w.bin").write_bytes(WEIGHT.tobytes())
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    onnx.save(_with_external(str(tmp_path / "w.bin")), model_dir / "model.onnx")
    with pytest.raises(UnsafePathError, match="must be a relative path"):
        load_model(model_dir / "model.onnx")


def test_external_data_symlink_escaping_is_rejected(tmp_path):
    (tmp_path / "secret.bin").write_bytes(WEIGHT.tobytes())
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    os.symlink(tmp_path / "secret.bin", model_dir / "w.bin")
    onnx.save(_with_external("w.bin"), model_dir / "model.onnx")
    with pytest.raises(UnsafePathError, match="escapes"):
        load_model(model_dir / "model.onnx")


def test_external_data_truncated_or_missing(tmp_path):
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    onnx.save(_with_external("w.bin"), model_dir / "model.onnx")
    with pytest.raises(ModelLoadError, match="not found"):
        load_model(model_dir / "model.onnx")
    (model_dir / "w.bin").write_bytes(WEIGHT.tobytes()[:100])
    with pytest.raises(ModelLoadError, match="truncated"):
        load_model(model_dir / "model.onnx")


def test_external_data_in_proto_needs_base_dir(tmp_path):
    (tmp_path / "w.bin").write_bytes(WEIGHT.tobytes())
    model = _with_external("w.bin")
    with pytest.raises(ModelLoadError, match="base_dir"):
        load_model(model)
    assert load_model(model, base_dir=tmp_path).inputs[0].name == "x"


def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match="no such file"):
        load_model(tmp_path / "absent.onnx")


def test_truncated_file(tmp_path):
    data = _model().SerializeToString()
    (tmp_path / "t.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="not a valid ONNX file|not an ONNX model|invalid ONNX"):
        load_model(tmp_path / "t.onnx")


@pytest.mark.parametrize("content", [b"", b"hello, this is not a model\n", bytes(range(256)) * 4])
def test_not_onnx(tmp_path, content):
    (tmp_path / "x.onnx").write_bytes(content)
    with pytest.raises(ModelLoadError):
        load_model(tmp_path / "x.onnx")


def test_checker_failure_is_one_line(tmp_path):
    model = _model()
    model.graph.node[0].input[1] = "undefined_tensor"
    with pytest.raises(ModelLoadError, match="invalid ONNX model") as info:
        load_model(model)
    assert "\n" not in str(info.value)


def test_local_functions_are_inlined():
    fn = helper.make_function("local", "Double", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                              [helper.make_opsetid("", 17)])
    model = make([helper.make_node("Double", ["x"], ["y"], domain="local")], [tensor("x", (3,))],
                 [tensor("y", (3,))])
    model.opset_import.append(helper.make_opsetid("local", 1))
    model.functions.append(fn)
    x = np.array([1, -2, 3], np.float32)
    np.testing.assert_array_equal(hetc.compile(model).run({"x": x})["y"], 2 * x)


def test_dims_named_by_an_expression_become_plain_symbols():
    """optimum names a decoder's mask dim ``past_sequence_length + sequence_length``: one opaque
    name (as onnxruntime reads it), renamed alike wherever it occurs, and the model runs."""
    total = "past_sequence_length + sequence_length"
    model = make([helper.make_node("Add", ["a", "b"], ["y"])],
                 [tensor("a", ["batch", total]), tensor("b", ["batch", total])], [tensor("y", ["batch", total])])
    loaded = load_model(model)
    assert loaded.inputs[0].shape == ("batch", "past_sequence_length_sequence_length")
    assert set(loaded.dims) == {"batch", "past_sequence_length_sequence_length"}
    a, b = np.ones((2, 5), np.float32), np.arange(10, dtype=np.float32).reshape(2, 5)
    np.testing.assert_array_equal(hetc.compile(model).run({"a": a, "b": b})["y"], a + b)
    # --dim takes the name as the model writes it, or the plain one
    for name in (total, "past_sequence_length_sequence_length"):
        ranged = load_model(model, dims={name: (1, 7)})
        assert ranged.dims["past_sequence_length_sequence_length"] == (1, 7)


def _big_weight_model(weight: np.ndarray) -> onnx.ModelProto:
    """MatMul by a weight of more than 4 KB, then a Reshape by a small shape initializer."""
    return make([helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Reshape", ["y", "s"], ["z"])],
                [tensor("x", (2, 64))], [tensor("z", (128,))], {"w": weight, "s": np.array([128], np.int64)})


def test_weights_keep_their_data_and_types_through_the_checks():
    """The checker and shape inference see large initializers as typed inputs (they serialize
    the model: seconds for a large one): the loaded model keeps every initializer's data, has no
    extra inputs, and the types inference found (a small initializer's value, the Reshape shape,
    still known to it)."""
    weight = np.random.default_rng(0).normal(size=(64, 64)).astype(np.float32)
    loaded = load_model(_big_weight_model(weight))
    graph = loaded.proto.graph
    assert [v.name for v in graph.input] == ["x"]
    stored = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    assert set(stored) == {"w", "s"} and np.array_equal(stored["w"], weight)
    types = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in graph.value_info}
    assert types["y"] == [2, 64]
    assert [d.dim_value for d in graph.output[0].type.tensor_type.shape.dim] == [128]


def test_a_large_weight_of_the_wrong_type_is_still_refused():
    model = _big_weight_model(np.ones((64, 64), np.int32))
    with pytest.raises(ModelLoadError, match="invalid ONNX model"):
        load_model(model)
