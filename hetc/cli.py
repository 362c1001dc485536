"""The ``hetc`` command line: a thin layer over ``hetc.api``.

Every user error is one line on stderr (``hetc: error: ...``) with exit code 2 (usage) or
1 (failure); ``--debug`` adds the traceback.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

import click
import numpy as np
from rich.console import Console
from rich.table import Table

from . import __version__, crash
from .errors import HetcError, OutputPathError, UsageError
from .npz import load_npz, save_npz
from .options import WINOGRAD_MODES

# Tables keep their columns readable when stdout is a pipe or a file (rich would use 80).
console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)


def _shapes(specs: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    from .options import parse_input_shape

    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, shape = parse_input_shape(spec)
        if name in shapes:
            raise UsageError(f"--input-shape given twice for '{name}'")
        shapes[name] = shape
    return shapes


def dim_options(fn, plan_help: str = "Size a symbolic dim is costed at for placement and planning "
                                       "(repeatable, or DIM=SIZE,DIM=SIZE); default: the low end of its range."):
    """--dim and --plan-shape: the ranges of symbolic dims, and the sizes costs assume."""
    fn = click.option("--plan-shape", "plan_shape", multiple=True, metavar="DIM=SIZE", help=plan_help)(fn)
    return click.option("--dim", "dims", multiple=True, metavar="DIM=LOW:HIGH",
                        help="Range of a symbolic input dim (repeatable), e.g. batch=1:64; undeclared "
                             "dims get 1:65536. The artifact runs any size in range.")(fn)


def _dim_ranges(specs: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    from .options import parse_dim

    return _unique("--dim", [parse_dim(s) for s in specs])


def _plan_shape(specs: tuple[str, ...]) -> dict[str, int]:
    from .options import parse_plan_shapes

    return parse_plan_shapes(specs)


def _gears(specs: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    from .options import parse_gears

    return _unique("--gears", [parse_gears(s) for s in specs])


def _unique(option: str, pairs: list) -> dict:
    out: dict = {}
    for name, value in pairs:
        if name in out:
            raise UsageError(f"{option} given twice for '{name}'")
        out[name] = value
    return out


def _constants(specs: tuple[str, ...]) -> dict[str, np.ndarray]:
    values: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep or not name or not file:
            raise UsageError(f"invalid --constant-input {spec!r}; expected NAME=FILE.npy")
        path = Path(file)
        if not path.is_file():
            raise UsageError(f"--constant-input {name}: no such file {path}")
        try:
            values[name] = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError, MemoryError) as err:  # MemoryError: a header claiming TBs
            raise UsageError(f"--constant-input {name}: {path} is not a .npy array file that fits in memory") from err
    return values


def _winograd_line(decisions: list[dict]) -> str:
    """``winograd: 7 of 13 3x3 stride-1 convs (F(4x4,3x3) 4, F(2x2,3x3) 3)``; report.json has each reason."""
    chosen = Counter(d["method"].removeprefix("winograd ") for d in decisions if d["method"] != "direct")
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(chosen.items(), reverse=True))
    return (f"winograd: {sum(chosen.values())} of {len(decisions)} 3x3 stride-1 convs"
            + (f" ({kinds})" if kinds else "") + "; report.json \"winograd\" gives each conv's reason")


def _tuning_line(tuning: dict) -> str:
    """One line on what ``compile --db`` did (the report's ``tuning``)."""
    line = f"tuning database: {tuning['tuned']} kernel(s) tuned, {tuning['default']} default"
    symbolic, fallback = tuning["tuned_symbolic"], tuning["fallback"]
    if symbolic:
        shapes = sorted(set(symbolic.values()))
        line += f"; {len(symbolic)} symbolic kernel(s) use records tuned at {' / '.join(shapes)}"
    if fallback:
        line += f"; {len(fallback)} record(s) did not apply, default schedule instead: {', '.join(fallback)}"
    return line


def _stage_table(report: dict) -> Table:
    table = Table(title="pass pipeline", title_justify="left")
    for col in ("stage", "relax ops", "relax funcs", "TIR funcs", "ms"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for st in report["stages"]:
        b, a = st["before"], st["after"]
        table.add_row(st["stage"], f"{b['relax_calls']} → {a['relax_calls']}",
                      f"{b['relax_functions']} → {a['relax_functions']}",
                      f"{b['tir_functions']} → {a['tir_functions']}", f"{st['seconds'] * 1e3:.1f}")
    return table


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="hetc")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
def cli(debug: bool) -> None:
    """hetc: compile ONNX models for CPU, GPU, NPU and FPGA targets."""
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, format="%(name)s: %(message)s")


target_option = click.option("--target", "-t", default="cpu", show_default=True,
                             help="Target name(s), comma-separated (see `hetc list targets`).")
shape_option = click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D0,D1,...",
                            help="Bind an input's shape (repeatable); needed for dynamic dims.")
arch_option = click.option("--arch", default=None, metavar="SM[,SM...]|DEVICE",
                           help="GPU architectures to build for (sm_80,sm_90) or a device name "
                                "(nvidia-a100; see `hetc list targets`); default sm_90.")


POLICIES = ("auto", "accelerator-first")  # --placement values that name a policy, not a file


