"""The FPGA backend's Python half on hand-built Regions: the numpy emulation (float against
direct loops, fixed point against float), precision choice on known ranges, calibration files,
and the analytical estimates on closed-form cases. (Bit-exactness against ap_fixed.h:
test_fpga_fixed.py; partitioning and Relax -> Region: test_fpga_patterns.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

from hetc.backends.fpga import emulate, estimates, precision
from hetc.backends.fpga.fixed import int_bits_for, quantize
from hetc.backends.fpga.layers import FLOAT, Layer, NumType, Region
from hetc.errors import UsageError
from hetc.frontends.onnx import TensorSpec

RNG = np.random.default_rng(0)


def _w(*shape, scale=0.4) -> np.ndarray:
    return RNG.normal(0, scale, shape).astype(np.float32)


def _all_kinds() -> Region:
    """Every layer kind once: (6, 6, 4) image -> (4, 5) rows and a pooled vector."""
    c = 4
    layers = [
        Layer("conv", "conv2d", ["x"], (6, 6, c), {"strides": (1, 1), "pads": (1, 1, 1, 1), "groups": 1},
              {"weight": _w(3, 3, c, c), "bias": _w(c)}),
        Layer("dw", "conv2d", ["conv"], (3, 3, c), {"strides": (2, 2), "pads": (0, 0, 1, 1), "groups": c},
              {"weight": _w(3, 3, 1, c), "bias": _w(c)}, reuse=3),
        Layer("avg", "avg_pool2d", ["dw"], (3, 3, c), {"kernel": (2, 2), "strides": (1, 1), "pads": (0, 0, 1, 1),
                                                      "count_include_pad": False}),
        Layer("mp", "max_pool2d", ["avg"], (3, 3, c), {"kernel": (2, 2), "strides": (1, 1), "pads": (1, 1, 0, 0)}),
        Layer("relu", "relu", ["mp"], (3, 3, c)),
        Layer("clip", "clip", ["dw"], (3, 3, c), {"min": -0.5, "max": 0.5}),
        Layer("leaky", "leaky_relu", ["clip"], (3, 3, c), {"alpha": 0.1}),
        Layer("sig", "sigmoid", ["leaky"], (3, 3, c)),
        Layer("tanh", "tanh", ["mp"], (3, 3, c)),
        Layer("ss", "scale_shift", ["tanh"], (3, 3, c), weights={"scale": _w(c), "shift": _w(c)}),
        Layer("add", "add", ["ss", "relu"], (3, 3, c)),
        Layer("mul", "multiply", ["add", "sig"], (3, 3, c)),
        Layer("tr", "transpose", ["mul"], (c, 3, 3), {"perm": (2, 0, 1)}),
        Layer("rs", "reshape", ["tr"], (c, 9)),
        Layer("fc", "dense", ["rs"], (c, 5), weights={"weight": _w(9, 5), "bias": _w(5)}, reuse=2),
        Layer("ln", "layer_norm", ["fc"], (c, 5), {"epsilon": 1e-5}, {"gamma": 1 + _w(5), "beta": _w(5)}),
        Layer("sm", "softmax", ["ln"], (c, 5)),
        Layer("gap", "global_avg_pool2d", ["mp"], (c,)),
    ]
    return Region("all_kinds", [("x", (6, 6, c))], [FLOAT], ["sm", "gap"], layers, batch=2)


def _direct_conv(x, w, b, strides, pads, groups):
    """Loops over every output: (B, H, W, C) x (KH, KW, C/groups, F)."""
    top, left, bottom, right = pads
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    kh, kw, _, f = w.shape
    oh = (xp.shape[1] - kh) // strides[0] + 1
    ow = (xp.shape[2] - kw) // strides[1] + 1
    out = np.zeros((x.shape[0], oh, ow, f))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, i * strides[0]:i * strides[0] + kh, j * strides[1]:j * strides[1] + kw, :]
            for o in range(f):
                cin = slice(o, o + 1) if groups > 1 else slice(None)
                out[:, i, j, o] = (win[..., cin] * w[..., o][None]).sum(axis=(1, 2, 3)) + b[o]
    return out


def _direct_pool(x, kernel, strides, pads, kind, count_include_pad=False):
    top, left, bottom, right = pads
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=fill)
    valid = np.pad(np.ones(x.shape[1:3]), ((top, bottom), (left, right)))
    oh = (xp.shape[1] - kernel[0]) // strides[0] + 1
    ow = (xp.shape[2] - kernel[1]) // strides[1] + 1
    out = np.zeros((x.shape[0], oh, ow, x.shape[3]))
    for i in range(oh):
        for j in range(ow):
            rows = slice(i * strides[0], i * strides[0] + kernel[0])
            cols = slice(j * strides[1], j * strides[1] + kernel[1])
            win = xp[:, rows, cols, :]
            if kind == "max":
                out[:, i, j] = win.max(axis=(1, 2))
            else:
                count = kernel[0] * kernel[1] if count_include_pad else valid[rows, cols].sum()
                out[:, i, j] = win.sum(axis=(1, 2)) / count
    return out


def test_float_emulation_matches_direct_loops():
    region = _all_kinds()
    x = RNG.normal(0, 1, (2, 6, 6, 4))
    out = emulate.run(region, [x])
    layer = region.layer
    conv = _direct_conv(x, layer("conv").weights["weight"], layer("conv").weights["bias"], (1, 1), (1, 1, 1, 1), 1)
    dw = _direct_conv(conv, layer("dw").weights["weight"], layer("dw").weights["bias"], (2, 2), (0, 0, 1, 1), 4)
    avg = _direct_pool(dw, (2, 2), (1, 1), (0, 0, 1, 1), "avg")
    mp = _direct_pool(avg, (2, 2), (1, 1), (1, 1, 0, 0), "max")
    for name, ref in [("conv", conv), ("dw", dw), ("avg", avg), ("mp", mp), ("gap", mp.mean(axis=(1, 2)))]:
        np.testing.assert_allclose(out[name], ref, rtol=1e-12, atol=1e-12, err_msg=name)
    s = layer("ss").weights
    add = np.tanh(mp) * s["scale"] + s["shift"] + np.maximum(mp, 0)
    clip = np.clip(dw, -0.5, 0.5)
    sig = 1 / (1 + np.exp(-np.where(clip > 0, clip, clip * np.float32(0.1))))
    rows = (add * sig).transpose(0, 3, 1, 2).reshape(2, 4, 9)
    fc = rows @ layer("fc").weights["weight"] + layer("fc").weights["bias"]
    np.testing.assert_allclose(out["fc"], fc, rtol=1e-12, atol=1e-12)
    ln = (fc - fc.mean(-1, keepdims=True)) / np.sqrt(fc.var(-1, keepdims=True) + 1e-5)
    ln = ln * layer("ln").weights["gamma"] + layer("ln").weights["beta"]
    e = np.exp(ln - ln.max(-1, keepdims=True))
    np.testing.assert_allclose(out["sm"], e / e.sum(-1, keepdims=True), rtol=1e-10)
    assert _direct_pool(dw, (3, 3), (1, 1), (1, 1, 1, 1), "avg", True).shape == (2, 3, 3, 4)


def test_fixed_emulation_against_float():
    region = _all_kinds()
    x = RNG.normal(0, 1, (2, 6, 6, 4))
    ref = emulate.run(region, [x])
    as_float = emulate.run(region, [x], fixed=True)  # float types: float32 arithmetic
    for name in ref:
        np.testing.assert_allclose(as_float[name], ref[name], rtol=1e-4, atol=1e-5, err_msg=name)
    errors = []
    for width in (8, 12, 16, 24):
        typed = precision.choose(region, "fixed", [x], width=width, accum_width=2 * width)
        out = emulate.run(typed, [x], fixed=True)
        for layer in typed.layers:  # every value is exactly a value of the layer's type
            assert np.array_equal(quantize(out[layer.name], layer.result), out[layer.name]), layer.name
        errors.append(max(float(np.abs(out[n] - ref[n]).max()) for n in ("sm", "gap")))
    assert errors == sorted(errors, reverse=True) and errors[-1] < 1e-3 < errors[0], errors


def test_emulation_checks_its_inputs():
    region = _all_kinds()
    with pytest.raises(ValueError, match="takes 1 inputs"):
        emulate.run(region, [])
    with pytest.raises(ValueError, match="expected"):
        emulate.run(region, [np.zeros((2, 6, 6, 3))])
    ranges = emulate.ranges(region, [np.full((1, 6, 6, 4), -3.0)])
    assert ranges["x"] == 3.0 and set(ranges) == {"x"} | {layer.name for layer in region.layers}


# -- precision -------------------------------------------------------------------------------------


def _small() -> Region:
    layers = [Layer("fc", "dense", ["x"], (3,), weights={"weight": np.array([[0.7, -0.2, 0.1]] * 4, np.float32),
                                                          "bias": np.array([3.0, -1.0, 0.0], np.float32)}),
              Layer("act", "relu", ["fc"], (3,)),
              Layer("sm", "softmax", ["act"], (3,))]
    return Region("small", [("x", (4,))], [FLOAT], ["sm"], layers)


def test_fixed_types_from_known_ranges():
    region = _small()
    typed = precision.choose(region, "fixed", {"x": 5.0, "fc": 12.0, "act": 12.0, "sm": 0.9})
    assert typed.input_types == [NumType(16, 5, True, "AP_RND_CONV", "AP_SAT")]  # 4 bits for 5, +1 headroom
    fc = typed.layer("fc")
    assert fc.result == NumType(16, 6)  # 12 needs 5 (sign included), +1 headroom
    assert fc.weight == NumType(16, 1, True, "AP_RND_CONV", "AP_SAT")  # |w| <= 0.7
    assert fc.bias == NumType(16, 3, True, "AP_RND_CONV", "AP_SAT")  # |b| <= 3
    assert fc.accum == NumType(32, 6 + precision.ACCUM_GUARD)
    assert typed.layer("act").result == fc.result  # pass-through keeps its input's type
    assert typed.layer("sm").result == NumType(16, int_bits_for(1.0))  # known range [0, 1]
    assert region.layer("fc").result == FLOAT and region.input_types == [FLOAT]  # a copy

    x = np.array([[5.0, -5.0, 1.0, 0.5]])  # the same ranges measured from calibration data
    assert precision.choose(region, "fixed", [x]).layer("fc").result.integer == int_bits_for(
        float(np.abs(x @ region.layer("fc").weights["weight"] + region.layer("fc").weights["bias"]).max())) + 1
    assert precision.choose(region, "fixed", [x]).input_types[0].integer == 5
    default = precision.choose(region, "fixed", width=12, accum_width=24)
    assert default.layer("fc").result == NumType(12, precision.DEFAULT_INT_BITS)
    assert default.layer("fc").accum.width == 24


def test_float_explicit_and_override_types():
    region = _small()
    floats = precision.choose(region, "float")
    assert all(t == FLOAT for layer in floats.layers for t in (layer.result, layer.weight or FLOAT,
                                                               layer.accum or FLOAT))
    typed = precision.choose(region, "ap_fixed<12,4>", accum_width=24)
    fc = typed.layer("fc")
    assert (fc.result, fc.weight, fc.bias, typed.input_types[0]) == (NumType(12, 4),) * 4
    assert fc.accum == NumType(24, 4 + precision.ACCUM_GUARD)
    assert precision.choose(region, NumType()).layer("fc").accum == FLOAT
    over = precision.choose(region, "fixed", overrides={"fc": "ap_fixed<20,8>", "fc.accum": NumType(40, 12),
                                                        "x": "float", "act": "ap_ufixed<8,4,AP_RND,AP_SAT>"})
    assert over.layer("fc").result == NumType(20, 8) and over.layer("fc").accum == NumType(40, 12)
    assert over.input_types == [FLOAT] and over.layer("act").result == NumType(8, 4, False, "AP_RND", "AP_SAT")
    wider = precision.choose(region, "fixed", overrides={"fc": "ap_fixed<20,8>"})
    assert wider.layer("act").result == NumType(20, 8) and wider.layer("fc").accum == NumType(32, 8 + 2)
    for bad, words in [({"nope": "float"}, "no such"), ({"act.weight": "float"}, "has no weight"),
                       ({"fc": "ap_fixed<70,3>"}, "not a number type")]:
        with pytest.raises(UsageError, match=words):
            precision.choose(region, "fixed", overrides=bad)
    with pytest.raises(UsageError, match="unknown precision mode 'int8'"):
        precision.choose(region, "int8")


def test_error_report_measures_against_float():
    region = _all_kinds()
    x = RNG.normal(0, 1, (2, 6, 6, 4))
    report = precision.error_report(precision.choose(region, "float"), region, [x])
    assert set(report) == {layer.name for layer in region.layers}
    assert max(r["max_rel_err"] for r in report.values()) < 1e-5 and report["fc"]["type"] == "float"
    narrow = precision.error_report(precision.choose(region, "fixed", [x], width=8), region, [x])
    assert narrow["conv"]["type"].startswith("ap_fixed<8,") and 1e-4 < narrow["sm"]["max_rel_err"] < 0.5
    assert narrow["conv"]["max_abs_err"] <= narrow["conv"]["max_rel_err"] * float(
        np.abs(emulate.run(region, [x])["conv"]).max()) * (1 + 1e-12)


# -- calibration files -------------------------------------------------------------------------------


def test_load_calibration(tmp_path):
    specs = [TensorSpec("x", (1, 3, 8, 8), "float32"), TensorSpec("ids", (1, 5), "int64")]
    good = tmp_path / "cal.npz"
    np.savez(good, x=np.zeros((7, 3, 8, 8), np.float32), ids=np.zeros((7, 5), np.int64), extra=np.zeros(2))
    arrays = precision.load_calibration(good, specs)
    assert list(arrays) == ["x", "ids"] and arrays["x"].shape == (7, 3, 8, 8)
    (tmp_path / "text.npz").write_text("not a zip")
    np.save(tmp_path / "single.npy", np.zeros(3))
    np.savez(tmp_path / "missing.npz", x=np.zeros((1, 3, 8, 8), np.float32))
    np.savez(tmp_path / "dtype.npz", x=np.zeros((1, 3, 8, 8)), ids=np.zeros((1, 5), np.int64))
    np.savez(tmp_path / "shape.npz", x=np.zeros((2, 3, 8, 9), np.float32), ids=np.zeros((2, 5), np.int64))
    np.savez(tmp_path / "empty.npz", x=np.zeros((0, 3, 8, 8), np.float32), ids=np.zeros((0, 5), np.int64))
    cases = {"nothing.npz": "not found", "text.npz": "not a numpy .npz", "single.npy": "single array",
             "missing.npz": "no array for input 'ids'", "dtype.npz": "'x' is float64, the model takes float32",
             "shape.npz": "(2, 3, 8, 9)", "empty.npz": "any number of samples"}
    for name, words in cases.items():
        with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")) as err:
            precision.load_calibration(tmp_path / name, specs)
        assert "\n" not in str(err.value) and str(tmp_path / name) in str(err.value)


# -- estimates -----------------------------------------------------------------------------------------


def _dense_region(n_in, n_out, reuse, rows=1, t=None) -> Region:
    t = t or NumType(16, 6)
    layer = Layer("fc", "dense", ["x"], (rows, n_out), weights={"weight": np.zeros((n_in, n_out), np.float32),
                                                               "bias": np.zeros(n_out, np.float32)},
                  result=t, weight=t, bias=t, accum=NumType(32, 10), reuse=reuse)
    return Region("d", [("x", (rows, n_in))], [t], ["fc"], [layer])


def test_dense_estimate_closed_form():
    est = estimates.estimate(_dense_region(16, 16, reuse=64, rows=3)).layers[0]
    assert est.multipliers == 16 * 16 // 64 and est.reuse == 64
    assert est.interval == 3 * 64  # II = reuse per row, beyond the 16 reads / writes per row
    assert est.dsp == est.multipliers  # 16 x 16 bits: one DSP48 each
    wide = estimates.estimate(_dense_region(64, 32, reuse=8)).layers[0]
    assert (wide.multipliers, wide.interval) == (256, 64)  # reading 64 inputs takes longer than II 8
    assert wide.depth == 64 + 8 + estimates.MUL_LATENCY + 6 * estimates.ADD_LATENCY  # log2(64) adder levels
    floats = estimates.estimate(_dense_region(16, 16, reuse=4, t=FLOAT)).layers[0]
    assert floats.dsp == 64 * (estimates.FMUL_DSP + estimates.FADD_DSP)
    # weights: one bank per multiplier, `reuse` words deep
    assert estimates.estimate(_dense_region(128, 128, reuse=1)).layers[0].bram_18k == 0  # constants
    small = estimates.estimate(_dense_region(128, 128, reuse=64)).layers[0]  # 64 x 16 bits = LUTRAM
    assert (small.bram_18k, small.lutram_bits) == (0, 256 * 64 * 16)
    big = estimates.estimate(_dense_region(128, 128, reuse=128)).layers[0]  # 128 x 16 bits: one BRAM each
    assert (big.multipliers, big.bram_18k) == (128, 128)


def test_dsp_and_bram_rules():
    dsp = estimates.dsp_per_multiply
    assert [dsp(NumType(a, 1), NumType(b, 1)) for a, b in [(16, 16), (27, 18), (18, 27), (28, 18), (32, 32),
                                                              (8, 8)]] == [1, 1, 1, 2, 4, 0]
    assert dsp(FLOAT, NumType(16, 1)) == 5
    mem = estimates.memory
    assert mem(64, 16) == (0, 1024) and mem(512, 36) == (1, 0) and mem(1024, 18) == (1, 0)
    assert mem(1024, 36) == (2, 0) and mem(2048, 16) == (2, 0) and mem(16384, 1) == (1, 0)
    for depth, width in [(300, 7), (3000, 20), (700, 64)]:
        assert mem(depth, width)[0] >= -(-depth * width // 18432)


def test_region_dataflow_totals_and_skip_fifo():
    t = NumType(16, 6)
    conv = Layer("conv", "conv2d", ["x"], (8, 8, 16), {"strides": (1, 1), "pads": (1, 1, 1, 1), "groups": 1},
                 {"weight": np.zeros((3, 3, 16, 16), np.float32), "bias": np.zeros(16, np.float32)},
                 result=t, weight=t, bias=t, accum=NumType(32, 8), reuse=9)
    layers = [conv, Layer("add", "add", ["x", "conv"], (8, 8, 16), result=t),
              Layer("relu", "relu", ["add"], (8, 8, 16), result=t), Layer("rs", "reshape", ["relu"], (1024,), result=t)]
    region = Region("r", [("x", (8, 8, 16))], [t], ["rs"], layers, batch=4)
    est = estimates.estimate(region, clock_ns=5.0)
    by = {e.name: e for e in est.layers}
    assert by["conv"].multipliers == 3 * 3 * 16 * 16 // 9 and by["conv"].interval == 8 * 8 * 16  # reads
    assert by["conv"].depth == (2 * 8 + 3) * 16 + 9 + estimates.MUL_LATENCY + 8 * estimates.ADD_LATENCY
    assert by["add"].bram_18k >= 1  # x waits for the conv's first output in a FIFO
    assert by["rs"].interval == by["rs"].depth == 0
    assert est.interval == max(e.interval for e in est.layers)
    assert est.latency == est.interval * 4 + sum(e.depth for e in est.layers)  # a chain: sum of depths
    assert est.dsp == sum(e.dsp for e in est.layers) and est.bram_18k == sum(e.bram_18k for e in est.layers)
    data = json.loads(json.dumps(est.to_json()))
    assert data["estimate"] is True and all(layer["estimate"] is True for layer in data["layers"])
    assert data["latency_us"] == pytest.approx(est.latency * 5.0 / 1000)
    assert estimates.estimate(_all_kinds()).interval > 0  # every layer kind has a model
