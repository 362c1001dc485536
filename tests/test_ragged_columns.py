"""Column counts no vector width divides, padded to whole vectors so that they run on the
contraction kernel instead of TVM's scalar loop nest: convs' output channels (hetc/backends/
cpu/ragged_conv.py, sliced back after), against onnxruntime with a symbolic batch on AVX-512
and AVX2, and attention scores over a static, ragged token count (schedules/gemm.py)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from onnx import helper
from onnx_util import make, tensor

import hetc

RNG = np.random.default_rng(3)


def _conv(cin: int, cout: int, kernel: int, stride: int, bias: bool):
    inits = {"w": (RNG.standard_normal((cout, cin, kernel, kernel)) * 0.2).astype(np.float32)}
    if bias:
        inits["b"] = RNG.standard_normal(cout).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", *(["b"] if bias else [])], ["c"], pads=[kernel // 2] * 4,
                            strides=[stride, stride])
    return make([node, helper.make_node("Relu", ["c"], ["y"])], [tensor("x", ["n", cin, 16, 16])],
                [tensor("y", ["n", cout, None, None])], inits)


@pytest.mark.parametrize("cin, cout, kernel, stride, bias", [
    (64, 230, 3, 2, False),  # torchvision r2plus1d_18's mid planes
    (32, 21, 1, 1, True),    # a segmentation head's 21 classes
    (16, 45, 3, 1, True),    # 3x3 stride 1 (Winograd-eligible)
])
@pytest.mark.parametrize("cpu", [None, "haswell"])
def test_ragged_output_channels_run_on_the_contraction_kernel(cin, cout, kernel, stride, bias, cpu):
    model = _conv(cin, cout, kernel, stride, bias)
    compiled = hetc.compile(model, "cpu", cpu=cpu)
    rules = [rule for name, rule in compiled.report["kernels"].items() if "conv2d" in name]
    assert rules and "generic" not in rules, compiled.report["kernels"]
    for n in (1, 2):
        x = {"x": RNG.standard_normal((n, cin, 16, 16)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


def _depthwise(channels: int, stride: int):
    w = (RNG.standard_normal((channels, 1, 3, 3)) * 0.3).astype(np.float32)
    b = RNG.standard_normal(channels).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=channels, pads=[1] * 4, strides=[stride] * 2),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    return make(nodes, [tensor("x", ["n", channels, 12, 12])], [tensor("y", ["n", channels, None, None])],
                {"w": w, "b": b})


@pytest.mark.parametrize("channels, stride", [(162, 1), (228, 2), (38, 1)])  # timm ReXNet's depthwise layers
@pytest.mark.parametrize("cpu", [None, "haswell"])
def test_ragged_depthwise_runs_on_the_sliding_window_kernel(channels, stride, cpu):
    """A depthwise conv whose channels no vector divides, padded with zero channels (input,
    weight, groups), runs on the sliding-window kernel, not the contraction tile (40x slower)."""
    model = _depthwise(channels, stride)
    compiled = hetc.compile(model, "cpu", cpu=cpu)
    rules = [rule for name, rule in compiled.report["kernels"].items() if "conv2d" in name]
    assert rules == ["sliding-window"], compiled.report["kernels"]
    for n in (1, 2):
        x = {"x": RNG.standard_normal((n, channels, 12, 12)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


def _nhwc_conv(cout: int):
    """An NHWC conv2d call as the layout passes leave it, with a constant OHWI weight."""
    from tvm import relax

    x = relax.Var("x", relax.TensorType([1, 16, 16, 8], "float32"))
    w = relax.const(RNG.standard_normal((cout, 3, 3, 8)).astype(np.float32))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        call = bb.normalize(relax.op.nn.conv2d(x, w, padding=1, data_layout="NHWC", kernel_layout="OHWI"))
        bb.emit_func_output(call)
    return call


@pytest.mark.parametrize("cout, padded", [(230, 240), (21, 32), (9, 16), (6, None), (20, None)])
def test_which_convs_are_padded(cout, padded):
    """Ragged counts pad to whole 16-lane vectors; fewer than 8 channels or a multiple of 4 (a
    vector width of 4 divides it) stay."""
    from hetc.backends.cpu.ragged_conv import pad_outputs

    out = pad_outputs(_nhwc_conv(cout), 16)
    if padded is None:
        assert out is None
        return
    conv = out.args[0]
    assert int(conv.args[1].ty.shape.values[0]) == padded
    assert [int(v.value) for v in out.args[3].fields] == [cout]  # sliced back: (x, axes, begin, end)


@pytest.mark.parametrize("tokens", [197, 962])
def test_attention_scores_over_a_ragged_static_token_count(tokens):
    """ViT's ``Q @ K^T`` over 197 tokens (PiT: 962): the keys are read in place (one kernel,
    ``fuse_transpose_matmul``) and padded to whole vectors per call, so the scores run on the
    contraction kernel (they were TVM's scalar loop nest: ViT-B/16 2.4x onnxruntime on a
    2-core Zen 5, AVX-512)."""
    heads, dim = 3, 64
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["y"])]
    model = make(nodes, [tensor("q", [1, heads, tokens, dim]), tensor("k", [1, heads, tokens, dim])],
                 [tensor("y", [1, heads, tokens, tokens])])
    compiled = hetc.compile(model, "cpu")
    rules = [rule for name, rule in compiled.report["kernels"].items() if "matmul" in name]
    assert rules == ["contraction"], compiled.report["kernels"]
    feeds = {n: RNG.standard_normal((1, heads, tokens, dim)).astype(np.float32) for n in ("q", "k")}
    assert_close(compiled.run(feeds)["y"], ort_run(model, feeds)[0], rel=1e-5)


def _square_conv(size: int, cin: int, cout: int, kernel: int, stride: int = 1, dilation: int = 1):
    inits = {"w": (RNG.standard_normal((cout, cin, kernel, kernel)) * 0.1).astype(np.float32),
             "b": RNG.standard_normal(cout).astype(np.float32)}
    node = helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[dilation * (kernel // 2)] * 4,
                            strides=[stride, stride], dilations=[dilation, dilation])
    return make([node, helper.make_node("Relu", ["c"], ["y"])], [tensor("x", ["n", cin, size, size])],
                [tensor("y", ["n", cout, None, None])], inits)


@pytest.mark.parametrize("size, cout, kernel, stride, dilation, wider", [
    (17, 64, 3, 1, 1, True),  # Inception-v3's 17x17 stage: a one-row tile otherwise
    (17, 48, 3, 1, 2, True),  # dilated (DeepLabV3's ASPP on a 65x65 image's map)
    (35, 21, 1, 1, 1, False),  # 35 = 5 x 7: a 7-row tile; and ragged channels padded
    (16, 64, 3, 1, 1, False),
])
@pytest.mark.parametrize("cpu", [None, "haswell"])
def test_output_widths_without_a_good_tile_are_padded(size, cout, kernel, stride, dilation, wider, cpu):
    """A static output width whose divisors give no register tile of several rows is computed
    wider (zeros appended to the input by the conv's padding) and sliced back (ragged_conv.py)."""
    model = _square_conv(size, 16, cout, kernel, stride, dilation)
    compiled = hetc.compile(model, "cpu", cpu=cpu, winograd="off")
    convs = [name for name in compiled.report["kernels"] if "conv2d" in name]
    assert len(convs) == 1 and ("strided_slice" in convs[0]) == (wider or cout % 4 != 0), convs
    assert compiled.report["kernels"][convs[0]] == "contraction"
    for n in (1, 2):
        x = {"x": RNG.standard_normal((n, 16, size, size)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


def test_unpadded_convs_widen_only_where_it_pays_for_the_copy():
    """Widening a conv with no padding of its own (1x1) adds a pass copying its whole input into
    a zero-padded buffer: on AVX2, 56 pixels a row take 2 x 32 tiles, and 6 x 16 ones over 60
    score only 5% better, which the copy outweighed (ResNet-50's 1x1 convs: 1.22-1.32x against
    1.04-1.15x onnxruntime, 2-core AMD EPYC, LLVM znver3, AVX2). A 3x3 conv, which pads anyway, is still widened."""
    for kernel, wider in ((1, False), (3, True)):
        model = _square_conv(56, 16, 64, kernel)
        compiled = hetc.compile(model, "cpu", cpu="haswell", winograd="off")
        convs = [name for name in compiled.report["kernels"] if "conv2d" in name]
        assert len(convs) == 1 and ("strided_slice" in convs[0]) == wider, (kernel, convs)
        x = {"x": RNG.standard_normal((1, 16, 56, 56)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)
