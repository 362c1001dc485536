"""optimum's ONNX exporter (``optimum.exporters.onnx.main_export``, the optimum-onnx package) on
small random-weight transformers models saved to a temporary folder: encoders, decoders with
past key values (``-with-past`` tasks) and encoder-decoders, whose export writes several graphs
(encoder, decoder, decoder with past, and the two decoders merged under an ``If``); each graph
is a row. optimum-onnx 0.1 pins transformers < 4.58: export from its own venv (``--python
optimum=...``, see benchmarks/model_zoo.py). Inputs are made from the graph's input names and
symbolic dims (batch 1 and 2, past length 6)."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from . import Arch, register
from .transformers_zoo import BART_LIKE, LLAMA_LIKE, SMALL, T5_SMALL, VIT  # the same small configs

DIMS = {"batch_size": 1, "sequence_length": 8, "past_sequence_length": 6, "encoder_sequence_length": 12,
        "decoder_sequence_length": 4, "past_decoder_sequence_length": 6, "num_channels": 3, "height": 64,
        "width": 64}


def _dim(value: str, dims: dict[str, int]) -> int:
    """A symbolic dim's size: a known name or a sum of them ("past_sequence_length + 1")."""
    terms = [t.strip() for t in value.split("+")]
    if not all(t.isdigit() or t in dims for t in terms):
        raise ValueError(f"unknown symbolic dim {value!r}")
    return sum(int(t) if t.isdigit() else dims[t] for t in terms)


