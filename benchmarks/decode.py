"""Autoregressive decoding: hetc (cache in place) vs onnxruntime, ms per token and tokens/s.

    python benchmarks/decode.py [--model gpt2-124m|llama-134m|gpt2-tiny|llama-tiny]
                                [--past 32,480,2000] [--batch 1,4] [--prompt 16] [--new 32]
                                [--repeat 20] [--weights int8] [--no-genai] [--profile] [--json decode.json]

Exports a random-weight decoder (examples/hf_models.py: GPT-2 or Llama with grouped-query
attention, past key/values in, presents out, ``position_ids``), then:

1. compiles it twice with symbolic ``batch``, ``seq``, ``past_seq`` and ``total_seq``: ``hetc``
   with ``kv_cache=MAX_LEN`` (the cache in preallocated buffers updated in place; a
   ``hetc.session`` drives it) and ``hetc exported`` (the exported past/present signature, the
   presents left in TVM tensors between steps); with ``--weights int8`` also ``hetc int8``;
2. greedy-decodes ``--new`` tokens after a ``--prompt``-token prompt with ``hetc.generate`` on
   every build and on onnxruntime's loop: the tokens must be identical (int8: the share of
   tokens equal to fp32's), and reads the process RSS before and after the in-place run (the
   cache does not grow per step);
3. per batch in ``--batch`` and past length in ``--past`` (those the model's positions allow):
   the cache of a random prompt of that length, then one decoding step timed ``--repeat``
   times, runtimes taking turns in blocks of 5 steps, each block alone on the cores
   (``hetc.benchmark.in_blocks``; onnxruntime with its default spinning workers), medians:
   ``hetc`` (session step at that past), ``hetc exported``, ``ort`` (numpy in and out) and
   ``ort iobinding`` (the cache bound as OrtValues, the presents left in onnxruntime's memory:
   nothing copied through numpy) and, for Llama models where ``onnxruntime_genai`` imports,
   ``ort-genai``: onnxruntime's generation runtime on the graph its own model builder makes from
   the same weights (``hf_models.export_genai``: GroupQueryAttention over a cache of the whole
   context shared in place), one ``generate_next_token`` per step (a forward pass and a greedy
   pick); at batch 1 each step first rewinds to the past length, at larger batches genai cannot
   rewind and the past grows by one per call (by ``repeat`` + 2 per block of 5 at most). Its
   greedy tokens are compared with onnxruntime's as well. Tokens/s is batch / step time;
4. the bytes a step must read: the weights every step reads (initializers not only gathered
   from; for the int8 build, as it stores them) plus the valid cache, against the machine's memory bandwidth measured in the same run
   (a numpy copy of 1 GiB on every core: bytes read + written per second): ``% bw`` is how close
   a step is to the memory-bound limit (a copy writes as much as it reads, so a step that only
   reads can pass 100%);
5. with ``--profile``: each in-place build's kernels at the largest past (a VM instrument).

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
from hetc.benchmark import cpu_features, in_blocks, ort_session
from hetc.generate import CompiledRunner, OrtRunner
from hetc.options import default_threads


def rss_mb() -> float:
    """This process's resident memory (MiB), from /proc."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def copy_bandwidth(threads: int, gib: float = 1.0, repeat: int = 5) -> float:
    """Bytes read + written per second by a numpy copy of ``gib`` GiB split over ``threads``
    threads (numpy copies without the GIL; one core alone does not saturate the memory), best
    of ``repeat``."""
    from concurrent.futures import ThreadPoolExecutor

    src = np.ones(int(gib * 2**30) // 8, np.float64)
    dst = np.empty_like(src)
    parts = [(d, s) for d, s in zip(np.array_split(dst, threads), np.array_split(src, threads))]
    with ThreadPoolExecutor(threads) as pool:
        def copy():
            list(pool.map(lambda pair: np.copyto(*pair), parts))

        best = min(_seconds(copy) for _ in range(repeat))
    return 2 * src.nbytes / best


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def weight_bytes(path: Path, int8: bool = False) -> int:
    """Bytes of the initializers a step reads whole: all but those only gathered from (the
    embedding tables, of which a step reads a few rows). With ``int8``, as ``--weights int8``
    stores them: a float32 matrix multiplied from the right by MatMul or Gemm alone, of at least
    ``weight_int8.MIN_ELEMENTS`` elements, is one byte per element and a float32 scale per
    column (``hetc/passes/weight_int8.py``)."""
    import onnx

    from hetc.passes.weight_int8 import MIN_ELEMENTS

    model = onnx.load(str(path), load_external_data=False)
    users: dict[str, set] = {}
    right = set()  # names used as a MatMul's or Gemm's second operand
    for node in model.graph.node:
        for name in node.input:
            users.setdefault(name, set()).add(node.op_type)
        if node.op_type in ("MatMul", "Gemm"):
            right.add(node.input[1])
    total = 0
    for init in model.graph.initializer:
        if users.get(init.name, set()) <= {"Gather"} and init.name in users:
            continue
        elements = int(np.prod(init.dims))
        if (int8 and init.name in right and len(users[init.name]) == 1 and len(init.dims) == 2
                and init.data_type == onnx.TensorProto.FLOAT and elements >= MIN_ELEMENTS):
            total += elements + 4 * int(init.dims[1])
            continue
        total += elements * onnx.helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
    return total


class SessionStep:
    """A ``hetc.session`` stepping at one past length again and again (the step's own entry is
    overwritten each time): ``step()`` is one decoding step."""

    def __init__(self, model, ids: np.ndarray) -> None:
        self.session = hetc.session(model, ids.shape[0])
        self.session.prefill(ids)
        self.past = ids.shape[1]
        self.token = np.ones(ids.shape[0], np.int64)

    def step(self):
        self.session.lengths[:] = self.past
        return self.session.step(self.token)


def profile_session(model, ids: np.ndarray, top: int = 12, runs: int = 3) -> dict:
    """Per-step time of each kernel of the in-place build at the past ``ids`` gives (mean of
    ``runs`` steps after two warm-up steps), from a VM instrument timing every Call instruction
    (TVM 0.27's VM has no profiler): {"kernels": [(name, ms, count)], "total_ms"}."""
    import tvm

    step = SessionStep(model, ids)
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

    for _ in range(2):
        step.step()
    vm = step.session.runner.vm
    vm.set_instrument(tvm.runtime.convert(instrument) if hasattr(tvm.runtime, "convert") else instrument)
    for _ in range(runs):
        step.step()
    rows = {k: [ms / runs, count // runs] for k, (ms, count) in rows.items() if not k.startswith("vm.builtin")}
    ranked = sorted(rows.items(), key=lambda kv: -kv[1][0])
    return {"total_ms": sum(v[0] for v in rows.values()), "kernels": [(n, ms, c) for n, (ms, c) in ranked[:top]]}


class GenaiStep:
    """onnxruntime-genai primed with ``ids`` (their cache in its shared buffer); a step generates
    one token. At batch 1 it rewinds to ``ids``' length first (every step at that past); genai
    rewinds only batch 1, so at larger batches the past grows by one per step, ``steps`` at most."""

    def __init__(self, model, ids: np.ndarray, steps: int) -> None:
        import onnxruntime_genai as og

        batch, past = ids.shape
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=past + steps + 2, min_length=past + steps + 2, do_sample=False,
                                  batch_size=batch)
        self.generator = og.Generator(model, params)
        self.generator.append_tokens(np.ascontiguousarray(ids, np.int32))
        self.past = past if batch == 1 else None

    def step(self):
        if self.past is not None:
            self.generator.rewind_to(self.past)
        self.generator.generate_next_token()


class OrtBound:
    """onnxruntime with IOBinding: the cache bound as OrtValues, outputs left in its memory."""

    def __init__(self, session, feeds: dict) -> None:
        import onnxruntime as ort

        self.session, self.binding = session, session.io_binding()
        for name, value in feeds.items():
            self.binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(value)))
        for out in session.get_outputs():
            self.binding.bind_output(out.name, "cpu")

    def step(self):
        self.session.run_with_iobinding(self.binding)


