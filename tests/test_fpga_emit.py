"""The FPGA emitter: Vitis HLS projects and the C-simulation source, built from hand-made Regions
(an MLP, a CNN with a residual, a transformer-ish block, and one using every other layer kind),
compiled with g++ and run: the project's testbench on tb_data, and csim_source as a TVM-FFI
library called through tvm.runtime.

Float designs must match a float64 numpy reference within atol 1e-5 + rtol 1e-4. Fixed designs
(ap_fixed<16,6> data, weights and biases, ap_fixed<32,12> accumulators, all AP_TRN/AP_WRAP) must
stay within an error bound propagated layer by layer alongside the reference (``_bounded``):
every quantization to a type with F fractional bits (truncation) errs by less than 2^-F, and

- dense/conv: |d out| <= sum |w| e_in + q_w sum (|x| + e_in) + q_b + (n + 1) q_acc + q_res
  (exact for (x + dx)(w + dw) - xw; n products in the sum);
- relu, max pool: 1-Lipschitz in the max norm; add: e_1 + e_2; global average: mean of e_in;
  each plus q_res for the result cast;
- softmax: the max-norm Lipschitz constant of softmax is max_i 2 p_i (1 - p_i) <= 1/2, so
  0.5 max(e_in) + 1e-6 (float arithmetic) + q_res;
- layer norm (first order, doubled for safety): |gamma| / sigma * (2 e + 2 e |z|) + q_w |z| + q_b.

The test also checks the values stay inside ap_fixed<16,6>'s range, so no wrap-around voids the
bound, and that quantization is visible (a fixed design is not silently built in float).
Beyond bounds, every design's C-simulation must equal hetc's bit-exact numpy emulation
(``emulate.run(fixed=True)``, which the artifact's testbenches are written from) exactly.
"""

from __future__ import annotations

import functools
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from hetc.backends.fpga import emit, toolchain
from hetc.backends.fpga.fixed import quantize
from hetc.backends.fpga.layers import FLOAT, Layer, NumType, Region
from hetc.errors import CompileError, InputError, UsageError

FX = NumType.parse("ap_fixed<16,6>")
ACC = NumType.parse("ap_fixed<32,12>")
BATCH = 2  # region.batch: the csim function's leading axis
SAMPLES = 5  # testbench samples
ATOL, RTOL = 1e-5, 1e-4


@pytest.fixture(scope="module")
def ap_types() -> Path:
    try:
        return toolchain.ap_types_include()
    except CompileError:
        pytest.skip("hls4ml's ap_types headers are not installed: pip install hls4ml==1.3.0")


# ---------------------------------------------------------------------------------------------
# Regions


def _w(rng, *shape, fan_in=None):
    scale = 1 / math.sqrt(fan_in or shape[0])
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _typed(layers: list[Layer], fixed: bool) -> list[Layer]:
    for layer in layers:
        layer.result = FX if fixed else FLOAT
        if layer.op in ("dense", "conv2d", "scale_shift", "layer_norm"):
            layer.weight = layer.bias = FX if fixed else FLOAT
            layer.accum = ACC if fixed else FLOAT
    return layers


def mlp(fixed: bool) -> Region:
    rng = np.random.default_rng(1)
    layers = [
        Layer("fc1", "dense", ["x"], (16,), weights={"weight": _w(rng, 10, 16), "bias": _w(rng, 16, fan_in=4)}),
        Layer("relu1", "relu", ["fc1"], (16,)),
        Layer("fc2", "dense", ["relu1"], (5,), weights={"weight": _w(rng, 16, 5), "bias": _w(rng, 5, fan_in=4)}),
        Layer("prob", "softmax", ["fc2"], (5,)),
    ]
    return Region(f"mlp_{'fx' if fixed else 'fp'}", [("x", (10,))], [FX if fixed else FLOAT], ["prob"],
                  _typed(layers, fixed), BATCH)


