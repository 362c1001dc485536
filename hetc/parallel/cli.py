"""``hetc parallel plan``: choose data, tensor and pipeline parallelism for a model on a mesh.

The ``parallel`` group is mounted on the main ``hetc`` command (``hetc/cli.py``); user errors
are ``UsageError``s, which the main command prints as one line.
"""

from __future__ import annotations

import json
import re
import sys

import click
from rich.console import Console
from rich.table import Table

from ..errors import UsageError
from ..options import parse_plan_shapes

console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)

_UNITS = {"": 1e9, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> float:
    """``40GB``, ``37.5GiB``, ``4e10B``; a bare number is GB."""
    match = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([a-z]*)\s*", text.lower())
    if not match or match.group(2) not in _UNITS:
        raise UsageError(f"invalid --memory-limit {text!r}; expected e.g. 40GB, 37.5GiB or 4e10B "
                         "(a bare number is GB)")
    try:
        value = float(match.group(1)) * _UNITS[match.group(2)]
    except ValueError:
        raise UsageError(f"invalid --memory-limit {text!r}") from None
    if value <= 0:
        raise UsageError(f"--memory-limit {text}: must be positive")
    return value


parallel = click.Group("parallel", help="Plan data, tensor and pipeline parallelism over a device mesh.")


@parallel.command("plan")
@click.argument("model")
@click.option("--mesh", required=True, metavar="[NODESx]DEVICESxSPEC",
              help="8xH100 (one node), 2x8xA100 (2 nodes of 8); SPEC: H100, H200, A100, L4 or a device spec.")
@click.option("--batch", required=True, type=click.IntRange(min=1), metavar="B",
              help="Global batch (samples per step).")
@click.option("--seq", type=click.IntRange(min=1), default=None,
              help="Sequence length (overrides the preset's).")
@click.option("--training/--inference", default=False, show_default=True,
              help="A training step (forward, backward, Adam) or one forward pass.")
@click.option("--zero", type=click.IntRange(0, 3), default=None,
              help="ZeRO stage for --training (default: try 0-3 and keep the best).")
@click.option("--memory-limit", default=None, metavar="SIZE",
              help="Per device, e.g. 40GB or 37.5GiB; a bare number is GB (default: 90% of device memory).")
@click.option("--efficiency", type=click.FloatRange(0, 1, min_open=True), default=0.5, show_default=True,
              help="Achieved fraction of the device's peak FLOP/s.")
@click.option("--top", type=click.IntRange(min=0), default=5, show_default=True, help="Runners-up to show.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON instead of tables.")
@click.option("--plan-shape", "plan_shape", multiple=True, metavar="DIM=SIZE",
              help="Size of an ONNX model's symbolic dim (repeatable), e.g. seq=128; default 1.")
def plan_cmd(model: str, mesh: str, batch: int, seq: int | None, training: bool, zero: int | None,
             memory_limit: str | None, efficiency: float, top: int, as_json: bool, plan_shape) -> None:
    """Choose dp x tp x pp, micro-batches, pipeline schedule and ZeRO stage for MODEL on a mesh.

    MODEL is an ONNX file, a preset (gpt2-xl, gpt3-13b, gpt3-175b, bert-base, bert-large, with
    optional overrides such as gpt3-13b:seq=1024,dtype=fp32) or a spec such as
    gpt:layers=24,hidden=2048,heads=16,seq=2048,vocab=50257. Times and memory are model
    predictions (alpha-beta collectives, roofline compute), not measurements.
    """
    from .mesh import parse_mesh
    from .model import load_model
    from .planner import PlanOptions, plan_parallel

    if zero is not None and not training:
        raise UsageError("--zero applies to --training only")
    options = PlanOptions(batch=batch, training=training, zero=zero, efficiency=efficiency, top=top,
                          memory_limit=parse_bytes(memory_limit) if memory_limit is not None else None)
    sizes = parse_plan_shapes(plan_shape)
    search = plan_parallel(load_model(model, seq, sizes), parse_mesh(mesh), options)
    if as_json:
        click.echo(json.dumps(search.to_json(), indent=2))
        return
    _print(search)


def _gb(b: float) -> str:
    return f"{b / 1e9:.1f}"


def _comm(plan) -> str:
    return " / ".join(_gb(plan.comm[kind].bytes_sent) for kind in ("tensor", "pipeline", "data"))


def _schedule(plan) -> str:
    return "-" if plan.pp == 1 else str(plan.schedule)


def _print(search) -> None:
    model, mesh, opts, p = search.model, search.mesh, search.options, search.chosen
    mode = "training (Adam, mixed precision)" if opts.training and model.weight_bytes < 4 else \
        "training (Adam)" if opts.training else "inference (one forward pass)"
    console.print(f"[bold]{model.name}[/bold] ({model.params / 1e9:.3g}B parameters, {model.dtype}, "
                  f"{model.flops / 1e12:.3g} TFLOP per sample forward) on {mesh} ({mesh.size} x "
                  f"{mesh.spec.description}), global batch {opts.batch}, {mode}")
    rejected = ", ".join(f"{n} {reason}" for reason, n in search.rejected.items()) or "none rejected"
    console.print(f"memory limit {_gb(search.memory_limit)} GB per device; compute at {opts.efficiency:g} of "
                  f"peak {model.dtype}; {search.considered} candidates evaluated ({rejected})")
    chosen = Table(title="chosen plan (model prediction)", title_justify="left", show_header=False)
    chosen.add_column(style="bold")
    chosen.add_column()
    m = p.memory
    rows = [
        ("degrees", f"data {p.dp} x tensor {p.tp} x pipeline {p.pp}"),
        ("micro-batches", f"{p.micro_batches} of {p.micro_batch_size} sample(s) per data-parallel rank"),
        ("schedule", f"{_schedule(p)}, bubble {p.bubble:.1%} of the pipeline time"),
        *([("ZeRO", f"stage {p.zero}")] if opts.training else []),
        ("step time", (f"{p.step_seconds * 1e3:,.1f} ms (pipeline {p.pipeline_seconds * 1e3:,.1f} + "
                       f"data-parallel sync {p.data_parallel_seconds * 1e3:,.1f}); "
                       f"{opts.batch / p.step_seconds:,.1f} samples/s")),
        ("memory/device", (f"{_gb(m.total)} GB: weights {_gb(m.weights)}, gradients {_gb(m.gradients)}, "
                           f"optimizer {_gb(m.optimizer)}, activations {_gb(m.activations)}")),
        ("comm/device", f"{_comm(p)} GB per step (tensor / pipeline / data parallel)"),
        ("stages", "; ".join(f"{a} .. {b}" for a, b in p.stages)),
    ]
    for key, value in rows:
        chosen.add_row(key, value)
    console.print(chosen)
    if len(search.plans) > 1:
        table = Table(title="runners-up (the best plan for other degrees)", title_justify="left")
        for col in ("dp", "tp", "pp", "micro-batches", "schedule", "ZeRO", "bubble", "step ms", "memory GB",
                    "comm GB tp/pp/dp"):
            table.add_column(col, justify="left" if col in ("schedule",) else "right")
        for r in search.plans[1:]:
            table.add_row(str(r.dp), str(r.tp), str(r.pp), f"{r.micro_batches} x {r.micro_batch_size}",
                          _schedule(r), "-" if r.zero is None else str(r.zero), f"{r.bubble:.1%}",
                          f"{r.step_seconds * 1e3:,.1f}", _gb(r.memory.total), _comm(r))
        console.print(table)
    console.print("predictions from the α-β and roofline models, not measurements")
