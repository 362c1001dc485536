"""Models that once crashed ``hetc compile`` without a word (issue 31): transformers'
MobileBERT and Funnel (small configs, random weights), exported by the TorchScript exporter at
opset 17 with batch and seq symbolic, and a long chain of elementwise ops.

    python tests/crash_models.py OUT_DIR     # writes mobilebert.onnx, funnel.onnx, chain.onnx
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

IR_VERSION = 10  # onnxruntime refuses newer IR versions
SEQ = 16
DYNAMIC = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}


def _text_export(model, path: Path) -> Path:
    """Export a transformers text model taking (input_ids, attention_mask) -> last_hidden_state."""
    import torch

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask)[0]

    ids = torch.randint(0, model.config.vocab_size, (2, SEQ))
    mask = torch.ones(2, SEQ, dtype=torch.int64)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(Wrapper().eval(), (ids, mask), str(path), dynamo=False, opset_version=17,
                          input_names=["input_ids", "attention_mask"], output_names=["output_0"],
                          dynamic_axes=DYNAMIC)
    proto = onnx.load(str(path))
    proto.ir_version = min(proto.ir_version, IR_VERSION)
    onnx.save(proto, str(path))
    return path


def mobilebert(path: Path) -> Path:
    import torch
    from transformers import MobileBertConfig, MobileBertModel

    torch.manual_seed(0)
    config = MobileBertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=64, embedding_size=32, intra_bottleneck_size=32,
                              true_hidden_size=32, num_feedforward_networks=2, max_position_embeddings=128)
    return _text_export(MobileBertModel(config).eval(), path)


def funnel(path: Path) -> Path:
    import torch
    from transformers import FunnelConfig, FunnelModel

    torch.manual_seed(0)
    config = FunnelConfig(vocab_size=1000, block_sizes=[1, 1], d_model=64, n_head=4, d_head=16,
                          d_inner=128, max_position_embeddings=128)
    return _text_export(FunnelModel(config).eval(), path)


def text_inputs(batch: int, seq: int, vocab: int = 1000, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    if batch > 1:
        mask[1, seq // 2:] = 0  # padding in the second row
    return {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64), "attention_mask": mask}


def trigram(width: int = 4) -> onnx.ModelProto:
    """MobileBERT's trigram embedding in small: ``concat(x[:, 1:] padded, x, x[:, :-1] padded)``
    on the feature axis, a MatMul, then added to ``x`` (x[batch, seq, width]). The slices give
    ``min(9223372036854775807, seq) - min(1, seq) + 1`` where ``x`` has ``seq``: the shape that
    sent TVM's CanonicalizeBindings into endless recursion."""
    big = np.iinfo(np.int64).max
    ints = {"one": [1], "big": [big], "zero": [0], "minus1": [-1], "axis": [1],
            "pad_end": [0, 0, 0, 0, 1, 0], "pad_begin": [0, 1, 0, 0, 0, 0]}
    inits = [helper.make_tensor(k, TensorProto.INT64, [len(v)], v) for k, v in ints.items()]
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((3 * width, width)).astype(np.float32)
    inits.append(onnx.numpy_helper.from_array(weight, "w"))
    nodes = [
        helper.make_node("Slice", ["x", "one", "big", "axis"], ["tail"], name="tail"),
        helper.make_node("Pad", ["tail", "pad_end"], ["next"], name="next"),
        helper.make_node("Slice", ["x", "zero", "minus1", "axis"], ["head"], name="head"),
        helper.make_node("Pad", ["head", "pad_begin"], ["prev"], name="prev"),
        helper.make_node("Concat", ["next", "x", "prev"], ["tri"], name="concat", axis=2),
        helper.make_node("MatMul", ["tri", "w"], ["proj"], name="proj"),
        helper.make_node("Add", ["x", "proj"], ["y"], name="residual"),
    ]
    dims = ["batch", "seq", width]
    graph = helper.make_graph(nodes, "trigram", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


def chain(n: int, width: int = 8) -> onnx.ModelProto:
    """``n`` elementwise ops in a line (Add of a constant, Relu, Mul, alternating) on x[batch, width]."""
    nodes, inits, prev = [], [], "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        kind = ("Add", "Relu", "Mul")[i % 3]
        if kind == "Relu":
            nodes.append(helper.make_node("Relu", [prev], [out], name=f"n{i}"))
        else:
            step = 0.01 * (i % 7) - 0.02 if kind == "Add" else 1.0 + 0.001 * (i % 5)
            value = np.full((width,), step, np.float32)
            inits.append(helper.make_tensor(f"c{i}", TensorProto.FLOAT, [width], value))
            nodes.append(helper.make_node(kind, [prev, f"c{i}"], [out], name=f"n{i}"))
        prev = out
    dims = ["batch", width]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


def chain_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The chain computed by numpy, node by node."""
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    value = x
    for node in model.graph.node:
        if node.op_type == "Relu":
            value = np.maximum(value, 0)
        elif node.op_type == "Add":
            value = value + consts[node.input[1]]
        else:
            value = value * consts[node.input[1]]
    return value.astype(np.float32)


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    mobilebert(out / "mobilebert.onnx")
    funnel(out / "funnel.onnx")
    onnx.save(chain(5000), out / "chain.onnx")
    print("wrote", *sorted(p.name for p in out.glob("*.onnx")))
