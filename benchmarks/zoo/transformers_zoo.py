"""transformers architectures: small configurations (2 layers, hidden 64) of the library's own
model code with random weights, exported by torch.onnx.export as its users do."""

from __future__ import annotations

from . import arch
from . import wrap as _wrap

SEQ = 16
TEXT = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
IDS_ONLY = {"input_ids": {0: "batch", 1: "seq"}}


def _text(model_cls, config, mask: bool = True, keys: tuple[str, ...] = (), vocab: int | None = None, **fixed):
    import torch

    torch.manual_seed(0)
    model = model_cls(config).eval()
    vocab = vocab or config.vocab_size
    inputs = {"input_ids": torch.randint(0, vocab, (2, SEQ))}
    if mask:
        m = torch.ones(2, SEQ, dtype=torch.int64)
        m[1, SEQ - 4:] = 0  # padding in the second row
        inputs["attention_mask"] = m
    return _wrap(model, list(inputs), keys, **fixed), inputs


def _image(model_cls, config, size: int = 64, channels: int = 3, name: str = "pixel_values", keys=()):
    import torch

    torch.manual_seed(0)
    model = model_cls(config).eval()
    _unvanishing_weights(model)
    inputs = {name: torch.randn(1, channels, size, size)}
    return _wrap(model, [name], keys), inputs


def _unvanishing_weights(model) -> None:
    """Weights under which a CNN's activations stay O(1). transformers initializes convs with
    std 0.02 (not scaled by fan-in), BatchNorm's scale too, and its statistics at mean 0,
    variance 1 (eps 1e-3), so each layer shrinks the activations and no norm restores them:
    EfficientNet's output was all zeros (2e-27 at most, denormals on the way), which any
    compiler matches and which times denormal arithmetic. In models with BatchNorm the convs
    are re-drawn with std 1/sqrt(fan-in) and each norm gets a scale in [0.5, 1], a shift of std
    0.1, and statistics near the identity (mean of std 0.1, variance in [0.5, 1.5]). Statistics
    taken from random images instead (training-mode passes) leave some channels' variances
    near zero, and their norms then amplify float rounding 30x each: EfficientNet differed
    from onnxruntime by 2.3e-3, and onnxruntime from itself unoptimized by over 1e-3."""
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    generator = torch.Generator().manual_seed(2)

    def draw(t, low, high):  # uniform in [low, high)
        t.copy_(low + (high - low) * torch.rand(t.shape, generator=generator))

    with torch.no_grad():
        for conv in model.modules():
            if isinstance(conv, torch.nn.modules.conv._ConvNd):
                fan_in = conv.weight[0].numel()
                conv.weight.copy_(torch.randn(conv.weight.shape, generator=generator) / fan_in ** 0.5)
        for m in norms:
            if m.affine:
                draw(m.weight, 0.5, 1.0)
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=generator))
            m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=generator))
            draw(m.running_var, 0.5, 1.5)


SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
         "vocab_size": 1000, "max_position_embeddings": 128}


@arch("bert", "transformers", TEXT)
def _bert():
    from transformers import BertConfig, BertModel
    return _text(BertModel, BertConfig(**SMALL), keys=("last_hidden_state", "pooler_output"))


@arch("roberta", "transformers", TEXT)
def _roberta():
    from transformers import RobertaConfig, RobertaModel
    return _text(RobertaModel, RobertaConfig(**SMALL))


@arch("xlm-roberta", "transformers", TEXT)
def _xlm_roberta():
    from transformers import XLMRobertaConfig, XLMRobertaModel
    return _text(XLMRobertaModel, XLMRobertaConfig(**SMALL))


@arch("distilbert", "transformers", TEXT)
def _distilbert():
    from transformers import DistilBertConfig, DistilBertModel
    return _text(DistilBertModel, DistilBertConfig(dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                                   vocab_size=1000, max_position_embeddings=128))


@arch("albert", "transformers", TEXT)
def _albert():
    from transformers import AlbertConfig, AlbertModel
    return _text(AlbertModel, AlbertConfig(**SMALL, embedding_size=32))


