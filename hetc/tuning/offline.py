"""Tuning for a device this machine does not have: candidates built here, measured there, kept here.

``hetc tune`` measures every candidate on the device it tunes for, so tuning for a GPU needs the
GPU on the machine that runs the search. A compile machine often has none (hetc compiles CUDA
anywhere nvcc is), and a lent GPU machine often has no compiler. This splits the loop into three
steps, the way MetaSchedule's builder and runner are split, with a file hand-over between them::

    hetc tune model.onnx --target cuda --export-candidates cands/ --per-task 128   # here, no GPU
    python3 hetc/runtime/measure.py cands/ measured.json                           # on the GPU machine
    hetc tune model.onnx --target cuda --db tuned/ --import-measurements cands/ measured.json
    hetc compile model.onnx --target cuda --db tuned/ -o build/

1. ``export_candidates``: the model's tasks (as ``hetc tune`` extracts them), those that make up
   ``cover`` of the estimated cost, each with the backend's default schedule and up to
   ``per_task`` distinct schedules drawn at random from MetaSchedule's design space (its
   ``ReplayTrace`` strategy: random decisions, postprocessors applied, so every candidate passed
   the same GPU checks a tuning trial does). Every task's candidates are built into one library
   (``task_NNN.so``, GPU code as nvcc fatbins: ``backends/cuda/binaries.py``) next to
   ``candidates.json`` (per candidate: its function in the library, its trace as a MetaSchedule
   record, the argument shapes).
2. ``hetc/runtime/measure.py`` on the device: TVM's runtime library only (the runtime bundle of
   ``scripts/runtime_bundle.py``), numpy, the libraries; each function timed with TVM's own time
   evaluator; one JSON of run times per candidate.
3. ``import_measurements``: the run times become tuning records in a normal hetc database (the
   default schedules in its defaults part), so ``compile --db`` picks the fastest per kernel and
   never one slower than the default.

Random samples are not an evolutionary search: with no device to ask between rounds there is no
cost model to steer by. The candidate count is what a single device run can afford (a few
thousand kernels time in a minute or two); measured per task, the best of them is kept.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from ..errors import CompileError, UsageError, last_line
from ..frontends.onnx.loader import ModelSource
from ..native_log import filtered_stderr
from .tasks import device_kind

CANDIDATES = "candidates.json"
# the candidates' traces, as a MetaSchedule JSON database (its C++ writer serializes every trace;
# the Python ``as_json`` does not know IndexMap, which CPU layout schedules hold)
TRACE_FILES = ("candidates_workload.json", "candidates_tuning_record.json")
FORMAT = "hetc-tuning-candidates"
VERSION = 1
FAILED_RUN_SECS = [1e10]  # MetaSchedule's record of a trial that did not run
DEFAULT = "default"
SAMPLED = "sampled"


@dataclass
class ExportSummary:
    directory: str
    tasks: int  # tasks exported
    tasks_total: int  # tasks the model has
    candidates: int
    cover: float  # share of the estimated cost the exported tasks make up
    seconds: float


class _Library:
    """A built runtime module in the shape the backends' ``export`` takes (an executable)."""

    def __init__(self, module) -> None:
        self.mod = module

    def export_library(self, path: str, **kwargs) -> None:
        self.mod.export_library(path, **kwargs)


def _chosen(tasks: list, cover: float, max_tasks: int | None) -> list:
    """The most expensive tasks that together make up ``cover`` of the model's estimated cost."""
    total = sum(t.cost for t in tasks) or 1.0
    chosen, acc = [], 0.0
    for task in tasks:  # most expensive first (``extract``)
        if acc >= cover * total or (max_tasks is not None and len(chosen) >= max_tasks):
            break
        chosen.append(task)
        acc += task.cost
    return chosen


def _trace_key(trace) -> tuple:
    """A schedule trace's instructions and decisions, comparable across processes and databases.
    (Structural hashes of the scheduled modules, a record's replayed from the database, did not
    recognise a re-proposed schedule in CI; why was not established.)"""
    decisions = trace.decisions
    return tuple((str(inst.kind.name), str(decisions[inst]) if inst in decisions else "") for inst in trace.insts)


