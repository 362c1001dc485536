"""A strided transposed conv as a matmul, an overlap-add and a depth-to-space
(hetc/passes/conv_transpose.py): Mask R-CNN's mask head and U-Net decoders (2x2, stride 2),
overlapping windows (4x4 stride 2, 3x3 stride 2 with output padding, Conv-TasNet's 1-D
decoder), pads, a bias and symbolic batch and length, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from onnx import helper
from onnx_util import make, tensor

import hetc
from hetc.frontends.onnx import load_model, to_relax
from hetc.passes.conv_transpose import conv_transpose_as_matmul_pass
from hetc.passes.pipeline import relax_op_counts

RNG = np.random.default_rng(11)


def _model(kernel: int, stride: int, pad: int, batch):
    w = RNG.standard_normal((32, 24, kernel, kernel)).astype(np.float32)
    b = RNG.standard_normal(24).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=[kernel, kernel],
                            strides=[stride, stride], pads=[pad] * 4)
    return make([node], [tensor("x", [batch, 32, 14, 14])], [tensor("y", [batch, 24, None, None])], {"w": w, "b": b})


@pytest.mark.parametrize("kernel, batch", [(2, "n"), (2, 3), (4, "n")])
def test_non_overlapping_conv_transpose_is_a_matmul(kernel, batch):
    model = _model(kernel, kernel, 0, batch)
    counts = relax_op_counts(conv_transpose_as_matmul_pass(to_relax(load_model(model))))
    assert counts["relax.nn.conv2d_transpose"] == 0 and counts["relax.matmul"] == 1, counts
    compiled = hetc.compile(model, "cpu")
    assert "contraction" in compiled.report["kernels"].values(), compiled.report["kernels"]
    for n in ((1, 3) if batch == "n" else (batch,)):
        x = {"x": RNG.standard_normal((n, 32, 14, 14)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


@pytest.mark.parametrize("kernel, stride, pad, extra", [(4, 2, 1, 0), (3, 2, 1, 1), (3, 2, 0, 0), (5, 2, 2, 1),
                                                        (6, 3, 0, 2)])
def test_overlapping_conv_transpose_is_a_matmul(kernel, stride, pad, extra):
    w = RNG.standard_normal((16, 8, kernel, kernel)).astype(np.float32)
    b = RNG.standard_normal(8).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=[kernel, kernel],
                            strides=[stride, stride], pads=[pad] * 4, output_padding=[extra, extra])
    model = make([node], [tensor("x", ["n", 16, 9, 7])], [tensor("y", ["n", 8, None, None])], {"w": w, "b": b})
    assert relax_op_counts(conv_transpose_as_matmul_pass(to_relax(load_model(model))))["relax.nn.conv2d_transpose"] == 0
    compiled = hetc.compile(model, "cpu")
    for n in (1, 2):
        x = {"x": RNG.standard_normal((n, 16, 9, 7)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


@pytest.mark.parametrize("kernel, stride, pad", [(16, 8, 8), (16, 8, 0), (4, 4, 0), (7, 3, 1)])
def test_conv1d_transpose_over_a_symbolic_length(kernel, stride, pad):
    """Conv-TasNet's decoder (64 channels to 1, 16 taps, stride 8, pads 8): TVM's loop nest
    was 80% of the model's run."""
    w = RNG.standard_normal((24, 2, kernel)).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[kernel], strides=[stride], pads=[pad] * 2)
    model = make([node], [tensor("x", ["n", 24, "t"])], [tensor("y", ["n", 2, None])], {"w": w})
    counts = relax_op_counts(conv_transpose_as_matmul_pass(to_relax(load_model(model))))
    assert counts["relax.nn.conv1d_transpose"] == 0 and counts["relax.matmul"] == 1, counts
    compiled = hetc.compile(model, "cpu")
    assert "generic" not in {rule for name, rule in compiled.report["kernels"].items() if "matmul" in name}
    for n, t in ((1, 13), (2, 40)):
        x = {"x": RNG.standard_normal((n, 24, t)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)
