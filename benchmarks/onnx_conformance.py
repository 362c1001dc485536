"""Run the ONNX backend node tests (from the installed onnx package) through hetc.

    python benchmarks/onnx_conformance.py [--runner hetc|onnxruntime|both] [--jobs N]
        [--timeout S] [--filter REGEX] [--csv out.csv] [--json out.json]

Each test runs in a worker process (one per core, reused across tests; a test that hangs or
crashes its worker is recorded as timeout/crash and the worker is replaced). Writes a CSV
(test, op, outcome, error, seconds, frozen_outcome, frozen_inputs) per runner and prints
per-category and per-op tables. hetc has two columns: ``hetc`` compiles every graph input as a
run-time input (the headline, and what the regression gate keeps); ``hetc+frozen`` retries a
test that fails to compile with its shape-deciding inputs frozen to their values
(``constant_inputs``), as exported models store them (``--no-frozen`` skips the retry).
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
        writer.writerow(["test", "op", "outcome", "error", "seconds", "frozen_outcome", "frozen_inputs"])
        for r in results:
            writer.writerow([r.test, r.op, r.outcome, r.error, r.seconds, r.frozen_outcome, r.frozen])


FROZEN = "hetc+frozen"


def columns(by_runner: dict[str, list[Result]]) -> dict[str, list[str]]:
    """Outcomes per table column: one per runner, and ``hetc+frozen`` after ``hetc`` when the
    frozen retry ran (a test's frozen outcome, else its outcome: timeouts and crashes)."""
    cols = {}
    for runner, results in by_runner.items():
        cols[runner] = [r.outcome for r in results]
        if runner == "hetc" and any(r.frozen_outcome for r in results):
            cols[FROZEN] = [r.frozen_outcome or r.outcome for r in results]
    return cols


def print_tables(console: Console, by_runner: dict[str, list[Result]]) -> None:
    cols = columns(by_runner)
    names = list(cols)
    cats = Table(title="outcomes per category", title_justify="left")
    cats.add_column("category")
    for name in names:
        cats.add_column(name, justify="right")
    counts = {name: Counter(outcomes) for name, outcomes in cols.items()}
    for cat in CATEGORIES:
        if any(counts[n][cat] for n in names):
            cats.add_row(cat, *[str(counts[n][cat]) for n in names])
    cats.add_row("total", *[str(len(cols[n])) for n in names])
    console.print(cats)

    ops = Table(title="per op (ops with failures; pass/total)", title_justify="left")
    ops.add_column("op")
    for name in names:
        ops.add_column(name, justify="right")
    ops.add_column("main failure (" + names[0] + ")")
    per_op: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for name, outcomes in cols.items():
        for r, outcome in zip(by_runner["hetc" if name == FROZEN else name], outcomes):
            per_op[r.op][name].append(outcome)
    for op in sorted(per_op, key=lambda o: -sum(x != PASS for x in per_op[o][names[0]])):
        fails = Counter(x for x in per_op[op][names[0]] if x != PASS)
        if not fails and all(x == PASS for n in names for x in per_op[op][n]):
            continue
        ops.add_row(op, *[f"{per_op[op][n].count(PASS)}/{len(per_op[op][n])}" for n in names],
                    fails.most_common(1)[0][0] if fails else "")
    console.print(ops)


def write_baseline(results: list[Result], path: Path) -> None:
    """The gate tests/test_conformance.py reads: every test that passes without frozen inputs,
    and one per op as the fast sample the default test run checks (``passes_frozen``, the count
    with the frozen retry, is recorded for information)."""
    import onnx

    passing = sorted(r.test for r in results if r.outcome == PASS)
    sample: dict[str, str] = {}
    for r in sorted(results, key=lambda r: (r.seconds, r.test)):  # the quickest passing test per op
        if r.outcome == PASS:
            sample.setdefault(r.op, r.test)
    frozen = sum((r.frozen_outcome or r.outcome) == PASS for r in results)
    path.write_text(json.dumps({"onnx": onnx.__version__, "total": len(results), "passes": len(passing),
                                "passes_frozen": frozen, "sample": sorted(sample.values()),
                                "passing": passing}, indent=1) + "\n")


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
    parser.add_argument("--no-frozen", action="store_true",
                        help="do not retry failing hetc tests with their shape-deciding inputs frozen")
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

        by_runner[runner] = run_suite(tests, runner, args.jobs, args.timeout, progress,
                                      retry_frozen=not args.no_frozen)
        path = args.csv if len(runners) == 1 else args.csv.with_stem(f"{args.csv.stem}-{runner}")
        write_csv(by_runner[runner], path)
        passed = sum(r.outcome == PASS for r in by_runner[runner])
        frozen = sum(r.frozen_outcome == PASS for r in by_runner[runner])
        also = ""
        if runner == "hetc" and not args.no_frozen:
            also = f" ({frozen} when retried with shape-deciding inputs frozen)"
        seconds = time.perf_counter() - start
        console.print(f"{runner}: {passed} of {len(tests)} pass{also} ({seconds:.0f} s) -> {path}")
    print_tables(console, by_runner)
    if args.write_baseline and "hetc" in by_runner:
        write_baseline(by_runner["hetc"], args.write_baseline)
        console.print(f"baseline written to {args.write_baseline}")
    if args.json:
        args.json.write_text(json.dumps(
            {name: dict(Counter(outcomes)) for name, outcomes in columns(by_runner).items()}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
