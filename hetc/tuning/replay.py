"""Tuned schedules for symbolic kernels: replaying a record measured at representative sizes.

``hetc tune`` measures a dynamic model's kernels specialised to the sizes given with
``--plan-shape`` (``hetc.tuning.specialize``). ``hetc compile --db`` then gives each symbolic
kernel whose specialisation has a record that record's schedule, by replaying its trace on the
symbolic kernel itself:

- tile sizes stay what the search chose: a sampled tiling (``SamplePerfectTile``) becomes its
  decision, as constants;
- in a split whose factors are all given, the outermost factor is left to TVM
  (``ceil(extent / inner factors)``): over a symbolic loop the outer loop's extent becomes
  symbolic, with a predicate for the tail; over a static loop (tiles that divide it, as
  sampled tiles do) nothing changes.

A record that cannot be replayed (a step valid only at the tuned size), whose result TVM
cannot lower, or whose tiles would size a per-task buffer by a symbolic dim (a tile over a
symbolic loop with a tail predicate: TVM cannot bound the tile's region, so the accumulator
leaves the registers; measured 1.8x slower than the default schedule, which pads instead,
docs/cpu.md) leaves the kernel to the default schedules. The kernel is tagged
``hetc.tuning_fallback`` with the reason, and a replayed one ``hetc.tuned_shape`` with the
sizes of its record (``batch=4``). ``compile``'s report counts both (``summary``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence

import tvm
from tvm import tirx
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.database import Database
from tvm.s_tir.schedule import Instruction, Trace

from ..errors import last_line
from .specialize import describe, symbolic_dims, workload

log = logging.getLogger(__name__)

SAMPLED_TILES = ("SamplePerfectTile", "SamplePartitionedTile")
TUNED_SHAPE = "hetc.tuned_shape"  # on a symbolic kernel given a record's schedule: the record's sizes
FALLBACK = "hetc.tuning_fallback"  # on a symbolic kernel whose record did not apply: why


class ReplayError(Exception):
    """A record's trace cannot schedule the symbolic kernel."""


def symbolic_trace(trace: Trace) -> Trace:
    """``trace`` with sampled tile sizes as constants and the outermost factor of every fully
    given split left to TVM, so that it schedules the kernel at any size (module docstring)."""
    tiles: dict = {}  # a sampled tile size (ExprRV) -> its decision
    insts, decisions = [], {}
    for inst in trace.insts:
        decision = trace.get_decision(inst)
        if inst.kind.name in SAMPLED_TILES and decision is not None:
            tiles.update(zip(inst.outputs, (int(d) for d in decision)))
            continue  # over a symbolic loop the sample gives no values, whatever its decision
        inputs = [tiles.get(x, x) if isinstance(x, tirx.Var) else x for x in inst.inputs]
        if inst.kind.name == "Split" and all(isinstance(f, int | tirx.IntImm) for f in inputs[1:]):
            inputs = [inputs[0], None, *inputs[2:]]
        new = Instruction(inst.kind, inputs, inst.attrs, inst.outputs)
        insts.append(new)
        if decision is not None:
            decisions[new] = decision
    return Trace(insts, decisions)


_PARALLEL = re.compile(r"^(\s*)for \w+ in T\.parallel\(")
_ALLOC = re.compile(r"^(\s*)(\w+) = T\.alloc_(local|buffer)\((.*)")


def symbolic_tile_buffers(script: str, dims: Sequence[str]) -> list[str]:
    """Buffers of a lowered kernel (its TVMScript) that a parallel task (or a register
    accumulator) allocates with a size depending on ``dims``.

    A tail predicate over a symbolic loop inside a tile keeps TVM from bounding the tile's
    region: the accumulator is then sized by ``batch``, leaves the registers and, inside a
    parallel loop, is allocated per task from the workspace (1.8-2.7x slower; cpu.md). TVM 0.27's
    Python API has no TIR visitor, hence the text."""
    names = re.compile(r"\b(" + "|".join(map(re.escape, dims)) + r")\b") if dims else None
    found, loops = [], []  # loops: indentation of the parallel loops around the current line
    for line in script.splitlines():
        indent = len(line) - len(line.lstrip())
        while loops and indent <= loops[-1]:
            loops.pop()
        if (m := _PARALLEL.match(line)) is not None:
            loops.append(len(m.group(1)))
        elif (m := _ALLOC.match(line)) is not None and names is not None and names.search(m.group(4)) \
                and (loops or m.group(3) == "local"):
            found.append(m.group(2))
    return found


