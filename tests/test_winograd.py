"""Winograd convolution on the CPU (hetc/backends/cpu/winograd.py, schedules/winograd.py):
the transform matrices, odd shapes against onnxruntime and the direct conv, the cost rule,
the fused epilogue, the report, and the option's errors."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx_util import conv_model

import hetc
from hetc.backends.cpu.winograd import Geometry, choose, transform_matrices, weight_transform
from hetc.errors import UsageError


def _conv(n, c, h, w, k, pads=(1, 1, 1, 1), stride=1, dilation=1, group=1, bias=True, residual=False,
          relu=False, seed=0):
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((k, c // group, 3, 3)) / np.sqrt(9 * c / group)).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32) if bias else None
    return conv_model([n, c, h, w], weight, b, stride, pads, dilation, group, residual, relu)


def _inputs(model, seed=1):
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim]).astype(np.float32)
            for v in model.graph.input}


def _check(model, mode: str, rel: float, **options):
    inputs = _inputs(model)
    compiled = hetc.compile(model, "cpu", winograd=mode, **options)
    (got,) = compiled.run(inputs).values()
    assert_close(np.asarray(got), ort_run(model, inputs)[0], rel=rel)
    return compiled


@pytest.mark.parametrize("m", [2, 4])
def test_transform_matrices_compute_a_correlation(m):
    """A^T [(G g) * (B^T d)] is the valid 1-D correlation of d with g, exactly (float64)."""
    at, g, bt = transform_matrices(m)
    assert at.shape == (m, m + 2) and g.shape == (m + 2, 3) and bt.shape == (m + 2, m + 2)
    rng = np.random.default_rng(0)
    for _ in range(20):
        d, w = rng.standard_normal(m + 2), rng.standard_normal(3)
        want = np.array([d[i:i + 3] @ w for i in range(m)])
        np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), want, rtol=0, atol=1e-12)
    assert np.all(bt == np.round(bt))  # Lavin's points: integer input transform


def test_weight_transform_is_g_g_gt_per_channel_pair():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((5, 3, 3, 7)).astype(np.float32)  # OHWI
    u = weight_transform(w, 4)
    _, g, _ = transform_matrices(4)
    assert u.shape == (36, 7, 5) and u.dtype == np.float32
    np.testing.assert_allclose(u.reshape(6, 6, 7, 5)[:, :, 2, 3], g @ w[3, :, :, 2] @ g.T, rtol=1e-5, atol=1e-6)


ODD = [  # (n, c, h, w, k, pads): partial tiles, batch > 1, channels off the SIMD width, no padding
    (2, 5, 7, 9, 3, (1, 1, 1, 1)),
    (1, 16, 6, 6, 24, (0, 0, 0, 0)),
    (1, 8, 5, 11, 16, (0, 1, 2, 0)),
    (1, 24, 2, 2, 8, (1, 1, 1, 1)),  # (at 1x1 only the centre tap reads input: a 1x1 conv, passes/dead_taps.py)
    (3, 32, 13, 10, 48, (1, 1, 1, 1)),
]


@pytest.mark.parametrize("m", ["2", "4"])
@pytest.mark.parametrize("shape", ODD, ids=lambda s: "x".join(map(str, s[:5])) + "p" + "".join(map(str, s[5])))
def test_winograd_matches_onnxruntime_on_odd_shapes(shape, m):
    n, c, h, w, k, pads = shape
    compiled = _check(_conv(n, c, h, w, k, pads), m, rel=1e-5)
    kernels = compiled.report["kernels"]
    assert sum(rule == "winograd" for rule in kernels.values()) == 2, kernels  # input and output transform
    (decision,) = compiled.report["winograd"]
    assert decision["method"] == f"winograd F({m}x{m},3x3)"


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(n=st.integers(1, 2), c=st.integers(1, 20), h=st.integers(1, 12), w=st.integers(1, 12),
       k=st.integers(1, 20), pad=st.integers(0, 1), m=st.sampled_from(["2", "4"]))
def test_winograd_equals_direct_conv(n, c, h, w, k, pad, m):
    """Random shapes: Winograd and the direct conv agree (both against onnxruntime)."""
    if h + 2 * pad < 3 or w + 2 * pad < 3 or min(h, w) < 2:
        return  # (at 1 x w with padding 1 the outer taps read only padding: dropped, passes/dead_taps.py)
    model = _conv(n, c, h, w, k, (pad,) * 4, seed=c * 31 + k)
    inputs = _inputs(model)
    direct = hetc.compile(model, "cpu", winograd="off")
    wino = hetc.compile(model, "cpu", winograd=m)
    assert "winograd" not in direct.report["kernels"].values()
    assert "winograd" in wino.report["kernels"].values()
    want = ort_run(model, inputs)[0]
    (a,), (b,) = direct.run(inputs).values(), wino.run(inputs).values()
    assert_close(np.asarray(a), want, rel=1e-5)
    assert_close(np.asarray(b), want, rel=1e-5)


def test_epilogue_fuses_into_the_output_transform():
    """Bias, residual add and relu run in the output transform's kernel, not after it."""
    compiled = _check(_conv(1, 32, 14, 14, 32, residual=True, relu=True), "4", rel=1e-5)
    fused = [name for name, rule in compiled.report["kernels"].items() if rule == "winograd" and "relu" in name]
    assert len(fused) == 1 and "add" in fused[0], compiled.report["kernels"]


