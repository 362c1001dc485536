"""ONNX models hetc builds itself with ``onnx.helper``: no downloads, no torch.

Small ones (``MODELS``: mlp, cnn, transformer) for tests, and realistic ones in
``ALL_MODELS``: torchvision's ResNet-18/50 and MobileNetV2, BERT-tiny and BERT-base (as torch
exports them), plus ResNet-50 at batch 8 (throughput) and a one-Add model (the fixed cost of
a call) for benchmarks/cpu_latency.py. Each builder returns an ``onnx.ModelProto`` (opset 17) with fixed-seed random
weights and an IR version onnxruntime accepts. Run as a script to write the models and
matching sample inputs::

    python examples/models.py OUT_DIR                  # the small models
    python examples/models.py OUT_DIR cnn resnet50     # some of them
    python examples/models.py OUT_DIR all              # every model (BERT-base is ~440 MB)

writes ``OUT_DIR/<name>.onnx`` and ``OUT_DIR/<name>_inputs.npz`` (arrays keyed by input name).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 10  # onnxruntime refuses IR versions newer than it knows
OPSET = 17


def _const(name: str, array: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _model(graph: onnx.GraphProto, opset: int = OPSET) -> onnx.ModelProto:
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="hetc-examples"
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def mlp(batch: int = 4, dims: tuple[int, ...] = (64, 128, 128, 10), seed: int = 0) -> onnx.ModelProto:
    """Gemm/Relu stack ending in Softmax."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i, (fan_in, fan_out) in enumerate(zip(dims[:-1], dims[1:])):
        w = rng.normal(0, 1 / np.sqrt(fan_in), (fan_out, fan_in)).astype(np.float32)
        b = rng.normal(0, 0.1, fan_out).astype(np.float32)
        inits += [_const(f"fc{i}.weight", w), _const(f"fc{i}.bias", b)]
        nodes.append(helper.make_node("Gemm", [x, f"fc{i}.weight", f"fc{i}.bias"], [f"h{i}"],
                                      name=f"fc{i}", transB=1))
        x = f"h{i}"
        if i < len(dims) - 2:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"], name=f"relu{i}"))
            x = f"r{i}"
    nodes.append(helper.make_node("Softmax", [x], ["probs"], name="softmax", axis=-1))
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, dims[0]])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, dims[-1]])],
        inits,
    )
    return _model(graph)


