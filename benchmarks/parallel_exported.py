"""The parallel planner's predicted step time against the measured one, for exported transformers
(BERT, GPT-2, Llama) run as 1, 2 (TP=2) and 4 (TP=2 x PP=2) CPU processes: a check of the cost
model, not of speed.

    python benchmarks/parallel_exported.py [--models bert,gpt2,llama] [--repeat 20]
                                           [--json parallel_exported.json] [--keep DIR]

In this run: export (``model_zoo``: TorchScript, opset 17, batch 2, sequence 16); measure one
rank's device (``hetc.devices.measure`` pinned to one core, one thread, as ranks run) and the
link (gloo all-reduces of 2 processes over 127.0.0.1, one core each, medians at 4 B .. 1 MB,
fitted to a + S / B on relative error; the planner's 2-rank ring all-reduce is 2 alpha + S / beta,
so alpha = a / 2, beta = B); predict with ``plan_parallel`` on ``from_onnx(model, {"batch": 2,
"seq": 16})`` over tp x pp such devices (batch 1: one ONNX "sample" is one run at the plan
shape; default efficiency); measure ``hetc.compile`` (tp1: one process, one thread), checked
against onnxruntime, median of --repeat steps after 3 warm-ups. tp2pp2's 4 ranks share the 2
cores; at one micro-batch the stages take turns, so each working rank has a core.

Collectives per step: the planner's (``from_onnx`` takes the compiler's Megatron plan: one
all-reduce per block, on its row projection) and the artifact's, summed over stage leaders (AR
all-reduce, BC broadcast, AG all-gather; hops: sends between stage leaders and the results back
to rank 0).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

import hetc
from hetc.benchmark import cpu_features
from hetc.devices import DeviceSpec
from hetc.parallel.mesh import Link, Mesh
from hetc.parallel.model import Model, from_onnx
from hetc.parallel.planner import Plan, PlanOptions, plan_parallel
from hetc.parallel.runtime import close_all

sys.path.insert(0, str(Path(__file__).resolve().parent))
import model_zoo  # beside this file

MODELS = ("bert", "gpt2", "llama")
CONFIGS = {"tp1": (1, 1), "tp2": (2, 1), "tp2pp2": (2, 2)}  # name -> (tp, pp)
SIZES = (4, 64, 1 << 10, 16 << 10, 256 << 10, 1 << 20)  # all-reduce bytes
SHAPE = {"batch": 2, "seq": model_zoo.SEQ}
WARMUP = 3
SHORT = {"allreduce": "AR", "all-reduce": "AR", "broadcast_from_worker0": "BC", "allgather": "AG", "all-gather": "AG"}


@dataclass(frozen=True)
class Machine:
    cpu: str
    core: DeviceSpec  # one rank's device as measured, the measured link as its peer_link
    link: Link  # the planner's alpha-beta link between two ranks
    allreduce_ms: dict[int, tuple[float, float]]  # bytes -> (median, min) of a 2-process gloo all-reduce


@dataclass
class Row:
    model: str
    config: str
    predicted_ms: float | None = None
    predicted_comm_ms: float | None = None  # of predicted_ms: tensor-parallel collectives and stage sends
    measured_ms: float | None = None
    rel_err: float | None = None
    planned_collectives: str = ""
    collectives: str = ""
    compile_s: float | None = None
    times_ms: list[float] | None = None
    error: str = ""

    @property
    def ratio(self) -> float | None:
        return self.measured_ms / self.predicted_ms if self.measured_ms and self.predicted_ms else None


def cpu_name() -> str:
    """The CPU and the ISA its code targets (``hetc.benchmark.cpu_features``: /proc/cpuinfo's
    model, family and SIMD flags, LLVM's mcpu), since the machine changes between runs."""
    info = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in
                                                 Path("/proc/cpuinfo").read_text().splitlines())}
    features = cpu_features()
    isa = "AVX-512" if "avx512f" in features["cpuinfo_simd"] else "AVX2" if "avx2" in features["cpuinfo_simd"] else "no AVX2"
    return (f"{features['cpu_model'] or 'unknown CPU'} (family {info.get('cpu family', '?')}, model "
            f"{info.get('model', '?')}; LLVM {features['llvm_mcpu']}, {isa}), {os.cpu_count()} logical CPUs")


def measure_core(core: int) -> DeviceSpec:
    """``hetc.devices.measure`` in a child on core ``core`` with one thread (BLAS and TVM)."""
    one = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "TVM_NUM_THREADS")}
    proc = subprocess.run([sys.executable, "-m", "hetc.devices.measure", "rank-core"], env={**os.environ, **one},
                          preexec_fn=lambda: os.sched_setaffinity(0, {core}), capture_output=True, text=True,
                          check=True)
    return DeviceSpec(**json.loads(proc.stdout))


