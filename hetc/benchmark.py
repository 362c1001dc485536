"""Latency of a compiled model next to onnxruntime, measured alternately in one process.

The machine's speed drifts (see docs/dev/tvm.md), so the two runtimes take turns, and only
medians and ratios from the same run are meant to be compared.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np


def random_inputs(specs, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded normal floats, zero integers/bools (zeros are valid indices and masks)."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for spec in specs:
        dtype = np.dtype(spec.dtype)
        inputs[spec.name] = (rng.standard_normal(spec.shape).astype(dtype) if dtype.kind == "f"
                             else np.zeros(spec.shape, dtype))
    return inputs


def ort_session(model: Path, threads: int = 0, spinning: bool = False, optimize: bool = True):
    """An onnxruntime CPU session for timing next to hetc (``threads`` 0: onnxruntime's default;
    ``optimize=False``: without its graph optimizations, for its own numerical spread).

    By default its workers sleep instead of spinning: with runs alternating call by call
    (``in_turns``), onnxruntime's spinning workers would steal the cores that TVM's thread pool
    is about to use (seen: a 0.2 ms MLP took 12 ms). ``spinning=True`` keeps onnxruntime's
    default, for ``in_blocks``, where each runtime runs alone.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def in_turns(runners: Mapping[str, Callable[[], object]], repeat: int, warmup: int = 2,
             calls: int = 1) -> dict[str, list[float]]:
    """Times (ms per call) of ``repeat`` runs of each runner after ``warmup``, the runners
    taking turns run by run (the machine's speed drifts: only times from one loop compare).
    A run is ``calls`` back-to-back calls (``calls_per_run``), its time divided by them."""
    times: dict[str, list[float]] = {name: [] for name in runners}
    for i in range(warmup + repeat):
        for name, fn in runners.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            if i >= warmup:
                times[name].append((time.perf_counter() - start) * 1e3 / calls)
    return times


RUN_MS = 1.0  # a timed run of a model faster than this repeats the call (``calls_per_run``)


def calls_per_run(runners: Mapping[str, Callable[[], object]], run_ms: float = RUN_MS) -> int:
    """Back-to-back calls per timed run, so that a run of the slowest runner takes about
    ``run_ms``: a single call of a 10-microsecond model is timed with the scheduler's and the
    timer's jitter, whose medians moved the small examples' ratios by +-0.5 between runs on
    a shared 2-core machine. 1 for models slower than ``run_ms``."""
    slowest = 0.0
    for fn in runners.values():
        fn()
        start = time.perf_counter()
        fn()
        slowest = max(slowest, (time.perf_counter() - start) * 1e3)
    return max(1, min(1000, int(run_ms / max(slowest, 1e-6))))


def in_blocks(runners: Mapping[str, Callable[[], object]], repeat: int, warmup: int = 2, block: int = 5,
              pause: float = 0.2) -> dict[str, list[float]]:
    """Times (ms) of ``repeat`` calls of each runner, the runners taking turns every ``block``
    calls, each block after ``pause`` seconds idle and ``warmup`` untimed calls.

    Call-by-call turns (``in_turns``) measure each runtime while the other's thread pool may
    still be spinning on the same cores: that charges one runtime for the other. Here each
    block runs alone, every runtime with its own default threading (onnxruntime spinning:
    ``ort_session(spinning=True)``), and the blocks still interleave against drift."""
    times: dict[str, list[float]] = {name: [] for name in runners}
    while any(len(t) < repeat for t in times.values()):
        for name, fn in runners.items():
            time.sleep(pause)
            for _ in range(warmup):
                fn()
            for _ in range(min(block, repeat - len(times[name]))):
                start = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - start) * 1e3)
    return times


def cpu_features(cpu: str | None = None) -> dict:
    """The CPU model and SIMD features: what /proc/cpuinfo lists and what LLVM targets (for
    this machine, or for the LLVM CPU ``cpu``)."""
    import tvm

    from .backends.cpu.codegen import llvm_target
    from .backends.cpu.schedules import simd_lanes
    from .options import CompileOptions

    flags, model = set(), ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    target = llvm_target(CompileOptions(cpu=cpu))
    simd = [f for f in ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                        "avx512_bf16", "amx_tile") if f in flags]
    return {"cpu_model": model, "cpuinfo_simd": simd, "llvm_mcpu": str(target.attrs.get("mcpu", "")),
            "float32_lanes": simd_lanes(target),
            "llvm_has": {f: bool(tvm.target.codegen.target_has_features(f, target))
                         for f in ("avx2", "fma", "avx512f")}}


def co_run(runners: Mapping[str, Callable[[], object]], repeat: int, warmup: int = 2) -> dict[str, dict]:
    """Each runner alone (``in_blocks``) and then all of them taking turns call by call in this
    process (``in_turns``), as an application that uses both hetc and onnxruntime runs them
    (give onnxruntime its default spinning: ``ort_session(spinning=True)``):
    ``{name: {"alone_ms", "corun_ms", "corun_over_alone"}}`` (medians)."""
    alone = in_blocks(runners, repeat, warmup)
    together = in_turns(runners, repeat, warmup)
    out = {}
    for name in runners:
        a, c = statistics.median(alone[name]), statistics.median(together[name])
        out[name] = {"alone_ms": a, "corun_ms": c, "corun_over_alone": c / a}
    return out


def compare_with_onnxruntime(model: Path, compiled, inputs: Mapping[str, np.ndarray], repeat: int = 10,
                             warmup: int = 2, session=None) -> dict:
    """``{"results": {"hetc": {...}, "onnxruntime": {...}}, "hetc_over_ort": ratio}`` in ms per
    call, taking turns run by run, a run of models under ``RUN_MS`` being several calls
    (``calls_per_run``).

    ``session``: an ``ort_session`` of ``model`` to reuse (one is made otherwise)."""
    session = session or ort_session(model)
    runners: dict[str, Callable[[], object]] = {
        "hetc": lambda: compiled.run(inputs), "onnxruntime": lambda: session.run(None, dict(inputs))}
    calls = calls_per_run(runners)
    results = {name: {"median_ms": statistics.median(t), "min_ms": min(t), "runs": len(t), "calls_per_run": calls}
               for name, t in in_turns(runners, repeat, warmup, calls).items()}
    return {"results": results,
            "hetc_over_ort": results["hetc"]["median_ms"] / results["onnxruntime"]["median_ms"]}
