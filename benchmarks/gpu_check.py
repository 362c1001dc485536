#!/usr/bin/env python3
"""The GPU check: hetc's CUDA artifacts loaded, compared with torch and timed on a lent H100/H200.

On the GPU machine (docs/cuda.md, "Running the GPU check" has the exact `run` call):

    python3 benchmarks/gpu_check.py --pack build/gpu/artifacts --bundle build/gpu/bundle --out $OUT

Needs there: Python 3.12 with torch (CUDA), numpy, transformers; the carried runtime bundle
(``scripts/runtime_bundle.py``: TVM's runtime with ``libtvm_runtime_cuda.so``, tvm-ffi for
3.12) and the carried pack (``scripts/gpu_artifacts.py``: artifacts with their weights stripped,
``index.json``). Nothing is built or installed there. Three phases, so that what the issue
needs first is done first and a timeout keeps it:

1. per model: the torch model is built and its weights regenerated from the seed (bit-identical
   to the ones compiled in) and written back into the artifact (sha256 of every file checked);
   the artifact is loaded with the runtime-only runner (``hetc/runtime/standalone.py``'s
   ``Part``) and run; its outputs are compared with torch eager on the same inputs, TF32 off:
   ``max|hetc - torch| / max|torch|`` must be <= 1e-3 (GPT-2: logits and presents at past 32
   and 480); hetc (inputs already on the GPU) and torch eager are timed with CUDA events
   (median of ``--repeat``); for BERT-base and ResNet-50 batch 8 hetc's kernels are profiled
   (torch.profiler: CUPTI sees TVM's kernels too); the placement solver's assumptions are
   checked: its predicted GPU latency against hetc's measured one, its host link (latency +
   bytes / bandwidth) against measured copies of the split's transfer sizes;
2. ``torch.compile`` (default, then ``max-autotune-no-cudagraphs``), BERT-base and ResNet-50
   batch 8 first, while ``--budget-s`` (default 400) lasts;
3. the compiled models' kernel profiles: with phase 1's, the kernels where hetc loses.

Writes ``OUT/gpu_check.json`` (after every step, so a timeout keeps what was done) and
``OUT/gpu_check.md`` (the table), and stays under 7 minutes.

``--fake`` runs the same code on the CPU (artifacts compiled with ``--target cpu``, torch on
the CPU, wall-clock timers, no torch.compile unless ``--compile``): tests/test_gpu_check.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-3
PROFILED = ("bert-base-s128", "resnet50-b8", "bert-tiny-s16", "resnet-tiny-b2")  # and their -tuned builds
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


artifacts_mod = _load("gpu_artifacts", ROOT / "scripts" / "gpu_artifacts.py")
standalone = _load("hetc_standalone", ROOT / "hetc" / "runtime" / "standalone.py")


# ---------------------------------------------------------------------------------------
# the device layer: real CUDA, or the CPU standing in for it
# ---------------------------------------------------------------------------------------

class CudaDevice:
    """torch on cuda:0, CUDA-event timers, TF32 off."""

    fake = False
    torch_device = "cuda"

    def __init__(self) -> None:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("error: torch sees no CUDA device (use --fake on a machine without a GPU)")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        self.torch = torch
        props = torch.cuda.get_device_properties(0)
        self.name = props.name
        self.info = {"name": props.name, "sms": props.multi_processor_count,
                     "memory_gib": round(props.total_memory / 2**30, 1), "torch": torch.__version__,
                     "cuda": torch.version.cuda, "capability": f"sm_{props.major}{props.minor}"}

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def time_ms(self, fn, warmup: int, repeat: int) -> list[float]:
        """Each call alone between two CUDA events (on torch's stream, the legacy default stream
        that TVM launches on as well), synchronised: per-call milliseconds."""
        torch = self.torch
        for _ in range(warmup):
            fn()
        self.sync()
        times = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return times


class FakeDevice:
    """The CPU in place of the GPU: the same steps, wall-clock timers."""

    fake = True
    torch_device = "cpu"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.name = f"fake (CPU: {platform.processor() or platform.machine()})"
        self.info = {"name": self.name, "torch": torch.__version__}

    def sync(self) -> None:
        pass

    def time_ms(self, fn, warmup: int, repeat: int) -> list[float]:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return times


# ---------------------------------------------------------------------------------------
# pieces
# ---------------------------------------------------------------------------------------

def rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / max |ref| (0 when both are all zero)."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if got.shape != ref.shape:
        return float("inf")
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    diff = float(np.abs(got - ref).max()) if ref.size else 0.0
    return diff / scale if scale > 0 else diff


def median(times: list[float]) -> float:
    return float(statistics.median(times)) if times else float("nan")


def import_runtime(bundle: Path | None):
    """TVM's runtime (runtime library only) from the bundle's site/, or the installed one."""
    if bundle is not None:
        site = bundle / "site"
        if not site.is_dir():
            raise SystemExit(f"error: {bundle}: no runtime bundle here (no site/; scripts/runtime_bundle.py makes one)")
        sys.path.insert(0, str(site))
    return standalone.import_runtime()


class HetcModel:
    """An artifact's one part on its devices: ``run(numpy feeds)`` and a device-resident call."""

    def __init__(self, root: Path, tvm, vm_class) -> None:
        self.manifest = standalone.read_manifest(root)
        if len(self.manifest["parts"]) != 1:
            raise standalone.RunError(f"{root}: {len(self.manifest['parts'])} parts; the check runs one-part artifacts")
        self.part = standalone.Part(root, self.manifest["parts"][0], tvm, vm_class)
        self.tvm = tvm
        self.input_names = [s["name"] for s in self.manifest["inputs"]]
        self.output_names = [s["name"] for s in self.manifest["outputs"]]
        self.devices = [str(d) for d in self.part.devices]

    def run(self, feeds: dict) -> dict:
        return dict(zip(self.output_names, self.part([feeds[n] for n in self.input_names])))

    def resident_call(self, feeds: dict):
        """A call whose inputs already sit on the part's first device (what is timed)."""
        args = [self.tvm.runtime.tensor(feeds[n], self.part.devices[0]) for n in self.input_names]
        main = self.part.main
        return lambda: main(*args)


