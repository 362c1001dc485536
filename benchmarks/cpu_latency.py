"""CPU latency of hetc vs onnxruntime over the example models (and torch models if given).

    python benchmarks/cpu_latency.py [--torch-models DIR] [--repeat N] [--json out.json]

Compiles each model for the CPU target, then times hetc and onnxruntime alternately in this
process (medians; compare only numbers from the same run). Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import hetc  # noqa: E402
from hetc.benchmark import compare_with_onnxruntime  # noqa: E402


def _models(torch_dir: Path | None, work: Path) -> list[tuple[str, Path, Path]]:
    import models

    found = [(name, *models.write(name, work)) for name in models.MODELS]
    if torch_dir:
        found += [(p.stem, p, p.with_name(f"{p.stem}_inputs.npz")) for p in sorted(torch_dir.glob("*.onnx"))]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-models", type=Path, help="directory from examples/torch_models.py")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--json", type=Path, default=Path("cpu_latency.json"))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, inputs_path in _models(args.torch_models, Path(tmp)):
            compiled = hetc.compile(model, target="cpu")
            inputs = dict(np.load(inputs_path))
            measured = compare_with_onnxruntime(model, compiled, inputs, repeat=args.repeat)
            rows.append({"model": name, "gflop": compiled.report["graph"]["flops"] / 1e9,
                         "compile_s": sum(compiled.report["seconds"].values()), **measured})
    table = Table(title=f"CPU latency, median of {args.repeat} ({platform.processor() or platform.machine()})")
    for col in ("model", "GFLOP", "compile s", "hetc ms", "onnxruntime ms", "hetc/ort"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in rows:
        res = r["results"]
        table.add_row(r["model"], f"{r['gflop']:.3f}", f"{r['compile_s']:.1f}", f"{res['hetc']['median_ms']:.2f}",
                      f"{res['onnxruntime']['median_ms']:.2f}", f"{r['hetc_over_ort']:.1f}x")
    Console().print(table)
    args.json.write_text(json.dumps({"hetc_version": hetc.__version__, "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
