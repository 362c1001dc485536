"""Acceptance: torch-exported ResNet-18, MobileNetV2 and a BERT encoder (opset 17), which hetc
does not ship, compiled with the CLI and compared with onnxruntime (max abs error <= 1e-4 x
max |reference|). Needs torch to export them: pip install torch==2.13.0."""

from __future__ import annotations

import pytest
from conftest import run_cli

torch_models = pytest.importorskip("torch_models", reason="examples/torch_models.py not importable")
pytest.importorskip("torch", reason="torch is needed to export the acceptance models")

pytestmark = [pytest.mark.torch, pytest.mark.slow]


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "bert_encoder"])
def test_torch_exported_model_matches_onnxruntime(name, tmp_path):
    model, inputs = torch_models.export(name, tmp_path)
    out = tmp_path / "artifact"
    compiled = run_cli("compile", model, "--target", "cpu", "-o", out)
    assert compiled.code == 0, compiled.stderr
    result = run_cli("run", out, "--inputs", inputs, "--reference", model, "--tolerance", "1e-4")
    assert result.code == 0, result.stdout + result.stderr
    assert "max rel err" in result.stdout


@pytest.mark.parametrize("name", ["resnet18", "bert_encoder"])
def test_torch_exported_model_compiles_for_cuda(name, tmp_path):
    from hetc.backends.cuda import binaries

    if not binaries.shutil.which("nvcc"):
        pytest.skip("nvcc (CUDA toolkit) not installed")
    model, _ = torch_models.export(name, tmp_path)
    out = tmp_path / "artifact"
    compiled = run_cli("compile", model, "--target", "cuda", "-o", out)
    assert compiled.code == 0, compiled.stderr
    (embedded,) = binaries.read_embedded(out / "cuda" / "model.so")
    assert binaries.fatbin_contents(embedded.data) == ["ptx compute_90", "sass sm_90"]
