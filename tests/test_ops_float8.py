"""Narrow types end to end: the sub-byte ONNX types (int4, uint4, int2, uint2, float4e2m1) held one
element per byte (hetc/narrow.py) through Cast, CastLike, QuantizeLinear,
DequantizeLinear, initializers, data-movement ops and the runtime boundary, checked bit for bit
against the ONNX reference evaluator (ml_dtypes). float8 casts are tested in test_ops_cast.py."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_util import make, tensor

import hetc

SUB_BYTE = {TP.INT4: ml_dtypes.int4, TP.UINT4: ml_dtypes.uint4, TP.INT2: ml_dtypes.int2,
            TP.UINT2: ml_dtypes.uint2, TP.FLOAT4E2M1: ml_dtypes.float4_e2m1fn}


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _bits(a):
    """An array's bytes, and its dtype: what must match exactly."""
    a = np.asarray(a)
    return a.dtype, a.view(np.uint8) if a.dtype.itemsize == 1 else a.view(f"u{a.dtype.itemsize}")


def _check(model, inputs):
    got = hetc.compile(model).run(inputs)
    want = ReferenceEvaluator(model).run(None, inputs)
    assert len(got) == len(want)
    for (name, g), w in zip(got.items(), want):
        g_dtype, g_bits = _bits(g)
        w_dtype, w_bits = _bits(w)
        assert g_dtype == w_dtype, name
        np.testing.assert_array_equal(g_bits, w_bits, err_msg=name)


def _float_inputs(elem):
    """Ties of the target's rounding, negatives, values past its range (wrapped or saturated)."""
    v = np.concatenate([np.arange(-20, 20, 0.25), [0.0, -0.0, 1e6, -1e6, 1e-30, 5.75, -2.75]]).astype(np.float32)
    if elem == TP.FLOAT4E2M1:  # float4e2m1 saturates; NaN gives a zero (ints: undefined)
        v = np.concatenate([v, [np.inf, -np.inf, np.nan, -np.nan]]).astype(np.float32)
    return v


@pytest.mark.parametrize("elem", list(SUB_BYTE), ids=[TP.DataType.Name(e) for e in SUB_BYTE])
def test_cast_float_to_sub_byte_and_back(elem):
    """float32 -> T (an output), T -> float32 and T -> float16, and float16 -> T."""
    x = _float_inputs(elem)
    nodes = [helper.make_node("Cast", ["x"], ["t"], to=elem),
             helper.make_node("Cast", ["t"], ["f32"], to=TP.FLOAT),
             helper.make_node("Cast", ["t"], ["f16"], to=TP.FLOAT16),
             helper.make_node("Cast", ["x16"], ["t16"], to=elem)]
    n = len(x)
    model = make(nodes, [tensor("x", [n]), tensor("x16", [n], np.float16)],
                 [_vi("t", elem, [n]), tensor("f32", [n]), tensor("f16", [n], np.float16), _vi("t16", elem, [n])],
                 opset=25)
    _check(model, {"x": x, "x16": x.astype(np.float16)})


@pytest.mark.parametrize("elem, wide", [(TP.INT4, TP.INT8), (TP.UINT2, TP.UINT8)])
def test_sub_byte_input_to_int_and_castlike(elem, wide):
    """A sub-byte graph input: widened, passed through a Transpose, and CastLike to its type."""
    dtype = SUB_BYTE[elem]
    bits = 4 if elem == TP.INT4 else 2
    a = np.arange(2 ** bits * 3, dtype=np.int32).reshape(3, -1) - (2 ** (bits - 1) if elem == TP.INT4 else 0)
    a = (a % 2 ** bits).astype(np.uint8).view(dtype) if elem == TP.UINT2 else a.astype(dtype)
    shape = list(a.shape)
    nodes = [helper.make_node("Cast", ["a"], ["w"], to=wide),
             helper.make_node("Transpose", ["a"], ["at"], perm=[1, 0]),
             helper.make_node("CastLike", ["x", "a"], ["like"], saturate=1)]
    x = np.array([-9.5, -3.0, -1.5, 0.0, 1.0, 2.5, 7.9, 17.0], np.float16)
    model = make(nodes, [_vi("a", elem, shape), tensor("x", [8], np.float16)],
                 [_vi("w", wide, shape), _vi("at", elem, shape[::-1]), _vi("like", elem, [8])], opset=25)
    _check(model, {"a": a, "x": x})


