"""Auto-tuning: budgets, the on-disk database (repair, validation), tune -> compile --db end to end.

The end-to-end tests tune a one-task model (MatMul + Relu, fused into one PrimFunc) with a
handful of trials: MetaSchedule's fixed costs (worker processes, one search round) dominate,
about 15-25 s per tuning run on a 2-core machine.
"""

from __future__ import annotations

import io
import json
import shutil
import sys

import numpy as np
import pytest
from conftest import assert_close, ort_run, run_cli, save
from onnx import helper
from onnx_util import make, tensor

from hetc.errors import HetcError, UsageError
from hetc.tuning import budget
from hetc.tuning import database as dbm

TRIALS = 8  # the first DEFAULT_VARIANTS (4) measure hetc's default schedules, the rest are the search's


def _matmul_model(seed: int = 0):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(64, 32)).astype(np.float32)
    return make([helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
                [tensor("x", [16, 64])], [tensor("z", [16, 32])], {"w": w}, name="mm")


def _record_lines(db) -> list[str]:
    """All trials: the search's and the default schedules'."""
    return _search_lines(db) + (db / dbm.DEFAULT_RECORDS).read_text().splitlines()


def _search_lines(db) -> list[str]:
    return (db / dbm.RECORDS).read_text().splitlines()


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A model tuned with TRIALS trials: (model path, database dir, TuneResult)."""
    import hetc

    root = tmp_path_factory.mktemp("tuning")
    model = save(_matmul_model(), root / "mm.onnx")
    db = root / "db"
    result = hetc.tune(model, target="cpu", trials=TRIALS, database=db, progress=False)
    return model, db, result


# ---------------------------------------------------------------------------------------------
# Budget policy


def test_allocate_by_cost_in_rounds_with_cap():
    # 3 tasks, costs 8:2:1, rounds of 4, cap 8: the big task gets its first two rounds first
    assert budget.allocate([8, 2, 1], 8, max_per_task=8, round_size=4) == [8, 0, 0]
    assert budget.allocate([8, 2, 1], 12, max_per_task=8, round_size=4) == [8, 4, 0]
    assert budget.allocate([8, 2, 1], 10, max_per_task=8, round_size=4) == [8, 2, 0]  # last round cut short
    assert budget.allocate([8, 2, 1], 100, max_per_task=8, round_size=4) == [8, 8, 8]  # everything capped
    assert budget.allocate([0, 0], 5, max_per_task=4, round_size=4) == [4, 1]  # no cost estimate: in order
    assert budget.allocate([], 5, max_per_task=64) == []


def test_allocation_only_grows_with_the_budget():
    rng = np.random.default_rng(1)
    for _ in range(20):
        costs = list(rng.exponential(size=int(rng.integers(1, 8))))
        cap = int(rng.integers(1, 50))
        prev = [0] * len(costs)
        for total in range(0, 120, 7):
            alloc = budget.allocate(costs, total, cap, round_size=5)
            assert sum(alloc) == min(total, cap * len(costs))
            assert all(a >= p for a, p in zip(alloc, prev)) and max(alloc, default=0) <= cap
            prev = alloc


def test_remaining_spends_only_the_difference():
    assert budget.remaining([8, 4], [8, 0], 12) == [0, 4]
    assert budget.remaining([8, 4], [3, 1], 12) == [5, 3]
    assert budget.remaining([8, 4], [10, 0], 12) == [0, 2]  # the task over its share: total still holds
    assert budget.remaining([8, 4], [8, 4], 12) == [0, 0]


# ---------------------------------------------------------------------------------------------
# End to end (API)


def test_tune_then_compile_with_database(tuned):
    import hetc
    from hetc.backends.cpu.codegen import llvm_target
    from hetc.backends.cpu.pipeline import pre_schedule_stages
    from hetc.frontends.onnx import load_model, to_relax
    from hetc.options import CompileOptions
    from hetc.passes import run_pipeline

    model, db, result = tuned
    assert (db / dbm.MARKER).is_file() and len(_record_lines(db)) == TRIALS
    assert [t.name for t in result.tasks] and result.tasks[0].name.startswith("fused_matmul_relu")
    assert result.trials_added == TRIALS and result.trials == TRIALS
    assert result.tasks[0].best_seconds and result.estimated_latency == pytest.approx(result.tasks[0].best_seconds)
    # the default schedule is the task's first record: measured, and never faster than the best
    assert 0 < result.tasks[0].best_seconds <= result.tasks[0].default_seconds
    meta = json.loads((db / dbm.MARKER).read_text())
    assert meta["runs"][-1]["complete"] and meta["runs"][-1]["trials_added"] == TRIALS

    # the database gives the task its tuned schedule (marked scheduled, so defaults skip it)
    options = CompileOptions(database=str(db))
    mod, _ = run_pipeline(to_relax(load_model(model)), pre_schedule_stages(options))
    assert dbm.tuned_functions(mod) == []
    tuned_mod = dbm.apply_database_pass(str(db), llvm_target(options))(mod)
    assert len(dbm.tuned_functions(tuned_mod)) == 1

    assert all(f.attrs["tir.is_scheduled"] for f in (tuned_mod[n] for n in dbm.tuned_functions(tuned_mod)))

    compiled = hetc.compile(model, target="cpu", database=db)
    assert "apply_tuning_database" in [s["stage"] for s in compiled.report["stages"]]
    assert list(compiled.report["kernels"].values()) == ["tuned"]  # the default rules left it alone
    assert compiled.report["tuning"] == {"database": str(db), "tuned": 1, "default": 0, "tuned_symbolic": {},
                                         "fallback": {}}
    x = np.random.default_rng(2).normal(size=(16, 64)).astype(np.float32)
    assert_close(compiled.run({"x": x})["z"], ort_run(model, {"x": x})[0])


@pytest.mark.slow
def test_resume_spends_only_the_remaining_trials(tuned, tmp_path):
    import hetc

    model, db, _ = tuned
    copy = tmp_path / "db"
    shutil.copytree(db, copy)
    result = hetc.tune(model, trials=TRIALS + 2, database=copy, progress=False)
    assert (result.trials_added, result.tasks[0].trials_before) == (2, TRIALS)
    assert len(_record_lines(copy)) == TRIALS + 2
    again = hetc.tune(model, trials=TRIALS + 2, database=copy, progress=False)  # nothing left: no search
    assert again.trials_added == 0 and len(_record_lines(copy)) == TRIALS + 2
    assert len(json.loads((copy / dbm.MARKER).read_text())["runs"]) == 3


# ---------------------------------------------------------------------------------------------
# The database on disk


def test_torn_last_record_is_dropped_on_open(tuned, tmp_path):
    from hetc.backends.cpu.codegen import llvm_target
    from hetc.options import CompileOptions

    target = llvm_target(CompileOptions())
    _, db, _ = tuned
    copy = tmp_path / "db"
    shutil.copytree(db, copy)
    records = copy / dbm.RECORDS
    searched = len(_search_lines(copy))
    assert searched == TRIALS - 4 and len(_record_lines(copy)) == TRIALS
    whole = records.read_bytes()
    records.write_bytes(whole[:-40])  # killed in the middle of writing the last record

    # reading (compile --db) skips the torn line and writes nothing
    _, workloads = dbm.load_best(copy, target)
    assert workloads == 1 and records.read_bytes() == whole[:-40]
    # opening for tuning repairs the file in place: the other records are kept
    with dbm.open_for_tuning(copy, target) as opened:
        assert opened.repaired.dropped == {dbm.RECORDS: len(whole[:-40]) - whole[:-40].rfind(b"\n") - 1}
        assert len(opened.db) == searched - 1 and len(opened.defaults) == 4
    assert records.read_bytes().endswith(b"\n") and len(_record_lines(copy)) == TRIALS - 1

    # killed between a whole record and its newline: the record is kept
    records.write_bytes(records.read_bytes()[:-1])
    with dbm.open_for_tuning(copy, target) as opened:
        assert opened.repaired.completed == [dbm.RECORDS] and len(opened.db) == searched - 1


def test_one_tuner_at_a_time(tuned, tmp_path):
    from hetc.backends.cpu.codegen import llvm_target
    from hetc.options import CompileOptions

    target = llvm_target(CompileOptions())
    copy = tmp_path / "db"
    shutil.copytree(tuned[1], copy)
    with dbm.open_for_tuning(copy, target):
        with pytest.raises(UsageError, match="in use by another `hetc tune`"), dbm.open_for_tuning(copy, target):
            pass
        dbm.load_best(copy, target)  # reading is not locked out
    with dbm.open_for_tuning(copy, target) as opened:  # released
        assert len(opened.db) + len(opened.defaults) == TRIALS


def test_damage_beyond_a_torn_line_is_reported(tuned, tmp_path):
    from hetc.backends.cpu.codegen import llvm_target
    from hetc.options import CompileOptions

    target = llvm_target(CompileOptions())
    _, db, _ = tuned
    copy = tmp_path / "db"
    shutil.copytree(db, copy)
    lines = _search_lines(copy)
    (copy / dbm.RECORDS).write_text("\n".join([lines[0][:30]] + lines[1:]) + "\n")
    with pytest.raises(UsageError, match="line 1 of database_tuning_record.json .*damaged beyond repair"):
        dbm.load_best(copy, target)
    with pytest.raises(UsageError, match="damaged beyond repair"), dbm.open_for_tuning(copy, target):
        pass
    (copy / dbm.RECORDS).write_text("\n".join(["[7" + lines[0][2:]] + lines[1:]) + "\n")  # workload 7 of 1
    with pytest.raises(UsageError, match="names no known workload"):
        dbm.load_best(copy, target)


def test_database_for_another_target_or_not_a_database(tuned, tmp_path):
    import hetc

    model, db, _ = tuned
    other = tmp_path / "other"
    shutil.copytree(db, other)
    meta = json.loads((other / dbm.MARKER).read_text())
    meta["target"]["mcpu"] = "some-other-cpu"
    (other / dbm.MARKER).write_text(json.dumps(meta))
    with pytest.raises(HetcError, match="was tuned for llvm mcpu=some-other-cpu, not for this target"):
        hetc.compile(model, database=other)
    with pytest.raises(UsageError, match="was tuned for llvm mcpu=some-other-cpu"):
        hetc.tune(model, trials=1, database=other, progress=False)

    not_db = tmp_path / "notdb"
    not_db.mkdir()
    (not_db / "x.txt").write_text("x")
    with pytest.raises(HetcError, match="is not a hetc tuning database"):
        hetc.compile(model, database=not_db)
    with pytest.raises(UsageError, match="is not a hetc tuning database .* not empty"):
        hetc.tune(model, trials=1, database=not_db, progress=False)
    with pytest.raises(HetcError, match="no such directory"):
        hetc.compile(model, database=tmp_path / "missing")


@pytest.mark.parametrize("kwargs, message", [
    ({"trials": 0}, "trials must be a whole number >= 1"),
    ({"trials": 2.5}, "trials must be a whole number >= 1"),
    ({"trials": 4, "max_trials_per_task": 0}, "max_trials_per_task must be"),
    ({"trials": 4, "target": "cpu,cpu"}, "names a target twice"),
    ({"trials": 4, "target": "npu"}, "unknown target 'npu'"),
    ({"trials": 4, "database": None}, "needs a database directory"),
])
def test_bad_arguments(tmp_path, kwargs, message):
    import hetc

    model = save(_matmul_model(), tmp_path / "mm.onnx")
    kwargs = {"database": tmp_path / "db", **kwargs}
    with pytest.raises(UsageError, match=message):
        hetc.tune(model, progress=False, **kwargs)
    assert not (tmp_path / "db").exists()


def test_untunable_target_is_refused(monkeypatch):
    from hetc.tuning import tasks

    monkeypatch.delitem(tasks.TUNABLE, "cpu")
    with pytest.raises(UsageError, match="target 'cpu' cannot be tuned yet"):
        tasks.tuning_support("cpu")


# ---------------------------------------------------------------------------------------------
# Pieces


def test_progress_live_and_line_modes():
    from rich.console import Console

    from hetc.tuning.progress import TaskProgress, TuningProgress

    def run(console: Console, live: bool) -> str:
        tasks = [TaskProgress("conv", 2, 1e6, 3, 4, 5e-6), TaskProgress("dense", 1, 1e5, 0, 0, None)]
        progress = TuningProgress(tasks, console, live=live)
        progress.begin()
        progress.task_started(0)
        progress.measured_round(0, [4e-6, None, 2e-6, 3e-6])
        progress.task_finished(0)
        progress.end()
        assert progress.estimated_latency() == (pytest.approx(4e-6), 1)
        assert tasks[0].failed == 1 and tasks[0].best_seconds == 2e-6
        return console.file.getvalue()

    lines = run(Console(file=io.StringIO(), width=200), live=False)
    assert "[1/1] conv: +4 trials (1 failed) (7 in db), best 2.0 us x2" in lines
    assert "model ~4.0 us (1/2 tasks measured)" in lines
    live = run(Console(file=io.StringIO(), width=200, force_terminal=True), live=True)
    assert "estimated model latency 4.0 us (1/2 tasks measured)" in live and "tasks 1/1" in live


def test_host_tensor_intrinsics_are_temporary():
    from hetc.tuning.search import host_tensor_intrinsics

    name = "tvm.s_tir.tensor_intrin"
    loaded = name in sys.modules
    with host_tensor_intrinsics():
        assert name in sys.modules
    assert (name in sys.modules) == loaded


# ---------------------------------------------------------------------------------------------
# Command line


def _assert_one_line_error(result, code: int, *fragments: str) -> None:
    assert result.code == code, (result.code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hetc: error: ") and "Traceback" not in result.stderr, \
        result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.slow
def test_cli_tune_then_compile(tmp_path):
    model = save(_matmul_model(seed=3), tmp_path / "mm.onnx")
    db = tmp_path / "db"
    result = run_cli("tune", model, "--trials", "2", "--db", db)
    assert result.code == 0, result.stderr
    assert "fused_matmul_relu" in result.stdout and "[1/1]" in result.stdout  # task list, a line per task
    assert "tuned mm.onnx for cpu: 2 new trials, 2 in the database" in result.stdout
    assert len(_record_lines(db)) == 2
    again = run_cli("tune", model, "--trials", "2", "--db", db)
    assert again.code == 0 and "nothing to tune" in again.stdout

    out = tmp_path / "build"
    compiled = run_cli("compile", model, "-o", out, "--db", db, "-v")
    assert compiled.code == 0, compiled.stderr
    assert "apply_tuning_database" in compiled.stdout


def test_cli_bad_inputs(tmp_path):
    model = save(_matmul_model(), tmp_path / "mm.onnx")
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    _assert_one_line_error(run_cli("tune", tmp_path / "nope.onnx", "--trials", "4", "--db", tmp_path / "db"), 1,
                           "nope.onnx")
    _assert_one_line_error(run_cli("tune", model, "--trials", "0", "--db", tmp_path / "db"), 2, "--trials")
    _assert_one_line_error(run_cli("tune", model, "--trials", "4", "--db", afile), 2, "is a file")
    _assert_one_line_error(run_cli("tune", model, "--trials", "4", "--db", tmp_path / "db", "--target", "gpu"), 2,
                           "unknown target 'gpu'")
    _assert_one_line_error(run_cli("compile", model, "-o", tmp_path / "out", "--db", tmp_path / "missing"), 2,
                           "no such directory")
    _assert_one_line_error(run_cli("compile", model, "-o", tmp_path / "out", "--db", tmp_path), 2,
                           "is not a hetc tuning database")
    assert not (tmp_path / "db").exists() and not (tmp_path / "out").exists()


def test_tuning_gain_rows_trace_each_task_to_its_default(tuned, tmp_path):
    """benchmarks/tuning_gain.py's per-task table: the default schedule's time beside the best,
    and seeded inputs for a model given without an .npz."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import tuning_gain

    model, _, result = tuned
    rows = tuning_gain.task_rows(result)
    assert rows and all(0 < r["best_ms"] <= r["default_ms"] for r in rows), rows
    feeds = tuning_gain.model_inputs(model, None)
    assert {k: v.shape for k, v in feeds.items()} == {"x": (16, 64)}, feeds
