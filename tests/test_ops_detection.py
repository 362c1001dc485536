"""Detection ops (ops/detection.py, ops/topk.py) as one-node models against onnxruntime:
NonZero and NonMaxSuppression (outputs of a run-time size), RoiAlign (opset 10 and 16, avg and
max, fixed and adaptive sampling), TopK with a run-time k on an axis of run-time length."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ort_run
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_util import make, tensor

import hetc
from hetc.errors import ConversionError

F32 = np.float32
RNG = np.random.default_rng(0)


def _check(model, feeds, atol=1e-5):
    expected = ort_run(model, feeds)
    got = list(hetc.compile(model).run(feeds).values())
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, e.shape, g.dtype, e.dtype)
        if e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, atol=atol, rtol=1e-5)
        else:
            np.testing.assert_array_equal(g, e)
    return got


@pytest.mark.parametrize(("shape", "dtype"), [((3, 4), F32), ((2, 3, 5), np.int32), ((7,), np.bool_), ((1, 1, 6), F32)])
def test_nonzero(shape, dtype):
    x = np.asarray((RNG.random(shape) > 0.5) * RNG.integers(1, 5, shape)).astype(dtype)
    rank = len(shape)
    model = make([helper.make_node("NonZero", ["x"], ["y"])], [tensor("x", list(shape), dtype)],
                 [tensor("y", [rank, "n"], np.int64)], opset=13)
    _check(model, {"x": x})


def test_nonzero_all_zero_and_symbolic_input():
    model = make([helper.make_node("NonZero", ["x"], ["y"])], [tensor("x", ["a", 3], F32)],
                 [tensor("y", [2, "n"], np.int64)], opset=13)
    compiled = hetc.compile(model)
    for x in (np.zeros((4, 3), F32), RNG.normal(size=(6, 3)).astype(F32) * (RNG.random((6, 3)) > 0.3)):
        (got,) = compiled.run({"x": x}).values()
        np.testing.assert_array_equal(got, np.array(np.nonzero(x), np.int64).reshape(2, -1))


def _boxes(batch, n, center=False):
    xy = RNG.uniform(0, 10, (batch, n, 2)).astype(F32)
    wh = RNG.uniform(1, 4, (batch, n, 2)).astype(F32)
    if center:
        return np.concatenate([xy, wh], -1)
    flip = RNG.random((batch, n, 1)) > 0.5  # corners in either order
    a, b = xy, xy + wh
    return np.concatenate([np.where(flip, b, a)[..., ::-1], np.where(flip, a, b)[..., ::-1]], -1).astype(F32)


def _nms_model(batch, classes, n, given, center=0):
    """``given``: how many of the five inputs are present (the optional ones as run-time inputs)."""
    names = ["boxes", "scores", "max_out", "iou", "score_threshold"]
    specs = [tensor("boxes", [batch, n, 4], F32), tensor("scores", [batch, classes, n], F32),
             tensor("max_out", [1], np.int64), tensor("iou", [1], F32), tensor("score_threshold", [1], F32)]
    node = helper.make_node("NonMaxSuppression", names[:given], ["selected"], center_point_box=center)
    return make([node], specs[:given], [tensor("selected", ["m", 3], np.int64)], opset=11)


@pytest.mark.parametrize(("given", "center", "max_out", "iou", "thr"), [
    (5, 0, 3, 0.4, 0.3), (5, 1, 100, 0.5, 0.0), (4, 0, 2, 0.3, None), (3, 0, 4, None, None),
    (2, 0, None, None, None), (5, 0, 0, 0.5, 0.1), (5, 0, 50, 0.0, 0.99)])
def test_nms(given, center, max_out, iou, thr):
    batch, classes, n = 2, 3, 40
    feeds = {"boxes": _boxes(batch, n, center=bool(center)),
             "scores": RNG.random((batch, classes, n)).astype(F32)}
    feeds["scores"][0, 0, 5:9] = 0.5  # ties: lower box index first
    feeds["scores"][1, 2, 11] = 0.995  # one box over every threshold (random scores left none over 0.99 in ~9% of draws)
    for name, value, dtype in (("max_out", max_out, np.int64), ("iou", iou, F32),
                               ("score_threshold", thr, F32))[: given - 2]:
        feeds[name] = np.array([value], dtype)
    (got,) = _check(_nms_model(batch, classes, n, given, center), feeds)
    assert (max_out in (None, 0)) == (got.shape[0] == 0)


def test_nms_constant_limits_and_int_max():
    """As torchvision exports it: constant max_out = INT64_MAX, constant iou, no score threshold."""
    n = 60
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "m", "t"], ["selected"])
    model = make([node], [tensor("boxes", [1, n, 4], F32), tensor("scores", [1, 1, n], F32)],
                 [tensor("selected", ["k", 3], np.int64)],
                 {"m": np.array([2**63 - 1], np.int64), "t": np.array([0.5], F32)}, opset=17)
    _check(model, {"boxes": _boxes(1, n), "scores": RNG.random((1, 1, n)).astype(F32)})


def _roi_model(opset, rois_count, **attrs):
    node = helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], **attrs)
    oh, ow = attrs.get("output_height", 1), attrs.get("output_width", 1)
    return make([node], [tensor("x", [2, 3, 12, 10], F32), tensor("rois", [rois_count, 4], F32),
                         tensor("idx", [rois_count], np.int64)],
                [tensor("y", [rois_count, 3, oh, ow], F32)], opset=opset)


@pytest.mark.parametrize(("opset", "attrs"), [
    (10, dict(output_height=3, output_width=4, sampling_ratio=2, spatial_scale=0.5)),
    (10, dict(output_height=2, output_width=2, mode="max", spatial_scale=0.5)),
    (16, dict(output_height=4, output_width=3, spatial_scale=0.25)),
    (16, dict(output_height=3, output_width=3, mode="max", coordinate_transformation_mode="output_half_pixel")),
    (16, dict(output_height=5, output_width=5, sampling_ratio=1, coordinate_transformation_mode="half_pixel")),
])
def test_roi_align(opset, attrs):
    r = 7
    lo = RNG.uniform(-4, 14, (r, 2)).astype(F32)
    rois = np.concatenate([lo, lo + RNG.uniform(0.5, 16, (r, 2)).astype(F32)], 1)
    feeds = {"x": RNG.normal(size=(2, 3, 12, 10)).astype(F32), "rois": rois,
             "idx": RNG.integers(0, 2, r).astype(np.int64)}
    _check(_roi_model(opset, r, **attrs), feeds)


def test_roi_align_rejects_unknown_mode():
    model = _roi_model(16, 2, coordinate_transformation_mode="asymmetric")
    with pytest.raises(ConversionError, match="RoiAlign.*coordinate_transformation_mode"):
        hetc.compile(model)


def test_nonzero_then_topk_runtime_k_and_length():
    """TopK along an axis whose length is known only at run time (the values NonZero picks),
    with a run-time k: as torchvision's detection heads keep their best candidates."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Squeeze", ["nz", "zero"], ["pos"]),
             helper.make_node("Gather", ["x", "pos"], ["vals"]),
             helper.make_node("TopK", ["vals", "k"], ["top", "idx"])]
    model = make(nodes, [tensor("x", [30], F32), tensor("k", [1], np.int64)],
                 [tensor("top", ["t"], F32), tensor("idx", ["t"], np.int64)],
                 {"zero": np.array([0], np.int64)}, opset=13)
    x = RNG.normal(size=30).astype(F32) * (RNG.random(30) > 0.4)
    x[3] = x[7] = 5.0  # a tie
    _check(model, {"x": x, "k": np.array([6], np.int64)})