@arch("electra", "transformers", TEXT)
def _electra():
    from transformers import ElectraConfig, ElectraModel
    return _text(ElectraModel, ElectraConfig(**SMALL, embedding_size=32))


@arch("deberta-v2", "transformers", TEXT)
def _deberta():
    from transformers import DebertaV2Config, DebertaV2Model
    return _text(DebertaV2Model, DebertaV2Config(**SMALL))


@arch("mpnet", "transformers", TEXT)
def _mpnet():
    from transformers import MPNetConfig, MPNetModel
    return _text(MPNetModel, MPNetConfig(**SMALL))


@arch("gpt2", "transformers", TEXT)
def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    return _text(GPT2LMHeadModel, GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128),
                 use_cache=False)


@arch("gpt-neox", "transformers", TEXT)
def _gpt_neox():
    from transformers import GPTNeoXConfig, GPTNeoXModel
    return _text(GPTNeoXModel, GPTNeoXConfig(**SMALL), use_cache=False)


@arch("opt", "transformers", TEXT)
def _opt():
    from transformers import OPTConfig, OPTModel
    return _text(OPTModel, OPTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128,
                                     vocab_size=1000, max_position_embeddings=128, word_embed_proj_dim=64),
                 use_cache=False)


LLAMA_LIKE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 128}


@arch("llama", "transformers", TEXT)
def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    return _text(LlamaForCausalLM, LlamaConfig(**LLAMA_LIKE), use_cache=False)


@arch("mistral", "transformers", TEXT)
def _mistral():
    from transformers import MistralConfig, MistralModel
    return _text(MistralModel, MistralConfig(**LLAMA_LIKE, sliding_window=8), use_cache=False)


@arch("qwen2", "transformers", TEXT)
def _qwen2():
    from transformers import Qwen2Config, Qwen2Model
    return _text(Qwen2Model, Qwen2Config(**LLAMA_LIKE), use_cache=False)


@arch("phi", "transformers", TEXT)
def _phi():
    from transformers import PhiConfig, PhiModel
    return _text(PhiModel, PhiConfig(**SMALL), use_cache=False)


@arch("gemma", "transformers", TEXT)
def _gemma():
    from transformers import GemmaConfig, GemmaModel
    return _text(GemmaModel, GemmaConfig(**LLAMA_LIKE, head_dim=16), use_cache=False)


@arch("bloom", "transformers", TEXT)
def _bloom():
    from transformers import BloomConfig, BloomModel
    return _text(BloomModel, BloomConfig(hidden_size=64, n_layer=2, n_head=4, vocab_size=1000), use_cache=False)


@arch("falcon", "transformers", TEXT)
def _falcon():
    from transformers import FalconConfig, FalconModel
    return _text(FalconModel, FalconConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                           vocab_size=1000), use_cache=False)


@arch("t5-encoder", "transformers", TEXT)
def _t5():
    from transformers import T5Config, T5EncoderModel
    return _text(T5EncoderModel, T5Config(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                                          vocab_size=1000))


@arch("bart-encoder", "transformers", TEXT)
def _bart():
    from transformers import BartConfig, BartModel
    config = BartConfig(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=1000,
                        max_position_embeddings=128)
    return _text(lambda c: BartModel(c).get_encoder(), config)


@arch("clip-text", "transformers", TEXT)
def _clip_text():
    from transformers import CLIPTextConfig, CLIPTextModel
    return _text(CLIPTextModel, CLIPTextConfig(**SMALL), keys=("last_hidden_state", "pooler_output"))


@arch("clip-vision", "transformers")
def _clip_vision():
    from transformers import CLIPVisionConfig, CLIPVisionModel
    return _image(CLIPVisionModel, CLIPVisionConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                    intermediate_size=128, image_size=64, patch_size=16))


VIT = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
       "image_size": 64, "patch_size": 16}


@arch("vit", "transformers")
def _vit():
    from transformers import ViTConfig, ViTModel
    return _image(ViTModel, ViTConfig(**VIT))


