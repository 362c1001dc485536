"""How closely hetc's int8 models follow onnxruntime's: top-1 agreement over random inputs.

    python benchmarks/int8_agreement.py [--models resnet50_int8,mobilenet_v2_int8] [--samples 64]

For each quantized example model (``examples/models.py``: onnxruntime's static QDQ
quantization), N seeded random images go through hetc and through onnxruntime (its int8
kernels, and its literal run with graph optimizations off: DequantizeLinear, float conv,
QuantizeLinear as written). Printed and written to JSON: top-1 agreement for each pair, and
the median and largest output difference relative to the largest output. With random weights
a quantized network turns one rounding step at any layer into a visible output change, so
agreement is the figure users see, not the error. ``identical`` counts the inputs whose whole
output is bit for bit onnxruntime's: where both run exact integer kernels (hetc's, and
onnxruntime's on a VNNI CPU), every one. ``--cpu haswell`` compiles hetc's AVX2 kernels
(``vpmaddwd``, no VNNI) on any x86-64 machine; the CPU is printed and written to the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hetc
from examples import models as examples


def _session(model, optimized: bool) -> ort.InferenceSession:
    options = ort.SessionOptions()
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _reference(model):
    """The ONNX reference evaluator on ``model`` (at opset 21 if it is older: the evaluator
    implements Q/DQ from opset 19 on)."""
    from onnx import version_converter
    from onnx.reference import ReferenceEvaluator

    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return ReferenceEvaluator(model if opset >= 21 else version_converter.convert_version(model, 21))


def measure(name: str, samples: int, seed: int, cpu: str | None = None, reference: int = 0) -> dict:
    model = examples.ALL_MODELS[name]()
    (spec,) = model.graph.input
    shape = [d.dim_value for d in spec.type.tensor_type.shape.dim]
    compiled = hetc.compile(model, "cpu", cpu=cpu)
    fast, literal = _session(model, True), _session(model, False)
    rng = np.random.default_rng(seed)
    tops = {"hetc/ort": 0, "hetc/ort literal": 0, "ort/ort literal": 0}
    if reference:
        evaluator = _reference(model)
        tops |= {"hetc/reference": 0, "ort/reference": 0}
    ref_errors = {"hetc": [], "ort": []}
    identical = 0
    errors = []
    for _ in range(samples):
        x = {spec.name: rng.standard_normal(shape).astype(np.float32)}
        (h,) = (np.asarray(v) for v in compiled.run(x).values())
        o, lit = fast.run(None, x)[0], literal.run(None, x)[0]
        tops["hetc/ort"] += int(np.argmax(h) == np.argmax(o))
        tops["hetc/ort literal"] += int(np.argmax(h) == np.argmax(lit))
        tops["ort/ort literal"] += int(np.argmax(o) == np.argmax(lit))
        errors.append(float(np.abs(h - o).max() / np.abs(o).max()))
        identical += int(np.array_equal(h, o))
        if len(ref_errors["hetc"]) < reference:
            ref = evaluator.run(None, x)[0]
            tops["hetc/reference"] += int(np.argmax(h) == np.argmax(ref))
            tops["ort/reference"] += int(np.argmax(o) == np.argmax(ref))
            for who, out in (("hetc", h), ("ort", o)):
                ref_errors[who].append(float(np.abs(out - ref).max() / np.abs(ref).max()))
    extra = {"reference_samples": len(ref_errors["hetc"]),
             **{f"{who}_reference_err_max": max(e) for who, e in ref_errors.items() if e},
             **{f"{who}_reference_err_median": float(np.median(e)) for who, e in ref_errors.items() if e}}
    return {"model": name, "samples": samples, "top1_agree": tops, "identical": identical, **extra,
            "rel_err_median": float(np.median(errors)), "rel_err_max": float(np.max(errors)),
            "kernels": sorted(set(compiled.report["kernels"].values()))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50_int8,mobilenet_v2_int8")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", type=Path, default=Path("int8_agreement.json"))
    parser.add_argument("--cpu", help="compile hetc's code for this LLVM CPU (haswell: AVX2 without VNNI)")
    parser.add_argument("--reference", type=int, default=0,
                        help="also run the first N inputs through the ONNX reference evaluator (slow)")
    args = parser.parse_args()
    rows = [measure(name, args.samples, args.seed, args.cpu, args.reference) for name in args.models.split(",")]
    from hetc.backends.cpu.codegen import llvm_target
    from hetc.options import CompileOptions

    target = llvm_target(CompileOptions(cpu=args.cpu))
    cpu = {"hetc_mcpu": str(target.attrs["mcpu"]), "host_mcpu": str(llvm_target(CompileOptions()).attrs["mcpu"])}
    table = Table(title=f"int8 top-1 agreement over {args.samples} random inputs (seed {args.seed}); hetc's "
                        f"code for {cpu['hetc_mcpu']}, onnxruntime on {cpu['host_mcpu']}")
    columns = ["model", "hetc/ort", "hetc/ort literal", "ort/ort literal", "identical", "rel err median",
               "rel err max"]
    if args.reference:
        columns += ["hetc/reference", "ort/reference", "hetc vs ref max", "ort vs ref max"]
    for col in columns:
        table.add_column(col)
    for r in rows:
        t = r["top1_agree"]
        cells = [r["model"], str(t["hetc/ort"]), str(t["hetc/ort literal"]), str(t["ort/ort literal"]),
                 str(r["identical"]), f"{r['rel_err_median']:.2%}", f"{r['rel_err_max']:.2%}"]
        if args.reference:
            n = r["reference_samples"]
            cells += [f"{t['hetc/reference']}/{n}", f"{t['ort/reference']}/{n}",
                      f"{r['hetc_reference_err_max']:.2%}", f"{r['ort_reference_err_max']:.2%}"]
        table.add_row(*cells)
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    args.json.write_text(json.dumps({"cpu": cpu, "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
