"""The command line in fresh processes: happy paths, and one clean line for every bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_cli, save
from onnx import helper
from onnx_util import make, tensor


@pytest.fixture(scope="module")
def artifact(examples, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "cnn"
    result = run_cli("compile", examples / "cnn.onnx", "--target", "cpu", "-o", out, "-v")
    assert result.code == 0, result.stderr
    assert "fuse_tir" in result.stdout and "default_schedules" in result.stdout  # the -v stage table
    assert result.stderr == ""
    return out


def _assert_one_line_error(result, code: int, *fragments: str) -> None:
    assert result.code == code, (result.code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("hetc: error: ") and "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_run_with_reference_and_outputs(artifact, examples, tmp_path):
    result = run_cli("run", artifact, "--inputs", examples / "cnn_inputs.npz", "--reference",
                     examples / "cnn.onnx", "--outputs", tmp_path / "out.npz")
    assert result.code == 0, result.stderr
    assert "max abs err" in result.stdout and result.stderr == ""
    assert np.load(tmp_path / "out.npz")["logits"].shape == (2, 10)


def test_run_fails_when_outputs_differ_from_reference(artifact, examples, tmp_path):
    import models

    other_weights = save(models.cnn(seed=1), tmp_path / "other.onnx")
    result = run_cli("run", artifact, "--inputs", examples / "cnn_inputs.npz", "--reference", other_weights)
    _assert_one_line_error(result, 1, "logits differ from onnxruntime")
    other_shape = save(models.cnn(classes=3), tmp_path / "classes3.onnx")
    result = run_cli("run", artifact, "--inputs", examples / "cnn_inputs.npz", "--reference", other_shape)
    _assert_one_line_error(result, 1, "logits differ")
    assert "mismatch" in result.stdout


def test_inspect_list_version(examples):
    result = run_cli("inspect", examples / "transformer.onnx")
    assert result.code == 0, result.stderr
    assert "LayerNormalization" in result.stdout and "hetc" in result.stdout
    assert "GFLOP" in result.stdout and "target cpu: all ops supported" in result.stdout
    targets = run_cli("list", "targets")
    assert targets.code == 0 and "cpu" in targets.stdout and "tvm-native" in targets.stdout
    ops = run_cli("list", "ops")
    assert ops.code == 0 and "LayerNormalization" in ops.stdout and "Conv" in ops.stdout
    passes = run_cli("list", "passes")
    assert passes.code == 0 and "fold_constants" in passes.stdout and "convert_layout" in passes.stdout
    version = run_cli("--version")
    assert version.code == 0 and "hetc, version" in version.stdout


def test_inspect_reports_dynamic_and_unsupported_without_failing(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Frobnicate", ["a"], ["y"])]
    model = save(make(nodes, [tensor("x", ("n", 4))], [tensor("y", ("n", 4))]), tmp_path / "m.onnx")
    result = run_cli("inspect", model)
    assert result.code == 0, result.stderr
    assert "unsupported ONNX ops: Frobnicate" in result.stdout and "'n'" in result.stdout


def test_bench_writes_json(examples, tmp_path):
    result = run_cli("bench", examples / "mlp.onnx", "--repeat", "3", "--warmup", "1",
                     "--json", tmp_path / "b.json")
    assert result.code == 0, result.stderr
    data = json.loads((tmp_path / "b.json").read_text())
    assert set(data["results"]) == {"hetc", "onnxruntime"} and data["results"]["hetc"]["runs"] == 3
    assert data["hetc_over_ort"] > 0


def test_layout_nhwc_compiles_and_matches(examples, tmp_path):
    out = tmp_path / "nhwc"
    assert run_cli("compile", examples / "cnn.onnx", "-o", out, "--layout", "NHWC").code == 0
    result = run_cli("run", out, "--inputs", examples / "cnn_inputs.npz", "--reference", examples / "cnn.onnx")
    assert result.code == 0, result.stderr
    assert "convert_layout" in json.dumps(json.loads((out / "report.json").read_text())["stages"])


# --- compile errors: one line, non-zero exit, output directory not created ----------------------

def _bad_models(tmp_path, examples):
    good = (examples / "mlp.onnx").read_bytes()
    (tmp_path / "truncated.onnx").write_bytes(good[: len(good) // 3])
    (tmp_path / "text.onnx").write_text("this is not an onnx model\n")
    unknown = make([helper.make_node("Frobnicate", ["x"], ["y"], name="f1")], [tensor("x", (2,))],
                   [tensor("y", (2,))])
    save(unknown, tmp_path / "unknown.onnx")
    dynamic = make([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", ("batch", 2))],
                   [tensor("y", ("batch", 2))])
    save(dynamic, tmp_path / "dynamic.onnx")
    return {
        "missing": (["compile", tmp_path / "nope.onnx"], 1, ["nope.onnx", "no such file"]),
        "truncated": (["compile", tmp_path / "truncated.onnx"], 1, ["truncated.onnx"]),
        "not onnx": (["compile", tmp_path / "text.onnx"], 1, ["text.onnx"]),
        "unknown op": (["compile", tmp_path / "unknown.onnx"], 1, ["unsupported op", "Frobnicate"]),
        "unknown dim": (["compile", tmp_path / "dynamic.onnx", "--dim", "seq=1:4"], 2, ["unknown dim", "seq", "batch"]),
        "bad dim range": (["compile", tmp_path / "dynamic.onnx", "--dim", "batch=8:2"], 2, ["--dim", "batch=8:2"]),
        "bad target": (["compile", examples / "mlp.onnx", "--target", "tpu"], 2, ["unknown target 'tpu'"]),
        "bad shape": (["compile", examples / "mlp.onnx", "--input-shape", "x=1,a"], 2, ["--input-shape"]),
        "bad layout": (["compile", examples / "mlp.onnx", "--layout", "NCHWc"], 2, ["NCHWc"]),
        "no output": (["compile", examples / "mlp.onnx"], 2, ["-o"]),
    }


@pytest.mark.parametrize("case", ["missing", "truncated", "not onnx", "unknown op", "unknown dim", "bad dim range", "bad target",
                                  "bad shape", "bad layout", "no output"])
def test_compile_errors(case, examples, tmp_path):
    args, code, fragments = _bad_models(tmp_path, examples)[case]
    out = tmp_path / "out"
    full = args + (["-o", out] if case != "no output" else [])
    _assert_one_line_error(run_cli(*full), code, *fragments)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary leftovers


def test_unwritable_output_directory(examples, tmp_path):
    (tmp_path / "a_file").write_text("x")
    result = run_cli("compile", examples / "mlp.onnx", "-o", tmp_path / "a_file" / "out")
    _assert_one_line_error(result, 1, "not a directory")
    assert (tmp_path / "a_file").read_text() == "x"


def test_existing_artifact_survives_failed_compile(artifact, tmp_path):
    before = {p: p.read_bytes() for p in artifact.rglob("*") if p.is_file()}
    (tmp_path / "bad.onnx").write_text("garbage")
    _assert_one_line_error(run_cli("compile", tmp_path / "bad.onnx", "-o", artifact), 1)
    assert {p: p.read_bytes() for p in artifact.rglob("*") if p.is_file()} == before


# --- run errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("arrays", "fragments"), [
    ({"wrong_name": np.zeros((2, 3, 32, 32), np.float32)}, ["missing input(s) image", "unknown input(s) wrong_name"]),
    ({"image": np.zeros((2, 3, 16, 16), np.float32)}, ["input 'image' has shape [2, 3, 16, 16]"]),
    ({"image": np.zeros((2, 3, 32, 32), np.int32)}, ["input 'image' has dtype int32, expected float32"]),
])
def test_run_input_errors(artifact, tmp_path, arrays, fragments):
    np.savez(tmp_path / "in.npz", **arrays)
    out = tmp_path / "out.npz"
    _assert_one_line_error(run_cli("run", artifact, "--inputs", tmp_path / "in.npz", "--outputs", out), 1,
                           *fragments)
    assert not out.exists()


def test_run_file_errors(artifact, examples, tmp_path):
    _assert_one_line_error(run_cli("run", tmp_path / "none", "--inputs", examples / "cnn_inputs.npz"), 1,
                           "no such artifact")
    _assert_one_line_error(run_cli("run", artifact, "--inputs", tmp_path / "none.npz"), 1, "no such inputs file")
    (tmp_path / "bad.npz").write_text("nope")
    _assert_one_line_error(run_cli("run", artifact, "--inputs", tmp_path / "bad.npz"), 1, "bad.npz")


def test_debug_shows_traceback_wherever_it_is_given(tmp_path):
    for args in (["--debug", "compile", tmp_path / "nope.onnx", "-o", tmp_path / "o"],
                 ["compile", tmp_path / "nope.onnx", "-o", tmp_path / "o", "--debug"]):
        result = run_cli(*args)
        assert result.code == 1 and "Traceback" in result.stderr


def test_bare_hetc_prints_help():
    result = run_cli()
    assert result.code == 0 and "Commands:" in result.stdout and result.stderr == ""
