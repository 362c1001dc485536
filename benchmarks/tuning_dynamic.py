"""Kernel time of a dynamic model with default vs tuned schedules, at the tuning size and others.

    python benchmarks/tuning_dynamic.py [--model mlp|cnn] [--tune-at 8] [--batches 8,3,32]
                                        [--trials 128] [--db DIR] [--repeat 7] [--json out.json]

The example model (``examples/models.py``, batch symbolic) is tuned with
``hetc.tune(plan_shape={"batch": TUNE_AT})`` into ``--db`` (a database that already holds the
trials is only checked), then its CPU pipeline is run without and with the database, and, for
reference, the same for a static build at the tuning batch (the kernels the tuner measured).
Every kernel is built on its own and timed with TVM's ``time_evaluator`` at each batch of
``--batches`` (random inputs; medians of ``--repeat`` repeats, the builds' kernels in turns),
so the numbers are kernel times without the VM's overhead. The tuned model's outputs are
checked against onnxruntime at every batch. Under CPU contention treat them as rough.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import hetc  # noqa: E402
from hetc.benchmark import ort_session  # noqa: E402
from hetc.options import CompileOptions  # noqa: E402

MODELS = {"mlp": lambda m: m.mlp(batch="batch", dims=(256, 512, 512, 10)),
          "cnn": lambda m: m.cnn(batch="batch")}


def scheduled_module(model: Path, database: Path | None, batch: int | None = None):
    """The CPU pipeline's module (kernels scheduled, weights packed) without / with ``database``;
    with ``batch``, the static build at that batch (the records apply to it as they are)."""
    from hetc.backends.cpu.pipeline import stages
    from hetc.frontends.onnx import load_model, to_relax
    from hetc.passes import run_pipeline

    shapes = {}
    if batch is not None:
        spec = load_model(model).inputs[0]
        shapes = {spec.name: (batch, *spec.shape[1:])}
    options = CompileOptions(database=None if database is None else str(database))
    mod, _ = run_pipeline(to_relax(load_model(model, shapes)), stages(options))
    return mod


def kernels(mod) -> dict[str, tuple[str, object, object]]:
    """{kernel: (schedule, built function, PrimFunc)}: each kernel of ``mod`` built on its own."""
    import tvm

    from hetc.backends.cpu.codegen import llvm_target
    from hetc.tuning.replay import TUNED_SHAPE

    target = llvm_target(CompileOptions())
    found = {}
    for gv, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            attrs = func.attrs or {}
            schedule = str(attrs.get("hetc.schedule_rule") or f"tuned at {attrs.get(TUNED_SHAPE, '?')}")
            lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target).jit()
            found[gv.name_hint] = (schedule, lib, func)
    return found


def _arguments(func, batch: int, rng) -> list:
    """Random arguments of ``func`` at ``batch`` (shapes from its specialisation)."""
    import tvm

    from hetc.tuning.specialize import param_shape, specialize

    static = specialize(func, {"batch": batch}) or func
    args = []
    for param in static.params:
        shape = param_shape(param)
        args.append(batch if shape is None else tvm.runtime.tensor(
            rng.normal(size=[int(d) for d in shape]).astype(str(param.dtype)), tvm.cpu()))
    return args


def kernel_times(builds: dict[str, dict], batches: list[int], repeat: int,
                 static: dict[str, int] | None = None) -> dict[str, dict]:
    """{build: {kernel: {batch: median us}}}, the builds' kernels timed in turns (each repeat
    times every build once), so that the machine's drift hits all of them alike. ``static``:
    builds for one batch only (build -> batch)."""
    import tvm

    static = static or {}
    rng = np.random.default_rng(0)
    samples: dict = {b: {k: {n: [] for n in batches if static.get(b, n) == n} for k in found}
                     for b, found in builds.items()}
    for batch in batches:
        prepared = {b: {k: (lib.time_evaluator("main", tvm.cpu(), number=10, repeat=1, min_repeat_ms=10),
                            _arguments(func, batch, rng)) for k, (_, lib, func) in found.items()}
                    for b, found in builds.items() if static.get(b, batch) == batch}
        for _ in range(repeat):
            for build, found in prepared.items():
                for kernel, (timer, args) in found.items():
                    samples[build][kernel][batch].append(timer(*args).mean * 1e6)
    return {b: {k: {n: statistics.median(v) for n, v in per.items()} for k, per in found.items()}
            for b, found in samples.items()}


def check_outputs(model: Path, database: Path, batches: list[int]) -> dict[int, float]:
    """max |hetc - onnxruntime| / max |onnxruntime| per batch, the tuned model."""
    compiled = hetc.compile(model, database=database)
    session = ort_session(model)
    name, shape = session.get_inputs()[0].name, session.get_inputs()[0].shape
    errors = {}
    for batch in batches:
        x = np.random.default_rng(batch).normal(size=[batch, *shape[1:]]).astype(np.float32)
        got, want = list(compiled.run({name: x}).values())[0], session.run(None, {name: x})[0]
        errors[batch] = float(np.abs(got - want).max() / np.abs(want).max())
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="mlp")
    parser.add_argument("--tune-at", type=int, default=8, help="the representative batch (--plan-shape)")
    parser.add_argument("--batches", default="8,3,32", help="batches to time the kernels at")
    parser.add_argument("--trials", type=int, default=128)
    parser.add_argument("--db", type=Path, help="tuning database (default: a temporary directory)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "examples"))
    import models
    import onnx

    batches = [int(b) for b in args.batches.split(",")]
    console = Console(width=None if sys.stdout.isatty() else 140)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / f"{args.model}.onnx"
        onnx.save(MODELS[args.model](models), model)
        db = args.db or Path(tmp) / "db"
        tuned = hetc.tune(model, trials=args.trials, database=db, plan_shape={"batch": args.tune_at},
                          progress=False)
        console.print(f"tuned at batch {args.tune_at}: {tuned.trials} trials, {tuned.seconds:.0f} s this run")
        builds = {"default": kernels(scheduled_module(model, None)), "tuned": kernels(scheduled_module(model, db)),
                  "static default": kernels(scheduled_module(model, None, args.tune_at)),
                  "static tuned": kernels(scheduled_module(model, db, args.tune_at))}
        times = kernel_times(builds, batches, args.repeat, {"static default": args.tune_at,
                                                           "static tuned": args.tune_at})
        errors = check_outputs(model, db, batches)

    table = Table(title=f"{args.model}: kernel us (median of {args.repeat}), tuned at batch {args.tune_at}",
                  title_justify="left")
    table.add_column("kernel")
    table.add_column("default / tuned schedule")
    for batch in batches:
        table.add_column(f"b{batch} default", justify="right")
        table.add_column(f"b{batch} tuned", justify="right")
    default, best = times["default"], times["tuned"]
    for name in sorted(default, key=lambda n: -default[n][batches[0]]):
        schedules = f"{builds['default'][name][0]} / {builds['tuned'][name][0] if name in best else '-'}"
        row = [name, schedules]
        for batch in batches:
            row += [f"{default[name][batch]:.1f}", f"{best[name][batch]:.1f}" if name in best else "-"]
        table.add_row(*row)
    totals = ["total", ""]
    for batch in batches:
        totals += [f"{sum(k[batch] for k in default.values()):.1f}", f"{sum(k[batch] for k in best.values()):.1f}"]
    table.add_row(*totals)
    console.print(table)
    console.print(f"static build at batch {args.tune_at} (the tuner's own kernels), total us: " + ", ".join(
        f"{b} {sum(k[args.tune_at] for k in times[b].values()):.1f}" for b in ("static default", "static tuned")))
    console.print("tuned model vs onnxruntime, max rel err: " + ", ".join(f"b{b} {e:.1e}" for b, e in errors.items()))
    if args.json:
        args.json.write_text(json.dumps({"settings": {k: str(v) for k, v in vars(args).items()},
                                         "kernel_us": times,
                                         "schedules": {b: {k: v[0] for k, v in f.items()} for b, f in builds.items()},
                                         "errors": errors}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
