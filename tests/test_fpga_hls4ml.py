"""hetc's FPGA C-simulation against hls4ml's, bit for bit, on the same ONNX MLP with the same
fixed-point types (hls4ml is the reference HLS flow for neural networks; CI installs it)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetc

hls4ml = pytest.importorskip("hls4ml")
pytest.importorskip("qonnx")

STEP = 2.0 ** -10  # the grid of ap_fixed<16,6>: the model's weights are exact in hls4ml's default type


def _mlp(path):
    rng = np.random.default_rng(0)

    def exact(*shape, scale):
        return (np.round(rng.standard_normal(shape) * scale / STEP) * STEP).astype(np.float32)

    inits = {"w1": exact(16, 32, scale=0.3), "b1": exact(32, scale=0.1),
             "w2": exact(32, 10, scale=0.3), "b2": exact(10, scale=0.1)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]), helper.make_node("MatMul", ["r1", "w2"], ["m2"]),
             helper.make_node("Add", ["m2", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    import onnx

    onnx.save(model, path)
    return path


def _ap(hls4ml_type) -> str:
    """hls4ml's "fixed<37,17,TRN,WRAP,0>" -> "ap_fixed<37,17,AP_TRN,AP_WRAP>"."""
    m = re.fullmatch(r"(u?fixed)<(\d+),(-?\d+),(\w+),(\w+),\d+>", str(hls4ml_type))
    assert m, hls4ml_type
    name = "ap_ufixed" if m.group(1) == "ufixed" else "ap_fixed"
    return f"{name}<{m.group(2)},{m.group(3)},AP_{m.group(4)},AP_{m.group(5)}>"


def test_csim_equals_hls4ml_bit_for_bit(tmp_path):
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.util.cleanup import cleanup_model

    path = _mlp(tmp_path / "mlp.onnx")
    model = cleanup_model(ModelWrapper(str(path)))
    config = hls4ml.utils.config_from_onnx_model(model, granularity="name", backend="Vitis",
                                                 default_precision="fixed<16,6>")
    hm = hls4ml.converters.convert_from_onnx_model(model, output_dir=str(tmp_path / "hls4ml"), backend="Vitis",
                                                   io_type="io_parallel", hls_config=config)
    hm.compile()
    layers = {layer.class_name + str(k): layer for k, layer in enumerate(hm.get_layers())}
    dense = [layer for layer in layers.values() if layer.class_name == "Dense"]
    relu = [layer for layer in layers.values() if layer.class_name == "Activation"]
    assert len(dense) == 2 and len(relu) == 1, [layer.class_name for layer in layers.values()]

    # The same types for hetc's layers (names from its report: dense_0, relu_1, dense_2).
    types = {}
    for name, layer in (("dense_0", dense[0]), ("dense_2", dense[1])):
        for role in ("weight", "bias", "accum"):
            types[f"fpga_region0.{name}.{role}"] = _ap(layer.types[f"{role}_t"].precision)
        types[f"fpga_region0.{name}"] = _ap(layer.types["result_t"].precision)
    types["fpga_region0.relu_1"] = _ap(relu[0].types["result_t"].precision)
    spec = tmp_path / "types.json"
    spec.write_text(json.dumps({"default": "ap_fixed<16,6>", "layers": types}))
    compiled = hetc.compile(path, "fpga,cpu", placement="accelerator-first", precision=spec)
    region = compiled.report["offload"]["fpga"]["regions"][0]
    assert [layer["name"] for layer in region["layers"]] == ["dense_0", "relu_1", "dense_2"]
    assert region["layers"][0]["accum"] == types["fpga_region0.dense_0.accum"].replace(",AP_TRN,AP_WRAP", "")

    x = np.random.default_rng(1).uniform(-4, 4, (64, 16)).astype(np.float32)
    theirs = np.asarray(hm.predict(x), np.float32).reshape(64, 10)
    ours = np.concatenate([compiled.run({"x": x[i:i + 1]})["y"] for i in range(64)])
    assert np.array_equal(ours, theirs), f"{np.count_nonzero(ours != theirs)} of {ours.size} values differ"
    # and fixed point really is in play: both differ from float arithmetic (onnxruntime), a little
    import onnxruntime as ort

    exact = np.concatenate([ort.InferenceSession(str(path)).run(None, {"x": x[i:i + 1]})[0] for i in range(64)])
    assert not np.array_equal(ours, exact) and np.max(np.abs(ours - exact)) < 0.05 * np.max(np.abs(exact))
