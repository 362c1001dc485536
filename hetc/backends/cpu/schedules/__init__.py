"""Default CPU schedules: rule-based, no search (the CPU counterpart of TVM's GPU dlight).

Every PrimFunc that no tuning record scheduled (``tir.is_scheduled``) is offered to the rules
in ``RULES`` in order; the first that accepts it schedules it, and the function is tagged
``hetc.schedule_rule`` with the rule's name (tests and reports read it).

To add a rule, write ``apply(func, target, lanes) -> Schedule | None`` (None: not mine) in a
module of this package, wrap it in a ``Rule`` (``common.py``) and insert it in ``RULES``
before the more general rules it refines.
"""

from __future__ import annotations

import logging
from collections import Counter

import tvm
from tvm import relax, tirx
from tvm.s_tir import ScheduleError

from . import amx, depthwise, full_reduction, gemm, generic, int8, reduction, winograd
from .common import PREPROC, Rule

log = logging.getLogger(__name__)

RULES: list[Rule] = [winograd.RULE, amx.RULE, int8.RULE, int8.PAIRS_RULE, int8.WIDENED_RULE, depthwise.RULE, gemm.RULE, reduction.RULE, full_reduction.RULE,
                     generic.RULE]


def register_traced(traces) -> None:
    """Register the tensor intrinsics that schedule traces (a tuning database's records, as JSON
    text) name, before they are replayed: the rules register theirs on first use, and a process
    that only applies a database has scheduled nothing."""
    traces = list(traces)
    amx.register_traced(traces)
    int8.register_traced(traces)


def simd_lanes(target: tvm.target.Target) -> int:
    """float32 lanes of the widest vector unit LLVM may use on ``target``."""
    for feature, lanes in (("avx512f", 16), ("avx", 8), ("neon", 4), ("sse2", 4)):
        if tvm.target.codegen.target_has_features(feature, target):
            return lanes
    return 4


def _try(rule: Rule, func: tirx.PrimFunc, target, lanes: int, variant: int = 0):
    try:
        return rule.apply(func, target, lanes, variant) if rule.variants > 1 else rule.apply(func, target, lanes)
    except (ScheduleError, RuntimeError, ValueError) as err:  # TVM raises these
        log.debug("rule %s failed on %s: %s", rule.name, (func.attrs or {}).get("global_symbol"), err)
        return None


def _symbolic(func: tirx.PrimFunc) -> bool:
    """A kernel with a symbolic extent (batch, seq, or a run-time value such as Pad's pads)."""
    for param in func.params:
        try:
            shape = param.shape  # a buffer parameter
        except Exception:  # noqa: BLE001 -- a scalar parameter: a symbolic dim passed in
            return True
        if any(not isinstance(d, tirx.IntImm) for d in shape):
            return True
    return False


def lowered(func: tirx.PrimFunc, target: tvm.target.Target) -> tvm.IRModule | None:
    """The scheduled ``func`` through TVM's TIR lowering (no code generation); None when TVM
    does not accept it.

    With symbolic extents it sometimes does not: fusing loops whose extents are sums of
    symbols (``pads0 + pads4 + 1``) makes the iterator-map rewriter abort ("padding factor
    ... is not divisible") when it later meets the fused index. Checked per kernel, so that
    one such kernel falls back to the next rule instead of failing the whole build.
    """
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    mod = tvm.tirx.transform.BindTarget(target.with_host(target))(mod)
    pipeline, _, _ = tvm.tirx.get_default_tir_pipeline(target)
    try:
        return pipeline(mod)
    except Exception as err:  # noqa: BLE001 -- TVM raises InternalError and others
        log.debug("scheduled %s does not lower: %s", (func.attrs or {}).get("global_symbol"), err)
        return None


def lowers(func: tirx.PrimFunc, target: tvm.target.Target) -> bool:
    """Whether TVM's TIR lowering accepts the scheduled ``func`` (``lowered``)."""
    return lowered(func, target) is not None


