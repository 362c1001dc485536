"""What ``hetc tune`` gains over the default schedules, end to end, on whole models.

    python benchmarks/tuning_gain.py MODEL.onnx[=INPUTS.npz] ... [--trials 1000] [--db-root DIR]
                                     [--max-trials-per-task 64] [--repeat 30] [--json out.json]

Per model: its inputs come from the ``.npz`` (model_zoo.py ``--keep`` writes one beside each
export; without one, seeded normal floats and zero integers) and bind every symbolic dim, so the
kernels tuned are the kernels timed. ``hetc.tune`` runs ``--trials`` into ``DIR/<model>.tuning``
(a database that already holds them is only topped up), then the model is compiled without and
with it, the outputs compared, and the default build, the tuned build and onnxruntime are timed
in turns (``hetc.benchmark.in_turns``, medians of ``--repeat``). The table also lists the tasks
that weigh most (calls x best time) with the default schedule's time (the first record of each
task, measured by the tuner) and the best found, so a gain, or its absence, can be traced to
kernels. Prints the CPU (LLVM mcpu and ISA); a shared machine's noise moves the end-to-end
figures by several percent, which is why the default and tuned builds alternate in one loop.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cpu_latency import rel_error

import hetc
from hetc.benchmark import cpu_features, in_turns, ort_session, random_inputs
from hetc.npz import load_npz


def model_inputs(model: Path, npz: Path | None) -> dict[str, np.ndarray]:
    """The model's inputs from ``npz`` (its ``out*`` arrays left out), else ``random_inputs``
    with every symbolic dim 1."""
    if npz is not None:
        return {k: v for k, v in load_npz(npz).items() if not k.startswith("out")}
    from hetc.frontends.onnx import load_model

    return random_inputs([dataclasses.replace(s, shape=tuple(d if isinstance(d, int) else 1 for d in s.shape))
                          for s in load_model(model).inputs])


def task_rows(result, top: int = 5) -> list[dict]:
    """The ``top`` tasks by calls x best time: the default schedule's time vs the best record's
    (both as the tuner measured them, ms per call)."""
    rows = [{"task": t.name, "calls": t.weight, "gflop": t.flops * 1e-9, "trials": t.trials,
             "best_ms": t.best_seconds * 1e3,
             "default_ms": None if t.default_seconds is None else t.default_seconds * 1e3,
             "gflops_best": t.flops / t.best_seconds * 1e-9}
            for t in result.tasks if t.best_seconds]
    rows.sort(key=lambda r: -r["calls"] * r["best_ms"])
    return rows[:top]


def measure(model: Path, npz: Path | None, args, console: Console) -> dict:
    feeds = model_inputs(model, npz)
    shapes = {k: v.shape for k, v in feeds.items()}
    database = args.db_root / f"{model.stem}.tuning"
    start = time.perf_counter()
    result = hetc.tune(model, "cpu", trials=args.trials, database=database, input_shapes=shapes,
                       max_trials_per_task=args.max_trials_per_task, progress=False)
    tune_s = time.perf_counter() - start
    default = hetc.compile(model, "cpu", input_shapes=shapes)
    tuned = hetc.compile(model, "cpu", input_shapes=shapes, database=database)
    ref, got = default.run(feeds), tuned.run(feeds)
    err = rel_error([got[k] for k in ref], list(ref.values()))
    session = ort_session(model)
    times = in_turns({"default": lambda: default.run(feeds), "tuned": lambda: tuned.run(feeds),
                      "onnxruntime": lambda: session.run(None, feeds)}, args.repeat)
    ms = {k: statistics.median(v) for k, v in times.items()}
    row = {"model": model.stem, "tasks": len(result.tasks), "trials": result.trials, "tune_s": tune_s,
           "default_ms": ms["default"], "tuned_ms": ms["tuned"], "ort_ms": ms["onnxruntime"],
           "gain": ms["default"] / ms["tuned"], "tuned_x_ort": ms["tuned"] / ms["onnxruntime"],
           "tuned_vs_default_err": err, "top_tasks": task_rows(result)}
    console.print(f"{model.stem}: {row['trials']} trials in {tune_s:.0f} s; default {ms['default']:.2f} ms, "
                  f"tuned {ms['tuned']:.2f} ms ({row['gain']:.2f}x), onnxruntime {ms['onnxruntime']:.2f} ms")
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="MODEL.onnx or MODEL.onnx=INPUTS.npz")
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--max-trials-per-task", type=int, default=64)
    parser.add_argument("--db-root", type=Path, default=Path("tuning-gain"))
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 150)
    machine = cpu_features()
    console.print(f"{machine['cpu_model']}, LLVM mcpu {machine['llvm_mcpu']}, {machine['cpuinfo_simd']}")
    args.db_root.mkdir(parents=True, exist_ok=True)
    rows = []
    for spec in args.models:
        path, _, npz = spec.partition("=")
        rows.append(measure(Path(path), Path(npz) if npz else None, args, console))
    table = Table(title=f"hetc tune ({args.trials} trials) vs the default schedules, ms (medians of {args.repeat})")
    for col in ("model", "tasks", "trials", "tune s", "default", "tuned", "gain", "onnxruntime", "tuned x ort"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in rows:
        table.add_row(r["model"], str(r["tasks"]), str(r["trials"]), f"{r['tune_s']:.0f}", f"{r['default_ms']:.2f}",
                      f"{r['tuned_ms']:.2f}", f"{r['gain']:.2f}", f"{r['ort_ms']:.2f}", f"{r['tuned_x_ort']:.2f}")
    console.print(table)
    tasks = Table(title="heaviest tasks: default schedule vs best record (tuner's measurements, ms per call)")
    for col in ("model", "task", "calls", "GFLOP", "default", "best", "gain", "GFLOP/s"):
        tasks.add_column(col, justify="left" if col in ("model", "task") else "right")
    for r in rows:
        for t in r["top_tasks"]:
            gain = t["default_ms"] / t["best_ms"] if t.get("default_ms") else None
            tasks.add_row(r["model"], t["task"][:48], str(t["calls"]), f"{t['gflop']:.3f}",
                          f"{t['default_ms']:.3f}" if t.get("default_ms") else "-", f"{t['best_ms']:.3f}",
                          f"{gain:.2f}" if gain else "-", f"{t['gflops_best']:.0f}" if t["gflops_best"] else "-")
    console.print(tasks)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "trials": args.trials, "rows": rows}, indent=1))
        console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