def cnn(batch: int = 2, channels: tuple[int, ...] = (3, 16, 32), size: int = 32, classes: int = 10,
        seed: int = 0) -> onnx.ModelProto:
    """Conv/BatchNormalization/Relu/MaxPool blocks, global average pool, Flatten, Gemm."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "image"
    for i, (cin, cout) in enumerate(zip(channels[:-1], channels[1:])):
        p = f"block{i}"
        w = rng.normal(0, np.sqrt(2 / (cin * 9)), (cout, cin, 3, 3)).astype(np.float32)
        inits += [
            _const(f"{p}.conv.weight", w),
            _const(f"{p}.conv.bias", rng.normal(0, 0.1, cout).astype(np.float32)),
            _const(f"{p}.bn.scale", rng.uniform(0.5, 1.5, cout).astype(np.float32)),
            _const(f"{p}.bn.bias", rng.normal(0, 0.1, cout).astype(np.float32)),
            _const(f"{p}.bn.mean", rng.normal(0, 0.1, cout).astype(np.float32)),
            _const(f"{p}.bn.var", rng.uniform(0.5, 1.5, cout).astype(np.float32)),
        ]
        nodes += [
            helper.make_node("Conv", [x, f"{p}.conv.weight", f"{p}.conv.bias"], [f"{p}.c"],
                             name=f"{p}.conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization",
                             [f"{p}.c", f"{p}.bn.scale", f"{p}.bn.bias", f"{p}.bn.mean", f"{p}.bn.var"],
                             [f"{p}.b"], name=f"{p}.bn", epsilon=1e-5),
            helper.make_node("Relu", [f"{p}.b"], [f"{p}.r"], name=f"{p}.relu"),
            helper.make_node("MaxPool", [f"{p}.r"], [f"{p}.p"], name=f"{p}.pool",
                             kernel_shape=[2, 2], strides=[2, 2]),
        ]
        x = f"{p}.p"
    cout = channels[-1]
    inits += [
        _const("fc.weight", rng.normal(0, 1 / np.sqrt(cout), (classes, cout)).astype(np.float32)),
        _const("fc.bias", rng.normal(0, 0.1, classes).astype(np.float32)),
    ]
    nodes += [
        helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, channels[0], size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])],
        inits,
    )
    return _model(graph)


def transformer(batch: int = 1, seq: int = 32, hidden: int = 64, heads: int = 4, ffn: int = 128,
                seed: int = 0) -> onnx.ModelProto:
    """One post-LN transformer encoder block: attention, LayerNormalization, Erf-GELU FFN."""
    rng = np.random.default_rng(seed)
    head_dim = hidden // heads
    inits: list[TensorProto] = []

    def weight(name: str, shape: tuple[int, ...]) -> str:
        inits.append(_const(name, rng.normal(0, 1 / np.sqrt(shape[0]), shape).astype(np.float32)))
        return name

    def vec(name: str, n: int, mean: float = 0.0) -> str:
        inits.append(_const(name, (mean + rng.normal(0, 0.1, n)).astype(np.float32)))
        return name

    def linear(prefix: str, x: str, fan_in: int, fan_out: int) -> list[onnx.NodeProto]:
        w, b = weight(f"{prefix}.weight", (fan_in, fan_out)), vec(f"{prefix}.bias", fan_out)
        return [helper.make_node("MatMul", [x, w], [f"{prefix}.mm"], name=f"{prefix}.matmul"),
                helper.make_node("Add", [f"{prefix}.mm", b], [f"{prefix}.out"], name=f"{prefix}.add")]

    inits += [
        _const("split_heads", np.array([batch, seq, heads, head_dim], np.int64)),
        _const("merge_heads", np.array([batch, seq, hidden], np.int64)),
        _const("scale", np.array(1 / np.sqrt(head_dim), np.float32)),
        _const("half", np.array(0.5, np.float32)),
        _const("one", np.array(1.0, np.float32)),
        _const("inv_sqrt2", np.array(1 / np.sqrt(2), np.float32)),
    ]
    nodes: list[onnx.NodeProto] = []
    for proj in ("q", "k", "v"):
        nodes += linear(f"attn.{proj}", "x", hidden, hidden)
        nodes += [
            helper.make_node("Reshape", [f"attn.{proj}.out", "split_heads"], [f"{proj}.heads"],
                             name=f"attn.{proj}.reshape"),
            helper.make_node("Transpose", [f"{proj}.heads"], [f"{proj}.t"], name=f"attn.{proj}.transpose",
                             perm=[0, 2, 3, 1] if proj == "k" else [0, 2, 1, 3]),
        ]
    nodes += [
        helper.make_node("MatMul", ["q.t", "k.t"], ["scores.raw"], name="attn.scores"),
        helper.make_node("Mul", ["scores.raw", "scale"], ["scores"], name="attn.scale"),
        helper.make_node("Softmax", ["scores"], ["probs"], name="attn.softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v.t"], ["ctx.heads"], name="attn.context"),
        helper.make_node("Transpose", ["ctx.heads"], ["ctx.t"], name="attn.ctx.transpose", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx.t", "merge_heads"], ["ctx"], name="attn.ctx.reshape"),
    ]
    nodes += linear("attn.o", "ctx", hidden, hidden)
    nodes += [
        helper.make_node("Add", ["x", "attn.o.out"], ["res1"], name="attn.residual"),
        helper.make_node("LayerNormalization", ["res1", vec("ln1.scale", hidden, 1.0), vec("ln1.bias", hidden)],
                         ["ln1"], name="ln1", axis=-1, epsilon=1e-5),
    ]
    nodes += linear("ffn.up", "ln1", hidden, ffn)
    nodes += [  # exact GELU: 0.5 * x * (1 + erf(x / sqrt(2)))
        helper.make_node("Mul", ["ffn.up.out", "inv_sqrt2"], ["gelu.s"], name="gelu.scale"),
        helper.make_node("Erf", ["gelu.s"], ["gelu.erf"], name="gelu.erf"),
        helper.make_node("Add", ["gelu.erf", "one"], ["gelu.p1"], name="gelu.add"),
        helper.make_node("Mul", ["ffn.up.out", "gelu.p1"], ["gelu.m"], name="gelu.mul"),
        helper.make_node("Mul", ["gelu.m", "half"], ["gelu"], name="gelu.half"),
    ]
    nodes += linear("ffn.down", "gelu", ffn, hidden)
    nodes += [
        helper.make_node("Add", ["ln1", "ffn.down.out"], ["res2"], name="ffn.residual"),
        helper.make_node("LayerNormalization", ["res2", vec("ln2.scale", hidden, 1.0), vec("ln2.bias", hidden)],
                         ["y"], name="ln2", axis=-1, epsilon=1e-5),
    ]
    graph = helper.make_graph(
        nodes, "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, hidden])],
        inits,
    )
    return _model(graph)


class _Graph:
    """Collects nodes and initializers for the larger builders; a node's output is named after it."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []

    def const(self, name: str, array) -> str:
        self.inits.append(_const(name, np.asarray(array)))
        return name

    def normal(self, name: str, shape: tuple[int, ...], std: float, mean: float = 0.0) -> str:
        # float32 draws: BERT-base's 110M weights take about a second
        return self.const(name, self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
                          + np.float32(mean))

    def op(self, op_type: str, inputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def model(self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]):
        return _model(helper.make_graph(self.nodes, name, inputs, outputs, self.inits))