def test_artifact_runs_after_save_and_load(tmp_path):
    """The data-dependent kernels are TIR in the library: a saved artifact runs after loading."""
    model = _nms_model(1, 2, 20, 5)
    feeds = {"boxes": _boxes(1, 20), "scores": RNG.random((1, 2, 20)).astype(F32),
             "max_out": np.array([5], np.int64), "iou": np.array([0.3], F32),
             "score_threshold": np.array([0.2], F32)}
    path = hetc.compile(model).save(tmp_path / "nms")
    (got,) = hetc.load(path).run(feeds).values()
    np.testing.assert_array_equal(got, ort_run(model, feeds)[0])


def test_nms_rejects_bad_center_point_box():
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["s"], center_point_box=2)
    model = make([node], [tensor("boxes", [1, 3, 4], F32), tensor("scores", [1, 1, 3], F32)],
                 [tensor("s", ["m", 3], np.int64)], opset=11)
    with pytest.raises(ConversionError, match="center_point_box"):
        hetc.compile(model)



@pytest.mark.parametrize("dtype", [np.uint64, np.uint32, np.int16])
@pytest.mark.parametrize("runtime_k", [False, True])
def test_topk_integer_types_tvm_sort_lacks(dtype, runtime_k):
    x = RNG.integers(0, 50, (3, 9)).astype(dtype)
    if dtype == np.uint64:
        x[0, :3] = [2**64 - 1, 2**63 + 5, 2**63 - 1]  # above int64's range: ordered as unsigned
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=0 if dtype == np.int16 else 1)
    inits = {} if runtime_k else {"k": np.array([4], np.int64)}
    inputs = [tensor("x", [3, 9], dtype)] + ([tensor("k", [1], np.int64)] if runtime_k else [])
    model = make([node], inputs, [tensor("v", [3, 4], dtype), tensor("i", [3, 4], np.int64)], inits, opset=11)
    feeds = {"x": x, **({"k": np.array([4], np.int64)} if runtime_k else {})}
    expected = ReferenceEvaluator(model).run(None, feeds)  # onnxruntime has no TopK of these types
    got = list(hetc.compile(model).run(feeds).values())
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)
