"""Tuning measured elsewhere (``hetc.tuning.offline``, ``hetc/runtime/measure.py``): candidates
exported here, timed by the runtime-only measurer, imported into a database that ``compile --db``
applies. The CPU stands in for the remote device (the same files, the same loop; the GPU run is
in docs/cuda.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
from conftest import assert_close, ort_run, run_cli, save
from onnx import helper
from onnx_util import make, tensor

from hetc.errors import UsageError
from hetc.tuning import database as dbm
from hetc.tuning import offline

ROOT = Path(__file__).resolve().parents[1]
MEASURE = ROOT / "hetc" / "runtime" / "measure.py"
PER_TASK = 3


def _two_task_model():
    """MatMul+Relu (one fused task) then a MatMul of another shape (a second task)."""
    rng = np.random.default_rng(0)
    w1, w2 = rng.normal(size=(64, 48)).astype(np.float32), rng.normal(size=(48, 16)).astype(np.float32)
    return make([helper.make_node("MatMul", ["x", "w1"], ["y"]), helper.make_node("Relu", ["y"], ["r"]),
                 helper.make_node("MatMul", ["r", "w2"], ["z"])],
                [tensor("x", [32, 64])], [tensor("z", [32, 16])], {"w1": w1, "w2": w2}, name="two")


def _measure(cands: Path, out: Path) -> dict:
    proc = subprocess.run([sys.executable, str(MEASURE), str(cands), str(out), "--repeat", "2",
                           "--min-repeat-ms", "1"], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("offline")
    model = save(_two_task_model(), root / "two.onnx")
    cands = root / "cands"
    result = run_cli("tune", model, "--export-candidates", cands, "--per-task", PER_TASK, "--cover", "1")
    assert result.code == 0, result.stderr
    assert "candidates of 2 of 2 task(s)" in result.stdout and "measure.py" in result.stdout
    return model, cands


def test_export_writes_a_library_per_task(exported):
    _, cands = exported
    manifest = offline.read_candidates(cands)
    assert manifest["device"] == "cpu" and len(manifest["tasks"]) == 2 and manifest["cover"] == pytest.approx(1)
    for entry in manifest["tasks"]:
        kinds = [c["kind"] for c in entry["candidates"]]
        assert kinds[0] == offline.DEFAULT and kinds.count(offline.SAMPLED) == PER_TASK  # distinct samples
        assert (cands / entry["library"]).is_file()
        assert [a[0] for a in entry["args"]] == ["TENSOR"] * 3  # two inputs and the output
    lines = [(cands / f).read_text().splitlines() for f in offline.TRACE_FILES]
    assert len(lines[0]) == 2 and len(lines[1]) == 2 * (PER_TASK + 1)


def test_measure_import_compile(exported, tmp_path):
    """The measured times become records; the fastest candidate per task is what compile applies."""
    import hetc

    model, cands = exported
    measured = _measure(cands, tmp_path / "m.json")
    manifest = offline.read_candidates(cands)
    for entry in manifest["tasks"]:
        times = measured["tasks"][entry["library"]]["run_secs"]
        assert set(times) == {c["func"] for c in entry["candidates"]} and all(min(t) > 0 for t in times.values())

    # make a sampled candidate of task 0 the fastest and the default the slowest: the import must
    # keep those times, and compile must apply that candidate's schedule
    entry = manifest["tasks"][0]
    times = measured["tasks"][entry["library"]]["run_secs"]
    times["c0"], times["c2"] = [1.0, 1.0], [1e-7, 1e-7]
    (tmp_path / "m2.json").write_text(json.dumps(measured))
    db = tmp_path / "db"
    result = run_cli("tune", model, "--db", db, "--import-measurements", cands, tmp_path / "m2.json")
    assert result.code == 0, result.stderr
    assert f"{2 * (PER_TASK + 1)} measured candidates of 2 task(s) (0 did not run)" in result.stdout
    assert "measured on cpu" in result.stdout and "default / best" in result.stdout

    target = tvm.target.Target(json.loads(manifest["target"]))
    _, workloads = dbm.load_best(db, target)
    assert workloads == 2
    with dbm.open_for_tuning(db, target) as opened:
        fastest = [r for r in opened.db.get_all_tuning_records() if float(r.run_secs[0]) < 1e-6]
        assert len(fastest) == 1 and opened.best_seconds(fastest[0].workload) == pytest.approx(1e-7)
        assert opened.default_seconds(fastest[0].workload) == pytest.approx(1.0)
        assert opened.meta["runs"][-1]["remote"] == "cpu" and opened.meta["runs"][-1]["measured"] == 2 * (PER_TASK + 1)
    compiled = hetc.compile(model, target="cpu", database=db)
    assert sorted(compiled.report["kernels"].values()) == ["tuned", "tuned"]
    x = np.random.default_rng(1).normal(size=(32, 64)).astype(np.float32)
    assert_close(compiled.run({"x": x})["z"], ort_run(model, {"x": x})[0])


def test_a_task_whose_process_dies_is_recorded_and_the_rest_measured(exported, tmp_path):
    import shutil

    _, cands = exported
    broken = tmp_path / "cands"
    shutil.copytree(cands, broken)
    first = offline.read_candidates(broken)["tasks"][0]["library"]
    (broken / first).write_bytes(b"not a library")
    measured = _measure(broken, tmp_path / "m.json")
    assert measured["tasks"][first]["run_secs"] == {} and "died" in measured["tasks"][first]["errors"]["*"]
    second = offline.read_candidates(broken)["tasks"][1]
    assert len(measured["tasks"][second["library"]]["run_secs"]) == PER_TASK + 1


def test_bad_inputs(exported, tmp_path):
    model, cands = exported
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    with pytest.raises(UsageError, match="not an empty directory"):
        offline.export_candidates(model, busy, "cpu")
    with pytest.raises(UsageError, match="cover"):
        offline.export_candidates(model, tmp_path / "new", "cpu", cover=0)
    with pytest.raises(UsageError, match="no candidates.json"):
        offline.read_candidates(tmp_path)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(UsageError, match="not valid JSON"):
        offline.import_measurements(cands, tmp_path / "bad.json", tmp_path / "db")
    with pytest.raises(UsageError, match="no such file"):
        offline.import_measurements(cands, tmp_path / "missing.json", tmp_path / "db")
    result = run_cli("tune", model, "--db", tmp_path / "db2", "--import-measurements", tmp_path, tmp_path / "bad.json")
    assert result.code != 0 and "no candidates.json" in result.stderr and "Traceback" not in result.stderr
    result = run_cli("tune", model, "--db", tmp_path / "db3")
    assert result.code != 0 and "--trials" in result.stderr and "Traceback" not in result.stderr
    proc = subprocess.run([sys.executable, str(MEASURE), str(tmp_path), str(tmp_path / "o.json")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "no candidates.json" in proc.stderr
    assert not (tmp_path / "db").exists() and not (tmp_path / "new").exists()


def test_second_round_is_guided_by_the_measurements(exported, tmp_path):
    """Exporting with --db of imported measurements: new schedules (none measured before), chosen
    by the evolutionary search that the measured records train; a task without records stays random."""
    model, cands = exported
    measured = _measure(cands, tmp_path / "m.json")
    manifest = offline.read_candidates(cands)
    first = manifest["tasks"][0]["library"]
    measured["tasks"].pop(first)  # task 0 not measured: no records, random again
    (tmp_path / "m.json").write_text(json.dumps(measured))
    db = tmp_path / "db"
    summary = offline.import_measurements(cands, tmp_path / "m.json", db)
    # a task the device never reached gets no records (not failed ones a later round would skip):
    # every record is task 1's, one per candidate, whether it ran (a loaded machine may fail one)
    second_task = manifest["tasks"][1]
    ran = measured["tasks"][second_task["library"]]["run_secs"]
    assert summary.measured == len(ran) and summary.failed == len(second_task["candidates"]) - len(ran)
    assert len((db / dbm.RECORDS).read_text().splitlines()) == PER_TASK
    assert len((db / dbm.DEFAULT_RECORDS).read_text().splitlines()) == 1
    again = tmp_path / "round2"
    result = run_cli("tune", model, "--db", db, "--export-candidates", again, "--per-task", PER_TASK, "--cover", "1")
    assert result.code == 0, result.stderr
    second = offline.read_candidates(again)
    rules = [{c["rule"] for c in t["candidates"] if c["kind"] == offline.SAMPLED} for t in second["tasks"]]
    assert rules == [{"ReplayTrace"}, {"EvolutionarySearch"}]
    lines = (cands / offline.TRACE_FILES[1]).read_text().splitlines()
    # task 1's round-1 schedules that ran (one that failed on a loaded machine may be tried again)
    old = {json.dumps(json.loads(lines[c["record"]])[1][0]) for c in second_task["candidates"] if c["func"] in ran}
    new = [json.loads(ln) for ln in (again / offline.TRACE_FILES[1]).read_text().splitlines()]
    guided = [c["record"] for c in second["tasks"][1]["candidates"] if c["kind"] == offline.SAMPLED]
    assert guided and all(json.dumps(new[k][1][0]) not in old for k in guided)  # none measured before