def export(config: str, path: Path) -> Path:
    import hf_models

    if config in hf_models.LLAMA_CONFIGS:
        return hf_models.export_llama(path, config)
    return hf_models.export_gpt2(path, config, position_ids=True)


def positions_of(config: str) -> tuple[int, int]:
    """(vocab, positions) of a config name."""
    import hf_models

    if config in hf_models.LLAMA_CONFIGS:
        args = hf_models.LLAMA_CONFIGS[config]
        return args["vocab_size"], args["max_position_embeddings"]
    args = hf_models.GPT2_CONFIGS[config]
    return args.get("vocab_size", 50257), args.get("n_positions", 1024)


def genai_available(config: str) -> bool:
    """Whether onnxruntime-genai imports and its model builder takes ``config`` (Llama: it has
    no GPT-2)."""
    import hf_models

    if config not in hf_models.LLAMA_CONFIGS:
        return False
    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2-124m", help="examples/hf_models.py GPT2_CONFIGS or LLAMA_CONFIGS name")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--past", default="32,480,2000", help="past lengths to time a decoding step at")
    parser.add_argument("--batch", default="1,4", help="batch sizes to time")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--weights", choices=["int8"], help="also a build with int8 weights")
    parser.add_argument("--no-exported", action="store_true", help="skip the build with the exported cache signature")
    parser.add_argument("--no-genai", action="store_true", help="skip onnxruntime-genai (Llama models, where it imports)")
    parser.add_argument("--profile", action="store_true", help="the in-place builds' kernels at the largest past")
    parser.add_argument("--work", type=Path, help="where to write the model (default: a temporary directory)")
    parser.add_argument("--json", type=Path, default=Path("decode.json"))
    args = parser.parse_args()

    vocab, positions = positions_of(args.model)
    batches = [int(b) for b in args.batch.split(",")]
    pasts = [int(p) for p in args.past.split(",") if int(p) + 1 <= positions]
    threads = default_threads()
    console = Console(width=None if sys.stdout.isatty() else 130)
    result: dict = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                    "threads": threads, "cpu": cpu_features()}
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        path = (args.work or Path(tmp)) / f"{args.model}.onnx"
        console.print(f"exporting {args.model} ...")
        export(args.model, path)
        max_len = min(positions, max(pasts + [args.prompt + args.new]) + 1)
        dims = {"batch": (1, max(batches + [4])), "seq": (1, positions), "past_seq": (0, positions),
                "total_seq": (1, positions)}
        variants = {"hetc": {"kv_cache": max_len}}
        if args.weights:
            variants["hetc int8"] = {"kv_cache": max_len, "weights": args.weights}
        if not args.no_exported:
            variants["hetc exported"] = {}
        builds: dict = {}
        for name, extra in variants.items():
            start = time.perf_counter()
            builds[name] = hetc.compile(path, dims=dims, **extra)
            result.setdefault("compile_s", {})[name] = time.perf_counter() - start
        session = ort_session(path, threads, spinning=True)
        genai = None
        if not args.no_genai and genai_available(args.model):
            import hf_models
            import onnxruntime_genai as og

            start = time.perf_counter()
            genai = og.Model(str(hf_models.export_genai(path.parent / "genai", args.model, threads=threads)))
            result["compile_s"]["ort-genai (model builder)"] = time.perf_counter() - start
        console.print("compiled in " + ", ".join(f"{k} {v:.1f} s" for k, v in result["compile_s"].items()))
        bandwidth = copy_bandwidth(threads)
        weights = weight_bytes(path)
        result.update({"copy_bandwidth_gbs": bandwidth / 1e9, "weight_bytes": weights, "max_len": max_len})
        if args.weights == "int8":
            result["weight_bytes_int8"] = weight_bytes(path, int8=True)

        prompt = np.random.default_rng(0).integers(0, vocab, (1, args.prompt))
        loops = {**builds, "ort": session}
        for warm in loops.values():  # first calls: VM creation, thread pools
            hetc.generate(warm, prompt, 2)
        tokens, rss = {}, {}
        for name, loop in loops.items():
            time.sleep(0.5)  # onnxruntime's workers spin on after its last call
            before = rss_mb()
            tokens[name] = hetc.generate(loop, prompt, args.new)
            rss[name] = {"before_mb": before, "after_mb": rss_mb()}
        if genai is not None:
            import hf_models

            tokens["ort-genai"] = hf_models.genai_generate(genai, prompt, args.new)
        agree = {k: float(np.mean(t[0, args.prompt:] == tokens["ort"][0, args.prompt:])) for k, t in tokens.items()}
        ok = all(v == 1.0 for k, v in agree.items() if "int8" not in k and k != "ort-genai")  # hetc's builds
        result["generate"] = {"agreement_with_ort": agree, "rss": rss, "prompt": args.prompt, "new": args.new,
                              "tokens": {k: t[0, args.prompt:].tolist() for k, t in tokens.items()}}

        rows = []
        for batch in batches:
            for past in pasts:
                console.print(f"batch {batch}, past {past} ...")
                ids = np.random.default_rng(past).integers(0, vocab, (batch, past))
                ort_loop = OrtRunner(session)
                _, cache = ort_loop.step(ids, np.ones((batch, past), np.int64), ort_loop.start(batch))
                step_ids = np.ones((batch, 1), np.int64)
                mask = np.ones((batch, past + 1), np.int64)
                feeds = {"input_ids": step_ids, "attention_mask": mask,
                         "position_ids": np.full((batch, 1), past, np.int64), **dict(zip(ort_loop.past, cache))}
                steps = {name: SessionStep(m, ids).step for name, m in builds.items() if m.manifest.kv_cache}
                if "hetc exported" in builds:
                    import tvm

                    exported = CompiledRunner(builds["hetc exported"])
                    resident = [tvm.runtime.tensor(c) for c in cache]
                    steps["hetc exported"] = lambda r=exported, c=resident, i=step_ids, m=mask: r.step(i, m, c)
                steps["ort"] = lambda r=ort_loop, i=step_ids, m=mask, c=cache: r.step(i, m, c)
                steps["ort iobinding"] = OrtBound(session, feeds).step
                calls = args.repeat + 2 * -(-args.repeat // 5)  # in_blocks' timed and warm-up calls
                if genai is not None and past + calls + 2 <= positions:
                    steps["ort-genai"] = GenaiStep(genai, ids, calls).step
                times = in_blocks(steps, args.repeat)
                cache_bytes = sum(c.nbytes for c in cache)
                read = weights + cache_bytes
                cells = {}
                for name, t in times.items():
                    ms = statistics.median(t)
                    own = result["weight_bytes_int8"] + cache_bytes if "int8" in name else read
                    cells[name] = {"median_ms": ms, "min_ms": min(t), "tokens_per_s": batch / ms * 1e3,
                                   "read_mb": own / 2**20, "read_gbs": own / ms / 1e6,
                                   "bw_share": own / (ms / 1e3) / bandwidth}
                rows.append({"batch": batch, "past": past, "cache_mb": cache_bytes / 2**20, "read_mb": read / 2**20,
                             "results": cells})
        result["decode_step"] = rows

        if args.profile:
            past = max(pasts)
            ids = np.random.default_rng(past).integers(0, vocab, (1, past))
            result["profile"] = {"past": past, "builds": {name: profile_session(m, ids) for name, m in builds.items()
                                                          if m.manifest.kv_cache}}

    cpu = result["cpu"]
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False,
                  title=f"{args.model} decoding step (1 token per row): median of {args.repeat}, {threads} threads, "
                        f"{cpu['cpu_model']} (LLVM {cpu['llvm_mcpu']})")
    for col in ("batch", "past", "MB read", "runtime", "ms/step", "tokens/s", "x ort iob", "GB/s", "% bw"):
        table.add_column(col, justify="left" if col == "runtime" else "right", no_wrap=True)
    for row in rows:
        base = row["results"]["ort iobinding"]["median_ms"]
        for i, (key, cell) in enumerate(row["results"].items()):
            table.add_row(str(row["batch"]) if i == 0 else "", str(row["past"]) if i == 0 else "",
                          f"{cell['read_mb']:.0f}", key, f"{cell['median_ms']:.2f}",
                          f"{cell['tokens_per_s']:.1f}", f"{cell['median_ms'] / base:.2f}", f"{cell['read_gbs']:.1f}",
                          f"{100 * cell['bw_share']:.0f}", end_section=i == len(row["results"]) - 1)
    console.print(table)
    gen = result["generate"]
    console.print(f"memory bandwidth (numpy copy, read + write): {bandwidth / 1e9:.1f} GB/s; weights read per step "
                  f"{weights / 2**20:.0f} MiB; {args.new} greedy tokens after a {args.prompt}-token prompt, share equal "
                  "to onnxruntime's: " + ", ".join(f"{k} {v:.3f}" for k, v in gen["agreement_with_ort"].items())
                  + "; RSS MiB before -> after: " + ", ".join(f"{k} {v['before_mb']:.0f} -> {v['after_mb']:.0f}"
                                                            for k, v in gen["rss"].items())
                  + "; compile s: " + ", ".join(f"{k} {v:.1f}" for k, v in result["compile_s"].items()), soft_wrap=True)
    if "profile" in result:
        past = result["profile"]["past"]
        for name, prof in result["profile"]["builds"].items():
            console.print(f"{name} kernels at past {past} ({prof['total_ms']:.1f} ms total):")
            for kernel, ms, count in prof["kernels"]:
                console.print(f"  {ms:8.2f} ms  {count:3d} x  {kernel}", soft_wrap=True, markup=False)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.json}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
