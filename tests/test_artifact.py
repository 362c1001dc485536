"""The artifact directory: round trip in a fresh process, atomic writes, validation on load."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import assert_close, ort_run

import hetc
from hetc.errors import ArtifactError, InputError, OutputPathError
from hetc.runtime import artifact


@pytest.fixture(scope="module")
def compiled(examples):
    return hetc.compile(examples / "cnn.onnx", target="cpu")


def _snapshot(directory):
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_save_then_load_in_fresh_process(compiled, examples, tmp_path):
    out = compiled.save(tmp_path / "art")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["schema_version"] == artifact.SCHEMA_VERSION
    assert manifest["targets"] == ["cpu"]
    assert manifest["inputs"] == [{"name": "image", "shape": [2, 3, 32, 32], "dtype": "float32"}]
    assert manifest["outputs"] == [{"name": "logits", "shape": [2, 10], "dtype": "float32"}]
    cpu = manifest["parts"][0].pop("cpu")  # the instruction sets the code uses (checked at load)
    assert manifest["parts"] == [{"name": "main", "target": "cpu", "device": "cpu:0", "emulated": False,
                                  "library": "cpu/model.so", "threads": 0}]
    assert cpu["mcpu"] and "sse4_2" in cpu["features"]
    assert set(manifest["files"]) == {"cpu/model.so", "report.json", "plan.json"}
    assert [p.name for p in tmp_path.iterdir()] == ["art"]  # no temporary siblings left

    script = (
        "import sys, numpy as np, hetc\n"
        "m = hetc.load(sys.argv[1])\n"
        "x = dict(np.load(sys.argv[2]))\n"
        "np.savez(sys.argv[3], **m.run(x))\n"
    )
    subprocess.run([sys.executable, "-c", script, str(out), str(examples / "cnn_inputs.npz"),
                    str(tmp_path / "o.npz")], check=True)
    inputs = dict(np.load(examples / "cnn_inputs.npz"))
    assert_close(np.load(tmp_path / "o.npz")["logits"], ort_run(examples / "cnn.onnx", inputs)[0])


def test_loaded_model_can_be_saved_again(compiled, tmp_path):
    first = compiled.save(tmp_path / "a")
    second = hetc.load(first).save(tmp_path / "b")
    assert _snapshot(first) == _snapshot(second)


def test_failed_write_leaves_nothing_and_keeps_old_artifact(compiled, tmp_path):
    out = compiled.save(tmp_path / "art")
    before = _snapshot(out)

    def broken(tmp):
        (tmp / "partial").write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OutputPathError, match="No space left"):
        artifact.write_artifact(out, broken)
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art"]
    with pytest.raises(OutputPathError):
        artifact.write_artifact(tmp_path / "new", broken)
    assert not (tmp_path / "new").exists()


def test_overwrites_an_artifact_but_not_other_directories(compiled, tmp_path):
    compiled.save(tmp_path / "art")
    compiled.save(tmp_path / "art")  # replacing an artifact is fine
    other = tmp_path / "docs"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(OutputPathError, match="not a hetc artifact"):
        compiled.save(other)
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputPathError, match="not a directory"):
        compiled.save(tmp_path / "file" / "out")


def test_damaged_or_incompatible_artifacts_are_rejected(compiled, tmp_path):
    out = compiled.save(tmp_path / "art")
    manifest_path = out / "manifest.json"
    good = manifest_path.read_text()

    data = json.loads(good)
    data["schema_version"] = 99
    manifest_path.write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="schema version 99"):
        hetc.load(out)

    data = json.loads(good)
    data["tvm_version"] = "0.0.1"
    manifest_path.write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="built with TVM 0.0.1"):
        hetc.load(out)

    data = json.loads(good)
    del data["inputs"]
    manifest_path.write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="malformed manifest"):
        hetc.load(out)

    manifest_path.write_text("{not json")
    with pytest.raises(ArtifactError, match="unreadable manifest"):
        hetc.load(out)

    manifest_path.write_text(good)
    with open(out / "cpu" / "model.so", "r+b") as f:
        f.seek(100)
        f.write(b"\x00corrupt")
    with pytest.raises(ArtifactError, match="damaged"):
        hetc.load(out)
    with pytest.raises(ArtifactError, match="no such artifact"):
        hetc.load(tmp_path / "missing")


@pytest.mark.parametrize(("inputs", "match"), [
    ({}, "missing input"),
    ({"image": np.zeros((2, 3, 32, 32), np.float32), "extra": np.zeros(1)}, "unknown input"),
    ({"image": np.zeros((1, 3, 32, 32), np.float32)}, r"shape \[1, 3, 32, 32\], expected \[2, 3, 32, 32\]"),
    ({"image": np.zeros((2, 3, 32, 32), np.float64)}, "dtype float64, expected float32"),
])
def test_wrong_inputs_are_rejected(compiled, inputs, match):
    with pytest.raises(InputError, match=match):
        compiled.run(inputs)


def test_a_foreign_manifest_json_does_not_make_a_directory_an_artifact(compiled, tmp_path):
    other = tmp_path / "node_project"
    other.mkdir()
    (other / "manifest.json").write_text('{"name": "something else"}')
    with pytest.raises(OutputPathError, match="not a hetc artifact"):
        compiled.save(other)
    assert [p.name for p in other.iterdir()] == ["manifest.json"]


def test_replacing_uses_an_atomic_exchange(compiled, tmp_path, monkeypatch):
    out = compiled.save(tmp_path / "art")
    calls = []
    real = artifact._exchange
    monkeypatch.setattr(artifact, "_exchange", lambda a, b: calls.append((a, b)) or real(a, b))
    compiled.save(out)
    assert len(calls) == 1 and calls[0][1] == out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art"]
    assert hetc.load(out).manifest.parts[0].library == "cpu/model.so"