def placement_options(fn):
    """--pin, --device and --objective: what steers the placement solver."""
    fn = click.option("--objective", type=click.Choice(["latency", "throughput"]), default="latency",
                      show_default=True, help="Placement objective: one inference, or a stream of inputs.")(fn)
    fn = click.option("--device", "device_specs", multiple=True, metavar="TARGET=SPEC",
                      help="The device spec a target's costs come from (repeatable), e.g. cuda=nvidia-a100.")(fn)
    return click.option("--pin", "pins", multiple=True, metavar="NODE=DEVICE",
                        help="Keep a node on a device (repeatable), e.g. lv3=cpu:0 (names: plan.json).")(fn)


def _pins(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for value in values:
        node, sep, device = value.partition("=")
        if not sep or not node or not device:
            raise UsageError(f"invalid --pin {value!r}; expected NODE=DEVICE, e.g. lv3=cpu:0")
        out[node] = device
    return out


def _mount_parallel() -> None:
    from .parallel.cli import parallel

    cli.add_command(parallel)


_mount_parallel()


@cli.command("compile")
@click.argument("model", type=click.Path(path_type=Path))
@target_option
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path), help="Artifact directory.")
@shape_option
@click.option("--constant-input", "constant_inputs", multiple=True, metavar="NAME=FILE.npy",
              help="Freeze an input to the array in FILE.npy (repeatable): axes, pads, shapes.")
@click.option("--layout", type=click.Choice(["NHWC", "NCHW"]), default=None,
              help="Conv layout (default: the target's preferred one; NHWC on the CPU).")
@click.option("--threads", type=click.IntRange(min=0), default=0, help="CPU threads (0 = all cores).")
@click.option("--db", "database", type=click.Path(path_type=Path), default=None, metavar="DIR",
              help="Tuning database written by `hetc tune`: use its best schedules.")
@arch_option
@click.option("--cpu", default=None, metavar="NAME",
              help="CPU to generate code for (an LLVM CPU: haswell for AVX2, skylake-avx512, znver3, ...); "
                   "default: this machine's. The artifact refuses to load where that CPU's instructions are missing.")
@click.option("--winograd", type=click.Choice(WINOGRAD_MODES), default="auto", show_default=True,
              help="3x3 stride-1 convs on the CPU: auto (a cost rule per conv), off (direct), or every "
                   "eligible conv as Winograd F(2x2,3x3) / F(4x4,3x3) (docs/cpu.md).")
@click.option("--kv-cache", "kv_cache", type=click.IntRange(min=1), default=None, metavar="MAX_LEN",
              help="A decoder exported with past_key_values.* in / present.* out: keep its cache in buffers of "
                   "MAX_LEN positions updated in place (hetc.session, hetc.generate; docs/decoding.md).")
@click.option("--weights", type=click.Choice(["int8"]), default=None,
              help="Store constant matmul weights as int8 with a scale per output channel, dequantized inside the "
                   "matmul (CPU): a quarter of the bytes a decoding step reads (docs/decoding.md).")
@click.option("--placement", type=click.Path(path_type=Path), default=None, metavar="PLAN.json|auto|accelerator-first",
              help="With several targets: auto (default) places ops by cost (the solver); accelerator-first "
                   "gives every op the first accelerator supports to it; PLAN.json runs each op on the device "
                   "it names (cpu:0, cpu:1, cuda:0, ascend:0, ...); see docs/placement.md.")
@click.option("--precision", default=None, metavar="TYPE|fixed|float|FILE.json",
              help="FPGA number types: float (default), fixed (from --calibration), a type such as "
                   "ap_fixed<16,6>, or a JSON file of per-layer types (docs/fpga.md).")
@click.option("--calibration", type=click.Path(path_type=Path), default=None, metavar="DATA.npz",
              help="Model inputs (samples along axis 0) whose value ranges choose the FPGA's fixed-point types.")
