"""Transformers models with symbolic dims, exported to ONNX with random weights (no downloads).

    python examples/hf_models.py OUT_DIR [bert-base|bert-tiny|gpt2-124m|gpt2-tiny]

writes ``OUT_DIR/<name>.onnx``: a ``transformers`` BertModel built from a config (seeded random
weights), exported by ``torch.onnx.export`` (TorchScript exporter, opset 17) with inputs
``input_ids`` and ``attention_mask`` of shape ``[batch, seq]`` and outputs
``last_hidden_state [batch, seq, hidden]`` and ``pooler_output [batch, hidden]``: the graph
computes its shapes at run time (``Shape -> Gather -> Concat``, masks from ``Range``), as
exported models do.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

OPSET = 17
IR_VERSION = 10  # onnxruntime refuses IR versions newer than it knows

# name -> BertConfig arguments
BERT_CONFIGS = {
    "bert-base": {},  # 12 layers, hidden 768, 12 heads, seq up to 512
    "bert-tiny": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 256,
                  "vocab_size": 1000},
}


def export_bert(path: Path, config: str | dict = "bert-tiny", seed: int = 0) -> Path:
    """Export a random-weight BertModel with symbolic ``batch`` and ``seq`` to ``path``."""
    import onnx
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    args = BERT_CONFIGS[config] if isinstance(config, str) else config
    model = BertModel(BertConfig(**args)).eval()

    class Wrapper(torch.nn.Module):  # transformers 5 takes these by keyword only
        def __init__(self, bert) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    ids = torch.randint(0, model.config.vocab_size, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    dims = {0: "batch", 1: "seq"}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter is deprecated but works offline
        torch.onnx.export(Wrapper(model), (ids, mask), str(path), dynamo=False, opset_version=OPSET,
                          input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state", "pooler_output"],
                          dynamic_axes={"input_ids": dims, "attention_mask": dims,
                                        "last_hidden_state": dims, "pooler_output": {0: "batch"}})
    proto = onnx.load(str(path))
    proto.ir_version = min(proto.ir_version, IR_VERSION)
    onnx.save(proto, str(path))
    return path


# name -> GPT2Config arguments
GPT2_CONFIGS = {
    "gpt2-124m": {},  # 12 layers, hidden 768, 12 heads, vocab 50257, 1024 positions
    # initializer_range 0.2 (default 0.02): with near-uniform logits a 2-layer model repeats one
    # token forever, which would make a token-for-token comparison weak
    "gpt2-tiny": {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 1000, "n_positions": 512,
                  "bos_token_id": 0, "eos_token_id": 0, "initializer_range": 0.2},
}


def gpt2_cache_names(layers: int) -> tuple[list[str], list[str]]:
    """The past inputs and present outputs, in order: ``past_key_values.{i}.key``, ``.value``, ..."""
    past = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    return past, [name.replace("past_key_values", "present") for name in past]


def export_gpt2(path: Path, config: str | dict = "gpt2-tiny", seed: int = 0, position_ids: bool = False,
                attention: str = "eager") -> Path:
    """Export a random-weight GPT2LMHeadModel with its KV cache to ``path`` (opset 17).

    Inputs: ``input_ids [batch, seq]`` (int64), ``attention_mask [batch, total_seq]`` (int64,
    1 = attend; ``total_seq`` = ``past_seq + seq``), with ``position_ids`` also ``position_ids
    [batch, seq]``, and per layer ``past_key_values.{i}.key`` / ``.value`` ``[batch, heads,
    past_seq, head_dim]``. Outputs: ``logits [batch, seq, vocab]`` and ``present.{i}.key`` /
    ``.value`` ``[batch, heads, total_seq, head_dim]`` (the past with this call's keys/values
    appended). Without ``position_ids`` positions continue from ``past_seq``. ``past_seq`` = 0
    (empty past tensors) is the prompt, so one model serves prefill and decode. ``attention`` is
    transformers' implementation: "eager" (plain MatMul/Softmax) or "sdpa" (exported decomposed,
    queries and keys each scaled by the root of the scale, as optimum's exports are)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    args = GPT2_CONFIGS[config] if isinstance(config, str) else config
    import torch

    torch.manual_seed(seed)
    return export_decoder(path, GPT2LMHeadModel(GPT2Config(**args, attn_implementation=attention)).eval(), position_ids)


