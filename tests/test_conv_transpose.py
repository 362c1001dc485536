"""A transposed conv with stride == kernel as a matmul and a depth-to-space
(hetc/passes/conv_transpose.py): Mask R-CNN's mask head and U-Net decoders (2x2, stride 2),
with a bias and a symbolic batch, against onnxruntime; overlapping windows are left to TVM."""

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


def test_overlapping_conv_transpose_is_left_to_tvm():
    model = _model(3, 2, 1, "n")
    assert relax_op_counts(conv_transpose_as_matmul_pass(to_relax(load_model(model))))["relax.nn.conv2d_transpose"] == 1
