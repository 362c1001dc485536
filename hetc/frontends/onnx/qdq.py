"""QDQ -> QLinearConv: the integer form of a quantized conv, as onnxruntime fuses it.

onnxruntime's quantization tool writes static int8 models in QDQ form: every Conv reads
``DequantizeLinear`` of a uint8 activation and of an int8 weight (and an int32 bias), and its
float result goes to one ``QuantizeLinear``. Computed literally, that is a float32 conv
between two rounding steps; onnxruntime runs it as ``QLinearConv``, an exact int32
accumulation requantized once. ``fuse_qdq`` rewrites the same groups into ``QLinearConv`` so
that hetc computes what onnxruntime computes (both requantize in float32; ResNet-50 int8's
outputs came out identical on 64 random images), and the CPU runs it with int8 kernels
(``hetc/backends/cpu/schedules/int8.py``).

A group is fused when: its input is ``DequantizeLinear(x: uint8, per-tensor constant scale and
zero point)``, its weight ``DequantizeLinear`` of an int8 initializer with zero zero points,
its bias (if any) ``DequantizeLinear`` of an int32 initializer whose scale is exactly
``x_scale * w_scale`` (float32, as the tool writes it) and zero point zero -- or all zero, at
any scale, and then dropped -- and its output goes only to one ``QuantizeLinear`` (uint8,
constant per-tensor parameters). Anything else is left as it is. A ``DequantizeLinear`` may
reach the conv through ``Identity`` nodes: torch's exporter shares one bias initializer among
convs whose folded BatchNorms are equal (all zero in a model with random weights,
transformers' ResNet) and routes it so. Grouped and depthwise convs are fused too (the CPU
runs a depthwise one as an exact float32 kernel on the uint8 input: ``backends/cpu/int8.py``),
and their outputs then equal onnxruntime's. A ``Gemm`` group (alpha = beta = 1, no transA: a classifier) becomes
a 1x1 ``QLinearConv`` between two reshapes, what onnxruntime runs as QGemm: the weight then
stays int8 (2 MB for ResNet-50's classifier instead of 8 MB of float32). ``DequantizeLinear``
nodes that no longer have consumers are removed.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import helper, numpy_helper

log = logging.getLogger(__name__)


def fuse_qdq(model: onnx.ModelProto) -> int:
    """Rewrite ``model``'s QDQ conv groups into QLinearConv in place; returns how many."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    outputs = {o.name for o in graph.output}

    def const(name: str) -> np.ndarray | None:
        return numpy_helper.to_array(inits[name]) if name in inits else None

    def dq(name: str):
        node = producer.get(name)
        while node is not None and node.op_type == "Identity" and node.domain in ("", "ai.onnx"):
            node = producer.get(node.input[0])  # exporters route shared initializers through Identity
        return node if node is not None and node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx") else None

    def params(node, want: str):
        """(data name, scale, zero point) of a Q/DQ node with constant float32 scale and a
        zero point of dtype ``want`` (None if absent)."""
        scale = const(node.input[1])
        zp = const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if scale is None or scale.dtype != np.float32 or (len(node.input) > 2 and node.input[2] and zp is None):
            return None
        if zp is not None and zp.dtype != np.dtype(want):
            return None
        return node.input[0], scale, zp

    fused = []
    for conv in list(graph.node):
        if conv.op_type not in ("Conv", "Gemm") or conv.domain not in ("", "ai.onnx") or len(conv.input) < 2:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
        gemm = conv.op_type == "Gemm"
        if gemm and (attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0 or attrs.get("transA", 0)):
            continue
        if conv.output[0] in outputs:
            continue
        users = consumers.get(conv.output[0], [])
        if len(users) != 1 or users[0].op_type != "QuantizeLinear":
            continue
        q = users[0]
        dx, dw = dq(conv.input[0]), dq(conv.input[1])
        db = dq(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
        if dx is None or dw is None or (len(conv.input) > 2 and conv.input[2] and db is None):
            continue
        px, pw, py = params(dx, "uint8"), params(dw, "int8"), params(q, "uint8")
        if px is None or pw is None or py is None or px[1].size != 1 or py[1].size != 1 or py[2] is None:
            continue
        if px[2] is None or px[2].size != 1:
            continue
        w = const(pw[0])
        if w is None or w.dtype != np.int8 or (pw[2] is not None and np.any(pw[2])) or (gemm and w.ndim != 2):
            continue
        out_axis = 1 if gemm and not attrs.get("transB", 0) else 0  # the weight's output-channel axis
        if pw[1].size != 1 and not (pw[1].ndim == 1 and pw[1].size == w.shape[out_axis]
                                    and _attr(dw, "axis", 1) == out_axis):
            continue
        inputs = [px[0], dx.input[1], dx.input[2], pw[0], dw.input[1], _zero_point(graph, inits, dw, pw),
                  q.input[1], q.input[2]]
        if db is not None:
            pb = params(db, "int32")
            bias = const(pb[0]) if pb is not None else None
            if bias is None or bias.dtype != np.int32 or (pb[2] is not None and np.any(pb[2])):
                continue
            if np.any(bias):  # a zero bias adds nothing at any scale: the group fuses without it
                if not _same(pb[1], px[1].reshape(()) * pw[1]):
                    continue
                inputs.append(pb[0])
        name = conv.name or q.name
        if gemm:
            nodes = _gemm_as_conv(graph, inits, inputs, w if out_axis == 0 else w.T, q.output[0], name)
        else:
            nodes = [helper.make_node("QLinearConv", inputs, [q.output[0]], name=name, **attrs)]
        at = list(graph.node).index(conv)
        for k, node in enumerate(nodes):
            graph.node.insert(at + k, node)
        graph.node.remove(conv)
        graph.node.remove(q)
        fused.append(name)
    if fused:
        _drop_dead_dequantize(graph)
        log.info("fused %d QDQ conv groups into QLinearConv", len(fused))
    return len(fused)


def _gemm_as_conv(graph, inits: dict, inputs: list[str], w_nk: np.ndarray, output: str, name: str) -> list:
    """A quantized ``Gemm`` (x: [M, K], weight [N, K] after transB) as a 1x1 ``QLinearConv``
    on ``x`` reshaped to [M, K, 1, 1], reshaped back to [M, N]: the same int32 products and
    requantization (onnxruntime runs it as QGemm), on the int8 kernels. ``inputs``: the
    QLinearConv inputs, whose weight is replaced by ``w_nk`` as [N, K, 1, 1]."""
    n, k = w_nk.shape

    def constant(suffix: str, value: np.ndarray) -> str:
        key = f"{output}_hetc_{suffix}"  # the output's name is unique in the graph; a node's may be empty
        inits[key] = numpy_helper.from_array(value, key)
        graph.initializer.append(inits[key])
        return key

    inputs = list(inputs)
    inputs[3] = constant("weight", np.ascontiguousarray(w_nk).reshape(n, k, 1, 1))
    x4, y4 = f"{output}_hetc_x4", f"{output}_hetc_y4"
    return [helper.make_node("Reshape", [inputs[0], constant("x_shape", np.array([-1, k, 1, 1], np.int64))], [x4],
                             name=f"{output}_hetc_reshape_x"),
            helper.make_node("QLinearConv", [x4, *inputs[1:]], [y4], name=name),
            helper.make_node("Reshape", [y4, constant("y_shape", np.array([-1, n], np.int64))], [output],
                             name=f"{output}_hetc_reshape_y")]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal float32 values, a scalar standing for any number of equal ones."""
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        return False
    return bool(np.array_equal(np.broadcast_to(a, shape), np.broadcast_to(b.astype(np.float32), shape)))


def _attr(node, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _zero_point(graph, inits: dict, dw, pw) -> str:
    """The weight's zero point input: its own (all zeros), or a new int8 zero (QLinearConv needs one)."""
    if pw[2] is not None:
        return dw.input[2]
    name = "hetc_qdq_int8_zero"
    if name not in inits:
        inits[name] = numpy_helper.from_array(np.zeros((), np.int8), name)
        graph.initializer.append(inits[name])
    return name


def _drop_dead_dequantize(graph) -> None:
    """Remove DequantizeLinear nodes (repeatedly) whose outputs nothing reads."""
    while True:
        used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        dead = [n for n in graph.node if n.op_type == "DequantizeLinear" and not any(o in used for o in n.output)]
        if not dead:
            return
        for n in dead:
            graph.node.remove(n)
