"""Model zoo: real architectures from five sources -- transformers, torchvision, timm, torchaudio
and optimum's ONNX exporter -- with random weights from their libraries' constructors, exported
as their users export them, compiled by hetc for the CPU and compared with onnxruntime.

    python benchmarks/model_zoo.py [--only a,b] [--source transformers|torchvision|timm|torchaudio|optimum]
                                   [--exporters torchscript,dynamo,optimum] [--python SOURCE=PATH]
                                   [--repeat N] [--timeout S] [--json out.json] [--keep DIR]
    python benchmarks/model_zoo.py --list [--source S]
    python benchmarks/model_zoo.py --speed [--source S]     # quiet machine: the speed table
    python benchmarks/model_zoo.py --report model_zoo.json [--speed]   # a saved sweep's tables

Per (architecture, exporter), two child processes (a crash or hang of one model cannot stop the
sweep; ``--timeout`` each):

1. export, by the source's Python (``--python``): torch.onnx.export's TorchScript exporter at
   opset 17 with the batch (and sequence) dims symbolic, as ``dynamic_axes`` users write, and
   its dynamo exporter at the newest opset torch has, static shapes; optimum's ``main_export``
   (its own opset, dims symbolic) for the optimum entries. The example inputs are saved, and a
   second set at a larger batch where the batch is symbolic.
2. hetc.compile for the CPU (once), onnxruntime for the reference, max rel err = max |hetc - ort|
   / max |ort| over the outputs and both batch sizes, and the latency of both taken alternately
   at the first (medians of ``--repeat``; ``hetc.benchmark.compare_with_onnxruntime``).

Statuses: ``pass`` (within 1e-4, or, where onnxruntime's optimized and unoptimized runs already
differ by more -- detectors with random weights, whose near-tied scores and boxes rounded to
pixels amplify float differences -- within twice that spread, recorded as ``ort_spread``), ``mismatch``, ``hetc-failed`` (hetc's one-line error),
``crashed``, ``timeout`` count against hetc; ``export-failed``, ``ort-failed`` (the exporter or
onnxruntime fails on the exported graph), ``degenerate`` (hetc matches, but onnxruntime's outputs
are all zero: the zoo's weights let the activations vanish, and the row checks nothing) and
``skipped`` (the library does not import) are listed apart. Prints the tables and writes JSON
(with the machine: CPU model, LLVM CPU, SIMD flags).

``--speed`` times each row with 30 alternating runs (``--repeat``) and adds the speed table:
the passing rows sorted by hetc / onnxruntime latency, slowest first, the geometric mean and the
CPU -- the work list of issue 32. Run it on a quiet machine; ``--report`` prints it again.

Sources whose wheels need a different torch are exported by another Python (``--python
torchvision,timm,torchaudio=/path/bin/python``; default: this one). torchvision 0.29, timm and
torchaudio 2.11 need a CUDA torch (it runs on the CPU); optimum-onnx pins transformers < 4.58:

    python -m venv /work/zoovenv && /work/zoovenv/bin/pip install torch==2.14.1 torchvision==0.29.1 \
        torchaudio==2.11.0 timm transformers==5.24.0 onnx onnxscript onnxruntime
    python -m venv /work/optvenv && /work/optvenv/bin/pip install torch==2.13.0 optimum-onnx==0.1.0 \
        "transformers<4.58" onnx onnxruntime onnxscript

Architectures are entries of ``zoo.ZOO`` (benchmarks/zoo/<source>_zoo.py; to add one, decorate a
builder returning ``(torch module, {input name: example tensor})`` with ``@arch(name, source)``).
Models are small configurations (2 layers, narrow) of the real code, so the sweep fits a 2-core
machine; the graph structure -- what a compiler must handle -- is the library's own.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from zoo import SOURCES, ZOO, Arch, load_all
from zoo.transformers_zoo import SEQ  # noqa: F401 - the text models' length, for parallel_exported

load_all()

ROOT = Path(__file__).resolve().parents[1]
TORCHSCRIPT_OPSET = 17
IR_VERSION = 10  # onnxruntime refuses IR versions newer than it knows
TOLERANCE = 1e-4
APART = ("skipped", "export-failed", "ort-failed", "degenerate")  # not hetc's failures
PYTHON_ENV = "HETC_ZOO_PYTHON_"  # HETC_ZOO_PYTHON_TIMM=/path/bin/python, as --python timm=...


# ---------------------------------------------------------------------------------------------
# export

def newest_opset() -> int:
    from torch.onnx import _constants
    return int(_constants.ONNX_MAX_OPSET)


def batch_inputs(inputs: dict, dynamic: dict[str, dict[int, str]] | None) -> dict | None:
    """A second input set at twice the batch, or None when no batch dim is symbolic: each
    batched input followed by a copy rolled by one along its last axis (other rows, same
    value distribution; ids stay ids, masks stay masks)."""
    import numpy as np

    if dynamic == {}:
        return None
    batched = {n for n in inputs if dynamic is None or 0 in dynamic.get(n, {})}
    if not batched:
        return None
    return {n: np.concatenate([x, np.roll(x, 1, axis=-1)]) if n in batched else x for n, x in inputs.items()}


def export(entry: Arch, exporter: str, path: Path) -> dict:
    """Export ``entry`` to ``path``; writes its inputs to ``path``.npz (and .b2.npz at a second
    batch size where the batch is symbolic); returns {"opset", "ops", "op_types"}."""
    import numpy as np
    import onnx

    if entry.export is not None:
        out = entry.export(path, exporter)
        opset, inputs, inputs_b2 = out["opset"], out["inputs"], out.get("inputs_b2")
    else:
        import torch

        module, tensors = entry.build()
        names = list(tensors)
        args = tuple(tensors.values())
        with torch.no_grad():
            reference = module(*args)
        outputs = [f"output_{i}" for i in range(len(reference) if isinstance(reference, (tuple, list)) else 1)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if exporter == "torchscript":
                opset = TORCHSCRIPT_OPSET
                dynamic = entry.dynamic if entry.dynamic is not None else {n: {0: "batch"} for n in names}
                torch.onnx.export(module, args, str(path), dynamo=False, opset_version=opset, input_names=names,
                                  output_names=outputs, dynamic_axes={k: v for k, v in dynamic.items() if k in names})
            elif exporter == "dynamo":
                opset = newest_opset()
                program = torch.onnx.export(module, args, dynamo=True, opset_version=opset, input_names=names,
                                            output_names=outputs, verbose=False)
                program.save(str(path))
            else:
                raise ValueError(f"{entry.name}: unknown exporter {exporter}")
        inputs = {n: t.numpy() for n, t in tensors.items()}
        inputs_b2 = batch_inputs(inputs, entry.dynamic) if exporter == "torchscript" else None
    proto = onnx.load(str(path), load_external_data=False)
    if proto.ir_version > IR_VERSION:
        proto = onnx.load(str(path))
        proto.ir_version = IR_VERSION
        onnx.save(proto, str(path))
    taken = {i.name for i in proto.graph.input} - {t.name for t in proto.graph.initializer}
    np.savez(path.with_suffix(".npz"), **{n: x for n, x in inputs.items() if n in taken})  # unused: dropped
    if inputs_b2 is not None:
        np.savez(path.with_suffix(".b2.npz"), **{n: x for n, x in inputs_b2.items() if n in taken})
    return {"opset": opset, "ops": len(proto.graph.node), "op_types": len({n.op_type for n in proto.graph.node})}


# ---------------------------------------------------------------------------------------------
# compile and compare

def _one_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    text = lines[0] if lines else type(err).__name__
    return f"{type(err).__name__}: {text}"[:300]


def _rel_err(got, expected) -> float:
    import numpy as np

    got = list(got.values()) if isinstance(got, dict) else list(got)
    if len(got) != len(expected):
        raise AssertionError(f"{len(got)} outputs, onnxruntime {len(expected)}")
    err = 0.0
    for a, e in zip(got, expected):
        a, e = np.asarray(a), np.asarray(e)
        if a.shape != e.shape:
            raise AssertionError(f"output shape {a.shape}, onnxruntime {e.shape}")
        if not e.size:
            continue
        if e.dtype == bool or a.dtype == bool:
            err = max(err, float(np.mean(a != e)))
            continue
        scale = max(float(np.max(np.abs(e))), 1e-30)
        err = max(err, float(np.max(np.abs(a.astype(np.float64) - e))) / scale)
    return err


def _vanishing(outputs) -> bool:
    """Every float output all zeros: a model whose activations vanish (weights initialized too
    small for its depth), which any compiler matches."""
    import numpy as np

    floats = [a for a in map(np.asarray, outputs) if a.dtype.kind == "f" and a.size]
    return bool(floats) and not any(np.any(a) for a in floats)


def measure(model: Path, repeat: int) -> dict:
    """In this process: onnxruntime reference, hetc.compile (once), the error at each saved batch
    size and the alternating latency at the first."""
    import numpy as np

    import hetc
    from hetc.benchmark import compare_with_onnxruntime, ort_session

    sets = [dict(np.load(model.with_suffix(".npz")))]
    b2 = model.with_suffix(".b2.npz")
    if b2.exists():
        sets.append(dict(np.load(b2)))
    session = ort_session(model)
    try:
        expected = [session.run(None, sets[0])]
    except Exception as err:  # noqa: BLE001 - the reference cannot run the export: not hetc's failure
        return {"status": "ort-failed", "reason": f"onnxruntime failed to run it: {_one_line(err)}"}
    row: dict = {}
    if len(sets) > 1:
        try:
            expected.append(session.run(None, sets[1]))
        except Exception as err:  # noqa: BLE001 - the exporter fixed the batch: onnxruntime cannot run it either
            row["note"] = f"batch 2: onnxruntime failed ({_one_line(err)[:120]})"
            sets = sets[:1]
    start = time.perf_counter()
    compiled = hetc.compile(model, "cpu")
    row["compile_s"] = time.perf_counter() - start
    row["max_rel_err"] = max(_rel_err(compiled.run(x), e) for x, e in zip(sets, expected))
    if row["max_rel_err"] <= TOLERANCE and all(_vanishing(e) for e in expected):
        row.update(status="degenerate", reason="onnxruntime's outputs are all zero: the match checks nothing")
    if row["max_rel_err"] > TOLERANCE:  # is onnxruntime itself that close to itself?
        unoptimized = ort_session(model, optimize=False)
        row["ort_spread"] = max(_rel_err(unoptimized.run(None, x), e) for x, e in zip(sets, expected))
    row["batches"] = [int(next(iter(x.values())).shape[0]) if x else 0 for x in sets]
    timing = compare_with_onnxruntime(model, compiled, sets[0], repeat=repeat, session=session)
    row.update(hetc_ms=timing["results"]["hetc"]["median_ms"], ort_ms=timing["results"]["onnxruntime"]["median_ms"],
               x_ort=timing["hetc_over_ort"])
    return row


# ---------------------------------------------------------------------------------------------
# child processes

def _export_child(args) -> int:
    try:
        row = export(ZOO[args.export_child], args.exporter, Path(args.model))
    except Exception as err:  # noqa: BLE001 - any exporter failure is recorded as the row's reason
        row = {"status": "export-failed", "reason": _one_line(err)}
    print(json.dumps(row), flush=True)
    return 0


def _measure_child(args) -> int:
    path = Path(args.measure_child)
    try:
        import onnxruntime as ort

        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001
        print(json.dumps({"status": "ort-failed", "reason": _one_line(err)}), flush=True)
        return 0
    try:
        row = measure(path, args.repeat)
        if "status" not in row:
            row["status"] = "pass" if row["max_rel_err"] <= max(TOLERANCE, 2 * row.get("ort_spread", 0)) else "mismatch"
    except Exception as err:  # noqa: BLE001
        row = {"status": "hetc-failed", "reason": _one_line(err)}
    print(json.dumps(row), flush=True)
    return 0


def _child(cmd: list[str], timeout: float, env: dict) -> tuple[dict | None, str]:
    """Run a child; (its JSON row, "") or (None, why it gave none)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, env=env)
    except subprocess.TimeoutExpired:
        return None, f"timeout: no result in {timeout:.0f} s"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if lines:
        return json.loads(lines[-1]), ""
    tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or [""]
    return None, f"exit {proc.returncode}: {tail[0]}"[:300]


