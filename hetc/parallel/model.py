"""The model as the parallel planner sees it: a sequence of layers, each with its parameters,
forward FLOPs, activation bytes per sample and how tensor parallelism shards it.

Two builders:

- ``transformer(config)``: a GPT-style decoder or BERT-style encoder stack (``PRESETS``, or a
  spec ``gpt:layers=24,hidden=2048,heads=16,seq=2048,vocab=50257``; see ``parse_model``).
  Layers: the embedding, then per block an attention layer (layer norm, QKV, attention,
  output projection) and an MLP layer (layer norm, fc1, GeLU, fc2), then (GPT) the final layer
  norm, and the LM head. Per block and sample (s sequence length, h hidden, a heads, f FFN
  width, w bytes per value): 24 s h^2 + 4 s^2 h forward FLOPs and 12 h^2 + 13 h parameters
  (f = 4h; Narayanan et al., "Efficient large-scale language model training on GPU clusters
  using Megatron-LM", SC 2021, appendix). Activations kept for the backward pass follow
  Korthikanti et al., "Reducing activation recomputation in large transformer models" (2022),
  section 4.1, generalised to w and f: 34 s h + 5 a s^2 bytes per block at w = 2, f = 4h, of
  which 10 s h (layer-norm inputs, the inputs of QKV and fc1, the dropout masks) are kept whole
  by every tensor-parallel rank and the rest is split t ways. By default the a s^2 attention
  scores are not kept (FlashAttention, Dao et al. 2022, keeps only 4 a s bytes of softmax
  statistics; the same as Megatron's selective recomputation); ``scores=1`` keeps them.
- ``from_onnx(path)``: one layer per op of the model's op graph (``hetc inspect``), in
  topological order; a matmul by a constant weight is column-parallel, everything else
  replicated. A "sample" is one run of the model at its own input shapes.

Tensor parallelism (Shoeybi et al., "Megatron-LM", 2019, section 3; ``SHARDINGS``): the
attention layer splits by heads (QKV column-parallel, output projection row-parallel), the MLP
by columns then rows, so each ends in one all-reduce of its b s h output in the forward pass
and one of its input gradient in the backward pass; the embedding is split over the vocabulary
(one all-reduce forward), the LM head too (logits stay split: the parallel cross-entropy needs
only per-token scalars; its input gradient is all-reduced backward). GPT ties the LM head to the
embedding; the head's stage keeps its own copy (as Megatron-LM does with pipeline stages), so
the layers count those parameters twice (``Model.tied_params``).

To add a preset, add a ``TransformerConfig`` to ``PRESETS``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from ..errors import HetcError, UsageError

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
DTYPE_ALIASES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "half": "float16"}


@dataclass(frozen=True)
class Sharding:
    """How a layer splits over t tensor-parallel ranks."""

    split: bool  # parameters, FLOPs and activation_bytes divide by t
    forward: tuple[str, ...]  # collectives (``collectives.COLLECTIVES``) of tp_bytes in the forward pass
    backward: tuple[str, ...]  # ... and in the backward pass


_MEGATRON = Sharding(True, ("all-reduce",), ("all-reduce",))  # Megatron's g and f operators

SHARDINGS = {
    "replicated": Sharding(False, (), ()),  # every rank computes it whole
    "column-row": _MEGATRON,  # a whole block as one layer (the presets)
    "vocab-embedding": Sharding(True, ("all-reduce",), ()),
    "vocab-head": Sharding(True, (), ("all-reduce",)),
    "split": Sharding(True, (), ()),  # inside an ONNX model's block: column projections, attention by heads
    "row": _MEGATRON,  # an ONNX model's block, op by op: its row projection carries the block's collectives
}


@dataclass(frozen=True)
class Layer:
    name: str
    kind: str  # embedding, attention, mlp, norm, head; the Relax op for ONNX models
    params: int
    flops: float  # forward, per sample
    activation_bytes: float  # per sample, kept for the backward pass (divided by t when split)
    output_bytes: float  # per sample, sent to the next stage when a stage ends here
    tp: str = "replicated"  # key of SHARDINGS
    replicated_activation_bytes: float = 0.0  # per sample, kept whole by every tensor-parallel rank
    tp_bytes: float = 0.0  # per sample, the payload of each tensor-parallel collective

    @property
    def sharding(self) -> Sharding:
        return SHARDINGS[self.tp]

    def share(self, t: int) -> int:
        """What this layer's split quantities divide by at tensor-parallel degree t."""
        return t if self.sharding.split else 1


@dataclass(frozen=True)
class Model:
    name: str
    layers: tuple[Layer, ...]
    dtype: str  # of weights and activations
    heads: int | None = None  # tensor-parallel degrees must divide it (None: no constraint)
    tied_params: int = 0  # counted twice in the layers (a tied LM head's copy)

    @property
    def weight_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 4)

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers) - self.tied_params

    @property
    def flops(self) -> float:
        return sum(layer.flops for layer in self.layers)


