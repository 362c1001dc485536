"""Tuning a model with symbolic dims at representative sizes, and the records on the dynamic artifact.

``hetc tune --plan-shape batch=4`` measures the kernels specialised to batch 4
(``hetc/tuning/specialize.py``); ``hetc compile --db`` replays each record's trace on the
symbolic kernel (``hetc/tuning/replay.py``), falling back to the default schedule where it
does not apply. The end-to-end test tunes a two-layer MLP with 8 trials (MetaSchedule's fixed
costs dominate: 15-40 s on a 2-core machine); the others need no measurement.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import tvm
import tvm_ffi
from conftest import assert_close, ort_run, run_cli, save
from onnx import helper
from onnx_util import make, tensor

import hetc
from hetc.backends.cpu.codegen import llvm_target
from hetc.backends.cpu.pipeline import pre_schedule_stages
from hetc.errors import UsageError
from hetc.frontends.onnx import load_model, to_relax
from hetc.options import CompileOptions
from hetc.passes import run_pipeline
from hetc.tuning import database as dbm
from hetc.tuning.replay import symbolic_trace
from hetc.tuning.specialize import specialize, symbolic_dims, workload

D_IN, D_H, D_OUT = 32, 64, 16
TRIALS = 8


def _mlp(seed: int = 0, batch="batch"):
    """Sigmoid, MatMul + Add + Relu, MatMul: three kernels over a symbolic batch (the
    element-wise one has no tile that a symbolic batch could enlarge: it always takes its record)."""
    rng = np.random.default_rng(seed)
    inits = {"w1": rng.normal(size=(D_IN, D_H)).astype(np.float32) * 0.2,
             "b1": rng.normal(size=(D_H,)).astype(np.float32),
             "w2": rng.normal(size=(D_H, D_OUT)).astype(np.float32) * 0.2}
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("MatMul", ["s", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"]), helper.make_node("Relu", ["hb"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    return make(nodes, [tensor("x", (batch, D_IN))], [tensor("y", (batch, D_OUT))], inits, name="mlp")


def _kernels(model) -> tvm.IRModule:
    """The module the tuner extracts its tasks from (fused, unscheduled)."""
    mod, _ = run_pipeline(to_relax(load_model(model)), pre_schedule_stages(CompileOptions()))
    return mod


def _check_outputs(compiled, model, batches=(3, 17)) -> None:
    for batch in batches:
        x = np.random.default_rng(batch).normal(size=(batch, D_IN)).astype(np.float32)
        assert_close(compiled.run({"x": x})["y"], ort_run(model, {"x": x})[0])


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The MLP tuned at batch 4: (model path, database dir, TuneResult)."""
    root = tmp_path_factory.mktemp("tuning_dynamic")
    model = save(_mlp(), root / "mlp.onnx")
    db = root / "db"
    result = hetc.tune(model, trials=TRIALS, database=db, plan_shape={"batch": 4}, progress=False)
    return model, db, result


def test_specialize_binds_dims_in_shapes_and_scalar_parameters(tmp_path):
    # x [batch, seq, 16] -> Reshape [-1, 16] -> MatMul: the matmul kernel takes its dims as scalars
    w = np.ones((16, 8), np.float32)
    nodes = [helper.make_node("Reshape", ["x", "s"], ["f"]), helper.make_node("MatMul", ["f", "w"], ["y"])]
    model = make(nodes, [tensor("x", ("batch", "seq", 16))], [tensor("y", (None, 8))],
                 {"w": w, "s": np.array([-1, 16], np.int64)})
    mod = _kernels(model)
    funcs = {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    assert all(set(symbolic_dims(f)) == {"batch", "seq"} for f in funcs.values())
    for func in funcs.values():
        static = specialize(func, {"batch": 2, "seq": 3})
        assert not symbolic_dims(static)
        assert int(static.params[-1].shape[0]) == 6  # batch * seq rows
        assert specialize(func, {"batch": 2}) is None  # seq not given: not a task
        assert tvm_ffi.structural_equal(workload(func, {"batch": 2, "seq": 3}), workload(func, {"batch": 2, "seq": 3}))


def test_sampled_tiles_replay_on_the_symbolic_kernel():
    """MetaSchedule's own design spaces (sampled tiles, post-processed) for the kernel at batch 4,
    rewritten by ``symbolic_trace`` and replayed on the symbolic kernel, compute the right values
    at sizes the tiles do not divide. (``replay`` itself may still refuse them, for their speed:
    the next test.)"""
    from tvm.s_tir import meta_schedule as ms

    from hetc.tuning.search import host_tensor_intrinsics

    mod = _kernels(_mlp())
    name = next(gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)
                and len(f.params) == 4)  # the fused matmul + add + relu
    func, target = mod[name], llvm_target(CompileOptions())
    with host_tensor_intrinsics():
        gen = ms.space_generator.PostOrderApply(sch_rules="llvm", postprocs="llvm", mutator_probs="llvm")
        ctx = ms.TuneContext(mod=workload(func, {"batch": 4}), target=target, space_generator=gen, task_name=name,
                             rand_state=1)
        spaces = ctx.generate_design_space()
        for sch in spaces:
            for postproc in ctx.space_generator.postprocs:
                assert postproc.apply(sch)
    assert spaces and all("SamplePerfectTile" in [i.kind.name for i in s.trace.insts] for s in spaces)
    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(D_IN, D_H)).astype(np.float32), rng.normal(size=(D_H,)).astype(np.float32)
    for sch in spaces[:2]:
        general = tvm.s_tir.Schedule(tvm.IRModule({"main": func}))
        symbolic_trace(sch.trace).apply_to_schedule(general, remove_postproc=False)
        scheduled = general.mod["main"]
        assert "T.where" in scheduled.script()  # the tail of the symbolic outer loop
        lib = tvm.compile(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}), target)
        for batch in (3, 9):
            x = rng.normal(size=(batch, D_IN)).astype(np.float32)
            out = tvm.runtime.tensor(np.zeros((batch, D_H), np.float32))
            lib["main"](*(tvm.runtime.tensor(a) for a in (x, w, b)), out)
            assert_close(out.numpy(), np.maximum(x @ w + b, 0))