def sample_schedules(task, target: tvm.target.Target, count: int, seed: int, guide=None) -> tuple[str, list]:
    """Up to ``count`` distinct MetaSchedule candidates of ``task``: (the strategy, candidates).

    Without ``guide``: random decisions on its design space, postprocessors applied
    (``ReplayTrace``). With ``guide``, an open database (``tuning.database.OpenDatabase``) that
    holds measured records of the task: MetaSchedule's evolutionary search, its population seeded
    from the best measured schedules and mutated, ranked by an XGBoost model trained on the
    task's measured search records, the top ``count`` not yet measured (a second round). The
    backend's default schedules are left out: they are not points of MetaSchedule's design space
    (the CPU's fail its consistency check inside the search)."""
    threads = max(1, os.cpu_count() or 1)
    database = cost_model = None
    strategy = ms.search_strategy.ReplayTrace()
    if guide is not None and guide.db.has_workload(task.mod):
        records = [r for r in guide.db.get_top_k(guide.db.commit_workload(task.mod), 100_000)
                   if r.run_secs and float(r.run_secs[0]) < 1e9]
        if records:
            database = guide.db
            cost_model = ms.cost_model.XGBModel(num_warmup_samples=0, num_tuning_cores=threads)
            strategy = ms.search_strategy.EvolutionarySearch(population_size=max(256, 4 * count))
    ctx = ms.TuneContext(mod=task.mod, target=target, space_generator="post-order-apply",
                         search_strategy=strategy, task_name=task.name, num_threads=threads,
                         rand_state=seed).clone()
    if cost_model is not None:
        cost_model.update(ctx, [r.as_measure_candidate() for r in records],
                          [ms.runner.RunnerResult(list(r.run_secs), None) for r in records])
    # MetaSchedule's evolutionary search seeds its population with the database's best and does
    # not skip what the database has measured: those are left out here ("not yet measured"), so
    # its one ranked round asks for that many more (it may rank every measured one on top).
    measured = {_trace_key(r.trace) for r in records} if cost_model is not None else set()
    per_iter = min(64, count) if cost_model is None else count + len(measured)
    spaces = ctx.generate_design_space()
    ctx.pre_tuning(max_trials=max(count * 2, per_iter), num_trials_per_iter=per_iter,
                   design_spaces=spaces, database=database, cost_model=cost_model)
    found: dict[int, object] = {}
    try:
        while len(found) < count:
            batch = ctx.generate_measure_candidates()
            if not batch:
                break
            for cand in batch:
                if _trace_key(cand.sch.trace) not in measured:
                    found.setdefault(tvm_ffi.structural_hash(cand.sch.mod), cand)
            if cost_model is not None:
                break  # one ranked round: the model has nothing new to learn from until measured
            ctx.notify_runner_results(batch, [ms.runner.RunnerResult([1.0], None) for _ in batch])
    finally:
        ctx.post_tuning()
    return type(strategy).__name__, list(found.values())[:count]


def _build(funcs: dict[str, tvm.tirx.PrimFunc], target: tvm.target.Target) -> tuple[object, list[str]]:
    """Build the functions into one module; a function that does not build is left out (named)."""
    try:
        with filtered_stderr():
            return tvm.build(tvm.IRModule(funcs), target=target), []
    except Exception:  # noqa: BLE001 - find the ones that fail, build the rest
        good, bad = {}, []
        for name, func in funcs.items():
            try:
                with filtered_stderr():
                    tvm.build(tvm.IRModule({name: func}), target=target)
                good[name] = func
            except Exception:  # noqa: BLE001 - TVM's error types
                bad.append(name)
        if not good:
            return None, bad
        with filtered_stderr():
            return tvm.build(tvm.IRModule(good), target=target), bad