@dataclass(frozen=True)
class TransformerConfig:
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    ffn: int = 0  # 0: 4 x hidden
    encoder: bool = False  # BERT-style (no final norm; MLM head with a dense transform)
    dtype: str = "bfloat16"
    scores: bool = False  # keep the a s^2 attention scores for the backward pass (no FlashAttention)


PRESETS = {
    "gpt2-xl": TransformerConfig(48, 1600, 25, 1024, 50257),  # 1.56B
    "gpt3-13b": TransformerConfig(40, 5120, 40, 2048, 50257),  # 12.9B; 40 heads x 128 (Megatron-LM's)
    "gpt3-175b": TransformerConfig(96, 12288, 96, 2048, 50257),  # 174.6B
    "bert-base": TransformerConfig(12, 768, 12, 512, 30522, encoder=True),  # 110M
    "bert-large": TransformerConfig(24, 1024, 16, 512, 30522, encoder=True),  # 335M
}


def transformer(config: TransformerConfig, name: str = "transformer") -> Model:
    c = config
    s, h, a, v = c.seq, c.hidden, c.heads, c.vocab
    f, w = c.ffn or 4 * h, DTYPE_BYTES[c.dtype]
    sh = s * h
    scores = a * s * s * (2 * w + 1) if c.scores else 4 * a * s  # softmax out + dropout mask + out, or stats
    embedding = v * h + s * h + (4 * h if c.encoder else 0)  # words, positions (+ BERT's types, norm)
    layers = [Layer("embedding", "embedding", embedding, 3 * sh, 0.0, sh * w, "vocab-embedding",
                    replicated_activation_bytes=sh, tp_bytes=sh * w)]
    for i in range(c.layers):
        layers.append(Layer(f"block.{i}.attention", "attention", 4 * h * h + 6 * h, 8 * sh * h + 4 * s * sh,
                            4 * sh * w + scores, sh * w, "column-row",
                            replicated_activation_bytes=2 * sh * w + sh, tp_bytes=sh * w))
        layers.append(Layer(f"block.{i}.mlp", "mlp", 2 * h * f + f + 3 * h, 4 * sh * f,
                            2 * s * f * w, sh * w, "column-row",
                            replicated_activation_bytes=2 * sh * w + sh, tp_bytes=sh * w))
    if c.encoder:  # MLM head: dense h x h, GeLU, layer norm, then the (tied) decoder
        head_params, head_flops = v * h + v + h * h + 3 * h, 2 * sh * h + 2 * sh * v
    else:
        layers.append(Layer("final_norm", "norm", 2 * h, 8 * sh, 0.0, sh * w,
                            replicated_activation_bytes=sh * w))
        head_params, head_flops = v * h, 2 * sh * v
    # logits kept in float32 for the loss, split over the vocabulary; the input is kept whole
    layers.append(Layer("lm_head", "head", head_params, head_flops, 4 * s * v, s * v * w, "vocab-head",
                        replicated_activation_bytes=sh * w, tp_bytes=sh * w))
    return Model(name, tuple(layers), c.dtype, a, tied_params=v * h)


_SPEC_HELP = "e.g. gpt3-13b, gpt3-13b:seq=1024 or gpt:layers=24,hidden=2048,heads=16,seq=2048,vocab=50257"


def parse_model(text: str, seq: int | None = None) -> Model:
    """A preset (``PRESETS``) or ``gpt:``/``bert:`` spec, with ``key=value`` overrides of
    ``TransformerConfig`` fields (``dtype=fp32``, ``scores=1``); ``seq`` overrides the
    sequence length."""
    name, _, rest = text.partition(":")
    name = name.strip().lower()
    if name in PRESETS:
        config = PRESETS[name]
    elif name in ("gpt", "bert"):
        defaults = {"gpt": (2048, 50257), "bert": (512, 30522)}[name]
        config = TransformerConfig(0, 0, 0, *defaults, encoder=name == "bert")
    else:
        raise UsageError(f"unknown model '{text}': not a file, a preset ({', '.join(PRESETS)}) "
                         f"or a gpt:/bert: spec ({_SPEC_HELP})")
    keys = {f.name for f in fields(TransformerConfig)} - {"encoder"}
    changes: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key not in keys:
            raise UsageError(f"model spec {text!r}: bad item {item!r}; keys: {', '.join(sorted(keys))}")
        changes[key] = _spec_value(text, key, value)
    if seq is not None:
        changes["seq"] = seq
    config = replace(config, **changes)
    for key in ("layers", "hidden", "heads", "seq", "vocab"):
        if getattr(config, key) < 1:
            raise UsageError(f"model spec {text!r}: {key} must be given and at least 1 ({_SPEC_HELP})")
    if config.hidden % config.heads:
        raise UsageError(f"model spec {text!r}: hidden {config.hidden} is not a multiple of "
                         f"heads {config.heads}")
    label = text if name in PRESETS else f"{name}-{config.layers}x{config.hidden}"
    return transformer(config, label if seq is None else f"{label}, seq {seq}")


