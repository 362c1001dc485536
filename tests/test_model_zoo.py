"""A slice of the model zoo (benchmarks/model_zoo.py): architectures built by transformers with
random weights, exported by torch.onnx.export as users do, compiled by hetc for the CPU and
compared with onnxruntime (max rel err <= 1e-4). The full sweep (46 transformers and 21
torchvision architectures, both exporters) is the benchmark; this keeps a representative of
each graph family in CI: GPT-2 (causal mask built from shapes, ConstantOfShape/Where), Llama
(rotary embeddings, grouped-query attention), T5 (relative position buckets), Whisper (conv
front end), Swin (window shifts by Roll/Slice), wav2vec2 (feature convs, symbolic sample
count), BERT by the dynamo exporter at the newest opset."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is needed to export the zoo models")
pytest.importorskip("transformers", reason="transformers builds the zoo models")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import model_zoo

pytestmark = [pytest.mark.torch, pytest.mark.slow]


@pytest.mark.parametrize("name,exporter", [
    ("gpt2", "torchscript"), ("llama", "torchscript"), ("t5-encoder", "torchscript"),
    ("whisper-encoder", "torchscript"), ("swin", "torchscript"), ("wav2vec2", "torchscript"),
    ("bert", "dynamo"),
])
def test_zoo_architecture_matches_onnxruntime(name, exporter, tmp_path):
    model = tmp_path / f"{name}.onnx"
    exported = model_zoo.export(model_zoo.ZOO[name], exporter, model)
    assert exported["opset"] == (17 if exporter == "torchscript" else model_zoo.newest_opset())
    row = model_zoo.measure(model, repeat=1)
    assert row["max_rel_err"] <= model_zoo.TOLERANCE, row
