"""Whether a record helps the symbolic kernel: measured at the end of ``hetc tune`` on a dynamic model.

The search measures each kernel specialised to the tuning sizes, but the artifact runs the
symbolic kernel with the record replayed on it (``replay``): tail predicates and symbolic index
arithmetic can make it lose to the default schedule (a small conv whose batch tile ended up
inside the unrolled register tile ran 12x slower). So after the search, for every symbolic
task, the replayed best record and the backend's default schedule of the *symbolic* kernel are
built and measured side by side at the tuning sizes. The database keeps both times
(``hetc-tuning.json``, ``symbolic``: keyed by the task's workload hash, with the record's own
time, so that a record found by a later run is not judged by another's result), and
``compile --db`` applies a record only where it won (``replay.apply_records``). Kernels that
take a dim as a scalar parameter are not measured (their record applies unchecked).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import tvm
import tvm_ffi

from .database import OpenDatabase, mean_seconds
from .replay import ReplayError, replay
from .specialize import describe, param_shape, specialize
from .tasks import Task


def workload_key(workload: tvm.IRModule) -> str:
    """A workload's key in ``symbolic``: its structural hash (the one MetaSchedule stores)."""
    return str(tvm_ffi.structural_hash(workload))


def _module(func) -> tvm.IRModule:
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def measure_symbolic(tasks: list[Task], db: OpenDatabase, search, default_schedules: Callable,
                     sizes: Mapping[str, int]) -> dict[str, dict]:
    """{workload key: {"task", "sizes", "record_s", "tuned_s", "default_s"}} for the symbolic
    tasks whose best record replays: seconds per call of the symbolic kernel at ``sizes``."""
    jobs, entries = [], []
    for task in tasks:
        func = task.symbolic
        if func is None or any(param_shape(p) is None for p in func.params):
            continue
        record = db.best_record(db.db.commit_workload(task.mod))
        defaults = default_schedules(func, search.target, 1) if default_schedules else []
        if record is None or not defaults:
            continue
        try:
            tuned = replay(func, record.trace, search.target)
        except ReplayError:
            continue  # compile --db falls back to the default anyway
        default = defaults[0][1].mod["main"]
        jobs += [(_module(k), _module(specialize(k, sizes))) for k in (tuned, default)]
        entries.append((task, record))
    measured = search.measure(jobs, [t.name for t, _ in entries for _ in (0, 1)])
    found = {}
    for n, (task, record) in enumerate(entries):
        tuned, default = measured[2 * n], measured[2 * n + 1]
        if tuned is None or default is None:
            continue
        found[workload_key(task.mod)] = {"task": task.name, "sizes": describe(sizes),
                                         "record_s": mean_seconds(record.run_secs),
                                         "tuned_s": mean_seconds(tuned[0]), "default_s": mean_seconds(default[0])}
    return found


def verdict(entry: Mapping | None, record) -> str | None:
    """Why ``record`` should not schedule its symbolic kernel (None: use it): it lost to the
    default schedule when ``hetc tune`` measured both. An entry measured for another record
    (a later run found a faster one) says nothing."""
    if not entry or entry.get("tuned_s") is None or entry.get("default_s") is None:
        return None
    mine = mean_seconds(record.run_secs)
    if mine is None or abs(mine - float(entry.get("record_s") or 0.0)) > 1e-9 * max(mine, 1e-12):
        return None
    tuned, default = float(entry["tuned_s"]), float(entry["default_s"])
    if tuned <= default:
        return None
    return (f"slower than the default schedule on the symbolic kernel ({tuned * 1e6:.1f} vs "
            f"{default * 1e6:.1f} us at {entry['sizes']}, measured by hetc tune)")
