"""Placement solvers on random DAGs: exactness, heuristic quality, and scale.

    python benchmarks/placement_solvers.py [--quick] [--exact N] [--sizes 20,50,100,200]
                                           [--graphs 10] [--time-limit S] [--budget S]
                                           [--large 10000] [--json out.json]

1. Exactness: brute force vs the MILP on N random problems of <= 12 nodes and 3 devices (with
   unsupported entries, pins, memory limits, model I/O), per objective: how many optimal
   values agree to 1e-9 relative (infeasible problems count when both solvers say so).
2. Quality: on --graphs random 3-device DAGs per size (``random_problem``), the heuristic
   (greedy + local search, --budget seconds) and the MILP (HiGHS, --time-limit seconds, its
   big-Ms bounded by the greedy only) are run independently. ``h/milp`` is the heuristic's
   value over the MILP's best (below 1: the heuristic beat a MILP that ran out of time);
   ``h/bound`` is over the MILP's proven lower bound (an upper bound on the heuristic's true
   ratio to the optimum); ``h/opt`` restricts h/milp to the graphs where the MILP proved
   optimality.
3. Scale: ``solve(..., solver="auto")`` on a --large-node random DAG with 4 devices (the
   heuristic), wall-clock time, and the evaluator's time on it.

HiGHS prints a debug line (``HighsMipSolverData::transformNewIntegerFeasibleSolution``) on
stdout for some models; this script silences file descriptor 1 while a solver runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import scipy
from rich import box
from rich.console import Console
from rich.table import Table

from hetc.placement.heuristic import heuristic
from hetc.placement.milp import latency_lower_bound, milp, model_size, period_lower_bound
from hetc.placement.problem import InfeasiblePlacement, Problem, evaluate, random_problem
from hetc.placement.solve import brute_force, solve

OBJECTIVES = ("latency", "throughput")


@contextlib.contextmanager
def quiet_stdout():
    """Silence fd 1 (HiGHS's C++ prints) while solving; Python's own stdout is flushed first."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def small_problem(seed: int) -> Problem:
    """The exactness problems: <= 12 nodes, 3 devices, every kind of constraint."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 13))
    return random_problem(n, 3, seed=seed, unsupported=0.2, pin=0.1,
                          memory_slack=float(rng.choice([0.4, 0.7, 1.5])), comm=float(rng.choice([0.3, 1.0, 3.0])))


def exactness(count: int, time_limit: float) -> list[dict]:
    rows = []
    for objective in OBJECTIVES:
        match = infeasible = 0
        bf_s = milp_s = 0.0
        worst = 0.0
        for seed in range(count):
            p = small_problem(1000 + seed)
            try:
                with quiet_stdout():
                    ref = brute_force(p, objective, with_breakdown=False)
            except InfeasiblePlacement:
                try:
                    with quiet_stdout():
                        milp(p, objective, time_limit=time_limit, with_breakdown=False)
                except InfeasiblePlacement:
                    match += 1
                    infeasible += 1
                continue
            bf_s += ref.seconds
            with quiet_stdout():
                got = milp(p, objective, time_limit=time_limit, with_breakdown=False)
            milp_s += got.seconds
            rel = abs(got.objective - ref.objective) / ref.objective
            worst = max(worst, rel, abs(got.model_value - got.objective) / got.objective)
            match += int(rel <= 1e-9 and got.optimal)
        rows.append({"objective": objective, "problems": count, "matches": match, "infeasible": infeasible,
                     "worst_rel_diff": worst, "brute_force_s": bf_s, "milp_s": milp_s})
    return rows


def _stats(values: list[float]) -> dict:
    if not values:
        return {"mean": None, "median": None, "p90": None, "max": None}
    arr = np.array(values)
    return {"mean": float(arr.mean()), "median": float(np.median(arr)), "p90": float(np.percentile(arr, 90)),
            "max": float(arr.max())}


def quality(sizes: list[int], graphs: int, time_limit: float, budget: float, console: Console) -> list[dict]:
    rows = []
    for objective in OBJECTIVES:
        for n in sizes:
            runs = []
            for g in range(graphs):
                p = random_problem(n, 3, seed=10_000 * n + g, memory_slack=1.5)
                with quiet_stdout():
                    h = heuristic(p, objective, time_budget=budget, seed=0, with_breakdown=False)
                    m = milp(p, objective, time_limit=time_limit, with_breakdown=False)
                runs.append({"seed": 10_000 * n + g, "heuristic": h.objective, "heuristic_s": h.seconds,
                             "milp": m.objective, "milp_s": m.seconds, "optimal": m.optimal, "gap": m.gap,
                             "bound": m.bound, "milp_status": m.status})
            h_milp = [r["heuristic"] / r["milp"] for r in runs]
            h_bound = [r["heuristic"] / r["bound"] for r in runs if r["bound"]]
            h_opt = [r["heuristic"] / r["milp"] for r in runs if r["optimal"]]
            row = {"objective": objective, "n": n, "graphs": graphs, "proven": sum(r["optimal"] for r in runs),
                   "h_vs_milp": _stats(h_milp), "h_vs_bound": _stats(h_bound), "h_vs_opt": _stats(h_opt),
                   "heuristic_s": statistics.mean(r["heuristic_s"] for r in runs),
                   "milp_s": statistics.mean(r["milp_s"] for r in runs), "runs": runs}
            rows.append(row)
            console.print(f"  {objective} n={n}: {row['proven']}/{graphs} proven, mean h/milp "
                          f"{row['h_vs_milp']['mean']:.4f}", highlight=False)
    return rows


def large(n: int, budget: float) -> list[dict]:
    rows = []
    t0 = time.perf_counter()
    p = random_problem(n, 4, seed=3)
    gen_s = time.perf_counter() - t0
    for objective in OBJECTIVES:
        t0 = time.perf_counter()
        r = solve(p, objective, solver="auto", heuristic_budget=budget)
        wall = time.perf_counter() - t0
        t0 = time.perf_counter()
        evaluate(p, r.assignment, objective)
        eval_ms = (time.perf_counter() - t0) * 1e3
        lower = latency_lower_bound(p) if objective == "latency" else period_lower_bound(p)
        rows.append({"objective": objective, "n": n, "edges": p.m, "devices": p.d, "generate_s": gen_s,
                     "solve_wall_s": wall, "objective_value": r.objective, "lower_bound": lower,
                     "eval_ms": eval_ms, "status": r.status})
    return rows


def sizes_table(n: int = 200) -> list[dict]:
    p = random_problem(n, 3, seed=0)
    out = []
    for objective, formulation in (("latency", "sequence"), ("latency", "pairwise"), ("throughput", "sequence")):
        out.append({"objective": objective, "formulation": formulation if objective == "latency" else "-",
                    "n": n, "edges": p.m, **model_size(p, objective, formulation)})
    return out


def fmt(x, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def print_tables(console: Console, result: dict) -> None:
    t = Table(box=box.SIMPLE_HEAD, title="1. brute force vs MILP (<= 12 nodes, 3 devices)")
    for col in ("objective", "problems", "matches", "infeasible", "worst rel diff", "brute force s", "MILP s"):
        t.add_column(col, justify="right" if col != "objective" else "left")
    for r in result["exactness"]:
        t.add_row(r["objective"], str(r["problems"]), str(r["matches"]), str(r["infeasible"]),
                  f"{r['worst_rel_diff']:.1e}", f"{r['brute_force_s']:.2f}", f"{r['milp_s']:.2f}")
    console.print(t)

    s = result["settings"]
    t = Table(box=box.SIMPLE_HEAD, title=f"2. heuristic ({s['budget']:g} s) vs MILP ({s['time_limit']:g} s), "
                                         f"{s['graphs']} random DAGs per size, 3 devices")
    for col in ("objective", "n", "proven", "h/milp mean", "median", "p90", "max", "h/bound mean", "max",
                "h/opt mean", "max", "heur s", "MILP s"):
        t.add_column(col, justify="right" if col != "objective" else "left")
    for r in result["quality"]:
        a, b, o = r["h_vs_milp"], r["h_vs_bound"], r["h_vs_opt"]
        t.add_row(r["objective"], str(r["n"]), f"{r['proven']}/{r['graphs']}", fmt(a["mean"]), fmt(a["median"]),
                  fmt(a["p90"]), fmt(a["max"]), fmt(b["mean"]), fmt(b["max"]), fmt(o["mean"]), fmt(o["max"]),
                  f"{r['heuristic_s']:.2f}", f"{r['milp_s']:.2f}")
    console.print(t)

    t = Table(box=box.SIMPLE_HEAD, title="3. solve(auto) on a large random DAG, 4 devices")
    for col in ("objective", "nodes", "edges", "wall s", "objective s", "lower bound s", "evaluate ms"):
        t.add_column(col, justify="right" if col != "objective" else "left")
    for r in result["large"]:
        t.add_row(r["objective"], str(r["n"]), str(r["edges"]), f"{r['solve_wall_s']:.2f}",
                  f"{r['objective_value']:.5g}", f"{r['lower_bound']:.5g}", f"{r['eval_ms']:.1f}")
    console.print(t)

    t = Table(box=box.SIMPLE_HEAD, title="MILP size, random DAG, 3 devices")
    for col in ("objective", "formulation", "n", "edges", "variables", "binary", "continuous", "rows", "nonzeros"):
        t.add_column(col, justify="right" if col not in ("objective", "formulation") else "left")
    for r in result["model_sizes"]:
        t.add_row(r["objective"], r["formulation"], *(str(r[k]) for k in ("n", "edges", "variables", "binary",
                                                                          "continuous", "rows", "nonzeros")))
    console.print(t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run: 10 exactness problems, sizes 20,50, "
                                                             "3 graphs, 5 s MILPs, 1 s heuristic")
    parser.add_argument("--exact", type=int, default=None, help="exactness problems per objective (default 40)")
    parser.add_argument("--sizes", default=None, help="graph sizes for the quality runs (default 20,50,100,200)")
    parser.add_argument("--graphs", type=int, default=None, help="graphs per size (default 10)")
    parser.add_argument("--time-limit", type=float, default=None, help="MILP seconds per graph (default 10)")
    parser.add_argument("--budget", type=float, default=None, help="heuristic seconds per graph (default 2)")
    parser.add_argument("--large", type=int, default=10_000, help="nodes of the scale run (default 10000)")
    parser.add_argument("--json", type=Path, default=Path("placement_solvers.json"))
    args = parser.parse_args()
    quick = args.quick
    settings = {"exact": args.exact or (10 if quick else 40), "sizes": args.sizes or ("20,50" if quick else "20,50,100,200"),
                "graphs": args.graphs or (3 if quick else 10), "time_limit": args.time_limit or (5.0 if quick else 10.0),
                "budget": args.budget or (1.0 if quick else 2.0), "large": args.large}
    console = Console(width=None if sys.stdout.isatty() else 140)
    t0 = time.perf_counter()
    console.print("1. brute force vs MILP ...")
    exact = exactness(settings["exact"], settings["time_limit"] * 3)
    console.print("2. heuristic vs MILP ...")
    qual = quality([int(x) for x in settings["sizes"].split(",")], settings["graphs"], settings["time_limit"],
                   settings["budget"], console)
    console.print("3. large graph ...")
    big = large(settings["large"], settings["budget"])
    result = {"machine": {"platform": platform.platform(), "python": platform.python_version(),
                          "cpus": os.cpu_count(), "numpy": np.__version__, "scipy": scipy.__version__},
              "settings": settings, "exactness": exact, "quality": qual, "large": big,
              "model_sizes": sizes_table(), "total_s": time.perf_counter() - t0}
    print_tables(console, result)
    args.json.write_text(json.dumps(result, indent=1))
    console.print(f"total {result['total_s']:.0f} s; wrote {args.json}")


if __name__ == "__main__":
    main()