def _spec_value(text: str, key: str, value: str) -> object:
    if key == "dtype":
        dtype = DTYPE_ALIASES.get(value.lower(), value.lower())
        if dtype not in DTYPE_BYTES:
            raise UsageError(f"model spec {text!r}: dtype {value!r}; choose from {', '.join(DTYPE_BYTES)}")
        return dtype
    try:
        number = int(value)
    except ValueError:
        raise UsageError(f"model spec {text!r}: {key}={value!r} is not an integer") from None
    return bool(number) if key == "scores" else number


def load_model(text: str, seq: int | None = None, plan_shape: dict[str, int] | None = None) -> Model:
    """The MODEL argument of ``hetc parallel plan``: an ONNX file (its symbolic dims costed at
    ``plan_shape``), or a preset / spec."""
    path = Path(text)
    if path.is_file():
        if seq is not None:
            raise UsageError("--seq applies to presets and gpt:/bert: specs; an ONNX model has its "
                             "own shapes (size its symbolic dims with --plan-shape DIM=SIZE)")
        return from_onnx(path, plan_shape)
    if plan_shape:
        raise UsageError("--plan-shape sizes an ONNX model's symbolic dims; presets and specs take --seq")
    if path.suffix.lower() == ".onnx":
        raise UsageError(f"{text}: no such file")
    return parse_model(text, seq)


def from_onnx(path: Path, plan_shape: dict[str, int] | None = None) -> Model:
    """One layer per op of the model's op graph after hetc's graph passes (what ``hetc
    compile --tp`` shards), in topological order (constant-folded ops become their consumers'
    weights). Tensor parallelism is the compiler's own Megatron plan (``megatron.py``): the
    ops of each block are ``split`` and its row projection carries the block's all-reduce;
    the rest is replicated; ``heads`` is the largest power-of-two degree that keeps every
    block. A layer's ``output_bytes`` is everything live across a cut after it (its result,
    and earlier results read further on, e.g. residuals). Symbolic dims are costed at
    ``plan_shape`` (default 1 each)."""
    from ..frontends.onnx import load_model as load_onnx
    from ..frontends.onnx import to_relax
    from ..graph import build_opgraph
    from ..passes import run_pipeline
    from ..passes.phases import inference_passes, simplify_passes
    from ..placement.cost import folded_nodes
    from .megatron import megatron_plan
    from .projections import split_fused_projections

    sizes = dict(plan_shape or {})
    try:
        loaded = load_onnx(path, {}, None, None)
        if any(isinstance(d, str) for spec in loaded.inputs for d in spec.shape):  # bind them: static shapes
            static = {spec.name: [sizes.get(d, 1) if isinstance(d, str) else d for d in spec.shape]
                      for spec in loaded.inputs}
            loaded = load_onnx(loaded.proto, static, None, None)  # the model already read, not the file again
        mod, _ = run_pipeline(to_relax(loaded), inference_passes() + simplify_passes())
        mod, _ = split_fused_projections(mod)
        graph = build_opgraph(mod)
    except HetcError as err:
        raise UsageError(f"{path}: no op graph to plan ({err})") from None
    plan, heads = megatron_plan(mod["main"], 2), None
    if plan.blocks:
        heads = 2
        while heads < 1024 and len(megatron_plan(mod["main"], heads * 2).blocks) == len(plan.blocks):
            heads *= 2
    folded = folded_nodes(graph)
    nodes = [node for node in graph.nodes if node.id not in folded]
    position = {node.id: i for i, node in enumerate(nodes)}
    weights = {node.id: node.weight_bytes for node in nodes}
    last_use: dict[int, int] = {}  # producer -> position of its last consumer
    for node in nodes:
        for pred in dict.fromkeys(node.preds):
            if pred in folded:
                weights[node.id] += graph.nodes[pred].bytes_out
            else:
                last_use[pred] = position[node.id]
    live = np.zeros(len(nodes) + 1)  # after the cumsum, live[i]: bytes crossing a cut after layer i
    for pred, last in last_use.items():
        live[position[pred]] += graph.nodes[pred].bytes_out
        live[last] -= graph.nodes[pred].bytes_out
    live = np.cumsum(live)
    layers = []
    for i, node in enumerate(nodes):
        dtype = node.outputs[0].dtype if node.outputs else "float32"
        itemsize = np.dtype(dtype).itemsize
        tp = "row" if node.name in plan.row_values else "split" if node.name in plan.split_values else "replicated"
        layers.append(Layer(node.name, node.op.removeprefix("relax."), weights[node.id] // itemsize,
                            float(node.flops), float(node.bytes_out), float(live[i]), tp,
                            tp_bytes=float(node.bytes_out)))
    dtypes = Counter(t.dtype for node in nodes for t in node.outputs if t.dtype in DTYPE_BYTES)
    dtype = dtypes.most_common(1)[0][0] if dtypes else "float32"
    return Model(path.stem, tuple(layers), dtype, heads=heads)
