"""The on-disk tuning database: a directory that ``hetc tune`` writes and ``hetc compile --db`` reads.

Layout of a database directory::

    hetc-tuning.json              marker and metadata: format version, target, hetc/TVM versions, runs,
                                  the sizes dynamic models were tuned at (``shapes``) and their
                                  symbolic kernels' measurements (``symbolic``, ``symbolic_check``)
    database_workload.json        MetaSchedule JSONDatabase: one workload (a PrimFunc) per line
    database_tuning_record.json   MetaSchedule JSONDatabase: one measured schedule (trial) per line
    defaults_workload.json        the same, for the backend's default schedules measured before
    defaults_tuning_record.json     the search (kept apart: MetaSchedule's search cannot start from them)
    logs/tuning.log               MetaSchedule's own log of the searches
    .lock                         held (flock) while a ``hetc tune`` writes the directory

MetaSchedule appends one line per record and flushes it, so a killed run keeps every record
written before the kill. A kill in the middle of a write leaves a torn last line, which
MetaSchedule itself would refuse to load: ``open_for_tuning`` drops it (or completes the
newline when the JSON is whole) before loading, and ``load_best`` skips it without writing.
Any other damage (a bad line in the middle, a record naming a workload that does not exist)
is reported as damaged beyond repair rather than guessed around.

Records are keyed by the PrimFunc's structure, not by the model, so one database can hold
several models' tasks; a task shared by two models reuses the other's trials.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import tvm
from tvm.s_tir import meta_schedule as ms

from .. import __version__
from ..errors import UsageError, last_line

log = logging.getLogger(__name__)

MARKER = "hetc-tuning.json"
WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"
DEFAULT_WORKLOADS = "defaults_workload.json"
DEFAULT_RECORDS = "defaults_tuning_record.json"
PAIRS = ((WORKLOADS, RECORDS), (DEFAULT_WORKLOADS, DEFAULT_RECORDS))  # (workloads, records) files
LOG_DIR = "logs"
LOCK = ".lock"
FORMAT = "hetc-tuning-database"
VERSION = 1
MODULE_EQUALITY = "structural"  # how a PrimFunc is matched to its records (same as TVM's default)
FAILED_SECONDS = 1e9  # MetaSchedule stores failed trials with run_secs = [1e10]

# Target attributes that decide whether a schedule is valid and fast: a database tuned for
# another CPU (mcpu) is rejected. num-cores is left out: a tuned kernel runs correctly, with
# its parallel loops, on any number of threads.
_TARGET_KEYS = ("kind", "mcpu", "mtriple", "mattr", "mabi", "arch")


def target_summary(target: tvm.target.Target) -> dict:
    """The attributes of ``target`` that a database must match (JSON-friendly). LLVM's
    ``prefer-*`` attributes (the CPU target turns ``prefer-256-bit`` off) steer its own
    vectorizer, not the instruction set: they are left out, so databases tuned without them
    still match."""
    exported = json.loads(str(target))
    if exported.get("mattr"):
        exported["mattr"] = [a for a in exported["mattr"] if not a.lstrip("+-").startswith("prefer-")]
    return {k: exported[k] for k in _TARGET_KEYS if exported.get(k) not in (None, "", [], ())}


def _describe(summary: dict) -> str:
    return " ".join([summary.get("kind", "?")] + [f"{k}={v}" for k, v in summary.items() if k != "kind"])


def _tvm_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def new_metadata(target: tvm.target.Target) -> dict:
    now = _now()
    return {"format": FORMAT, "version": VERSION, "target": target_summary(target), "target_full": str(target),
            "hetc_version": __version__, "tvm_version": tvm.__version__, "created": now, "updated": now,
            "runs": []}


def _check_directory(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise UsageError(f"tuning database {path} is a file; --db takes a directory")


def read_metadata(path: Path, target: tvm.target.Target | None) -> dict:
    """Validate that ``path`` is a hetc tuning database (for ``target``, when given); return its metadata."""
    _check_directory(path)
    if not path.exists():
        raise UsageError(f"tuning database {path}: no such directory (create one with `hetc tune --db {path}`)")
    marker = path / MARKER
    if not marker.is_file():
        raise UsageError(f"{path} is not a hetc tuning database (no {MARKER}); "
                         "pass the directory that `hetc tune --db` wrote")
    try:
        meta = json.loads(marker.read_text())
    except (OSError, ValueError) as err:
        raise UsageError(f"tuning database {path}: {MARKER} is unreadable ({err}); "
                         "the database is damaged beyond repair") from err
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise UsageError(f"{path} is not a hetc tuning database ({MARKER} has another format)")
    if not isinstance(meta.get("version"), int) or meta["version"] > VERSION:
        raise UsageError(f"tuning database {path} has format version {meta.get('version')}; this hetc "
                         f"reads version {VERSION}: upgrade hetc or re-tune")
    written_by = str(meta.get("tvm_version", "?"))
    if _tvm_minor(written_by) != _tvm_minor(tvm.__version__):
        raise UsageError(f"tuning database {path} was written with TVM {written_by}; this hetc uses TVM "
                         f"{tvm.__version__}, whose schedules may differ: re-tune into a new --db")
    if target is not None:
        want = target_summary(target)
        have = meta.get("target", {})
        if have != want:
            raise UsageError(f"tuning database {path} was tuned for {_describe(have)}, not for this target "
                             f"({_describe(want)}); re-tune on this machine into another --db")
    return meta


def write_metadata(path: Path, meta: dict) -> None:
    meta["updated"] = _now()
    _write_json_atomic(path / MARKER, meta)


# --------------------------------------------------------------------------------------------
# Torn lines


@dataclass
class Repair:
    """What opening a database fixed: whole lines dropped or completed, per file."""

    dropped: dict[str, int]  # file name -> bytes of a torn last line that were dropped
    completed: list[str]  # files whose last line was whole JSON but lacked its newline

    def __bool__(self) -> bool:
        return bool(self.dropped or self.completed)

    def describe(self) -> str:
        parts = [f"dropped a torn last line ({n} bytes) of {name}" for name, n in self.dropped.items()]
        parts += [f"completed the last line of {name}" for name in self.completed]
        return "; ".join(parts)


def _split_torn(data: bytes) -> tuple[bytes, bytes]:
    """``data`` -> (complete lines, torn tail without a newline)."""
    if not data or data.endswith(b"\n"):
        return data, b""
    cut = data.rfind(b"\n") + 1
    return data[:cut], data[cut:]


def _is_json(raw: bytes) -> bool:
    try:
        json.loads(raw)
        return True
    except ValueError:
        return False


def _parse_lines(path: Path, data: bytes) -> list:
    rows = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            raise UsageError(f"tuning database {path.parent}: line {number} of {path.name} is not valid JSON; "
                             "the database is damaged beyond repair (only a torn last line can be dropped)"
                             ) from None
    return rows


def repair(path: Path) -> Repair:
    """Fix torn last lines of the two record files in place (the caller holds the lock)."""
    result = Repair({}, [])
    for name in (n for pair in PAIRS for n in pair):
        file = path / name
        if not file.is_file():
            continue
        whole, torn = _split_torn(file.read_bytes())
        if not torn:
            continue
        with open(file, "r+b") as f:
            if _is_json(torn):  # killed between the line and its newline: keep the record
                f.seek(0, os.SEEK_END)
                f.write(b"\n")
                result.completed.append(name)
            else:
                f.truncate(len(whole))
                result.dropped[name] = len(torn)
            f.flush()
            os.fsync(f.fileno())
    if result:
        log.warning("tuning database %s: %s", path, result.describe())
    return result


def _validate(path: Path, workloads: list, records: list, name: str = RECORDS) -> None:
    for number, row in enumerate(records, 1):
        if not (isinstance(row, list) and len(row) == 2 and isinstance(row[0], int)
                and 0 <= row[0] < len(workloads)):
            raise UsageError(f"tuning database {path}: record {number} of {name} names no known workload; "
                             "the database is damaged beyond repair")


# --------------------------------------------------------------------------------------------
# Opening


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the database for one ``hetc tune`` at a time."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover (not POSIX): no locking
        yield
        return
    with open(path / LOCK, "a+") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"tuning database {path} is in use by another `hetc tune`; wait for it or "
                             "use another --db") from None
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


@dataclass
class OpenDatabase:
    """A database opened for tuning: the MetaSchedule database plus hetc's metadata."""

    path: Path
    db: ms.database.Database  # the search's trials
    defaults: ms.database.Database  # the default schedules measured before the search
    meta: dict
    repaired: Repair

    def trial_counts(self, workloads: list[ms.database.Workload]) -> list[int]:
        """Trials (records, failed ones included) stored for each of ``workloads`` (the search's
        workloads, from ``db.commit_workload``), default schedules included.

        The JSON database hands out one Workload object per workload, shared by its records,
        so counting by object identity is exact; the defaults are matched by structure.
        """
        counts = collections.Counter(r.workload for r in self.db.get_all_tuning_records())
        return [counts.get(w, 0) + d for w, d in zip(workloads, self.default_counts(workloads))]

    def default_counts(self, workloads: list[ms.database.Workload]) -> list[int]:
        """Default-schedule trials stored for each of ``workloads`` (the search's workloads)."""
        counts = collections.Counter(r.workload for r in self.defaults.get_all_tuning_records())
        return [counts.get(self._default_workload(w), 0) for w in workloads]

    def best_seconds(self, workload: ms.database.Workload) -> float | None:
        """Best mean seconds of a (search) workload over the search's and the defaults' records."""
        found = [mean_seconds(r.run_secs) for db, w in ((self.db, workload), (self.defaults,
                 self._default_workload(workload))) if w is not None for r in db.get_top_k(w, 1)]
        found = [s for s in found if s is not None]
        return min(found) if found else None

    def default_seconds(self, workload: ms.database.Workload) -> float | None:
        """Mean seconds of the default schedule of a (search) workload: its first record in the
        defaults database (the tuner seeds every task with the default, then its alternatives)."""
        own = self._default_workload(workload)
        if own is None:
            return None
        first = next((r for r in self.defaults.get_all_tuning_records() if r.workload.same_as(own)), None)
        return None if first is None else mean_seconds(first.run_secs)

    def best_record(self, workload: ms.database.Workload) -> ms.database.TuningRecord | None:
        """The fastest record of a (search) workload over the search's and the defaults' records."""
        found = [r for db, w in ((self.db, workload), (self.defaults, self._default_workload(workload)))
                 if w is not None for r in db.get_top_k(w, 1) if mean_seconds(r.run_secs) is not None]
        return min(found, key=lambda r: mean_seconds(r.run_secs), default=None)

    def _default_workload(self, workload: ms.database.Workload) -> ms.database.Workload | None:
        """The defaults database's own handle of ``workload`` (None if it has no records of it)."""
        return self.defaults.commit_workload(workload.mod) if self.defaults.has_workload(workload.mod) else None

    def save_metadata(self) -> None:
        write_metadata(self.path, self.meta)


