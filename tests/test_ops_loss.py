"""hetc's SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss converters (ops/loss.py)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_util import make, tensor

import hetc
from hetc.errors import ConversionError
from hetc.frontends.onnx.importer import converter_source

NLL, SCE = "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"


def _loss_model(op, shape, reduction=None, weight=False, ignore_index=None, log_prob=False,
                dtype=np.float32, target_dtype=np.int64, opset=13, name="loss"):
    attrs = {}
    if reduction is not None:
        attrs["reduction"] = reduction
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    ins = ["x", "t"] + (["w"] if weight else [])
    outs = ["loss"] + (["log_prob"] if log_prob else [])
    node = helper.make_node(op, ins, outs, name=name, **attrs)
    tshape = [shape[0], *shape[2:]]
    loss_shape = tshape if reduction == "none" else []
    inputs = [tensor("x", shape, dtype), tensor("t", tshape, target_dtype)]
    inputs += [tensor("w", [shape[1]], dtype)] if weight else []
    outputs = [tensor("loss", loss_shape, dtype)] + ([tensor("log_prob", shape, dtype)] if log_prob else [])
    return make([node], inputs, outputs, opset=opset)


def _feeds(shape, weight, ignore_index, dtype, target_dtype, seed=0):
    rng = np.random.default_rng(seed)
    c = shape[1]
    tshape = (shape[0], *shape[2:])
    target = rng.integers(0, c, tshape).astype(target_dtype)
    if ignore_index is not None:  # make sure some targets are ignored, not all
        flat = target.reshape(-1)
        flat[::3] = ignore_index
    feeds = {"x": rng.normal(0, 2, shape).astype(dtype), "t": target}
    if weight:
        feeds["w"] = rng.uniform(0.2, 2.0, (c,)).astype(dtype)
    return feeds


CASES = [
    # op, x shape, reduction, weight, ignore_index, log_prob, dtype, opset
    (NLL, (3, 5), None, False, None, False, np.float32, 12),  # default reduction=mean
    (NLL, (3, 5, 4), "sum", True, None, False, np.float32, 13),
    (NLL, (2, 4, 3, 2), "none", True, 1, False, np.float32, 13),
    (NLL, (2, 4, 3, 2), "mean", True, -5, False, np.float32, 12),  # negative ignore_index
    (NLL, (2, 4, 3), "mean", False, 10, False, np.float32, 13),  # ignore_index >= C
    (NLL, (2, 3, 2, 2, 2), "mean", True, 2, False, np.float32, 13),  # weighted mean excludes ignored
    (NLL, (3, 5), "mean", True, None, False, np.float64, 13),
    (NLL, (3, 5, 2), "sum", False, None, False, np.float16, 13),
    (SCE, (3, 5), None, False, None, False, np.float32, 12),
    (SCE, (3, 5), "none", True, None, True, np.float32, 13),
    (SCE, (2, 4, 3, 2, 2), "mean", True, -3, True, np.float32, 13),
    (SCE, (2, 4, 3), "sum", False, 2, False, np.float32, 12),
    (SCE, (2, 4, 3), "mean", False, 0, True, np.float32, 13),  # unweighted mean over non-ignored
    (SCE, (2, 4), "mean", True, 1, True, np.float64, 13),
    (SCE, (4, 6, 3), "mean", True, None, True, np.float16, 13),
]


@pytest.mark.parametrize(("op", "shape", "reduction", "weight", "ignore_index", "log_prob", "dtype", "opset"),
                         CASES)
def test_loss_matches_reference(op, shape, reduction, weight, ignore_index, log_prob, dtype, opset):
    target_dtype = np.int32 if len(shape) == 3 else np.int64
    model = _loss_model(op, shape, reduction, weight, ignore_index, log_prob, dtype, target_dtype, opset)
    feeds = _feeds(shape, weight, ignore_index, dtype, target_dtype)
    got = hetc.compile(model).run(feeds)
    expected = ReferenceEvaluator(model).run(None, feeds)
    assert list(got) == ["loss", "log_prob"][: len(expected)]
    rel = 2e-3 if dtype == np.float16 else 1e-4
    for actual, ref in zip(got.values(), expected, strict=True):
        assert_close(actual, np.asarray(ref).astype(dtype), rel=rel)


@pytest.mark.parametrize("op", [NLL, SCE])
def test_loss_ignore_index_minus_one_matches_onnxruntime(op):
    # onnx.reference's NLL treats ignore_index=-1 without weights as "no ignore_index" (mean over
    # all elements); the spec (and onnxruntime) divide by the number of non-ignored targets.
    shape = (3, 4, 5)
    model = _loss_model(op, shape, "mean", False, -1, op == SCE)
    feeds = _feeds(shape, False, -1, np.float32, np.int64, seed=3)
    got = hetc.compile(model).run(feeds)
    for actual, ref in zip(got.values(), ort_run(model, feeds), strict=True):
        assert_close(actual, ref)
    x, t = feeds["x"], feeds["t"]
    logp = x - np.log(np.exp(x).sum(1, keepdims=True)) if op == SCE else x
    picked = np.take_along_axis(logp, np.where(t == -1, 0, t)[:, None], 1)[:, 0]
    valid = t != -1
    assert_close(got["loss"], np.float32(-(picked * valid).sum() / valid.sum()))


def test_loss_converters_are_hetc_from_opset_12():
    for op in (NLL, SCE):
        assert converter_source(op, 12) == "hetc" and converter_source(op, 13) == "hetc"
        assert converter_source(op, 11) is None


@pytest.mark.parametrize("op", [NLL, SCE])
def test_loss_rejects_unknown_reduction(op):
    model = _loss_model(op, (2, 3), "max")
    with pytest.raises(ConversionError, match=rf"node 'loss' \({op}\).*attribute reduction='max' is not supported"):
        hetc.compile(model)