@arch("deit", "transformers")
def _deit():
    from transformers import DeiTConfig, DeiTModel
    return _image(DeiTModel, DeiTConfig(**VIT))


@arch("beit", "transformers")
def _beit():
    from transformers import BeitConfig, BeitModel
    return _image(BeitModel, BeitConfig(**VIT, use_relative_position_bias=True))


@arch("dinov2", "transformers")
def _dinov2():
    from transformers import Dinov2Config, Dinov2Model
    return _image(Dinov2Model, Dinov2Config(**{k: v for k, v in VIT.items() if k != "intermediate_size"},
                                            mlp_ratio=2))


@arch("swin", "transformers")
def _swin():
    from transformers import SwinConfig, SwinModel
    return _image(SwinModel, SwinConfig(image_size=64, patch_size=4, embed_dim=32, depths=[2, 2],
                                        num_heads=[2, 4], window_size=4))


@arch("convnext", "transformers")
def _convnext():
    from transformers import ConvNextConfig, ConvNextModel
    return _image(ConvNextModel, ConvNextConfig(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1]))


@arch("convnextv2", "transformers")
def _convnextv2():
    from transformers import ConvNextV2Config, ConvNextV2Model
    return _image(ConvNextV2Model, ConvNextV2Config(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1]))


@arch("resnet", "transformers")
def _resnet():
    from transformers import ResNetConfig, ResNetModel
    return _image(ResNetModel, ResNetConfig(), size=96)


@arch("regnet", "transformers")
def _regnet():
    from transformers import RegNetConfig, RegNetModel
    return _image(RegNetModel, RegNetConfig(), size=96)


@arch("mobilenet-v1", "transformers")
def _mobilenet_v1():
    from transformers import MobileNetV1Config, MobileNetV1Model
    return _image(MobileNetV1Model, MobileNetV1Config(image_size=96), size=96)


@arch("mobilenet-v2", "transformers")
def _mobilenet_v2():
    from transformers import MobileNetV2Config, MobileNetV2Model
    return _image(MobileNetV2Model, MobileNetV2Config(image_size=96), size=96)


@arch("efficientnet", "transformers")
def _efficientnet():
    from transformers import EfficientNetConfig, EfficientNetModel
    return _image(EfficientNetModel, EfficientNetConfig(image_size=96), size=96)


@arch("mobilevit", "transformers")
def _mobilevit():
    from transformers import MobileViTConfig, MobileViTModel
    return _image(MobileViTModel, MobileViTConfig(image_size=64), size=64)


@arch("levit", "transformers")
def _levit():
    from transformers import LevitConfig, LevitModel
    return _image(LevitModel, LevitConfig(image_size=64), size=64)


@arch("poolformer", "transformers")
def _poolformer():
    from transformers import PoolFormerConfig, PoolFormerModel
    return _image(PoolFormerModel, PoolFormerConfig(depths=[1, 1, 1, 1]), size=64)


@arch("segformer", "transformers")
def _segformer():
    from transformers import SegformerConfig, SegformerForSemanticSegmentation
    return _image(SegformerForSemanticSegmentation, SegformerConfig(depths=[1, 1, 1, 1], num_labels=4), size=64)


@arch("whisper-encoder", "transformers")
def _whisper():
    import torch
    from transformers import WhisperConfig, WhisperModel

    torch.manual_seed(0)
    config = WhisperConfig(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                           num_mel_bins=80, max_source_positions=32, vocab_size=1000, pad_token_id=0,
                           bos_token_id=0, eos_token_id=0, decoder_start_token_id=0)
    encoder = WhisperModel(config).get_encoder().eval()
    inputs = {"input_features": torch.randn(1, 80, 64)}
    return _wrap(encoder, ["input_features"]), inputs


@arch("wav2vec2", "transformers", {"input_values": {0: "batch", 1: "samples"}})
def _wav2vec2():
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    torch.manual_seed(0)
    config = Wav2Vec2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                            conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
    model = Wav2Vec2Model(config).eval()
    return _wrap(model, ["input_values"]), {"input_values": torch.randn(1, 1600)}