def export_candidates(
    model: ModelSource,
    out: str | os.PathLike,
    target: str = "cuda",
    *,
    per_task: int = 128,
    cover: float = 0.95,
    max_tasks: int | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    layout: str | None = None,
    arch: Sequence[str] = (),
    dims: Mapping[str, Sequence[int]] | None = None,
    plan_shape: Mapping[str, int] | None = None,
    base_dir: str | os.PathLike | None = None,
    constant_inputs=None,
    seed: int = 1,
    database: str | os.PathLike | None = None,
    log=print,
) -> ExportSummary:
    """Write ``model``'s tuning candidates for ``target`` to ``out`` (a new or empty directory).

    With ``database`` (one that earlier measurements were imported into), the candidates of a
    task it has records of come from the search its measurements guide (``sample_schedules``):
    the next round. The database is only read.
    """
    from . import database as dbm
    from .tuner import TuningSetup

    if isinstance(per_task, bool) or not isinstance(per_task, int) or per_task < 0:
        raise UsageError(f"per_task must be a whole number >= 0, got {per_task!r}")
    if not 0 < cover <= 1:
        raise UsageError(f"cover must be in (0, 1], got {cover!r}")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} exists and is not an empty directory; choose a new one for the candidates")
    setup = TuningSetup.of(target, input_shapes, layout, 0, arch, dims, plan_shape)
    start = time.perf_counter()
    loaded, sizes, tasks = setup.tasks(model, base_dir, constant_inputs)
    chosen = _chosen(tasks, cover, max_tasks)
    tvm_target = setup.tvm_target
    export = setup.target.backend.export
    guide = None
    if database is not None:
        guide = dbm.open_read_only(Path(database), tvm_target)
    out.mkdir(parents=True, exist_ok=True)
    traces = ms.database.JSONDatabase(*(str(out / f) for f in TRACE_FILES), allow_missing=True)
    line = 0  # the next record's line in the traces' record file
    # nvcc/g++ run beside the next task's sampling (they are separate processes)
    writer = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1)))
    pending: list[tuple[concurrent.futures.Future, dict]] = []
    total_cost = sum(t.cost for t in tasks) or 1.0
    head = {"format": FORMAT, "version": VERSION, "model": Path(loaded.name).name, "target": str(tvm_target),
            "device": device_kind(tvm_target), "shapes": sizes}

    def write_manifest() -> None:
        """candidates.json with every task whose library is written (an interrupted export keeps them)."""
        done = [e for f, e in pending if f.done() and f.exception() is None]
        covered = sum(e["cost"] for e in done) / total_cost
        tmp = out / (CANDIDATES + ".tmp")
        tmp.write_text(json.dumps({**head, "cover": covered, "tasks": done}, indent=1))
        tmp.replace(out / CANDIDATES)

    try:
        for index, task in enumerate(chosen):
            func = next(iter(task.mod.functions.values()))
            schedules = [(DEFAULT, name, sch) for name, sch in
                         (setup.support.default_schedules(func, tvm_target, 1) if setup.support.default_schedules else [])]
            strategy, sampled = sample_schedules(task, tvm_target, per_task, seed + index, guide)
            schedules += [(SAMPLED, strategy, cand.sch) for cand in sampled]
            workload = traces.commit_workload(task.mod)
            args = ms.arg_info.ArgInfo.from_entry_func(task.mod, remove_preproc=True)
            funcs, candidates = {}, []
            for k, (kind, rule, sch) in enumerate(schedules):
                name = f"c{k}"
                funcs[name] = sch.mod["main"].with_attr("global_symbol", name)
                traces.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, None, tvm_target, args))
                candidates.append({"func": name, "kind": kind, "rule": rule, "record": line})
                line += 1
            lib, failed = _build(funcs, tvm_target)
            candidates = [c for c in candidates if c["func"] not in failed]
            if lib is None:
                log(f"  {task.name}: no candidate built, left out")
                continue
            path = out / f"task_{index:03d}.so"
            entry = {"name": task.name, "weight": task.weight, "flops": task.flops, "cost": task.cost,
                     "library": path.name, "args": [a.as_json() for a in args], "candidates": candidates,
                     "failed_to_build": len(failed)}
            future = writer.submit(export, _Library(lib), path, setup.options)
            future.add_done_callback(lambda f, name=task.name, n=len(candidates): log(f"  {name}: {n} built"))
            pending.append((future, entry))
            log(f"  {task.name} (x{task.weight}): {len(candidates)} candidates"
                + (f", {len(failed)} did not build" if failed else ""))
            write_manifest()
        for future, _ in pending:
            future.result()
    except CompileError:
        raise
    except Exception as err:  # TVM's error types
        raise CompileError(f"exporting tuning candidates failed: {last_line(err)}") from err
    finally:
        writer.shutdown(wait=True)
        if pending:
            write_manifest()
    entries = [e for _, e in pending]
    covered = sum(e["cost"] for e in entries) / total_cost
    return ExportSummary(str(out), len(entries), len(tasks), sum(len(e["candidates"]) for e in entries),
                         covered, time.perf_counter() - start)


