"""fixed.py and emulate.py against the real ``ap_fixed.h``, bit for bit.

One C++ program (compiled once per session with g++ and the Xilinx ap_types headers that
hls4ml ships) converts a few thousand doubles - random values at many scales, exact ties,
range boundaries, tiny and huge numbers - to ~50 ``ap_fixed``/``ap_ufixed`` types, converts
between fixed-point types, and runs the dense layer and the float32 softmax / layer_norm /
sigmoid / tanh exactly as ``emulate.py`` documents them (as the HLS kernels compute them).
Skipped when hls4ml or g++ is missing. (numpy's own float32 exp/tanh differ from the C
library's in the last bit for about a third of the inputs: the emulation calls libm.)
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from hetc.backends.fpga import emulate
from hetc.backends.fpga.fixed import frac_bits, int_bits_for, quantize, requantize, to_units, type_range
from hetc.backends.fpga.layers import FLOAT, Layer, NumType, Region


def _ap_types() -> Path | None:
    spec = importlib.util.find_spec("hls4ml")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "templates" / "vivado" / "ap_types"
    return path if (path / "ap_fixed.h").is_file() else None


def _types() -> list[NumType]:
    """Every rounding x overflow mode over widths 1..64, signed and unsigned, integer bits
    negative, zero, inside and beyond the width."""
    rng = np.random.default_rng(1)
    out = []
    modes = [(q, o) for q in ("AP_TRN", "AP_RND", "AP_RND_CONV") for o in ("AP_WRAP", "AP_SAT")]
    shapes = [(1, 1), (2, 0), (4, 2), (8, 3), (8, -2), (8, 10), (12, 12), (16, 6), (16, 0), (18, 5), (24, 1),
              (32, 12), (32, 40), (40, 8), (53, 20), (54, 30), (63, 31), (64, 32), (64, 1)]
    for i, (w, integer) in enumerate(shapes):
        for j, (q, o) in enumerate(modes):
            if (i + j) % 2 == 0 or w in (8, 64):
                signed = bool(rng.integers(2)) or w == 64
                out.append(NumType(w, integer, signed, q, o))
    return out


TYPES = _types()
# (source, destination) pairs for fixed -> fixed conversions (what the MAC layers do)
PAIRS = [(NumType(32, 10), NumType(16, 6, True, q, o)) for q in ("AP_TRN", "AP_RND", "AP_RND_CONV")
         for o in ("AP_WRAP", "AP_SAT")] + [
    (NumType(28, 7), NumType(12, 2, False, "AP_RND", "AP_SAT")), (NumType(40, 20), NumType(10, 12)),
    (NumType(24, 3), NumType(48, 20, True, "AP_RND_CONV", "AP_WRAP")), (NumType(60, 30), NumType(20, 4, True,
                                                                                                "AP_RND_CONV", "AP_SAT"))]


def _values() -> np.ndarray:
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal(200) * 2.0**e for e in (-40, -12, -6, -2, 0, 2, 5, 10, 20, 31, 45, 70)]
    for f in (-3, 0, 1, 2, 5, 10, 15, 23, 30, 40, 52, 60):  # exact ties and grid values
        k = rng.integers(-(2**20), 2**20, 40).astype(np.float64)
        parts += [(k + 0.5) * 2.0**-f, k * 2.0**-f, (2 * k + 1) * 2.0 ** -(f + 1)]
    edges = [2.0**e for e in range(-70, 70)]
    edges += [np.nextafter(v, 0) for v in edges] + [np.nextafter(v, np.inf) for v in edges]
    parts += [np.array(edges), -np.array(edges)]
    parts.append(np.array([0.0, -0.0, 5e-324, -5e-324, 1e-300, -1e-300, 1e300, -1e300, 0.5, -0.5, 1.5, -1.5,
                           2.5, -2.5, 3.999999, -4.000001, 1e19, -1e19, 9.3e18, -9.3e18]))
    return np.concatenate(parts)


def _cpp_type(t: NumType) -> str:
    return "float" if t.is_float else f"{'ap_fixed' if t.signed else 'ap_ufixed'}<{t.width},{t.integer},{t.rounding},{t.overflow}>"


def _bits(t: NumType) -> str:
    return f"(unsigned long long)v.range({t.width - 1}, 0).to_uint64()"


# The dense layers compared: (x, weight, bias, accum, result) types.
DENSE_CASES = {
    "wrap_rounded_products": (NumType(16, 4), NumType(12, 1, True, "AP_RND_CONV", "AP_SAT"),
                              NumType(16, 3, True, "AP_RND_CONV", "AP_SAT"), NumType(20, 6),
                              NumType(10, 4, True, "AP_RND", "AP_SAT")),
    "wrap_exact_products": (NumType(16, 4), NumType(12, 1, True, "AP_RND_CONV", "AP_SAT"),
                            NumType(16, 3, True, "AP_RND_CONV", "AP_SAT"), NumType(40, 6), NumType(12, 3)),
    "saturating_accum": (NumType(14, 5), NumType(10, 1), NumType(16, 3), NumType(18, 4, True, "AP_RND_CONV", "AP_SAT"),
                         NumType(16, 5)),
    "float": (FLOAT, FLOAT, FLOAT, FLOAT, FLOAT),
}
N_IN, N_OUT, ROWS = 37, 11, 64


def _program() -> str:
    lines = ["#include <ap_fixed.h>", "#include <cmath>", "#include <cstdio>", "#include <vector>",
             "static std::vector<double> read(const char* p) { std::vector<double> v; FILE* f = fopen(p, \"rb\");",
             "  double x; while (fread(&x, 8, 1, f) == 1) v.push_back(x); fclose(f); return v; }",
             "static void put(FILE* f, unsigned long long b) { fwrite(&b, 8, 1, f); }",
             "static void putf(FILE* f, float x) { fwrite(&x, 4, 1, f); }",
             "int main(int argc, char** argv) {",
             "  std::vector<double> xs = read(argv[1]); FILE* out = fopen(argv[2], \"wb\");"]
    for t in TYPES:
        lines.append(f"  for (double x : xs) {{ {_cpp_type(t)} v = x; put(out, {_bits(t)}); }}")
    for src, dst in PAIRS:
        lines.append(f"  for (double x : xs) {{ {_cpp_type(src)} s = x; {_cpp_type(dst)} v = s; put(out, {_bits(dst)}); }}")
    # dense: argv[3] holds x (ROWS*N_IN), w (N_IN*N_OUT), b (N_OUT)
    lines.append("  std::vector<double> d = read(argv[3]);")
    for name, (xt, wt, bt, at, rt) in DENSE_CASES.items():
        body = (f"  {{ // {name}\n"
                f"    typedef {_cpp_type(xt)} x_t; typedef {_cpp_type(wt)} w_t; typedef {_cpp_type(bt)} b_t;\n"
                f"    typedef {_cpp_type(at)} acc_t; typedef {_cpp_type(rt)} res_t;\n"
                f"    for (int r = 0; r < {ROWS}; r++) for (int j = 0; j < {N_OUT}; j++) {{\n"
                f"      acc_t acc = (acc_t)(b_t)d[{ROWS * N_IN + N_IN * N_OUT} + j];\n"
                f"      for (int i = 0; i < {N_IN}; i++) {{ x_t x = d[r * {N_IN} + i]; "
                f"w_t w = d[{ROWS * N_IN} + i * {N_OUT} + j]; acc += (acc_t)(x * w); }}\n"
                f"      res_t v = acc; "
                + ("putf(out, v); }\n  }" if rt.is_float else f"put(out, {_bits(rt)}); }}\n  }}"))
        lines.append(body)
    # float32 functions over rows of argv[4]: ROWS x N_IN
    lines += [
        "  std::vector<double> s = read(argv[4]); const int n = " + str(N_IN) + ";",
        "  for (int r = 0; r < " + str(ROWS) + "; r++) {",
        "    float x[n], e[n]; for (int i = 0; i < n; i++) x[i] = (float)s[r * n + i];",
        "    float m = x[0]; for (int i = 1; i < n; i++) m = x[i] > m ? x[i] : m;",
        "    float sum = 0; for (int i = 0; i < n; i++) { e[i] = std::exp(x[i] - m); sum += e[i]; }",
        "    for (int i = 0; i < n; i++) putf(out, e[i] / sum);",
        "    float acc = 0; for (int i = 0; i < n; i++) acc += x[i]; const float mean = acc / n;",
        "    float sq = 0; for (int i = 0; i < n; i++) { const float d = x[i] - mean; sq += d * d; }",
        "    const float inv = 1.0f / std::sqrt(sq / n + (float)1e-5);",
        "    for (int i = 0; i < n; i++) putf(out, (x[i] - mean) * inv * 1.5f + 0.25f);",
        "    for (int i = 0; i < n; i++) putf(out, 1.0f / (1.0f + std::exp(-x[i])));",
        "    for (int i = 0; i < n; i++) putf(out, std::tanh(x[i]));",
        "  }",
        "  fclose(out); return 0; }"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def cpp(tmp_path_factory):
    """Run the C++ program; returns a reader over its output stream."""
    include = _ap_types()
    if include is None:
        pytest.skip("hls4ml (the ap_fixed.h headers) is not installed: pip install hls4ml==1.3.0")
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    tmp = tmp_path_factory.mktemp("apfixed")
    (tmp / "check.cpp").write_text(_program())
    subprocess.run(["g++", "-std=c++14", "-O2", "-Wno-unknown-pragmas", f"-I{include}", "check.cpp", "-o", "check"],
                   cwd=tmp, check=True, capture_output=True, timeout=300)
    _values().astype(np.float64).tofile(tmp / "values.bin")
    rng = np.random.default_rng(2)
    dense = np.concatenate([rng.standard_normal(ROWS * N_IN) * 3, rng.standard_normal(N_IN * N_OUT) * 0.4,
                            rng.standard_normal(N_OUT)]).astype(np.float32).astype(np.float64)
    dense.tofile(tmp / "dense.bin")
    rows = (rng.standard_normal(ROWS * N_IN) * 4).astype(np.float32).astype(np.float64)
    rows.tofile(tmp / "rows.bin")
    subprocess.run(["./check", "values.bin", "out.bin", "dense.bin", "rows.bin"], cwd=tmp, check=True, timeout=120)
    out = (tmp / "out.bin").read_bytes()
    n, pos, sections = len(_values()), 0, {}

    def take(key, count, dtype):
        nonlocal pos
        size = count * np.dtype(dtype).itemsize
        sections[key] = np.frombuffer(out[pos:pos + size], dtype=dtype)
        pos += size

    for t in TYPES:
        take(t, n, np.uint64)
    for pair in PAIRS:
        take(pair, n, np.uint64)
    for name, types in DENSE_CASES.items():
        take(name, ROWS * N_OUT, np.float32 if types[-1].is_float else np.uint64)
    take("functions", 4 * ROWS * N_IN, np.float32)
    assert pos == len(out)
    return {"out": sections, "dense": dense, "rows": rows}


def _low_bits(k: np.ndarray, t: NumType) -> np.ndarray:
    return k.astype(np.uint64) & np.uint64((1 << t.width) - 1 if t.width < 64 else 2**64 - 1)


def test_conversions_match_ap_fixed_bit_for_bit(cpp):
    xs = _values()
    for t in TYPES:
        got = _low_bits(to_units(xs, t), t)
        bad = np.flatnonzero(got != cpp["out"][t])
        assert not bad.size, (f"{t}: {bad.size} mismatches, e.g. {xs[bad[0]]!r} -> {got[bad[0]]:#x}, "
                              f"ap_fixed {cpp['out'][t][bad[0]]:#x}")
        values = quantize(xs, t)
        lo, hi = type_range(t)
        assert np.all((values >= lo) & (values <= hi))
        if t.width <= 53:
            assert np.array_equal(to_units(values, t), to_units(xs, t))  # the values are exact in t
    for src, dst in PAIRS:
        got = _low_bits(requantize(to_units(xs, src), frac_bits(src), dst), dst)
        bad = np.flatnonzero(got != cpp["out"][src, dst])
        assert not bad.size, f"{src} -> {dst}: {bad.size} mismatches, e.g. {xs[bad[0]]!r}"


def test_dense_layer_matches_cpp(cpp):
    """acc = accum(bias); acc += accum(x * w) in order; out = result(acc): wrapping with rounded
    and with exact products, saturating, and float32."""
    d = cpp["dense"]
    x = d[:ROWS * N_IN].reshape(ROWS, N_IN)
    w = d[ROWS * N_IN:ROWS * N_IN + N_IN * N_OUT].reshape(N_IN, N_OUT).astype(np.float32)
    b = d[ROWS * N_IN + N_IN * N_OUT:].astype(np.float32)
    for name, (xt, wt, bt, at, rt) in DENSE_CASES.items():
        layer = Layer("fc", "dense", ["x"], (N_OUT,), weights={"weight": w, "bias": b}, result=rt, weight=wt,
                      bias=bt, accum=at)
        got = emulate.run(Region("dense_check", [("x", (N_IN,))], [xt], ["fc"], [layer]), [x], fixed=True)["fc"]
        expected = cpp["out"][name].reshape(ROWS, N_OUT)
        if rt.is_float:
            assert np.array_equal(got.astype(np.float32), expected), name
        else:
            assert np.array_equal(_low_bits(to_units(got, rt), rt), expected), name
    # the cases reach the limits: results beyond ap_fixed<12,3>'s range wrap, partial sums saturate
    assert np.abs(x @ w + b).max() > 4


def test_float_functions_match_cpp(cpp):
    """softmax, layer_norm, sigmoid and tanh as the HLS kernels compute them (float <cmath>)."""
    rows = cpp["rows"].reshape(ROWS, N_IN)
    expected = cpp["out"]["functions"].reshape(ROWS, 4, N_IN)
    layers = [Layer("sm", "softmax", ["x"], (N_IN,)),
              Layer("ln", "layer_norm", ["x"], (N_IN,), {"epsilon": 1e-5},
                    {"gamma": np.full(N_IN, 1.5, np.float32), "beta": np.full(N_IN, 0.25, np.float32)},
                    weight=FLOAT, bias=FLOAT),
              Layer("sig", "sigmoid", ["x"], (N_IN,)), Layer("tanh", "tanh", ["x"], (N_IN,))]
    out = emulate.run(Region("f", [("x", (N_IN,))], [FLOAT], ["sm"], layers), [rows], fixed=True)
    for i, name in enumerate(("sm", "ln", "sig", "tanh")):
        assert np.array_equal(out[name].astype(np.float32), expected[:, i]), name


def test_quantize_rules_without_cpp():
    t = NumType(8, 3)  # step 1/32, range [-4, 4 - 1/32]
    assert quantize(np.array([0.1, -0.1, 100.3]), t).tolist() == [3 / 32, -4 / 32, -119 / 32]  # floor, wrap
    half = np.array([1 / 64, 3 / 64, -1 / 64, -3 / 64])  # exact ties
    assert quantize(half, NumType(8, 3, rounding="AP_RND")).tolist() == [1 / 32, 2 / 32, 0, -1 / 32]
    assert quantize(half, NumType(8, 3, rounding="AP_RND_CONV")).tolist() == [0, 2 / 32, 0, -2 / 32]
    assert quantize(np.array([9.0, -9.0]), NumType(8, 3, overflow="AP_SAT")).tolist() == [4 - 1 / 32, -4]
    assert quantize(np.array([-0.5, 7.9]), NumType(6, 3, signed=False, overflow="AP_SAT")).tolist() == [0, 7.875]
    assert quantize(np.array([np.inf, -np.inf, np.nan]), NumType(8, 3, overflow="AP_SAT")).tolist() == [
        4 - 1 / 32, -4, 0]
    assert quantize(np.array([0.1]), FLOAT)[0] == float(np.float32(0.1))
    assert [int_bits_for(v) for v in (0.0, 0.3, 0.5, 0.99, 1.0, 1.5, 6.0, 1000.0)] == [1, 0, 1, 1, 2, 2, 4, 11]
    assert int_bits_for(6.0, signed=False) == 3
    with pytest.raises(ValueError):
        quantize(np.array([1.0]), NumType(8, 3, rounding="AP_RND_ZERO"))
