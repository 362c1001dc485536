"""The model zoo (benchmarks/model_zoo.py, entries in benchmarks/zoo/): the harness in the default
run (selection, batch sets, child processes that crash or hang, the summary), and a slice of the
architectures behind ``slow``: built with random weights, exported by torch.onnx.export as users
do, compiled by hetc for the CPU and compared with onnxruntime (max rel err <= 1e-4) at two batch
sizes. The full sweep (>= 150 architectures from transformers, torchvision, timm, torchaudio and
optimum) is the benchmark; CI keeps a representative of each graph family: GPT-2 (causal mask
built from shapes), Llama (rotary, grouped-query attention), T5 with its decoder (relative
position buckets, cross attention), Whisper (conv front end), Swin (window shifts), wav2vec2
(feature convs, symbolic sample count), BERT by the dynamo exporter; torchvision, timm,
torchaudio and optimum rows when their export venvs are named (HETC_ZOO_PYTHON_<SOURCE>)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import model_zoo
from zoo import SOURCES, ZOO


def test_zoo_has_150_architectures_from_five_sources():
    counts = model_zoo.counts(list(ZOO))
    assert set(counts) == set(SOURCES)
    assert sum(counts.values()) >= 150 and counts["transformers"] >= 70 and counts["timm"] >= 30


def test_select_only_and_source():
    assert model_zoo.select("gpt2,bert") == ["gpt2", "bert"]
    timm = model_zoo.select(source="timm")
    assert timm and all(ZOO[n].source == "timm" for n in timm)
    assert model_zoo.select("gpt2,timm-resnet", "timm") == ["timm-resnet"]
    with pytest.raises(SystemExit, match="unknown architecture"):
        model_zoo.select("no-such-model")
    with pytest.raises(SystemExit, match="unknown source"):
        model_zoo.select(source="keras")


def test_python_per_source(monkeypatch):
    monkeypatch.setenv("HETC_ZOO_PYTHON_TIMM", "/env/python")
    got = model_zoo.pythons(["torchvision,torchaudio=/venv/bin/python"])
    assert got["timm"] == "/env/python" and got["torchaudio"] == got["torchvision"] == "/venv/bin/python"
    assert got["transformers"] == sys.executable
    with pytest.raises(SystemExit):
        model_zoo.pythons(["keras=/x"])


def test_second_batch_set():
    ids = np.arange(6).reshape(2, 3)
    lengths = np.array([3, 2])
    got = model_zoo.batch_inputs({"ids": ids, "lengths": lengths}, None)
    assert got["ids"].tolist() == [[0, 1, 2], [3, 4, 5], [2, 0, 1], [5, 3, 4]]
    assert got["lengths"].tolist() == [3, 2, 2, 3]
    # only inputs whose axis 0 is symbolic grow; an all-static entry has no second set
    got = model_zoo.batch_inputs({"ids": ids, "table": lengths}, {"ids": {0: "batch", 1: "seq"}})
    assert got["ids"].shape == (4, 3) and got["table"].tolist() == [3, 2]
    assert model_zoo.batch_inputs({"ids": ids}, {}) is None


def test_crash_and_hang_become_rows():
    env = dict(os.environ)
    row, why = model_zoo._child([sys.executable, "-c", "import os; os.abort()"], 60, env)
    assert row is None and why.startswith("exit -6")
    row, why = model_zoo._child([sys.executable, "-c", "import time; time.sleep(30)"], 0.5, env)
    assert row is None and why.startswith("timeout")
    row, why = model_zoo._child([sys.executable, "-c", "print('{\"status\": \"pass\"}')"], 60, env)
    assert row == {"status": "pass"}


def test_summary_keeps_exporter_failures_apart():
    rows = [{"arch": "a", "source": "timm", "exporter": "torchscript", "status": "pass"},
            {"arch": "a", "source": "timm", "exporter": "dynamo", "status": "export-failed"},
            {"arch": "b", "source": "timm", "exporter": "torchscript", "status": "crashed"},
            {"arch": "c", "source": "optimum", "exporter": "optimum", "status": "mismatch"}]
    s = model_zoo.summary(rows)
    assert (s["tried"], s["passed"], s["exporter_failed"], s["crashed"]) == (3, 1, 1, 1)
    assert s["architectures_passing"] == 1 and s["sources"]["timm"]["architectures_tried"] == 2


def test_rel_err_checks_shapes_and_counts():
    a = np.array([1.0, 2.0], np.float32)
    assert model_zoo._rel_err([a], [a + np.float32(2e-4)]) == pytest.approx(1e-4, rel=1e-2)
    with pytest.raises(AssertionError, match="shape"):
        model_zoo._rel_err([a], [a[:1]])
    with pytest.raises(AssertionError, match="outputs"):
        model_zoo._rel_err([a, a], [a])


def _torch():
    pytest.importorskip("torch", reason="torch is needed to export the zoo models")
    pytest.importorskip("transformers", reason="transformers builds the zoo models")


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize("name,exporter", [
    ("gpt2", "torchscript"), ("llama", "torchscript"), ("t5", "torchscript"),
    ("whisper-encoder", "torchscript"), ("swin", "torchscript"), ("wav2vec2", "torchscript"),
    ("bert", "dynamo"),
])
def test_zoo_architecture_matches_onnxruntime(name, exporter, tmp_path):
    _torch()
    model = tmp_path / f"{name}.onnx"
    exported = model_zoo.export(ZOO[name], exporter, model)
    assert exported["opset"] == (17 if exporter == "torchscript" else model_zoo.newest_opset())
    row = model_zoo.measure(model, repeat=1)
    assert row["max_rel_err"] <= model_zoo.TOLERANCE, row
    if exporter == "torchscript":
        assert len(row["batches"]) == 2, row  # the symbolic batch compiled once, run at two sizes


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize("name", ["tv-resnet18", "timm-vit", "ta-conformer", "opt-bert"])
def test_zoo_source_row_passes(name, tmp_path):
    """A row of each source exported by its own venv (skipped unless HETC_ZOO_PYTHON_<SOURCE> names it)."""
    source = ZOO[name].source
    python = os.environ.get(model_zoo.PYTHON_ENV + source.upper())
    if not python:
        pytest.skip(f"set {model_zoo.PYTHON_ENV}{source.upper()} to a Python that exports {source}")
    row = model_zoo.run_one(name, ZOO[name].exporters[0], tmp_path, repeat=1, timeout=600, python=python)
    assert row["status"] == "pass", row


def test_speed_table_sorts_by_ratio_and_names_the_cpu(tmp_path, capsys):
    rows = [{"arch": "a", "source": "timm", "exporter": "torchscript", "status": "pass", "hetc_ms": 2.0,
             "ort_ms": 1.0, "x_ort": 2.0},
            {"arch": "b", "source": "timm", "exporter": "dynamo", "status": "pass", "hetc_ms": 1.0, "ort_ms": 2.0,
             "x_ort": 0.5},
            {"arch": "c", "source": "timm", "exporter": "dynamo", "status": "pass", "hetc_ms": 4.0, "ort_ms": 1.0,
             "x_ort": 4.0},
            {"arch": "d", "source": "timm", "exporter": "dynamo", "status": "hetc-failed", "reason": "x"}]
    result = model_zoo.speed(rows)
    assert [r["arch"] for r in result["table"]] == ["c", "a", "b"]  # slowest first; failures left out
    assert result["geomean_x_ort"] == pytest.approx(4 ** (1 / 3) * 2 ** (1 / 3) * 0.5 ** (1 / 3), rel=1e-3)
    assert result["slower_than_ort"] == 2 and result["machine"]["llvm_mcpu"]
    saved = tmp_path / "zoo.json"
    saved.write_text(__import__("json").dumps({"rows": rows, "summary": model_zoo.summary(rows)}))
    assert model_zoo.main(["--report", str(saved), "--speed"]) == 0
    out = capsys.readouterr().out
    assert "slowest first" in out and result["machine"]["llvm_mcpu"] in out and "geomean x ORT over 3 rows" in out


@pytest.mark.parametrize("scale,status", [(0.0, "degenerate"), (0.5, None)])
def test_a_row_whose_reference_is_all_zero_is_degenerate(scale, status, tmp_path):
    """A match against all-zero outputs (the zoo's EfficientNet before its weights were re-drawn)
    checks nothing: the row is listed apart, not counted as a pass."""
    import onnx
    from onnx import helper
    from onnx_util import make, tensor

    model = make([helper.make_node("Mul", ["x", "s"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
                 [tensor("x", ["batch", 8])], [tensor("z", ["batch", 8])],
                 {"s": np.full([8], scale, np.float32)})
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    np.savez(tmp_path / "m.npz", x=np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32))
    row = model_zoo.measure(path, repeat=1)
    assert row["max_rel_err"] <= model_zoo.TOLERANCE
    assert row.get("status") == status, row
    assert ("degenerate" in model_zoo.APART) and (status is None or "all zero" in row["reason"])