def read_candidates(directory: str | os.PathLike) -> dict:
    path = Path(directory) / CANDIDATES
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{directory}: no {CANDIDATES} here (write one with --export-candidates)") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}: not valid JSON ({err.msg}, line {err.lineno})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UsageError(f"{path}: not a hetc tuning-candidates file")
    return manifest


@dataclass
class ImportSummary:
    database: str
    tasks: int
    measured: int  # candidates with a run time
    failed: int  # candidates that did not run on the device (a task it never reached: not counted)
    # per task: name, weight, default and best mean seconds
    rows: list[dict]
    device: str


def import_measurements(candidates: str | os.PathLike, measurements: str | os.PathLike,
                        database: str | os.PathLike) -> ImportSummary:
    """Store the device's run times of the exported candidates as records of ``database``."""
    from . import database as dbm

    manifest = read_candidates(candidates)
    try:
        measured = json.loads(Path(measurements).read_text())
    except FileNotFoundError:
        raise UsageError(f"{measurements}: no such file") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"{measurements}: not valid JSON ({err.msg}, line {err.lineno})") from None
    if not isinstance(measured, dict) or not isinstance(measured.get("tasks"), dict):
        raise UsageError(f"{measurements}: not a measurement file of hetc/runtime/measure.py")
    target = tvm.target.Target(json.loads(manifest["target"]))
    directory = Path(candidates)
    try:
        workload_rows, record_rows = ([json.loads(ln) for ln in (directory / f).read_text().splitlines()
                                       if ln.strip()] for f in TRACE_FILES)
    except (OSError, json.JSONDecodeError) as err:
        raise UsageError(f"{directory}: the candidates' traces cannot be read ({err})") from None
    db_path = Path(database)
    dbm.check_tuning_path(db_path)
    rows, ok, bad = [], 0, 0
    device = str(measured.get("device_name") or measured.get("device") or "?")
    with dbm.open_for_tuning(db_path, target) as db:
        for entry in manifest["tasks"]:
            if entry["library"] not in measured["tasks"]:  # not reached on the device: no records
                rows.append({"task": entry["name"], "weight": entry["weight"], "flops": entry["flops"],
                             "default_s": None, "best_s": None, "candidates": 0})
                continue
            times = measured["tasks"][entry["library"]].get("run_secs", {})
            default_s, best_s = None, None
            for cand in entry["candidates"]:
                secs = times.get(cand["func"])
                run_secs = [float(s) for s in secs] if secs else FAILED_RUN_SECS
                ok, bad = (ok + 1, bad) if secs else (ok, bad + 1)
                part = db.defaults if cand["kind"] == DEFAULT else db.db
                index, record = record_rows[cand["record"]]
                workload = part.commit_workload(ms.database.Workload.from_json(workload_rows[index]).mod)
                rec = ms.database.TuningRecord.from_json(record, workload)
                part.commit_tuning_record(ms.database.TuningRecord(rec.trace, workload, run_secs, rec.target,
                                                                   rec.args_info))
                if secs:
                    mean = sum(run_secs) / len(run_secs)
                    best_s = mean if best_s is None else min(best_s, mean)
                    if cand["kind"] == DEFAULT:
                        default_s = mean
            rows.append({"task": entry["name"], "weight": entry["weight"], "flops": entry["flops"],
                         "default_s": default_s, "best_s": best_s, "candidates": len(entry["candidates"])})
        db.meta.setdefault("runs", []).append({
            "model": manifest["model"], "remote": device, "candidates": ok + bad,
            "measured": ok, "complete": True, "started": measured.get("started", ""),
        })
        db.save_metadata()
    return ImportSummary(str(db_path), len(rows), ok, bad, rows, device)


__all__ = ["ExportSummary", "ImportSummary", "export_candidates", "import_measurements", "read_candidates"]
