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


def test_softmax_over_a_symbolic_row_runs_in_vectors():
    """A softmax whose last axis is symbolic (a decoder's attention over past + seq positions)
    is ``softmax_rows``'s kernel: whole vectors of 16 and a scalar tail, at every tail length;
    within 3e-7 of float64, and equal to the static-length build; huge negatives (a mask) give
    exact zeros; float64 keeps TVM's lowering."""
    def softmax(dims, dtype=TensorProto.FLOAT):
        graph = helper.make_graph(
            [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "softmax",
            [helper.make_tensor_value_info("x", dtype, dims)], [helper.make_tensor_value_info("y", dtype, dims)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        return model

    symbolic = hetc.compile(softmax(["b", 3, "t"]), "cpu", dims={"b": (1, 4), "t": (1, 4096)})
    assert any("softmax_rows" in name for name in symbolic.report["kernels"]), symbolic.report["kernels"]
    rng = np.random.default_rng(0)
    for length in (1, 5, 16, 17, 33, 2001):
        x = (rng.standard_normal((2, 3, length)) * 8).astype(np.float32)
        x[1, 0, 0] = -3.4e38  # a masked position
        got = symbolic.run({"x": x})["y"]
        ref = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
        ref /= ref.sum(-1, keepdims=True)
        assert np.abs(got - ref).max() < 3e-7, length
        assert got[1, 0, 0] == 0.0 or length == 1
        static = hetc.compile(softmax([2, 3, length]), "cpu")
        assert not any("softmax_rows" in name for name in static.report["kernels"])
        assert_close(got, static.run({"x": x})["y"], rel=1e-6)
    double = hetc.compile(softmax(["b", 3, "t"], TensorProto.DOUBLE), "cpu", dims={"b": (1, 4), "t": (1, 64)})
    assert not any("softmax_rows" in name for name in double.report["kernels"])
    x = rng.standard_normal((1, 3, 40))
    ref = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(double.run({"x": x})["y"], ref / ref.sum(-1, keepdims=True), rtol=1e-12)