def check_tuning_path(path: Path) -> None:
    """Fail early if ``path`` cannot become or be a tuning database: a file, or a non-empty
    directory that is not one (the target and the records are checked when it is opened)."""
    _check_directory(path)
    if path.is_dir() and not (path / MARKER).exists() and any(p.name != LOCK for p in path.iterdir()):
        raise UsageError(f"{path} is not a hetc tuning database (no {MARKER}) and is not empty; "
                         "choose a new or empty directory for --db")


@contextlib.contextmanager
def open_for_tuning(path: str | os.PathLike, target: tvm.target.Target) -> Iterator[OpenDatabase]:
    """Create or reopen the database at ``path`` for ``target``, locked, torn lines repaired."""
    path = Path(path)
    check_tuning_path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot create tuning database {path}: {err.strerror}") from err
    with _lock(path):
        if (path / MARKER).exists():
            meta = read_metadata(path, target)
        else:
            meta = new_metadata(target)
            write_metadata(path, meta)
        fixed = repair(path)
        dbs = []
        for workload_file, record_file in PAIRS:
            workloads = _parse_lines(path / workload_file, _read(path / workload_file))
            _validate(path, workloads, _parse_lines(path / record_file, _read(path / record_file)), record_file)
            try:
                dbs.append(ms.database.JSONDatabase(str(path / workload_file), str(path / record_file),
                                                    allow_missing=True, module_equality=MODULE_EQUALITY))
            except Exception as err:  # TVM raises its own error types for records it cannot replay
                raise UsageError(f"tuning database {path} cannot be loaded ({last_line(err)}); "
                                 "the database is damaged beyond repair") from err
        yield OpenDatabase(path, dbs[0], dbs[1], meta, fixed)


