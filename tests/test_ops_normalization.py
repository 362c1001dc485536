"""hetc's LayerNormalization, RMSNormalization and RotaryEmbedding converters, one-node models.

References: onnxruntime, and ``onnx.reference`` / numpy where onnxruntime does not implement the
attribute (RMSNormalization computes in float32 whatever ``stash_type`` says).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import assert_close, ort_run
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_util import make, tensor

import hetc
from hetc.errors import ConversionError
from hetc.frontends.onnx.importer import converter_source

_STASH = {1: np.float32, 10: np.float16, 11: np.float64}


def _model(node: onnx.NodeProto, inputs, outputs, inits=None, opset=23) -> onnx.ModelProto:
    model = make([node], inputs, outputs, inits, opset=opset)
    model.ir_version = 11  # opset 23 needs IR >= 11; onnxruntime refuses > 13
    return model


def _rel(dtype) -> float:
    return 2e-3 if np.dtype(dtype) == np.float16 else 1e-5


def test_converters_are_hetcs():
    assert converter_source("RMSNormalization", 23) == "hetc"
    assert converter_source("RotaryEmbedding", 23) == "hetc"
    assert converter_source("LayerNormalization", 17) == "hetc"


# --- LayerNormalization ---------------------------------------------------------------------

@pytest.mark.parametrize(("shape", "axis", "scale_shape", "dtype", "stash", "outputs"), [
    ((2, 3, 8), -1, (8,), np.float16, 1, 3),  # float16 in, float32 Mean/InvStdDev
    ((2, 3, 8), -2, (3, 8), np.float64, 1, 3),  # computed in float32, Y back in float64
    ((2, 3, 8), 1, (1, 8), np.float64, 11, 1),  # stash double, broadcast scale
    ((3, 4, 5), -3, (5,), np.float32, 1, 2),  # axis over everything, two outputs
])
def test_layer_normalization(shape, axis, scale_shape, dtype, stash, outputs):
    rng = np.random.default_rng(1)
    names = ["y", "mean", "inv_std"][:outputs]
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], names, name="ln", axis=axis,
                            epsilon=1e-2, stash_type=stash)
    ax = axis % len(shape)
    stat = list(shape[:ax]) + [1] * (len(shape) - ax)
    outs = [tensor("y", shape, dtype)] + [tensor(n, stat, _STASH[stash]) for n in names[1:]]
    inits = {"scale": rng.uniform(0.5, 1.5, scale_shape).astype(dtype),
             "bias": rng.normal(0, 1, scale_shape).astype(dtype)}
    model = _model(node, [tensor("x", shape, dtype)], outs, inits, opset=17)
    x = rng.normal(3, 2, shape).astype(dtype)
    got = hetc.compile(model).run({"x": x})
    assert len(got) == outputs
    for actual, expected in zip(got.values(), ort_run(model, {"x": x}), strict=True):
        assert_close(actual, expected, rel=_rel(actual.dtype))


# --- RMSNormalization -----------------------------------------------------------------------

def _rms_reference(x, scale, axis, epsilon, stash):
    xs = x.astype(_STASH[stash])
    axes = tuple(range(axis % x.ndim, x.ndim))
    ms = np.mean(xs * xs, axis=axes, keepdims=True)
    return ((xs / np.sqrt(ms + np.asarray(epsilon, xs.dtype))).astype(x.dtype) * scale).astype(scale.dtype)


@pytest.mark.parametrize(("shape", "axis", "scale_shape", "dtype", "stash", "epsilon"), [
    ((2, 3, 8), -1, (8,), np.float32, 1, 1e-5),  # fast path: relax.nn.rms_norm
    ((2, 3, 8), 0, (3, 8), np.float32, 1, 1e-5),  # every axis (TVM's converter fails to build)
    ((2, 3, 8), 1, (3, 1), np.float32, 1, 0.5),  # broadcast scale, large epsilon
    ((2, 3, 8), -2, (8,), np.float16, 1, 1e-3),  # float16 computed in float32
    ((2, 3, 8), -1, (8,), np.float64, 11, 1e-5),  # double all the way
    ((4, 16), -1, (16,), np.float32, 10, 1e-3),  # computed in float16
])
def test_rms_normalization(shape, axis, scale_shape, dtype, stash, epsilon):
    rng = np.random.default_rng(2)
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], name="rms", axis=axis,
                            epsilon=epsilon, stash_type=stash)
    scale = rng.uniform(0.5, 1.5, scale_shape).astype(dtype)
    model = _model(node, [tensor("x", shape, dtype)], [tensor("y", shape, dtype)], {"scale": scale})
    x = rng.normal(1, 2, shape).astype(dtype)
    got = hetc.compile(model).run({"x": x})["y"]
    expected = _rms_reference(x, scale, axis, epsilon, stash)
    assert_close(got, expected, rel=max(_rel(_STASH[stash]), _rel(dtype)))
    if stash == 1:
        assert_close(got, ReferenceEvaluator(model).run(None, {"x": x})[0], rel=_rel(dtype))
        assert_close(got, ort_run(model, {"x": x})[0], rel=_rel(dtype))


# --- RotaryEmbedding ------------------------------------------------------------------------

def _rope_model(shape, num_heads=None, rotary_dim=None, interleaved=0, position_ids="input",
                dtype=np.float32, max_pos=16, **extra_attrs):
    """position_ids: 'input' (graph input), 'init' (initializer) or None (caches per token)."""
    rng = np.random.default_rng(3)
    batch, seq = shape[0], shape[2] if len(shape) == 4 else shape[1]
    head = shape[3] if len(shape) == 4 else shape[2] // num_heads
    half = (rotary_dim or head) // 2
    attrs = {"interleaved": interleaved, **extra_attrs}
    if rotary_dim:
        attrs["rotary_embedding_dim"] = rotary_dim
    if num_heads:
        attrs["num_heads"] = num_heads
    cache = (max_pos, half) if position_ids else (batch, seq, half)
    feeds = {"x": rng.normal(0, 1, shape).astype(dtype)}
    angles = rng.uniform(0, 2 * np.pi, cache)
    inits = {"cos": np.cos(angles).astype(dtype), "sin": np.sin(angles).astype(dtype)}
    inputs = [tensor("x", shape, dtype)]
    names = ["x", "cos", "sin"]
    if position_ids:
        names.append("pos")
        pos = rng.integers(0, max_pos, (batch, seq)).astype(np.int64)
        if position_ids == "init":
            inits["pos"] = pos
        else:
            feeds["pos"] = pos
            inputs.append(tensor("pos", (batch, seq), np.int64))
    node = helper.make_node("RotaryEmbedding", names, ["y"], name="rope", **attrs)
    return _model(node, inputs, [tensor("y", shape, dtype)], inits), feeds


@pytest.mark.parametrize(("shape", "kwargs"), [
    ((2, 3, 4, 8), {}),  # 4D (batch, heads, seq, head), position_ids input
    ((2, 3, 4, 8), {"interleaved": 1, "position_ids": "init"}),
    ((2, 3, 4, 8), {"rotary_dim": 4, "position_ids": None}),  # partial rotation, per-token caches
    ((2, 3, 4, 8), {"num_heads": 3, "rotary_dim": 6, "interleaved": 1}),  # num_heads given on 4D
    ((2, 4, 12), {"num_heads": 3}),  # 3D (batch, seq, hidden)
    ((2, 4, 24), {"num_heads": 3, "rotary_dim": 4, "interleaved": 1, "position_ids": None}),
    ((1, 2, 5, 16), {"rotary_dim": 8, "dtype": np.float16}),
    ((2, 5, 32), {"num_heads": 2, "interleaved": 1, "dtype": np.float16}),
])
def test_rotary_embedding(shape, kwargs):
    model, feeds = _rope_model(shape, **kwargs)
    got = hetc.compile(model).run(feeds)["y"]
    rel = _rel(kwargs.get("dtype", np.float32))
    assert_close(got, ReferenceEvaluator(model).run(None, feeds)[0], rel=rel)
    assert_close(got, ort_run(model, feeds)[0], rel=rel)


# --- errors ---------------------------------------------------------------------------------

def test_rms_normalization_rejects_unknown_stash_type():
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], name="rms", stash_type=7)
    model = _model(node, [tensor("x", (2, 8))], [tensor("y", (2, 8))], {"scale": np.ones(8, np.float32)})
    with pytest.raises(ConversionError, match=r"node 'rms' \(RMSNormalization\): attribute stash_type=7 "
                                              r"is not supported"):
        hetc.compile(model)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"interleaved": 2}, r"attribute interleaved=2 is not supported"),
    ({"rotary_embedding_dim": -2}, r"attribute rotary_embedding_dim=-2 is not supported"),
    ({"rotary_embedding_dim": 5}, r"rotary_embedding_dim=5 must be even"),
    ({"num_heads": 2}, r"num_heads=2 does not match the input's 3 heads"),
])
def test_rotary_embedding_rejects_bad_attributes(kwargs, message):
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"], name="rope", **kwargs)
    caches = {"cos": np.ones((2, 4, 4), np.float32), "sin": np.zeros((2, 4, 4), np.float32)}
    model = _model(node, [tensor("x", (2, 3, 4, 8))], [tensor("y", (2, 3, 4, 8))], caches)
    with pytest.raises(ConversionError, match=r"node 'rope' \(RotaryEmbedding\): " + message):
        hetc.compile(model)