def test_tune_dynamic_model_then_compile_with_database(tuned, tmp_path):
    model, db, result = tuned
    # the whole budget is allocated; each task's default was measured first, and the search may
    # spend less than its allocation where a kernel has few distinct schedules (which task
    # gets the rounds depends on this CPU's timings: on a Zen 5 the sigmoid is the slowest)
    assert len(result.tasks) == 3 and sum(t.budget for t in result.tasks) == TRIALS
    assert all(t.trials_added >= 1 for t in result.tasks) and 3 < result.trials_added <= TRIALS
    best, _ = dbm.load_best(db, llvm_target(CompileOptions()))
    for record in best.get_all_tuning_records():  # measured at batch 4: static workloads
        func = record.workload.mod["main"]
        assert not symbolic_dims(func) and int(func.params[0].shape[0]) == 4
    meta = json.loads((db / dbm.MARKER).read_text())
    assert meta["shapes"] == [{"batch": 4}] and meta["runs"][-1]["shape"] == {"batch": 4}
    # the best records were also measured on the symbolic kernels, against their defaults
    assert any("sigmoid" in name for name in result.symbolic)
    checks = {c["task"]: c for c in meta["symbolic"].values()}
    assert set(checks) == set(result.symbolic) and all(c["sizes"] == "batch=4" for c in checks.values())

    compiled = hetc.compile(model, database=db)
    tuning, kernels = compiled.report["tuning"], compiled.report["kernels"]
    replayed, fallback = tuning["tuned_symbolic"], tuning["fallback"]
    # every kernel is symbolic and has a record (each task's default schedule at least): it
    # replays that record, or says why not and keeps the default schedule
    assert set(compiled.report["kernel_dims"]) == set(kernels) == set(replayed) | set(fallback)
    assert set(replayed.values()) <= {"batch=4"}
    assert all(kernels[k] == "tuned" for k in replayed) and all(kernels[k] != "tuned" for k in fallback)
    assert (tuning["tuned"], tuning["default"]) == (len(replayed), len(fallback))
    for kernel, why in fallback.items():  # a record that lost on the symbolic kernel is not used
        lost = [c for task, c in checks.items() if kernel.startswith(task) and c["tuned_s"] > c["default_s"]]
        assert ("slower than the default schedule" in why) == bool(lost), (kernel, why)
    _check_outputs(compiled, model)

    # the measurements decide: the element-wise kernel's record applies when it won (as in a
    # database without measurements), and not when it lost
    sigmoid_key = next(k for k, c in meta["symbolic"].items() if "sigmoid" in c["task"])
    for won in (True, False):
        copy = tmp_path / f"db_{won}"
        shutil.copytree(db, copy)
        entry = meta["symbolic"][sigmoid_key]
        entry["tuned_s"], entry["default_s"] = (1e-6, 2e-6) if won else (2e-6, 1e-6)
        (copy / dbm.MARKER).write_text(json.dumps(meta))
        compiled = hetc.compile(model, database=copy)
        sigmoid = next(k for k in compiled.report["kernels"] if "sigmoid" in k)
        if won:
            assert compiled.report["tuning"]["tuned_symbolic"][sigmoid] == "batch=4"
            assert compiled.report["kernels"][sigmoid] == "tuned"
        else:
            assert "2.0 vs 1.0 us at batch=4" in compiled.report["tuning"]["fallback"][sigmoid]
            assert compiled.report["kernels"][sigmoid] != "tuned"
        _check_outputs(compiled, model)