def open_read_only(path: str | os.PathLike, target: tvm.target.Target) -> OpenDatabase:
    """Every valid record of the database at ``path`` in memory (``db`` the search's, ``defaults``
    the default schedules'), for a cost model to learn from and a search to start at. Never
    writes to ``path``; a torn last line is skipped."""
    path = Path(path)
    meta = read_metadata(path, target)
    dbs = []
    for workload_rows, record_rows in _valid_rows(path):
        dbs.append(_commit(path, ms.database.MemoryDatabase(module_equality=MODULE_EQUALITY), workload_rows,
                           record_rows))
    return OpenDatabase(path, dbs[0], dbs[1], meta, Repair({}, []))


def _valid_rows(path: Path) -> Iterator[tuple[list, list]]:
    """(workload rows, record rows) of the search's files, then the defaults', read without
    writing (a torn last line skipped) and validated."""
    for workload_file, record_file in PAIRS:
        workload_rows = _parse_lines(path / workload_file, _split_torn(_read(path / workload_file))[0])
        record_rows = _parse_lines(path / record_file, _split_torn(_read(path / record_file))[0])
        _validate(path, workload_rows, record_rows, record_file)
        yield workload_rows, record_rows


def _commit(path: Path, db: ms.database.Database, workload_rows: list, records) -> ms.database.Database:
    """``records`` ((workload index, record JSON) pairs) committed to ``db``, each workload once
    (the tensor intrinsics the traces tensorize with registered first: hetc registers them on use)."""
    from ..backends.cpu.schedules import register_traced

    records = list(records)
    register_traced(json.dumps(record) for _, record in records)
    workloads = {}
    try:
        for index, record in records:
            if index not in workloads:
                workloads[index] = db.commit_workload(ms.database.Workload.from_json(workload_rows[index]).mod)
            db.commit_tuning_record(ms.database.TuningRecord.from_json(record, workloads[index]))
    except Exception as err:  # TVM's own error types
        raise UsageError(f"tuning database {path} cannot be loaded ({last_line(err)}); "
                         "the database is damaged beyond repair") from err
    return db


