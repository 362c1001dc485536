"""CPU latency of hetc (default schedules; tuned with --db) vs onnxruntime and TVM's default build.

    python benchmarks/cpu_latency.py [--models a,b] [--torch-models DIR] [--db DIR] [--repeat N]
                                     [--skip-tvm] [--tvm-budget S] [--skip-corun] [--json out.json]

Writes each model (examples/models.py; with --torch-models, also the .onnx files of
examples/torch_models.py in DIR), then per model: onnxruntime (CPU EP, one thread per physical
core) for the reference outputs, hetc and onnxruntime timed alternately in one loop (medians
of --repeat runs after warm-up, a run of a model faster than 1 ms being as many back-to-back
calls as take about 1 ms, its time divided by them; see hetc/benchmark.py), the same for the
tuned build, and
TVM's default build (from_onnx + tvm.compile, untuned: seconds per run on the CNNs, so its
runs stop once --tvm-budget seconds and 3 runs are spent; such cells are marked *). Every
column uses the FLOP count of hetc's compile report; % peak is of the fastest 4096x4096 float32
matmul (numpy's OpenBLAS, also forced to AVX-512, and onnxruntime; all cores and one core x
cores; at start and at end: see measure_peak), for the ``*_int8`` models of the fastest
2048^3 uint8 x int8 MatMulInteger with a constant weight (onnxruntime's, VNNI where the CPU has
it); rel err is max |x - ort| / max |ort| over the
outputs. Then the co-run table: hetc and onnxruntime (its default spinning workers) each alone,
then alternating call by call in one process, as an application that uses both runs them
(``hetc.benchmark.co_run``). Titles name the ISA (LLVM's mcpu, float32 lanes). A failure is
recorded in its cell and the run goes on. The machine's speed drifts: compare only numbers
from one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
from rich import box
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import hetc
from hetc.backends.cpu.codegen import llvm_target
from hetc.backends.cpu.runtime import from_executable
from hetc.benchmark import RUN_MS, co_run, compare_with_onnxruntime, cpu_features, ort_session
from hetc.errors import last_line
from hetc.native_log import filtered_stderr
from hetc.options import CompileOptions, default_threads

DEFAULT_MODELS = "call_overhead,mlp,cnn,transformer,resnet18,resnet50,resnet50_b8,mobilenet_v2,bert_tiny,bert_base"
RUNTIMES = ("ort", "hetc", "tuned", "tvm")  # tuned: hetc with --db


def one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {last_line(err)}"[:300]


def machine_info(cpu: str | None = None) -> dict:
    import onnxruntime
    import psutil
    import tvm

    features = cpu_features()  # /proc/cpuinfo's model name and SIMD flags, LLVM's mcpu and lanes
    if cpu:
        features |= {"hetc_mcpu": cpu, "hetc_float32_lanes": cpu_features(cpu)["float32_lanes"]}
    cpu = features["cpu_model"] or platform.processor() or platform.machine()
    return {"cpu": cpu, **features, "physical_cores": psutil.cpu_count(logical=False),
            "logical_cpus": psutil.cpu_count(),
            "threads": default_threads(), "platform": platform.platform(), "python": platform.python_version(),
            "versions": {"hetc": hetc.__version__, "tvm": tvm.__version__, "onnxruntime": onnxruntime.__version__,
                         "onnx": onnx.__version__, "numpy": np.__version__}}


_SGEMM = {
    "numpy": "import numpy as np\na = np.ones((4096, 4096), np.float32)\nrun = lambda: a @ a\n",
    "onnxruntime": (
        "import numpy as np, onnxruntime as ort\nfrom onnx import TensorProto, helper as h\n"
        "io = [h.make_tensor_value_info(x, TensorProto.FLOAT, [4096, 4096]) for x in 'abc']\n"
        "g = h.make_graph([h.make_node('MatMul', ['a', 'b'], ['c'])], 'g', io[:2], io[2:])\n"
        "m = h.make_model(g, opset_imports=[h.make_opsetid('', 17)])\no = ort.SessionOptions()\n"
        "o.intra_op_num_threads = THREADS\n"
        "s = ort.InferenceSession(m.SerializeToString(), o, providers=['CPUExecutionProvider'])\n"
        "f = {'a': np.ones((4096, 4096), np.float32), 'b': np.ones((4096, 4096), np.float32)}\n"
        "run = lambda: s.run(None, f)\n"),
    # int8 peak: onnxruntime's MatMulInteger, uint8 x a constant int8 weight it pre-packs (its VNNI
    # kernels where the CPU has them); 2048^3, where it ran fastest on a 2-core Zen 5, AVX512-VNNI
    # (a runtime weight there: 2.6x slower)
    "onnxruntime-int8": (
        "import numpy as np, onnxruntime as ort\nfrom onnx import TensorProto, helper as h\n"
        "n = 2048\nops = 2 * n**3\n"
        "b = h.make_tensor('b', TensorProto.INT8, [n, n], np.ones((n, n), np.int8).tobytes(), raw=True)\n"
        "g = h.make_graph([h.make_node('MatMulInteger', ['a', 'b'], ['c'])], 'g', "
        "[h.make_tensor_value_info('a', TensorProto.UINT8, [n, n])], "
        "[h.make_tensor_value_info('c', TensorProto.INT32, [n, n])], [b])\n"
        "m = h.make_model(g, opset_imports=[h.make_opsetid('', 17)])\no = ort.SessionOptions()\n"
        "o.intra_op_num_threads = THREADS\n"
        "s = ort.InferenceSession(m.SerializeToString(), o, providers=['CPUExecutionProvider'])\n"
        "f = {'a': np.ones((n, n), np.uint8)}\n"
        "run = lambda: s.run(None, f)\n"),
}
INT8 = "-int8"  # peak variants of int8 GEMMs; models named *_int8 are rated against their maximum
_TIME = ("import time\nrun()\nbest = 1e9\nfor _ in range(RUNS):\n"
         "    t = time.perf_counter(); run(); best = min(best, time.perf_counter() - t)\n"
         "print(globals().get('ops', 2 * 4096**3) / best / 1e9)\n")


def _has_avx512() -> bool:
    try:
        return " avx512f " in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def measure_peak(threads: int, runs: int = 4) -> dict[str, float]:
    """GFLOP/s of a 4096x4096 float32 matmul by every BLAS at hand, each in a fresh process.

    Keys ``LIBRARY[/VARIANT]@THREADS``: numpy's OpenBLAS as it dispatches itself, and forced to
    its AVX-512 kernels where the CPU has them (OpenBLAS 0.3.31 runs its Haswell AVX2 kernels
    on CPUs it does not know, such as AMD Zen 5: 250 instead of 460 GFLOP/s on 2 cores), and
    onnxruntime's MLAS; each on all ``threads`` and on one thread times ``threads`` (on a
    shared machine one busy core halves a multi-threaded sgemm). The peak is their maximum.
    A variant that fails is left out.
    """
    variants = [("numpy", {}), ("onnxruntime", {}), ("onnxruntime-int8", {})]
    if _has_avx512():
        variants.append(("numpy/avx512", {"OPENBLAS_CORETYPE": "SkylakeX"}))
    found = {}
    for name, env in variants:
        for n in sorted({threads, 1}, reverse=True):
            count = {var: str(n) for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
            code = (_SGEMM[name.split("/")[0]] + _TIME).replace("THREADS", str(n)).replace("RUNS", str(runs))
            proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, **count, **env},
                                  capture_output=True, text=True, check=False)
            try:
                found[f"{name}@{n}"] = float(proc.stdout.strip().splitlines()[-1]) * threads / n
            except (ValueError, IndexError):
                continue
    return found


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def rel_error(outputs, reference) -> float:
    """max over outputs of max |out - ref| / max |ref|."""
    errors = [float(np.max(np.abs(np.asarray(o, np.float64) - r)) / max(float(np.max(np.abs(r))), 1e-30))
              for o, r in zip(outputs, reference, strict=True) if np.asarray(r).size]
    return max(errors, default=0.0)


def time_budgeted(fn, repeat: int, budget_s: float, first_s: float, min_runs: int = 3) -> dict:
    """Median ms of up to ``repeat`` runs, stopping once ``budget_s`` and ``min_runs`` are spent.

    ``first_s``: the time of a run already done (the warm-up); one of a second or more counts.
    """
    first = first_s
    times = [first] if first >= 1.0 else []
    start = time.perf_counter()
    while len(times) < repeat and not (len(times) >= min_runs and time.perf_counter() - start >= budget_s):
        times.append(_seconds(fn))
    return {"median_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3, "runs": len(times),
            "capped": len(times) < repeat}


def bench_model(path: Path, inputs: dict[str, np.ndarray], args) -> tuple[float | None, dict[str, dict]]:
    """(model FLOPs, {runtime: cell}); a cell has ``error`` instead of numbers when a step failed."""
    cells: dict[str, dict] = {key: {} for key in RUNTIMES if (key != "tuned" or args.db) and
                              (key != "tvm" or not args.skip_tvm)}
    try:
        start = time.perf_counter()
        session = ort_session(path, default_threads())
        cells["ort"]["compile_s"] = time.perf_counter() - start
        reference = session.run(None, inputs)
    except Exception as err:  # noqa: BLE001 -- one failed cell must not stop the run
        cells["ort"]["error"], reference, session = one_line(err), None, None

    flops, compiled = None, {}
    tuned_db = str(args.db).replace("{model}", path.stem) if args.db else None
    if tuned_db and not Path(tuned_db).exists():  # a per-model pattern with no database for this one
        cells.pop("tuned", None)
    for key, database in (("hetc", None), ("tuned", tuned_db)):
        if key not in cells:
            continue
        try:
            start = time.perf_counter()
            compiled[key] = hetc.compile(path, "cpu", database=database, cpu=args.cpu)
            cells[key]["compile_s"] = time.perf_counter() - start
            flops = flops or compiled[key].report["graph"]["flops"]
            outputs = list(compiled[key].run(inputs).values())
            if reference is not None:
                cells[key]["rel_err"] = rel_error(outputs, reference)
        except Exception as err:  # noqa: BLE001
            cells[key]["error"] = one_line(err)
    if flops is None:  # no hetc build: count them without compiling (None if shapes are dynamic)
        with contextlib.suppress(Exception):
            flops = hetc.inspect_model(path).graph.flops

    # hetc (then tuned) and onnxruntime take turns run by run; with no hetc build, a no-op
    # stands in for it so that onnxruntime is still timed the same way.
    for key in ("hetc", "tuned"):
        if key == "tuned" and key not in compiled:
            continue
        if "error" in cells["ort"]:
            break
        model = compiled.get(key, SimpleNamespace(run=lambda inputs: None))
        try:
            measured = compare_with_onnxruntime(path, model, inputs, repeat=args.repeat, session=session)["results"]
        except Exception as err:  # noqa: BLE001
            cells[key if key in compiled else "ort"]["error"] = one_line(err)
            continue
        if key in compiled:
            cells[key].update(measured["hetc"], ort_ms=measured["onnxruntime"]["median_ms"])
        if key == "hetc":
            cells["ort"].update(measured["onnxruntime"])
    if "hetc" in compiled and "error" not in cells["ort"] and not args.skip_corun:
        # an application that uses both: onnxruntime with its default (spinning) workers
        try:
            spinning = ort_session(path, default_threads(), spinning=True)
            corun = co_run({"hetc": lambda: compiled["hetc"].run(inputs),
                            "ort": lambda: spinning.run(None, dict(inputs))}, args.repeat)
            cells["hetc"]["corun"], cells["ort"]["corun"] = corun["hetc"], corun["ort"]
        except Exception as err:  # noqa: BLE001
            cells["hetc"]["corun"] = {"error": one_line(err)}
    compiled.clear()

    if "tvm" in cells:
        try:
            import tvm
            from tvm import relax

            start = time.perf_counter()
            with filtered_stderr():  # TVM's known-harmless C++ warnings
                mod = relax.frontend.onnx.from_onnx(onnx.load(str(path)), keep_params_in_input=False)
                runner = from_executable(tvm.compile(mod, llvm_target(CompileOptions())))
            cells["tvm"]["compile_s"] = time.perf_counter() - start
            args_in_order = [inputs[v.name] for v in onnx.load(str(path), load_external_data=False).graph.input
                             if v.name in inputs]
            start = time.perf_counter()
            outputs = runner(args_in_order)
            first_s = time.perf_counter() - start
            if reference is not None:
                cells["tvm"]["rel_err"] = rel_error(outputs, reference)
            cells["tvm"].update(time_budgeted(lambda: runner(args_in_order), args.repeat, args.tvm_budget, first_s))
        except Exception as err:  # noqa: BLE001
            cells["tvm"]["error"] = one_line(err)

    ort_ms = cells["ort"].get("median_ms")
    for key, cell in cells.items():
        if "median_ms" in cell:
            if flops:
                cell["gflops"] = flops / cell["median_ms"] / 1e6
            paired = cell.get("ort_ms", ort_ms)  # hetc builds: the onnxruntime runs they alternated with
            if paired and key != "ort":
                cell["vs_ort"] = cell["median_ms"] / paired
    return flops, cells


def _sources(args, work: Path):
    """(name, model path, inputs path) per model, written when reached; paths None if it failed."""
    import models

    for name in args.models.split(","):
        try:
            yield name, *models.write(name, work), None
        except Exception as err:  # noqa: BLE001
            yield name, None, None, f"cannot build: {one_line(err)}"
    for path in sorted(args.torch_models.glob("*.onnx")) if args.torch_models else []:
        yield path.stem, path, path.with_name(f"{path.stem}_inputs.npz"), None


def print_table(rows: list[dict], args) -> None:
    def num(value, digits: int = 3) -> str:
        return "" if value is None else f"{value:.{digits}g}" if abs(value) < 10**digits else f"{value:.0f}"

    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False,
                  title=f"CPU latency ({args.isa}): median of {args.repeat} runs (a run of a model under "
                        f"{RUN_MS:g} ms: calls for about {RUN_MS:g} ms, time per call), {args.threads} threads, "
                        f"peak {args.peak:.0f} GFLOP/s, int8 {args.peak_int8:.0f} GOP/s (the *_int8 rows' %peak)")
    for col in ("model", "GFLOP", "runtime", "build s", "ms", "GFLOP/s", "%peak", "x ort", "err"):
        table.add_column(col, justify="left" if col in {"model", "runtime"} else "right", no_wrap=True)
    errors: list[str] = []
    for row in rows:
        cells = [(key, cell) for key, cell in row["results"].items() if cell]
        for i, (key, cell) in enumerate(cells):
            if "error" in cell:
                errors.append(f"[{len(errors) + 1}] {row['model']}, {key}: {cell['error']}")
            ms = f"error [{len(errors)}]" if "error" in cell else num(cell.get("median_ms")) + "*" * bool(cell.get("capped"))
            table.add_row(row["model"] if i == 0 else "", num(row["gflop"]) if i == 0 else "", key,
                          num(cell.get("compile_s"), 2), ms, num(cell.get("gflops")), num(cell.get("pct_peak"), 2),
                          num(cell.get("vs_ort")), "" if "rel_err" not in cell else f"{cell['rel_err']:.1e}",
                          end_section=i == len(cells) - 1)
    console = Console(width=None if sys.stdout.isatty() else 120)  # pipes and logs get 80 columns otherwise
    console.print(table)
    console.print("build s: compile (ort: session); x ort: median / onnxruntime's median in the same alternating "
                  "loop; err: max |x - ort| / max |ort|; * TVM stopped after --tvm-budget s (runs in the JSON); "
                  "GFLOP counts a direct convolution: hetc's Winograd convs do fewer multiply-adds, so its "
                  "GFLOP/s and %peak are effective rates and may pass 100",
                  soft_wrap=True)
    for line in errors:
        console.print(line, soft_wrap=True, markup=False)
    print_corun(rows, args, console)


def print_corun(rows: list[dict], args, console: Console) -> None:
    """hetc and onnxruntime each alone, then alternating call by call in one process."""
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False,
                  title=f"Co-run ({args.isa}): alone vs alternating with the other in one process, "
                        f"onnxruntime spinning (its default); medians of {args.repeat}")
    for col in ("model", "hetc alone", "hetc co-run", "x", "ort alone", "ort co-run", "x"):
        table.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    for row in rows:
        h, o = (row["results"].get(k, {}).get("corun") for k in ("hetc", "ort"))
        if h and o and "error" not in h:
            table.add_row(row["model"], f"{h['alone_ms']:.3g}", f"{h['corun_ms']:.3g}", f"{h['corun_over_alone']:.2f}",
                          f"{o['alone_ms']:.3g}", f"{o['corun_ms']:.3g}", f"{o['corun_over_alone']:.2f}")
        elif h:
            table.add_row(row["model"], h.get("error", "")[:60], "", "", "", "", "")
    if table.rows:
        console.print(table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help=f"comma-separated (default {DEFAULT_MODELS})")
    parser.add_argument("--torch-models", type=Path, help="directory from examples/torch_models.py")
    parser.add_argument("--db", type=Path, help="tuning database (hetc tune): adds the 'hetc tuned' rows; "
                        "'{model}' in it is replaced by each model's name (one database per model)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--skip-tvm", action="store_true", help="leave out TVM's default build")
    parser.add_argument("--skip-corun", action="store_true",
                        help="leave out the co-run table (hetc alternating with a spinning onnxruntime)")
    parser.add_argument("--tvm-budget", type=float, default=20.0, help="seconds of TVM runs per model (>= 3 runs)")
    parser.add_argument("--work", type=Path, help="where to write the models (default: a temporary directory)")
    parser.add_argument("--json", type=Path, default=Path("cpu_latency.json"))
    parser.add_argument("--cpu", help="compile hetc's code for this LLVM CPU instead of this machine's "
                                      "(haswell: AVX2 code on an AVX-512 machine; onnxruntime still "
                                      "picks its kernels from this CPU)")
    args = parser.parse_args()
    if args.torch_models and not args.torch_models.is_dir():
        parser.error(f"--torch-models {args.torch_models}: not a directory")
    import models

    unknown = [n for n in args.models.split(",") if n not in models.ALL_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(models.ALL_MODELS)}")

    if args.cpu:
        from hetc.errors import UsageError
        from hetc.options import check_cpu

        try:
            check_cpu(args.cpu)
        except UsageError as err:
            parser.error(str(err))
    machine = machine_info(args.cpu)
    args.threads = machine["threads"]
    args.isa = f"{machine['llvm_mcpu']}, {machine['float32_lanes']} float32 lanes"
    if args.cpu:
        args.isa += f"; hetc's code for {args.cpu} ({machine['hetc_float32_lanes']} lanes)"
    print(f"{machine['cpu']}, {machine['physical_cores']} cores; measuring peak (4096^2 sgemm and int8 GEMM) ...", flush=True)
    peaks = {f"start:{k}": v for k, v in measure_peak(args.threads).items()}
    print(", ".join(f"{k} {v:.1f}" for k, v in peaks.items()) + " GFLOP/s", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, inputs_path, error in _sources(args, args.work or Path(tmp)):
            print(f"{name} ...", flush=True)
            try:
                flops, cells = bench_model(path, dict(np.load(inputs_path)), args) if not error else (None, {})
            except Exception as err:  # noqa: BLE001 -- unreadable inputs and the like
                flops, cells, error = None, {}, one_line(err)
            if error:
                cells = {"ort": {"error": error}}
            rows.append({"model": name, "flops": flops, "gflop": flops / 1e9 if flops else None, "results": cells})
    end = measure_peak(args.threads)  # again: a busy machine at start must not make the peak too low
    peaks.update({f"end:{k}": v for k, v in end.items()})
    args.peak = max((v for k, v in peaks.items() if INT8 not in k), default=float("nan"))
    args.peak_int8 = max((v for k, v in peaks.items() if INT8 in k), default=float("nan"))
    print(", ".join(f"end:{k} {v:.1f}" for k, v in end.items())
          + f" GFLOP/s; peak: {args.peak:.1f}, int8 {args.peak_int8:.1f} GOP/s", flush=True)
    for row in rows:
        peak = args.peak_int8 if row["model"].endswith("_int8") else args.peak
        for cell in (c for c in row["results"].values() if "gflops" in c):
            cell["pct_peak"] = 100 * cell["gflops"] / peak
    print_table(rows, args)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k not in ("peak", "peak_int8", "isa")}
    args.json.write_text(json.dumps({"machine": {**machine, "peak_gflops": args.peak, "peak_int8_gops": args.peak_int8,
                                                 "peak_measured_gflops": peaks},
                                     "settings": settings, "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
