"""Acceptance: torchvision detection models (random weights, BatchNorm statistics from random
images, a low score threshold so that boxes come out) exported with torch.onnx (opset 17),
compiled by hetc for the CPU and compared with onnxruntime: the same number of detections, and
boxes, scores and labels that agree. Their NonZero, TopK (run-time k), NonMaxSuppression and
RoiAlign outputs have run-time sizes, and SSDlite's and RetinaNet's batched NMS is an ``If``.

The export needs torchvision (tests/detection_models.py). PyPI's torchvision wheels need a CUDA
torch, which the project's venv does not have: ``HETC_TORCHVISION_PYTHON`` names a Python that
has torch and torchvision to export with (default: /work/zoovenv/bin/python where it exists);
without one the tests skip."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ort_run

import hetc

pytestmark = [pytest.mark.torch, pytest.mark.slow]
HERE = Path(__file__).resolve().parent


def _exporter() -> str | None:
    named = os.environ.get("HETC_TORCHVISION_PYTHON")
    if named:
        return named
    if importlib.util.find_spec("torch") and importlib.util.find_spec("torchvision"):
        return sys.executable
    return "/work/zoovenv/bin/python" if Path("/work/zoovenv/bin/python").exists() else None


def _export(name: str, out: Path) -> tuple[Path, dict]:
    python = _exporter()
    if python is None:
        pytest.skip("torchvision is needed to export the detection models (set HETC_TORCHVISION_PYTHON)")
    code = ("import sys, numpy as np, detection_models as d\n"
            "p, x = d.export(sys.argv[1], sys.argv[2])\n"
            "np.savez(str(p) + '.npz', **x)\n")
    done = subprocess.run([python, "-c", code, name, str(out)], check=False, cwd=HERE, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    path = out / f"{name}.onnx"
    return path, dict(np.load(str(path) + ".npz"))


def _compare(name: str, tmp_path) -> dict[str, float]:
    path, inputs = _export(name, tmp_path)
    expected = ort_run(path, inputs)
    got = list(hetc.compile(path, target="cpu").run(inputs).values())
    assert len(got) == len(expected)
    assert expected[0].shape[0] > 0, "no detections: the comparison would be empty"
    errors = {}
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g.shape == e.shape and g.dtype == e.dtype, (i, g.shape, e.shape, g.dtype, e.dtype)
        if e.dtype.kind == "f":
            errors[i] = float(np.max(np.abs(g - e))) if e.size else 0.0
            scale = max(float(np.max(np.abs(e))), 1.0)
            assert errors[i] <= 1e-4 * scale, f"output {i}: max abs error {errors[i]:.3e}"
        else:
            np.testing.assert_array_equal(g, e)  # labels
    return errors


def _edges(masks: np.ndarray) -> np.ndarray:
    """Pixels of binary masks ``[n, h, w]`` whose 3x3 neighbourhood holds both values."""
    padded = np.pad(masks, ((0, 0), (1, 1), (1, 1)))
    h, w = masks.shape[1:]
    window = np.stack([padded[:, i:i + h, j:j + w] for i in range(3) for j in range(3)])
    return window.max(0) != window.min(0)


SPREADS = 4  # how many of onnxruntime's own spreads hetc may differ by (Mask R-CNN: seen 2.9)


def _compare_masks(path: Path, inputs: dict) -> None:
    """Mask R-CNN against onnxruntime, within onnxruntime's own spread: its optimized and
    unoptimized runs of this random-weight model differ by 1.4e-4 in scores and 1.1e-4 x 128 in
    boxes, more than 1e-4. So detections are matched (same label, scores within that spread:
    near-ties may come out in either order; at the top-100 cutoff, up to two scored within the
    spread of the last one kept may differ), boxes and scores must agree within ``SPREADS``
    times onnxruntime's spread (the 100th detection's score differed by 4.0e-4 against a
    spread of 1.4e-4), and masks (pasted at boxes rounded to pixels) may differ only on mask
    borders, where a sub-pixel move of the box shifts the edge."""
    expected = ort_run(path, inputs)
    unoptimized = ort_run(path, inputs, optimize=False)
    boxes, labels, scores, masks = (np.asarray(v) for v in hetc.compile(path, target="cpu").run(inputs).values())
    assert boxes.shape == expected[0].shape and masks.shape == expected[3].shape and len(boxes) > 0
    spread_box = max(float(np.abs(expected[0] - unoptimized[0]).max()), 1e-4 * float(np.abs(expected[0]).max()))
    spread_score = max(float(np.abs(expected[2] - unoptimized[2]).max()), 1e-4)
    # the model keeps its 100 best: a detection scored within the spread of the last one kept
    # may be in one list and, in its place, another in the other
    cutoff = float(min(expected[2].min(), scores.min())) + SPREADS * spread_score
    pairs = {}
    for i in range(len(boxes)):
        close = [j for j in range(len(boxes)) if expected[1][j] == labels[i]
                 and abs(expected[2][j] - scores[i]) <= SPREADS * spread_score and j not in pairs.values()]
        if not close:
            assert scores[i] <= cutoff, f"detection {i} (label {labels[i]}, score {scores[i]:.5f}) has no counterpart"
            continue
        pairs[i] = min(close, key=lambda j: float(np.abs(expected[0][j] - boxes[i]).max()))
    unpaired = set(range(len(boxes))) - set(pairs.values())
    assert all(expected[2][j] <= cutoff for j in unpaired), "onnxruntime's detections do not pair up"
    mine_idx, order = list(pairs), list(pairs.values())
    assert len(mine_idx) >= len(boxes) - 2, f"only {len(mine_idx)} of {len(boxes)} detections pair up"
    assert np.abs(boxes[mine_idx] - expected[0][order]).max() <= SPREADS * spread_box
    assert np.abs(scores[mine_idx] - expected[2][order]).max() <= SPREADS * spread_score
    mine, theirs = masks[mine_idx][:, 0] > 0.5, expected[3][order][:, 0] > 0.5
    off_edge = (mine != theirs) & ~(_edges(mine) | _edges(theirs))
    assert not off_edge.any(), f"{int(off_edge.sum())} mask pixels differ away from a mask border"


@pytest.mark.parametrize("name", [
    "ssdlite320_mobilenet_v3_large", "fasterrcnn_mobilenet_v3_large_320_fpn", "retinanet_resnet50_fpn",
    "keypointrcnn_resnet50_fpn"])
def test_detection_model_matches_onnxruntime(name, tmp_path):
    _compare(name, tmp_path)


def test_mask_rcnn_matches_onnxruntime(tmp_path):
    """Its masks come out of paste_masks_in_image's Loop, whose state grows by a mask per
    iteration (the export declares it at its first iteration's size)."""
    _compare_masks(*_export("maskrcnn_resnet50_fpn", tmp_path))