def feeds(proto, dims: dict[str, int], vocab: int, seed: int) -> dict:
    """Inputs for an optimum graph: ids below ``vocab``, masks of ones (the last row padded),
    positions counting on from the past, the cache branch taken, floats normal."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for value in proto.graph.input:
        t = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else _dim(d.dim_param, dims) for d in t.shape.dim]
        name = value.name
        if name == "use_cache_branch":
            out[name] = np.array([True])
        elif "mask" in name:
            m = np.ones(shape, np.int64)
            if shape[-1] > 4:  # padding in the last row: on the left with a past, else on the right
                m[-1, slice(0, 2) if dims["_left_pad"] else slice(-2, None)] = 0
            out[name] = m
        elif name in ("position_ids", "cache_position"):
            past = dims.get("past_sequence_length", 0) if dims.get("_with_past") else 0
            pos = np.arange(past, past + shape[-1], dtype=np.int64)
            out[name] = np.broadcast_to(pos, shape).copy()
        elif name == "token_type_ids":
            out[name] = np.zeros(shape, np.int64)
        elif t.elem_type == 7:  # int64: token ids
            out[name] = rng.integers(3, vocab, shape, dtype=np.int64)
        elif t.elem_type == 1:
            out[name] = rng.standard_normal(shape).astype(np.float32)
        else:
            raise ValueError(f"no input rule for {name} (element type {t.elem_type})")
    return out


def _optimum(name: str, model: str, config: dict, task: str, graph: str = "model.onnx", dims: dict | None = None):
    """Entry ``opt-<name>``: optimum's export of ``model`` (a transformers class name) with
    ``config``, for ``task``; the row is ``graph`` of the files it writes."""

    def export(path: Path, exporter: str) -> dict:
        import onnx
        import torch
        import transformers
        from optimum.exporters.onnx import main_export

        torch.manual_seed(0)
        cls = getattr(transformers, model)
        with tempfile.TemporaryDirectory() as tmp:
            cls(cls.config_class(**config)).save_pretrained(f"{tmp}/model")
            main_export(f"{tmp}/model", output=f"{tmp}/onnx", task=task, do_validation=False)
            files = sorted(p.name for p in Path(f"{tmp}/onnx").glob("*.onnx"))
            if graph not in files:
                raise FileNotFoundError(f"optimum wrote {files}, not {graph}")
            shutil.copy(f"{tmp}/onnx/{graph}", path)
            for extra in Path(f"{tmp}/onnx").glob(f"{graph}_data"):  # external weights, if any
                shutil.copy(extra, path.parent / extra.name)
        proto = onnx.load(str(path), load_external_data=False)
        opset = max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
        d = {**DIMS, **(dims or {}), "_with_past": "with_past" in graph or "merged" in graph or
             (graph == "model.onnx" and task.endswith("-with-past"))}
        d["_left_pad"] = d["_with_past"]
        vocab = config.get("vocab_size", 1000)
        inputs = feeds(proto, d, vocab, seed=0)
        inputs_b2 = feeds(proto, {**d, "batch_size": 2}, vocab, seed=1)
        return {"opset": opset, "inputs": inputs, "inputs_b2": inputs_b2}

    register(Arch(f"opt-{name}", "optimum", None, exporters=("optimum",), export=export))


# optimum's dummy audio is 30 s (3000 frames): Whisper's real 1500 encoder positions
WHISPER = {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
           "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "num_mel_bins": 80,
           "max_source_positions": 1500, "max_target_positions": 64, "vocab_size": 1000, "pad_token_id": 0,
           "bos_token_id": 0, "eos_token_id": 0, "decoder_start_token_id": 0}

# encoders
_optimum("bert", "BertModel", SMALL, "feature-extraction")
_optimum("roberta", "RobertaModel", SMALL, "feature-extraction")
_optimum("distilbert", "DistilBertModel", {"dim": 64, "n_layers": 2, "n_heads": 4, "hidden_dim": 128,
                                            "vocab_size": 1000, "max_position_embeddings": 128}, "feature-extraction")
_optimum("deberta-v2", "DebertaV2Model", SMALL, "feature-extraction")
_optimum("vit", "ViTModel", VIT, "feature-extraction")
# decoders with past key values
_optimum("gpt2", "GPT2LMHeadModel", {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 1000,
                                     "n_positions": 128}, "text-generation-with-past")
_optimum("llama", "LlamaForCausalLM", LLAMA_LIKE, "text-generation-with-past")
_optimum("mistral", "MistralForCausalLM", {**LLAMA_LIKE, "sliding_window": 64}, "text-generation-with-past")
_optimum("qwen2", "Qwen2ForCausalLM", LLAMA_LIKE, "text-generation-with-past")
_optimum("phi3", "Phi3ForCausalLM", {**LLAMA_LIKE, "pad_token_id": 0}, "text-generation-with-past")
_optimum("gemma", "GemmaForCausalLM", {**LLAMA_LIKE, "head_dim": 16}, "text-generation-with-past")
_optimum("opt", "OPTForCausalLM", {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                   "ffn_dim": 128, "vocab_size": 1000, "max_position_embeddings": 128,
                                   "word_embed_proj_dim": 64}, "text-generation-with-past")
_optimum("gpt-neox", "GPTNeoXForCausalLM", SMALL, "text-generation-with-past")
_optimum("falcon", "FalconForCausalLM", {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                         "vocab_size": 1000}, "text-generation-with-past")
# encoder-decoders: each graph optimum writes
for _graph in ("encoder_model", "decoder_model", "decoder_with_past_model", "decoder_model_merged"):
    _tail = re.sub(r"_model", "", _graph).replace("_", "-")
    _optimum(f"t5-{_tail}", "T5ForConditionalGeneration", T5_SMALL, "text2text-generation-with-past",
             f"{_graph}.onnx")
_optimum("bart-encoder", "BartForConditionalGeneration", BART_LIKE, "text2text-generation-with-past",
         "encoder_model.onnx")
_optimum("bart-decoder-merged", "BartForConditionalGeneration", BART_LIKE, "text2text-generation-with-past",
         "decoder_model_merged.onnx")
_optimum("whisper-encoder", "WhisperForConditionalGeneration", WHISPER, "automatic-speech-recognition-with-past",
         "encoder_model.onnx", {"feature_size": 80, "encoder_sequence_length": 3000})
_optimum("whisper-decoder-merged", "WhisperForConditionalGeneration", WHISPER,
         "automatic-speech-recognition-with-past", "decoder_model_merged.onnx",
         {"feature_size": 80, "encoder_sequence_length": 1500})
