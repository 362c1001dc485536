"""hetc's converters of ops TVM lacks (ops/misc.py), one-node models compared with
``onnx.reference``: BitCast, CumProd, LpNormalization, Swish, SwiGLU, Celu, Det, windows,
MelWeightMatrix, DFT, STFT, Col2Im, DeformConv."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_util import make, tensor

import hetc
from hetc.errors import ConversionError

F32 = np.float32


def _model(op, inputs, outputs, inits=None, opset=26, **attrs):
    """``inputs``: name -> array (graph inputs) ; ``inits``: name -> array (constants)."""
    names = list(inputs) + list(inits or {})
    node = helper.make_node(op, [n if n else "" for n in names], [o[0] for o in outputs], **attrs)
    model = make([node], [tensor(k, v.shape, v.dtype) for k, v in inputs.items()],
                 [tensor(n, s, d) for n, s, d in outputs], inits, opset=opset)
    model.ir_version = 13
    return model


def _check(model, feeds, rel=1e-4, exact=False):
    expected = ReferenceEvaluator(model).run(None, feeds)
    got = hetc.compile(model).run(feeds)
    assert len(got) == len(expected)
    for g, e in zip(got.values(), expected, strict=True):
        if exact:
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_array_equal(g, e)
        else:
            assert_close(np.asarray(g), e, rel=rel)


@pytest.mark.parametrize(("src", "to", "dst"), [
    (np.float32, TensorProto.INT32, np.int32), (np.int64, TensorProto.DOUBLE, np.float64),
    (np.float16, TensorProto.UINT16, np.uint16), (np.uint8, TensorProto.BOOL, np.bool_),
])
def test_bitcast(src, to, dst):
    x = (np.random.default_rng(0).normal(size=(2, 3)) * 100).astype(src)
    _check(_model("BitCast", {"x": x}, [("y", (2, 3), dst)], to=to), {"x": x}, exact=True)


@pytest.mark.parametrize(("axis", "exclusive", "reverse", "dtype"), [
    (1, 1, 1, np.float32), (-2, 0, 1, np.int32), (0, 1, 0, np.float64)])
def test_cumprod(axis, exclusive, reverse, dtype):
    x = np.random.default_rng(0).uniform(0.5, 2, size=(3, 4)).astype(dtype)
    if dtype == np.int32:
        x = np.random.default_rng(0).integers(-3, 4, size=(3, 4)).astype(dtype)
    model = _model("CumProd", {"x": x}, [("y", (3, 4), dtype)], {"axis": np.array(axis, np.int64)},
                   exclusive=exclusive, reverse=reverse)
    _check(model, {"x": x})


@pytest.mark.parametrize(("p", "axis"), [(1, 0), (2, -1)])
def test_lp_normalization(p, axis):
    x = np.random.default_rng(0).normal(size=(3, 4)).astype(F32)
    x[:, 1] = x[1] = 0  # a zero norm gives zeros
    model = _model("LpNormalization", {"x": x}, [("y", (3, 4), F32)], opset=22, p=p, axis=axis)
    # onnx.reference's L1 norm sums x, not |x|; onnxruntime follows the spec
    got = hetc.compile(model).run({"x": x})
    assert_close(next(iter(got.values())), ort_run(model, {"x": x})[0])


def test_swish_swiglu_celu():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 5)).astype(F32), rng.normal(size=(2, 5)).astype(F32)
    _check(_model("Swish", {"a": a}, [("y", (2, 5), F32)], opset=24, alpha=0.7), {"a": a})
    _check(_model("SwiGLU", {"a": a, "b": b}, [("y", (2, 5), F32)], opset=28, alpha=1.5),
           {"a": a, "b": b})
    h = a.astype(np.float16)
    _check(_model("Celu", {"a": h}, [("y", (2, 5), np.float16)], opset=28, alpha=2.5), {"a": h},
           rel=2e-3)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_det(n):
    x = np.random.default_rng(n).normal(size=(2, n, n)).astype(F32)
    _check(_model("Det", {"x": x}, [("y", (2,), F32)], opset=22), {"x": x})


@pytest.mark.parametrize(("op", "periodic", "dtype"), [
    ("HannWindow", 0, TensorProto.FLOAT), ("HammingWindow", 1, TensorProto.DOUBLE),
    ("BlackmanWindow", 0, TensorProto.FLOAT16)])
def test_windows(op, periodic, dtype):
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    model = _model(op, {}, [("y", (7,), np_dtype)], {"size": np.array(7, np.int64)}, opset=17,
                   periodic=periodic, output_datatype=dtype)
    _check(model, {})


def test_mel_weight_matrix():
    inits = {"bins": np.array(8, np.int64), "dft": np.array(32, np.int64),
             "rate": np.array(16000, np.int64), "lo": np.array(100.0, F32),
             "hi": np.array(6000.0, F32)}
    _check(_model("MelWeightMatrix", {}, [("y", (17, 8), np.float64)], inits, opset=17,
                  output_datatype=TensorProto.DOUBLE), {})


@pytest.mark.parametrize(("opset", "shape", "length", "axis", "inverse", "onesided"), [
    (20, (2, 6, 3, 2), 8, 1, 0, 0),    # complex, zero padded
    (20, (2, 7, 1), 5, -2, 0, 1),      # real, truncated, rfft
    (20, (3, 5, 2), None, 1, 1, 1),    # irfft
    (17, (2, 4, 6, 2), None, 2, 1, 0),  # opset-17 axis attribute, ifft
])
def test_dft(opset, shape, length, axis, inverse, onesided):
    x = np.random.default_rng(0).normal(size=shape).astype(F32)
    inits = {}
    if length is not None:
        inits["len"] = np.array(length, np.int64)
    attrs = {"inverse": inverse, "onesided": onesided}
    if opset >= 20:
        if length is None:
            inits["len"] = None
        inits["axis"] = np.array(axis, np.int64)
    else:
        attrs["axis"] = axis
    node_inputs = ["x"] + [k if v is not None else "" for k, v in inits.items()]
    inits = {k: v for k, v in inits.items() if v is not None}
    node = helper.make_node("DFT", node_inputs, ["y"], **attrs)
    expected = ReferenceEvaluator(
        make([node], [tensor("x", shape)], [tensor("y", None)], inits, opset=opset)).run(None, {"x": x})[0]
    model = make([node], [tensor("x", shape)], [tensor("y", expected.shape)], inits, opset=opset)
    got = hetc.compile(model).run({"x": x})
    assert_close(next(iter(got.values())), expected, rel=1e-4)


def test_stft():
    rng = np.random.default_rng(0)
    signal = rng.normal(size=(2, 40, 1)).astype(F32)
    inits = {"step": np.array(6, np.int64), "window": np.hanning(10).astype(F32)}
    # onesided is given explicitly: ONNX's shape inference ignores its default (1)
    model = _model("STFT", {"signal": signal}, [("y", (2, 6, 6, 2), F32)], inits, opset=17,
                   onesided=1)
    _check(model, {"signal": signal})


def test_col2im():
    x = np.random.default_rng(0).normal(size=(2, 2 * 6, 12)).astype(F32)
    inits = {"image": np.array([5, 6], np.int64), "block": np.array([2, 3], np.int64)}
    model = _model("Col2Im", {"x": x}, [("y", (2, 2, 5, 6), F32)], inits, opset=18,
                   dilations=[2, 1], pads=[1, 0, 0, 1], strides=[1, 2])
    _check(model, {"x": x})


def test_deform_conv():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 4, 5, 5)).astype(F32)
    w = rng.normal(size=(4, 2, 2, 2)).astype(F32)
    offset = rng.normal(size=(1, 2 * 2 * 4, 3, 2)).astype(F32)
    b = rng.normal(size=(4,)).astype(F32)
    mask = rng.uniform(size=(1, 2 * 4, 3, 2)).astype(F32)
    feeds = {"x": x, "w": w, "offset": offset, "b": b, "mask": mask}
    model = _model("DeformConv", feeds, [("y", (1, 4, 3, 2), F32)], opset=22, group=2,
                   offset_group=2, kernel_shape=[2, 2], pads=[1, 0, 0, 1], strides=[2, 2],
                   dilations=[1, 2])
    _check(model, feeds)


def test_unsupported_values_are_clear_errors():
    x = np.zeros((2, 3), F32)
    with pytest.raises(ConversionError, match=r"\(LpNormalization\): attribute p=3 is not supported"):
        hetc.compile(_model("LpNormalization", {"x": x}, [("y", (2, 3), F32)], opset=22, p=3))
    m = np.zeros((4, 4), F32)
    with pytest.raises(ConversionError, match=r"\(Det\): matrices larger than 3x3"):
        hetc.compile(_model("Det", {"m": m}, [("y", (), F32)], opset=22))
    with pytest.raises(ConversionError, match=r"\(DFT\): input dft_length must be a constant"):
        node = helper.make_node("DFT", ["x", "len"], ["y"], onesided=0)
        hetc.compile(make([node], [tensor("x", (1, 4, 1)), tensor("len", (), np.int64)],
                          [tensor("y", (1, 4, 2))], opset=20))
    with pytest.raises(ConversionError, match=r"\(DeformConv\): only 2D"):
        v = np.zeros((1, 1, 4), F32)
        hetc.compile(_model("DeformConv", {"x": v, "w": np.zeros((1, 1, 2), F32),
                                           "o": np.zeros((1, 2, 3), F32)},
                            [("y", (1, 1, 3), F32)], opset=22))


def test_run_time_axis_and_size():
    """CumProd's axis and a window's size as graph inputs: one compiled model, several values."""
    x = np.arange(1, 7, dtype=F32).reshape(2, 3)
    node = helper.make_node("CumProd", ["x", "axis"], ["y"], reverse=1)
    model = make([node], [tensor("x", (2, 3)), tensor("axis", (), np.int64)], [tensor("y", (2, 3))], opset=26)
    compiled = hetc.compile(model)
    for axis in (0, -1):
        feeds = {"x": x, "axis": np.array(axis, np.int64)}
        np.testing.assert_allclose(compiled.run(feeds)["y"], ReferenceEvaluator(model).run(None, feeds)[0])
    node = helper.make_node("HannWindow", ["n"], ["y"])
    model = make([node], [tensor("n", (), np.int64)], [tensor("y", ("len",))], opset=17)
    compiled = hetc.compile(model)
    for n in (4, 9):
        feeds = {"n": np.array(n, np.int64)}
        assert_close(compiled.run(feeds)["y"], ReferenceEvaluator(model).run(None, feeds)[0])
