"""Run the ONNX backend node tests (from the installed onnx package) through hetc.

    python benchmarks/onnx_conformance.py [--runner hetc|onnxruntime|both] [--jobs N]
        [--timeout S] [--filter REGEX] [--csv out.csv] [--json out.json]

Each test runs in a worker process (one per core, reused across tests; a test that hangs or
crashes its worker is recorded as timeout/crash and the worker is replaced). Writes a CSV
(test, op, outcome, error, seconds) per runner and prints per-category and per-op tables.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from hetc import conformance
from hetc.conformance import CATEGORIES, PASS, Result, run_suite


def write_csv(results: list[Result], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["test", "op", "outcome", "error", "seconds", "frozen_inputs"])
        for r in results:
            writer.writerow([r.test, r.op, r.outcome, r.error, r.seconds, r.frozen])


def print_tables(console: Console, by_runner: dict[str, list[Result]]) -> None:
    runners = list(by_runner)
    cats = Table(title="outcomes per category", title_justify="left")
    cats.add_column("category")
    for runner in runners:
        cats.add_column(runner, justify="right")
    counts = {r: Counter(x.outcome for x in res) for r, res in by_runner.items()}
    for cat in CATEGORIES:
        if any(counts[r][cat] for r in runners):
            cats.add_row(cat, *[str(counts[r][cat]) for r in runners])
    cats.add_row("total", *[str(len(by_runner[r])) for r in runners])
    console.print(cats)

    ops = Table(title="per op (ops with failures; pass/total)", title_justify="left")
    ops.add_column("op")
    for runner in runners:
        ops.add_column(runner, justify="right")
    ops.add_column("main failure (" + runners[0] + ")")
    per_op: dict[str, dict[str, list[Result]]] = defaultdict(lambda: defaultdict(list))
    for runner, res in by_runner.items():
        for r in res:
            per_op[r.op][runner].append(r)
    for op in sorted(per_op, key=lambda o: -sum(x.outcome != PASS for x in per_op[o][runners[0]])):
        first = per_op[op][runners[0]]
        fails = Counter(x.outcome for x in first if x.outcome != PASS)
        if not fails and all(x.outcome == PASS for r in runners for x in per_op[op][r]):
            continue
        ops.add_row(op, *[f"{sum(x.outcome == PASS for x in per_op[op][r])}/{len(per_op[op][r])}"
                          for r in runners], fails.most_common(1)[0][0] if fails else "")
    console.print(ops)


def write_baseline(results: list[Result], path: Path) -> None:
    """The gate tests/test_conformance.py reads: every passing test, and one per op as the
    fast sample the default test run checks."""
    import onnx

    passing = sorted(r.test for r in results if r.outcome == PASS)
    sample: dict[str, str] = {}
    for r in sorted(results, key=lambda r: (r.seconds, r.test)):  # the quickest passing test per op
        if r.outcome == PASS and not r.frozen:
            sample.setdefault(r.op, r.test)
    path.write_text(json.dumps({"onnx": onnx.__version__, "total": len(results), "passes": len(passing),
                                "sample": sorted(sample.values()), "passing": passing}, indent=1) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runner", choices=["hetc", "onnxruntime", "tvm", "both", "all"], default="hetc",
                        help="both: hetc and onnxruntime; all: also TVM's own from_onnx + tvm.compile")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per test")
    parser.add_argument("--filter", help="only tests whose name matches this regex")
    parser.add_argument("--tests-dir", type=Path, help="generated node tests (default: cache)")
    parser.add_argument("--csv", type=Path, default=Path("conformance.csv"),
                        help="CSV path; with --runner both, '-<runner>' is added to the stem")
    parser.add_argument("--json", type=Path, help="also write counts per category as JSON")
    parser.add_argument("--write-baseline", type=Path, metavar="JSON",
                        help="record hetc's passing tests and a per-op sample as the regression gate")
    args = parser.parse_args()

    console = Console(highlight=False)
    root = conformance.generate(args.tests_dir)
    tests = conformance.list_tests(root)
    if args.filter:
        tests = [t for t in tests if re.search(args.filter, t.name)]
    runners = {"both": ["hetc", "onnxruntime"], "all": ["hetc", "onnxruntime", "tvm"]}.get(args.runner, [args.runner])
    by_runner = {}
    for runner in runners:
        start = time.perf_counter()

        def progress(result: Result, done: int, total: int, runner=runner, start=start) -> None:
            if done % 100 == 0 or done == total:
                console.print(f"[{runner}] {done}/{total} ({time.perf_counter() - start:.0f} s)")

        by_runner[runner] = run_suite(tests, runner, args.jobs, args.timeout, progress)
        path = args.csv if len(runners) == 1 else args.csv.with_stem(f"{args.csv.stem}-{runner}")
        write_csv(by_runner[runner], path)
        passed = [r for r in by_runner[runner] if r.outcome == PASS]
        console.print(f"{runner}: {len(passed)} of {len(tests)} pass, {sum(bool(r.frozen) for r in passed)} "
                      f"of them with shape inputs frozen ({time.perf_counter() - start:.0f} s) -> {path}")
    print_tables(console, by_runner)
    if args.write_baseline and "hetc" in by_runner:
        write_baseline(by_runner["hetc"], args.write_baseline)
        console.print(f"baseline written to {args.write_baseline}")
    if args.json:
        args.json.write_text(json.dumps(
            {r: dict(Counter(x.outcome for x in res)) for r, res in by_runner.items()}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