def replay(func: tirx.PrimFunc, trace: Trace, target: tvm.target.Target) -> tirx.PrimFunc:
    """``func`` (symbolic) scheduled by ``trace`` (a record of its specialisation); raises
    ``ReplayError`` when the trace does not apply, the result does not lower, or it would give
    a parallel task a buffer sized by a symbolic dim (``symbolic_tile_buffers``)."""
    from ..backends.cpu.schedules import lowered

    sch = Schedule(tvm.IRModule({"main": func}))
    try:
        symbolic_trace(trace).apply_to_schedule(sch, remove_postproc=False)
    except Exception as err:  # noqa: BLE001 -- TVM raises ScheduleError, InternalError, ...
        raise ReplayError(f"the trace does not apply: {last_line(err)}") from None
    scheduled = sch.mod["main"]
    lowered_mod = lowered(scheduled, target)
    if lowered_mod is None:
        raise ReplayError("the scheduled kernel does not lower")
    tiles = symbolic_tile_buffers(lowered_mod.script(), list(symbolic_dims(func)))
    if tiles:
        raise ReplayError(f"the tiles of a symbolic loop would size {', '.join(tiles)} by its dim "
                          "(out of registers: the default schedule pads instead)")
    return scheduled


def _for_target(func: tirx.PrimFunc, target: tvm.target.Target) -> bool:
    kind = (func.attrs or {}).get("target")
    return kind is None or kind.kind.name == target.kind.name


def _scheduled(func: tirx.PrimFunc) -> bool:
    return bool(func.attrs) and any(bool(func.attrs.get(k, False)) for k in ("tir.is_scheduled", "tirx.is_scheduled"))


def apply_records(mod: tvm.IRModule, db: Database, shapes: Sequence[Mapping[str, int]],
                  target: tvm.target.Target, checks: Mapping[str, Mapping] | None = None
                  ) -> tuple[dict[str, str], dict[str, str]]:
    """Give every unscheduled symbolic kernel of ``mod`` (in place) the schedule of the record
    of its specialisation at the first of ``shapes`` that has one, unless ``checks`` (the
    database's ``symbolic`` measurements, ``symbolic_check``) say it lost to the default
    schedule. Returns ({kernel: sizes} replayed, {kernel: reason} left to the default schedules)."""
    from .symbolic_check import verdict, workload_key

    replayed, failed = {}, {}
    for gv, func in list(mod.functions.items()):
        if not isinstance(func, tirx.PrimFunc) or _scheduled(func) or not _for_target(func, target) \
                or not symbolic_dims(func):
            continue
        for values in shapes:
            key = workload(func, values)
            record = None if key is None else db.query_tuning_record(key, target, gv.name_hint)
            if record is None:
                continue
            try:
                slower = verdict((checks or {}).get(workload_key(key)), record)
                if slower:
                    raise ReplayError(slower)
                done = replay(func, record.trace, target)
            except ReplayError as err:
                failed[gv.name_hint] = f"record at {describe(values)}: {err}"
                mod[gv] = func.with_attr(FALLBACK, failed[gv.name_hint])
                log.info("tuning record for %s not used (default schedule instead): %s", gv.name_hint, err)
            else:
                replayed[gv.name_hint] = describe(values)
                mod[gv] = done.with_attrs({TUNED_SHAPE: describe(values), "tir.is_scheduled": True,
                                           "tirx.is_scheduled": True})
            break
    return replayed, failed


def summary(mod: tvm.IRModule) -> dict:
    """What the tuning database did to ``mod``'s kernels (the compile report's ``tuning``):
    counts of tuned and default-scheduled kernels, the symbolic ones given a record's schedule
    (with the record's sizes) and those whose record did not apply (with the reason)."""
    tuned = default = 0
    replayed, fallback = {}, {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        attrs = func.attrs or {}
        if attrs.get("tirx.is_scheduled") and attrs.get("hetc.schedule_rule") is None:
            tuned += 1  # set by MetaScheduleApplyDatabase and by apply_records, not by the defaults
        else:
            default += 1
        if TUNED_SHAPE in attrs:
            replayed[gv.name_hint] = str(attrs[TUNED_SHAPE])
        if FALLBACK in attrs:
            fallback[gv.name_hint] = str(attrs[FALLBACK])
    return {"tuned": tuned, "default": default, "tuned_symbolic": dict(sorted(replayed.items())),
            "fallback": dict(sorted(fallback.items()))}
