"""torchvision detection models with random weights, exported to ONNX (opset 17, TorchScript
exporter, static 1x3xHxW input) for tests/test_detection_models.py.

The torchvision wheel on PyPI links its C++ ops against CUDA torch; with the CPU torch of this
project ``torchvision._C`` does not load, and ``import torchvision`` fails on the missing
``torchvision::nms``. ``import_torchvision`` then defines ``torchvision::nms`` and
``torchvision::roi_align`` in Python (torch.library) before the import, so that the models run in
torch and the exporter's symbolic functions turn them into ONNX NonMaxSuppression and RoiAlign,
exactly as with the C++ ops.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from zoo.torchvision_zoo import calibrate_detector  # the zoo calibrates its detectors alike

# name -> (constructor, keyword arguments): small images, a low score threshold so that boxes
# come out of random weights.
MODELS = {
    "ssdlite320_mobilenet_v3_large": ("ssdlite320_mobilenet_v3_large", dict(score_thresh=0.001), 320),
    "fasterrcnn_mobilenet_v3_large_320_fpn": ("fasterrcnn_mobilenet_v3_large_320_fpn",
                                              dict(box_score_thresh=0.001), 320),
    "retinanet_resnet50_fpn": ("retinanet_resnet50_fpn", dict(score_thresh=0.001, min_size=128, max_size=128), 128),
    "maskrcnn_resnet50_fpn": ("maskrcnn_resnet50_fpn", dict(box_score_thresh=0.001, min_size=128, max_size=128), 128),
    "keypointrcnn_resnet50_fpn": ("keypointrcnn_resnet50_fpn",
                                  dict(box_score_thresh=0.001, min_size=128, max_size=128), 128),
}


def _nms(boxes, scores, iou_threshold: float):
    """torchvision's NMS (indices kept, by decreasing score), in torch."""
    import torch

    order = torch.argsort(scores, descending=True, stable=True)
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    keep = []
    suppressed = torch.zeros(len(order), dtype=torch.bool)
    for pos, i in enumerate(order.tolist()):
        if suppressed[pos]:
            continue
        keep.append(i)
        rest = order[pos + 1:]
        w = (torch.minimum(x2[i], x2[rest]) - torch.maximum(x1[i], x1[rest])).clamp(min=0)
        h = (torch.minimum(y2[i], y2[rest]) - torch.maximum(y1[i], y1[rest])).clamp(min=0)
        inter = w * h
        iou = inter / (areas[i] + areas[rest] - inter)
        suppressed[pos + 1:] |= iou > iou_threshold
    return torch.tensor(keep, dtype=torch.int64)


def import_torchvision():
    """torchvision, with Python ``nms``/``roi_align`` ops where its C++ extension does not load."""
    import torch

    if not hasattr(torch.ops, "torchvision") or not hasattr(torch.ops.torchvision, "nms"):
        try:
            torch.ops.torchvision.nms  # noqa: B018  (the C++ extension may be loaded already)
        except (AttributeError, RuntimeError):
            if not _load_extension():
                _define_ops()
    import torchvision
    import torchvision.extension

    if not torchvision.extension._has_ops():  # the Python ops stand in for the C++ ones
        torchvision.extension._has_ops = _has_ops
        sys.modules["torchvision.ops.roi_align"]._has_ops = _has_ops  # (ops.roi_align: the function)
    return torchvision


_LIBRARY = None


def _load_extension() -> bool:
    """Load torchvision's C++ ops where they match this torch (a torchvision built for it)."""
    import importlib.util

    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return False
    for lib in Path(spec.submodule_search_locations[0]).glob("_C*.so"):
        try:
            torch.ops.load_library(str(lib))
            return True
        except (OSError, RuntimeError):
            return False
    return False


def _has_ops() -> bool:  # a plain function: torch.jit scripts it while tracing batched_nms
    return True


def _define_ops() -> None:
    import torch

    global _LIBRARY
    lib = _LIBRARY = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
               "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")

    def roi_align(x, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
        from torchvision.ops.roi_align import _roi_align

        return _roi_align(x, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)

    lib.impl("nms", _nms, "CompositeExplicitAutograd")
    lib.impl("roi_align", roi_align, "CompositeExplicitAutograd")
    lib.impl("qnms", _nms, "CompositeExplicitAutograd")


def _build(name: str, seed: int):
    """The random-weight model (BatchNorm statistics calibrated) and its input image."""
    import torch

    tv = import_torchvision()
    ctor, kwargs, size = MODELS[name]
    torch.manual_seed(seed)
    model = getattr(tv.models.detection, ctor)(weights=None, weights_backbone=None, **kwargs).eval()
    calibrate_detector(model, torch.Generator().manual_seed(seed + 2))
    x = torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(seed + 1))
    return model, x


def export(name: str, out_dir: Path, seed: int = 0) -> tuple[Path, dict[str, np.ndarray]]:
    """Write ``<name>.onnx`` (random weights) to ``out_dir``; returns it and its inputs."""
    import torch

    model, x = _build(name, seed)
    path = Path(out_dir) / f"{name}.onnx"
    with torch.no_grad():
        torch.onnx.export(model, (x,), str(path), opset_version=17, dynamo=False,
                          input_names=["images"], do_constant_folding=True)
    return path, {"images": x.numpy()}


def reference(name: str, seed: int = 0) -> list[np.ndarray]:
    """The same model run by torch in float64 on the same image: the truth that float32 runs
    (hetc's, onnxruntime's) are measured against, in the export's output order (the order of
    the detection dict's keys)."""
    import torch

    model, x = _build(name, seed)
    with torch.no_grad():
        out = model.double()(x.double())[0]
    return [v.numpy() for v in out.values()]