@placement_options
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Tensor parallel: shard the linear layers over N ranks (one process each; docs/parallel.md).")
@click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Pipeline parallel: cut the model into N stages (one process each).")
@click.option("--micro-batches", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --pp: stream the batch through the stages in M slices, so the stages overlap.")
@dim_options
@click.option("--gears", "gears", multiple=True, metavar="DIM=SIZE,SIZE,...",
              help="Sizes of a symbolic dim the Ascend regions are built for (repeatable), e.g. batch=1,8,32; "
                   "default: powers of two in the dim's range (docs/dynamic-shapes.md).")
@click.option("-v", "--verbose", is_flag=True, help="Print the pass pipeline table.")
def compile_cmd(model: Path, target: str, output: Path, input_shapes, constant_inputs, layout, threads: int,
                database: Path | None, arch: str | None, placement: Path | None, precision: str | None,
                calibration: Path | None, pins, device_specs, objective: str, tp: int, pp: int,
                micro_batches: int, dims, plan_shape, gears, verbose: bool, cpu: str | None = None,
                winograd: str = "auto", kv_cache: int | None = None, weights: str | None = None) -> None:
    """Compile MODEL (ONNX, or a torch.export .pt2 file) into an artifact directory."""
    from . import api
    from .options import parse_arch
    from .placement.cost import parse_device_specs
    from .runtime.artifact import check_output_path

    shapes = _shapes(input_shapes)
    constants = _constants(constant_inputs)
    check_output_path(output.absolute())  # fail before compiling, not after
    crash.note_output(output.absolute())  # a crash removes what it left of the artifact
    if database is not None:
        from .tuning.database import read_metadata

        read_metadata(database, None)  # a clear error now; the target is checked when it is applied
    start = time.perf_counter()
    compiled = api.compile(model, target=target, input_shapes=shapes, layout=layout, num_threads=threads,
                           constant_inputs=constants, database=database, arch=parse_arch(arch),
                           placement=str(placement) if str(placement) in POLICIES else placement,
                           precision=precision, calibration=calibration, pins=_pins(pins),
                           devices=parse_device_specs(device_specs), objective=objective, tp=tp, pp=pp,
                           micro_batches=micro_batches, dims=_dim_ranges(dims), plan_shape=_plan_shape(plan_shape),
                           gears=_gears(gears), cpu=cpu, winograd=winograd, kv_cache=kv_cache,
                           weights=weights)
    crash.set_stage("write artifact")
    out = compiled.save(output)
    crash.set_stage("report")
    if compiled.manifest.parallel:
        _print_parallel(compiled.manifest, out, time.perf_counter() - start)
        return
    if verbose:
        console.print(_stage_table(compiled.report))
    graph = compiled.report["graph"]
    console.print(f"compiled {compiled.manifest.model} for {','.join(compiled.manifest.targets)}: "
                  f"{graph['nodes']} ops, {graph['flops'] / 1e9:.3f} GFLOP, "
                  f"{time.perf_counter() - start:.1f} s -> {out}")
    if "tuning" in compiled.report:
        console.print(_tuning_line(compiled.report["tuning"]), soft_wrap=True)
    if compiled.report.get("winograd"):
        console.print(_winograd_line(compiled.report["winograd"]), soft_wrap=True)
    if compiled.manifest.kv_cache:
        kv = compiled.manifest.kv_cache
        console.print(f"KV cache in place: {len(kv['slots'])} buffers of {kv['max_len']} positions "
                      "(hetc.session / hetc.generate; run still takes the exported past/present signature)")
    if compiled.manifest.dims:
        console.print("symbolic dims: " + ", ".join(f"{name} {low}..{high}"
                                                    for name, (low, high) in compiled.manifest.dims.items()))
    if compiled.manifest.gears:
        console.print("Ascend regions built for gears (emulated here): " + "; ".join(
            f"{name} in {', '.join(map(str, sizes))}" for name, sizes in compiled.manifest.gears.items()))
    kept = compiled.report.get("offload", {}).get("fpga", {}).get("kept_on_cpu", [])
    if kept:
        dims = sorted({d for k in kept for d in k["dims"]})
        console.print(f"fpga: {len(kept)} ops stay on the CPU: symbolic dims {', '.join(dims)} (report.json "
                      "offload.fpga.kept_on_cpu)")
    _print_offloads(compiled.manifest)
    if "prediction" in compiled.plan:
        p = compiled.plan["prediction"]
        per_device = ", ".join(f"{d['name']} {d['ops']} ops" for d in p["devices"])
        console.print(f"placement by {p['solver']}{' (optimal)' if p['optimal'] else ''}: predicted "
                      f"{p['objective']} {p['predicted_seconds'] * 1e3:.3f} ms ({per_device}); `hetc plan` shows it")
    if "placement" in compiled.report:
        placed = compiled.report["placement"]
        console.print(f"placed on {','.join(placed['devices'])}: {placed['transfers']} transfer(s), "
                      f"{placed['transfer_bytes']:,} bytes per run (plan.json lists them)")


def _parallel_kind(par: dict) -> str:
    tp = par.get("tp", 1)
    return f"{par['kind']}-parallel" + (f" x tensor-parallel {tp}" if par["kind"] == "pipeline" and tp > 1 else "")


def _print_parallel(manifest, out: Path, seconds: float) -> None:
    par = manifest.parallel
    lines = []
    for k, r in enumerate(par["ranks"]):
        comm = ", ".join(f"{n} {c}" for c, n in sorted(r["collectives"].items()))
        if par["kind"] == "tensor":
            lines.append(f"rank {k}: {comm or 'no collectives'}")
            continue
        line = f"rank {k}: stage {r['stage']}"
        if r["tp_group"][0] == k:
            line += f", receives {len(r['receive'])}, sends {len(r['send'])} tensor(s)"
        lines.append(line + (f", {comm}" if comm else ""))
    shards = [par] if par["kind"] == "tensor" else par.get("stage_shards", [])
    for k, shard in enumerate(shards):
        where = "" if par["kind"] == "tensor" else f"stage {k}: "
        blocks = [b["kind"] for b in shard.get("blocks", [])]
        traffic = ", ".join(f"{name} {size:,} B" for name, size in sorted(shard.get("collective_bytes", {}).items()))
        lines.append(f"{where}sharded {blocks.count('attention')} attention and {blocks.count('mlp')} MLP block(s)"
                     + (f"; per step: {traffic}" if traffic else ""))
        lines += [f"{where}replicated {r['layer']}: {r['reason']}" for r in shard.get("replicated", [])]
    if par.get("stage_send_bytes"):
        lines.append("stage transfers per step: " + ", ".join(f"{b:,} B" for b in par["stage_send_bytes"]))
    micro = f", {par['micro_batches']} micro-batches" if par.get("micro_batches", 1) > 1 else ""
    console.print(f"compiled {manifest.model} {_parallel_kind(par)} over {len(par['ranks'])} ranks{micro} "
                  f"({seconds:.1f} s) -> {out}\n" + "\n".join(lines)
                  + f"\nrun: hetc run {out} --ranks {len(par['ranks'])} --inputs ...")


def _print_offloads(manifest) -> None:
    """One line per region an external target runs, saying how it runs here (never hidden)."""
    for o in manifest.offloads:
        how = {"c-simulation": "C-simulation (emulated: no FPGA here)",
               "emulation": "emulation (onnxruntime on the CPU, not the device)"}.get(o.execution, o.execution)
        console.print(f"{o.target} region {o.name}: {len(o.nodes)} op(s) on {o.device}, runs as {how}"
                      + (f"; sources in {o.project}/" if o.project else ""))


def _reference_outputs(model: Path, inputs: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    if not model.is_file():
        raise UsageError(f"--reference {model}: no such file")
    try:
        session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        values = session.run(names, inputs)
    except Exception as err:  # onnxruntime raises its own exception types
        raise HetcError(f"onnxruntime could not run the reference {model}: "
                        f"{str(err).strip().splitlines()[0]}") from err
    return dict(zip(names, values))


def launch_options(fn):
    """--nnodes, --node-rank, --master-addr, --master-port, --timeout: a --tp/--pp artifact's
    ranks as plain processes over several machines (hetc/parallel/launch.py)."""
    fn = click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
                      help="With --nnodes: how long a rank waits for the others, at the rendezvous and in "
                           "each collective, before it fails (default 300).")(fn)
    fn = click.option("--master-port", type=click.IntRange(1, 65535), default=None, metavar="PORT",
                      help="With --nnodes: the port node 0 serves the rendezvous on (default 29500).")(fn)
    fn = click.option("--master-addr", default=None, metavar="HOST",
                      help="With --nnodes: node 0's address, reachable from every node (required with "
                           "several nodes; default with --nnodes 1: 127.0.0.1).")(fn)
    fn = click.option("--node-rank", type=click.IntRange(min=0), default=None, metavar="K",
                      help="With --nnodes: this machine's index, 0..N-1 (default 0); node 0 runs global "
                           "rank 0, which reads --inputs and gets the outputs.")(fn)
    return click.option("--nnodes", type=click.IntRange(min=1), default=None, metavar="N",
                        help="Run a --tp/--pp artifact's ranks as plain processes on N machines, this command "
                             "on each (ranks / N per machine), meeting through torch.distributed's env:// "
                             "rendezvous (docs/parallel.md).")(fn)


def _check_launch_options(nnodes: int | None, node_rank: int | None, master_addr: str | None,
                          master_port: int | None, timeout: float | None) -> None:
    """The launch options make sense together (before anything is loaded)."""
    given = {"--node-rank": node_rank, "--master-addr": master_addr, "--master-port": master_port,
             "--timeout": timeout}
    if nnodes is None:
        stray = [name for name, value in given.items() if value is not None]
        if stray:
            raise UsageError(f"{stray[0]} is for ranks across machines: it needs --nnodes N")
        return
    if node_rank is not None and node_rank >= nnodes:
        raise UsageError(f"--node-rank {node_rank}: must be in 0..{nnodes - 1} with --nnodes {nnodes}")
    if master_addr is None and nnodes > 1:
        raise UsageError(f"--nnodes {nnodes} needs --master-addr: node 0's address, reachable from every node")
    if master_addr is not None and not master_addr.strip():
        raise UsageError("--master-addr: empty address")


@cli.command("run")
@click.argument("artifact", type=click.Path(path_type=Path))
@click.option("--inputs", "inputs_path", type=click.Path(path_type=Path),
              help=".npz file with one array per model input (required; with --nnodes, on node 0 only).")
@click.option("--outputs", "outputs_path", type=click.Path(path_type=Path), help="Write outputs to this .npz.")
@click.option("--reference", type=click.Path(path_type=Path), help="ONNX model to compare with (onnxruntime).")
@click.option("--tolerance", type=float, default=1e-4, show_default=True,
              help="Allowed max abs error, relative to max |reference|.")
@click.option("--ascend-mode", type=click.Choice(["auto", "device", "emulation"]), default=None,
              help="How Ascend regions run: on the NPU through their host library (device), with "
                   "onnxruntime on the CPU (emulation), or device when possible (auto, the default).")
@click.option("--ranks", type=click.IntRange(min=1), default=None,
              help="Processes for a --tp/--pp artifact (must equal its rank count; default: that count).")
@launch_options
def run_cmd(artifact: Path, inputs_path: Path | None, outputs_path: Path | None, reference: Path | None,
            tolerance: float, ascend_mode: str | None, ranks: int | None, nnodes: int | None,
            node_rank: int | None, master_addr: str | None, master_port: int | None, timeout: float | None) -> None:
    """Run a compiled ARTIFACT on inputs from an .npz file."""
    from . import api

    if ascend_mode is not None:
        os.environ["HETC_ASCEND_MODE"] = ascend_mode

    _check_launch_options(nnodes, node_rank, master_addr, master_port, timeout)
    node = node_rank or 0
    if inputs_path is None and node == 0:
        raise UsageError("missing option --inputs X.npz" + (" (node 0 runs global rank 0, which reads them)"
                                                             if nnodes else ""))
    inputs = load_npz(inputs_path) if node == 0 else {}
    model = api.load(artifact)
    have = len(model.manifest.parallel.get("ranks", [])) or 1
    if ranks is not None and ranks != have:
        raise UsageError(f"--ranks {ranks}: {artifact} was compiled for {have} rank(s)"
                         + ("" if have > 1 else " (compile with --tp N or --pp N for more)"))
    start = time.perf_counter()
    if nnodes is None:
        outputs = model.run(inputs)
    else:
        from .parallel import launch

        if not model.manifest.parallel:
            raise UsageError(f"--nnodes: {artifact} runs as one process (compile with --tp N or --pp N for ranks)")
        places = launch.node_places(have, nnodes, node)
        rendezvous = launch.Rendezvous(master_addr or "127.0.0.1", master_port or launch.DEFAULT_PORT, have,
                                       launch.DEFAULT_TIMEOUT_S if timeout is None else timeout)
        outputs = launch.run_node(artifact, model.manifest, places, rendezvous, inputs if node == 0 else None)
        if outputs is None:  # global rank 0 is on node 0, which has the outputs
            console.print(f"node {node} of {nnodes}: ranks {places[0].rank}..{places[-1].rank} of {have} ran "
                          f"({time.perf_counter() - start:.1f} s); node 0 has the outputs")
            return
    elapsed = time.perf_counter() - start
    if outputs_path:
        save_npz(outputs_path, outputs)
    where = ",".join(model.manifest.targets) + (
        f", {_parallel_kind(model.manifest.parallel)} in {have} processes" if model.manifest.parallel else "") + (
        f" on {nnodes} node(s)" if nnodes else "")
    table = Table(title=f"{model.manifest.model} on {where} ({elapsed * 1e3:.1f} ms)", title_justify="left")
    for col in ("output", "shape", "dtype"):
        table.add_column(col)
    refs = _reference_outputs(reference, inputs, model.output_names) if reference else {}
    if refs:
        for col in ("max |ref|", "max abs err", "max rel err"):
            table.add_column(col, justify="right")
    failed = []
    for name, value in outputs.items():
        row = [name, str(list(value.shape)), value.dtype.name]
        if name in refs:
            ref = np.asarray(refs[name])
            if ref.shape != value.shape:
                failed.append(name)
                row += ["-", f"shape {list(ref.shape)}", "mismatch"]
            else:
                scale = float(np.max(np.abs(ref))) if ref.size else 0.0
                abs_err = float(np.max(np.abs(value.astype(np.float64) - ref))) if ref.size else 0.0
                rel = abs_err / scale if scale else abs_err
                if not rel <= tolerance:  # also catches NaN
                    failed.append(name)
                row += [f"{scale:.4g}", f"{abs_err:.3e}", f"{rel:.3e}"]
        table.add_row(*row)
    console.print(table)
    _print_offloads(model.manifest)
    if failed:
        raise HetcError(f"output(s) {', '.join(failed)} differ from onnxruntime by more than "
                        f"{tolerance:g} x max |reference|")


@cli.command("plan")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--target", "-t", required=True, help="Devices to place on, comma-separated: cpu,cuda,ascend,fpga.")
@shape_option
@placement_options
@click.option("--solver", type=click.Choice(["auto", "milp", "chain-dp", "heuristic"]), default="auto",
              show_default=True, help="auto: chain DP for chains, the MILP up to a few hundred ops, else the heuristic.")
@click.option("--time-limit", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds the MILP may search.")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write the plan as JSON (a valid --placement).")
@click.option("--html", "html_path", type=click.Path(path_type=Path), help="Write an HTML page with the graph coloured by device.")
@click.option("--svg", "svg_path", type=click.Path(path_type=Path), help="Write the graph coloured by device as SVG.")
@dim_options
def plan_cmd(model: Path, target: str, input_shapes, pins, device_specs, objective: str, solver: str,
             time_limit: float, output: Path | None, html_path: Path | None, svg_path: Path | None,
             dims, plan_shape) -> None:
    """Place MODEL's ops on the TARGET devices by cost and show the plan (no code generation)."""
    from . import api
    from .placement import view
    from .placement.cost import parse_device_specs

    planned = api.plan(model, target, input_shapes=_shapes(input_shapes), pins=_pins(pins),
                       devices=parse_device_specs(device_specs), objective=objective, solver=solver,
                       time_limit=time_limit, dims=_dim_ranges(dims), plan_shape=_plan_shape(plan_shape))
    data = planned.to_json()
    table = Table(title=f"{data['model']}: {data['objective']} {data['predicted_seconds'] * 1e3:.3f} ms predicted "
                        f"by {data['solver']} ({data['status']})", title_justify="left")
    for col in ("device", "spec", "ops", "busy ms"):
        table.add_column(col, justify="right" if col in ("ops", "busy ms") else "left")
    for d in data["devices"]:
        table.add_row(d["name"], d["spec"], str(d["ops"]), f"{d['busy_seconds'] * 1e3:.3f}")
    crossing = [e for e in data["edges"] if e["seconds"] > 0]
    table.add_row("transfers", "", str(len(crossing)), f"{data['transfer_seconds'] * 1e3:.3f}")
    console.print(table)
    if crossing:
        device = {n["name"]: n["device"] for n in data["nodes"]}
        moves = Table(title=f"transfers ({min(len(crossing), 10)} longest of {len(crossing)})", title_justify="left")
        for col in ("from", "to", "bytes", "us"):
            moves.add_column(col, justify="right" if col in ("bytes", "us") else "left")
        for e in sorted(crossing, key=lambda e: -e["seconds"])[:10]:
            moves.add_row(f"{e['from']} ({device[e['from']]})", f"{e['to']} ({device[e['to']]})", f"{e['bytes']:,}",
                          f"{e['seconds'] * 1e6:.1f}")
        console.print(moves)
    console.print(f"{data['transfer_bytes']:,} bytes cross devices per run; times are cost-model "
                  "predictions (roofline / backend estimates), not measurements")
    for path, text in ((output, json.dumps(data, indent=2) + "\n"), (html_path, view.html(data) if html_path else ""),
                       (svg_path, view.svg(data) if svg_path else "")):
        if path is not None:
            try:
                path.write_text(text)
            except OSError as err:
                raise UsageError(f"{path}: cannot write ({err.strerror})") from None
            console.print(f"wrote {path}")


@cli.command("inspect")
@click.argument("model", type=click.Path(path_type=Path))
@shape_option
def inspect_cmd(model: Path, input_shapes) -> None:
    """Summarize MODEL: ops, opset, inputs/outputs, FLOPs, parameters, target support."""
    from . import api

    info = api.inspect_model(model, _shapes(input_shapes))
    console.print(f"[bold]{info.model}[/bold]: IR version {info.ir_version}, opset {info.opset}, "
                  f"producer {info.producer or '-'}")
    io = Table(title="inputs and outputs", title_justify="left")
    for col in ("kind", "name", "shape", "dtype"):
        io.add_column(col)
    for kind, values in (("input", info.inputs), ("output", info.outputs)):
        for name, dims, dtype in values:
            io.add_row(kind, name, str(dims), dtype)
    console.print(io)
    ops = Table(title="ONNX ops", title_justify="left")
    for col in ("op", "count", "converter"):
        ops.add_column(col)
    for op, count in info.onnx_ops.items():
        ops.add_row(op, str(count), info.converters[op] or "[red]unsupported[/red]")
    console.print(ops)
    unsupported = [op for op, src in info.converters.items() if src is None]
    if unsupported:
        console.print(f"unsupported ONNX ops: {', '.join(sorted(unsupported))}")
    if info.graph is None:
        console.print(f"op graph unavailable: {info.graph_error}")
        return
    graph = info.graph
    console.print(f"{len(graph.nodes)} Relax ops, {graph.flops / 1e9:.3f} GFLOP, {graph.num_params:,} "
                  f"parameters ({graph.param_bytes / 2**20:.2f} MiB)")
    for target in info.targets:
        missing = graph.unsupported(target)
        console.print(f"target {target}: " + (
            "all ops supported" if not missing else
            "unsupported " + ", ".join(f"{op} x{n}" for op, n in sorted(missing.items()))))


@cli.command("list")
@click.argument("what", type=click.Choice(["targets", "ops", "passes"]))
@click.option("--opset", type=int, default=None, help="Opset for `list ops` (default: newest).")
def list_cmd(what: str, opset: int | None) -> None:
    """List registered targets, supported ONNX ops, or each target's pass pipeline."""
    from .targets import all_targets

    if what == "targets":
        table = Table()
        for col in ("target", "kind", "device", "features", "description"):
            table.add_column(col)
        for t in all_targets():
            table.add_row(t.name, t.kind.value, t.device_type,
                          ", ".join(sorted(f.value for f in t.features)), t.description)
        console.print(table)
        from .devices import all_specs

        devices = Table(title="device specs (--arch NAME; datasheet numbers, not measurements)",
                        title_justify="left")
        for col in ("device", "target", "arch", "fp32 TFLOP/s", "memory GB", "GB/s", "description"):
            devices.add_column(col)
        for spec in all_specs().values():
            devices.add_row(spec.name, spec.target, spec.arch, f"{spec.peak_flops.get('float32', 0) / 1e12:g}",
                            f"{spec.memory_bytes / 1e9:g}", f"{spec.memory_bandwidth / 1e9:g}", spec.description)
        console.print(devices)
    elif what == "ops":
        import onnx

        from .frontends.onnx.importer import supported_ops

        opset = opset or onnx.defs.onnx_opset_version()
        ops = supported_ops(opset)
        table = Table(title=f"ONNX ops at opset {opset}: {len(ops)}", title_justify="left")
        table.add_column("op")
        table.add_column("converter")
        for op, source in ops.items():
            table.add_row(op, source)
        console.print(table)
    else:
        from .options import CompileOptions

        for t in all_targets():
            table = Table(title=f"target {t.name} (layout stages only with --layout NHWC)", title_justify="left")
            table.add_column("#", justify="right")
            table.add_column("stage")
            table.add_column("what it does")
            for i, stage in enumerate(t.backend.stages(CompileOptions(layout="NHWC", num_threads=2)), 1):
                table.add_row(str(i), stage.name, stage.description)
            console.print(table)


@cli.command("tune")
@click.argument("model", type=click.Path(path_type=Path))
@target_option
@click.option("--trials", type=click.IntRange(min=1), metavar="N",
              help="Total trials for the model (trials already in the database count).")
@click.option("--db", "database", type=click.Path(path_type=Path), metavar="DIR",
              help="Tuning database directory: created, or resumed if it exists.")
@click.option("--max-trials-per-task", type=click.IntRange(min=1), default=64, show_default=True, metavar="N",
              help="Cap on the trials of one task.")
@click.option("--export-candidates", "export_dir", type=click.Path(path_type=Path), metavar="DIR",
              help="Measure elsewhere: write each task's candidate kernels, built, to DIR for "
                   "hetc/runtime/measure.py on the device (no device needed here; docs/tuning.md). With --db "
                   "holding imported measurements: the next round, chosen by a search they guide.")
@click.option("--per-task", type=click.IntRange(min=0), default=128, show_default=True, metavar="N",
              help="With --export-candidates: random schedules per task (beside the default one).")
@click.option("--cover", type=click.FloatRange(min=0, max=1, min_open=True), default=0.95, show_default=True,
              help="With --export-candidates: export the costliest tasks making up this share of the model.")
@click.option("--import-measurements", "import_paths", nargs=2, type=click.Path(path_type=Path),
              metavar="CANDIDATES MEASURED", help="Store the device's timings (measure.py's JSON) of "
              "exported candidates in --db.")
@shape_option
@click.option("--constant-input", "constant_inputs", multiple=True, metavar="NAME=FILE.npy",
              help="Freeze an input, as for `hetc compile` (give the same ones to both).")
@click.option("--layout", type=click.Choice(["NHWC", "NCHW"]), default=None,
              help="Conv layout, as for `hetc compile` (give the same one to both).")
@click.option("--threads", type=click.IntRange(min=0), default=0,
              help="Threads the kernels are measured with (0 = all cores).")
@arch_option
@functools.partial(dim_options, plan_help="Size of a symbolic dim to tune at (repeatable, or DIM=SIZE,DIM=SIZE); "
                                          "required for every symbolic dim. Give compile the same --dim.")
def tune_cmd(model: Path, target: str, trials: int | None, database: Path | None, max_trials_per_task: int,
             export_dir: Path | None, per_task: int, cover: float, import_paths, input_shapes,
             constant_inputs, layout, threads: int, arch: str | None, dims, plan_shape) -> None:
    """Auto-tune MODEL's kernels (MetaSchedule, XGBoost cost model) into a database for `compile --db`.

    The kernels are measured on the target's device: `--target cuda` needs an NVIDIA GPU here,
    unless the measuring is done elsewhere (--export-candidates, then --import-measurements).
    A model with symbolic dims is tuned at the sizes --plan-shape gives (docs/dynamic-shapes.md)."""
    from .options import parse_arch

    if export_dir is not None:
        from .tuning.offline import export_candidates

        summary = export_candidates(model, export_dir, target, per_task=per_task, cover=cover, database=database,
                                    input_shapes=_shapes(input_shapes), layout=layout, arch=parse_arch(arch),
                                    dims=_dim_ranges(dims), plan_shape=_plan_shape(plan_shape),
                                    constant_inputs=_constants(constant_inputs),
                                    log=lambda line: console.print(line, soft_wrap=True, markup=False))
        console.print(f"{summary.candidates} candidates of {summary.tasks} of {summary.tasks_total} task(s) "
                      f"({summary.cover:.0%} of the estimated cost), {summary.seconds:.0f} s -> {export_dir}; "
                      f"measure them on the device: python3 hetc/runtime/measure.py {export_dir} measured.json",
                      soft_wrap=True)
        return
    if database is None:
        raise UsageError("tuning needs a database directory (--db DIR) to store its trials")
    if import_paths:
        from .tuning.offline import import_measurements

        summary = import_measurements(import_paths[0], import_paths[1], database)
        table = Table(title=f"measured on {summary.device}", title_justify="left")
        for column in ("task", "calls", "default us", "best us", "default / best"):
            table.add_column(column, justify="left" if column == "task" else "right")
        default_total = best_total = 0.0
        for r in summary.rows:
            fmt = [f"{r[k] * 1e6:,.1f}" if r[k] else "-" for k in ("default_s", "best_s")]
            gain = f"{r['default_s'] / r['best_s']:.2f}x" if r["default_s"] and r["best_s"] else "-"
            table.add_row(r["task"], str(r["weight"]), *fmt, gain)
            if r["default_s"] and r["best_s"]:
                default_total += r["weight"] * r["default_s"]
                best_total += r["weight"] * r["best_s"]
        console.print(table)
        console.print(f"{summary.measured} measured candidates of {summary.tasks} task(s) ({summary.failed} did not "
                      "run)" + (f"; these kernels per model run: {default_total * 1e3:.3f} ms default, "
                                f"{best_total * 1e3:.3f} ms best" if best_total else "") + f" -> {database}",
                      soft_wrap=True)
        return
    if trials is None:
        raise UsageError("give --trials N (or --export-candidates DIR / --import-measurements)")
    from .tuning import tune

    result = tune(model, target=target, trials=trials, database=database, input_shapes=_shapes(input_shapes),
                  max_trials_per_task=max_trials_per_task, layout=layout, num_threads=threads,
                  constant_inputs=_constants(constant_inputs), arch=parse_arch(arch), dims=_dim_ranges(dims),
                  plan_shape=_plan_shape(plan_shape), progress=console)
    tasks = len(result.tasks)
    if not result.trials_added:
        console.print(f"{result.model}: the database holds {result.trials} trials for its {tasks} task(s); "
                      f"nothing to tune for --trials {trials} (raise it to tune more) -> {database}",
                      soft_wrap=True)
        return
    latency = result.estimated_latency
    measured = sum(1 for t in result.tasks if t.best_seconds is not None)
    console.print(f"tuned {result.model} for {result.target}: {result.trials_added} new trials, {result.trials} in "
                  f"the database; estimated model latency {'-' if latency is None else f'{latency * 1e6:,.1f} us'} "
                  f"({measured} of {tasks} tasks measured); {result.seconds:.0f} s "
                  f"({result.seconds_per_trial:.1f} s/trial) -> {database}", soft_wrap=True)
    if result.symbolic:
        won = sum(1 for c in result.symbolic.values() if c["tuned_s"] <= c["default_s"])
        console.print(f"symbolic kernels: {won} of {len(result.symbolic)} tuned schedules beat the default one "
                      "on the symbolic kernel (compile --db uses those, the default schedule elsewhere)",
                      soft_wrap=True)


@cli.command("bench")
@click.argument("model", type=click.Path(path_type=Path))
@target_option
@shape_option
@click.option("--inputs", "inputs_path", type=click.Path(path_type=Path),
              help=".npz inputs (default: seeded normal floats, zero integers).")
@click.option("--repeat", type=click.IntRange(min=1), default=10, show_default=True, help="Timed runs of each.")
@click.option("--warmup", type=click.IntRange(min=0), default=2, show_default=True)
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Also write the results as JSON.")
@click.option("--db", "database", type=click.Path(path_type=Path), default=None, metavar="DIR",
              help="Tuning database written by `hetc tune`: benchmark the tuned model.")
def bench_cmd(model: Path, target: str, input_shapes, inputs_path, repeat: int, warmup: int, json_path,
              database: Path | None) -> None:
    """Median latency of hetc and onnxruntime on MODEL, measured alternately in one process."""
    from . import api
    from .benchmark import compare_with_onnxruntime, random_inputs

    if database is not None:
        from .tuning.database import read_metadata

        read_metadata(database, None)
    compiled = api.compile(model, target=target, input_shapes=_shapes(input_shapes), database=database)
    inputs = load_npz(inputs_path) if inputs_path else random_inputs(compiled.manifest.inputs)
    measured = compare_with_onnxruntime(model, compiled, inputs, repeat, warmup)
    results, ratio = measured["results"], measured["hetc_over_ort"]
    table = Table(title=f"{model.name} on {target}, {repeat} runs", title_justify="left")
    for col in ("runtime", "median ms", "min ms"):
        table.add_column(col, justify="left" if col == "runtime" else "right")
    for name, r in results.items():
        table.add_row(name, f"{r['median_ms']:.3f}", f"{r['min_ms']:.3f}")
    console.print(table)
    console.print(f"hetc / onnxruntime median latency: {ratio:.2f}x")
    if json_path:
        payload = {"model": str(model), "target": target, "results": results, "hetc_over_ort": ratio,
                   "hetc_version": __version__}
        try:
            Path(json_path).write_text(json.dumps(payload, indent=2) + "\n")
        except OSError as err:
            raise OutputPathError(f"{json_path}: cannot write: {err.strerror}") from err


def _one_line(message: str) -> str:
    return " ".join(part.strip() for part in str(message).splitlines() if part.strip())


# Commands run in a child process that a fatal fault (SIGSEGV in a TVM pass) cannot silence:
# the parent reports it in one line (hetc/crash.py).
GUARDED_COMMANDS = {"compile"}


def main(argv: list[str] | None = None, *, guard: bool | None = None) -> int:
    """Console entry point: runs the CLI and turns errors into one line and an exit code.
    ``guard``: run ``GUARDED_COMMANDS`` in a forked child (``crash.run_guarded``); default: when
    ``argv`` is None (``hetc``, ``python -m hetc``), not for in-process callers passing ``argv``."""
    args = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in args
    if debug:  # accepted anywhere on the line, not only before the command
        args = ["--debug"] + [a for a in args if a != "--debug"]
    if not args:
        click.echo(cli.get_help(click.Context(cli, info_name="hetc")))
        return 0
    command = next((a for a in args if not a.startswith("-")), None)
    if (argv is None if guard is None else guard) and command in GUARDED_COMMANDS:
        return crash.run_guarded(lambda: _run(args, debug), debug)
    return _run(args, debug)


def _run(args: list[str], debug: bool) -> int:
    try:
        result = cli.main(args=args, prog_name="hetc", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except click.exceptions.Exit as err:
        return err.exit_code
    except click.Abort:
        click.echo("hetc: aborted", err=True)
        return 130
    except click.ClickException as err:  # usage errors: bad options, missing arguments
        click.echo(f"hetc: error: {_one_line(err.format_message())}", err=True)
        return 2
    except HetcError as err:
        if debug:
            traceback.print_exc()
        click.echo(f"hetc: error: {_one_line(str(err))}", err=True)
        return err.exit_code
    except KeyboardInterrupt:
        click.echo("hetc: interrupted", err=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