# --- more encoders ----------------------------------------------------------------------------

@arch("mobilebert", "transformers", TEXT)
def _mobilebert():
    from transformers import MobileBertConfig, MobileBertModel
    return _text(MobileBertModel, MobileBertConfig(**SMALL, embedding_size=32, intra_bottleneck_size=32,
                                                   num_feedforward_networks=2))


@arch("funnel", "transformers", TEXT)
def _funnel():
    from transformers import FunnelConfig, FunnelModel
    return _text(FunnelModel, FunnelConfig(d_model=64, n_head=4, d_head=16, d_inner=128, block_sizes=[1, 1],
                                           num_decoder_layers=1, vocab_size=1000))


@arch("modernbert", "transformers", TEXT)
def _modernbert():
    from transformers import ModernBertConfig, ModernBertModel
    return _text(ModernBertModel, ModernBertConfig(**SMALL, local_attention=8, global_attn_every_n_layers=2,
                                                   pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                                   cls_token_id=1, sep_token_id=2))


@arch("camembert", "transformers", TEXT)
def _camembert():
    from transformers import CamembertConfig, CamembertModel
    return _text(CamembertModel, CamembertConfig(**SMALL))


@arch("deberta", "transformers", TEXT)
def _deberta_v1():
    from transformers import DebertaConfig, DebertaModel
    return _text(DebertaModel, DebertaConfig(**SMALL, relative_attention=True, pos_att_type=["c2p", "p2c"]))


@arch("squeezebert", "transformers", TEXT)
def _squeezebert():
    from transformers import SqueezeBertConfig, SqueezeBertModel
    return _text(SqueezeBertModel, SqueezeBertConfig(**SMALL, embedding_size=64, q_groups=2, k_groups=2,
                                                     v_groups=2, intermediate_groups=2, output_groups=2))


@arch("roformer", "transformers", TEXT)
def _roformer():
    from transformers import RoFormerConfig, RoFormerModel
    return _text(RoFormerModel, RoFormerConfig(**SMALL, embedding_size=64))


@arch("convbert", "transformers", TEXT)
def _convbert():
    from transformers import ConvBertConfig, ConvBertModel
    return _text(ConvBertModel, ConvBertConfig(**SMALL, embedding_size=64, head_ratio=2, conv_kernel_size=9))


@arch("ernie", "transformers", TEXT)
def _ernie():
    from transformers import ErnieConfig, ErnieModel
    return _text(ErnieModel, ErnieConfig(**SMALL))


@arch("megatron-bert", "transformers", TEXT)
def _megatron_bert():
    from transformers import MegatronBertConfig, MegatronBertModel
    return _text(MegatronBertModel, MegatronBertConfig(**SMALL))


@arch("data2vec-text", "transformers", TEXT)
def _data2vec_text():
    from transformers import Data2VecTextConfig, Data2VecTextModel
    return _text(Data2VecTextModel, Data2VecTextConfig(**SMALL))


@arch("xlm", "transformers", TEXT)
def _xlm():
    from transformers import XLMConfig, XLMModel
    return _text(XLMModel, XLMConfig(emb_dim=64, n_layers=2, n_heads=4, vocab_size=1000, max_position_embeddings=128))


@arch("esm", "transformers", TEXT)
def _esm():
    from transformers import EsmConfig, EsmModel
    return _text(EsmModel, EsmConfig(**{**SMALL, "vocab_size": 33}, pad_token_id=1, mask_token_id=32,
                                     position_embedding_type="rotary"))


@arch("rembert", "transformers", TEXT)
def _rembert():
    from transformers import RemBertConfig, RemBertModel
    return _text(RemBertModel, RemBertConfig(**SMALL, input_embedding_size=32, output_embedding_size=32))


@arch("layoutlm", "transformers", TEXT)
def _layoutlm():
    from transformers import LayoutLMConfig, LayoutLMModel
    return _text(LayoutLMModel, LayoutLMConfig(**SMALL))