# --- CNNs (torchvision architectures) -------------------------------------------------------
#
# Conv (no bias) and BatchNormalization stay separate nodes. Weights are He-normal, and each
# BN's running statistics are those its input really has: the builders run the network in
# numpy on one seeded calibration image while they build it (a tensor is a (name, value)
# pair), and set running mean/var to the measured per-channel mean/var times a little noise.
# So activations stay O(1) through 50 layers, as in a trained network.

_Tensor = tuple[str, np.ndarray]


def _conv2d(x: np.ndarray, w: np.ndarray, stride: int, groups: int) -> np.ndarray:
    """NCHW convolution with "same" padding k//2; groups 1 or depthwise (groups == channels)."""
    k = w.shape[-1]
    xp = np.pad(x, ((0, 0), (0, 0), (k // 2, k // 2), (k // 2, k // 2)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    if groups == 1:
        return np.einsum("nchwij,ocij->nohw", win, w, optimize=True)
    return np.einsum("nchwij,cij->nchw", win, w[:, 0])


def _conv_bn(g: _Graph, x: _Tensor, prefix: str, bn: str, cout: int, k: int, stride: int = 1,
             groups: int = 1) -> _Tensor:
    cin = x[1].shape[1]
    w = g.rng.standard_normal((cout, cin // groups, k, k), dtype=np.float32) * np.float32(np.sqrt(2 / (cin // groups * k * k)))
    conv = g.op("Conv", [x[0], g.const(f"{prefix}.weight", w)], prefix, kernel_shape=[k, k],
                strides=[stride, stride], pads=[k // 2] * 4, group=groups)
    y = _conv2d(x[1], w, stride, groups)
    mean, var = y.mean(axis=(0, 2, 3)), y.var(axis=(0, 2, 3)) + 1e-3
    params = {"weight": g.rng.uniform(0.5, 1.5, cout), "bias": g.rng.normal(0, 0.1, cout),
              "running_mean": mean + g.rng.normal(0, 0.05, cout) * np.sqrt(var),
              "running_var": var * g.rng.uniform(0.9, 1.1, cout)}
    params = {key: value.astype(np.float32) for key, value in params.items()}
    names = [g.const(f"{bn}.{key}", value) for key, value in params.items()]
    value = ((y - params["running_mean"][:, None, None]) / np.sqrt(params["running_var"][:, None, None] + 1e-5)
             * params["weight"][:, None, None] + params["bias"][:, None, None])
    return g.op("BatchNormalization", [conv, *names], bn, epsilon=1e-5), value.astype(np.float32)


def _relu(g: _Graph, x: _Tensor, name: str) -> _Tensor:
    return g.op("Relu", [x[0]], name), np.maximum(x[1], 0)


def _add(g: _Graph, a: _Tensor, b: _Tensor, name: str) -> _Tensor:
    return g.op("Add", [a[0], b[0]], name), a[1] + b[1]


def _calibration_image(seed: int, size: int) -> _Tensor:
    return "image", np.random.default_rng(seed + 1).standard_normal((1, 3, size, size), dtype=np.float32)


def _classifier_model(g: _Graph, name: str, x: _Tensor, batch: int, size: int, classes: int) -> onnx.ModelProto:
    features = x[1].shape[1]
    g.op("GlobalAveragePool", [x[0]], "avgpool")
    g.op("Flatten", ["avgpool"], "flatten", axis=1)
    w = g.normal("fc.weight", (classes, features), 1 / np.sqrt(features))
    g.op("Gemm", ["flatten", w, g.normal("fc.bias", (classes,), 0.1)], "logits", transB=1)
    return g.model(name, [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, size, size])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])])


def _resnet(name: str, bottleneck: bool, blocks: tuple[int, ...], batch: int, size: int, classes: int,
            seed: int) -> onnx.ModelProto:
    g = _Graph(seed)
    x = _relu(g, _conv_bn(g, _calibration_image(seed, size), "conv1", "bn1", 64, 7, 2), "relu")
    pad = np.pad(x[1], ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    pooled = np.lib.stride_tricks.sliding_window_view(pad, (3, 3), axis=(2, 3))[:, :, ::2, ::2].max(axis=(4, 5))
    x = g.op("MaxPool", [x[0]], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), pooled
    expansion = 4 if bottleneck else 1
    for stage, (planes, count) in enumerate(zip((64, 128, 256, 512), blocks), start=1):
        for i in range(count):
            p, stride, cout = f"layer{stage}.{i}", (2 if stage > 1 and i == 0 else 1), planes * expansion
            if bottleneck:  # v1.5: the stride is on the 3x3 conv
                h = _relu(g, _conv_bn(g, x, f"{p}.conv1", f"{p}.bn1", planes, 1), f"{p}.relu1")
                h = _relu(g, _conv_bn(g, h, f"{p}.conv2", f"{p}.bn2", planes, 3, stride), f"{p}.relu2")
                h = _conv_bn(g, h, f"{p}.conv3", f"{p}.bn3", cout, 1)
            else:
                h = _relu(g, _conv_bn(g, x, f"{p}.conv1", f"{p}.bn1", planes, 3, stride), f"{p}.relu1")
                h = _conv_bn(g, h, f"{p}.conv2", f"{p}.bn2", cout, 3)
            identity = x
            if stride != 1 or x[1].shape[1] != cout:
                identity = _conv_bn(g, x, f"{p}.downsample.0", f"{p}.downsample.1", cout, 1, stride)
            x = _relu(g, _add(g, h, identity, f"{p}.add"), f"{p}.relu")
    return _classifier_model(g, name, x, batch, size, classes)


def resnet18(batch: int = 1, size: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """torchvision ResNet-18: BasicBlocks [2, 2, 2, 2], 1.8 GFLOP at 224x224."""
    return _resnet("resnet18", False, (2, 2, 2, 2), batch, size, classes, seed)


def resnet50(batch: int = 1, size: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """torchvision ResNet-50 v1.5: Bottlenecks [3, 4, 6, 3], 4.1 GFLOP at 224x224."""
    return _resnet("resnet50", True, (3, 4, 6, 3), batch, size, classes, seed)


def mobilenet_v2(batch: int = 1, size: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """torchvision MobileNetV2 (width 1.0): inverted residuals, depthwise convs, ReLU6 as Clip."""
    g = _Graph(seed)
    lo, hi = g.const("relu6.min", np.array(0.0, np.float32)), g.const("relu6.max", np.array(6.0, np.float32))

    def conv_bn_relu6(x: _Tensor, p: str, cout: int, k: int, stride: int = 1, groups: int = 1) -> _Tensor:
        name, value = _conv_bn(g, x, f"{p}.0", f"{p}.1", cout, k, stride, groups)
        return g.op("Clip", [name, lo, hi], f"{p}.2"), np.clip(value, 0, 6)

    x, idx = conv_bn_relu6(_calibration_image(seed, size), "features.0", 32, 3, 2), 1
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            p, stride, cin = f"features.{idx}.conv", (s if i == 0 else 1), x[1].shape[1]
            h, j = x, 0
            if t != 1:
                h, j = conv_bn_relu6(x, f"{p}.0", cin * t, 1), 1
            h = conv_bn_relu6(h, f"{p}.{j}", cin * t, 3, stride, groups=cin * t)
            h = _conv_bn(g, h, f"{p}.{j + 1}", f"{p}.{j + 2}", c, 1)  # linear bottleneck: no activation
            x = _add(g, x, h, f"features.{idx}.add") if stride == 1 and cin == c else h
            idx += 1
    x = conv_bn_relu6(x, f"features.{idx}", 1280, 1)
    return _classifier_model(g, "mobilenet_v2", x, batch, size, classes)


# --- BERT ------------------------------------------------------------------------------------

def bert(layers: int, hidden: int, heads: int, ffn: int, seq: int = 128, batch: int = 1, vocab: int = 30522,
         max_positions: int = 512, pooled: bool = True, seed: int = 0) -> onnx.ModelProto:
    """A BERT encoder as torch exports it (post-LN, Erf-GELU, additive -10000 mask).

    Inputs ``input_ids`` and ``attention_mask`` (int64 [batch, seq]); outputs
    ``last_hidden_state`` [batch, seq, hidden] and, with ``pooled``, ``pooler_output``
    [batch, hidden] (tanh(dense(first token))). Weights and biases ~ normal(0, 0.02), layer
    norm scales 1 + normal(0, 0.02) (biases are not zero, so that a dropped bias shows).
    """
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    g, d = _Graph(seed), hidden // heads
    std = 0.02

    def layer_norm(x: str, p: str) -> str:
        return g.op("LayerNormalization", [x, g.normal(f"{p}.weight", (hidden,), std, 1.0),
                                           g.normal(f"{p}.bias", (hidden,), std)], p, axis=-1, epsilon=1e-12)

    def linear(x: str, p: str, fan_in: int, fan_out: int) -> str:
        mm = g.op("MatMul", [x, g.normal(f"{p}.weight", (fan_in, fan_out), std)], f"{p}.matmul")
        return g.op("Add", [mm, g.normal(f"{p}.bias", (fan_out,), std)], p)

    split, merge = g.const("split_heads", [batch, seq, heads, d]), g.const("merge_heads", [batch, seq, hidden])
    one, half = g.const("one", np.array(1.0, np.float32)), g.const("half", np.array(0.5, np.float32))
    sqrt2, sqrt_d = g.const("sqrt2", np.array(np.sqrt(2), np.float32)), g.const("sqrt_d", np.array(np.sqrt(d), np.float32))

    e = "embeddings"
    words = g.op("Gather", [g.normal(f"{e}.word_embeddings.weight", (vocab, hidden), std), "input_ids"],
                 f"{e}.word_embeddings")
    positions = g.op("Gather", [g.normal(f"{e}.position_embeddings.weight", (max_positions, hidden), std),
                                g.const(f"{e}.position_ids", np.arange(seq, dtype=np.int64)[None])],
                     f"{e}.position_embeddings")
    types = g.op("Gather", [g.normal(f"{e}.token_type_embeddings.weight", (2, hidden), std),
                            g.const(f"{e}.token_type_ids", np.zeros((1, seq), np.int64))], f"{e}.token_type_embeddings")
    x = g.op("Add", [g.op("Add", [words, positions], f"{e}.add0"), types], f"{e}.add1")
    x = layer_norm(x, f"{e}.LayerNorm")

    mask = g.op("Cast", ["attention_mask"], "mask.float", to=TensorProto.FLOAT)
    mask = g.op("Sub", [one, mask], "mask.inverted")
    mask = g.op("Mul", [mask, g.const("mask.neg", np.array(-10000.0, np.float32))], "mask.additive")
    mask = g.op("Unsqueeze", [mask, g.const("mask.axes", np.array([1, 2], np.int64))], "mask")  # [b, 1, 1, seq]

    for i in range(layers):
        p = f"encoder.layer.{i}"
        heads_of = {}
        for proj, perm in (("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]), ("value", [0, 2, 1, 3])):
            h = g.op("Reshape", [linear(x, f"{p}.attention.self.{proj}", hidden, hidden), split],
                     f"{p}.attention.self.{proj}.split")
            heads_of[proj] = g.op("Transpose", [h], f"{p}.attention.self.{proj}.heads", perm=perm)
        a = f"{p}.attention.self"
        scores = g.op("MatMul", [heads_of["query"], heads_of["key"]], f"{a}.scores")
        scores = g.op("Add", [g.op("Div", [scores, sqrt_d], f"{a}.scaled"), mask], f"{a}.masked")
        probs = g.op("Softmax", [scores], f"{a}.probs", axis=-1)
        ctx = g.op("MatMul", [probs, heads_of["value"]], f"{a}.context")
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], f"{a}.context.t", perm=[0, 2, 1, 3]), merge],
                   f"{a}.context.merged")
        out = linear(ctx, f"{p}.attention.output.dense", hidden, hidden)
        x = layer_norm(g.op("Add", [out, x], f"{p}.attention.output.residual"), f"{p}.attention.output.LayerNorm")
        up = linear(x, f"{p}.intermediate.dense", hidden, ffn)
        gelu = g.op("Add", [g.op("Erf", [g.op("Div", [up, sqrt2], f"{p}.gelu.div")], f"{p}.gelu.erf"), one],
                    f"{p}.gelu.add")
        gelu = g.op("Mul", [g.op("Mul", [up, gelu], f"{p}.gelu.mul"), half], f"{p}.gelu")
        out = linear(gelu, f"{p}.output.dense", ffn, hidden)
        x = layer_norm(g.op("Add", [out, x], f"{p}.output.residual"), f"{p}.output.LayerNorm")
    g.op("Identity", [x], "last_hidden_state")
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [batch, seq, hidden])]
    if pooled:
        first = g.op("Gather", [x, g.const("first_token", np.array(0, np.int64))], "pooler.first_token", axis=1)
        g.op("Tanh", [linear(first, "pooler.dense", hidden, hidden)], "pooler_output")
        outputs.append(helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, [batch, hidden]))
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, [batch, seq]) for n in ("input_ids", "attention_mask")]
    return g.model(f"bert_{layers}l_{hidden}h", inputs, outputs)