def schedule_func(func: tirx.PrimFunc, target: tvm.target.Target, lanes: int) -> tuple[tirx.PrimFunc, str | None]:
    """Schedule one PrimFunc with the first rule that takes it (and, for a kernel with
    symbolic extents, whose schedule TVM can lower)."""
    check = _symbolic(func)
    for rule in RULES:
        sch = _try(rule, func, target, lanes)
        if sch is None:
            continue
        scheduled = sch.mod["main"].with_attr("hetc.schedule_rule", rule.name)
        # A finished function holds the schedule whole: when it lowers, so does the schedule.
        finished = rule.finish(func, scheduled, target, lanes) if rule.finish else None
        if finished is not None and lowers(finished, target):
            return finished.with_attr("hetc.schedule_rule", rule.name), rule.name
        if not check or lowers(scheduled, target):
            return scheduled, rule.name
    return func, None


def variants(func: tirx.PrimFunc, target: tvm.target.Target, limit: int = 4) -> list[tuple[str, object]]:
    """The default schedule of ``func`` and up to ``limit - 1`` alternatives, as ``(name, Schedule)``.

    The tuner measures these before its own search, so a tuned kernel is never slower than
    the default one (up to measurement noise). Each Schedule carries its trace.
    """
    lanes = simd_lanes(target)
    for rule in RULES:
        first = _try(rule, func, target, lanes)
        if first is None:
            continue
        found = [(f"{rule.name}/0", first)]
        for k in range(1, min(limit, rule.variants)):
            sch = _try(rule, func, target, lanes, k)
            if sch is None:
                break
            found.append((f"{rule.name}/{k}", sch))
        return found
    return []


def _scheduled(func: tirx.PrimFunc) -> bool:
    """Scheduled already: by a tuning record (MetaScheduleApplyDatabase sets ``tirx.is_scheduled``)."""
    return bool(func.attrs) and any(bool(func.attrs.get(k, False)) for k in ("tir.is_scheduled", "tirx.is_scheduled"))


def _for_cpu(func: tirx.PrimFunc) -> bool:
    """An LLVM kernel: no ``target`` attribute, or an llvm one (a split module also holds GPU kernels)."""
    target = (func.attrs or {}).get("target")
    return target is None or target.kind.name == "llvm"


def _without_unused_layout_hint(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Drop ``layout_free_buffers`` where no weight gets packed, so that afterwards the attribute
    marks exactly the kernels with a packing block (``split_weight_packing_pass`` reads it)."""
    if func.attrs and "layout_free_buffers" in func.attrs and PREPROC not in func.script():
        return func.without_attr("layout_free_buffers")
    return func


def default_schedule_pass(target: tvm.target.Target) -> tvm.transform.Pass:
    """Schedule every PrimFunc that has no schedule yet."""
    lanes = simd_lanes(target)

    @tvm.transform.module_pass(opt_level=0, name="HetcCPUDefaultSchedule")
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        counts: Counter[str] = Counter()
        updates = {}
        for gv, func in mod.functions.items():
            if not isinstance(func, tirx.PrimFunc) or not _for_cpu(func):
                continue
            if not _scheduled(func):
                func, name = schedule_func(func, target, lanes)
                counts[name or "none"] += 1
            updates[gv] = _without_unused_layout_hint(func).with_attr("tir.is_scheduled", True)
        for gv, func in updates.items():
            mod[gv] = func
        log.info("default schedules: %s", dict(counts))
        return mod

    return apply


def split_weight_packing_pass() -> tvm.transform.Pass:
    """``SplitLayoutRewritePreproc`` applied to the kernels that pack a weight.

    The TVM pass builds a schedule state for every PrimFunc and aborts on some it does not
    need to touch (opaque scatter loops), so the others are set aside while it runs. Runs
    after ``default_schedule_pass``, which leaves ``layout_free_buffers`` on exactly the
    kernels with a packing block.
    """

    @tvm.transform.module_pass(opt_level=0, name="HetcSplitWeightPacking")
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        aside = {gv: f for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)
                 and ("layout_free_buffers" not in (f.attrs or {}) or not _for_cpu(f))}
        if len(aside) == sum(isinstance(f, tirx.PrimFunc) for f in mod.functions.values()):
            return mod
        work = tvm.IRModule({gv: f for gv, f in mod.functions.items() if gv not in aside}, attrs=mod.attrs,
                            global_infos=mod.global_infos)  # a split module's vdevices
        work = relax.transform.SplitLayoutRewritePreproc()(work)
        for gv, func in aside.items():
            work[gv] = func
        return work

    return apply
