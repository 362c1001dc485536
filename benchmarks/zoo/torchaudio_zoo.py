"""torchaudio architectures (``torchaudio.models``) in small configurations, exported by
torch.onnx.export. torchaudio 2.11 (the newest on PyPI) loads a C++ extension built against a
CUDA torch: export from the torchvision venv (see torchvision_zoo), where it imports."""

from __future__ import annotations

from . import arch


def _first(model, n_inputs: int):
    """The model's first output (torchaudio models return (output, lengths, ...))."""
    import torch

    class First(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args):
            return self.model(*args[:n_inputs])[0]

    return First().eval()


def _wav2vec2(**kw):
    import torch
    from torchaudio.models import wav2vec2_model

    torch.manual_seed(0)
    model = wav2vec2_model(extractor_conv_layer_config=[(32, 10, 5), (32, 3, 2), (32, 3, 2)],
                           encoder_embed_dim=64, encoder_projection_dropout=0.0, encoder_pos_conv_kernel=16,
                           encoder_pos_conv_groups=4, encoder_num_layers=2, encoder_num_heads=4,
                           encoder_attention_dropout=0.0, encoder_ff_interm_features=128,
                           encoder_ff_interm_dropout=0.0, encoder_dropout=0.0, encoder_layer_drop=0.0,
                           aux_num_out=None, **kw).eval()
    return _first(model, 1), {"waveforms": torch.randn(1, 1600)}


WAVE = {"waveforms": {0: "batch", 1: "samples"}}


@arch("ta-wav2vec2", "torchaudio", WAVE)
def _ta_wav2vec2():  # wav2vec2 / HuBERT base: group-norm feature extractor, post-norm encoder
    return _wav2vec2(extractor_mode="group_norm", extractor_conv_bias=False, encoder_layer_norm_first=False)


@arch("ta-hubert-large", "torchaudio", WAVE)
def _ta_hubert_large():  # HuBERT / wav2vec2 large: layer-norm feature extractor, pre-norm encoder
    return _wav2vec2(extractor_mode="layer_norm", extractor_conv_bias=True, encoder_layer_norm_first=True)


@arch("ta-wavlm", "torchaudio", WAVE)
def _ta_wavlm():
    import torch
    from torchaudio.models import wavlm_model

    torch.manual_seed(0)
    model = wavlm_model(extractor_mode="group_norm", extractor_conv_layer_config=[(32, 10, 5), (32, 3, 2), (32, 3, 2)],
                        extractor_conv_bias=False, encoder_embed_dim=64, encoder_projection_dropout=0.0,
                        encoder_pos_conv_kernel=16, encoder_pos_conv_groups=4, encoder_num_layers=2,
                        encoder_num_heads=4, encoder_num_buckets=32, encoder_max_distance=64,
                        encoder_attention_dropout=0.0, encoder_ff_interm_features=128, encoder_ff_interm_dropout=0.0,
                        encoder_dropout=0.0, encoder_layer_norm_first=False, encoder_layer_drop=0.0,
                        aux_num_out=None).eval()
    return _first(model, 1), {"waveforms": torch.randn(1, 1600)}


@arch("ta-conformer", "torchaudio")
def _ta_conformer():
    import torch
    from torchaudio.models import Conformer

    torch.manual_seed(0)
    model = Conformer(input_dim=32, num_heads=4, ffn_dim=64, num_layers=2, depthwise_conv_kernel_size=7).eval()
    return _first(model, 2), {"input": torch.randn(2, 20, 32), "lengths": torch.tensor([20, 15])}


@arch("ta-emformer", "torchaudio")
def _ta_emformer():
    import torch
    from torchaudio.models import Emformer

    torch.manual_seed(0)
    model = Emformer(input_dim=32, num_heads=4, ffn_dim=64, num_layers=2, segment_length=4, left_context_length=8,
                     right_context_length=2).eval()
    return _first(model, 2), {"input": torch.randn(2, 18, 32), "lengths": torch.tensor([16, 12])}


@arch("ta-emformer-rnnt", "torchaudio")
def _ta_emformer_rnnt():  # Emformer transcriber, LSTM predictor, joiner
    import torch
    from torchaudio.models import emformer_rnnt_model

    torch.manual_seed(0)
    model = emformer_rnnt_model(
        input_dim=32, encoding_dim=32, num_symbols=50, segment_length=4, right_context_length=2,
        time_reduction_input_dim=32, time_reduction_stride=2, transformer_num_heads=4, transformer_ffn_dim=64,
        transformer_num_layers=2, transformer_dropout=0.0, transformer_activation="gelu",
        transformer_left_context_length=8, transformer_max_memory_size=0,
        transformer_weight_init_scale_strategy="depthwise", transformer_tanh_on_mem=True, symbol_embedding_dim=32,
        num_lstm_layers=2, lstm_layer_norm=True, lstm_layer_norm_epsilon=1e-5, lstm_dropout=0.0).eval()
    inputs = {"sources": torch.randn(2, 20, 32), "source_lengths": torch.tensor([20, 16]),
              "targets": torch.randint(0, 50, (2, 6)), "target_lengths": torch.tensor([6, 4])}
    return _first(model, 4), inputs


@arch("ta-conv-tasnet", "torchaudio", {"input": {0: "batch"}})
def _ta_conv_tasnet():
    import torch
    from torchaudio.models import ConvTasNet

    torch.manual_seed(0)
    model = ConvTasNet(num_sources=2, enc_kernel_size=16, enc_num_feats=64, msk_kernel_size=3, msk_num_feats=32,
                       msk_num_hidden_feats=64, msk_num_layers=2, msk_num_stacks=1).eval()
    return model, {"input": torch.randn(1, 1, 800)}


@arch("ta-deepspeech", "torchaudio")
def _ta_deepspeech():  # fully connected layers and a bidirectional RNN
    import torch
    from torchaudio.models import DeepSpeech

    torch.manual_seed(0)
    return DeepSpeech(n_feature=40, n_hidden=64, n_class=30).eval(), {"x": torch.randn(1, 1, 50, 40)}


@arch("ta-wav2letter", "torchaudio")
def _ta_wav2letter():
    import torch
    from torchaudio.models import Wav2Letter

    torch.manual_seed(0)
    return Wav2Letter(num_classes=30, input_type="mfcc", num_features=40).eval(), {"x": torch.randn(1, 40, 100)}