def _read(file: Path) -> bytes:
    return file.read_bytes() if file.is_file() else b""


def load_best(path: str | os.PathLike, target: tvm.target.Target) -> tuple[ms.database.Database, int]:
    """Read-only: the best valid record of every workload, in memory; returns (database, workloads).

    Never writes to ``path``: a torn last line (for instance from a ``hetc tune`` still running)
    is skipped, not repaired.
    """
    path = Path(path)
    read_metadata(path, target)
    db = ms.database.MemoryDatabase(module_equality=MODULE_EQUALITY)
    count = 0
    for workload_rows, record_rows in _valid_rows(path):  # the best of each file; the query picks the faster
        best: dict[int, tuple[float, list]] = {}
        for index, record in record_rows:
            secs = _mean_seconds(record)
            if secs is not None and (index not in best or secs < best[index][0]):
                best[index] = (secs, record)
        _commit(path, db, workload_rows, [(index, record) for index, (_, record) in best.items()])
        count = max(count, len(best))
    return db, count


def mean_seconds(run_secs) -> float | None:
    """Mean of a trial's measured run times; None for a failed trial (none, or MetaSchedule's 1e10)."""
    secs = [float(s) for s in run_secs or []]
    if not secs or max(secs) >= FAILED_SECONDS:
        return None
    return sum(secs) / len(secs)


