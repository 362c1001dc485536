"""Constant: every value attribute, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx_util import make, tensor

import hetc
from hetc.errors import ConversionError


@pytest.mark.parametrize(("attr", "value", "expected"), [
    ("value", numpy_helper.from_array(np.arange(6, dtype=np.int32).reshape(2, 3)),
     np.arange(6, dtype=np.int32).reshape(2, 3)),
    ("value_float", 2.5, np.array(2.5, np.float32)),
    ("value_floats", [1.0, -2.0], np.array([1.0, -2.0], np.float32)),
    ("value_int", -7, np.array(-7, np.int64)),
    ("value_ints", [3, 0, -1], np.array([3, 0, -1], np.int64)),
])
def test_constant_value_attributes(attr, value, expected):
    # Add the constant to an input so the value also flows through a compiled kernel.
    nodes = [helper.make_node("Constant", [], ["c"], **{attr: value}), helper.make_node("Add", ["x", "c"], ["y"])]
    model = make(nodes, [tensor("x", expected.shape, expected.dtype)], [tensor("y", expected.shape, expected.dtype)])
    x = np.ones(expected.shape, expected.dtype)
    np.testing.assert_array_equal(hetc.compile(model).run({"x": x})["y"], x + expected)


def test_string_constant_is_rejected():
    nodes = [helper.make_node("Constant", [], ["c"], name="s", value_strings=["a", "b"]),
             helper.make_node("Identity", ["x"], ["y"])]
    model = make(nodes, [tensor("x", (2,))], [tensor("y", (2,))])
    with pytest.raises(ConversionError, match=r"node 's' \(Constant\): string constants \(value_strings\)"):
        hetc.compile(model)