def test_quantize_dequantize_int4_per_axis_with_initializers():
    """QuantizeLinear to int4 (per-axis zero point, an initializer) then DequantizeLinear of an
    int4 weight initializer reshaped first: the round trip a 4-bit weight-only model makes."""
    x = (np.random.default_rng(0).standard_normal((3, 8)) * 6).astype(np.float32)
    zp = np.array([1, -2, 0], ml_dtypes.int4)
    w = np.arange(-8, 16, dtype=np.int32).reshape(2, 12) % 16 - 8
    inits = {"s": np.array([0.5, 1.0, 0.25], np.float32), "zp": zp, "w": w.astype(ml_dtypes.int4),
             "wshape": np.array([4, 6], np.int64), "ws": np.array(0.125, np.float32), "wzp": np.array(3, ml_dtypes.int4)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], axis=0),
             helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["dq"], axis=0),
             helper.make_node("Reshape", ["w", "wshape"], ["w2"]),
             helper.make_node("DequantizeLinear", ["w2", "ws", "wzp"], ["wf"])]
    model = make(nodes, [tensor("x", [3, 8])],
                 [_vi("q", TP.INT4, [3, 8]), tensor("dq", [3, 8]), tensor("wf", [4, 6])], inits, opset=21)
    # numpy_helper writes the int4 initializers packed, as an exporter does
    assert model.graph.initializer[1].data_type == TP.INT4
    _check(model, {"x": x})


@pytest.mark.parametrize("elem", [TP.UINT4, TP.FLOAT4E2M1])
def test_quantize_dequantize_uint4_float4(elem):
    x = np.array([[0.0, 2.5, 4.8, 8.6], [-30.0, -20.0, 6.0, 9.0], [-0.0, -2.5, 4.4, 40.0]], np.float32)
    zp = np.array([2, 0, 1], SUB_BYTE[elem]) if elem == TP.UINT4 else np.array([0, 0.5, -1], SUB_BYTE[elem])
    inits = {"s": np.array([2.0, 3.0, 4.0], np.float32), "zp": zp}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], axis=0),
             helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["dq"], axis=0)]
    model = make(nodes, [tensor("x", [3, 4])], [_vi("q", elem, [3, 4]), tensor("dq", [3, 4])], inits, opset=23)
    _check(model, {"x": x})


def test_sub_byte_constant_node_and_artifact_round_trip(tmp_path):
    """A Constant node of type int2, and an artifact saved and loaded, whose int4 input and
    int4 output cross the runtime boundary as ml_dtypes arrays."""
    const = numpy_helper.from_array(np.array([1, -2, 0, -1], ml_dtypes.int2), "c")
    nodes = [helper.make_node("Constant", [], ["c"], value=const),
             helper.make_node("Cast", ["c"], ["ci"], to=TP.INT32),
             helper.make_node("Identity", ["a"], ["u"])]
    model = make(nodes, [_vi("a", TP.INT4, [4])], [tensor("ci", [4], np.int32), _vi("u", TP.INT4, [4])], opset=25)
    a = np.array([-8, -1, 0, 7], ml_dtypes.int4)
    compiled = hetc.compile(model)
    want = ReferenceEvaluator(model).run(None, {"a": a})
    loaded = hetc.load(compiled.save(tmp_path / "art"))
    got = loaded.run({"a": a})
    np.testing.assert_array_equal(got["ci"], want[0])
    assert got["u"].dtype == ml_dtypes.int4
    np.testing.assert_array_equal(got["u"].view(np.uint8), want[1].view(np.uint8))
