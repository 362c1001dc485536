"""Conv taps that read only padding are dropped (hetc/passes/dead_taps.py): DeepLabV3's ASPP
convs on small maps become 1x1 convs, partly dead kernels are cut, live ones are untouched,
and every case equals onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from conftest import assert_close, ort_run
from onnx import TensorProto, helper, numpy_helper

import hetc
from hetc.frontends.onnx import load_model, to_relax
from hetc.passes.dead_taps import dead_taps_pass, live_taps

RNG = np.random.default_rng(3)


def _conv(cin, cout, size, kernel=3, **attrs):
    w = (RNG.standard_normal((cout, cin, kernel, kernel)) * 0.2).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", cin, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", cout, "h", "w"])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _kernel_after(model) -> tuple[int, int]:
    mod = dead_taps_pass(to_relax(load_model(model)))
    shapes = []

    def visit(expr):
        if isinstance(expr, tvm.relax.Call) and getattr(expr.op, "name", "") == "relax.nn.conv2d":
            shapes.append(tuple(int(d) for d in expr.args[1].ty.shape.values[2:]))

    tvm.relax.analysis.post_order_visit(mod["main"], visit)
    (shape,) = shapes
    return shape





@pytest.mark.parametrize("size,dilation,pads,stride,kernel_after", [
    (8, 12, [12] * 4, 1, (1, 1)),  # DeepLabV3 ASPP on an 8x8 map: a 1x1 conv
    (6, 36, [36] * 4, 1, (1, 1)),
    (4, 3, [3, 3, 0, 0], 1, (2, 2)),  # asymmetric padding: the first tap dead on both axes
    (17, 12, [12] * 4, 1, (3, 3)),  # every tap reads some input: unchanged
    (9, 2, [2] * 4, 2, (3, 3)),
])
def test_dead_taps_dropped_and_conv_unchanged(size, dilation, pads, stride, kernel_after):
    model = _conv(8, 16, size, dilations=[dilation] * 2, pads=pads, strides=[stride] * 2)
    assert _kernel_after(model) == kernel_after
    compiled = hetc.compile(model, "cpu")
    for n in (1, 2):
        x = {"x": RNG.standard_normal((n, 8, size, size)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


def test_live_taps():
    assert live_taps(8, 3, 1, 12, 12, 12) == (1, 1)
    assert live_taps(17, 3, 1, 12, 12, 12) == (0, 2)
    assert live_taps(4, 3, 1, 3, 3, 0) == (1, 2)
    assert live_taps(2, 3, 1, 1, 1, 1) == (0, 2)