def test_avx2_build_of_winograd_matches(tmp_path):
    """8-lane vectors (--cpu haswell): the transforms' channel vectors follow the ISA."""
    compiled = _check(_conv(1, 24, 10, 10, 40, relu=True), "4", rel=1e-5, cpu="haswell")
    assert compiled.report["winograd"][0]["method"] == "winograd F(4x4,3x3)"


def test_cost_rule_picks_by_shape():
    """ResNet's stages: F(4x4) where the image is large, F(2x2) at 7x7 (F(4x4)'s weight is 4x
    the direct conv's and the GEMM has 4 rows), direct when Winograd would not pay."""
    def geo(h, c):
        return Geometry(1, h, h, c, c, (1, 1, 1, 1))

    assert choose(geo(56, 64), "auto")[0] == 4
    assert choose(geo(28, 128), "auto")[0] == 4
    assert choose(geo(7, 512), "auto")[0] == 2
    assert choose(geo(2, 512), "auto")[0] is None
    assert choose(Geometry(1, 32, 32, 3, 16, (1, 1, 1, 1)), "auto")[0] is None  # an RGB stem
    assert choose(geo(56, 64), "off")[0] is None
    assert choose(geo(2, 512), "2")[0] == 2


@pytest.mark.parametrize("kwargs", [{"stride": 2}, {"dilation": 2, "pads": (2, 2, 2, 2)}])
def test_ineligible_convs_stay_direct(kwargs):
    model = _conv(1, 32, 12, 12, 32, **kwargs)
    compiled = _check(model, "4", rel=1e-4)
    assert "winograd" not in compiled.report["kernels"].values()
    assert compiled.report["winograd"] == []


def test_grouped_conv_is_split_into_convs_winograd_can_take():
    """A grouped conv with wide groups becomes one conv per group (passes/grouped_conv.py): each
    is a 3x3 stride-1 conv, so a forced Winograd takes both. (Narrow groups are one grouped
    kernel on the CPU, backends/cpu/grouped_conv.py, which Winograd does not take.)"""
    compiled = _check(_conv(1, 128, 12, 12, 128, group=2), "4", rel=1e-4)
    assert len(compiled.report["winograd"]) == 2


def test_resnet_block_default_mixes_winograd_and_direct():
    """The default (auto) on a ResNet-18 at 64x64: F(4x4) at 16x16, F(2x2) at 8x8, direct
    below; the report names each conv's choice and its reason; the whole model matches."""
    from examples.models import resnet18, sample_inputs

    model = resnet18(size=64, classes=10)
    inputs = sample_inputs(model)
    compiled = hetc.compile(model, "cpu")
    methods = [d["method"] for d in compiled.report["winograd"]]
    assert methods.count("winograd F(4x4,3x3)") == 4 and methods.count("winograd F(2x2,3x3)") == 3
    assert methods.count("direct") == 6 and all(d["reason"] for d in compiled.report["winograd"])
    (got,) = compiled.run(inputs).values()
    assert_close(np.asarray(got), ort_run(model, inputs)[0], rel=1e-4)


def test_invalid_mode_is_a_usage_error():
    with pytest.raises(UsageError, match="winograd"):
        hetc.compile(_conv(1, 4, 6, 6, 4), "cpu", winograd="6")