def _static_only_record(key: tvm.IRModule, kind: str):
    """A schedule of the plain matmul that is valid at batch 4 but cannot serve every batch."""
    sch = tvm.s_tir.Schedule(key)
    block = sch.get_sblock("matmul")
    i, j, k = sch.get_loops(block)
    if kind == "regroup":  # the input's rows regrouped by 4: a symbolic batch would need padding
        sch.transform_layout(block, ("read", 0), lambda i, k: (i // 4, k, i % 4))
    elif kind == "vectorize":  # TVM lowers only constant-extent vector loops
        sch.reorder(j, k, i)
        sch.vectorize(i)
    else:  # tiles of 4 rows: with a symbolic batch the accumulator is sized by it
        io, ii = sch.split(i, [1, 4])
        jo, ji = sch.split(j, [None, 8])
        sch.reorder(io, jo, k, ii, ji)
        sch.reverse_compute_at(sch.cache_write(block, 0, "local"), jo)
        sch.parallel(sch.fuse(io, jo))
    return sch.trace


@pytest.mark.parametrize("kind, reason", [("regroup", "the trace does not apply"),
                                          ("vectorize", "the scheduled kernel does not lower"),
                                          ("row_tile", "would size matmul_local by its dim")])
def test_record_that_does_not_apply_falls_back_to_the_default(tmp_path, kind, reason):
    """A record that schedules the plain matmul at batch 4 but cannot serve every batch: the
    kernel gets its default schedule, the report says why, and the model runs."""
    from tvm.s_tir import meta_schedule as ms

    model = save(_mlp(seed=1), tmp_path / "mlp.onnx")
    mod, target = _kernels(model), llvm_target(CompileOptions())
    name, func = next((gv.name_hint, f) for gv, f in mod.functions.items()
                      if isinstance(f, tvm.tirx.PrimFunc) and len(f.params) == 3)  # lv, weight, out
    key = workload(func, {"batch": 4})
    db = tmp_path / "db"
    with dbm.open_for_tuning(db, target) as opened:
        opened.db.commit_tuning_record(ms.database.TuningRecord(
            _static_only_record(key, kind), opened.db.commit_workload(key), [1e-6], target,
            ms.arg_info.ArgInfo.from_prim_func(key["main"])))
        dbm.record_shape(opened.meta, {"batch": 4})
        opened.save_metadata()

    compiled = hetc.compile(model, database=db)
    tuning = compiled.report["tuning"]
    assert tuning["tuned"] == 0 and tuning["default"] == 3 and not tuning["tuned_symbolic"]
    (kernel, why), = tuning["fallback"].items()
    assert kernel.startswith(name) and why.startswith("record at batch=4: ") and reason in why, why
    assert compiled.report["kernels"][kernel] == "contraction"  # the default rule took it
    _check_outputs(compiled, model)

    if kind == "regroup":  # the same through the command line: one summary line
        result = run_cli("compile", model, "-o", tmp_path / "out", "--db", db)
        assert result.code == 0, result.stderr
        assert "tuning database: 0 kernel(s) tuned, 3 default; 1 record(s) did not apply" in result.stdout


def test_representative_sizes_are_required_and_checked(tmp_path):
    model = save(_mlp(), tmp_path / "mlp.onnx")
    db = tmp_path / "db"
    with pytest.raises(UsageError, match=r"symbolic dims batch: give the sizes to tune at with --plan-shape batch=SIZE"):
        hetc.tune(model, trials=2, database=db, progress=False)
    with pytest.raises(UsageError, match="has no such symbolic dim"):
        hetc.tune(model, trials=2, database=db, plan_shape={"batch": 4, "seq": 8}, progress=False)
    with pytest.raises(UsageError, match="outside the dim's range 1..8"):
        hetc.tune(model, trials=2, database=db, dims={"batch": (1, 8)}, plan_shape={"batch": 16}, progress=False)
    static = save(_mlp(batch=4), tmp_path / "static.onnx")
    with pytest.raises(UsageError, match=r"its symbolic dims: none"):
        hetc.tune(static, trials=2, database=db, plan_shape={"batch": 4}, progress=False)
    assert not db.exists()

    result = run_cli("tune", model, "--trials", "2", "--db", db)
    assert result.code == 2, (result.code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hetc: error: ") and "--plan-shape batch=SIZE" in lines[0]
    assert not db.exists()


def test_static_model_leaves_out_kernels_sized_at_run_time():
    """A model with static inputs whose kernels take a value known only at run time (here
    NonZero's count, as a detector's kept boxes): those kernels are not tasks, the others are
    (``hetc tune`` on torchvision's FCOS stopped with MetaSchedule's "Cannot convert from type
    Array[ir.Var]" when such a kernel became a task)."""
    from hetc.tuning.tasks import extract

    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("NonZero", ["r"], ["nz"]), helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             helper.make_node("GatherND", ["r", "idx"], ["picked"]), helper.make_node("Sigmoid", ["picked"], ["y"])]
    model = make(nodes, [tensor("x", (4, 6))], [tensor("y", ("k",))],
                 {"w": np.random.default_rng(0).normal(size=(6, 6)).astype(np.float32)})
    mod = _kernels(model)
    run_time_sized = [gv.name_hint for gv, f in mod.functions.items()
                      if isinstance(f, tvm.tirx.PrimFunc) and symbolic_dims(f)]
    assert run_time_sized  # the model has such kernels
    tasks = extract(mod, llvm_target(CompileOptions()))
    assert tasks and not [t.name for t in tasks if symbolic_dims(next(iter(t.mod.functions.values())))]
    assert any("matmul" in t.name for t in tasks)
