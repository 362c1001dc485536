#!/usr/bin/env python3
"""Time exported tuning candidates on this machine's device: TVM's runtime library and numpy only.

    python3 hetc/runtime/measure.py CANDIDATES_DIR OUT.json [--bundle DIR] [--device cuda]

The device half of ``hetc.tuning.offline`` (read its docstring for the whole loop): the candidates
directory holds ``candidates.json`` and one library per task whose functions ``c0, c1, ...`` are
one kernel each, scheduled differently. Every function is run on arguments of the shapes and dtypes
the manifest gives (floats drawn from a seeded normal, integers zero: always a valid index) and
timed with TVM's own time evaluator (``--repeat`` timings of at least ``--min-repeat-ms`` each,
after one warm-up call). The result, ``{"tasks": {library: {"run_secs": {func: [s, ...]}}}}``,
goes back to ``hetc tune --import-measurements``.

This file imports nothing from hetc's compiler (it runs where only the runtime is: a GPU machine
with the bundle of ``scripts/runtime_bundle.py``; ``--bundle`` puts its ``site/`` on the path).
A kernel that faults poisons the CUDA context of its process, so the tasks are measured in a child
process that writes one line per task; if it dies, the task it was on is recorded as failed and a
new child goes on from the next one.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

CANDIDATES = "candidates.json"  # hetc.tuning.offline.CANDIDATES


def _standalone():
    """hetc/runtime/standalone.py beside this file, loaded without the hetc package."""
    spec = importlib.util.spec_from_file_location("hetc_standalone", Path(__file__).with_name("standalone.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _runtime(bundle: Path | None, device: str):
    """numpy, TVM's runtime, and the device (its runtime library loaded, checked present)."""
    if bundle is not None:
        sys.path.insert(0, str(bundle / "site"))
    standalone = _standalone()
    np, tvm, _tvm_ffi, _vm = standalone.import_runtime()
    if device == "cuda":
        standalone.cuda_available(tvm, "cuda:0")
    return np, tvm, tvm.device(device, 0)


def _arguments(np, tvm, args_json: list, dev, rng) -> list:
    out = []
    for kind, dtype, shape in args_json:
        if kind != "TENSOR":
            raise ValueError(f"argument kind {kind} cannot be made up")
        if dtype.startswith(("float", "bfloat")):
            host = rng.standard_normal(shape).astype("float32").astype(dtype if dtype != "bfloat16" else "float32")
        else:
            host = np.zeros(shape, dtype="bool" if dtype == "bool" else dtype)
        out.append(tvm.runtime.tensor(host, dev))
    return out


def measure_task(np, tvm, directory: Path, entry: dict, dev, repeat: int, min_repeat_ms: int) -> dict:
    """{func: [seconds per repeat]} for the candidates of one task that ran; errors by func."""
    lib = tvm.runtime.load_module(str(directory / entry["library"]))
    args = _arguments(np, tvm, entry["args"], dev, np.random.default_rng(0))
    times, errors = {}, {}
    for cand in entry["candidates"]:
        name = cand["func"]
        try:
            func = lib[name]
            func(*args)  # warm-up (module load, first launch)
            dev.sync()
            timer = lib.time_evaluator(name, dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
            times[name] = [float(r) for r in timer(*args).results]
        except Exception as err:  # noqa: BLE001 - TVM's error types: the candidate did not run
            errors[name] = str(err).strip().splitlines()[-1][:200] if str(err).strip() else type(err).__name__
    return {"run_secs": times, "errors": errors}


def _child(directory: Path, first: int, device: str, repeat: int, min_repeat_ms: int, bundle: Path | None) -> None:
    np, tvm, dev = _runtime(bundle, device)
    manifest = json.loads((directory / CANDIDATES).read_text())
    for index, entry in enumerate(manifest["tasks"][first:], first):
        print(json.dumps({"start": index}), flush=True)
        start = time.perf_counter()
        found = measure_task(np, tvm, directory, entry, dev, repeat, min_repeat_ms)
        found["seconds"] = round(time.perf_counter() - start, 2)
        print(json.dumps({"done": index, "library": entry["library"], **found}), flush=True)


def measure(directory: Path, device: str = "cuda", repeat: int = 5, min_repeat_ms: int = 5,
            bundle: Path | None = None, log=print) -> dict:
    """Measure every task of ``directory`` (children as described above); returns the result."""
    manifest = json.loads((directory / CANDIDATES).read_text())
    tasks = manifest["tasks"]
    _np, _tvm, dev = _runtime(bundle, device)  # the device is there (else a one-line error)
    result = {"format": "hetc-tuning-measurements", "device": device,
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "tasks": {}}
    name = getattr(dev, "device_name", None)
    if name:
        result["device_name"] = str(name)
    first = 0
    while first < len(tasks):
        cmd = [sys.executable, __file__, str(directory), "-", "--child", str(first), "--device", device,
               "--repeat", str(repeat), "--min-repeat-ms", str(min_repeat_ms)]
        if bundle is not None:
            cmd += ["--bundle", str(bundle)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        current = first
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "start" in msg:
                current = msg["start"]
            elif "done" in msg:
                result["tasks"][msg["library"]] = {k: msg[k] for k in ("run_secs", "errors", "seconds")}
                entry = tasks[msg["done"]]
                best = min((sum(v) / len(v) for v in msg["run_secs"].values()), default=None)
                log(f"  {entry['name']}: {len(msg['run_secs'])} of {len(entry['candidates'])} ran, best "
                    f"{'-' if best is None else f'{best * 1e6:.1f} us'} ({msg['seconds']} s)")
                current = msg["done"] + 1
        code = proc.wait()
        if current >= len(tasks):
            break
        if code == 0:  # the child ended without finishing: should not happen
            raise RuntimeError(f"measuring stopped at task {current} without an error")
        entry = tasks[current]
        result["tasks"][entry["library"]] = {"run_secs": {}, "errors": {"*": f"the process died (exit {code})"},
                                             "seconds": 0}
        log(f"  {entry['name']}: the measuring process died (exit {code}); going on with the next task")
        first = current + 1
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidates", type=Path)
    parser.add_argument("out", help="the measurements JSON to write ('-' with --child)")
    parser.add_argument("--device", default=None, help="device kind (default: the one candidates.json names)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--min-repeat-ms", type=int, default=5)
    parser.add_argument("--bundle", type=Path, default=None, help="runtime bundle (scripts/runtime_bundle.py)")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not (args.candidates / CANDIDATES).is_file():
        print(f"error: {args.candidates}: no {CANDIDATES} here", file=sys.stderr)
        return 2
    device = args.device or json.loads((args.candidates / CANDIDATES).read_text()).get("device", "cuda")
    if args.child is not None:
        _child(args.candidates, args.child, device, args.repeat, args.min_repeat_ms, args.bundle)
        return 0
    start = time.perf_counter()
    try:
        result = measure(args.candidates, device, args.repeat, args.min_repeat_ms, args.bundle)
    except Exception as err:  # noqa: BLE001 - the standalone runner's RunError and the like
        print(f"error: {str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__}",
              file=sys.stderr)
        return 1
    result["seconds"] = round(time.perf_counter() - start, 1)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"measured {sum(len(t['run_secs']) for t in result['tasks'].values())} candidates of "
          f"{len(result['tasks'])} tasks in {result['seconds']} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
