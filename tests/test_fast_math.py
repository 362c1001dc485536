"""Float32 math in TOPI's vectorizable polynomial forms (``backends/cpu/pipeline.FAST_MATH``)
instead of libm calls per element: sigmoid/SiLU and Gelu (both forms), against float64
references over wide ranges and at the limits."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import assert_close
from onnx import TensorProto, helper

import hetc


def test_sigmoid_and_silu_run_the_polynomial_exp():
    """Sigmoid lowers to TOPI's vectorizable exp (TVM's ``tir.sigmoid`` calls libm's ``expf``
    per element); within 3e-7 of float64 over [-120, 120], and exact at the limits."""
    graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])], "silu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4001])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [4001]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [4001])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    compiled = hetc.compile(model, "cpu")
    assert any("fast_sigmoid" in name for name in compiled.report["kernels"]), compiled.report["kernels"]
    x = np.linspace(-120, 120, 4001).astype(np.float32)
    x[:3] = [np.inf, -np.inf, 0.0]
    out = compiled.run({"x": x})
    with np.errstate(over="ignore"):
        ref = 1 / (1 + np.exp(-x.astype(np.float64)))
    assert np.abs(out["s"] - ref).max() < 1e-7
    big = ref > 1e-30
    assert (np.abs(out["s"] - ref)[big] / ref[big]).max() < 3e-7
    assert out["s"][:3].tolist() == [1.0, 0.0, 0.5]
    finite = np.isfinite(x)
    assert_close(out["y"][finite], (x[finite] * ref[finite]).astype(np.float32), rel=1e-6)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_runs_the_polynomial_erf_or_tanh(approximate):
    """ONNX Gelu (opset 20, dynamo exports) is ``relax.nn.gelu``/``gelu_tanh``, which TVM lowers
    with libm's ``erff``/``tanhf`` (a 3137x608 MLP matmul + GELU 4x its ReLU time, 2-core Zen 5, AVX-512)."""
    graph = helper.make_graph(
        [helper.make_node("Gelu", ["x"], ["y"], approximate=approximate)], "gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6001])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6001])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    compiled = hetc.compile(model, "cpu")
    assert any("fast_gelu" in name for name in compiled.report["kernels"]), compiled.report["kernels"]
    x = np.linspace(-30, 30, 6001).astype(np.float32)
    v = x.astype(np.float64)
    if approximate == "none":
        ref = 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))
    else:
        ref = 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
    out = compiled.run({"x": x})["y"]
    assert np.abs(out - ref).max() < 2e-6 * max(1.0, np.abs(ref).max())
