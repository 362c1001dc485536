"""Showing a tuning run: a live table on a terminal, one line per task otherwise.

``TuningProgress`` holds the state (trials and best latency per task, time); MetaSchedule
feeds it through ``ProgressCallback``, a measure callback called after every measured round.
On a terminal the display is a live table (tasks done / total, trials and best latency per
task, the estimated model latency, elapsed and estimated remaining time); when stdout is not
a terminal (a pipe, a CI log) it prints the task list once and then one line per finished task.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from .database import mean_seconds

log = logging.getLogger(__name__)


@dataclass
class TaskProgress:
    name: str
    weight: int
    flops: float
    trials_before: int  # in the database when the run started
    budget: int  # new trials this run may spend on the task
    best_seconds: float | None  # best mean run time so far (database + this run)
    measured: int = 0  # new trials measured in this run
    failed: int = 0  # of those, trials that did not build or run
    done: bool = False


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:,.1f}"


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class TuningProgress:
    """Progress of one tuning run over its tasks, rendered with rich."""

    def __init__(self, tasks: list[TaskProgress], console: Console | None, live: bool | None = None):
        self.tasks = tasks
        self.console = console
        self.live_mode = bool(console is not None and (console.is_terminal if live is None else live))
        self.start = time.perf_counter()
        self.current: int | None = None
        self._live: Live | None = None

    # -- numbers -------------------------------------------------------------------------

    @property
    def total_budget(self) -> int:
        return sum(t.budget for t in self.tasks)

    @property
    def measured(self) -> int:
        return sum(t.measured for t in self.tasks)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def remaining_seconds(self) -> float | None:
        """Time left at the run's average seconds per trial so far (None before the first round)."""
        if not self.measured:
            return None
        left = sum(max(0, t.budget - t.measured) for t in self.tasks if not t.done)
        return self.elapsed() / self.measured * left

    def estimated_latency(self) -> tuple[float, int]:
        return weighted_latency(self.tasks)

    # -- events ----------------------------------------------------------------------------

    def begin(self) -> None:
        if self.console is None:
            return
        if self.live_mode:
            self._live = Live(self, console=self.console, refresh_per_second=1, transient=False)
            self._live.start()
        else:
            self.console.print(self._task_table())

    def task_started(self, index: int) -> None:
        self.current = index
        self._refresh()

    def measured_round(self, index: int, seconds: list[float | None]) -> None:
        """A round of trials of task ``index`` was measured; None marks a failed trial."""
        task = self.tasks[index]
        task.measured += len(seconds)
        task.failed += sum(1 for s in seconds if s is None)
        good = [s for s in seconds if s is not None]
        if good and (task.best_seconds is None or min(good) < task.best_seconds):
            task.best_seconds = min(good)
        self._refresh()

    def task_finished(self, index: int) -> None:
        task = self.tasks[index]
        task.done = True
        self.current = None
        if self.console is not None and not self.live_mode:
            done = sum(1 for t in self.tasks if t.done)
            total_tuned = sum(1 for t in self.tasks if t.budget)
            est, known = self.estimated_latency()
            failed = f" ({task.failed} failed)" if task.failed else ""
            self.console.print(
                f"[{done}/{total_tuned}] {task.name}: +{task.measured} trials{failed} "
                f"({task.trials_before + task.measured} in db), best {_us(task.best_seconds)} us x{task.weight} | "
                f"model ~{_us(est if known else None)} us ({known}/{len(self.tasks)} tasks measured) | "
                f"{_clock(self.elapsed())} elapsed, ~{_clock(self.remaining_seconds())} left",
                soft_wrap=True, markup=False, highlight=False)
        self._refresh()

    def note(self, message: str) -> None:
        """A message between the updates (above the live table on a terminal)."""
        if self.console is not None:
            self.console.print(message, soft_wrap=True, markup=False, highlight=False)

    def end(self) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.stop()
            self._live = None

    # -- rendering -------------------------------------------------------------------------

    def __rich__(self) -> Group:  # the live display re-renders this every second (elapsed time ticks)
        return self._render()

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.refresh()

    def _task_table(self) -> Table:
        table = Table(title=f"{len(self.tasks)} tuning tasks, {self.total_budget} new trials",
                      title_justify="left")
        for col in ("task", "weight", "MFLOP", "in db", "budget", "trials", "best us", ""):
            table.add_column(col, justify="left" if col in ("task", "") else "right")
        for i, t in enumerate(self.tasks):
            state = "running" if i == self.current else ("done" if t.done else "")
            table.add_row(t.name, str(t.weight), f"{t.flops / 1e6:,.2f}", str(t.trials_before), str(t.budget),
                          str(t.measured), _us(t.best_seconds), state)
        return table

    def _render(self) -> Group:
        done = sum(1 for t in self.tasks if t.done)
        tuned = sum(1 for t in self.tasks if t.budget)
        est, known = self.estimated_latency()
        status = Text(
            f"tasks {done}/{tuned} · trials {self.measured}/{self.total_budget} · "
            f"estimated model latency {_us(est if known else None)} us ({known}/{len(self.tasks)} tasks measured) · "
            f"elapsed {_clock(self.elapsed())} · remaining ~{_clock(self.remaining_seconds())}")
        return Group(self._task_table(), status)


def weighted_latency(tasks) -> tuple[float, int]:
    """(sum of weight x best seconds over tasks with a measurement, number of such tasks); works
    for anything with ``weight`` and ``best_seconds`` (live progress rows, finished results)."""
    known = [t for t in tasks if t.best_seconds is not None]
    return sum(t.weight * t.best_seconds for t in known), len(known)


def _mean_seconds(result) -> float | None:
    return None if result.error_msg is not None else mean_seconds(result.run_secs)


@derived_object
class ProgressCallback(PyMeasureCallback):
    """MetaSchedule measure callback: reports each measured round to a ``TuningProgress``.

    MetaSchedule tunes one hetc task per scheduler run (``hetc.tuning.search``), so the task
    is ``progress.current`` rather than the scheduler's ``task_id``.
    """

    def __init__(self, progress: TuningProgress):
        super().__init__()
        self.progress = progress

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        try:
            if self.progress.current is not None:
                self.progress.measured_round(self.progress.current, [_mean_seconds(r) for r in runner_results])
        except Exception:  # never let the display break a search
            log.exception("tuning progress display failed")