@arch("longformer", "transformers", TEXT)
def _longformer():
    from transformers import LongformerConfig, LongformerModel
    return _text(LongformerModel, LongformerConfig(**SMALL, attention_window=4))


@arch("fnet", "transformers", IDS_ONLY)
def _fnet():
    from transformers import FNetConfig, FNetModel
    return _text(FNetModel, FNetConfig(hidden_size=64, num_hidden_layers=2, intermediate_size=128, vocab_size=1000,
                                       max_position_embeddings=128), mask=False)


# --- more decoders (causal LMs, MoE) ----------------------------------------------------------

@arch("gpt-j", "transformers", TEXT)
def _gptj():
    from transformers import GPTJConfig, GPTJModel
    return _text(GPTJModel, GPTJConfig(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, vocab_size=1000, n_positions=128),
                 use_cache=False)


@arch("gpt-neo", "transformers", TEXT)
def _gpt_neo():
    from transformers import GPTNeoConfig, GPTNeoModel
    return _text(GPTNeoModel, GPTNeoConfig(hidden_size=64, num_layers=2, num_heads=4, window_size=8,
                                           attention_types=[[["global", "local"], 1]], vocab_size=1000,
                                           max_position_embeddings=128), use_cache=False)


@arch("codegen", "transformers", TEXT)
def _codegen():
    from transformers import CodeGenConfig, CodeGenModel
    return _text(CodeGenModel, CodeGenConfig(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, vocab_size=1000,
                                             n_positions=128, n_ctx=128), use_cache=False)


@arch("gpt-bigcode", "transformers", TEXT)
def _gpt_bigcode():
    from transformers import GPTBigCodeConfig, GPTBigCodeModel
    return _text(GPTBigCodeModel, GPTBigCodeConfig(n_embd=64, n_layer=2, n_head=4, vocab_size=1000, n_positions=128,
                                                   multi_query=True), use_cache=False)


@arch("mpt", "transformers", TEXT)
def _mpt():
    from transformers import MptConfig, MptModel
    return _text(MptModel, MptConfig(d_model=64, n_heads=4, n_layers=2, expansion_ratio=2, max_seq_len=128,
                                     vocab_size=1000), use_cache=False)


@arch("xglm", "transformers", TEXT)
def _xglm():
    from transformers import XGLMConfig, XGLMModel
    return _text(XGLMModel, XGLMConfig(d_model=64, num_layers=2, attention_heads=4, ffn_dim=128, vocab_size=1000,
                                       max_position_embeddings=128), use_cache=False)


@arch("biogpt", "transformers", TEXT)
def _biogpt():
    from transformers import BioGptConfig, BioGptModel
    return _text(BioGptModel, BioGptConfig(**SMALL), use_cache=False)


EAGER = {"experts_implementation": "eager"}


def _llama_like(model, config, **extra):
    """A decoder configured like Llama (GQA, rotary), small."""
    def build():
        import transformers
        cfg = getattr(transformers, config)(**{**LLAMA_LIKE, **extra})
        return _text(getattr(transformers, model), cfg, use_cache=False)
    return build