def run_one(name: str, exporter: str, workdir: Path, repeat: int, timeout: float,
            python: str | None = None) -> dict:
    """One (architecture, exporter): export by ``python``, then compile and compare in a child
    of this Python; a crash or timeout of either becomes the row."""
    entry = ZOO[name]
    model = workdir / f"{name}-{exporter}.onnx"
    row = {"arch": name, "source": entry.source, "exporter": exporter}
    start = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out, why = _child([python or sys.executable, __file__, "--export-child", name, "--exporter", exporter,
                       "--model", str(model)], timeout, env)
    if out is None:  # the exporter crashed or hung: its failure, not hetc's
        return {**row, "status": "export-failed", "reason": why}
    row.update(out)
    if row.get("status") == "export-failed":
        return row
    out, why = _child([sys.executable, __file__, "--measure-child", str(model), "--repeat", str(repeat)], timeout,
                      {**env, "PYTHONPATH": str(ROOT)})
    if out is None:
        return {**row, "status": "timeout" if why.startswith("timeout") else "crashed", "reason": why}
    return {**row, **out, "wall_s": time.perf_counter() - start}


def pythons(specs: list[str]) -> dict[str, str]:
    """Source -> the Python that exports it, from HETC_ZOO_PYTHON_<SOURCE> and ``--python
    SOURCE[,SOURCE]=PATH``; this Python otherwise."""
    out = {s: os.environ.get(PYTHON_ENV + s.upper(), sys.executable) for s in SOURCES}
    for spec in specs:
        sources, _, path = spec.partition("=")
        for source in sources.split(","):
            if source not in SOURCES or not path:
                raise SystemExit(f"--python {spec}: expected SOURCE[,SOURCE]=PATH with SOURCE in {SOURCES}")
            out[source] = path
    return out


