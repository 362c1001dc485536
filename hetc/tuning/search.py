"""Running MetaSchedule's search on hetc's tasks.

Per task: the post-order-apply design space of the target's default schedule rules, explored
by evolutionary search (population ``POPULATION``) guided by the XGBoost cost model, built by a
``LocalBuilder`` and measured by a ``LocalRunner`` on this machine, ``budget.ROUND`` candidates
per round. One cost model is shared by all tasks of a run, and on a resumed run it is first
trained on the trials the database already holds (``Search.warm_start``), so the search does
not start blind; evolutionary search itself seeds its population with the database's best
records of the task.

Tasks are tuned one at a time, most expensive first, each with its own trial budget
(``hetc.tuning.budget``), so an interrupted run has spent its time where it matters most.

Settings for this project's 2-core machines (see docs/tuning.md and TVM_NOTES):
- the builder uses ``worker.build``, which skips the 25-45 s tensor-intrinsics import that
  makes every default-builder candidate time out;
- ``XGBModel(num_warmup_samples=ROUND)``: with the default 100 the model would never be used
  at small budgets;
- ``EvolutionarySearch(population_size=128)``: 512 takes 45-90 s per round on conv tasks;
- the main process registers only the host's tensor intrinsics (``host_tensor_intrinsics``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import logging
import os
import platform
import shutil
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from ..errors import CompileError, last_line
from ..native_log import release_frames
from . import worker
from .budget import ROUND
from .database import LOG_DIR, OpenDatabase, mean_seconds
from .progress import ProgressCallback, TuningProgress
from .tasks import Task, device_kind

log = logging.getLogger(__name__)

POPULATION = 128
BUILD_TIMEOUT_S = 60.0  # per candidate, worker start-up (import tvm) included
RUN_TIMEOUT_S = 30.0
WARM_START_RECORDS = 256  # best records per task the cost model is trained on before a resumed run
_MS_LOGGER = "tvm.s_tir.meta_schedule"
_INTRIN = "tvm.s_tir.tensor_intrin"


@contextlib.contextmanager
def host_tensor_intrinsics() -> Iterator[None]:
    """Register only the tensor intrinsics of this machine's CPU family while tuning.

    ``TuneContext`` runs ``import tvm.s_tir.tensor_intrin``, which registers every family
    (CUDA alone takes ~30 s here). CPU schedule rules only need x86 (VNNI/AVX-512 int8 dot
    products) or ARM ones. This installs the package without its ``__init__``, imports the host's
    module, and removes the stand-in afterwards, so a later ``import tvm.s_tir.tensor_intrin``
    loads everything as usual (submodules already imported are reused, not registered twice).
    """
    machine = platform.machine().lower()
    family = "x86" if machine in ("x86_64", "amd64", "i686", "x86") else (
        "arm_cpu" if machine in ("aarch64", "arm64") else None)
    if _INTRIN in sys.modules or family is None:
        yield
        return
    import tvm.s_tir  # noqa: F401  (the parent package)

    spec = importlib.util.find_spec(_INTRIN)
    stand_in = types.ModuleType(_INTRIN)
    stand_in.__path__ = list(spec.submodule_search_locations or [])
    stand_in.__spec__ = spec
    stand_in.__file__ = spec.origin
    stand_in.__package__ = _INTRIN
    sys.modules[_INTRIN] = stand_in
    try:
        importlib.import_module(f"{_INTRIN}.{family}")
        yield
    finally:
        if sys.modules.get(_INTRIN) is stand_in:
            del sys.modules[_INTRIN]
        parent = sys.modules.get("tvm.s_tir")
        if parent is not None and getattr(parent, "tensor_intrin", None) is stand_in:
            delattr(parent, "tensor_intrin")


@contextlib.contextmanager
def metaschedule_log(directory: Path) -> Iterator[logging.Logger]:
    """Send MetaSchedule's logging to ``directory/tuning.log`` (not the console) while tuning;
    yields the logger for the tasks' tune contexts."""
    directory.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(directory / "tuning.log", mode="a")
    handler.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    loggers = [logging.getLogger(_MS_LOGGER), logging.getLogger("hetc.tuning.metaschedule")]
    saved = [(lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
        lg.propagate = False
    try:
        yield loggers[1]
    finally:
        for lg, (level, propagate) in zip(loggers, saved):
            lg.removeHandler(handler)
            lg.setLevel(level)
            lg.propagate = propagate
        handler.close()


class StopRequest:
    """Ctrl-C during tuning: the first one stops after the round in flight, keeping its trials.

    MetaSchedule's C++ loop does not let a ``KeyboardInterrupt`` through reliably (it is
    dropped, or turned into a RuntimeError), so while tuning, SIGINT only sets ``requested``;
    ``StopCallback`` then ends the task once the round's records are in the database, and
    ``Search.tune`` raises ``KeyboardInterrupt`` from Python. A second Ctrl-C stops at once
    (the default SIGINT action; the round in flight is lost, the database stays loadable).
    """

    def __init__(self, on_first: Callable[[], None], on_second: Callable[[], None]):
        self.requested = False
        self._on_first = on_first
        self._on_second = on_second

    def _handle(self, signum, _frame) -> None:
        if not self.requested:
            self.requested = True
            self._on_first()
            return
        self._on_second()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopRequest]:
        if (threading.current_thread() is not threading.main_thread()  # handlers are set there only
                or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):  # ignored, or the
            yield self  # embedding program handles Ctrl-C itself: leave it alone
            return
        previous = signal.signal(signal.SIGINT, self._handle)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


@derived_object
class StopCallback(PyMeasureCallback):
    """Ends the task after a round when a stop was requested (runs after AddToDatabase)."""

    def __init__(self, stop: StopRequest):
        super().__init__()
        self.stop = stop

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        if self.stop.requested:
            task_scheduler.terminate_task(task_id)


class Search:
    """The MetaSchedule machinery of one tuning run, shared by its tasks."""

    def __init__(self, target: tvm.target.Target, database: OpenDatabase, threads: int,
                 progress: TuningProgress, logger: logging.Logger, stop: StopRequest):
        self.stop = stop
        self.target = target
        self.database = database
        self.threads = max(1, threads)
        self.progress = progress
        self.logger = logger
        self.builder = ms.builder.LocalBuilder(max_workers=self.threads, timeout_sec=BUILD_TIMEOUT_S,
                                               f_build=worker.build)
        self.runner = ms.runner.LocalRunner(timeout_sec=RUN_TIMEOUT_S,
                                            initializer=functools.partial(worker.runner_init, self.threads))
        self.cost_model = ms.cost_model.XGBModel(num_warmup_samples=ROUND, num_tuning_cores=self.threads)

    def context(self, task: Task) -> ms.TuneContext:
        return ms.TuneContext(
            mod=task.mod, target=self.target, space_generator="post-order-apply",
            search_strategy=ms.search_strategy.EvolutionarySearch(population_size=POPULATION),
            task_name=task.name, num_threads=self.threads, logger=self.logger,
        ).clone()

    def warm_start(self, tasks: list[Task], workloads: list[ms.database.Workload]) -> int:
        """Train the cost model on the database's best records of ``tasks``; returns how many."""
        used = 0
        for task, workload in zip(tasks, workloads):
            records = self.database.db.get_top_k(workload, WARM_START_RECORDS)
            if not records:
                continue
            try:
                candidates = [r.as_measure_candidate() for r in records]
                results = [ms.runner.RunnerResult(list(r.run_secs), None) for r in records]
                self.cost_model.update(self.context(task), candidates, results)
                used += len(records)
            except Exception as err:  # noqa: BLE001 - a record that no longer replays: search without it
                log.warning("cost model warm start skipped task %s: %s", task.name, err)
                release_frames(err)
        return used

    def seed(self, tasks: list[Task], default_schedules, start: int, stop: int) -> list[float | None]:
        """Measure the backend's default schedules ``start..stop-1`` of each task (0 = the
        default, then its alternatives) and commit them to the defaults database; returns the
        best mean seconds per task (None: nothing measured).

        The database then holds the default next to whatever the search finds, so
        ``compile --db`` never picks a tuned kernel slower than the default one.
        """
        jobs = []  # (task index, schedule)
        for i, task in enumerate(tasks):
            func = next(iter(task.mod.functions.values()))
            found = default_schedules(func, self.target, stop) if default_schedules and stop > start else []
            jobs += [(i, sch) for _, sch in found[start:stop]]
        best: list[float | None] = [None] * len(tasks)
        measured = self.measure([(sch.mod, sch.mod) for _, sch in jobs], [tasks[i].name for i, _ in jobs])
        for (i, sch), found in zip(jobs, measured):
            if found is None:
                continue
            run_secs, args = found
            workload = self.database.defaults.commit_workload(tasks[i].mod)
            self.database.defaults.commit_tuning_record(
                ms.database.TuningRecord(sch.trace, workload, run_secs, self.target, args))
            mean = mean_seconds(run_secs)
            if mean is not None:
                best[i] = mean if best[i] is None else min(best[i], mean)
        return best

    def measure(self, jobs: list[tuple[tvm.IRModule, tvm.IRModule]], names: list[str]) -> list:
        """Build and run scheduled kernels: per job (the module built, a module with the same
        parameters and static shapes, for the arguments: itself, or a symbolic kernel's
        specialisation), ``(run_secs, args_info)`` or None where it did not build or run."""
        results: list = [None] * len(jobs)
        if not jobs:
            return results
        built = self.builder.build([ms.builder.BuilderInput(mod, self.target) for mod, _ in jobs])
        ready = []
        for k, ((_, shapes), result) in enumerate(zip(jobs, built)):
            if result.error_msg:
                log.warning("a schedule of %s did not build: %s", names[k], result.error_msg)
                continue
            ready.append((k, ms.arg_info.ArgInfo.from_entry_func(shapes, remove_preproc=True), result.artifact_path))
        device = device_kind(self.target)
        futures = self.runner.run([ms.runner.RunnerInput(path, device, args) for _, args, path in ready])
        for (k, args, path), future in zip(ready, futures):
            result = future.result()
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
            if result.error_msg or not result.run_secs:
                log.warning("a schedule of %s failed to run: %s", names[k],
                            (result.error_msg or "no timing").strip().splitlines()[-1])
                continue
            results[k] = ([float(x) for x in result.run_secs], args)
        return results

    def tune(self, index: int, task: Task, trials: int) -> None:
        """Spend ``trials`` new trials on ``task`` (task ``index`` of the progress display)."""
        self.progress.task_started(index)
        try:
            ms.tune_tasks(
                tasks=[self.context(task)], task_weights=[float(task.weight)],
                work_dir=str(self.database.path / LOG_DIR), max_trials_global=trials,
                max_trials_per_task=trials, num_trials_per_iter=min(ROUND, trials),
                builder=self.builder, runner=self.runner, database=self.database.db,
                cost_model=self.cost_model,
                measure_callbacks=[*ms.MeasureCallback.create("default"), ProgressCallback(self.progress),
                                   StopCallback(self.stop)],
                task_scheduler="round-robin", module_equality="structural",
            )
        except Exception as err:  # TVM's error types (a KeyboardInterrupt may arrive as one)
            release_frames(err)
            if self.stop.requested:
                raise KeyboardInterrupt from None
            raise CompileError(f"tuning task {task.name} failed: {last_line(err)}") from err
        finally:
            self.progress.task_finished(index)
        if self.stop.requested:
            raise KeyboardInterrupt
