"""``hetc.tune``: load a model, extract its tasks, spend the trial budget, keep the database.

    result = hetc.tune("model.onnx", target="cpu", trials=500, database="model.tuning")
    model = hetc.compile("model.onnx", target="cpu", database="model.tuning")

Tuning again with the same database resumes: trials already stored count towards ``trials``,
and only the difference is spent (see ``hetc.tuning.budget``).
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console

from ..backends.cpu.int8 import integer_kernels
from ..errors import UsageError
from ..frontends.onnx.loader import ModelSource
from ..native_log import filtered_stderr
from ..options import CompileOptions

DEFAULT_MAX_TRIALS_PER_TASK = 64
DEFAULT_VARIANTS = 4  # a task's first trials: the default schedule and 3 alternatives (cpu.md)


@dataclass
class TaskResult:
    name: str
    weight: int  # calls per model run
    flops: float  # per call
    budget: int  # trials this task is allocated for the requested total
    trials_before: int  # trials in the database before this run
    trials_added: int  # trials this run measured
    best_seconds: float | None  # best measured mean run time, None if no trial succeeded
    default_seconds: float | None = None  # the default schedule's measured mean run time

    @property
    def trials(self) -> int:
        return self.trials_before + self.trials_added


@dataclass
class TuneResult:
    """What a tuning run did; ``estimated_latency`` is sum(weight x best) over measured tasks."""

    model: str
    target: str
    database: str
    trials_requested: int
    max_trials_per_task: int
    tasks: list[TaskResult] = field(default_factory=list)
    seconds: float = 0.0
    repaired: str = ""  # what opening the database repaired, if anything
    # a dynamic model's symbolic kernels: {task: {"tuned_s", "default_s"}}, the best record replayed
    # on the symbolic kernel vs its default schedule at the tuning sizes (``symbolic_check``)
    symbolic: dict[str, dict] = field(default_factory=dict)

    @property
    def trials_added(self) -> int:
        return sum(t.trials_added for t in self.tasks)

    @property
    def trials(self) -> int:
        return sum(t.trials for t in self.tasks)

    @property
    def estimated_latency(self) -> float | None:
        from .progress import weighted_latency

        latency, known = weighted_latency(self.tasks)
        return latency if known else None

    @property
    def seconds_per_trial(self) -> float | None:
        return self.seconds / self.trials_added if self.trials_added else None

    def to_json(self) -> dict:
        data = asdict(self)
        data.update(trials_added=self.trials_added, trials=self.trials, estimated_latency=self.estimated_latency)
        return data


def _check_counts(trials, max_trials_per_task) -> None:
    for name, value in (("trials", trials), ("max_trials_per_task", max_trials_per_task)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise UsageError(f"{name} must be a whole number >= 1, got {value!r}")


@dataclass
class TuningSetup:
    """What tuning and candidate export share: the target's tuning support and the compile
    options the tasks are extracted with (they must be the ones ``compile`` is given later)."""

    target: object  # hetc.targets.Target
    support: object  # hetc.tuning.tasks.TuningSupport
    options: CompileOptions

    @classmethod
    def of(cls, target, input_shapes=None, layout=None, num_threads=0, arch=(), dims=None, plan_shape=None):
        from ..targets import TargetKind, parse_targets
        from .tasks import tuning_support

        targets = parse_targets(target)
        if len(targets) != 1 or targets[0].kind is not TargetKind.TVM_NATIVE:
            raise UsageError(f"tuning takes one target, got '{','.join(t.name for t in targets)}'")
        tgt = targets[0]
        options = CompileOptions((tgt.name,), {k: tuple(v) for k, v in (input_shapes or {}).items()}, layout,
                                 num_threads, arch=tuple(arch),
                                 dims={k: (int(v[0]), int(v[1])) for k, v in (dims or {}).items()},
                                 plan_shape={k: int(v) for k, v in (plan_shape or {}).items()})
        return cls(tgt, tuning_support(tgt.name), options)

    @property
    def tvm_target(self):
        return self.support.tvm_target(self.options)

    def tasks(self, model: ModelSource, base_dir=None, constant_inputs=None):
        """Load ``model`` and extract its tasks: ``(loaded model, tuning sizes or None, tasks)``."""
        from ..api import _check_supported
        from ..frontends.onnx import load_model, to_relax
        from ..graph import build_opgraph
        from ..passes import run_pipeline
        from .tasks import extract

        with filtered_stderr():
            loaded = load_model(model, self.options.input_shapes, base_dir, constant_inputs, self.options.dims,
                                fuse_qdq_convs=integer_kernels(self.options))
            sizes = tuning_sizes(loaded, self.options.plan_shape)
            mod = to_relax(loaded)
            _check_supported(build_opgraph(mod, [self.target]), self.target)
            mod, _ = run_pipeline(mod, self.support.pre_schedule_stages(self.options))
        return loaded, sizes, extract(mod, self.tvm_target, sizes)


def tune(
    model: ModelSource,
    target: str | Sequence[str] = "cpu",
    trials: int = 0,
    database: str | os.PathLike | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    max_trials_per_task: int = DEFAULT_MAX_TRIALS_PER_TASK,
    layout: str | None = None,
    num_threads: int = 0,
    base_dir: str | os.PathLike | None = None,
    constant_inputs: Mapping[str, np.ndarray] | None = None,
    arch: Sequence[str] = (),
    dims: Mapping[str, Sequence[int]] | None = None,
    plan_shape: Mapping[str, int] | None = None,
    progress: bool | Console = True,
) -> TuneResult:
    """Tune ``model``'s kernels for ``target`` with MetaSchedule; records go to ``database``.

    ``trials`` is the total for the model: trials the database already holds for its tasks
    count, so running again with the same ``database`` resumes and a larger ``trials`` tops it
    up. Each task gets at most ``max_trials_per_task``. ``input_shapes``, ``layout``,
    ``constant_inputs`` and ``dims`` must be the ones later given to ``hetc.compile``: they
    change the kernels, and records only apply to identical kernels. A model with symbolic dims
    is tuned at the representative sizes ``plan_shape`` ({"batch": 4}, one per symbolic dim):
    its kernels are measured specialised to them, the sizes are stored in the database, and
    ``compile`` gives the symbolic kernels those records' schedules (docs/dynamic-shapes.md).
    ``progress`` prints a live table on a terminal and one line per task otherwise (``False``:
    silent; a rich ``Console``: print there).
    """
    from . import database as dbm
    from .budget import allocate, remaining
    from .progress import TaskProgress, TuningProgress
    from .search import Search, StopRequest, host_tensor_intrinsics, metaschedule_log
    from .symbolic_check import measure_symbolic

    _check_counts(trials, max_trials_per_task)
    if database is None:
        raise UsageError("tuning needs a database directory (--db DIR / database=DIR) to store its trials")
    db_path = Path(database)
    dbm.check_tuning_path(db_path)
    setup = TuningSetup.of(target, input_shapes, layout, num_threads, arch, dims, plan_shape)
    support, options = setup.support, setup.options
    if support.require_device is not None:
        support.require_device()  # every candidate is measured on the device: fail before any work
    console = progress if isinstance(progress, Console) else (Console(highlight=False) if progress else None)
    start = time.perf_counter()
    loaded, sizes, tasks = setup.tasks(model, base_dir, constant_inputs)
    tvm_target = setup.tvm_target
    result = TuneResult(Path(loaded.name).name, setup.target.name, str(db_path), int(trials), int(max_trials_per_task))

    with dbm.open_for_tuning(db_path, tvm_target) as db, host_tensor_intrinsics(), \
            metaschedule_log(db_path / dbm.LOG_DIR) as ms_logger:
        result.repaired = db.repaired.describe()
        if sizes:
            dbm.record_shape(db.meta, sizes)
            db.save_metadata()  # before any record: a killed run's records stay usable
        workloads = [db.db.commit_workload(t.mod) for t in tasks]
        before = db.trial_counts(workloads)
        stop = StopRequest(lambda: shown.note("stopping after the round in flight, keeping its trials "
                                              "(Ctrl-C again to stop now and lose them)"),
                           lambda: (shown.end(), shown.note("stopped now; the round in flight is lost")))
        search = Search(tvm_target, db, options.threads, None, ms_logger, stop)
        # Measure each new task's default schedule first (one trial each, within the budget): the
        # budget then follows where the model's time goes, not only its FLOPs (a depthwise conv
        # has few FLOPs and takes long), and the database holds the default to compare against.
        fresh = [i for i, n in enumerate(before) if n == 0][:max(0, int(trials) - sum(before))]
        if fresh:
            search.seed([tasks[i] for i in fresh], support.default_schedules, 0, 1)
        seeded_before = before
        before = db.trial_counts(workloads)
        best = [db.best_seconds(w) for w in workloads]
        allocation = allocate([_cost(t, b) for t, b in zip(tasks, best)], int(trials), int(max_trials_per_task))
        budgets = remaining(allocation, before, int(trials))
        states = [TaskProgress(t.name, t.weight, t.flops, n, b, s)
                  for t, n, b, s in zip(tasks, before, budgets, best)]
        shown = TuningProgress(states, console)
        search.progress = shown
        run = {"model": result.model, "started": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"), "trials_requested": int(trials), "max_trials_per_task": int(max_trials_per_task),
            "complete": False, **({"shape": sizes} if sizes else {})}
        try:
            shown.begin()
            if any(budgets):
                with stop.installed():
                    search.warm_start(tasks, workloads)
                    for i, (task, n) in enumerate(zip(tasks, budgets)):
                        if not n:
                            continue
                        shown.task_started(i)
                        # the default's alternatives (other register tiles), once per task
                        have = db.default_counts([workloads[i]])[0]
                        extra = min(n, max(0, DEFAULT_VARIANTS - have)) if have == before[i] else 0
                        if extra:
                            measured = search.seed([task], support.default_schedules, have, have + extra)
                            shown.measured_round(i, measured)
                        if n > extra:
                            search.tune(i, task, n - extra)
                        else:
                            shown.task_finished(i)
            if sizes and tvm_target.kind.name == "llvm" and (any(budgets) or _unchecked(tasks, db.meta)):
                checked = measure_symbolic(tasks, db, search, support.default_schedules, sizes)
                db.meta.setdefault("symbolic", {}).update(checked)
                result.symbolic = {c["task"]: {"tuned_s": c["tuned_s"], "default_s": c["default_s"]}
                                   for c in checked.values()}
            run["complete"] = True
        finally:
            shown.end()
            after = db.trial_counts(workloads)
            result.tasks = [TaskResult(t.name, t.weight, t.flops, a, n, m - n, db.best_seconds(w), db.default_seconds(w))
                            for t, a, n, m, w in zip(tasks, allocation, seeded_before, after, workloads)]
            result.seconds = time.perf_counter() - start
            run.update(seconds=round(result.seconds, 1), trials_added=result.trials_added, tasks=len(tasks))
            db.meta.setdefault("runs", []).append(run)
            db.save_metadata()
    return result


def _unchecked(tasks, meta: dict) -> bool:
    """Whether a symbolic task has no ``symbolic_check`` measurement in the database yet."""
    from .symbolic_check import workload_key

    done = meta.get("symbolic", {})
    return any(t.symbolic is not None and workload_key(t.mod) not in done for t in tasks)


def tuning_sizes(loaded, plan_shape: Mapping[str, int]) -> dict[str, int] | None:
    """The sizes a model's symbolic dims are tuned at (None for a static model): one per dim,
    from ``--plan-shape``, or a UsageError naming the dims to give."""
    unknown = sorted(set(plan_shape) - set(loaded.dims))
    if unknown:
        raise UsageError(f"--plan-shape {', '.join(unknown)}: {Path(loaded.name).name} has no such symbolic dim "
                         f"(its symbolic dims: {', '.join(loaded.dims) or 'none'})")
    if not loaded.dims:
        return None
    missing = [name for name in loaded.dims if name not in plan_shape]
    if missing:
        example = ",".join(f"{name}=SIZE" for name in missing)
        raise UsageError(f"{Path(loaded.name).name} has symbolic dims {', '.join(loaded.dims)}: give the "
                         f"sizes to tune at with --plan-shape {example} (API: plan_shape=), or bind them "
                         "with --input-shape")
    for name, (low, high) in loaded.dims.items():
        if not low <= plan_shape[name] <= high:
            raise UsageError(f"--plan-shape {name}={plan_shape[name]} is outside the dim's range {low}..{high}")
    return {name: int(plan_shape[name]) for name in loaded.dims}


ASSUMED_FLOPS = 5e10  # FLOP/s (or elements/s) for a task whose default could not be measured


def _cost(task, best_seconds: float | None) -> float:
    """A task's share of the model's run time in seconds: measured, else estimated from its size."""
    if best_seconds is not None:
        return task.weight * best_seconds
    return task.cost / ASSUMED_FLOPS


__all__ = ["DEFAULT_MAX_TRIALS_PER_TASK", "TaskResult", "TuneResult", "tune", "tuning_sizes"]