for _name, _model, _config, _extra in [
    ("starcoder2", "Starcoder2Model", "Starcoder2Config", {}),
    ("stablelm", "StableLmModel", "StableLmConfig", {}),
    ("phi3", "Phi3Model", "Phi3Config", {"pad_token_id": 0}),
    ("qwen3", "Qwen3Model", "Qwen3Config", {"head_dim": 16}),
    ("gemma2", "Gemma2Model", "Gemma2Config", {"head_dim": 16, "sliding_window": 8}),
    ("gemma3-text", "Gemma3TextModel", "Gemma3TextConfig", {"head_dim": 16, "sliding_window": 8}),
    ("olmo", "OlmoModel", "OlmoConfig", {}),
    ("olmo2", "Olmo2Model", "Olmo2Config", {}),
    ("granite", "GraniteModel", "GraniteConfig", {}),
    ("cohere", "CohereModel", "CohereConfig", {}),
    ("smollm3", "SmolLM3Model", "SmolLM3Config", {"pad_token_id": 0}),
    # MoE: the "eager" experts (a loop over experts, as transformers 4 had); the default grouped
    # experts count tokens with aten::histc, which the TorchScript exporter cannot export
    ("mixtral", "MixtralModel", "MixtralConfig", {"num_local_experts": 4, "num_experts_per_tok": 2, **EAGER}),
    ("qwen2-moe", "Qwen2MoeModel", "Qwen2MoeConfig", {"num_experts": 4, "num_experts_per_tok": 2,
                                                      "moe_intermediate_size": 64,
                                                      "shared_expert_intermediate_size": 64, **EAGER}),
    ("qwen3-moe", "Qwen3MoeModel", "Qwen3MoeConfig", {"num_experts": 4, "num_experts_per_tok": 2,
                                                      "moe_intermediate_size": 64, "head_dim": 16, **EAGER}),
    ("olmoe", "OlmoeModel", "OlmoeConfig", {"num_experts": 4, "num_experts_per_tok": 2, **EAGER}),
]:
    arch(_name, "transformers", TEXT)(_llama_like(_model, _config, **_extra))


# --- full encoder-decoders (encoder and decoder in one graph; decoder_input_ids an input) -----

SEQ2SEQ = {**TEXT, "decoder_input_ids": {0: "batch", 1: "decoder_seq"}}
DEC = 8


def _seq2seq(model_cls, config, vocab: int = 1000):
    import torch

    torch.manual_seed(0)
    model = model_cls(config).eval()
    m = torch.ones(2, SEQ, dtype=torch.int64)
    m[1, SEQ - 4:] = 0
    inputs = {"input_ids": torch.randint(3, vocab, (2, SEQ)), "attention_mask": m,
              "decoder_input_ids": torch.randint(3, vocab, (2, DEC))}
    return _wrap(model, list(inputs), use_cache=False), inputs


BART_LIKE = {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
             "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "vocab_size": 1000,
             "max_position_embeddings": 128, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
             "decoder_start_token_id": 2}
T5_SMALL = {"d_model": 64, "d_kv": 16, "d_ff": 128, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 4,
            "vocab_size": 1000, "decoder_start_token_id": 0}


@arch("t5", "transformers", SEQ2SEQ)
def _t5_full():
    from transformers import T5Config, T5ForConditionalGeneration
    return _seq2seq(T5ForConditionalGeneration, T5Config(**T5_SMALL))


@arch("mt5", "transformers", SEQ2SEQ)
def _mt5():
    from transformers import MT5Config, MT5ForConditionalGeneration
    return _seq2seq(MT5ForConditionalGeneration, MT5Config(**T5_SMALL, feed_forward_proj="gated-gelu"))


@arch("bart", "transformers", SEQ2SEQ)
def _bart_full():
    from transformers import BartConfig, BartForConditionalGeneration
    return _seq2seq(BartForConditionalGeneration, BartConfig(**BART_LIKE))


@arch("mbart", "transformers", SEQ2SEQ)
def _mbart():
    from transformers import MBartConfig, MBartForConditionalGeneration
    return _seq2seq(MBartForConditionalGeneration, MBartConfig(**BART_LIKE))


@arch("marian", "transformers", SEQ2SEQ)
def _marian():
    from transformers import MarianConfig, MarianMTModel
    return _seq2seq(MarianMTModel, MarianConfig(**{**BART_LIKE, "pad_token_id": 999}, decoder_vocab_size=1000))


@arch("pegasus", "transformers", SEQ2SEQ)
def _pegasus():
    from transformers import PegasusConfig, PegasusForConditionalGeneration
    return _seq2seq(PegasusForConditionalGeneration, PegasusConfig(**BART_LIKE))


@arch("m2m100", "transformers", SEQ2SEQ)
def _m2m100():
    from transformers import M2M100Config, M2M100ForConditionalGeneration
    return _seq2seq(M2M100ForConditionalGeneration, M2M100Config(**BART_LIKE))


