"""Step time of a BERT encoder run as one process, as 2 rank processes (TP=2; PP=2 with and
without micro-batches) and as 4 (TP=2 x PP=2 with micro-batches) on this machine.

    python benchmarks/parallel_exec.py [--layers 4] [--hidden 256] [--heads 4] [--seq 64]
                                       [--batch 8] [--micro-batches 4] [--repeat 20] [--json out.json]

Every configuration runs on the same cores: the single process with one thread per core, each
rank on its share of them (cores / ranks), pinned there. The ranks talk through torch.distributed's gloo on this
host, so the numbers measure hetc's split and runtime overheads, not a multi-device speed-up.
Medians of --repeat steps; rel err is max |x - ort| / max |ort|. A process runs one set of
rank processes at a time, so the configurations are timed in blocks, 4 rounds of them in
turn (each block after a warm-up step that restarts its ranks), so a drift of the machine's
speed hits them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import models

import hetc
from hetc.parallel.runtime import close_all


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("layers", 4), ("hidden", 256), ("heads", 4), ("seq", 64), ("batch", 8),
                          ("micro-batches", 4), ("repeat", 20)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    import onnxruntime as ort

    model = models.bert(args.layers, args.hidden, args.heads, 4 * args.hidden, seq=args.seq, batch=args.batch)
    inputs = models.sample_inputs(model)
    reference = ort.InferenceSession(model.SerializeToString()).run(None, inputs)
    configs = {"1 process": {}, "TP=2": {"tp": 2}, "PP=2": {"pp": 2},
               f"PP=2, {args.micro_batches} micro-batches": {"pp": 2, "micro_batches": args.micro_batches},
               f"TP=2 x PP=2, {args.micro_batches} micro-batches": {"tp": 2, "pp": 2,
                                                                   "micro_batches": args.micro_batches}}
    compiled, rows = {}, {}
    for name, kwargs in configs.items():
        start = time.perf_counter()
        compiled[name] = hetc.compile(model, "cpu", **kwargs)
        out = compiled[name].run(inputs)  # also starts the rank processes
        err = max(float(np.abs(o - r).max() / np.abs(r).max()) for o, r in zip(out.values(), reference))
        rows[name] = {"compile_s": time.perf_counter() - start, "rel_err": err, "times": []}
    rounds = 4
    for r in range(rounds):
        for name, kwargs in configs.items():
            if not kwargs:
                close_all()  # rank 0 of a session runs in this process, on its share of the cores
            compiled[name].run(inputs)  # warm-up: (re)starts this configuration's ranks
            for _ in range(args.repeat // rounds + (r < args.repeat % rounds)):
                start = time.perf_counter()
                compiled[name].run(inputs)
                rows[name]["times"].append(time.perf_counter() - start)
    base = statistics.median(rows["1 process"]["times"])
    table = Table(title=f"BERT {args.layers}x{args.hidden}, seq {args.seq}, batch {args.batch}, "
                        f"{os.cpu_count()} cores (medians of {args.repeat})")
    for col in ("configuration", "step ms", "vs 1 process", "compile s", "rel err"):
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for name, row in rows.items():
        row["median_ms"] = 1e3 * statistics.median(row["times"])
        table.add_row(name, f"{row['median_ms']:.2f}", f"{row['median_ms'] / 1e3 / base:.2f}x",
                      f"{row['compile_s']:.1f}", f"{row['rel_err']:.1e}")
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": rows},
                                        indent=2))


if __name__ == "__main__":
    main()