def bert_base(seq: int = 128, batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072 (110M parameters, ~440 MB)."""
    return bert(12, 768, 12, 3072, seq, batch, seed=seed)


def bert_tiny(seq: int = 128, batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """BERT-tiny (google/bert_uncased_L-2_H-128_A-2 shape): 2 layers, hidden 128, 2 heads, FFN 512."""
    return bert(2, 128, 2, 512, seq, batch, seed=seed)


def call_overhead() -> onnx.ModelProto:
    """One Add of a 16-float vector: a runtime's fixed cost per call, next to nothing else."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"], name="add")], "call_overhead",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])],
        [_const("one", np.ones(16, np.float32))])
    return _model(graph)


def resnet50_b8() -> onnx.ModelProto:
    """ResNet-50 at batch 8: throughput (images/s = 8000 / ms)."""
    return resnet50(batch=8)


def _quantized(model: onnx.ModelProto, static: bool, samples: int = 8, reduce_range: bool = False) -> onnx.ModelProto:
    """``model`` through onnxruntime's quantization tool, as users deploy int8 on CPUs: static
    QDQ (int8 weights per channel, uint8 activations, ranges from ``samples`` inputs of
    ``sample_inputs``) or dynamic (int8 weights; activations quantized at run time); with
    ``reduce_range``, 7-bit weights (the tool's advice for x86 CPUs without VNNI, whose
    ``vpmaddubsw`` kernels then cannot saturate)."""
    import tempfile

    from onnxruntime import quantization as q

    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        onnx.save(model, Path(tmp) / "raw.onnx")
        # the tool's advice: shape inference, and BatchNorms folded into their convs first
        q.quant_pre_process(Path(tmp) / "raw.onnx", source)
        if not static:
            q.quantize_dynamic(source, target, weight_type=q.QuantType.QInt8)
            return onnx.load(target)

        class Samples(q.CalibrationDataReader):
            def __init__(self):
                self.left = [sample_inputs(model, seed=i) for i in range(samples)]

            def get_next(self):
                return self.left.pop() if self.left else None

        q.quantize_static(source, target, Samples(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                          reduce_range=reduce_range, activation_type=q.QuantType.QUInt8,
                          weight_type=q.QuantType.QInt8)
        return onnx.load(target)


def resnet50_int8() -> onnx.ModelProto:
    """ResNet-50, static QDQ int8 (onnxruntime.quantization, 8 random calibration images)."""
    return _quantized(resnet50(), static=True)


def resnet50_int8_rr() -> onnx.ModelProto:
    """ResNet-50, static QDQ int8 with ``reduce_range`` (7-bit weights)."""
    return _quantized(resnet50(), static=True, reduce_range=True)


def mobilenet_v2_int8() -> onnx.ModelProto:
    """MobileNetV2, static QDQ int8."""
    return _quantized(mobilenet_v2(), static=True)


def bert_base_int8() -> onnx.ModelProto:
    """BERT-base (seq 128), dynamic int8 quantization (MatMulInteger, DynamicQuantizeLinear)."""
    return _quantized(bert_base(), static=False)


# MODELS: the small models written by default (and by the test suite's fixture).
# ALL_MODELS adds the realistic ones, written only when named (or with "all").
MODELS: dict[str, Callable[[], onnx.ModelProto]] = {"mlp": mlp, "cnn": cnn, "transformer": transformer}
ALL_MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    **MODELS, "resnet18": resnet18, "resnet50": resnet50, "mobilenet_v2": mobilenet_v2,
    "bert_tiny": bert_tiny, "bert_base": bert_base, "call_overhead": call_overhead, "resnet50_b8": resnet50_b8,
    "resnet50_int8": resnet50_int8, "mobilenet_v2_int8": mobilenet_v2_int8, "bert_base_int8": bert_base_int8,
    "resnet50_int8_rr": resnet50_int8_rr}


