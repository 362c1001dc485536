"""PyTorch models for the torch frontend's tests and benchmarks: seeded random weights, no downloads.

``ACCEPTANCE``: ResNet-50 (``torch_models.ResNet50``: torchvision's layout in plain torch),
BERT-base (transformers ``BertModel``, default config) and GPT-2 124M with its KV cache
(``GPT2LMHeadModel``; past keys/values in, present out, as flat tensors).

``ZOO``: small configs of transformers architectures (text encoders, decoders, vision,
audio, seq2seq): each builds in well under a second and compiles in seconds.

Each entry is a builder ``() -> Case``: the eval-mode module and ``inputs(batch)``, its
example inputs at a batch size (forward's positional arguments). ``outputs(result)`` flattens
what a module returns into a list of tensors for comparison.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

SEED = 0
SEQ = 16


@dataclass
class Case:
    model: torch.nn.Module
    inputs: Callable[[int], tuple]  # batch size -> forward's positional arguments


def outputs(result) -> list[torch.Tensor]:
    """Every tensor in ``result`` (a tensor, tuple, list, dict or transformers ModelOutput), in order."""
    if isinstance(result, torch.Tensor):
        return [result]
    if hasattr(result, "to_tuple"):
        result = result.to_tuple()
    if isinstance(result, dict):
        result = list(result.values())
    if isinstance(result, (tuple, list)):
        return [t for item in result for t in outputs(item)]
    return []


class TensorOutputs(torch.nn.Module):
    """A transformers model called with positional inputs passed by keyword (transformers 5 takes
    them by keyword only), returning every tensor of its output (logits or last_hidden_state,
    pooler_output, ...) as a tuple."""

    def __init__(self, model: torch.nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *args):
        return tuple(outputs(self.model(**dict(zip(self.names, args)))))


def _gen(batch: int) -> torch.Generator:
    return torch.Generator().manual_seed(SEED + batch)


def _text(config_cls: str, model_cls: str, vocab: int = 256, mask: bool = True, **config) -> Callable[[], Case]:
    def build() -> Case:
        import transformers

        torch.manual_seed(SEED)
        cfg = getattr(transformers, config_cls)(**config)
        model = getattr(transformers, model_cls)(cfg).eval()
        names = ("input_ids", "attention_mask") if mask else ("input_ids",)

        def inputs(batch: int) -> tuple:
            ids = torch.randint(0, vocab, (batch, SEQ), generator=_gen(batch))
            return (ids, torch.ones(batch, SEQ, dtype=torch.int64)) if mask else (ids,)

        return Case(TensorOutputs(model, names).eval(), inputs)

    return build


def _image(config_cls: str, model_cls: str, size: int = 32, channels: int = 3, **config) -> Callable[[], Case]:
    def build() -> Case:
        import transformers

        torch.manual_seed(SEED)
        model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config)).eval()
        return Case(TensorOutputs(model, ("pixel_values",)).eval(),
                    lambda batch: (torch.randn(batch, channels, size, size, generator=_gen(batch)),))

    return build


def _audio(config_cls: str, model_cls: str, **config) -> Callable[[], Case]:
    def build() -> Case:
        import transformers

        torch.manual_seed(SEED)
        model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config)).eval()
        return Case(TensorOutputs(model, ("input_values",)).eval(), lambda batch: (torch.randn(batch, 1600, generator=_gen(batch)),))

    return build


def _seq2seq(config_cls: str, model_cls: str, **config) -> Callable[[], Case]:
    def build() -> Case:
        import transformers

        torch.manual_seed(SEED)
        model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config)).eval()

        def inputs(batch: int) -> tuple:
            ids = torch.randint(2, 256, (batch, SEQ), generator=_gen(batch))
            return ids, torch.ones(batch, SEQ, dtype=torch.int64), ids[:, :8]

        return Case(TensorOutputs(model, ("input_ids", "attention_mask", "decoder_input_ids")).eval(), inputs)

    return build


_ENC = {"vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 64}
_DEC = {"vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 64}
_LLAMA = {**_DEC, "num_key_value_heads": 1}
_VIT = {"image_size": 32, "patch_size": 8, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64}

ZOO: dict[str, Callable[[], Case]] = {
    # text encoders
    "bert": _text("BertConfig", "BertModel", **_ENC),
    "roberta": _text("RobertaConfig", "RobertaModel", **{**_ENC, "pad_token_id": 1}),
    "distilbert": _text("DistilBertConfig", "DistilBertModel", vocab_size=256, dim=32, n_layers=2, n_heads=2,
                        hidden_dim=64, max_position_embeddings=64),
    "albert": _text("AlbertConfig", "AlbertModel", **{**_ENC, "embedding_size": 16}),
    "electra": _text("ElectraConfig", "ElectraModel", **{**_ENC, "embedding_size": 16}),
    "deberta": _text("DebertaConfig", "DebertaModel", **_ENC),
    "deberta-v2": _text("DebertaV2Config", "DebertaV2Model", **_ENC),
    "mobilebert": _text("MobileBertConfig", "MobileBertModel", **{**_ENC, "embedding_size": 16,
                                                                 "intra_bottleneck_size": 16, "num_feedforward_networks": 2,
                                                                 "true_hidden_size": 16}),
    "xlm-roberta": _text("XLMRobertaConfig", "XLMRobertaModel", **{**_ENC, "pad_token_id": 1}),
    "camembert": _text("CamembertConfig", "CamembertModel", **{**_ENC, "pad_token_id": 1}),
    "ernie": _text("ErnieConfig", "ErnieModel", **_ENC),
    "mpnet": _text("MPNetConfig", "MPNetModel", **{**_ENC, "pad_token_id": 1}),
    "data2vec-text": _text("Data2VecTextConfig", "Data2VecTextModel", **{**_ENC, "pad_token_id": 1}),
    # decoders
    "gpt2": _text("GPT2Config", "GPT2Model", n_embd=32, n_layer=2, n_head=2, vocab_size=256, n_positions=64),
    "opt": _text("OPTConfig", "OPTModel", vocab_size=256, hidden_size=32, num_hidden_layers=2,
                 num_attention_heads=2, ffn_dim=64, max_position_embeddings=64, word_embed_proj_dim=32),
    "gpt-neo": _text("GPTNeoConfig", "GPTNeoModel", vocab_size=256, hidden_size=32, num_layers=2, num_heads=2,
                     attention_types=[[["global", "local"], 1]], max_position_embeddings=64, window_size=8),
    "gptj": _text("GPTJConfig", "GPTJModel", vocab_size=256, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                  rotary_dim=8),
    "bloom": _text("BloomConfig", "BloomModel", vocab_size=256, hidden_size=32, n_layer=2, n_head=2),
    "llama": _text("LlamaConfig", "LlamaModel", **_LLAMA),
    "mistral": _text("MistralConfig", "MistralModel", **_LLAMA),
    "qwen2": _text("Qwen2Config", "Qwen2Model", **_LLAMA),
    "phi": _text("PhiConfig", "PhiModel", **_DEC),
    "gemma": _text("GemmaConfig", "GemmaModel", **{**_LLAMA, "head_dim": 16}),
    "falcon": _text("FalconConfig", "FalconModel", vocab_size=256, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=2),
    "gpt-neox": _text("GPTNeoXConfig", "GPTNeoXModel", **_DEC),
    "codegen": _text("CodeGenConfig", "CodeGenModel", vocab_size=256, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                     rotary_dim=8),
    "stablelm": _text("StableLmConfig", "StableLmModel", **_LLAMA),
    "olmo": _text("OlmoConfig", "OlmoModel", **_LLAMA),
    "starcoder2": _text("Starcoder2Config", "Starcoder2Model", **_LLAMA),
    # vision
    "vit": _image("ViTConfig", "ViTModel", **_VIT),
    "deit": _image("DeiTConfig", "DeiTModel", **_VIT),
    "beit": _image("BeitConfig", "BeitModel", **_VIT),
    "dinov2": _image("Dinov2Config", "Dinov2Model", **_VIT),
    "swin": _image("SwinConfig", "SwinModel", image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                   num_heads=[1, 2], window_size=4),
    "convnext": _image("ConvNextConfig", "ConvNextModel", hidden_sizes=[16, 32], depths=[1, 1], num_stages=2),
    "convnextv2": _image("ConvNextV2Config", "ConvNextV2Model", hidden_sizes=[16, 32], depths=[1, 1], num_stages=2),
    "resnet": _image("ResNetConfig", "ResNetModel", embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1]),
    "regnet": _image("RegNetConfig", "RegNetModel", embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                     groups_width=8),
    "mobilenet-v2": _image("MobileNetV2Config", "MobileNetV2Model", depth_multiplier=0.35, image_size=32),
    "segformer": _image("SegformerConfig", "SegformerModel", num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                        hidden_sizes=[16, 32], num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2],
                        mlp_ratios=[2, 2]),
    "poolformer": _image("PoolFormerConfig", "PoolFormerModel", hidden_sizes=[16, 32], depths=[1, 1], num_encoder_blocks=2,
                         patch_sizes=[7, 3], strides=[4, 2], padding=[2, 1]),
    "bit": _image("BitConfig", "BitModel", embedding_size=32, hidden_sizes=[32, 64], depths=[1, 1], num_groups=8),
    # audio, seq2seq
    "wav2vec2": _audio("Wav2Vec2Config", "Wav2Vec2Model", hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                       num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2),
    "hubert": _audio("HubertConfig", "HubertModel", hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                     num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2),
    "t5": _seq2seq("T5Config", "T5Model", vocab_size=256, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                   decoder_start_token_id=0),
    "bart": _seq2seq("BartConfig", "BartModel", vocab_size=256, d_model=32, encoder_layers=2, decoder_layers=2,
                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                     max_position_embeddings=64),
}


def resnet50() -> Case:
    """ResNet-50 (torchvision's layout, ``torch_models.ResNet50``), 224x224 images."""
    sys.path.insert(0, str(Path(__file__).parent))
    import torch_models

    model, _ = torch_models.MODELS["resnet50"]()
    return Case(model, lambda batch: (torch.randn(batch, 3, 224, 224, generator=_gen(batch)),))


def bert_base(seq: int = 128) -> Case:
    """BERT-base (``BertModel``, default config: 12 layers, hidden 768), ``seq`` tokens with padding."""
    import transformers

    torch.manual_seed(SEED)
    model = transformers.BertModel(transformers.BertConfig()).eval()

    def inputs(batch: int) -> tuple:
        ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=_gen(batch))
        mask = torch.ones(batch, seq, dtype=torch.int64)
        mask[1:, seq - seq // 4:] = 0
        return ids, mask

    return Case(TensorOutputs(model, ("input_ids", "attention_mask")).eval(), inputs)


class GPT2WithCache(torch.nn.Module):
    """GPT-2's one decoding step over a cache: (input_ids, attention_mask, *past) -> (logits, *present),
    past/present per layer as key, value ``[batch, heads, seq, head_dim]`` (``hf_models.export_gpt2``'s)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, *past):
        from transformers import DynamicCache

        cache = DynamicCache(list(zip(past[0::2], past[1::2])), config=self.model.config)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, cache=cache, use_cache=True)
        return (out.logits, *[t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)])


def gpt2(past: int = 32, seq: int = 1, **config) -> Case:
    """GPT-2 124M (``GPT2LMHeadModel``, default config unless ``config``), ``seq`` new tokens over a
    ``past``-token cache; eager attention."""
    import transformers

    torch.manual_seed(SEED)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**config, attn_implementation="eager")).eval()
    cfg = model.config
    shape = (cfg.n_head, past, cfg.n_embd // cfg.n_head)

    def inputs(batch: int) -> tuple:
        gen = _gen(batch)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=gen)
        cache = [torch.randn(batch, *shape, generator=gen) for _ in range(2 * cfg.n_layer)]
        return (ids, torch.ones(batch, past + seq, dtype=torch.int64), *cache)

    return Case(GPT2WithCache(model).eval(), inputs)


ACCEPTANCE: dict[str, Callable[[], Case]] = {"resnet50": resnet50, "bert-base": bert_base, "gpt2": gpt2}
