"""Attention (opsets 23-25): one-node models against onnxruntime or onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_util import make, tensor

import hetc
from hetc.errors import ConversionError

_INPUTS = ["Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen"]
_OUTPUTS = ["Y", "present_key", "present_value", "qk"]


def _model(shapes: dict, outputs: dict, opset: int = 23, dtypes: dict | None = None, **attrs):
    """One Attention node; ``shapes``/``outputs`` map input/output names to shapes (absent
    optional inputs and middle outputs become '')."""
    dtypes = dtypes or {}
    last_in = max(_INPUTS.index(n) for n in shapes)
    last_out = max(_OUTPUTS.index(n) for n in outputs)
    node_in = [n if n in shapes else "" for n in _INPUTS[: last_in + 1]]
    node_out = [n if n in outputs else "" for n in _OUTPUTS[: last_out + 1]]
    node = helper.make_node("Attention", node_in, node_out, name="attn", **attrs)
    ins = [tensor(n, s, dtypes.get(n, np.float32)) for n, s in shapes.items()]
    outs = [tensor(n, s, dtypes.get("Q", np.float32)) for n, s in outputs.items()]
    return make([node], ins, outs, opset=opset)


def _feeds(shapes: dict, dtypes: dict | None = None, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    dtypes = dtypes or {}
    feeds = {}
    for name, shape in shapes.items():
        dtype = np.dtype(dtypes.get(name, np.float32))
        if dtype == np.bool_:
            feeds[name] = rng.random(shape) > 0.3
        elif dtype.kind == "i":
            feeds[name] = np.asarray(dtypes[f"{name}_value"], dtype)
        else:
            feeds[name] = rng.normal(0, 1, shape).astype(dtype)
    return feeds


def _check(model, feeds, reference: str, rel: float = 1e-4):
    got = list(hetc.compile(model).run(feeds).values())
    if reference == "ort":
        expected = ort_run(model, feeds)
    else:
        expected = ReferenceEvaluator(model).run(None, feeds)
    assert len(got) == len(expected)
    for actual, ref in zip(got, expected, strict=True):
        inf = np.isinf(ref)  # masked logits in qk_matmul_output mode 2
        np.testing.assert_array_equal(np.isinf(actual), inf)
        np.testing.assert_array_equal(actual[inf], ref[inf])
        assert_close(np.where(inf, 0, actual), np.where(inf, 0, ref), rel)


B, S, L = 2, 3, 5  # batch, query length, key length


@pytest.mark.parametrize(("shapes", "outputs", "attrs", "dtypes"), [
    pytest.param({"Q": (B, 2, S, 8), "K": (B, 2, L, 8), "V": (B, 2, L, 6)}, {"Y": (B, 2, S, 6)},
                 {"is_causal": 1}, None, id="4d-causal-vsize"),
    pytest.param({"Q": (B, 4, S, 8), "K": (B, 2, L, 8), "V": (B, 2, L, 8), "attn_mask": (B, 1, S, L)},
                 {"Y": (B, 4, S, 8)}, {}, {"attn_mask": np.bool_}, id="4d-gqa-boolmask"),
    pytest.param({"Q": (B, S, 32), "K": (B, L, 16), "V": (B, L, 12), "attn_mask": (S, L)},
                 {"Y": (B, S, 24)}, {"q_num_heads": 4, "kv_num_heads": 2, "scale": 0.3}, None,
                 id="3d-gqa-floatmask-scale"),
    pytest.param({"Q": (B, 2, S, 8), "K": (B, 2, S, 8), "V": (B, 2, S, 8), "attn_mask": (S, 7),
                  "past_key": (B, 2, 4, 8), "past_value": (B, 2, 4, 8)},
                 {"Y": (B, 2, S, 8), "present_key": (B, 2, 7, 8), "present_value": (B, 2, 7, 8),
                  "qk": (B, 2, S, 7)},
                 {"is_causal": 1, "qk_matmul_output_mode": 3}, {"attn_mask": np.bool_},
                 id="past-kv-causal-boolmask-qk-probs"),
    pytest.param({"Q": (B, 2, S, 8), "K": (B, 2, L, 8), "V": (B, 2, L, 8)},
                 {"Y": (B, 2, S, 8), "qk": (B, 2, S, L)}, {"softcap": 0.5, "qk_matmul_output_mode": 1},
                 None, id="softcap-qk-after-softcap"),
    pytest.param({"Q": (B, 2, S, 8), "K": (B, 2, L, 8), "V": (B, 2, L, 8), "attn_mask": (S, L)},
                 {"Y": (B, 2, S, 8), "qk": (B, 2, S, L)}, {"softcap": 2.0}, None,
                 id="raw-qk-with-softcap"),
    pytest.param({"Q": (B, S, 16), "K": (B, L, 16), "V": (B, L, 16)}, {"Y": (B, S, 16), "qk": (B, 4, S, L)},
                 {"q_num_heads": 4, "kv_num_heads": 4, "qk_matmul_output_mode": 3,
                  "softmax_precision": 1}, {"Q": np.float16, "K": np.float16, "V": np.float16},
                 id="3d-fp16-softmax-fp32-probs"),
])
def test_attention_matches_onnxruntime(shapes, outputs, attrs, dtypes):
    model = _model(shapes, outputs, dtypes=dtypes, **attrs)
    rel = 2e-3 if dtypes and dtypes.get("Q") == np.float16 else 1e-4
    _check(model, _feeds(shapes, dtypes), "ort", rel)


@pytest.mark.parametrize(("shapes", "outputs", "opset", "attrs", "dtypes"), [
    # a fully masked query row gives zeros, not NaN (in Y and in the mode-3 probabilities)
    pytest.param({"Q": (1, 2, 2, 8), "K": (1, 2, 2, 8), "V": (1, 2, 2, 8), "attn_mask": (2, 2)},
                 {"Y": (1, 2, 2, 8), "qk": (1, 2, 2, 2)}, 23, {"qk_matmul_output_mode": 3}, "fully-masked",
                 id="fully-masked-row"),
    pytest.param({"Q": (B, 4, 1, 8), "K": (B, 2, 6, 8), "V": (B, 2, 6, 8), "nonpad_kv_seqlen": (B,)},
                 {"Y": (B, 4, 1, 8)}, 24, {"is_causal": 1},
                 {"nonpad_kv_seqlen": np.int64, "nonpad_kv_seqlen_value": [4, 6]}, id="nonpad-gqa-decode"),
    pytest.param({"Q": (B, 2, 4, 8), "K": (B, 2, 6, 8), "V": (B, 2, 6, 8)}, {"Y": (B, 2, 4, 8)}, 25,
                 {"left_window_size": 1, "right_window_size": 2}, None, id="bidirectional-window"),
    # attn_mask shorter than past + new keys: padded with False
    pytest.param({"Q": (B, 2, 4, 8), "K": (B, 2, 2, 8), "V": (B, 2, 2, 8), "attn_mask": (4, 3),
                  "past_key": (B, 2, 3, 8), "past_value": (B, 2, 3, 8)},
                 {"Y": (B, 2, 4, 8), "present_key": (B, 2, 5, 8), "present_value": (B, 2, 5, 8),
                  "qk": (B, 2, 4, 5)}, 25,
                 {"is_causal": 1, "left_window_size": 2, "qk_matmul_output_mode": 2}, {"attn_mask": np.bool_},
                 id="causal-window-past-short-mask"),
])
def test_attention_matches_reference(shapes, outputs, opset, attrs, dtypes):
    model = _model(shapes, outputs, opset, dtypes=None if dtypes == "fully-masked" else dtypes, **attrs)
    if dtypes == "fully-masked":
        model.graph.input[3].type.tensor_type.elem_type = 9  # bool
        feeds = _feeds(shapes)
        feeds["attn_mask"] = np.array([[False, False], [True, True]])
    else:
        feeds = _feeds(shapes, dtypes)
    _check(model, feeds, "reference")
    if dtypes == "fully-masked":
        y, qk = hetc.compile(model).run(feeds).values()
        assert not np.isnan(y).any() and (y[:, :, 0] == 0).all() and (qk[:, :, 0] == 0).all()


_Q4 = {"Q": (1, 2, 3, 8), "K": (1, 2, 3, 8), "V": (1, 2, 3, 8)}


@pytest.mark.parametrize(("attrs", "shapes", "out", "match"), [
    ({"softmax_precision": 7}, _Q4, (1, 2, 3, 8),
     r"node 'attn' \(Attention\): attribute softmax_precision=7 is not supported"),
    ({"qk_matmul_output_mode": 4}, _Q4, (1, 2, 3, 8), r"attribute qk_matmul_output_mode=4 is not supported"),
    ({"q_num_heads": 3, "kv_num_heads": 2}, {"Q": (1, 3, 16), "K": (1, 3, 16), "V": (1, 3, 16)}, (1, 3, 24),
     r"node 'attn' \(Attention\): input Q hidden size 16 is not divisible by q_num_heads=3"),
])
def test_attention_rejects_unsupported(attrs, shapes, out, match):
    model = _model(shapes, {"Y": out}, **attrs)
    with pytest.raises(ConversionError, match=match):
        hetc.compile(model)