def cnn(fixed: bool) -> Region:
    rng = np.random.default_rng(2)
    conv = {"strides": (1, 1), "pads": (1, 1, 1, 1), "groups": 1}
    layers = [
        Layer("conv1", "conv2d", ["img"], (8, 8, 6), conv,
              {"weight": _w(rng, 3, 3, 3, 6, fan_in=27), "bias": _w(rng, 6, fan_in=4)}),
        Layer("relu1", "relu", ["conv1"], (8, 8, 6)),
        Layer("dw", "conv2d", ["relu1"], (4, 4, 6), {"strides": (2, 2), "pads": (1, 1, 1, 1), "groups": 6},
              {"weight": _w(rng, 3, 3, 1, 6, fan_in=9), "bias": _w(rng, 6, fan_in=4)}),
        Layer("pw", "conv2d", ["dw"], (4, 4, 6), {"strides": (1, 1), "pads": (0, 0, 0, 0), "groups": 1},
              {"weight": _w(rng, 1, 1, 6, 6, fan_in=6), "bias": _w(rng, 6, fan_in=4)}),
        Layer("res", "add", ["pw", "dw"], (4, 4, 6)),  # dw has two readers: a clone
        Layer("pool", "max_pool2d", ["res"], (2, 2, 6), {"kernel": (2, 2), "strides": (2, 2), "pads": (0, 0, 0, 0)}),
        Layer("gap", "global_avg_pool2d", ["pool"], (6,)),
        Layer("fc", "dense", ["gap"], (4,), weights={"weight": _w(rng, 6, 4), "bias": _w(rng, 4, fan_in=4)}),
    ]
    return Region(f"cnn_{'fx' if fixed else 'fp'}", [("img", (8, 8, 3))], [FX if fixed else FLOAT], ["fc"],
                  _typed(layers, fixed), BATCH)


def block(fixed: bool) -> Region:
    rng = np.random.default_rng(3)
    layers = [
        Layer("proj", "dense", ["tokens"], (4, 8), weights={"weight": _w(rng, 6, 8), "bias": _w(rng, 8, fan_in=4)}),
        Layer("norm", "layer_norm", ["proj"], (4, 8), {"epsilon": 1e-5},
              {"gamma": (1 + 0.2 * rng.standard_normal(8)).astype(np.float32), "beta": _w(rng, 8, fan_in=16)}),
        Layer("attn", "softmax", ["norm"], (4, 8)),
    ]
    return Region(f"block_{'fx' if fixed else 'fp'}", [("tokens", (4, 6))], [FX if fixed else FLOAT], ["attn"],
                  _typed(layers, fixed), BATCH)


