"""Pad (every mode, negative pads, axes and constant_value inputs), OneHot and CenterCropPad,
against onnxruntime and ONNX's reference implementation."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ort_run
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_util import make, tensor

import hetc
from hetc.errors import ConversionError

RNG = np.random.default_rng(0)


@pytest.mark.parametrize(("mode", "pads", "axes"), [
    ("constant", [1, 0, 2, 3, 1, 0], None),
    ("constant", [-1, 2, 1, -2], [1, -1]),
    ("edge", [2, 1, 0, 1, 3, 2], None),
    ("reflect", [1, 2, 0, 2], [2, 1]),
    ("reflect", [0, -1, 1, 0, 0, 2], None),
    ("wrap", [3, 0, 1, 1], [1, 2]),
])
def test_pad_matches_onnxruntime(mode, pads, axes):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    names = ["x", "pads", "value"] + (["axes"] if axes is not None else [])
    inits = {"pads": np.array(pads, np.int64)}
    if axes is not None:
        inits["axes"] = np.array(axes, np.int64)
    node = helper.make_node("Pad", names, ["y"], mode=mode)
    model = make([node], [tensor("x", x.shape), tensor("value", ())], [tensor("y", [None] * 3)], inits, opset=19)
    feed = {"x": x, "value": np.array(2.5, np.float32)}  # constant_value is a runtime input
    expected = ort_run(model, feed)[0]
    got = hetc.compile(model).run(feed)["y"]
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_pad_2_attributes_matches_reference():
    x = RNG.standard_normal((3, 2))
    node = helper.make_node("Pad", ["x"], ["y"], mode="constant", pads=[1, 0, 0, 2], value=7.5)
    model = make([node], [tensor("x", x.shape, np.float64)], [tensor("y", (4, 4), np.float64)], opset=9)
    np.testing.assert_array_equal(hetc.compile(model).run({"x": x})["y"], ReferenceEvaluator(model).run(None, {"x": x})[0])


def test_pad_int64_constant_value_is_exact():
    x = RNG.integers(-5, 5, (3, 2)).astype(np.int64)
    node = helper.make_node("Pad", ["x", "pads", "value"], ["y"])
    inits = {"pads": np.array([0, 1, 2, 0], np.int64), "value": np.array(2**62 + 1, np.int64)}
    model = make([node], [tensor("x", x.shape, np.int64)], [tensor("y", (5, 3), np.int64)], inits, opset=13)
    np.testing.assert_array_equal(hetc.compile(model).run({"x": x})["y"], ReferenceEvaluator(model).run(None, {"x": x})[0])


def test_pad_unsupported_mode_is_a_clear_error():
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode="symmetric")
    model = make([node], [tensor("x", (2, 2))], [tensor("y", (2, 4))], {"pads": np.array([0, 1, 0, 1], np.int64)},
                 opset=19)
    with pytest.raises(ConversionError, match=r"\(Pad\): attribute mode='symmetric' is not supported"):
        hetc.compile(model)


def test_pad_runtime_pads_match_reference():
    node = helper.make_node("Pad", ["x", "pads"], ["y"])
    model = make([node], [tensor("x", (2, 2)), tensor("pads", (4,), np.int64)], [tensor("y", ("a", "b"))], opset=19)
    compiled = hetc.compile(model)
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    for pads in ([0, 1, 0, 1], [1, 0, 2, 0]):
        feed = {"x": x, "pads": np.array(pads, np.int64)}
        np.testing.assert_array_equal(compiled.run(feed)["y"], ReferenceEvaluator(model).run(None, feed)[0])


@pytest.mark.parametrize(("axis", "idtype", "opset"), [(-1, np.int64, 11), (0, np.float32, 11), (1, np.int32, 11),
                                                       (-2, np.int64, 9)])
def test_one_hot_matches_reference(axis, idtype, opset):
    indices = np.array([[0, 3, -1], [5, -4, 2]], idtype)  # negatives wrap (opset 11); 5 is out of range
    node = helper.make_node("OneHot", ["indices", "depth", "values"], ["y"], axis=axis)
    model = make([node], [tensor("indices", indices.shape, idtype), tensor("values", (2,))], [tensor("y", [None] * 3)],
                 {"depth": np.array(4, np.int64)}, opset=opset)
    feed = {"indices": indices, "values": np.array([-1.5, 3.0], np.float32)}  # values at run time
    if opset < 11:
        feed["indices"] = np.abs(indices)  # negative indices are undefined before opset 11
    expected = ReferenceEvaluator(model).run(None, feed)[0]
    got = hetc.compile(model).run(feed)["y"]
    np.testing.assert_array_equal(got, expected)


def test_one_hot_runtime_depth_matches_reference():
    node = helper.make_node("OneHot", ["indices", "depth", "values"], ["y"])
    model = make([node], [tensor("indices", (3,), np.int64), tensor("depth", (), np.int64), tensor("values", (2,))],
                 [tensor("y", (3, "depth"))], opset=11)
    compiled = hetc.compile(model)
    for depth in (4, 2):
        feed = {"indices": np.array([0, 3, -1], np.int64), "depth": np.array(depth, np.int64),
                "values": np.array([0, 1], np.float32)}
        np.testing.assert_array_equal(compiled.run(feed)["y"], ReferenceEvaluator(model).run(None, feed)[0])


@pytest.mark.parametrize(("shape", "axes"), [([3, 7, 2], None), ([5, 1], [-1, 0]), ([9], [1])])
def test_center_crop_pad_matches_reference(shape, axes):
    x = RNG.standard_normal((4, 4, 3)).astype(np.float32)
    kwargs = {} if axes is None else {"axes": axes}
    node = helper.make_node("CenterCropPad", ["x", "shape"], ["y"], **kwargs)
    model = make([node], [tensor("x", x.shape)], [tensor("y", [None] * x.ndim)], {"shape": np.array(shape, np.int64)}, opset=18)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = hetc.compile(model).run({"x": x})["y"]
    np.testing.assert_array_equal(got, expected)


def test_center_crop_pad_runtime_shape_matches_reference():
    node = helper.make_node("CenterCropPad", ["x", "shape"], ["y"], axes=[1])
    model = make([node], [tensor("x", (4, 4)), tensor("shape", (1,), np.int64)], [tensor("y", (4, "w"))], opset=18)
    compiled = hetc.compile(model)
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    for size in (2, 7):
        feed = {"x": x, "shape": np.array([size], np.int64)}
        np.testing.assert_array_equal(compiled.run(feed)["y"], ReferenceEvaluator(model).run(None, feed)[0])