@arch("blenderbot-small", "transformers", SEQ2SEQ)
def _blenderbot_small():
    from transformers import BlenderbotSmallConfig, BlenderbotSmallForConditionalGeneration
    return _seq2seq(BlenderbotSmallForConditionalGeneration, BlenderbotSmallConfig(**BART_LIKE))


@arch("whisper", "transformers", {"input_features": {0: "batch"},
                                  "decoder_input_ids": {0: "batch", 1: "decoder_seq"},
                                  "decoder_attention_mask": {0: "batch", 1: "decoder_seq"}})
def _whisper_full():
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(0)
    config = WhisperConfig(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                           num_mel_bins=80, max_source_positions=32, max_target_positions=64, vocab_size=1000,
                           pad_token_id=0, bos_token_id=0, eos_token_id=0, decoder_start_token_id=0)
    model = WhisperForConditionalGeneration(config).eval()
    # a decoder mask: without one transformers looks for packed sequences with aten::diff, which
    # the TorchScript exporter cannot export
    inputs = {"input_features": torch.randn(1, 80, 64), "decoder_input_ids": torch.randint(1, 1000, (1, DEC)),
              "decoder_attention_mask": torch.ones(1, DEC, dtype=torch.int64)}
    return _wrap(model, list(inputs), use_cache=False), inputs


@arch("speech2text", "transformers", {"input_features": {0: "batch", 1: "frames"},
                                      "decoder_input_ids": {0: "batch", 1: "decoder_seq"}})
def _speech2text():
    import torch
    from transformers import Speech2TextConfig, Speech2TextForConditionalGeneration

    torch.manual_seed(0)
    config = Speech2TextConfig(**{k: v for k, v in BART_LIKE.items() if k != "max_position_embeddings"},
                               max_source_positions=128, max_target_positions=64, input_feat_per_channel=40,
                               conv_channels=64, num_conv_layers=2)
    model = Speech2TextForConditionalGeneration(config).eval()
    inputs = {"input_features": torch.randn(1, 64, 40), "decoder_input_ids": torch.randint(3, 1000, (1, DEC))}
    return _wrap(model, list(inputs), use_cache=False), inputs


# --- more vision ------------------------------------------------------------------------------

@arch("vit-mae", "transformers")
def _vit_mae():
    import torch
    from transformers import ViTMAEConfig, ViTMAEModel

    torch.manual_seed(0)
    model = ViTMAEModel(ViTMAEConfig(**VIT)).eval()
    # the random masking's noise is an input, so the graph is deterministic
    inputs = {"pixel_values": torch.randn(1, 3, 64, 64), "noise": torch.rand(1, 16)}
    return _wrap(model, list(inputs), ("last_hidden_state", "ids_restore")), inputs


@arch("dpt", "transformers")
def _dpt():
    from transformers import DPTConfig, DPTForDepthEstimation
    return _image(DPTForDepthEstimation, DPTConfig(**{**VIT, "num_hidden_layers": 4}, backbone_out_indices=[0, 1, 2, 3],
                                                   neck_hidden_sizes=[16, 32, 64, 64],
                                                   fusion_hidden_size=32, head_hidden_size=16))


@arch("data2vec-vision", "transformers")
def _data2vec_vision():
    from transformers import Data2VecVisionConfig, Data2VecVisionModel
    return _image(Data2VecVisionModel, Data2VecVisionConfig(**VIT, use_relative_position_bias=True))


@arch("siglip-vision", "transformers")
def _siglip_vision():
    from transformers import SiglipVisionConfig, SiglipVisionModel
    return _image(SiglipVisionModel, SiglipVisionConfig(**VIT))


@arch("yolos", "transformers")
def _yolos():
    from transformers import YolosConfig, YolosModel
    return _image(YolosModel, YolosConfig(**{**VIT, "image_size": [64, 64]}, num_detection_tokens=10))