def misc(fixed: bool) -> Region:
    """Every other layer kind, fan-out to three readers, an output that is also read, a reshape
    that aliases its producer's stream and one that changes the type, an unused input."""
    rng = np.random.default_rng(4)
    fine = NumType.parse("ap_fixed<32,8,AP_RND>")  # 24 fractional bits: within the float tolerance
    layers = [
        Layer("bn", "scale_shift", ["img"], (4, 6, 3), weights={"scale": _w(rng, 3, fan_in=1), "shift": _w(rng, 3)}),
        Layer("avg", "avg_pool2d", ["bn"], (2, 3, 3),
              {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "count_include_pad": False}),
        Layer("avg_pad", "avg_pool2d", ["bn"], (4, 6, 3),
              {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1), "count_include_pad": True}),
        Layer("sig", "sigmoid", ["avg"], (2, 3, 3)),
        Layer("th", "tanh", ["avg"], (2, 3, 3)),
        Layer("lk", "leaky_relu", ["avg"], (2, 3, 3), {"alpha": 0.2}),
        Layer("mul", "multiply", ["sig", "th"], (2, 3, 3)),
        Layer("cl", "clip", ["lk"], (2, 3, 3), {"min": -0.1, "max": 0.3}),
        Layer("flat", "reshape", ["cl"], (18,)),
        Layer("tr", "transpose", ["mul"], (3, 2, 3), {"perm": (2, 0, 1)}),
        Layer("tr_flat", "reshape", ["tr"], (18,)),
        Layer("sum", "add", ["flat", "tr_flat"], (18,)),
        Layer("pad_max", "max_pool2d", ["avg_pad"], (2, 3, 3),
              {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
        Layer("quant", "reshape", ["tr"], (2, 9), result=fine),
    ]
    _typed(layers[:-1], fixed)
    t = FX if fixed else FLOAT
    return Region(f"misc_{'fx' if fixed else 'fp'}", [("img", (4, 6, 3)), ("unused", (2,))], [t, t],
                  ["sum", "flat", "pad_max", "quant"], layers, BATCH)


# ---------------------------------------------------------------------------------------------
# numpy reference (float64) with the fixed-point error bound carried alongside


def _conv(x, w, b, strides, pads, groups):
    n, h, wd, _ = x.shape
    kh, kw, cg, f = w.shape
    (sh, sw), (pt, pl, pb, pr) = strides, pads
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    oh, ow = (h + pt + pb - kh) // sh + 1, (wd + pl + pr - kw) // sw + 1
    out = np.zeros((n, oh, ow, f)) + b
    fg = f // groups
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw, :]
            for g in range(groups):
                out[..., g * fg:(g + 1) * fg] += np.einsum(
                    "nhwc,cf->nhwf", patch[..., g * cg:(g + 1) * cg], w[i, j, :, g * fg:(g + 1) * fg])
    return out


def _pool(x, kernel, strides, pads, op, include_pad=False):
    n, h, w, c = x.shape
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = kernel, strides, pads
    fill = -np.inf if op == "max" else 0.0
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=fill)
    inside = np.pad(np.ones((h, w)), ((pt, pb), (pl, pr)))
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, i * sh:i * sh + kh, j * sw:j * sw + kw, :]
            if op == "max":
                out[:, i, j] = win.max(axis=(1, 2))
            else:
                count = kh * kw if include_pad else inside[i * sh:i * sh + kh, j * sw:j * sw + kw].sum()
                out[:, i, j] = win.sum(axis=(1, 2)) / count
    return out


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _q(t: NumType) -> float:
    return 0.0 if t.is_float else 2.0 ** -(t.width - t.integer)


