"""Resize (every mode, coordinate transformation, antialias, axes, keep_aspect_ratio_policy)
and Upsample, against ONNX's reference implementation and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_util import make, tensor

import hetc
from hetc.errors import ConversionError

RNG = np.random.default_rng(0)
X4 = RNG.standard_normal((1, 2, 5, 7)).astype(np.float32)


def _resize_model(shape, out_shape, attrs, scales=None, sizes=None, roi=None, opset=19, dtype=np.float32):
    inits = {"roi": np.asarray(roi if roi is not None else [], np.float32)}
    names = ["x", "roi"]
    if scales is not None:
        inits["scales"] = np.asarray(scales, np.float32)
        names.append("scales")
    else:
        names.append("")
    if sizes is not None:
        inits["sizes"] = np.asarray(sizes, np.int64)
        names.append("sizes")
    node = helper.make_node("Resize", names, ["y"], **attrs)
    return make([node], [tensor("x", shape, dtype)], [tensor("y", out_shape, dtype)], inits, opset=opset)


CASES = [  # (attrs, scales, sizes, roi, out_shape)
    ({"mode": "nearest"}, [1, 1, 2.0, 1.5], None, None, (1, 2, 10, 10)),
    ({"mode": "nearest", "nearest_mode": "round_prefer_ceil", "coordinate_transformation_mode": "asymmetric"},
     [1, 1, 0.6, 1.3], None, None, (1, 2, 3, 9)),
    ({"mode": "nearest", "nearest_mode": "floor", "coordinate_transformation_mode": "align_corners"},
     None, [1, 2, 8, 4], None, (1, 2, 8, 4)),
    ({"mode": "nearest", "nearest_mode": "ceil", "coordinate_transformation_mode": "half_pixel"},
     [1, 1, 1.5, 0.5], None, None, (1, 2, 7, 3)),
    ({"mode": "linear"}, [1, 1, 0.6, 1.7], None, None, (1, 2, 3, 11)),
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, None, [1, 2, 1, 12], None,
     (1, 2, 1, 12)),
    ({"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}, [1, 1, 1.7, 0.7], None, None,
     (1, 2, 8, 4)),
    ({"mode": "linear", "antialias": 1}, [1, 1, 0.4, 0.6], None, None, (1, 2, 2, 4)),
    ({"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}, [1, 1, 0.8, 2.0], None, None, (1, 2, 4, 14)),
    ({"mode": "cubic", "coordinate_transformation_mode": "align_corners"}, None, [1, 2, 9, 3], None, (1, 2, 9, 3)),
    ({"mode": "cubic", "antialias": 1, "cubic_coeff_a": -0.6}, None, [1, 2, 3, 3], None, (1, 2, 3, 3)),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 5.0},
     None, [1, 2, 6, 6], [0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4], (1, 2, 6, 6)),
    ({"mode": "cubic", "coordinate_transformation_mode": "tf_crop_and_resize", "axes": [3, 2]},
     None, [5, 4], [0.1, 0.2, 0.8, 0.7], (1, 2, 4, 5)),
    ({"mode": "nearest", "axes": [3], "keep_aspect_ratio_policy": "not_larger"}, None, [3], None, (1, 2, 5, 3)),
    ({"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": "not_smaller"}, None, [10, 9], None,
     (1, 2, 10, 14)),
]


@pytest.mark.parametrize(("attrs", "scales", "sizes", "roi", "out_shape"), CASES,
                         ids=[f"{c[0]['mode']}-{i}" for i, c in enumerate(CASES)])
def test_resize_matches_reference(attrs, scales, sizes, roi, out_shape):
    model = _resize_model(X4.shape, out_shape, attrs, scales, sizes, roi)
    expected = ReferenceEvaluator(model).run(None, {"x": X4})[0]
    got = hetc.compile(model).run({"x": X4})["y"]
    assert got.shape == expected.shape == out_shape
    assert_close(got, expected.astype(np.float32), rel=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_uint8_matches_reference(mode):
    x = RNG.integers(0, 256, (2, 1, 6, 5)).astype(np.uint8)
    model = _resize_model(x.shape, (2, 1, 9, 3), {"mode": mode, "axes": [2, 3]}, sizes=[9, 3], dtype=np.uint8)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = hetc.compile(model).run({"x": x})["y"]
    assert got.dtype == np.uint8
    assert np.max(np.abs(got.astype(int) - expected.astype(int))) <= 1  # float32 vs float64 at .5


def test_resize_negative_axes_matches_onnxruntime():
    x = RNG.standard_normal((2, 6, 5, 3)).astype(np.float32)
    model = _resize_model(x.shape, (2, 9, 2, 3), {"mode": "linear", "axes": [-3, -2]}, sizes=[9, 2])
    assert_close(hetc.compile(model).run({"x": x})["y"], ort_run(model, {"x": x})[0])


def test_resize_11_tf_half_pixel_for_nn_matches_onnxruntime():
    attrs = {"mode": "nearest", "nearest_mode": "ceil", "coordinate_transformation_mode": "tf_half_pixel_for_nn"}
    model = _resize_model(X4.shape, (1, 2, 7, 3), attrs, scales=[1, 1, 1.5, 0.5], opset=11)
    assert_close(hetc.compile(model).run({"x": X4})["y"], ort_run(model, {"x": X4})[0])


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_10_and_upsample_match_onnxruntime(mode):
    x = RNG.standard_normal((1, 1, 3, 4)).astype(np.float32)
    scales = np.array([1, 1, 2, 1.5], np.float32)
    resize = make([helper.make_node("Resize", ["x", "s"], ["y"], mode=mode)], [tensor("x", x.shape)],
                  [tensor("y", (1, 1, 6, 6))], {"s": scales}, opset=10)
    upsample = make([helper.make_node("Upsample", ["x", "s"], ["y"], mode=mode)], [tensor("x", x.shape)],
                    [tensor("y", (1, 1, 6, 6))], {"s": scales}, opset=9)
    for model in (resize, upsample):
        assert_close(hetc.compile(model).run({"x": x})["y"], ort_run(model, {"x": x})[0])


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_runtime_sizes_match_onnxruntime(mode):
    """sizes as a graph input: indices and weights computed at run time, one model for any size."""
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode)
    model = make([node], [tensor("x", (1, 1, 4, 4)), tensor("sizes", (4,), np.int64)],
                 [tensor("y", ("n", "c", "h", "w"))], opset=19)
    x = np.random.default_rng(3).normal(size=(1, 1, 4, 4)).astype(np.float32)
    compiled = hetc.compile(model)
    for sizes in ([1, 1, 8, 8], [1, 1, 3, 6]):
        feeds = {"x": x, "sizes": np.array(sizes, np.int64)}
        assert_close(compiled.run(feeds)["y"], ort_run(model, feeds)[0])


def test_resize_unsupported_attribute_value():
    model = _resize_model(X4.shape, (1, 2, 10, 14), {"mode": "linear", "coordinate_transformation_mode": "bogus"},
                          scales=[1, 1, 2, 2])
    with pytest.raises(ConversionError, match=r"\(Resize\): attribute coordinate_transformation_mode='bogus'"):
        hetc.compile(model)
