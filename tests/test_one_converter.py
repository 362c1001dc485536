"""One converter per op (issue 31, item 7): Resize/Upsample, Pad, CenterCropPad, Col2Im,
MelWeightMatrix and STFT compute their tables with one formula (``hetc.frontends.onnx.tables``),
whether the values that decide them are constants or arrive at run time. Both forms must match
onnxruntime, and the constant form must compile to constant tables (no formula left in the graph)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from conftest import assert_close, ort_run
from onnx import helper
from onnx_util import make, tensor

import hetc
from hetc.frontends.onnx import to_relax
from hetc.frontends.onnx.loader import load_model

RNG = np.random.default_rng(0)
FORMULA_OPS = ("R.arange", "R.floor(", "R.floor_mod", "R.floor_divide", "R.cos", "R.log")


def _i64(*values) -> np.ndarray:
    return np.array(values, np.int64)


def _forms(node, data: dict[str, np.ndarray], params: dict[str, np.ndarray], out_rank: int, opset: int):
    """The model with ``params`` as initializers (static) and as graph inputs (run time)."""
    out = [tensor("y", [f"y{i}" for i in range(out_rank)])]
    data_in = [tensor(k, v.shape, v.dtype) for k, v in data.items()]
    static = make([node], data_in, out, params, opset=opset)
    param_in = [tensor(k, v.shape, v.dtype) for k, v in params.items()]
    runtime = make([node], data_in + param_in, out, opset=opset)
    return static, runtime


def _script(model) -> str:
    return to_relax(load_model(model)).script()


def _check_both(node, data, params, out_rank, opset):
    static, runtime = _forms(node, data, params, out_rank, opset)
    feeds = {**data, **params}
    expected = ort_run(static, data)[0]
    (got_static,) = hetc.compile(static).run(data).values()
    (got_runtime,) = hetc.compile(runtime).run(feeds).values()
    assert_close(got_static, expected)
    assert_close(got_runtime, expected)
    text = _script(static)
    assert not [op for op in FORMULA_OPS if op in text], "the static form left table arithmetic in the graph"
    assert any(op in _script(runtime) for op in FORMULA_OPS), "the run-time form should compute its tables"
    return text


def test_no_dynamic_twins():
    for name in ("resize_dynamic", "pad_dynamic", "col2im_dynamic", "mel_dynamic", "stft_dynamic"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"hetc.frontends.onnx.ops.{name}")


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap", "constant"])
def test_pad_static_and_runtime(mode):
    x = RNG.normal(size=(2, 3, 4, 5)).astype(np.float32)
    node = helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)
    text = _check_both(node, {"x": x}, {"p": _i64(0, 1, 3, -1, 0, 0, 2, 3)}, 4, 18)
    if mode != "constant":  # one gather per padded axis, its index a constant
        assert text.count("R.take(") == 3 and 'metadata["ir.GenericConst"]' in text


def test_center_crop_pad_static_and_runtime():
    x = RNG.normal(size=(5, 6, 3)).astype(np.float32)
    node = helper.make_node("CenterCropPad", ["x", "s"], ["y"], axes=[0, 1])
    _check_both(node, {"x": x}, {"s": _i64(8, 3)}, 3, 18)


def test_col2im_static_and_runtime():
    x = RNG.normal(size=(2, 3 * 4, 12)).astype(np.float32)  # C=3, 2x2 blocks, 3x4 columns
    node = helper.make_node("Col2Im", ["x", "i", "b"], ["y"], strides=[2, 1], pads=[1, 0, 0, 1],
                            dilations=[1, 2])
    text = _check_both(node, {"x": x}, {"i": _i64(5, 5), "b": _i64(2, 2)}, 4, 18)
    assert "R.scatter_elements" in text


def test_mel_weight_matrix_static_and_runtime():
    node = helper.make_node("MelWeightMatrix", ["m", "d", "r", "lo", "hi"], ["y"])
    params = {"m": np.array(20, np.int32), "d": np.array(512, np.int32), "r": np.array(16000, np.int32),
              "lo": np.array(30, np.float32), "hi": np.array(7000, np.float32)}
    static, runtime = _forms(node, {}, params, 2, 17)
    expected = ort_run(static, {})[0]
    (got_static,) = hetc.compile(static).run({}).values()
    (got_runtime,) = hetc.compile(runtime).run(params).values()
    np.testing.assert_array_equal(got_static, expected)  # the reference's arithmetic, bit for bit
    assert_close(got_runtime, expected)
    assert not [op for op in FORMULA_OPS if op in _script(static)]


@pytest.mark.parametrize("window", [False, True])
def test_stft_static_and_runtime(window):
    signal = RNG.normal(size=(2, 64, 1)).astype(np.float32)
    data = {"x": signal}
    params = {"step": np.array(8, np.int64), "length": np.array(16, np.int64)}
    names = ["x", "step", "w" if window else "", "length"]
    if window:
        data["w"] = np.hanning(16).astype(np.float32)
    node = helper.make_node("STFT", names, ["y"], onesided=0)
    _check_both(node, data, params, 4, 17)


RESIZE = {  # attributes, scales (or sizes with "sizes"), roi
    "linear_half_pixel": ({"mode": "linear"}, np.array([1, 1, 2, 1.5], np.float32), None),
    "nearest_floor": ({"mode": "nearest", "nearest_mode": "floor"}, np.array([1, 1, 0.7, 2.5], np.float32),
                      None),
    # whole output widths: ORT's align_corners uses the output length, the reference scale * length
    "cubic_exclude_outside": ({"mode": "cubic", "exclude_outside": 1,
                               "coordinate_transformation_mode": "align_corners"},
                              np.array([1, 1, 1.5, 2], np.float32), None),
    "linear_antialias": ({"mode": "linear", "antialias": 1}, np.array([1, 1, 0.5, 0.4], np.float32), None),
    "cubic_antialias_sizes": ({"mode": "cubic", "antialias": 1,
                               "coordinate_transformation_mode": "half_pixel_symmetric"},
                              _i64(2, 3, 3, 5), None),
    "crop_and_resize": ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
                         "extrapolation_value": -1.0}, np.array([1, 1, 1.5, 2], np.float32),
                        np.array([0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3], np.float32)),
}


@pytest.mark.parametrize("case", sorted(RESIZE))
def test_resize_static_and_runtime(case):
    attrs, values, roi = RESIZE[case]
    x = RNG.normal(size=(2, 3, 6, 7)).astype(np.float32)
    params = {"roi": roi} if roi is not None else {}
    params["sizes" if values.dtype == np.int64 else "scales"] = values
    names = ["x"] + [k if k in params else "" for k in ("roi", "scales", "sizes")]
    node = helper.make_node("Resize", names, ["y"], **attrs)
    text = _check_both(node, {"x": x}, params, 4, 19)
    assert "R.take(" in text


def test_upsample_static_and_runtime():
    x = RNG.normal(size=(1, 2, 3, 4)).astype(np.float32)
    node = helper.make_node("Upsample", ["x", "scales"], ["y"], mode="linear")
    _check_both(node, {"x": x}, {"scales": np.array([1, 1, 2, 3], np.float32)}, 4, 9)