def _link_rank(rank: int, port: int, repeat: int, conn) -> None:
    """One all-reduce process, on a core of its own; rank 0 sends {bytes: (median, min) s}. The
    sizes take turns, so a drift of the machine's load hits them alike."""
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[rank % len(cores)]})
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    buffers = {size: torch.from_numpy(np.ones(size // 4, np.float32)) for size in SIZES}  # numpy memory, as gloo.py
    times: dict[int, list[float]] = {size: [] for size in SIZES}
    for i in range(WARMUP + repeat):
        for size, buf in buffers.items():
            start = time.perf_counter()
            dist.all_reduce(buf)
            if i >= WARMUP:
                times[size].append(time.perf_counter() - start)
    dist.destroy_process_group()
    if rank == 0:
        conn.send({size: (statistics.median(t), min(t)) for size, t in times.items()})


def measure_link(repeat: int = 200) -> tuple[Link, dict[int, tuple[float, float]]]:
    """The link fitted to the median all-reduce times, and {bytes: (median, min) ms}."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    procs = [ctx.Process(target=_link_rank, args=(rank, port, repeat, send)) for rank in range(2)]
    for p in procs:
        p.start()
    measured = receive.recv()
    for p in procs:
        p.join()
    sizes, t = np.array(list(measured), float), np.array([median for median, _ in measured.values()])
    a, per_byte = np.linalg.lstsq(np.stack([1 / t, sizes / t], 1), np.ones_like(t), rcond=None)[0]
    link = Link("gloo over loopback (measured)", float(1 / per_byte), float(a / 2))
    return link, {size: (median * 1e3, least * 1e3) for size, (median, least) in measured.items()}


def predict(model: Model, machine: Machine, tp: int, pp: int) -> Plan:
    """The planner's best plan with (dp, tp, pp) = (1, tp, pp) on tp x pp measured cores."""
    mesh = Mesh(1, tp * pp, machine.core, machine.link, None)
    for plan in plan_parallel(model, mesh, PlanOptions(batch=1)).plans:
        if (plan.dp, plan.tp, plan.pp) == (1, tp, pp):
            return plan
    raise RuntimeError(f"the planner kept no plan with tp={tp} pp={pp}")


def _describe(counts: Counter, hops: int) -> str:
    parts = [f"{n} {SHORT.get(kind, kind)}" for kind, n in sorted(counts.items())]
    return " + ".join(parts + [f"{hops} hop{'s' * (hops > 1)}"] * bool(hops)) or "-"


def measured_collectives(parallel: dict | None) -> str:
    """Per step, summed over the stages' leaders (each stage runs once at one micro-batch)."""
    if not parallel:
        return "-"
    counts: Counter[str] = Counter()
    for k, record in enumerate(parallel["ranks"]):
        if record.get("tp_group", [0])[0] == k:  # a tensor-parallel artifact's ranks have no tp_group
            counts.update(record["collectives"])
    back = parallel["ranks"][0].get("results_from", 0) != 0  # the last stage's outputs to rank 0
    return _describe(counts, len(parallel.get("stage_send_bytes", [])) + back)


def planned_collectives(model: Model, tp: int, pp: int) -> str:
    counts = Counter(kind for layer in model.layers for kind in layer.sharding.forward) if tp > 1 else Counter()
    return _describe(counts, pp - 1)


def measure(path: Path, inputs: dict, reference: list, tp: int, pp: int, repeat: int) -> dict:
    start = time.perf_counter()
    how = {"num_threads": 1} if tp * pp == 1 else {"tp": tp, "pp": pp}  # tp1: one rank's core
    compiled = hetc.compile(path, "cpu", {k: list(v.shape) for k, v in inputs.items()}, **how)
    compile_s = time.perf_counter() - start
    outputs = list(compiled.run(inputs).values())
    rel_err = max(float(np.abs(o - r).max() / max(np.abs(r).max(), 1e-30))
                  for o, r in zip(outputs, reference, strict=True))
    times = []
    for i in range(WARMUP + repeat):
        start = time.perf_counter()
        compiled.run(inputs)
        if i >= WARMUP:
            times.append((time.perf_counter() - start) * 1e3)
    close_all()
    return {"measured_ms": statistics.median(times), "rel_err": rel_err, "compile_s": compile_s,
            "collectives": measured_collectives(compiled.manifest.parallel), "times_ms": times}


def run_model(name: str, work: Path, machine: Machine, repeat: int) -> list[Row]:
    import onnxruntime as ort

    path = work / f"{name}.onnx"
    model_zoo.export(model_zoo.ZOO[name], "torchscript", path)
    inputs = dict(np.load(path.with_suffix(".npz")))
    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, inputs)
    model = from_onnx(path, SHAPE)
    rows = []
    for config, (tp, pp) in CONFIGS.items():
        print(f"{name} {config} ...", flush=True)
        row = Row(name, config, planned_collectives=planned_collectives(model, tp, pp))
        try:
            plan = predict(model, machine, tp, pp)
            row.predicted_ms = plan.step_seconds * 1e3
            row.predicted_comm_ms = sum(c.seconds for c in plan.comm.values()) * 1e3
            for key, value in measure(path, inputs, reference, tp, pp, repeat).items():
                setattr(row, key, value)
        except Exception as err:  # noqa: BLE001 -- one failed configuration must not stop the run
            close_all()
            row.error = f"{type(err).__name__}: {next(iter(str(err).strip().splitlines()), '')}"[:200]
        rows.append(row)
    return rows


def print_table(rows: list[Row], machine: Machine, repeat: int) -> None:
    def num(value, fmt: str = ".3g", suffix: str = "") -> str:
        return "" if value is None else format(value, fmt) + suffix

    core, link = machine.core, machine.link
    console = Console(width=None if sys.stdout.isatty() else 120)  # pipes and logs get 80 columns otherwise
    table = Table(title=f"Planner vs measured step time: batch 2, seq {SHAPE['seq']}, medians of {repeat} steps")
    for col in ("model", "config", "pred ms", "pred comm ms", "meas ms", "meas/pred", "rel err", "planner colls",
                "measured colls"):
        table.add_column(col, justify="left" if col in ("model", "config") or "colls" in col else "right")
    for row in rows:
        table.add_row(row.model, row.config, num(row.predicted_ms), num(row.predicted_comm_ms),
                      "error" if row.error else num(row.measured_ms), num(row.ratio, suffix="x"),
                      num(row.rel_err, ".1e"), row.planned_collectives, row.collectives,
                      end_section=row.config == list(CONFIGS)[-1])
    console.print(table)
    console.print(f"{machine.cpu}. One rank (one core, one thread): peak {core.peak_flops['float32'] / 1e9:.1f} "
                  f"GFLOP/s float32 (the planner takes {PlanOptions(batch=1).efficiency:g} of it), copy "
                  f"{core.memory_bandwidth / 1e9:.1f} GB/s, kernel call {core.launch_overhead * 1e6:.2f} us. Link: "
                  f"alpha {link.latency * 1e6:.0f} us, beta {link.bandwidth / 1e9:.2f} GB/s, from gloo all-reduces "
                  "of 2 processes, median (min) us: "
                  + ", ".join(f"{size} B {median * 1e3:.0f} ({least * 1e3:.0f})"
                              for size, (median, least) in machine.allreduce_ms.items()), soft_wrap=True)
    for row in rows:
        if row.error:
            console.print(f"{row.model} {row.config}: {row.error}", soft_wrap=True, markup=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--repeat", type=int, default=20, help="timed steps per configuration (median)")
    parser.add_argument("--json", type=Path, default=Path("parallel_exported.json"))
    parser.add_argument("--keep", type=Path, help="export the models into this folder and keep them")
    args = parser.parse_args()
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    if not names or any(n not in MODELS for n in names):
        parser.error(f"--models {args.models}: choose from {', '.join(MODELS)}")
    if args.repeat < 1:
        parser.error(f"--repeat {args.repeat}: must be at least 1")
    if args.keep and args.keep.exists() and not args.keep.is_dir():
        parser.error(f"--keep {args.keep}: not a folder")

    cpu = cpu_name()
    print(f"{cpu}; measuring the gloo link and one core ...", flush=True)
    link, allreduce_ms = measure_link()
    core = replace(measure_core(min(os.sched_getaffinity(0))),
                   peer_link={"name": link.name, "bandwidth": link.bandwidth, "latency": link.latency})
    machine = Machine(cpu, core, link, allreduce_ms)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in names:
            rows += run_model(name, work, machine, args.repeat)
    print_table(rows, machine, args.repeat)
    args.json.write_text(json.dumps({
        "machine": {"cpu": cpu, "core": asdict(core), "link": asdict(link), "allreduce_ms": allreduce_ms},
        "settings": {"models": names, "repeat": args.repeat, "shape": SHAPE, "warmup": WARMUP,
                     "efficiency": PlanOptions(batch=1).efficiency},
        "rows": [{**asdict(r), "ratio": r.ratio} for r in rows]}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
