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


# Spectral ops whose shape-deciding inputs arrive at run time: DFT's axis (the one-sided output
# shape depends on it), STFT's frame_step and frame_length, MelWeightMatrix's scalars.
SIGNAL = RNG.normal(size=(2, 6, 10, 1)).astype(np.float32)
SPECTRUM = RNG.normal(size=(1, 6, 10, 2)).astype(np.float32)  # axis 0: no samples for an irfft
AUDIO = RNG.normal(size=(2, 64, 1)).astype(np.float32)


def _scalar(value: int) -> np.ndarray:
    return np.array(value, np.int64)


def _mel(m, d, rate, low, high) -> dict[str, np.ndarray]:
    return {"m": np.array(m, np.int32), "d": np.array(d, np.int32), "rate": np.array(rate, np.int32),
            "low": np.array(low, np.float32), "high": np.array(high, np.float32)}


SPECTRAL = {  # node, inputs, opset, two good runs, a run out of range and what the error says
    "dft_rfft_axis": (helper.make_node("DFT", ["x", "", "axis"], ["y"], onesided=1),
                      [tensor("x", SIGNAL.shape), tensor("axis", (), np.int64)], 20,
                      [{"x": SIGNAL, "axis": _scalar(1)}, {"x": SIGNAL, "axis": _scalar(-2)}],
                      {"x": SIGNAL, "axis": _scalar(3)}, "run-time axis must be one of 0, 1, 2"),
    "dft_irfft_axis": (helper.make_node("DFT", ["x", "", "axis"], ["y"], inverse=1, onesided=1),
                       [tensor("x", SPECTRUM.shape), tensor("axis", (), np.int64)], 20,
                       [{"x": SPECTRUM, "axis": _scalar(1)}, {"x": SPECTRUM, "axis": _scalar(2)}],
                       {"x": SPECTRUM, "axis": _scalar(0)}, "run-time axis must be one of 1, 2"),
    "stft_step_length": (helper.make_node("STFT", ["x", "step", "", "length"], ["y"]),
                         [tensor("x", AUDIO.shape), tensor("step", (), np.int64),
                          tensor("length", (), np.int64)],
                         17, [{"x": AUDIO, "step": _scalar(8), "length": _scalar(16)},
                              {"x": AUDIO, "step": _scalar(5), "length": _scalar(7)}],
                         {"x": AUDIO, "step": _scalar(8), "length": _scalar(65)},
                         "frame_length must be in 1..64"),
    "mel_weight_matrix": (helper.make_node("MelWeightMatrix", ["m", "d", "rate", "low", "high"], ["y"]),
                          [tensor(n, (), np.int32) for n in ("m", "d", "rate")]
                          + [tensor(n, ()) for n in ("low", "high")], 17,
                          [_mel(8, 16, 8192, 0, 4096), _mel(20, 512, 16000, 30, 7000)],
                          _mel(0, 16, 8192, 0, 4096),
                          "num_mel_bins, dft_length and sample_rate must be positive"),
}


@pytest.mark.parametrize("case", sorted(SPECTRAL))
def test_spectral_input_at_run_time(case):
    node, inputs, opset, runs, bad, error = SPECTRAL[case]
    rank = 2 if node.op_type == "MelWeightMatrix" else 4
    model = make([node], inputs, [tensor("y", [f"y{d}" for d in range(rank)])], opset=opset)
    compiled = hetc.compile(model)
    shapes = set()
    for run in runs:
        (actual,) = compiled.run(run).values()
        (expected,) = ort_run(model, run)
        assert_close(actual, expected)
        shapes.add(actual.shape)
    assert len(shapes) == 2  # the run-time value decided the output shape
    with pytest.raises(hetc.errors.InputError, match=error):
        compiled.run(bad)