def _bounded(region: Region, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The float64 reference outputs and, for a fixed region, the error bound of each element."""
    vals = {name: x.astype(np.float64) for (name, _), x in zip(region.inputs, inputs)}
    errs = {name: np.full(x.shape, _q(t)) for (name, _), x, t in zip(region.inputs, inputs, region.input_types)}
    for layer in region.layers:
        x = vals[layer.inputs[0]]
        e = errs[layer.inputs[0]]
        a, n = layer.attrs, x.shape[0]
        w = {k: v.astype(np.float64) for k, v in layer.weights.items()}
        q_res, q_w = _q(layer.result), _q(layer.weight or FLOAT)
        q_b, q_acc = _q(layer.bias or FLOAT), _q(layer.accum or FLOAT)
        if layer.op == "dense":
            y = x @ w["weight"] + w["bias"]
            n_in = x.shape[-1]
            bound = e @ np.abs(w["weight"]) + q_w * (np.abs(x) + e).sum(-1, keepdims=True) + q_b + (n_in + 1) * q_acc
        elif layer.op == "conv2d":
            args = (a["strides"], a["pads"], a["groups"])
            y = _conv(x, w["weight"], w["bias"], *args)
            taps = np.prod(w["weight"].shape[:3])
            bound = (_conv(e, np.abs(w["weight"]), 0, *args) + q_w * _conv(np.abs(x) + e, np.ones_like(w["weight"]), 0, *args)
                     + q_b + (taps + 1) * q_acc)
        elif layer.op == "relu":
            y, bound = np.maximum(x, 0), e
        elif layer.op == "add":
            y, bound = x + vals[layer.inputs[1]], e + errs[layer.inputs[1]]
        elif layer.op == "multiply":
            y, bound = x * vals[layer.inputs[1]], np.full(x.shape, np.nan)
        elif layer.op in ("max_pool2d", "avg_pool2d"):
            op = layer.op[:3]
            y = _pool(x, a["kernel"], a["strides"], a["pads"], op, a.get("count_include_pad", False))
            bound = _pool(e, a["kernel"], a["strides"], a["pads"], "max")
        elif layer.op == "global_avg_pool2d":
            y, bound = x.mean(axis=(1, 2)), e.mean(axis=(1, 2))
        elif layer.op == "softmax":
            y = _softmax(x)
            bound = 0.5 * e.max(-1, keepdims=True) + 1e-6 + 0 * y
        elif layer.op == "layer_norm":
            mu = x.mean(-1, keepdims=True)
            sigma = np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + a["epsilon"])
            z = (x - mu) / sigma
            y = z * w["gamma"] + w["beta"]
            bound = 2 * np.abs(w["gamma"]) / sigma * (2 * e.max(-1, keepdims=True) * (1 + np.abs(z))) \
                + q_w * np.abs(z) + q_b + 1e-6
        elif layer.op == "scale_shift":
            y, bound = x * w["scale"] + w["shift"], np.full(x.shape, np.nan)
        elif layer.op == "sigmoid":
            y, bound = 1 / (1 + np.exp(-x)), np.full(x.shape, np.nan)
        elif layer.op == "tanh":
            y, bound = np.tanh(x), np.full(x.shape, np.nan)
        elif layer.op == "leaky_relu":
            y, bound = np.where(x > 0, x, x * a["alpha"]), np.full(x.shape, np.nan)
        elif layer.op == "clip":
            y, bound = np.clip(x, a["min"], a["max"]), np.full(x.shape, np.nan)
        elif layer.op == "transpose":
            y, bound = x.transpose(0, *(p + 1 for p in a["perm"])), np.full(layer.shape, np.nan)
        elif layer.op == "reshape":
            y, bound = x.reshape(n, *layer.shape), e.reshape(n, *layer.shape)
        else:
            raise AssertionError(layer.op)
        y = y.reshape(n, *layer.shape)
        if not layer.result.is_float:
            limit = 2.0 ** (layer.result.integer - 1)
            assert np.abs(y).max() + np.nan_to_num(bound).max() < limit, f"{layer.name} leaves {layer.result}'s range"
        vals[layer.name] = y
        errs[layer.name] = (np.broadcast_to(bound, y.shape) + q_res).reshape(y.shape)
    return [vals[o] for o in region.outputs], [errs[o] for o in region.outputs]


def _inputs(region: Region, samples: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((samples, *shape)).astype(np.float32) for _, shape in region.inputs]


# ---------------------------------------------------------------------------------------------
# Building


REGIONS = {r.name: r for r in (mlp(False), mlp(True), cnn(False), cnn(True), block(False), block(True), misc(False))}
# misc_fx has no derived error bound: it is checked against the bit-exact emulation only
ALL_REGIONS = {**REGIONS, "misc_fx": misc(True)}


@functools.cache
def _project(name: str, root: Path) -> Path:
    """The region's project, written and its testbench compiled (once per session)."""
    region = REGIONS[name]
    directory = emit.write_files(emit.project_files(region), root / name)
    toolchain.compile_cpp([directory / f"tb/{name}_tb.cpp", directory / f"firmware/{name}.cpp"],
                          directory / "tb_run", ["-I", str(directory / "firmware"), "-Werror=return-type"])
    return directory


def _run_tb(directory: Path, region: Region, inputs, expected, atol, rtol) -> subprocess.CompletedProcess:
    emit.write_files(emit.testbench_data(region, inputs, expected, atol, rtol), directory)
    return subprocess.run([str(directory / "tb_run"), str(directory / "tb_data")], capture_output=True, text=True,
                          timeout=60, check=False)


def _tvm_ffi_flags() -> list[str]:
    import tvm_ffi.libinfo

    dirs = dict.fromkeys([tvm_ffi.libinfo.find_include_path(), tvm_ffi.libinfo.find_dlpack_include_path()])
    return ["-std=c++17", *(f"-I{d}" for d in dirs)]


@pytest.fixture(scope="module")
def root(tmp_path_factory, ap_types) -> Path:
    return tmp_path_factory.mktemp("fpga_projects")


@pytest.fixture(scope="module")
def csim(root):
    """All regions' csim sources in one shared library (each source is standalone: the second
    and later ones only repeat guarded includes), loaded through tvm.runtime."""
    import tvm

    source = root / "csim_all.cc"
    source.write_text("\n".join(emit.csim_source(r) for r in ALL_REGIONS.values()))
    lib = toolchain.compile_cpp([source], root / "csim_all.so", _tvm_ffi_flags(), shared=True)
    return tvm.runtime.load_module(str(lib))


def _call(module, region: Region, inputs: list[np.ndarray]) -> list[np.ndarray]:
    import tvm

    outputs = [tvm.runtime.tensor(np.zeros((region.batch, *region.layer(o).shape), np.float32))
               for o in region.outputs]
    module[emit.top_name(region)](*(tvm.runtime.tensor(x) for x in inputs), *outputs)
    return [o.numpy() for o in outputs]


# ---------------------------------------------------------------------------------------------
# Tests

FLOAT_REGIONS = [n for n, r in REGIONS.items() if r.input_types[0].is_float]
FIXED_REGIONS = [n for n in REGIONS if n not in FLOAT_REGIONS]


@pytest.mark.parametrize("name", FLOAT_REGIONS)
def test_float_testbench_matches_numpy(name, root):
    region = REGIONS[name]
    directory = _project(name, root)
    inputs = _inputs(region, SAMPLES)
    expected, _ = _bounded(region, inputs)
    proc = _run_tb(directory, region, inputs, expected, ATOL, RTOL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{SAMPLES} samples, 0 mismatches" in proc.stdout

    expected[0].reshape(SAMPLES, -1)[SAMPLES - 1, -1] += 0.01  # the testbench must notice
    proc = _run_tb(directory, region, inputs, expected, ATOL, RTOL)
    assert proc.returncode == 1 and "1 mismatches" in proc.stdout, proc.stdout


@pytest.mark.parametrize("name", FIXED_REGIONS)
def test_fixed_testbench_within_derived_bound(name, root):
    region = REGIONS[name]
    directory = _project(name, root)
    inputs = _inputs(region, SAMPLES)
    expected, bounds = _bounded(region, inputs)
    atol = max(float(b.max()) for b in bounds)
    # a worst case (every error aligned), yet well below the signal
    assert atol < 0.5 * max(float(np.abs(e).max()) for e in expected), f"the bound {atol} is too loose"
    proc = _run_tb(directory, region, inputs, expected, atol, 0.0)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", list(REGIONS))
def test_csim_through_tvm(name, root, csim):
    region = REGIONS[name]
    inputs = _inputs(region, region.batch, seed=7)
    got = _call(csim, region, inputs)
    expected, bounds = _bounded(region, inputs)
    for g, e, b in zip(got, expected, bounds):
        if region.input_types[0].is_float:
            np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)
        else:
            assert np.all(np.abs(g - e) <= b), f"error {np.abs(g - e).max()} over the bound {b.max()}"
            assert np.any(g != e.astype(np.float32)), "a fixed design gave float results"
            steps = g / 2.0 ** -10  # ap_fixed<16,6> values are multiples of 2^-10
            assert np.allclose(steps, np.round(steps)), "results are not ap_fixed<16,6> values"
    if not region.input_types[0].is_float:
        # the testbench's conversions are the csim wrapper's: bit-identical results
        proc = _run_tb(_project(name, root), region, inputs, got, 0.0, 0.0)
        assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("name", list(ALL_REGIONS))
def test_csim_equals_the_emulation_bit_for_bit(name, csim):
    """emulate.run(fixed=True) is the reference the artifact's testbenches are written from
    (with tolerance 0): the C-simulation must give exactly its values, float designs included."""
    emulate = pytest.importorskip("hetc.backends.fpga.emulate")
    region = ALL_REGIONS[name]
    inputs = _inputs(region, region.batch, seed=11)
    values = emulate.run(region, inputs, fixed=True)
    for got, output in zip(_call(csim, region, inputs), region.outputs):
        np.testing.assert_array_equal(got, values[output].astype(np.float32), err_msg=f"{name} {output}")


def test_csim_checks_tensor_shapes(root, csim):
    region = REGIONS["mlp_fp"]
    import tvm

    x = tvm.runtime.tensor(np.zeros((region.batch + 1, 10), np.float32))
    out = tvm.runtime.tensor(np.zeros((region.batch, 5), np.float32))
    with pytest.raises(ValueError, match=r"in0 must have shape \(2, 10\)"):
        csim[emit.top_name(region)](x, out)


HOSTILE = ['a"b;system("rm -rf /")', "1x", "int", "../x", "hls", "NULL", "hetc_ffi_entry", "x y", "x_y", "main",
           "in0", "AP_SAT", "sig", "time", "a\\\nb"]


@pytest.mark.parametrize(("name", "top"), [("mlp", "mlp"), ("region_0", "region_0"), ("timezone", "timezone_1"),
                                           ("hls", "hls_1"), ("NULL", "n_NULL"), ("hetc_x", "n_hetc_x"),
                                           ("9 lives", "n_9_lives"), ("", "n")])
def test_top_name(name, top):
    assert emit.top_name(Region(name, [], [], [], [])) == top


def test_hostile_names_compile(root, ap_types):
    """Untrusted model names become safe, unique identifiers and file names; the project and the
    csim source compile and run."""
    rng = np.random.default_rng(5)
    layers, prev = [], HOSTILE[1]
    for k, name in enumerate(HOSTILE[2:]):
        layers.append(Layer(name, "dense", [prev], (3,), weights={"weight": _w(rng, 3, 3), "bias": _w(rng, 3)},
                            result=FX, weight=FX, bias=FX, accum=ACC, source=f"node {name}"))
        prev = name
    region = Region(HOSTILE[0], [(HOSTILE[1], (3,))], [FX], [HOSTILE[-1], "int"], layers, batch=1)
    files = emit.project_files(region)
    for path in files:
        assert ".." not in path and '"' not in path and " " not in path and "\\" not in path, path
    top = emit.top_name(region)
    assert top.isidentifier() and top != region.name
    directory = emit.write_files(files, root / "hostile")
    toolchain.compile_cpp([directory / f"tb/{top}_tb.cpp", directory / f"firmware/{top}.cpp"], directory / "tb_run",
                          ["-I", str(directory / "firmware")])
    inputs = _inputs(region, 3)
    expected, bounds = _bounded(region, inputs)
    proc = _run_tb(directory, region, inputs, expected, max(float(b.max()) for b in bounds), 0.0)
    assert proc.returncode == 0, proc.stdout

    import tvm

    source = root / "hostile_csim.cc"
    source.write_text(emit.csim_source(region))
    module = tvm.runtime.load_module(str(toolchain.compile_cpp([source], root / "hostile.so", _tvm_ffi_flags(),
                                                               shared=True)))
    got = _call(module, region, [x[:1] for x in inputs])
    for g, e, b in zip(got, expected, bounds):
        assert np.all(np.abs(g - e[:1]) <= b[:1])


def test_weights_are_exactly_the_quantized_values(root, ap_types):
    """Every emitted weight is the value ap_fixed's own conversion of the float32 weight gives,
    for each rounding and overflow mode (ties and out-of-range values included)."""
    types = ["ap_fixed<8,3,AP_RND,AP_SAT>", "ap_fixed<8,3,AP_RND_CONV,AP_WRAP>", "ap_ufixed<6,2,AP_RND_CONV,AP_SAT>",
             "ap_fixed<10,-2>", "ap_fixed<6,9,AP_RND>", "ap_ufixed<7,3>", "ap_fixed<24,2,AP_RND_CONV,AP_SAT>"]
    rng = np.random.default_rng(6)
    ties = np.arange(-40, 41, dtype=np.float32) / 16 + 1 / 32  # halfway between 4-fractional-bit steps
    values = np.concatenate([ties, rng.standard_normal(40).astype(np.float32) * 6, [1e6, -1e6, 0, -0.0]])
    values = values.astype(np.float32)
    layers = [Layer(f"d{k}", "dense", ["x"], (len(values),),
                    weights={"weight": values[None, :], "bias": values[::-1].copy()},
                    result=FX, weight=NumType.parse(t), bias=NumType.parse(t), accum=ACC)
              for k, t in enumerate(types)]
    # unbounded clip limits are written as infinities (parameters.h must still compile)
    layers.append(Layer("open", "clip", ["d0"], (len(values),), {"min": None, "max": math.inf}, result=FX))
    region = Region("weights", [("x", (1,))], [FX], [layer.name for layer in layers], layers)
    directory = emit.write_files(emit.project_files(region), root / "weights")
    checks = "\n".join(
        f"    for (int i = 0; i < {len(values)}; i++) {{\n"
        f"        bad += !(d{k}_weight[i] == d{k}_config::weight_t((double)hetc_original[i]));\n"
        f"        bad += !(d{k}_bias[i] == d{k}_config::bias_t((double)hetc_original[{len(values) - 1} - i]));\n"
        f"    }}" for k in range(len(types)))
    literals = ", ".join(f"{float(v)!r}f" for v in values)
    (directory / "check.cpp").write_text(
        f'#include <cstdio>\n#include "parameters.h"\nstatic const float hetc_original[] = {{{literals}}};\n'
        f'int main() {{\n    int bad = 0;\n{checks}\n    std::printf("%d bad\\n", bad);\n    return bad != 0;\n}}\n')
    binary = toolchain.compile_cpp([directory / "check.cpp"], directory / "check", ["-I", str(directory / "firmware")])
    proc = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout
    # and the Python side agrees with the header's literals
    for k, t in enumerate(types):
        q = quantize(values.astype(np.float64), NumType.parse(t))
        text = (directory / f"firmware/weights/d{k}_weight.h").read_text()
        assert ", ".join(repr(float(v)) for v in q[:8]) in text


def test_project_files(ap_types):
    region = REGIONS["cnn_fx"]
    files = emit.project_files(region, emit.EmitOptions(part="xcvu9p-flga2104-2L-e", clock_ns=5))
    tcl = files["run_hls.tcl"]
    for line in ("open_project -reset cnn_fx_prj", "set_top cnn_fx", 'add_files firmware/cnn_fx.cpp -cflags "-std=c++14"',
                 "add_files -tb tb/cnn_fx_tb.cpp", "add_files -tb tb_data", "set_part {xcvu9p-flga2104-2L-e}",
                 "create_clock -period 5", "csim_design", "csynth_design", "cosim_design", "export_design -format xo"):
        assert line in tcl
    assert "set_part {xcu250-figd2104-2L-e}" in emit.project_files(region)["run_hls.tcl"]
    top = files["firmware/cnn_fx.cpp"]
    for text in ("#pragma HLS DATAFLOW", "#pragma HLS INTERFACE m_axi port=in0", "#pragma HLS INTERFACE s_axilite port=return",
                 "hetc_hls::clone<", "hetc_hls::conv2d<", "hetc_hls::global_avg_pool2d<"):
        assert text in top
    assert top.count("hetc_hls::conv2d<") == 3 and top.count("hetc_hls::clone<") == 1
    host = files["host/host.cpp"]
    for text in ("xrt::device device(0)", "load_xclbin", 'xrt::kernel kernel(device, uuid, "cnn_fx")', "xrt::bo",
                 "XCL_BO_SYNC_BO_TO_DEVICE", "run.wait()"):
        assert text in host
    assert "\tv++ -l" in files["host/Makefile"]
    assert "Nothing here was synthesised" in files["README.md"]
    assert {f"firmware/hetc_hls/{h.name}" for h in toolchain.hls_include().glob("*.h")} <= set(files)
    assert "conv1_weight" in files["firmware/weights/conv1_weight.h"]


def test_host_program_compiles_against_xrt_api(root, ap_types):
    """host.cpp against declarations of the XRT native API it uses (there is no XRT here)."""
    stub = root / "xrt_stub" / "xrt"
    stub.mkdir(parents=True, exist_ok=True)
    (stub / "xrt_device.h").write_text(
        "#pragma once\n#include <string>\nnamespace xrt {\nstruct uuid {};\n"
        "struct device { explicit device(unsigned); uuid load_xclbin(const std::string&); };\n}\n")
    (stub / "xrt_bo.h").write_text(
        "#pragma once\n#include <cstddef>\n#include \"xrt_device.h\"\n"
        "enum xclBOSyncDirection { XCL_BO_SYNC_BO_TO_DEVICE, XCL_BO_SYNC_BO_FROM_DEVICE };\n"
        "namespace xrt {\nstruct bo { bo(const device&, size_t, int); template <class T> T map();"
        " void sync(xclBOSyncDirection); };\n}\n")
    (stub / "xrt_kernel.h").write_text(
        "#pragma once\n#include \"xrt_bo.h\"\nnamespace xrt {\nstruct run { void wait(); };\n"
        "struct kernel { kernel(const device&, const uuid&, const char*); int group_id(int);"
        " template <class... A> run operator()(A&&...); };\n}\n")
    for name in ("cnn_fx", "misc_fp"):
        directory = emit.write_files(emit.project_files(REGIONS[name]), root / f"host_{name}")
        toolchain.compile_cpp([directory / "host/host.cpp"], directory / "host.o",
                              ["-std=c++17", "-fsyntax-only", "-I", str(root / "xrt_stub")])


def test_emitter_rejects_bad_regions_and_options():
    region = mlp(True)
    region.layers[1].op = "gelu"
    with pytest.raises(CompileError, match="unknown op"):
        emit.project_files(region)
    region = mlp(True)
    region.layers[0].weight = FLOAT
    with pytest.raises(CompileError, match="mixes float and ap_fixed"):
        emit.project_files(region)
    region = mlp(True)
    region.layers[2].inputs = ["nowhere"]
    with pytest.raises(CompileError, match="reads 'nowhere'"):
        emit.csim_source(region)
    region = mlp(True)
    region.layers[0].accum = None
    with pytest.raises(CompileError, match="no accum type"):
        emit.project_files(region)
    with pytest.raises(UsageError, match="io"):
        emit.project_files(mlp(False), emit.EmitOptions(io="parallel"))
    with pytest.raises(UsageError, match="part"):
        emit.project_files(mlp(False), emit.EmitOptions(part="x}; exec rm -rf /; {"))
    with pytest.raises(InputError, match="shape"):
        emit.testbench_data(mlp(False), [np.zeros((3, 9))], [np.zeros((3, 5))])


def test_toolchain(tmp_path, monkeypatch, ap_types):
    bad = tmp_path / "bad.cpp"
    bad.write_text("int main() {\n  return undeclared_thing;\n}\n")
    with pytest.raises(CompileError, match=r"bad.cpp:2:.*error: .*undeclared_thing"):
        toolchain.compile_cpp([bad], tmp_path / "bad")
    assert (toolchain.hls_include() / "hetc_hls.h").is_file()
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(CompileError) as err:
        toolchain.ap_types_include()
    assert str(err.value) == "the FPGA target needs hls4ml's ap_types headers: pip install hls4ml==1.3.0"