IMPORTS = {"transformers": "from transformers import OPTModel",  # a model: some pull in torchvision
           "torchvision": "import torchvision", "timm": "import timm", "torchaudio": "import torchaudio.models",
           "optimum": "import optimum.exporters.onnx"}


def available(source: str, python: str) -> str:
    """Why ``python`` cannot export ``source`` ("" when it can)."""
    code = f"import torch, onnx; {IMPORTS[source]}"
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return _one_line(err)
    if proc.returncode == 0:
        return ""
    tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or [f"exit {proc.returncode}"]
    return tail[0][:300]


# ---------------------------------------------------------------------------------------------
# the sweep

def select(only: str = "", source: str = "") -> list[str]:
    names = [n for n in only.split(",") if n] or list(ZOO)
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        raise SystemExit(f"unknown architecture(s) {', '.join(unknown)}; see --list")
    sources = [s for s in source.split(",") if s]
    bad = [s for s in sources if s not in SOURCES]
    if bad:
        raise SystemExit(f"unknown source(s) {', '.join(bad)}; one of {', '.join(SOURCES)}")
    return [n for n in names if not sources or ZOO[n].source in sources]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", "--archs", dest="only", default="",
                        help="comma-separated names (default: all); --list shows them")
    parser.add_argument("--source", default="", help=f"comma-separated sources: {', '.join(SOURCES)}")
    parser.add_argument("--exporters", default="torchscript,dynamo,optimum",
                        help="those of each entry's exporters to run")
    parser.add_argument("--python", action="append", default=[], metavar="SOURCE=PATH",
                        help="the Python that exports SOURCE (comma-separated sources); repeatable")
    parser.add_argument("--repeat", type=int, default=None,
                        help="timed runs per row, alternating with onnxruntime (default 10, 30 with --speed)")
    parser.add_argument("--speed", action="store_true",
                        help="time for a speed table: more runs, then the passing rows sorted by their "
                             "ratio to onnxruntime, the geomean and the CPU (run it on a quiet machine)")
    parser.add_argument("--report", default="", metavar="JSON",
                        help="print the tables (and --speed's) of a saved sweep; runs nothing")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for each export and each compile+run")
    parser.add_argument("--json", default="model_zoo.json")
    parser.add_argument("--keep", default="", help="keep the exported models in this directory")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--export-child", help=argparse.SUPPRESS)
    parser.add_argument("--measure-child", help=argparse.SUPPRESS)
    parser.add_argument("--exporter", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.repeat = args.repeat or (30 if args.speed else 10)
    if args.export_child:
        return _export_child(args)
    if args.measure_child:
        return _measure_child(args)
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        _print_tables(saved["rows"])
        if args.speed:
            _print_speed(saved.get("speed") or speed(saved["rows"]))
        return 0
    names = select(args.only, args.source)
    if args.list:
        for name in names:
            print(f"{name:36s} {ZOO[name].source:13s} {','.join(ZOO[name].exporters)}")
        print(json.dumps(counts(names)))
        return 0
    exporters = [e for e in args.exporters.split(",") if e]
    python = pythons(args.python)
    why = {s: available(s, python[s]) for s in {ZOO[n].source for n in names}}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.keep or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for name in names:
            entry = ZOO[name]
            for exporter in [e for e in entry.exporters if e in exporters]:
                if why[entry.source]:
                    row = {"arch": name, "source": entry.source, "exporter": exporter, "status": "skipped",
                           "reason": f"{entry.source}: {why[entry.source]}"}
                else:
                    row = run_one(name, exporter, workdir, args.repeat, args.timeout, python[entry.source])
                rows.append(row)
                _print_row(row)
                saved = {"rows": rows, "summary": summary(rows), "machine": machine()}
                if args.speed:
                    saved["speed"] = speed(rows)
                Path(args.json).write_text(json.dumps(saved, indent=1))
    _print_tables(rows)
    if args.speed:
        _print_speed(speed(rows))
    return 0


@functools.cache
def machine() -> dict:
    """The CPU the sweep ran on (model, LLVM CPU, SIMD features) and the core count."""
    from hetc.benchmark import cpu_features

    info = cpu_features()
    return {"cpu_model": info["cpu_model"], "llvm_mcpu": info["llvm_mcpu"], "simd": info["cpuinfo_simd"],
            "cores": os.cpu_count()}


def speed(rows: list[dict], cpu: dict | None = None) -> dict:
    """The passing rows' hetc / onnxruntime latency ratios, slowest first, their geometric mean
    and the CPU: the slow families are the top of this list."""
    timed = sorted((r for r in rows if r["status"] == "pass" and r.get("x_ort")), key=lambda r: -r["x_ort"])
    ratios = [r["x_ort"] for r in timed]
    return {"machine": cpu or machine(), "rows": len(timed),
            "geomean_x_ort": round(float(math.exp(sum(map(math.log, ratios)) / len(ratios))), 3) if ratios else None,
            "slower_than_ort": sum(x > 1 for x in ratios),
            "table": [{k: r.get(k) for k in ("arch", "source", "exporter", "hetc_ms", "ort_ms", "x_ort")}
                      for r in timed]}


def _print_speed(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    cpu = result["machine"]
    table = Table(title=f"hetc / onnxruntime latency, slowest first -- {cpu.get('cpu_model')} "
                        f"(LLVM {cpu.get('llvm_mcpu')}; {', '.join(cpu.get('simd', []))}; {cpu.get('cores')} cores)")
    for h in ("architecture", "source", "exporter", "hetc ms", "onnxruntime ms", "x ORT"):
        table.add_column(h)
    for r in result["table"]:
        table.add_row(r["arch"], r["source"], r["exporter"], f"{r['hetc_ms']:.3f}", f"{r['ort_ms']:.3f}",
                      f"{r['x_ort']:.2f}")
    Console(width=160).print(table)
    print(f"geomean x ORT over {result['rows']} rows: {result['geomean_x_ort']}; "
          f"slower than onnxruntime: {result['slower_than_ort']}")


def counts(names: list[str]) -> dict[str, int]:
    return {s: sum(ZOO[n].source == s for n in names) for s in SOURCES if any(ZOO[n].source == s for n in names)}


def summary(rows: list[dict]) -> dict:
    """Counts over rows and architectures, overall and per source. ``tried``: rows the exporter
    and onnxruntime handled (what hetc is judged on); an architecture passes when every tried
    export of it passes."""
    def one(rs: list[dict]) -> dict:
        tried = [r for r in rs if r["status"] not in APART]
        archs = {r["arch"] for r in tried}
        passing = {a for a in archs if all(r["status"] == "pass" for r in tried if r["arch"] == a)}
        passed = sum(r["status"] == "pass" for r in tried)
        return {"rows": len(rs), "tried": len(tried), "passed": passed,
                "pass_rate": round(passed / len(tried), 4) if tried else None,
                "exporter_failed": sum(r["status"] in APART for r in rs),
                "architectures": len({r["arch"] for r in rs}), "architectures_tried": len(archs),
                "architectures_passing": len(passing), "crashed": sum(r["status"] == "crashed" for r in rs),
                "timeout": sum(r["status"] == "timeout" for r in rs)}
    out = one(rows)
    out["sources"] = {s: one([r for r in rows if r["source"] == s])
                      for s in SOURCES if any(r["source"] == s for r in rows)}
    return out


def _fmt(row: dict) -> list[str]:
    def num(key, spec):
        return format(row[key], spec) if key in row else ""
    reason = row.get("reason", row.get("note", ""))
    return [row["arch"], row["source"], row["exporter"], str(row.get("opset", "")), str(row.get("ops", "")),
            ",".join(map(str, row.get("batches", []))), num("compile_s", ".1f"), num("max_rel_err", ".1e"),
            num("x_ort", ".2f"), row["status"], reason]


HEADER = ["architecture", "source", "exporter", "opset", "ops", "batches", "compile s", "max rel err", "x ORT",
          "status", "reason"]


def _print_row(row: dict) -> None:
    print(" | ".join(_fmt(row)), flush=True)


def _print_tables(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=220)
    for title, part in [("hetc model zoo (CPU) vs onnxruntime", [r for r in rows if r["status"] not in APART]),
                        ("exporter, library or the zoo's weights failed (not counted against hetc)",
                         [r for r in rows if r["status"] in APART])]:
        if not part:
            continue
        table = Table(title=title)
        for h in HEADER:
            table.add_column(h, overflow="fold")
        for row in part:
            table.add_row(*(escape(cell) for cell in _fmt(row)))
        console.print(table)
    print(json.dumps(summary(rows)))


if __name__ == "__main__":
    sys.exit(main())
