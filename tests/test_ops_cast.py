"""Cast / CastLike: float8 rounding and saturation, bool and integer casts, errors.

Expected values come from onnx.reference (ml_dtypes). float8 results are compared bit for
bit (NaN: only its position), so the rounding to nearest even and the saturate rules are
checked exactly.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_util import IR_VERSION

import hetc
from hetc.errors import ConversionError

F8 = {TP.FLOAT8E4M3FN: "e4m3fn", TP.FLOAT8E4M3FNUZ: "e4m3fnuz", TP.FLOAT8E5M2: "e5m2", TP.FLOAT8E5M2FNUZ: "e5m2fnuz"}


def _model(nodes, inputs, outputs, opset=21):
    graph = helper.make_graph(nodes, "cast", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    return model


def _vi(name, elem, n):
    return helper.make_tensor_value_info(name, elem, [n])


def _run_both(model, feeds):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy's "invalid value in cast" in the reference
        expected = ReferenceEvaluator(model).run(None, feeds)
    got = hetc.compile(model).run(feeds)
    return [got[o.name] for o in model.graph.output], expected


def _assert_same(actual, expected, what):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    if expected.dtype.itemsize == 1 and expected.dtype.kind == "V":  # float8: bits, NaN by position
        nan = np.isnan(expected.astype(np.float32))
        assert np.array_equal(np.isnan(actual.astype(np.float32)), nan), what
        bad = (actual.view(np.uint8) != expected.view(np.uint8)) & ~nan
        assert not bad.any(), f"{what}: {int(bad.sum())} differ, e.g. {expected[bad][:4]} vs {actual[bad][:4]}"
    else:
        assert np.array_equal(actual, expected, equal_nan=expected.dtype.kind == "f"), what


def _halfway_values() -> np.ndarray:
    """Every finite float8 value, the midpoints between neighbours and their float32 neighbours."""
    parts = [np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e6, -1e6, 1e-30, 465, 464, 463, 61440, 61439])]
    for t in F8:
        v = np.arange(256, dtype=np.uint8).view(helper.tensor_dtype_to_np_dtype(t)).astype(np.float64)
        v = np.sort(v[np.isfinite(v)])
        mid = ((v[1:] + v[:-1]) / 2).astype(np.float32)
        parts += [v, mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))]
    return np.concatenate(parts)


def _to_f8_model(src, n, op="Cast"):
    nodes, outputs = [], []
    for t, name in F8.items():
        for sat in (0, 1):
            out = f"y_{name}_{sat}"
            if op == "Cast":
                nodes.append(helper.make_node("Cast", ["x"], [out], to=t, saturate=sat))
            else:
                nodes.append(helper.make_node("CastLike", ["x", f"like_{name}"], [out], saturate=sat))
            outputs.append(_vi(out, t, n))
    inputs = [_vi("x", src, n)] + ([_vi(f"like_{name}", t, 1) for t, name in F8.items()] if op == "CastLike" else [])
    return _model(nodes, inputs, outputs)


@pytest.mark.parametrize("src", [TP.FLOAT16, TP.BFLOAT16])
def test_16bit_to_float8_exhaustive(src):
    """Every float16 / bfloat16 bit pattern into every float8 type, saturate 0 and 1."""
    x = np.arange(65536, dtype=np.uint16).view(helper.tensor_dtype_to_np_dtype(src))
    model = _to_f8_model(src, x.size)
    got, expected = _run_both(model, {"x": x})
    for o, a, e in zip(model.graph.output, got, expected):
        _assert_same(a, e, o.name)


@pytest.mark.parametrize("src", [TP.FLOAT, TP.DOUBLE])
def test_float_to_float8_ties_and_overflow(src):
    rng = np.random.default_rng(0)
    x = np.concatenate([_halfway_values(), rng.standard_normal(4000) * 2.0 ** rng.integers(-20, 18, 4000)])
    x = x.astype(helper.tensor_dtype_to_np_dtype(src))
    model = _to_f8_model(src, x.size)
    got, expected = _run_both(model, {"x": x})
    for o, a, e in zip(model.graph.output, got, expected):
        _assert_same(a, e, o.name)


def test_castlike_to_float8_no_saturate():
    x = np.array([0.3, -0.3, 1e6, -1e6, np.inf, -np.inf, np.nan, 300, 470, 60000], np.float32)
    model = _to_f8_model(TP.FLOAT, x.size, op="CastLike")
    feeds = {"x": x} | {f"like_{name}": np.zeros(1, helper.tensor_dtype_to_np_dtype(t)) for t, name in F8.items()}
    got, expected = _run_both(model, feeds)
    for o, a, e in zip(model.graph.output, got, expected):
        _assert_same(a, e, o.name)
    e5m2 = got[[o.name for o in model.graph.output].index("y_e5m2_0")].astype(np.float32)
    assert np.isposinf(e5m2[2]) and np.isneginf(e5m2[3])  # e5m2 has inf: overflow without saturation


def test_from_float8_every_code():
    """All 256 codes of each float8 type (and e8m0) to float32/float16/float64/int32/bool and float8."""
    types = list(F8) + [TP.FLOAT8E8M0]
    nodes, inputs, outputs, feeds = [], [], [], {}
    for t in types:
        name = helper.tensor_dtype_to_string(t).split(".")[-1].lower()
        inputs.append(_vi(name, t, 256))
        feeds[name] = np.arange(256, dtype=np.uint8).view(helper.tensor_dtype_to_np_dtype(t))
        targets = [TP.FLOAT, TP.FLOAT16, TP.DOUBLE, TP.BOOL] + [u for u in F8 if u != t]
        for u in targets:
            out = f"{name}_to_{u}"
            nodes.append(helper.make_node("Cast", [name], [out], to=u))
            outputs.append(_vi(out, u, 256))
    model = _model(nodes, inputs, outputs, opset=24)
    got, expected = _run_both(model, feeds)
    for o, a, e in zip(model.graph.output, got, expected):
        _assert_same(a, e, o.name)


def test_float_to_e8m0_round_modes():
    x = np.array([0.0, 1.0, 1.5, 3.0, 0.75, 1.25, 2.0**-130, 3e38, np.inf, -2.5, np.nan, 1e-3, 6.0, 7.0],
                 np.float32)
    nodes, outputs = [], []
    for mode in ("up", "down", "nearest"):
        for sat in (0, 1):
            out = f"y_{mode}_{sat}"
            nodes.append(helper.make_node("Cast", ["x"], [out], to=TP.FLOAT8E8M0, saturate=sat, round_mode=mode))
            outputs.append(_vi(out, TP.FLOAT8E8M0, x.size))
    model = _model(nodes, [_vi("x", TP.FLOAT, x.size)], outputs, opset=24)
    got, expected = _run_both(model, {"x": x})
    for o, a, e in zip(model.graph.output, got, expected):
        _assert_same(a, e, o.name)


def test_bool_and_integer_casts():
    f = np.array([0, -0.0, 0.5, -0.5, 1.7, -1.7, 2.5, -2.5, 100.9, -100.9, np.nan, np.inf, 1e-40], np.float32)
    i = np.array([0, 1, 2, -1, 255, 256, -129, 7, 0, 3, -5, 9, 1], np.int32)
    b = np.array([True, False] * 6 + [True])
    n = f.size
    casts = [("f", TP.BOOL), ("i", TP.BOOL), ("b", TP.FLOAT), ("b", TP.INT64), ("i", TP.FLOAT16),
             ("i", TP.INT8), ("i", TP.UINT8), ("i", TP.BFLOAT16), ("h", TP.BOOL), ("h", TP.INT8)]
    nodes = [helper.make_node("Cast", ["f"], ["h"], to=TP.FLOAT16)]
    outputs = []
    for k, (src, to) in enumerate(casts):
        nodes.append(helper.make_node("Cast", [src], [f"y{k}"], to=to))
        outputs.append(_vi(f"y{k}", to, n))
    # float -> int truncates toward zero (in-range values only: out of range is undefined)
    nodes.append(helper.make_node("Slice", ["f", "s0", "s1"], ["fin"]))
    for k, to in enumerate([TP.INT32, TP.INT8, TP.INT64]):
        nodes.append(helper.make_node("Cast", ["fin"], [f"t{k}"], to=to))
        outputs.append(_vi(f"t{k}", to, 10))
    nodes.append(helper.make_node("CastLike", ["fin", "i"], ["like"]))
    outputs.append(_vi("like", TP.INT32, 10))
    graph = helper.make_graph(nodes, "cast", [_vi("f", TP.FLOAT, n), _vi("i", TP.INT32, n), _vi("b", TP.BOOL, n)],
                              outputs, [onnx.numpy_helper.from_array(np.array([0], np.int64), "s0"),
                                        onnx.numpy_helper.from_array(np.array([10], np.int64), "s1")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = IR_VERSION
    got, expected = _run_both(model, {"f": f, "i": i, "b": b})
    for o, a, e in zip(model.graph.output, got, expected):
        _assert_same(a, e, o.name)
    assert got[0][10]  # NaN -> True


def test_cast_opset6_and_cast1_string_to():
    x = np.array([1.5, -2.7, 3.0], np.float32)
    m6 = _model([helper.make_node("Cast", ["x"], ["y"], to=TP.INT32)], [_vi("x", TP.FLOAT, 3)],
                [_vi("y", TP.INT32, 3)], opset=6)
    got, expected = _run_both(m6, {"x": x})
    _assert_same(got[0], expected[0], "opset 6")
    m1 = _model([helper.make_node("Cast", ["x"], ["y"], to="DOUBLE")], [_vi("x", TP.FLOAT, 3)],
                [_vi("y", TP.DOUBLE, 3)], opset=1)
    y = hetc.compile(m1).run({"x": x})["y"]
    assert y.dtype == np.float64 and np.array_equal(y, x.astype(np.float64))


@pytest.mark.parametrize("node, opset, message", [
    (helper.make_node("Cast", ["x"], ["y"], to=TP.STRING), 21, "casting to STRING is not supported"),
    (helper.make_node("Cast", ["x"], ["y"], to=TP.FLOAT8E4M3FN, saturate=2), 21, "saturate=2 is not supported"),
    (helper.make_node("Cast", ["x"], ["y"], to=TP.FLOAT8E8M0, round_mode="zero"), 24,
     "round_mode='zero' is not supported"),
])
def test_cast_errors(node, opset, message):
    to = helper.get_attribute_value(next(a for a in node.attribute if a.name == "to"))
    model = _model([node], [_vi("x", TP.FLOAT, 3)], [_vi("y", to, 3)], opset=opset)
    with pytest.raises(ConversionError, match=f"\\(Cast\\): .*{message}"):
        hetc.compile(model)


def test_float8_table_matches_ml_dtypes():
    # the decoder's table is ml_dtypes' own reading of each byte
    from hetc.frontends.onnx.ops.cast import _f8_table

    t = _f8_table("float8_e4m3fnuz")
    assert t[0x80] != t[0x80] and t[0x7F] == 240.0 and t[0x01] == 2.0**-10
    assert float(np.float32(240).astype(ml_dtypes.float8_e4m3fnuz)) == 240.0
