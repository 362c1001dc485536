"""Inputs that decide output shapes (a Reshape's shape, a Reduce's axes, pads, k, scales, ...)
given at run time: one compiled model serves every value, as onnxruntime does."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from onnx import helper
from onnx_util import make, tensor

import hetc

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 3, 4)).astype(np.float32)


def _check(model, runs: list[dict[str, np.ndarray]]) -> None:
    compiled = hetc.compile(model)  # compiled once, run with each value
    for extra in runs:
        inputs = {"x": X, **extra}
        got = list(compiled.run(inputs).values())
        for actual, expected in zip(got, ort_run(model, inputs), strict=True):
            if expected.dtype.kind == "f":
                assert_close(actual, expected)
            else:
                np.testing.assert_array_equal(actual, expected)


def _i64(*values) -> np.ndarray:
    return np.array(values, np.int64)


CASES = {
    "reshape": (helper.make_node("Reshape", ["x", "v"], ["y"]), (3,), 17,
                [_i64(4, 3, 2), _i64(0, -1, 2), _i64(6, 1, -1)]),
    "reduce_sum_axes": (helper.make_node("ReduceSum", ["x", "v"], ["y"], keepdims=0), (1,), 17,
                        [_i64(0), _i64(-1), _i64(1)]),
    "reduce_log_sum_exp_axes": (helper.make_node("ReduceLogSumExp", ["x", "v"], ["y"], keepdims=1), (2,), 18,
                                [_i64(0, 2), _i64(1, -1)]),
    "pad": (helper.make_node("Pad", ["x", "v"], ["y"], mode="reflect"), (6,), 17,
            [_i64(0, 1, 2, 0, 1, 1), _i64(1, 0, -1, 1, 2, 0)]),
    "slice": (helper.make_node("Slice", ["x", "v", "e"], ["y"]), (2,), 17, [_i64(0, 1), _i64(1, -3)]),
    "cumsum_axis": (helper.make_node("CumSum", ["x", "v"], ["y"], reverse=1), (), 17, [_i64(0), _i64(-1)]),
    "topk": (helper.make_node("TopK", ["x", "v"], ["y", "i"]), (1,), 17, [_i64(1), _i64(3)]),
    "resize_scales": (helper.make_node("Resize", ["x", "", "v"], ["y"], mode="linear"), (3,), 17,
                      [np.array([1, 2, 0.5], np.float32), np.array([2, 1, 1.5], np.float32)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_shape_deciding_input_at_run_time(case):
    node, shape, opset, values = CASES[case]
    inputs = [tensor("x", X.shape), tensor("v", shape, values[0].dtype)]
    extra = {}
    if case == "slice":
        inputs.append(tensor("e", (2,), np.int64))
        extra = {"e": _i64(2, 4)}
    rank = 2 if case == "reduce_sum_axes" else 3  # output dims unknown until run time
    outputs = [tensor(name, [f"{name}{d}" for d in range(rank)], np.int64 if name == "i" else np.float32)
               for name in node.output]
    model = make([node], inputs, outputs, opset=opset)
    _check(model, [{"v": v.reshape(shape), **extra} for v in values])
