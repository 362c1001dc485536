"""Shared fixtures: example models written once per session, and a CLI runner."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import models as example_models  # noqa: E402


@pytest.fixture(scope="session")
def examples(tmp_path_factory) -> Path:
    """Directory with <name>.onnx and <name>_inputs.npz for every example model."""
    out = tmp_path_factory.mktemp("examples")
    for name in example_models.MODELS:
        example_models.write(name, out)
    return out


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


def run_cli(*args: str | Path, cwd: Path | None = None, timeout: float = 600) -> CliResult:
    """Run ``python -m hetc ARGS`` in a fresh process."""
    proc = subprocess.run([sys.executable, "-m", "hetc", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


def ort_run(model: onnx.ModelProto | Path, inputs: dict[str, np.ndarray], optimize: bool = True) -> list[np.ndarray]:
    import onnxruntime as ort

    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    options = ort.SessionOptions()
    options.log_severity_level = 3  # a Loop whose state grows warns at every iteration
    if not optimize:  # onnxruntime without its graph fusions: its own numerical spread
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, inputs)


def assert_close(actual: np.ndarray, expected: np.ndarray, rel: float = 1e-4) -> None:
    """max abs error <= rel * max |expected| (the project's acceptance criterion)."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    scale = max(float(np.max(np.abs(expected))), 1e-30) if expected.size else 1.0
    err = float(np.max(np.abs(actual.astype(np.float64) - expected))) if expected.size else 0.0
    assert err <= rel * scale, f"max abs error {err:.3e} > {rel} x {scale:.3e}"