# name -> LlamaConfig arguments (grouped-query attention: fewer key/value heads than heads)
LLAMA_CONFIGS = {
    # 12 layers, hidden 768, 12 heads / 4 key-value heads, vocab 32000: 134M parameters
    "llama-134m": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "num_key_value_heads": 4,
                   "intermediate_size": 2048, "vocab_size": 32000, "max_position_embeddings": 4096},
    "llama-tiny": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 512,
                   "initializer_range": 0.2},
}


def llama_model(config: str | dict = "llama-tiny", seed: int = 0):
    """A random-weight LlamaForCausalLM (RoPE, grouped-query attention, SiLU MLP), eval mode:
    the same weights for the same ``config`` and ``seed``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    args = LLAMA_CONFIGS[config] if isinstance(config, str) else config
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**args, attn_implementation="eager")).eval()


def export_llama(path: Path, config: str | dict = "llama-tiny", seed: int = 0) -> Path:
    """Export ``llama_model(config, seed)`` with its KV cache to ``path``: the inputs and outputs
    of ``export_gpt2`` with ``position_ids``, the cache ``[batch, kv_heads, past_seq, head_dim]``."""
    return export_decoder(path, llama_model(config, seed), True)


def export_genai(out: Path, config: str | dict = "llama-tiny", seed: int = 0, threads: int = 0) -> Path:
    """``llama_model(config, seed)`` built for onnxruntime-genai, the runtime onnxruntime ships
    for generation (its graph: GroupQueryAttention over a cache of the whole context updated in
    place, ``past_present_share_buffer``), by genai's own model builder
    (``onnxruntime_genai.models.builder``, float32, CPU) from a transformers checkpoint saved in
    ``out/hf`` with a word-level tokenizer of one token per id (the builder wants one; token ids
    go in and out as they are). ``threads`` (0: onnxruntime's default) goes into its session
    options. Returns the model folder ``out/genai`` (``onnxruntime_genai.Model(path)``).
    Raises RuntimeError with the builder's last lines if it fails."""
    import json
    import subprocess

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    out = Path(out)
    checkpoint, built = out / "hf", out / "genai"
    model = llama_model(config, seed)
    model.save_pretrained(checkpoint)
    vocab = {f"t{i}": i for i in range(model.config.vocab_size)}
    words = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="t0", bos_token="t1", eos_token="t2") \
        .save_pretrained(checkpoint)
    done = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint),
                           "-o", str(built), "-p", "fp32", "-e", "cpu", "-c", str(out / "cache")],
                          check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError("onnxruntime-genai's model builder failed: "
                           + " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:]))
    settings = built / "genai_config.json"
    genai = json.loads(settings.read_text())
    if threads:
        genai["model"]["decoder"]["session_options"]["intra_op_num_threads"] = threads
    settings.write_text(json.dumps(genai, indent=4))
    return built


def export_merged_llama(path: Path, config: str | dict = "llama-tiny", seed: int = 0) -> Path:
    """``llama_model(config, seed)`` as optimum's merged decoder: one ``If`` on a boolean input
    ``use_cache_branch`` between the decoder without a past (else) and the one with it (then),
    built here from two ``export_decoder`` exports as optimum's post-processing merges its two
    (``optimum-onnx`` pins an older transformers). Also as optimum does, the inputs are declared
    as the no-past decoder's: ``attention_mask [batch_size, sequence_length]``, which with a past
    is longer; the presents ``[batch_size, kv_heads, past_sequence_length + sequence_length,
    head_dim]``. Each branch's initializers sit in the outer graph, prefixed by the branch."""
    import tempfile

    import onnx
    from onnx import helper

    model = llama_model(config, seed)
    with tempfile.TemporaryDirectory() as tmp:
        branches = {name: onnx.load(str(export_decoder(Path(tmp) / f"{name}.onnx", model, True, with_past=past)))
                    for name, past in (("with_past", True), ("no_past", False))}
    outer = branches["with_past"].graph
    initializers, graphs = [], {}
    for name, proto in branches.items():
        graph = proto.graph
        local = {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output}

        def renamed(value: str, name=name, local=local) -> str:
            return f"{name}/{value}" if value in local else value

        for tensor in graph.initializer:
            tensor.name = renamed(tensor.name)
            initializers.append(tensor)
        nodes = []
        for node in graph.node:
            node.input[:] = [renamed(v) for v in node.input]
            node.output[:] = [renamed(v) for v in node.output]
            node.name = f"{name}/{node.name}"
            nodes.append(node)
        outputs = [helper.make_value_info(renamed(o.name), onnx.TypeProto(tensor_type=onnx.TypeProto.Tensor(
            elem_type=o.type.tensor_type.elem_type))) for o in graph.output]
        graphs[name] = helper.make_graph(nodes, name, [], outputs)

    def declared(value, dims):
        return helper.make_tensor_value_info(value.name, value.type.tensor_type.elem_type, dims)

    heads, head_dim = decoder_cache_shape(model.config)
    names = {"batch": "batch_size", "seq": "sequence_length", "past_seq": "past_sequence_length",
             "total_seq": "past_sequence_length + sequence_length"}
    graph_inputs = [declared(v, ["batch_size", "sequence_length"]) for v in outer.input if v.name in
                    ("input_ids", "attention_mask", "position_ids")]
    graph_inputs += [declared(v, ["batch_size", heads, "past_sequence_length", head_dim]) for v in outer.input
                     if v.name not in ("input_ids", "attention_mask", "position_ids")]
    graph_inputs.append(helper.make_tensor_value_info("use_cache_branch", onnx.TensorProto.BOOL, [1]))
    graph_outputs = [declared(o, [names.get(d.dim_param, d.dim_param) or d.dim_value
                                  for d in o.type.tensor_type.shape.dim]) for o in outer.output]
    node = helper.make_node("If", ["use_cache_branch"], [o.name for o in outer.output], name="optimum::if",
                            then_branch=graphs["with_past"], else_branch=graphs["no_past"])
    merged = helper.make_model(helper.make_graph([node], "merged", graph_inputs, graph_outputs, initializers),
                               opset_imports=branches["with_past"].opset_import)
    merged.ir_version = branches["with_past"].ir_version
    path = Path(path)
    onnx.save(merged, str(path))
    return path


def genai_generate(model, prompt, new: int):
    """Greedy decoding with onnxruntime-genai: ``prompt`` ``[batch, len]`` token ids, ``new`` tokens
    each (end-of-sequence does not stop it: ``min_length``); ``[batch, len + new]`` as
    ``hetc.generate`` returns. ``model``: an ``onnxruntime_genai.Model``."""
    import numpy as np
    import onnxruntime_genai as og

    batch, length = prompt.shape
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=length + new, min_length=length + new, do_sample=False, batch_size=batch)
    generator = og.Generator(model, params)
    generator.append_tokens(np.ascontiguousarray(prompt, np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    return np.stack([np.asarray(generator.get_sequence(row), np.int64) for row in range(batch)])


def train_byte_gpt2(steps: int = 300, seed: int = 0, log=None):
    """A small GPT-2 (4 layers, hidden 192, 6 heads, 512 positions) trained on bytes of Python's
    own standard library source (no download: the files ship with the interpreter), ``steps``
    AdamW steps of 16 x 128 bytes: a trained model whose logits have a trained model's margins,
    for measuring what int8 weights change. Deterministic for a seed and thread count. Returns
    ``(model, text bytes)``; ``log(step, loss)`` if given, every 50 steps."""
    import sysconfig

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    root = Path(sysconfig.get_paths()["stdlib"])
    text = b"".join(p.read_bytes() for p in sorted(root.glob("*.py"))[:200])
    data = torch.tensor(list(text), dtype=torch.int64)
    config = GPT2Config(vocab_size=256, n_positions=512, n_embd=192, n_layer=4, n_head=6, bos_token_id=0,
                        eos_token_id=0, attn_implementation="eager")
    model = GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for step in range(steps):
        starts = torch.randint(0, len(data) - 129, (16,), generator=generator)
        batch = torch.stack([data[s:s + 129] for s in starts.tolist()])
        loss = model(input_ids=batch[:, :-1], labels=batch[:, 1:]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if log is not None and (step % 50 == 0 or step == steps - 1):
            log(step, loss.item())
    return model.eval(), text


def decoder_cache_shape(config) -> tuple[int, int]:
    """(key/value heads, head dim) of a transformers decoder config (Falcon's multi-query
    attention: one key/value head)."""
    if getattr(config, "multi_query", False) and not getattr(config, "new_decoder_architecture", False):
        heads = 1
    else:
        heads = getattr(config, "num_key_value_heads", None) or getattr(config, "n_head", None) \
            or config.num_attention_heads
    hidden = getattr(config, "hidden_size", None) or config.n_embd
    return heads, hidden // (getattr(config, "num_attention_heads", None) or config.n_head)


def export_decoder(path: Path, model, position_ids: bool, with_past: bool = True) -> Path:
    """Export a transformers causal LM (eval mode) with flat cache tensors in and out (module
    names as ``export_gpt2``); ``position_ids``: take them as an input; ``with_past=False``: no
    past inputs (the prompt's decoder: the presents hold the prompt's keys and values alone)."""
    import onnx
    import torch
    from transformers import DynamicCache

    cfg = model.config
    layers = cfg.num_hidden_layers
    past_names, present_names = gpt2_cache_names(layers)

    class Wrapper(torch.nn.Module):  # flat cache tensors in and out; transformers 5 wants a Cache
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, *rest):
            positions, past = (rest[0], rest[1:]) if position_ids else (None, rest)
            cache = DynamicCache(list(zip(past[0::2], past[1::2])), config=self.inner.config)
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, cache=cache,
                             use_cache=True)
            return (out.logits, *[t for layer in out.cache.layers for t in (layer.keys, layer.values)])

    batch, seq, past_seq = 2, 3, 5
    heads, head_dim = decoder_cache_shape(cfg)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    mask = torch.ones(batch, past_seq + seq, dtype=torch.int64)
    positions = [torch.arange(past_seq, past_seq + seq).expand(batch, seq)] if position_ids else []
    if not with_past:
        past_seq, past_names = 0, []
        mask = torch.ones(batch, seq, dtype=torch.int64)
        positions = [torch.arange(seq).expand(batch, seq)] if position_ids else []
    past = [torch.randn(batch, heads, past_seq, head_dim) for _ in past_names]
    names = ["input_ids", "attention_mask", *(["position_ids"] if position_ids else []), *past_names]
    dynamic = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total_seq"},
               "logits": {0: "batch", 1: "seq"}, **({"position_ids": {0: "batch", 1: "seq"}} if position_ids else {}),
               **{n: {0: "batch", 2: "past_seq"} for n in past_names},
               **{n: {0: "batch", 2: "total_seq"} for n in present_names}}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Wrapper(model).eval(), (ids, mask, *positions, *past), str(path), dynamo=False,
                          opset_version=OPSET, input_names=names, output_names=["logits", *present_names],
                          dynamic_axes=dynamic)
    proto = onnx.load(str(path))
    proto.ir_version = min(proto.ir_version, IR_VERSION)
    onnx.save(proto, str(path))
    return path


def bert_inputs(batch: int, seq: int, vocab: int = 1000, seed: int = 0) -> dict:
    """Token ids and a padding mask (the last quarter of each row but the first is padding)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[1:, seq - seq // 4:] = 0
    return {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64), "attention_mask": mask}


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    out = Path(argv[0])
    for name in argv[1:] or ["bert-tiny"]:
        export = export_gpt2 if name in GPT2_CONFIGS else export_llama if name in LLAMA_CONFIGS else export_bert
        print(export(out / f"{name}.onnx", name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
