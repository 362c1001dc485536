"""torchvision architectures (``torchvision.models.get_model(name, weights=None)``): classification,
detection, segmentation, video and optical flow, exported by torch.onnx.export as its users do.

torchvision's wheels are built against a CUDA torch: next to the CPU torch of the project's venv
they fail to import. Export them from a venv with ``torch==2.14.1 torchvision==0.29.1`` (the
harness's ``--python``; see benchmarks/model_zoo.py)."""

from __future__ import annotations

from . import Arch, bn_stats, register

STATIC: dict = {}  # every dim static: detection takes a list of images; RAFT two images


def _get(name: str, **kwargs):
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None, **kwargs).eval()
    bn_stats(model)
    return model


def _classify(name: str, size: int = 96, **kwargs):
    def build():
        import torch
        return _get(name, **kwargs), {"x": torch.randn(1, 3, size, size)}
    return build


def _segment(name: str, size: int = 96, **kwargs):
    def build():
        import torch

        class Out(torch.nn.Module):  # the "out" entry of the dict a segmentation model returns
            def __init__(self) -> None:
                super().__init__()
                self.model = _get(name, weights_backbone=None, num_classes=5, **kwargs)

            def forward(self, x):
                return self.model(x)["out"]

        return Out().eval(), {"x": torch.randn(1, 3, size, size)}
    return build


def calibrate_detector(model, generator) -> None:
    """BatchNorm statistics of a detector's backbone from random images. With a constructor's
    (or ``bn_stats``'s) the backbone's features nearly vanish: most boxes get the same features,
    so scores tie exactly, and which of the tied boxes come out depends on the last bit of each
    runtime's arithmetic, not on the compiler being right. Training-mode passes of the backbone
    set them (cumulative averages); then scores are distinct and outputs comparable."""
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.backbone.train()
    with torch.no_grad():
        for _ in range(2):
            images, _ = model.transform([torch.rand(3, 320, 320, generator=generator) for _ in range(2)])
            model.backbone(images.tensors)
    model.eval()


def _detect(name: str, size: int = 128, fields=("boxes", "scores", "labels"), num_classes: int = 5, **kwargs):
    def build():
        import torch

        class Detect(torch.nn.Module):  # one image in, the first detection dict's fields out
            def __init__(self) -> None:
                super().__init__()
                self.model = _get(name, weights_backbone=None, num_classes=num_classes, **kwargs)
                calibrate_detector(self.model, torch.Generator().manual_seed(2))

            def forward(self, image):
                out = self.model([image])[0]
                return tuple(out[f] for f in fields)

        torch.manual_seed(1)
        return Detect().eval(), {"image": torch.rand(3, size, size)}
    return build


def _video(name: str, frames: int = 8, size: int = 64, **kwargs):
    def build():
        import torch
        return _get(name, **kwargs), {"video": torch.randn(1, 3, frames, size, size)}
    return build


def _raft():
    import torch

    class Flow(torch.nn.Module):  # the last of RAFT's flow refinements
        def __init__(self) -> None:
            super().__init__()
            self.model = _get("raft_small")

        def forward(self, image1, image2):
            return self.model(image1, image2, num_flow_updates=4)[-1]

    torch.manual_seed(0)
    # RAFT's correlation pyramid needs feature maps (1/8 of the image) of at least 16
    return Flow().eval(), {"image1": torch.randn(1, 3, 128, 128), "image2": torch.randn(1, 3, 128, 128)}


_CLASSIFY = [
    ("resnet18", 96, {}), ("resnet50", 96, {}), ("resnext50_32x4d", 96, {}), ("wide_resnet50_2", 96, {}),
    ("mobilenet_v2", 96, {}), ("mobilenet_v3_small", 96, {}), ("mobilenet_v3_large", 96, {}),
    ("efficientnet_b0", 96, {}), ("efficientnet_v2_s", 96, {}), ("regnet_y_400mf", 96, {}),
    ("regnet_x_400mf", 96, {}), ("convnext_tiny", 96, {}), ("densenet121", 96, {}),
    ("inception_v3", 128, {"aux_logits": False, "init_weights": False}),
    ("googlenet", 96, {"aux_logits": False, "init_weights": False}), ("shufflenet_v2_x1_0", 96, {}),
    ("squeezenet1_1", 96, {}), ("mnasnet1_0", 96, {}), ("vgg11", 224, {}), ("vgg11_bn", 224, {}),
    ("alexnet", 224, {}), ("vit_b_16", 64, {"image_size": 64}), ("swin_t", 64, {}), ("swin_v2_t", 64, {}),
    ("maxvit_t", 224, {}),
]
for _name, _size, _kw in _CLASSIFY:
    register(Arch(f"tv-{_name}", "torchvision", _classify(_name, _size, **_kw)))

for _name, _size, _kw in [
    ("fcn_resnet50", 64, {"aux_loss": False}), ("deeplabv3_mobilenet_v3_large", 96, {"aux_loss": False}),
    ("deeplabv3_resnet50", 64, {"aux_loss": False}), ("lraspp_mobilenet_v3_large", 96, {}),
]:
    register(Arch(f"tv-{_name}", "torchvision", _segment(_name, _size, **_kw)))

_SMALL_RCNN = {"min_size": 128, "max_size": 128, "box_score_thresh": 0.0, "box_detections_per_img": 20}
for _name, _kw, _fields in [
    ("ssdlite320_mobilenet_v3_large", {"score_thresh": 0.0, "detections_per_img": 20}, None),
    ("fasterrcnn_mobilenet_v3_large_320_fpn", _SMALL_RCNN, None),
    ("retinanet_resnet50_fpn", {"min_size": 128, "max_size": 128, "score_thresh": 0.0, "detections_per_img": 20},
     None),
    ("fcos_resnet50_fpn", {"min_size": 128, "max_size": 128, "score_thresh": 0.0, "detections_per_img": 20}, None),
    ("maskrcnn_resnet50_fpn", _SMALL_RCNN, ("boxes", "scores", "labels", "masks")),
    ("keypointrcnn_resnet50_fpn", {**_SMALL_RCNN, "num_keypoints": 5, "num_classes": 2},
     ("boxes", "scores", "labels", "keypoints")),
]:
    register(Arch(f"tv-{_name}", "torchvision", _detect(_name, fields=_fields or ("boxes", "scores", "labels"), **_kw),
                  dynamic=STATIC))

for _name, _frames, _size in [("r3d_18", 8, 64), ("mc3_18", 8, 64), ("r2plus1d_18", 8, 64), ("s3d", 16, 224),
                              ("mvit_v2_s", 16, 224)]:
    register(Arch(f"tv-{_name}", "torchvision", _video(_name, _frames, _size)))

register(Arch("tv-raft_small", "torchvision", _raft, dynamic=STATIC))
