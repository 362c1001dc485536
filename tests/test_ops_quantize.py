"""QuantizeLinear, DequantizeLinear, QLinearMatMul, QLinearConv, ConvInteger against
onnx.reference (bit-exact: rounding half to even, saturation, float8 encodings)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_util import make, tensor

import hetc
from hetc.errors import ConversionError

RNG = np.random.default_rng(0)


def _run(model, inputs):
    got = hetc.compile(model).run(inputs)
    want = ReferenceEvaluator(model).run(None, inputs)
    return list(got.values()), want


def _same(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    if expected.dtype.kind in "iub":
        np.testing.assert_array_equal(actual, expected)
    else:  # floats (float8 included): same bits, NaN anywhere NaN is expected
        a, e = actual.astype(np.float32), expected.astype(np.float32)
        assert np.array_equal(np.isnan(a), np.isnan(e))
        ok = ~np.isnan(e)
        np.testing.assert_array_equal(a[ok].view(np.uint32), e[ok].view(np.uint32))


def _ties(shape, scale=1.0):
    """Values on and next to .5 multiples of ``scale``, plus large ones that saturate."""
    v = RNG.integers(-600, 600, size=shape).astype(np.float32) * 0.5 * scale
    v.flat[::7] *= 300
    return v


@pytest.mark.parametrize("case", ["axis_int8", "blocked_uint16", "output_dtype_int16",
                                  "float16", "precision", "int32_x"])
def test_quantize_linear(case):
    f32, opset, attrs, x_dtype = np.float32, 21, {}, np.float32
    x = _ties((2, 3, 7), 0.25)
    if case == "axis_int8":
        opset, attrs = 13, {"axis": -1}
        scale = RNG.uniform(0.1, 0.5, 7).astype(f32)
        zp = RNG.integers(-10, 10, 7).astype(np.int8)
    elif case == "blocked_uint16":  # 7 = 3 + 3 + 1: the last block is cut
        attrs = {"axis": 2, "block_size": 3}
        scale = RNG.uniform(0.01, 0.5, (2, 3, 3)).astype(f32)
        zp = RNG.integers(0, 30000, (2, 3, 3)).astype(np.uint16)
    elif case == "output_dtype_int16":
        attrs = {"output_dtype": TensorProto.INT16, "axis": 1}
        scale, zp = np.array([0.001, 0.25, 2.0], f32), None
    elif case == "float16":
        opset, x_dtype = 19, np.float16  # x / scale stays finite in float16 (the reference's
        x = (x / 8).astype(np.float16)   # int32 cast of inf is undefined)
        scale, zp = np.array(0.25, np.float16), np.array(3, np.uint8)
    elif case == "precision":  # float16 inputs divided in float32
        opset, x_dtype, attrs = 23, np.float16, {"precision": TensorProto.FLOAT}
        x = (x / 7).astype(np.float16)
        scale, zp = np.array(0.03, np.float16), np.array(-3, np.int8)
    else:
        opset, x_dtype = 13, np.int32
        x = RNG.integers(-2000, 2000, (2, 3, 7)).astype(np.int32)
        scale, zp = np.array(8.0, f32), np.array(100, np.uint8)
    inits = {"s": scale} | ({"zp": zp} if zp is not None else {})
    node = helper.make_node("QuantizeLinear", ["x", "s"] + (["zp"] if zp is not None else []), ["y"],
                            **attrs)
    out_dtype = zp.dtype if zp is not None else np.int16
    model = make([node], [tensor("x", x.shape, x_dtype)], [tensor("y", x.shape, out_dtype)], inits,
                 opset=opset)
    got, want = _run(model, {"x": x})
    _same(got[0], want[0])


def _float8_sweep(dtype):
    codes = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)
    fin = np.unique(codes[np.isfinite(codes)])
    mids = ((fin[1:].astype(np.float64) + fin[:-1]) / 2).astype(np.float32)
    top = float(ml_dtypes.finfo(dtype).max)
    return np.concatenate([
        fin, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf),
        RNG.standard_normal(3000).astype(np.float32) * np.float32(10.0) ** RNG.integers(-9, 6, 3000),
        np.array([np.inf, -np.inf, np.nan, top * 1.03, -top * 1.1, 1e30, 1e-30, -0.0], np.float32),
    ]).astype(np.float32)


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
@pytest.mark.parametrize("saturate", [0, 1])
def test_quantize_float8_bit_exact(dtype, saturate):
    x = _float8_sweep(dtype)
    node = helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"], saturate=saturate)
    model = make([node], [tensor("x", x.shape)], [tensor("y", x.shape, dtype)],
                 {"s": np.array(1.0, np.float32), "zp": np.zeros(1, dtype)}, opset=21)
    got, want = _run(model, {"x": x})
    _same(got[0], want[0])


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
def test_dequantize_float8_all_codes(dtype):
    x = np.arange(256, dtype=np.uint8).view(dtype)
    node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"])
    model = make([node], [tensor("x", [256], dtype)], [tensor("y", [256])],
                 {"s": np.array(0.5, np.float32)}, opset=21)
    got, want = _run(model, {"x": x})
    _same(got[0], want[0])


@pytest.mark.parametrize("case", ["blocked_int16_f16_out", "axis_int32", "uint8_bf16_scale"])
def test_dequantize_linear(case):
    if case == "blocked_int16_f16_out":
        x = RNG.integers(-32768, 32767, (4, 5), dtype=np.int16)
        scale = RNG.uniform(0.001, 0.01, (2, 5)).astype(np.float32)
        zp = RNG.integers(-100, 100, (2, 5)).astype(np.int16)
        attrs, opset, out = {"axis": 0, "block_size": 3, "output_dtype": TensorProto.FLOAT16}, 23, np.float16
    elif case == "axis_int32":
        x = RNG.integers(-100000, 100000, (3, 4), dtype=np.int32)
        scale, zp = RNG.uniform(0.1, 1, 3).astype(np.float32), np.array([0, 0, 0], np.int32)
        attrs, opset, out = {"axis": -2}, 19, np.float32
    else:
        x = RNG.integers(0, 255, (3, 4), dtype=np.uint8)
        scale, zp = np.array(0.0625, ml_dtypes.bfloat16), np.array(128, np.uint8)
        attrs, opset, out = {}, 19, ml_dtypes.bfloat16
    node = helper.make_node("DequantizeLinear", ["x", "s", "zp"], ["y"], **attrs)
    model = make([node], [tensor("x", x.shape, x.dtype)], [tensor("y", x.shape, out)],
                 {"s": scale, "zp": zp}, opset=opset)
    got, want = _run(model, {"x": x})
    _same(got[0], want[0])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_matmul_per_row_and_column(dtype):
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, (2, 3, 8), dtype=dtype)
    b = RNG.integers(info.min, info.max, (8, 5), dtype=dtype)
    inits = {
        "a_s": RNG.uniform(0.01, 0.05, 3).astype(np.float32), "a_zp": RNG.integers(0, 10, 3).astype(dtype),
        "b_s": RNG.uniform(0.01, 0.05, 5).astype(np.float32), "b_zp": RNG.integers(0, 10, 5).astype(dtype),
        "y_s": np.array([0.07], np.float32), "y_zp": np.array([5], dtype),
    }
    node = helper.make_node("QLinearMatMul", ["a", "a_s", "a_zp", "b", "b_s", "b_zp", "y_s", "y_zp"], ["y"])
    model = make([node], [tensor("a", a.shape, dtype), tensor("b", b.shape, dtype)],
                 [tensor("y", [2, 3, 5], dtype)], inits, opset=21)
    got = hetc.compile(model).run({"a": a, "b": b})["y"]
    # onnx.reference applies 1-D a_scale/a_zero_point along the last axis: compute the spec here
    a32 = a.astype(np.int64) - inits["a_zp"].astype(np.int64)[:, None]
    b32 = b.astype(np.int64) - inits["b_zp"].astype(np.int64)
    mult = (inits["a_s"][:, None] * inits["b_s"] / inits["y_s"]).astype(np.float64)
    want = np.clip(np.rint((a32 @ b32) * mult) + 5, info.min, info.max).astype(dtype)
    np.testing.assert_array_equal(got, want)


def test_qlinear_conv_per_channel_bias_group_strides():
    x = RNG.integers(0, 255, (1, 4, 9, 8), dtype=np.uint8)
    w = RNG.integers(-128, 127, (6, 2, 3, 3), dtype=np.int8)
    inits = {
        "x_s": np.array(0.02, np.float32), "x_zp": np.array(120, np.uint8),
        "w_s": RNG.uniform(0.005, 0.02, 6).astype(np.float32), "w_zp": np.zeros(6, np.int8),
        "y_s": np.array(0.3, np.float32), "y_zp": np.array(7, np.uint8),
        "B": RNG.integers(-500, 500, 6).astype(np.int32),
    }
    node = helper.make_node("QLinearConv", ["x", "x_s", "x_zp", "w", "w_s", "w_zp", "y_s", "y_zp", "B"],
                            ["y"], group=2, strides=[2, 1], dilations=[1, 2], auto_pad="SAME_LOWER")
    model = make([node], [tensor("x", x.shape, np.uint8), tensor("w", w.shape, np.int8)],
                 [tensor("y", [1, 6, 5, 8], np.uint8)], inits, opset=10)
    got, want = _run(model, {"x": x, "w": w})
    _same(got[0], want[0])


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "NOTSET"])
def test_conv_integer(auto_pad):
    x = RNG.integers(-128, 127, (2, 3, 7, 5), dtype=np.int8)
    w = RNG.integers(0, 255, (4, 3, 2, 2), dtype=np.uint8)
    attrs = ({"auto_pad": auto_pad} if auto_pad != "NOTSET"
             else {"pads": [2, 1, 0, 1], "strides": [2, 1], "dilations": [1, 2]})
    node = helper.make_node("ConvInteger", ["x", "w", "x_zp", "w_zp"], ["y"], **attrs)
    model = make([node], [tensor("x", x.shape, np.int8), tensor("w", w.shape, np.uint8)],
                 [tensor("y", [2, 4, 7, 5] if auto_pad == "SAME_UPPER" else [2, 4, 4, 5], np.int32)],
                 {"x_zp": np.array(-3, np.int8), "w_zp": np.array([1, 2, 3, 4], np.uint8)}, opset=10)
    got, want = _run(model, {"x": x, "w": w})
    _same(got[0], want[0])


def test_quantize_fnuz_output_is_a_clear_error():
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"], name="q",
                            output_dtype=TensorProto.FLOAT8E4M3FNUZ)
    model = make([node], [tensor("x", [4])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FNUZ, [4])],
                 {"s": np.array(0.5, np.float32)}, opset=21)
    with pytest.raises(ConversionError, match=r"node 'q' \(QuantizeLinear\): attribute output_dtype=18.*"
                                              r"float8_e4m3fnuz.*fnuz"):
        hetc.compile(model)


def test_dequantize_fnuz_input_is_a_clear_error():
    node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"], name="dq")
    model = make([node], [tensor("x", [4], ml_dtypes.float8_e4m3fnuz)], [tensor("y", [4])],
                 {"s": np.array(0.5, np.float32)}, opset=21)
    with pytest.raises(ConversionError, match=r"node 'dq' \(DequantizeLinear\): input x has dtype "
                                              r"float8_e4m3fnuz"):
        hetc.compile(model)


def test_qlinear_conv_4d_spatial_is_a_clear_error():
    names = ["x", "x_s", "x_zp", "w", "w_s", "w_zp", "y_s", "y_zp"]
    node = helper.make_node("QLinearConv", names, ["y"], name="qc")
    inits = {"x_s": np.array(1.0, np.float32), "x_zp": np.array(0, np.uint8),
             "w": np.ones((1, 1, 1, 1, 1, 1), np.uint8), "w_s": np.array(1.0, np.float32),
             "w_zp": np.array(0, np.uint8), "y_s": np.array(1.0, np.float32), "y_zp": np.array(0, np.uint8)}
    model = make([node], [tensor("x", [1, 1, 2, 2, 2, 2], np.uint8)], [tensor("y", [1, 1, 2, 2, 2, 2], np.uint8)],
                 inits, opset=10)
    with pytest.raises(ConversionError, match=r"node 'qc' \(QLinearConv\).*1-D, 2-D or 3-D"):
        hetc.compile(model)
