"""hetc's LinearAttention and CausalConvWithState converters (opset 27), one-node models,
compared with ``onnx.reference`` (onnxruntime does not implement them)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_util import make, tensor

import hetc
from hetc.errors import HetcError

F32 = np.float32


def _model(node, inputs, outputs, inits=None):
    model = make([node], inputs, outputs, inits, opset=27)
    model.ir_version = 13
    return model


def _check(model, feeds, rel=1e-4):
    expected = ReferenceEvaluator(model).run(None, feeds)
    got = hetc.compile(model).run(feeds)
    assert len(got) == len(expected)
    for g, e in zip(got.values(), expected, strict=True):
        assert_close(np.asarray(g), e, rel=rel)


@pytest.mark.parametrize(("rule", "qh", "kvh", "decay_last", "beta_last", "past", "scale", "dtype"), [
    ("linear", 2, 2, None, None, False, 0.0, F32),
    ("gated", 4, 2, "dk", None, True, 0.5, F32),          # GQA, per-key-dim decay, past
    ("delta", 2, 1, None, 1, False, 0.0, F32),             # MQA, shared beta
    ("gated_delta", 4, 2, "h", "h", True, 0.0, np.float16),
])
def test_linear_attention(rule, qh, kvh, decay_last, beta_last, past, scale, dtype):
    rng = np.random.default_rng(0)
    b, t, dk, dv = 2, 3, 4, 5
    feeds = {"q": rng.normal(size=(b, t, qh * dk)), "k": rng.normal(size=(b, t, kvh * dk)) * 0.5,
             "v": rng.normal(size=(b, t, kvh * dv))}
    names = ["q", "k", "v", "", "", ""]
    if past:
        feeds["s"] = rng.normal(size=(b, kvh, dk, dv))
        names[3] = "s"
    if decay_last:
        feeds["g"] = -rng.uniform(0, 1, size=(b, t, kvh * dk if decay_last == "dk" else kvh))
        names[4] = "g"
    if beta_last:
        feeds["beta"] = rng.uniform(0, 1, size=(b, t, kvh if beta_last == "h" else 1))
        names[5] = "beta"
    while names[-1] == "":
        names.pop()
    feeds = {k: v.astype(dtype) for k, v in feeds.items()}
    node = helper.make_node("LinearAttention", names, ["y", "state"], q_num_heads=qh,
                            kv_num_heads=kvh, update_rule=rule, scale=scale, chunk_size=16)
    model = _model(node, [tensor(k, v.shape, dtype) for k, v in feeds.items()],
                   [tensor("y", (b, t, qh * dv), dtype), tensor("state", (b, kvh, dk, dv), dtype)])
    _check(model, feeds, rel=3e-3 if dtype == np.float16 else 1e-4)


@pytest.mark.parametrize(("k", "bias", "past", "activation", "dtype"), [
    (3, True, True, "silu", F32),
    (4, False, False, "swish", np.float16),
    (1, True, False, "none", F32),  # empty state
])
def test_causal_conv_with_state(k, bias, past, activation, dtype):
    rng = np.random.default_rng(1)
    bsz, c, length = 2, 3, 5
    feeds = {"x": rng.normal(size=(bsz, c, length)), "w": rng.normal(size=(c, 1, k))}
    names = ["x", "w", "", ""]
    if bias:
        feeds["bias"] = rng.normal(size=(c,))
        names[2] = "bias"
    if past:
        feeds["past"] = rng.normal(size=(bsz, c, k - 1))
        names[3] = "past"
    while names[-1] == "":
        names.pop()
    feeds = {n: v.astype(dtype) for n, v in feeds.items()}
    node = helper.make_node("CausalConvWithState", names, ["y", "state"], activation=activation)
    model = _model(node, [tensor(n, v.shape, dtype) for n, v in feeds.items()],
                   [tensor("y", (bsz, c, length), dtype), tensor("state", (bsz, c, k - 1), dtype)])
    _check(model, feeds, rel=3e-3 if dtype == np.float16 else 1e-4)


def test_unsupported_attributes_are_clear_errors():
    node = helper.make_node("LinearAttention", ["q", "k", "v"], ["y", "s"], q_num_heads=2,
                            kv_num_heads=2, update_rule="mamba")
    model = _model(node, [tensor(n, (1, 2, 8)) for n in "qkv"],
                   [tensor("y", (1, 2, 8)), tensor("s", (1, 2, 4, 4))])
    # a clear error naming the op and attribute (the converter's, or ONNX shape inference's)
    with pytest.raises(HetcError, match=r"LinearAttention.*update_rule"):
        hetc.compile(model)
    node = helper.make_node("CausalConvWithState", ["x", "w"], ["y", "s"], activation="gelu")
    model = _model(node, [tensor("x", (1, 2, 4)), tensor("w", (2, 1, 2))], [tensor("y", (1, 2, 4)), tensor("s", (1, 2, 1))])
    with pytest.raises(HetcError, match=r"CausalConvWithState.*activation.*gelu"):
        hetc.compile(model)