def _mean_seconds(record) -> float | None:
    """Mean run time of a record's JSON ``[trace, run_secs, target, args_info]``; None if it failed."""
    try:
        return mean_seconds(record[1])
    except (TypeError, ValueError, IndexError):
        return None


# --------------------------------------------------------------------------------------------
# Applying


def tuned_functions(mod: tvm.IRModule) -> list[str]:
    """Names of the PrimFuncs of ``mod`` that carry a tuned schedule (``tirx.is_scheduled``)."""
    return sorted(gv.name_hint for gv, func in mod.functions.items()
                  if isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None
                  and bool(func.attrs.get("tirx.is_scheduled", False)))


def record_shape(meta: dict, sizes: dict[str, int]) -> None:
    """Remember that a run tuned a dynamic model at ``sizes`` ({"batch": 4}); the newest last."""
    shapes = [s for s in meta.get("shapes", []) if s != sizes]
    meta["shapes"] = [*shapes, dict(sizes)]


def tuned_shapes(meta: dict) -> list[dict[str, int]]:
    """The sizes dynamic models were tuned at, newest first: the order ``compile --db`` tries
    them in for a symbolic kernel."""
    return [{str(k): int(v) for k, v in s.items()} for s in reversed(meta.get("shapes", []))
            if isinstance(s, dict)]


def apply_database_pass(path: str | os.PathLike, target: tvm.target.Target) -> tvm.transform.Pass:
    """A pass that gives every PrimFunc with a record in the database at ``path`` its best schedule.

    The database is opened and validated here, not when the pass runs: a missing directory, a
    directory that is not a hetc tuning database, one tuned for another target, or one damaged
    beyond repair raises ``UsageError``. TVM marks the PrimFuncs it gives a record's schedule
    ``tirx.is_scheduled``; this pass also marks them ``tir.is_scheduled``, the attribute hetc's
    default schedules (which run afterwards) skip. The other PrimFuncs keep their default schedule.

    Symbolic kernels (CPU) get the record of their specialisation at the sizes the database
    was tuned at (``hetc.tuning.replay``), or keep their default schedule where it does not apply.
    """
    from .replay import apply_records

    db, _ = load_best(path, target)
    meta = read_metadata(Path(path), target)
    shapes = tuned_shapes(meta) if target.kind.name == "llvm" else []

    @tvm.transform.module_pass(opt_level=0, name="HetcApplyTuningDatabase")
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        already = set(tuned_functions(mod))
        with target, db:
            mod = tvm.relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)
        replayed, failed = apply_records(mod, db, shapes, target, meta.get("symbolic")) if shapes else ({}, {})
        applied = [name for name in tuned_functions(mod) if name not in already]
        for name in applied:
            gv = mod.get_global_var(name)
            mod[gv] = mod[gv].with_attr("tir.is_scheduled", True)
        log.info("tuning database %s: tuned schedules for %d PrimFunc(s): %s", path, len(applied),
                 ", ".join(applied) or "-")
        if replayed or failed:
            log.info("tuning database %s: %d symbolic kernel(s) replayed a record, %d record(s) did not apply: %s",
                     path, len(replayed), len(failed), ", ".join(failed) or "-")
        return mod

    return apply
