"""One artifact with symbolic dims against static builds and onnxruntime (CPU).

    python benchmarks/dynamic_shapes.py [--parts bert,resnet] [--bert-config bert-base]
                                        [--shapes 1x16,1x128,4x64,2x384] [--batches 1,3,8]
                                        [--repeat N] [--no-static] [--static-resnet] [--quick]
                                        [--json out.json]

(a) BERT (``examples/hf_models.py``: a transformers BertModel, random weights, exported by
torch with symbolic ``batch`` and ``seq``): one hetc artifact compiled with
``dims={"batch": (1, 8), "seq": (1, 512)}`` runs every shape in ``--shapes``; each output must
be within 1e-4 x max|ref| of onnxruntime. Per shape, the dynamic artifact, a static hetc build
for that shape (``input_shapes=``) and onnxruntime take turns in blocks, each alone on the
cores (``hetc.benchmark.in_blocks``; onnxruntime with its default spinning workers); medians of
``--repeat`` runs after warm-up; only ratios from the same loop compare: the machine's speed
drifts. (b) ResNet-50 (``examples/torch_models.py``, symbolic batch): one artifact runs
``--batches`` against onnxruntime, and images/s at the largest batch next to onnxruntime's.

``--quick``: bert-tiny, shapes 1x16 and 2x37, batches 1 and 3 of ResNet-50, 3 repeats (a smoke
run). The JSON records the CPU model, the SIMD features detected (``/proc/cpuinfo`` and LLVM's
view of the target) and every cell; a failure is recorded in its cell and the run goes on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import hetc  # noqa: E402
from hetc.benchmark import cpu_features, in_blocks, ort_session  # noqa: E402
from hetc.options import CompileOptions  # noqa: E402

TOLERANCE = 1e-4  # max |hetc - ort| / max |ort| per output
BERT_DIMS = {"batch": (1, 8), "seq": (1, 512)}
RESNET_DIMS = {"batch": (1, 8)}


def rel_err(got, want) -> float:
    want = np.asarray(want)
    return float(np.abs(np.asarray(got) - want).max() / max(np.abs(want).max(), 1e-30))


def alternate(runners: dict, repeat: int) -> dict[str, float]:
    """Medians (ms) of ``repeat`` runs of each runner, taking turns run by run, each run after a
    pause and one untimed call (``in_blocks``: each runtime alone on the cores, onnxruntime
    with its default spinning workers)."""
    return {name: statistics.median(t) for name, t in in_blocks(runners, repeat, warmup=1, block=1).items()}


def _outputs(result) -> list:
    return list(result.values()) if isinstance(result, dict) else list(result)


def _compile(model, **kwargs):
    start = time.perf_counter()
    compiled = hetc.compile(str(model), "cpu", **kwargs)
    return compiled, time.perf_counter() - start


def _fail(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err).strip().splitlines()[-1] if str(err).strip() else ''}"[:300]


def bench_bert(work: Path, config: str, shapes: list[tuple[int, int]], repeat: int, static: bool,
               console: Console) -> dict:
    from hf_models import bert_inputs, export_bert

    path = export_bert(work / f"{config}.onnx", config)
    session = ort_session(path, spinning=True)
    dynamic, seconds = _compile(path, dims=BERT_DIMS)
    generic = sorted(k for k, rule in dynamic.report["kernels"].items() if rule in ("generic", "none")
                     and ("matmul" in k or "conv" in k))
    result = {"model": config, "dims": BERT_DIMS, "compile_s": round(seconds, 1),
              "kernel_rules": dict(sorted(_count(dynamic.report["kernels"]).items())),
              "contractions_left_to_generic": generic, "shapes": []}
    for batch, seq in shapes:
        cell: dict = {"batch": batch, "seq": seq}
        result["shapes"].append(cell)
        inputs = bert_inputs(batch, seq)
        try:
            want = session.run(None, inputs)
            got = _outputs(dynamic.run(inputs))
            cell["rel_err"] = max(rel_err(g, w) for g, w in zip(got, want))
            cell["ok"] = cell["rel_err"] <= TOLERANCE
            runners = {"dynamic": lambda: dynamic.run(inputs)}
            if static:
                try:
                    fixed, cell["static_compile_s"] = _compile(
                        path, input_shapes={"input_ids": [batch, seq], "attention_mask": [batch, seq]})
                    cell["static_rel_err"] = max(rel_err(g, w) for g, w in zip(_outputs(fixed.run(inputs)), want))
                    runners["static"] = lambda: fixed.run(inputs)
                except Exception as err:  # noqa: BLE001 - the dynamic and ort columns still run
                    cell["static_error"] = _fail(err)
            runners["onnxruntime"] = lambda: session.run(None, inputs)
            cell["ms"] = alternate(runners, repeat)
            ms = cell["ms"]
            cell["dynamic_over_ort"] = ms["dynamic"] / ms["onnxruntime"]
            if "static" in ms:
                cell["dynamic_over_static"] = ms["dynamic"] / ms["static"]
        except Exception as err:  # noqa: BLE001 - recorded in the cell, the run goes on
            cell["error"] = _fail(err)
        console.print(f"  bert {batch}x{seq}: {cell.get('ms', cell.get('error'))}")
    return result


def bench_resnet(work: Path, batches: list[int], repeat: int, static: bool, console: Console) -> dict:
    from torch_models import export

    path, _ = export("resnet50", work, dynamic_batch=True)
    session = ort_session(path, spinning=True)
    dynamic, seconds = _compile(path, dims=RESNET_DIMS)
    generic = sorted(k for k, rule in dynamic.report["kernels"].items() if rule in ("generic", "none")
                     and ("matmul" in k or "conv" in k))
    result = {"model": "resnet50", "dims": RESNET_DIMS, "compile_s": round(seconds, 1),
              "kernel_rules": dict(sorted(_count(dynamic.report["kernels"]).items())),
              "contractions_left_to_generic": generic, "batches": []}
    rng = np.random.default_rng(0)
    for batch in batches:
        cell: dict = {"batch": batch}
        result["batches"].append(cell)
        inputs = {"input": rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}
        try:
            want = session.run(None, inputs)
            cell["rel_err"] = max(rel_err(g, w) for g, w in zip(_outputs(dynamic.run(inputs)), want))
            cell["ok"] = cell["rel_err"] <= TOLERANCE
            runners = {"dynamic": lambda: dynamic.run(inputs)}
            if static:
                try:
                    fixed, cell["static_compile_s"] = _compile(path, input_shapes={"input": [batch, 3, 224, 224]})
                    cell["static_rel_err"] = max(rel_err(g, w) for g, w in zip(_outputs(fixed.run(inputs)), want))
                    runners["static"] = lambda: fixed.run(inputs)
                except Exception as err:  # noqa: BLE001
                    cell["static_error"] = _fail(err)
            runners["onnxruntime"] = lambda: session.run(None, inputs)
            ms = alternate(runners, repeat)
            cell["ms"] = ms
            cell["images_per_s"] = {k: batch * 1e3 / v for k, v in ms.items()}
            cell["dynamic_over_ort"] = ms["dynamic"] / ms["onnxruntime"]
            if "static" in ms:
                cell["dynamic_over_static"] = ms["dynamic"] / ms["static"]
        except Exception as err:  # noqa: BLE001
            cell["error"] = _fail(err)
        console.print(f"  resnet50 batch {batch}: {cell.get('ms', cell.get('error'))}")
    return result


def _count(kernels: dict) -> dict:
    counts: dict = {}
    for rule in kernels.values():
        counts[rule] = counts.get(rule, 0) + 1
    return counts


def _fmt(v, digits=2) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def print_tables(report: dict, console: Console) -> None:
    bert = report.get("bert")
    if bert:
        table = Table(title=f"{bert['model']}, one artifact with dims {bert['dims']} "
                            "(ms, medians, runtimes in turns by blocks)",
                      box=box.SIMPLE_HEAVY)
        for col in ("batch x seq", "hetc dynamic", "hetc static", "onnxruntime", "dyn / static", "dyn / ort",
                    "rel err", "ok"):
            table.add_column(col, justify="right")
        for c in bert["shapes"]:
            ms = c.get("ms", {})
            table.add_row(f"{c['batch']}x{c['seq']}", _fmt(ms.get("dynamic")), _fmt(ms.get("static")),
                          _fmt(ms.get("onnxruntime")), _fmt(c.get("dynamic_over_static")),
                          _fmt(c.get("dynamic_over_ort")), f"{c['rel_err']:.1e}" if "rel_err" in c else
                          c.get("error", ""), str(c.get("ok", "")))
            if "static_error" in c:
                console.print(f"static build {c['batch']}x{c['seq']}: {c['static_error']}")
        console.print(table)
        console.print(f"kernel rules: {bert['kernel_rules']}; contractions left to generic: "
                      f"{bert['contractions_left_to_generic'] or 'none'}")
    resnet = report.get("resnet")
    if resnet:
        table = Table(title=f"ResNet-50, one artifact with dims {resnet['dims']}", box=box.SIMPLE_HEAVY)
        for col in ("batch", "hetc ms", "static ms", "onnxruntime ms", "hetc img/s", "ort img/s", "hetc / ort",
                    "rel err", "ok"):
            table.add_column(col, justify="right")
        for c in resnet["batches"]:
            ms, ips = c.get("ms", {}), c.get("images_per_s", {})
            table.add_row(str(c["batch"]), _fmt(ms.get("dynamic")), _fmt(ms.get("static")), _fmt(ms.get("onnxruntime")),
                          _fmt(ips.get("dynamic"), 1), _fmt(ips.get("onnxruntime"), 1),
                          _fmt(c.get("dynamic_over_ort")),
                          f"{c['rel_err']:.1e}" if "rel_err" in c else c.get("error", ""), str(c.get("ok", "")))
        console.print(table)
        console.print(f"kernel rules: {resnet['kernel_rules']}; contractions left to generic: "
                      f"{resnet['contractions_left_to_generic'] or 'none'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="bert,resnet", help="comma-separated: bert, resnet")
    parser.add_argument("--bert-config", default="bert-base")
    parser.add_argument("--shapes", default="1x16,1x128,4x64,2x384", help="BERT batch x seq list")
    parser.add_argument("--batches", default="1,3,8", help="ResNet-50 batch sizes")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--no-static", action="store_true", help="skip the static BERT builds")
    parser.add_argument("--static-resnet", action="store_true", help="also a static ResNet-50 build per batch")
    parser.add_argument("--quick", action="store_true", help="bert-tiny, two small shapes, batches 1,3, 3 repeats")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.bert_config, args.shapes, args.batches, args.repeat = "bert-tiny", "1x16,2x37", "1,3", 3
    parts = set(args.parts.split(","))
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    console = Console()
    report = {"machine": cpu_features(), "threads": CompileOptions().threads, "repeat": args.repeat, "tolerance": TOLERANCE}
    try:
        from cpu_latency import machine_info

        report["machine"].update(machine_info())
    except Exception as err:  # noqa: BLE001
        report["machine"]["info_error"] = _fail(err)
    console.print(f"CPU: {report['machine']['cpu_model']}, SIMD {report['machine']['cpuinfo_simd']}, "
                  f"float32 lanes {report['machine']['float32_lanes']}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "bert" in parts:
            report["bert"] = bench_bert(work, args.bert_config, shapes, args.repeat, not args.no_static, console)
        if "resnet" in parts:
            report["resnet"] = bench_resnet(work, [int(b) for b in args.batches.split(",")], args.repeat,
                                            args.static_resnet, console)
    print_tables(report, console)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    cells = report.get("bert", {}).get("shapes", []) + report.get("resnet", {}).get("batches", [])
    return 0 if all(c.get("ok") for c in cells) else 1


if __name__ == "__main__":
    sys.exit(main())
