"""Latency on the CPU of ResNet-50 and BERT-base through four paths: eager torch, inductor
(``torch.compile`` default), the hetc backend (``torch.compile(backend="hetc")``) and hetc via
ONNX (``torch.onnx.export`` -> ``hetc.compile`` -> ``CompiledModel.run``).

    python benchmarks/torch_backend.py [--models resnet50,bert-base] [--repeat 10] [--rounds 3]
                                       [--threads N] [--json benchmarks/results/torch_backend.json]

Each path runs in a process of its own (TVM's worker threads spin after a call and would slow
torch's threads in the same process), for ``--rounds`` rounds taken in turn, so that a drift
of the machine's speed reaches every path alike. A process compiles (or loads: hetc's compile
cache, inductor's FX cache, the saved ONNX artifact), checks its outputs against eager
(1e-4 x max |eager|), runs two warm-up calls, then ``--repeat`` timed calls; the table gives
the median over all timed calls of all rounds, in ms per call. ``--threads`` sets every path's
worker threads (torch's intra-op threads, hetc's pool; 0: each one's default, all cores). On a
machine shared with other work, OpenMP's threads (eager, inductor) suffer from lost cores far
more than hetc's pool: ``--threads 1`` compares the code rather than the thread pools. The CPU
is named by its model, the LLVM ``mcpu`` hetc compiled for and the SIMD instruction sets.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = ("eager", "inductor", "hetc-backend", "hetc-onnx")
BATCH = 1


def _case(model: str):
    sys.path.insert(0, str(ROOT / "examples"))
    import torch_zoo

    return torch_zoo.ACCEPTANCE[model]()


def _runner(path: str, model: str, work: Path, threads: int):
    """(call with no arguments, the outputs it gives as torch tensors) for ``path`` on ``model``."""
    import torch

    case = _case(model)
    args = case.inputs(BATCH)
    if path == "eager":
        return lambda: case.model(*args)
    if path == "inductor":
        compiled = torch.compile(case.model)
        return lambda: compiled(*args)
    if path == "hetc-backend":
        compiled = torch.compile(case.model, backend="hetc",
                                 options={"cache": str(work / "cache"), "num_threads": threads})
        return lambda: compiled(*args)
    import hetc

    artifact = work / f"{model}-onnx-t{threads}"
    if not (artifact / "manifest.json").is_file():
        onnx_path = work / f"{model}.onnx"
        with torch.no_grad():
            torch.onnx.export(case.model, args, str(onnx_path), dynamo=False, opset_version=17,
                              input_names=[f"in{i}" for i in range(len(args))])
        hetc.compile(onnx_path, "cpu", num_threads=threads).save(artifact)
    compiled = hetc.load(artifact)
    feeds = {name: a.numpy() for name, a in zip(compiled.input_names, args)}
    return lambda: [torch.from_numpy(v) for v in compiled.run(feeds).values()]


def measure(path: str, model: str, work: Path, repeat: int, threads: int) -> dict:
    """One process's measurement (run by ``--child``)."""
    import torch

    sys.path.insert(0, str(ROOT / "examples"))
    import torch_zoo

    if threads:
        torch.set_num_threads(threads)
    with torch.no_grad():
        start = time.perf_counter()
        call = _runner(path, model, work, threads)
        out = torch_zoo.outputs(call())
        setup = time.perf_counter() - start
        case = _case(model)
        ref = torch_zoo.outputs(case.model(*case.inputs(BATCH)))
        error = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(out, ref))
        for _ in range(2):
            call()
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            call()
            times.append((time.perf_counter() - start) * 1e3)
    return {"times_ms": times, "setup_s": setup, "rel_error": error}


def _child(path: str, model: str, work: Path, repeat: int, threads: int) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", path, model, str(work), str(repeat), str(threads)],
                          check=False, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    if proc.returncode != 0:
        return {"failed": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--child":
        print(json.dumps(measure(argv[1], argv[2], Path(argv[3]), int(argv[4]), int(argv[5]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,bert-base")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="worker threads of every path (0: defaults)")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "torch_backend")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "torch_backend.json")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    from hetc.benchmark import cpu_features

    cpu = cpu_features()
    results: dict = {"cpu": cpu, "batch": BATCH, "repeat": args.repeat, "rounds": args.rounds,
                     "threads": args.threads, "models": {}}
    for model in args.models.split(","):
        runs: dict[str, list] = {p: [] for p in PATHS}
        for _ in range(args.rounds):
            for path in PATHS:
                runs[path].append(_child(path, model, args.work, args.repeat, args.threads))
        results["models"][model] = {}
        for path in PATHS:
            ok = [r for r in runs[path] if "times_ms" in r]
            failed = [r["failed"] for r in runs[path] if "failed" in r]
            row = {"median_ms": statistics.median(t for r in ok for t in r["times_ms"]) if ok else None,
                   "round_medians_ms": [statistics.median(r["times_ms"]) for r in ok],
                   "rel_error": max((r["rel_error"] for r in ok), default=None),
                   "first_setup_s": ok[0]["setup_s"] if ok else None, "failed": failed}
            results["models"][model][path] = row
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"CPU: {cpu['cpu_model']} (LLVM mcpu {cpu['llvm_mcpu']}, {', '.join(cpu['cpuinfo_simd'])}); "
          f"batch {BATCH}; threads {args.threads or 'default'}; median ms per call over {args.rounds} rounds x "
          f"{args.repeat} calls")
    print(f"{'model':<12}" + "".join(f"{p:>16}" for p in PATHS) + f"{'backend/onnx':>14}")
    for model, rows in results["models"].items():
        cells = "".join(f"{rows[p]['median_ms']:>16.1f}" if rows[p]["median_ms"] else f"{'failed':>16}" for p in PATHS)
        b, o = rows["hetc-backend"]["median_ms"], rows["hetc-onnx"]["median_ms"]
        print(f"{model:<12}{cells}{(b / o if b and o else float('nan')):>14.2f}")
    print(f"-> {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
