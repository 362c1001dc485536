"""Autoregressive decoding (GPT-2 with a KV cache): hetc vs onnxruntime, tokens and ms per token.

    python benchmarks/decode.py [--config gpt2-124m|gpt2-tiny] [--prompt 16] [--new 32]
                                [--past 32,480] [--repeat 20] [--profile] [--json decode.json]

Exports a random-weight GPT2LMHeadModel (examples/hf_models.py ``export_gpt2``: past key/values
in, presents out, one model for prompt and decode), compiles it once with symbolic ``batch``,
``seq``, ``past_seq`` and ``total_seq``, then:

1. greedy-decodes ``--new`` tokens after a ``--prompt``-token prompt with ``hetc.generate`` on
   the compiled model and on an onnxruntime session: the tokens must be identical. Also on a
   second build, ``hetc seq=1``: ``batch`` and ``seq`` declared 1:1 (static, so the weight
   matmuls get the CPU's contraction schedules), ``past_seq`` symbolic, the prompt fed one
   token per step: also one artifact for the whole generation;
2. per past length in ``--past``: the cache of a prompt of that length (computed once), then
   one decoding step (1 token) timed ``--repeat`` times, runtimes taking turns in blocks of 5
   steps, each block alone on the cores (``hetc.benchmark.in_blocks``; onnxruntime with its
   default spinning workers), medians: hetc with the cache left in TVM tensors between steps (``resident``, what
   ``hetc.generate`` does), the ``seq=1`` build (resident), hetc through ``model.run`` (the whole cache copied numpy -> TVM and
   back every step: ``copy``), and onnxruntime (numpy in and out). ``copy - resident`` is the
   per-step cost of that copy, shown with the cache size;
3. with ``--static``: also a build with every dim bound to that step's shape (batch 1, seq 1,
   that past length): how much the symbolic dims cost against code specialised for one shape;
4. with ``--profile``: each hetc build's kernels at the largest past length (a VM instrument), the top
   ones by time, and the share of the cache concatenation (``concat``) that the ONNX
   past/present layout makes every step copy the whole past.

The machine's speed drifts: compare only numbers from one run.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import hetc
from hetc.benchmark import in_blocks, ort_session
from hetc.generate import CompiledRunner, OrtRunner
from hetc.options import default_threads


def _ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def time_steps(runners: dict, ids: np.ndarray, mask: np.ndarray, caches: dict, repeat: int, warmup: int = 2) -> dict:
    """Median/min ms of one decoding step per runner, the runners taking turns block by block
    (``in_blocks``: each alone on the cores, onnxruntime with its default spinning)."""
    steps = {key: (lambda run=run, key=key: run.step(ids, mask, caches[key])) for key, run in runners.items()}
    times = in_blocks(steps, repeat, warmup)
    return {k: {"median_ms": statistics.median(v), "min_ms": min(v), "runs": len(v)} for k, v in times.items()}


def copy_ms(cache: list, repeat: int) -> float:
    """Median ms to copy a cache numpy -> TVM tensors -> numpy: what ``model.run`` adds per step
    over keeping the cache in TVM tensors (measured alone: step times are noisier than it)."""
    import tvm

    times = [_ms(lambda: [tvm.runtime.tensor(c, tvm.cpu()).numpy() for c in cache]) for _ in range(repeat + 2)]
    return statistics.median(times[2:])


def profile_kernels(model, feeds: list, top: int = 12, runs: int = 3) -> dict:
    """Per-call time of one step (mean of ``runs`` after two warm-up calls), from a VM
    instrument timing every Call instruction (TVM 0.27's VM has no profiler):
    {"kernels": [(name, ms, count)], "total_ms", "concat_ms"}."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(model._runners[0].module, tvm.cpu())
    rows: dict[str, list[float]] = {}
    started: list[float] = []

    def instrument(func, name, before, ret, *args):
        if before:
            started.append(time.perf_counter())
        else:
            row = rows.setdefault(str(name), [0.0, 0])
            row[0] += (time.perf_counter() - started.pop()) * 1e3
            row[1] += 1
        return 0

    args = [tvm.runtime.tensor(a, tvm.cpu()) for a in feeds]
    for _ in range(2):  # warm-up: the first calls fault in the pooled allocator's pages
        vm["main"](*args)
    vm.set_instrument(tvm.runtime.convert(instrument) if hasattr(tvm.runtime, "convert") else instrument)
    for _ in range(runs):
        vm["main"](*args)
    rows = {k: [ms / runs, count // runs] for k, (ms, count) in rows.items()}
    rows = {k: v for k, v in rows.items() if not k.startswith("vm.builtin")} or rows
    total = sum(v[0] for v in rows.values())
    ranked = sorted(rows.items(), key=lambda kv: -kv[1][0])
    return {"total_ms": total, "kernels": [(n, ms, c) for n, (ms, c) in ranked[:top]],
            "concat_ms": sum(ms for n, (ms, _) in rows.items() if "concat" in n)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="gpt2-124m", help="examples/hf_models.py GPT2_CONFIGS name")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--past", default="32,480", help="past lengths to time a decoding step at")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--profile", action="store_true", help="hetc's kernels at the largest past length")
    parser.add_argument("--static", action="store_true", help="also time a build specialised for each step shape")
    parser.add_argument("--work", type=Path, help="where to write the model (default: a temporary directory)")
    parser.add_argument("--json", type=Path, default=Path("decode.json"))
    args = parser.parse_args()
    import hf_models

    pasts = [int(p) for p in args.past.split(",")]
    threads = default_threads()
    console = Console(width=None if sys.stdout.isatty() else 120)
    result: dict = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                    "threads": threads}
    with tempfile.TemporaryDirectory() as tmp:
        path = (args.work or Path(tmp)) / f"{args.config}.onnx"
        console.print(f"exporting {args.config} ...")
        hf_models.export_gpt2(path, args.config)
        positions = hf_models.GPT2_CONFIGS[args.config].get("n_positions", 1024)
        dims = {"batch": (1, 8), "seq": (1, positions), "past_seq": (0, positions), "total_seq": (1, positions)}
        builds: dict = {}  # name -> compiled model
        for name, build_dims in (("hetc", dims), ("hetc seq=1", {**dims, "batch": (1, 1), "seq": (1, 1)})):
            start = time.perf_counter()
            builds[name] = hetc.compile(path, dims=build_dims)
            result.setdefault("compile_s", {})[name] = time.perf_counter() - start
            result.setdefault("compile_stages_s", {})[name] = builds[name].report["seconds"]
        session = ort_session(path, threads, spinning=True)
        console.print("compiled in " + ", ".join(f"{k} {v:.1f} s" for k, v in result["compile_s"].items())
                      + "; generating ...")

        vocab = hf_models.GPT2_CONFIGS[args.config].get("vocab_size", 50257)
        prompt = np.random.default_rng(0).integers(0, vocab, (1, args.prompt))
        loops = {**builds, "ort": session}
        for warm in loops.values():  # first calls: VM creation, thread pools
            hetc.generate(warm, prompt, 2)
        steps: dict[str, list] = {k: [] for k in loops}
        tokens = {}
        for k, m in loops.items():
            # idle first: onnxruntime's workers spin on after its last call, and a prompt step
            # run beside them took 2.5x as long (50 vs 20 ms at 16 tokens)
            time.sleep(0.5)
            tokens[k] = hetc.generate(m, prompt, args.new, step_seconds=steps[k])
        same = all(np.array_equal(t, tokens["ort"]) for t in tokens.values())
        result["generate"] = {"tokens_identical": {k: bool(np.array_equal(t, tokens["ort"])) for k, t in tokens.items()
                                                   if k != "ort"},
                              "prompt": args.prompt, "new": args.new,
                              "tokens": {k: t[0, args.prompt:].tolist() for k, t in tokens.items()},
                              "prefill_ms": {k: v[0] * 1e3 for k, v in steps.items()},
                              "decode_ms_median": {k: statistics.median(v[1:]) * 1e3 for k, v in steps.items()}}

        model = builds["hetc"]
        runners = {"hetc resident": CompiledRunner(model, resident=True),
                   "hetc copy": CompiledRunner(model, resident=False),
                   "hetc seq=1": CompiledRunner(builds["hetc seq=1"]), "ort": OrtRunner(session)}
        import tvm

        rows = []
        for past in pasts:
            console.print(f"past {past} ...")
            ids = np.random.default_rng(past).integers(0, vocab, (1, past))
            _, cache = runners["ort"].step(ids, np.ones((1, past), np.int64), runners["ort"].start(1))
            resident = [tvm.runtime.tensor(c, tvm.cpu()) for c in cache]
            caches = {"hetc resident": resident, "hetc copy": cache, "hetc seq=1": resident, "ort": cache}
            step_ids, mask = np.array([[1]], np.int64), np.ones((1, past + 1), np.int64)
            timed = dict(runners)
            if args.static:
                shapes = {"input_ids": (1, 1), "attention_mask": (1, past + 1),
                          **{n: cache[i].shape for i, n in enumerate(runners["ort"].past)}}
                start = time.perf_counter()
                timed["hetc static"] = CompiledRunner(hetc.compile(path, input_shapes=shapes))
                result.setdefault("static_compile_s", {})[past] = time.perf_counter() - start
                caches["hetc static"] = resident
            measured = time_steps(timed, step_ids, mask, caches, args.repeat)
            cache_mb = sum(c.nbytes for c in cache) / 2**20
            rows.append({"past": past, "cache_mb": cache_mb, "results": measured,
                         "copy_cost_ms": measured["hetc copy"]["median_ms"] - measured["hetc resident"]["median_ms"],
                         "copy_ms": copy_ms(cache, args.repeat)})
        result["decode_step"] = rows

        if args.profile:
            past = max(pasts)
            ids = np.random.default_rng(past).integers(0, vocab, (1, past))
            _, cache = runners["ort"].step(ids, np.ones((1, past), np.int64), runners["ort"].start(1))
            feeds = {"input_ids": np.array([[1]], np.int64), "attention_mask": np.ones((1, past + 1), np.int64),
                     **dict(zip(runners["ort"].past, cache))}
            result["profile"] = {name: {"past": past, **profile_kernels(m, [feeds[n] for n in m.input_names])}
                                 for name, m in builds.items()}

    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False,
                  title=f"GPT-2 {args.config} decoding step (1 token, batch 1): median of {args.repeat}, "
                        f"{threads} threads")
    for col in ("past", "cache MB", "runtime", "ms/token", "min ms", "x ort"):
        table.add_column(col, justify="left" if col == "runtime" else "right", no_wrap=True)
    for row in rows:
        ort_ms = row["results"]["ort"]["median_ms"]
        for i, (key, cell) in enumerate(row["results"].items()):
            table.add_row(str(row["past"]) if i == 0 else "", f"{row['cache_mb']:.1f}" if i == 0 else "", key,
                          f"{cell['median_ms']:.2f}", f"{cell['min_ms']:.2f}", f"{cell['median_ms'] / ort_ms:.2f}",
                          end_section=i == len(row["results"]) - 1)
    console.print(table)
    gen = result["generate"]
    console.print("hetc: symbolic batch/seq/past (one build for prompt and steps), resident cache (hetc.generate) or "
                  "copied through numpy every step (copy: model.run); hetc seq=1: batch and seq declared 1:1 (static "
                  "matmuls), past symbolic, the prompt fed token by token; static: every dim bound to this shape",
                  soft_wrap=True)
    console.print(f"{args.new} greedy tokens after a {args.prompt}-token prompt, vs onnxruntime: "
                  + ", ".join(f"{k} {'identical' if v else 'DIFFERENT'}" for k, v in gen["tokens_identical"].items())
                  + "; compile s: " + ", ".join(f"{k} {v:.1f}" for k, v in result["compile_s"].items())
                  + "; prompt ms: " + ", ".join(f"{k} {v:.1f}" for k, v in gen["prefill_ms"].items())
                  + "; decode ms/token (median of the run): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in gen["decode_ms_median"].items()), soft_wrap=True)
    console.print("cache copy numpy -> TVM -> numpy alone: "
                  + ", ".join(f"past {r['past']}: {r['copy_ms']:.2f} ms ({r['cache_mb']:.1f} MB)" for r in rows)
                  + "; copy - resident: " + ", ".join(f"{r['copy_cost_ms']:.2f} ms" for r in rows), soft_wrap=True)
    for name, prof in result.get("profile", {}).items():
        console.print(f"{name} kernels at past {prof['past']} ({prof['total_ms']:.1f} ms total; cache concat "
                      f"{prof['concat_ms']:.2f} ms):", soft_wrap=True)
        for kernel, ms, count in prof["kernels"]:
            console.print(f"  {ms:8.2f} ms  {count:3d} x  {kernel}", soft_wrap=True, markup=False)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.json}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
