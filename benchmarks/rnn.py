"""CPU latency of hetc's LSTM/GRU (ops/rnn.py, rnn_kernel.py) vs onnxruntime.

    python benchmarks/rnn.py [--seq 128] [--batch 1] [--hidden 256] [--layers 2] [--repeat 20]
                             [--models lstm,gru] [--json out.json]

Exports torch ``nn.LSTM`` / ``nn.GRU`` (input = hidden size, ``--layers`` layers, bidirectional)
with torch.onnx.export (opset 17, seq and batch dynamic), compiles it with hetc twice: with
symbolic seq/batch (one artifact for every length) and bound to the benchmark's shape
(``input_shapes``), checks both against onnxruntime (rel err = max |x - ort| / max |ort|), then
times hetc and onnxruntime alternately in one loop (``hetc.benchmark.in_turns``; medians).
onnxruntime: CPU EP, one thread per physical core, workers not spinning (see
``hetc.benchmark.ort_session``). The machine's speed drifts: compare only numbers of one run.
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
from rich.console import Console
from rich.table import Table

import hetc
from hetc.benchmark import calls_per_run, cpu_features, in_turns, ort_session
from hetc.options import default_threads


def export(kind: str, hidden: int, layers: int, path: Path) -> Path:
    import torch

    torch.manual_seed(0)
    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    module = cls(hidden, hidden, num_layers=layers, bidirectional=True).eval()

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = module

        def forward(self, x):
            return self.rnn(x)[0]

    torch.onnx.export(Wrap().eval(), (torch.zeros(4, 1, hidden),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "seq", 1: "batch"}, "y": {0: "seq", 1: "batch"}})
    return path


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(got.astype(np.float64) - ref)) / max(float(np.max(np.abs(ref))), 1e-30))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--models", default="lstm,gru")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    features = cpu_features()
    threads = default_threads()
    title = (f"{features['cpu_model'] or 'CPU'} ({features['llvm_mcpu']}, "
             f"{features['float32_lanes']} float32 lanes), "
             f"{threads} threads; seq {args.seq}, batch {args.batch}, input = hidden {args.hidden}, "
             f"{args.layers} layers, bidirectional")
    table = Table(title=title)
    for col in ("model", "build", "hetc ms", "onnxruntime ms", "hetc / ort", "rel err", "compile s"):
        table.add_column(col, justify="left" if col in ("model", "build") else "right")
    rows = []
    x = np.random.default_rng(0).standard_normal((args.seq, args.batch, args.hidden)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.models.split(","):
            path = export(kind, args.hidden, args.layers, Path(tmp) / f"{kind}.onnx")
            session = ort_session(path)
            ref = session.run(None, {"x": x})[0]
            for build, shapes in (("symbolic", None), ("static", {"x": list(x.shape)})):
                start = time.perf_counter()
                compiled = hetc.compile(path, input_shapes=shapes)
                compile_s = time.perf_counter() - start
                got = compiled.run({"x": x})["y"]
                runners = {"hetc": lambda c=compiled: c.run({"x": x}),
                           "ort": lambda: session.run(None, {"x": x})}
                times = in_turns(runners, args.repeat, warmup=2, calls=calls_per_run(runners))
                h, o = statistics.median(times["hetc"]), statistics.median(times["ort"])
                row = {"model": kind, "build": build, "hetc_ms": h, "onnxruntime_ms": o,
                       "hetc_over_ort": h / o,
                       "rel_err": rel_err(got, ref), "compile_s": compile_s}
                rows.append(row)
                table.add_row(kind, build, f"{h:.2f}", f"{o:.2f}", f"{h / o:.2f}", f"{row['rel_err']:.1e}",
                              f"{compile_s:.1f}")
                print(f"{kind} {build}: hetc {h:.2f} ms, onnxruntime {o:.2f} ms", file=sys.stderr)
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps({"machine": {**features, "threads": threads}, "config": vars(args) | {
            "json": str(args.json)}, "results": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
