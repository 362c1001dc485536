"""Small ONNX models hetc builds itself: no downloads, no torch.

Each builder returns an ``onnx.ModelProto`` with fixed-seed weights and an IR version
onnxruntime accepts. Run as a script to write the models and matching sample inputs::

    python examples/models.py OUT_DIR            # all models
    python examples/models.py OUT_DIR cnn mlp    # some of them

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


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {"mlp": mlp, "cnn": cnn, "transformer": transformer}


def sample_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs matching the model's (static) graph inputs."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for value in model.graph.input:
        if value.name in inits:
            continue
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        out[value.name] = rng.standard_normal(shape).astype(dtype)
    return out


def write(name: str, out_dir: Path) -> tuple[Path, Path]:
    """Write ``<name>.onnx`` and ``<name>_inputs.npz`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model = MODELS[name]()
    model_path, inputs_path = out_dir / f"{name}.onnx", out_dir / f"{name}_inputs.npz"
    onnx.save(model, model_path)
    np.savez(inputs_path, **sample_inputs(model))
    return model_path, inputs_path


def main(argv: list[str]) -> int:
    if not argv or argv[0] in {"-h", "--help"}:
        print(__doc__.strip())
        return 0 if argv else 2
    names = argv[1:] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"unknown model(s): {', '.join(unknown)}; choose from {', '.join(MODELS)}", file=sys.stderr)
        return 2
    for name in names:
        model_path, inputs_path = write(name, Path(argv[0]))
        print(f"{name}: {model_path} {inputs_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
