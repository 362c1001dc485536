"""The parallel planner: data x tensor x pipeline degrees, micro-batches, schedule and ZeRO
stage for a model on a device mesh, by predicted step time under a memory limit per device.

Search: every dp x tp x pp = mesh size with tp dividing the devices of a node (tensor
parallelism stays on NVLink) and the model's attention heads, pp at most the layers, dp
dividing the global batch B; every micro-batch count m dividing B/dp (micro-batch size
b = B/(dp m)); the schedules of ``schedule.py`` (interleaved with v = 2 and 4 chunks when m is
a multiple of p and there are at least v layers per stage); ZeRO stages 0-3 when training, or
the one ``PlanOptions.zero`` names (with dp = 1 the stages coincide: only the first is tried).
For each candidate the stages come from the exact DP of ``stages.py`` under the memory limit.

Time model (predictions, never measurements):

- a layer's forward time on a device is a roofline, as in ``hetc/placement/cost.py``:
  max(FLOPs / (peak FLOP/s for the model's dtype x efficiency), (its weights + twice its
  activations) / memory bandwidth) + the spec's launch overhead, FLOPs, weights and activations
  divided by t where the layer is split; training adds the backward pass at twice the forward
  (3x in all);
- plus its tensor-parallel collectives (``model.SHARDINGS``: Megatron's two all-reduces of
  b s h values per transformer block forward, two more backward) on the tensor-parallel group,
  not overlapped with compute;
- a stage's time per micro-batch adds the point-to-point send of what is live at its end (an
  activation forward, and its gradient back when training) to the next stage, 1/t of it per
  tensor-parallel rank (Narayanan et al. 2021's scatter/gather optimisation), v times when
  interleaved, over the pipeline group's slowest link (the network once the stages span nodes:
  the stages run in lockstep, so the slowest boundary sets the pace);
- the pipeline step is ``Schedule.step_seconds`` of the slowest stage;
- training adds the data-parallel gradient synchronisation after the pipeline flush, not
  overlapped with the backward pass (a conservative bound): ZeRO 0/1 one all-reduce of the
  gradients; ZeRO 2 a reduce-scatter per micro-batch and an all-gather of the updated weights;
  ZeRO 3 per micro-batch an all-gather of the weights forward and backward and a
  reduce-scatter (Rajbhandari et al. 2020, section 7: 1.5x plain data parallelism at m = 1).
  The optimizer step itself is not counted.

Ranks are laid out tensor-parallel innermost, then data, then pipeline (``mesh.py``), so those
groups' links follow. Memory per device is ``memory.py``'s; the limit defaults to 90% of the
device's memory. Plans are ranked by step time, then memory; the runners-up are the best plan
of each other (dp, tp, pp).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..errors import UsageError
from .collectives import COLLECTIVES, NONE, Comm, all_gather, all_reduce, p2p, reduce_scatter
from .memory import Memory, activations, layer_activations, layer_params, model_states, optimizer_bytes
from .mesh import Mesh
from .model import Model
from .schedule import Schedule
from .stages import Infeasible, StageProblem, memory_lower_bound, partition


@dataclass(frozen=True)
class PlanOptions:
    batch: int  # global batch: samples per step
    training: bool = False  # forward, backward and optimizer step (else one forward pass)
    zero: int | None = None  # ZeRO stage when training; None: try 0-3
    memory_limit: float | None = None  # bytes per device; None: 90% of the device's memory
    efficiency: float = 0.5  # achieved fraction of peak FLOP/s (model FLOPs utilisation)
    top: int = 5  # runners-up to keep


@dataclass(frozen=True)
class Plan:
    dp: int
    tp: int
    pp: int
    micro_batches: int
    micro_batch_size: int
    schedule: Schedule
    zero: int | None  # None: inference
    step_seconds: float
    pipeline_seconds: float  # of step_seconds, the pipeline (compute, tensor-parallel and p2p)
    bubble: float  # idle share of the pipeline
    memory: Memory  # of the fullest device
    comm: dict[str, Comm]  # per device per step: "tensor", "pipeline", "data" (the busiest stage's)
    stages: tuple[tuple[str, str], ...]  # first and last layer of each stage

    @property
    def data_parallel_seconds(self) -> float:
        return self.step_seconds - self.pipeline_seconds

    def to_json(self) -> dict:
        return {
            "dp": self.dp, "tp": self.tp, "pp": self.pp, "micro_batches": self.micro_batches,
            "micro_batch_size": self.micro_batch_size, "schedule": self.schedule.name,
            "chunks": self.schedule.chunks, "zero": self.zero, "step_seconds": self.step_seconds,
            "pipeline_seconds": self.pipeline_seconds, "data_parallel_seconds": self.data_parallel_seconds,
            "bubble": self.bubble,
            "memory_bytes": {"weights": self.memory.weights, "gradients": self.memory.gradients,
                             "optimizer": self.memory.optimizer, "activations": self.memory.activations,
                             "total": self.memory.total},
            "comm_bytes": {kind: c.bytes_sent for kind, c in self.comm.items()},
            "comm_seconds": {kind: c.seconds for kind, c in self.comm.items()},
            "stages": [list(s) for s in self.stages],
        }


@dataclass(frozen=True)
class PlanSearch:
    model: Model
    mesh: Mesh
    options: PlanOptions
    memory_limit: float  # bytes per device
    plans: tuple[Plan, ...]  # the chosen plan, then the runners-up
    considered: int  # candidates evaluated
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> candidates (or degree choices)

    @property
    def chosen(self) -> Plan:
        return self.plans[0]

    def to_json(self) -> dict:
        return {
            "model": self.model.name, "params": self.model.params, "dtype": self.model.dtype,
            "flops_per_sample": self.model.flops,
            "mesh": str(self.mesh), "devices": self.mesh.size, "batch": self.options.batch,
            "training": self.options.training, "efficiency": self.options.efficiency,
            "memory_limit_bytes": self.memory_limit, "source": "model prediction (alpha-beta and roofline)",
            "chosen": self.chosen.to_json(), "runners_up": [p.to_json() for p in self.plans[1:]],
            "considered": self.considered, "rejected": self.rejected,
        }


@dataclass(frozen=True)
class _LayerCosts:
    """Per-layer numbers at one (tp, micro-batch size), per device and micro-batch."""

    seconds: np.ndarray  # compute (forward, + backward when training) and tensor-parallel comm
    tensor_bytes: np.ndarray  # sent by tensor-parallel collectives
    tensor_seconds: np.ndarray
    params: np.ndarray
    activations: np.ndarray  # bytes kept per micro-batch (training)
    send_bytes: np.ndarray  # to the next stage per message
    working_set: float  # bytes: the largest layer's activations (inference)


@dataclass(frozen=True)
class _OverMemory:
    needs: float  # bytes per device no split goes below
    label: str


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _gb(b: float) -> str:
    return f"{b / 1e9:.3g} GB"


def _layer_costs(model: Model, mesh: Mesh, tp: int, b: int, training: bool,
                 flops_per_s: float) -> _LayerCosts:
    w = model.weight_bytes
    group = mesh.group(tp, 1)
    passes = 3.0 if training else 1.0
    rows = []
    for layer in model.layers:
        share = layer.share(tp)
        acts = layer_activations(layer, tp)
        traffic = layer.params / share * w + 2 * b * acts
        roofline = max(layer.flops * b / share / flops_per_s, traffic / mesh.spec.memory_bandwidth)
        compute = passes * (roofline + mesh.spec.launch_overhead)
        kinds = layer.sharding.forward + (layer.sharding.backward if training else ())
        comm = NONE
        if tp > 1:
            comm = sum((COLLECTIVES[kind](layer.tp_bytes * b, group, mesh) for kind in kinds), NONE)
        rows.append((compute + comm.seconds, comm.bytes_sent, comm.seconds, layer_params(layer, tp), acts * b,
                     layer.output_bytes * b / tp))
    cols = np.array(rows, dtype=float).T
    return _LayerCosts(*cols, working_set=activations(model.layers, tp, b, 1.0, training=False))


def _data_parallel_comm(params: float, model: Model, mesh: Mesh, tp: int, dp: int, zero: int, m: int) -> Comm:
    """Gradient synchronisation per step of a device holding ``params`` parameters."""
    group = mesh.group(dp, tp)
    grads = weights = params * model.weight_bytes
    if zero <= 1:
        return all_reduce(grads, group, mesh)
    if zero == 2:
        return reduce_scatter(grads, group, mesh) * m + all_gather(weights, group, mesh)
    return (all_gather(weights, group, mesh) * 2 + reduce_scatter(grads, group, mesh)) * m


def _schedules(training: bool, p: int, m: int, layers: int) -> list[Schedule]:
    if p == 1:
        return [Schedule("1f1b" if training else "gpipe")]
    out = [Schedule("gpipe")] + ([Schedule("1f1b")] if training else [])
    return out + [Schedule("interleaved", v) for v in (2, 4) if m % p == 0 and layers >= p * v]


def _evaluate(model: Model, mesh: Mesh, costs: _LayerCosts, degrees: tuple[int, int, int], m: int, b: int,
              schedule: Schedule, zero: int | None, limit: float, training: bool) -> Plan | _OverMemory:
    dp, tp, pp = degrees
    v = schedule.chunks
    messages = 2 if training else 1  # activation forward, gradient backward
    link = mesh.link(mesh.group(pp, tp * dp))
    send = np.where(costs.send_bytes > 0, link.latency + costs.send_bytes / link.bandwidth, 0.0) * messages
    per_param = model_states(1.0, model.weight_bytes, training, zero or 0, dp).total  # states are linear
    state = costs.params * per_param
    problem = StageProblem(
        times=costs.seconds, send=send * v, state_bytes=state,
        activation_bytes=costs.activations if training else np.zeros_like(state),
        in_flight=np.array([schedule.in_flight(pp, m, k) if training else 0.0 for k in range(pp)]),
        limit=limit - (0.0 if training else costs.working_set), names=tuple(x.name for x in model.layers))
    label = f"dp={dp} tp={tp} pp={pp} m={m} {schedule}" + (f" ZeRO-{zero}" if training else "")
    try:
        split = partition(problem)
    except Infeasible:
        return _OverMemory(memory_lower_bound(problem) + (0.0 if training else costs.working_set), label)
    memories, comms = [], []
    for k, stage in enumerate(split.stages()):
        params = float(np.sum(costs.params[stage.start:stage.stop]))
        held = model.layers[stage.start:stage.stop] if training else model.layers
        acts = activations(held, tp, b, problem.in_flight[k], training)
        states = model_states(params, model.weight_bytes, training, zero or 0, dp)
        memories.append(states + Memory(activations=acts))
        last = stage.stop - 1 if k < pp - 1 else None
        comms.append({
            "tensor": Comm(float(np.sum(costs.tensor_seconds[stage.start:stage.stop])),
                           float(np.sum(costs.tensor_bytes[stage.start:stage.stop]))) * m,
            "pipeline": p2p(costs.send_bytes[last], link) * (messages * v * m) if last is not None else NONE,
            "data": _data_parallel_comm(params, model, mesh, tp, dp, zero or 0, m) if training else NONE,
        })
    pipeline = schedule.step_seconds(pp, m, split.objective)
    data = max(c["data"].seconds for c in comms)
    comm = {kind: max((c[kind] for c in comms), key=lambda c: c.seconds) for kind in comms[0]}
    names = [layer.name for layer in model.layers]
    return Plan(dp, tp, pp, m, b, schedule, zero, pipeline + data, pipeline, schedule.bubble_fraction(pp, m),
                max(memories, key=lambda x: x.total), comm,
                tuple((names[s.start], names[s.stop - 1]) for s in split.stages()))


def _peak(mesh: Mesh, dtype: str) -> float:
    peak = mesh.spec.peak_flops.get(dtype)
    if not peak:
        raise UsageError(f"device spec '{mesh.spec.name}' gives no peak FLOP/s for {dtype}; "
                         f"it has {', '.join(mesh.spec.peak_flops) or 'none'}")
    return float(peak)


def _check(options: PlanOptions) -> None:
    if options.batch < 1:
        raise UsageError(f"--batch {options.batch}: must be at least 1")
    if not 0 < options.efficiency <= 1:
        raise UsageError(f"--efficiency {options.efficiency}: must be in (0, 1]")
    if options.zero is not None and (not options.training or options.zero not in (0, 1, 2, 3)):
        raise UsageError(f"--zero {options.zero}: ZeRO stages are 0-3, for --training only")
    if options.memory_limit is not None and options.memory_limit <= 0:
        raise UsageError("--memory-limit must be positive")


def _no_plan(model: Model, mesh: Mesh, options: PlanOptions, limit: float, rejected: Counter,
             closest: _OverMemory | None) -> Infeasible:
    """One line: why nothing fits, with the nearest candidate and, when it binds, the bound
    every plan is under (the model states spread over all devices)."""
    per_param = model.weight_bytes + (model.weight_bytes + optimizer_bytes(model.weight_bytes)
                                      if options.training else 0)
    floor = sum(layer.params for layer in model.layers) * per_param / mesh.size
    reasons = "; ".join(f"{n} {reason}" for reason, n in rejected.most_common())
    text = f"no parallel plan for {model.name} on {mesh} fits in {_gb(limit)} per device ({reasons})"
    if closest is not None:
        text += f"; the closest, {closest.label}, needs at least {_gb(closest.needs)}"
    if floor > limit:
        what = "weights, gradients and Adam states" if options.training else "weights"
        text += (f"; the {what} alone ({per_param} bytes per parameter) need {_gb(floor)} per device "
                 f"even spread over all {mesh.size} devices")
    return Infeasible(text)


def plan_parallel(model: Model, mesh: Mesh, options: PlanOptions) -> PlanSearch:
    """Search the plans of ``model`` on ``mesh`` (module docstring); raises ``Infeasible``
    (one line) when none fits."""
    _check(options)
    limit = options.memory_limit or 0.9 * mesh.spec.memory_bytes
    flops_per_s = _peak(mesh, model.dtype) * options.efficiency
    training, n = options.training, len(model.layers)
    zeros: tuple[int | None, ...] = ((options.zero,) if options.zero is not None else (0, 1, 2, 3)) \
        if training else (None,)
    rejected: Counter[str] = Counter()
    best: dict[tuple[int, int, int], Plan] = {}
    closest: _OverMemory | None = None
    considered = 0
    costs_at: dict[tuple[int, int], _LayerCosts] = {}  # (tp, micro-batch size): shared by pp and m
    for tp in _divisors(mesh.devices_per_node):
        if model.heads and model.heads % tp:
            rejected[f"tensor-parallel degrees not dividing the {model.heads} heads"] += 1
            continue
        for pp in _divisors(mesh.size // tp):
            dp = mesh.size // (tp * pp)
            if pp > n:
                rejected["pipeline degrees above the layer count"] += 1
                continue
            if options.batch % dp:
                rejected["data-parallel degrees not dividing the batch"] += 1
                continue
            for m in _divisors(options.batch // dp):
                b = options.batch // (dp * m)
                if (tp, b) not in costs_at:
                    costs_at[tp, b] = _layer_costs(model, mesh, tp, b, training, flops_per_s)
                costs = costs_at[tp, b]
                for schedule in _schedules(training, pp, m, n):
                    for zero in zeros if dp > 1 else zeros[:1]:
                        considered += 1
                        result = _evaluate(model, mesh, costs, (dp, tp, pp), m, b, schedule, zero, limit,
                                           training)
                        if isinstance(result, _OverMemory):
                            rejected["candidates over the memory limit"] += 1
                            if closest is None or result.needs < closest.needs:
                                closest = result
                        elif (dp, tp, pp) not in best or _rank(result) < _rank(best[dp, tp, pp]):
                            best[dp, tp, pp] = result
    if not best:
        raise _no_plan(model, mesh, options, limit, rejected, closest)
    plans = sorted(best.values(), key=_rank)[: options.top + 1]
    return PlanSearch(model, mesh, options, limit, tuple(plans), considered, dict(rejected.most_common()))


def _rank(plan: Plan) -> tuple[float, float, int, int]:
    return (plan.step_seconds, plan.memory.total, plan.pp, plan.tp)