def _vocab_size(model: onnx.ModelProto, ids: str) -> int | None:
    """Rows of the embedding table a Gather looks ``ids`` up in (None if there is none)."""
    dims = {t.name: t.dims for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] == ids and node.input[0] in dims:
            return int(dims[node.input[0]][0])
    return None


def sample_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs matching the model's (static) graph inputs.

    Floats are standard normal. Integer inputs that index an embedding table get valid ids;
    ``attention_mask`` gets ones with some trailing zeros (padding) per row; other integers
    are zeros.
    """
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for value in model.graph.input:
        if value.name in inits:
            continue
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        if dtype.kind == "f":
            out[value.name] = rng.standard_normal(shape).astype(dtype)
        elif "mask" in value.name and len(shape) == 2:
            seq = shape[1]
            lengths = seq - (seq // 4 + np.arange(shape[0]) % max(seq // 4, 1))  # 1/4 .. 1/2 padding
            out[value.name] = (np.arange(seq)[None, :] < np.maximum(lengths, 1)[:, None]).astype(dtype)
        elif (vocab := _vocab_size(model, value.name)) is not None:
            out[value.name] = rng.integers(0, vocab, shape).astype(dtype)
        else:
            out[value.name] = np.zeros(shape, dtype)
    return out


def write(name: str, out_dir: Path) -> tuple[Path, Path]:
    """Write ``<name>.onnx`` and ``<name>_inputs.npz`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model = ALL_MODELS[name]()
    model_path, inputs_path = out_dir / f"{name}.onnx", out_dir / f"{name}_inputs.npz"
    onnx.save(model, model_path)
    np.savez(inputs_path, **sample_inputs(model))
    return model_path, inputs_path


def main(argv: list[str]) -> int:
    if not argv or argv[0] in {"-h", "--help"}:
        print(__doc__.strip())
        return 0 if argv else 2
    names = argv[1:] or list(MODELS)
    if names == ["all"]:
        names = list(ALL_MODELS)
    unknown = [n for n in names if n not in ALL_MODELS]
    if unknown:
        print(f"unknown model(s): {', '.join(unknown)}; choose from {', '.join(ALL_MODELS)} (or all)",
              file=sys.stderr)
        return 2
    for name in names:
        model_path, inputs_path = write(name, Path(argv[0]))
        print(f"{name}: {model_path} {inputs_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