def torch_call(model, spec, feeds: dict, device: str):
    """(call, outputs-as-numpy) of the torch model on ``device`` for these feeds."""
    import torch

    names = [n for n in feeds]
    args = [torch.from_numpy(feeds[n]).to(device) for n in names]

    def call():
        with torch.inference_mode():
            return model(*args)

    def outputs():
        out = call()
        out = out if isinstance(out, (tuple, list)) else (out,)
        return [o.detach().float().cpu().numpy() for o in out]

    return call, outputs


def compare(spec, hetc_out: dict, ref: list[np.ndarray], output_names: list[str]) -> dict:
    errors = {name: rel_error(hetc_out[name], r) for name, r in zip(output_names, ref)}
    worst = max(errors.values()) if errors else float("inf")
    return {"max_rel_error": worst, "ok": bool(worst <= TOLERANCE),
            "errors": {k: float(f"{v:.3g}") for k, v in errors.items()}}


def transfer_check(device, predicted: dict, sizes: list[int], repeat: int) -> list[dict]:
    """Measured host->device and device->host copies (pageable numpy, as the VM's inputs and
    outputs are) against the solver's ``latency + bytes / bandwidth``."""
    torch = device.torch
    link = predicted.get("host_link") or {}
    rows = []
    for nbytes in sorted({int(s) for s in sizes if s > 0}):
        host = np.ones(max(1, nbytes // 4), np.float32)
        if device.fake:
            h2d = device.time_ms(lambda host=host: torch.from_numpy(host).clone(), 1, repeat)
            d2h = h2d
        else:
            gpu = torch.from_numpy(host).cuda()
            h2d = device.time_ms(lambda host=host: torch.from_numpy(host).cuda(), 2, repeat)
            d2h = device.time_ms(lambda gpu=gpu: gpu.cpu(), 2, repeat)
        model_s = link.get("latency", 0.0) + nbytes / link["bandwidth"] if link.get("bandwidth") else None
        rows.append({"bytes": nbytes, "h2d_ms": median(h2d), "d2h_ms": median(d2h),
                     "predicted_ms": model_s * 1e3 if model_s is not None else None,
                     "h2d_GBps": nbytes / (median(h2d) * 1e-3) / 1e9 if median(h2d) > 0 else None})
    return rows


def kernel_profile(device, fn, runs: int = 5, top: int = 12) -> list[dict]:
    """GPU kernels of ``fn`` (CUPTI via torch.profiler): name, calls, total ms per run."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    device.sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        device.sync()
    rows = {}
    for evt in prof.key_averages():
        total = getattr(evt, "device_time_total", None)
        if total is None:
            total = getattr(evt, "cuda_time_total", 0)
        if total <= 0:
            continue
        rows[evt.key] = {"kernel": evt.key[:90], "calls": evt.count // runs, "ms": total / 1e3 / runs}
    return sorted(rows.values(), key=lambda r: -r["ms"])[:top]


# ---------------------------------------------------------------------------------------
# one model
# ---------------------------------------------------------------------------------------

class Budget:
    def __init__(self, seconds: float) -> None:
        self.start, self.seconds = time.perf_counter(), seconds

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)


def check_model(name: str, info: dict, root: Path, device, runtime, args) -> tuple[dict, dict]:
    """Phase 1 for one model: restore its weights, load, compare with torch eager, time hetc and
    eager (and profile hetc's kernels for the ``PROFILED`` models). Returns (the result, what
    later phases need: the torch model and each case's feeds and hetc call)."""
    g = artifacts_mod
    spec = g.Spec(**info["spec"])
    result = {"model": name, "target": spec.target}
    t0 = time.perf_counter()
    model = g.build_torch(spec.family, spec.config)
    params = g.seed_parameters(model, spec.family, spec.seed)
    result["weights_restored_bytes"] = g.restore(root, params)
    result["restore_s"] = round(time.perf_counter() - t0, 2)
    _np, tvm, _tvm_ffi, vm_class = runtime
    hetc = HetcModel(root, tvm, vm_class)
    result["devices"] = hetc.devices
    model = model.to(device.torch_device)
    vocab = g.vocab_of(model)
    cases = [(f"past {p}", g.make_inputs(spec, vocab, past=p)) for p in spec.pasts] \
        if spec.family == "gpt2" else [("", g.make_inputs(spec, vocab))]
    result["cases"], live = [], {"spec": spec, "model": model, "cases": []}
    for label, feeds in cases:
        case = {"case": label} if label else {}
        _call, outputs = torch_call(model, spec, feeds, device.torch_device)
        ref = outputs()
        got = hetc.run(feeds)
        case.update(compare(spec, got, ref, hetc.output_names))
        resident = hetc.resident_call(feeds)
        case["hetc_ms"] = median(device.time_ms(resident, args.warmup, args.repeat))
        case["hetc_numpy_ms"] = median(device.time_ms(lambda feeds=feeds: hetc.run(feeds), 1, max(3, args.repeat // 4)))
        call, _ = torch_call(model, spec, feeds, device.torch_device)
        case["torch_eager_ms"] = median(device.time_ms(call, args.warmup, args.repeat))
        if _base(name) in PROFILED and not device.fake:
            case["profile_hetc"] = kernel_profile(device, resident)
        result["cases"].append(case)
        live["cases"].append({"feeds": feeds, "hetc": resident})
    predicted = info.get("predicted", {})
    gpu = predicted.get("cuda", {})
    if gpu.get("predicted_seconds"):
        result["predicted_cuda_ms"] = gpu["predicted_seconds"] * 1e3
        result["measured_over_predicted"] = result["cases"][0]["hetc_ms"] / result["predicted_cuda_ms"]
    split = predicted.get("cpu+cuda")
    if split:
        result["predicted_split_ms"] = (split.get("predicted_seconds") or 0) * 1e3
        result["predicted_transfers"] = split.get("transfers", [])
        sizes = [t["bytes"] for t in split.get("transfers", [])] or [4096]
        result["transfers_measured"] = transfer_check(device, predicted, sizes + [2**20, 16 * 2**20], args.repeat)
    result["ok"] = all(c["ok"] for c in result["cases"])
    return result, live


def _base(name: str) -> str:
    """The model an artifact was built from: ``X-tuned`` is ``X`` compiled with a tuning database."""
    return name.removesuffix(artifacts_mod.TUNED)


def compile_order(names: list[str], modes: tuple[str, ...] = COMPILE_MODES) -> list[tuple[str, str]]:
    """(model, mode) pairs for phase 2: the acceptance models (``PROFILED``) first in each mode,
    default before max-autotune, so a short budget still times what the issue asks for. A tuned
    build is the same torch model as its base (``share_compiled`` copies the base's figures)."""
    names = [n for n in names if _base(n) == n or _base(n) not in names]
    first = [n for n in names if n in PROFILED]
    rest = [n for n in names if n not in PROFILED]
    return [(n, m) for group in (first, rest) for m in modes for n in group]


def compile_model(result: dict, live: dict, mode: str, device, args, budget: Budget) -> None:
    """Phase 2: ``torch.compile`` in one mode, every case of one model, while the budget lasts
    (compiling is the slow part); each case keeps its compiled call for the profile phase."""
    torch = device.torch
    key = f"torch_compile_{mode}_ms"
    for case, state in zip(result["cases"], live["cases"]):
        if budget.left() < args.compile_reserve_s:
            case[key] = None
            case.setdefault("skipped", []).append(f"torch.compile {mode}: time budget")
            continue
        try:
            torch._dynamo.reset()
            compiled = torch.compile(live["model"], mode=None if mode == "default" else mode)
            call, outputs = torch_call(compiled, live["spec"], state["feeds"], device.torch_device)
            start = time.perf_counter()
            outputs()
            case[f"torch_compile_{mode}_compile_s"] = round(time.perf_counter() - start, 1)
            case[key] = median(device.time_ms(call, args.warmup, args.repeat))
            if mode == "max-autotune-no-cudagraphs" or "compiled" not in state:
                state["compiled"] = call
        except Exception as err:  # noqa: BLE001 - inductor failures are reported, not fatal
            case[key] = None
            case.setdefault("skipped", []).append(f"torch.compile {mode}: {standalone.last_line(err)[:200]}")


def share_compiled(results: dict) -> None:
    """A tuned build's torch.compile figures are its base model's (same torch model, inputs)."""
    for name, result in results.items():
        base = results.get(_base(name))
        if base is None or base is result or "cases" not in base or "cases" not in result:
            continue
        for case, ref in zip(result["cases"], base["cases"]):
            for key, value in ref.items():
                if key.startswith("torch_compile_") and key not in case:
                    case[key] = value
            case["torch_compile_from"] = base["model"]


def profile_model(result: dict, live: dict, device) -> None:
    """Phase 3: per-kernel GPU time of the compiled torch model (hetc's was taken in phase 1)."""
    case, state = result["cases"][0], live["cases"][0]
    if "compiled" in state:
        case["profile_torch_compile"] = kernel_profile(device, state["compiled"])


def calibration(report: dict) -> dict:
    """What the device spec's ``measured`` block should say (``hetc/devices``): the geometric
    mean of measured / predicted hetc latency over the models, and the host link fitted to the
    measured host-to-device copies (latency: the smallest copy; bandwidth: the largest)."""
    ratios = [r["measured_over_predicted"] for r in report["models"] if r.get("measured_over_predicted")]
    copies = sorted((t["bytes"], t["h2d_ms"]) for r in report["models"] for t in r.get("transfers_measured", []))
    out = {"source": f"benchmarks/gpu_check.py on {report['device'].get('name')}"}
    if ratios:
        out["kernel_time_scale"] = round(float(np.exp(np.mean(np.log(ratios)))), 2)
        out["kernel_time_models"] = len(ratios)
    if len(copies) >= 2:
        latency = copies[0][1] * 1e-3
        (nbytes, ms) = copies[-1]
        bandwidth = nbytes / max(ms * 1e-3 - latency, 1e-9)
        out["host_link"] = {"name": "pageable host memory (measured)", "bandwidth": float(f"{bandwidth:.3g}"),
                            "latency": float(f"{latency:.3g}")}
    return out


# ---------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------

def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if value < 1000 else f"{value:.0f}"
    return str(value)


def table(report: dict) -> str:
    lines = [f"# GPU check on {report['device']['name']}", "",
             "| model | case | hetc ms | torch eager ms | torch.compile ms | max-autotune ms | max rel err | ok |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in report["models"]:
        if "error" in r:
            lines.append(f"| {r['model']} | | | | | | | error: {r['error'][:120]} |")
            continue
        for c in r["cases"]:
            lines.append(f"| {r['model']} | {c.get('case', '')} | {_fmt(c['hetc_ms'])} | {_fmt(c['torch_eager_ms'])} | "
                         f"{_fmt(c.get('torch_compile_default_ms'))} | "
                         f"{_fmt(c.get('torch_compile_max-autotune-no-cudagraphs_ms'))} | "
                         f"{c['max_rel_error']:.2e} | {'yes' if c['ok'] else 'NO'} |")
    lines += ["", "Solver assumptions (predicted vs measured):", "",
              "| model | predicted GPU ms | measured hetc ms | measured / predicted |", "|---|---:|---:|---:|"]
    for r in report["models"]:
        if r.get("predicted_cuda_ms"):
            lines.append(f"| {r['model']} | {_fmt(r['predicted_cuda_ms'])} | {_fmt(r['cases'][0]['hetc_ms'])} | "
                         f"{_fmt(r['measured_over_predicted'])} |")
    for r in report["models"]:
        for t in r.get("transfers_measured", []):
            lines.append(f"| {r['model']} copy {t['bytes']} B | {_fmt(t['predicted_ms'])} | "
                         f"h2d {_fmt(t['h2d_ms'])} / d2h {_fmt(t['d2h_ms'])} | |")
    if report.get("calibration"):
        lines += ["", "Calibration for the device spec's `measured` block (hetc/devices):", "",
                  "    " + json.dumps(report["calibration"])]
    for r in report["models"]:
        for c in r.get("cases", [])[:1]:
            for key in ("profile_hetc", "profile_torch_compile"):
                if c.get(key):
                    total = sum(k["ms"] for k in c[key])
                    lines += ["", f"{r['model']}: {key[8:]} kernels, ms per run (top {len(c[key])}: {total:.3f} ms)", "",
                              "| kernel | calls | ms |", "|---|---:|---:|"]
                    lines += [f"| `{k['kernel'][:70]}` | {k['calls']} | {k['ms']:.3f} |" for k in c[key]]
    return "\n".join(lines) + "\n"


def merge(reports: list[dict]) -> dict:
    """Several tries on the device as one report: a later try's model replaces an earlier one's,
    except that values the later one lacks (a torch.compile mode it skipped) are kept."""
    merged = {**reports[0], "models": [], "runs": len(reports)}
    by_name: dict[str, dict] = {}
    for report in reports:
        for model in report["models"]:
            old = by_name.get(model["model"])
            if old is None or "error" in old:
                by_name[model["model"]] = model
            elif "error" not in model:
                cases = [{**a, **{k: v for k, v in b.items() if v is not None}}
                         for a, b in zip(old.get("cases", []), model.get("cases", []))]
                by_name[model["model"]] = {**old, **model, "cases": cases}
    merged["models"] = list(by_name.values())
    merged["calibration"] = calibration(merged)
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run hetc's CUDA artifacts against torch on this GPU.")
    parser.add_argument("--pack", type=Path, default=ROOT / "build" / "gpu" / "artifacts",
                        help="folder with artifacts.tar.xz and index.json (scripts/gpu_artifacts.py)")
    parser.add_argument("--bundle", type=Path, default=None,
                        help="runtime bundle (scripts/runtime_bundle.py); default: the installed tvm")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_check_out")))
    parser.add_argument("--models", default=None, help="comma list (default: all in the pack)")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--budget-s", type=float, default=400, help="after this, optional steps are skipped")
    parser.add_argument("--compile-reserve-s", type=float, default=120,
                        help="start a torch.compile only with this much budget left")
    parser.add_argument("--modes", default=",".join(COMPILE_MODES),
                        help="torch.compile modes to time (max-autotune takes minutes per model)")
    parser.add_argument("--fake", action="store_true", help="the CPU stands in for the GPU (tests)")
    parser.add_argument("--compile", action="store_true", help="with --fake: run torch.compile too")
    parser.add_argument("--merge", type=Path, nargs="+", default=None,
                        help="merge these gpu_check.json files (tries in order) into --out; runs nothing")
    args = parser.parse_args(argv)
    if args.merge:
        report = merge([json.loads(p.read_text()) for p in args.merge])
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
        (args.out / "gpu_check.md").write_text(table(report))
        print(table(report))
        return 0
    budget = Budget(args.budget_s)
    os.environ.setdefault("TVM_FFI_DISABLE_TORCH_C_DLPACK", "1")
    device = FakeDevice() if args.fake else CudaDevice()
    runtime = import_runtime(args.bundle)
    index = json.loads((args.pack / "index.json").read_text())
    names = args.models.split(",") if args.models else list(index["models"])
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    report = {"device": device.info, "arch": index.get("arch"), "tolerance": TOLERANCE, "repeat": args.repeat,
              "tvm": runtime[1].__version__, "python": platform.python_version(), "fake": device.fake,
              "timer": "wall clock" if device.fake else "CUDA events, per call", "models": []}
    def save() -> None:
        report["elapsed_s"] = round(time.perf_counter() - budget.start, 1)
        (args.out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str) + "\n")

    lives: dict[str, dict] = {}
    try:
        roots = {p.name: p for p in artifacts_mod.unpack(args.pack, work)}
        # phase 1: every model loads, matches and is timed (hetc, eager) before anything optional
        for name in names:
            print(f"{name} ...", flush=True)
            try:
                result, lives[name] = check_model(name, index["models"][name], roots[name], device, runtime, args)
            except (standalone.RunError, artifacts_mod.RestoreError, KeyError) as err:
                result = {"model": name, "error": str(err), "ok": False}
            except Exception as err:  # noqa: BLE001 - one model failing must not lose the others
                result = {"model": name, "error": f"{type(err).__name__}: {standalone.last_line(err)}", "ok": False}
            report["models"].append(result)
            save()
            print(f"  {'ok' if result['ok'] else 'FAILED'}: " + (result.get("error") or ", ".join(
                f"{c.get('case') or 'run'} hetc {c['hetc_ms']:.3f} ms, eager {c['torch_eager_ms']:.3f} ms, "
                f"err {c['max_rel_error']:.1e}" for c in result["cases"])), flush=True)
        results = {r["model"]: r for r in report["models"]}
        # phase 2: torch.compile, the acceptance models first; phase 3: their compiled kernels' profile
        if not device.fake or args.compile:
            for name, mode in compile_order([n for n in names if n in lives], tuple(args.modes.split(","))):
                print(f"torch.compile {mode}: {name} ...", flush=True)
                compile_model(results[name], lives[name], mode, device, args, budget)
                save()
            share_compiled(results)
        for name in [n for n in names if n in lives and n in PROFILED]:
            if budget.left() > 30 and not device.fake:
                print(f"profile: {name} ...", flush=True)
                try:
                    profile_model(results[name], lives[name], device)
                except Exception as err:  # noqa: BLE001 - a profiler failure loses only the profile
                    results[name]["profile_error"] = standalone.last_line(err)[:200]
                save()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["calibration"] = calibration(report)
    save()
    (args.out / "gpu_check.md").write_text(table(report))
    print(table(report))
    return 0 if all(r["ok"] for r in report["models"]) else 1


if __name__ == "__main__":
    sys.exit(main())
