"""Pow with mixed base/exponent types, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ort_run
from onnx import helper
from onnx_util import make, tensor

import hetc


@pytest.mark.parametrize(("base", "exponent"), [
    (np.float32, np.int64), (np.float32, np.int32), (np.int32, np.float32), (np.int64, np.float32),
    (np.float32, np.float32), (np.int64, np.int64),
])
def test_pow_mixed_types(base, exponent):
    model = make([helper.make_node("Pow", ["x", "y"], ["z"])], [tensor("x", (4,), base), tensor("y", (4,), exponent)],
                 [tensor("z", (4,), base)], opset=15)
    x = np.array([1, 2, 3, -2], base)
    y = np.array([2, 3, 0, 3], exponent)
    expected = ort_run(model, {"x": x, "y": y})[0]
    got = hetc.compile(model).run({"x": x, "y": y})["z"]
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize("op,fill", [("ReduceMax", -np.inf), ("ReduceMin", np.inf)])
def test_float_max_min_of_a_row_of_infinities(op, fill):
    """A row of -inf (a fully masked attention row) has max -inf, not the lowest finite float;
    the whole-tensor rule (rfactor) still takes the same legalization."""
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    x[1] = fill
    model = make([helper.make_node(op, ["x"], ["y"], keepdims=0, axes=[1])], [tensor("x", [3, 5])],
                 [tensor("y", [3])], opset=13)
    got = hetc.compile(model).run({"x": x})["y"]
    np.testing.assert_array_equal(got, (np.max if op == "ReduceMax" else np.min)(x, axis=1))
    assert got[1] == fill