@arch("swinv2", "transformers")
def _swinv2():
    from transformers import Swinv2Config, Swinv2Model
    return _image(Swinv2Model, Swinv2Config(image_size=64, patch_size=4, embed_dim=32, depths=[2, 2],
                                            num_heads=[2, 4], window_size=4))


@arch("cvt", "transformers")
def _cvt():
    from transformers import CvtConfig, CvtModel
    return _image(CvtModel, CvtConfig(embed_dim=[16, 32, 64], depth=[1, 2, 3], num_heads=[1, 2, 4]))


@arch("pvt-v2", "transformers")
def _pvt_v2():
    from transformers import PvtV2Config, PvtV2Model
    return _image(PvtV2Model, PvtV2Config(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                                          num_attention_heads=[1, 2, 4, 8]))


@arch("focalnet", "transformers")
def _focalnet():
    from transformers import FocalNetConfig, FocalNetModel
    return _image(FocalNetModel, FocalNetConfig(image_size=64, embed_dim=32, depths=[1, 1, 2, 1]))


@arch("bit", "transformers")
def _bit():
    from transformers import BitConfig, BitModel
    return _image(BitModel, BitConfig(embedding_size=64, hidden_sizes=[128, 256, 512, 1024], depths=[1, 1, 1, 1]))


@arch("glpn", "transformers")
def _glpn():
    from transformers import GLPNConfig, GLPNForDepthEstimation
    return _image(GLPNForDepthEstimation, GLPNConfig(depths=[1, 1, 1, 1], hidden_sizes=[16, 32, 64, 128],
                                                     num_attention_heads=[1, 2, 4, 8], decoder_hidden_size=32))


@arch("mobilevitv2", "transformers")
def _mobilevitv2():
    from transformers import MobileViTV2Config, MobileViTV2Model
    return _image(MobileViTV2Model, MobileViTV2Config(image_size=64, width_multiplier=0.5))


@arch("dinov2-registers", "transformers")
def _dinov2_registers():
    from transformers import Dinov2WithRegistersConfig, Dinov2WithRegistersModel
    return _image(Dinov2WithRegistersModel, Dinov2WithRegistersConfig(
        **{k: v for k, v in VIT.items() if k != "intermediate_size"}, mlp_ratio=2, num_register_tokens=4))


# --- more audio -------------------------------------------------------------------------------

AUDIO = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
         "conv_dim": (32, 32, 32), "conv_stride": (5, 2, 2), "conv_kernel": (10, 3, 3),
         "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 4}
WAVE = {"input_values": {0: "batch", 1: "samples"}}


def _audio(model, config, **extra):
    def build():
        import torch
        import transformers

        torch.manual_seed(0)
        m = getattr(transformers, model)(getattr(transformers, config)(**{**AUDIO, **extra})).eval()
        return _wrap(m, ["input_values"]), {"input_values": torch.randn(1, 1600)}
    return build


for _name, _model, _config, _extra in [
    ("hubert", "HubertModel", "HubertConfig", {}),
    ("wav2vec2-conformer", "Wav2Vec2ConformerModel", "Wav2Vec2ConformerConfig",
     {"position_embeddings_type": "relative", "conv_depthwise_kernel_size": 7}),
    ("wavlm", "WavLMModel", "WavLMConfig", {"num_buckets": 32, "max_bucket_distance": 64}),
    ("sew", "SEWModel", "SEWConfig", {"squeeze_factor": 2}),
    ("unispeech-sat", "UniSpeechSatModel", "UniSpeechSatConfig", {}),
    ("data2vec-audio", "Data2VecAudioModel", "Data2VecAudioConfig", {"conv_pos_kernel_size": 5,
                                                                     "num_conv_pos_embeddings": 5}),
]:
    arch(_name, "transformers", WAVE)(_audio(_model, _config, **_extra))


@arch("ast", "transformers")
def _ast():
    import torch
    from transformers import ASTConfig, ASTModel

    torch.manual_seed(0)
    model = ASTModel(ASTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                               max_length=64, num_mel_bins=32)).eval()
    return _wrap(model, ["input_values"]), {"input_values": torch.randn(1, 64, 32)}
