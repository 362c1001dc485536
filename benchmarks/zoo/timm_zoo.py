"""timm architectures (``timm.create_model(name, pretrained=False)``), one small member of each
family, exported by torch.onnx.export with a symbolic batch as timm's own onnx_export does.
timm needs torchvision (see torchvision_zoo for the venv that exports them)."""

from __future__ import annotations

from . import Arch, bn_stats, register


def _timm(name: str, size: int, **kwargs):
    def build():
        import timm
        import torch

        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False, num_classes=10, **kwargs).eval()
        bn_stats(model)
        return model, {"x": torch.randn(1, 3, size, size)}
    return build


# (family, model, input size, create_model kwargs): transformers take img_size where they can
FAMILIES = [
    ("resnet", "resnet18d", 96, {}),
    ("resnest", "resnest14d", 96, {}),
    ("res2net", "res2net50_26w_4s", 96, {}),
    ("regnet", "regnetx_002", 96, {}),
    ("efficientnet", "efficientnet_b0", 96, {}),
    ("tf-efficientnet", "tf_efficientnet_b0", 96, {}),  # TF "same" padding
    ("mobilenetv3", "mobilenetv3_small_100", 96, {}),
    ("mobilenetv4", "mobilenetv4_conv_small", 96, {}),
    ("mixnet", "mixnet_s", 96, {}),
    ("ghostnet", "ghostnet_100", 96, {}),
    ("rexnet", "rexnet_100", 96, {}),
    ("lcnet", "lcnet_050", 96, {}),
    ("fbnet", "fbnetc_100", 96, {}),
    ("densenet", "densenet121", 96, {}),
    ("dla", "dla34", 96, {}),
    ("dpn", "dpn68", 96, {}),
    ("cspnet", "cspresnet50", 96, {}),
    ("darknet", "darknet17", 96, {}),
    ("vovnet", "ese_vovnet19b_dw", 96, {}),
    ("hrnet", "hrnet_w18_small", 96, {}),
    ("repvgg", "repvgg_a0", 96, {}),
    ("selecsls", "selecsls42b", 96, {}),
    ("hardcorenas", "hardcorenas_a", 96, {}),
    ("nfnet", "nf_resnet26", 96, {}),
    ("inception-v3", "inception_v3", 128, {}),
    ("convnext", "convnext_atto", 96, {}),
    ("convnextv2", "convnextv2_atto", 96, {}),
    ("vit", "vit_tiny_patch16_224", 64, {"img_size": 64}),
    ("deit", "deit_tiny_distilled_patch16_224", 64, {"img_size": 64}),
    ("eva02", "eva02_tiny_patch14_224", 56, {"img_size": 56}),
    ("beit", "beit_base_patch16_224", 64, {"img_size": 64, "depth": 2}),
    ("swin", "swin_tiny_patch4_window7_224", 112, {"img_size": 112}),
    ("levit", "levit_128s", 224, {}),
    ("pit", "pit_ti_224", 224, {}),
    ("convit", "convit_tiny", 224, {}),
    ("cait", "cait_xxs24_224", 64, {"img_size": 64, "depth": 2}),
    ("xcit", "xcit_nano_12_p16_224", 64, {"img_size": 64}),
    ("coat", "coat_lite_tiny", 224, {}),
    ("twins", "twins_pcpvt_small", 224, {"depths": (1, 1, 1, 1)}),
    ("poolformer", "poolformer_s12", 96, {}),
    ("mobilevit", "mobilevit_xxs", 64, {}),
    ("edgenext", "edgenext_xx_small", 64, {}),
    ("efficientformer", "efficientformer_l1", 224, {}),
    ("efficientvit", "efficientvit_b0", 96, {}),
    ("fastvit", "fastvit_t8", 64, {}),
    ("repvit", "repvit_m1", 96, {}),
    ("tiny-vit", "tiny_vit_5m_224", 224, {}),
    ("maxvit", "maxvit_nano_rw_256", 256, {}),
    ("coatnet", "coatnet_nano_rw_224", 224, {}),
    ("gcvit", "gcvit_xxtiny", 224, {}),
    ("inception-next", "inception_next_tiny", 96, {}),
    ("hgnetv2", "hgnetv2_b0", 96, {}),
    ("sequencer", "sequencer2d_s", 224, {}),  # bidirectional LSTMs over rows and columns
]

for _family, _model, _size, _kw in FAMILIES:
    register(Arch(f"timm-{_family}", "timm", _timm(_model, _size, **_kw)))
