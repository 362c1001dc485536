"""The placement cost model: how long each op graph node takes on each device, and each transfer.

Every number carries its source (``Cost.source``):

- ``"<target>-estimate:<spec>"``: the backend's own model, where it has one
  (``Backend.cost``; the FPGA's: trip counts and reuse factors of its HLS kernels at the
  spec's clock, ``hetc/backends/fpga/estimates.py``);
- ``"roofline:<spec>"``: ``max(flops / peak[dtype], bytes / memory bandwidth) + launch
  overhead`` from the device spec (``hetc/devices``; datasheet numbers, or measured for the CPU
  of ``dev-cpu.json``), times the spec's measured ``kernel_time_scale`` where a real device was
  measured (``"roofline:<spec>*2.5(measured)"``);
- ``"link:<name>"`` for transfers: ``latency + bytes / bandwidth`` of the link between the two
  devices: the same device costs nothing, a peer of the same model uses ``peer_link``, the host
  and a device the device's ``host_link`` (its measured one where there is one), two devices
  of different models go through the host (latencies add, the slower bandwidth counts).

``problem(graph, devices)`` turns an ``OpGraph`` into the solver's arrays (``problem.Problem``):
node times (``inf`` where a target cannot run the node), the edges with the bytes of the
producer's result, weights resident per device, the model inputs each node reads (they arrive
on the first device) and the outputs it produces.

To give a backend its own model, set ``Backend.cost`` to ``(OpNode, DeviceSpec) -> seconds``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..devices import DeviceSpec, all_specs, get_spec
from ..errors import UsageError
from ..graph import OpGraph, OpNode
from ..targets import Target

# The spec a target's device gets unless --device names another.
DEFAULT_SPECS = {"cpu": "dev-cpu", "cuda": "nvidia-h100", "ascend": "ascend-910b", "fpga": "alveo-u250"}


@dataclass(frozen=True)
class Device:
    """A device of a compile: ``name`` ("cuda:0"), its target and its spec."""

    name: str
    target: Target
    spec: DeviceSpec


@dataclass(frozen=True)
class Cost:
    seconds: float
    source: str


def devices_for(targets: Sequence[Target], specs: Mapping[str, str] | None = None) -> list[Device]:
    """Device 0 of each target, with the spec ``specs`` names for it (target -> spec name) or
    the default one."""
    specs = dict(specs or {})
    unknown = sorted(set(specs) - {t.name for t in targets})
    if unknown:
        raise UsageError(f"--device names target(s) not in --target: {', '.join(unknown)}")
    out = []
    for t in targets:
        spec = get_spec(specs.get(t.name, DEFAULT_SPECS.get(t.name, "")))
        if spec.target != t.name:
            raise UsageError(f"device spec '{spec.name}' is for target '{spec.target}', not '{t.name}'")
        out.append(Device(f"{t.name}:0", t, spec))
    return out


def parse_device_specs(values: Sequence[str]) -> dict[str, str]:
    """``["cuda=nvidia-a100", ...]`` -> {target: spec name} (validated against the known specs)."""
    out = {}
    for value in values:
        target, sep, name = value.partition("=")
        if not sep or not target or not name:
            raise UsageError(f"invalid --device {value!r}; expected TARGET=SPEC, e.g. cuda=nvidia-a100")
        if name not in all_specs():
            raise UsageError(f"--device {value}: unknown device spec '{name}'; known: {', '.join(all_specs())}")
        out[target] = name
    return out


def node_cost(node: OpNode, device: Device) -> Cost | None:
    """The node's time on ``device`` (None: its target cannot run it)."""
    if not node.supported_by.get(device.target.name, False):
        return None
    spec = device.spec
    own = device.target.backend.cost
    if own is not None:
        seconds = own(node, spec)
        if seconds is not None:
            return Cost(seconds, f"{device.target.name}-estimate:{spec.name}")
    dtype = node.outputs[0].dtype if node.outputs else "float32"
    peak = spec.peak_flops.get(dtype) or spec.peak_flops.get("float32") or max(spec.peak_flops.values(), default=0)
    compute = node.flops / peak if peak else 0.0
    memory = (node.bytes_in + node.bytes_out) / spec.memory_bandwidth if spec.memory_bandwidth else 0.0
    scale = spec.kernel_time_scale  # measured / predicted on a real device (1 without a measurement)
    source = f"roofline:{spec.name}" + (f"*{scale:g}(measured)" if scale != 1.0 else "")
    return Cost(max(compute, memory) * scale + spec.launch_overhead, source)


def folded_nodes(graph: OpGraph) -> set[int]:
    """The nodes constant folding computes at compile time: they read no model input, only
    constants or other such nodes (a weight's reshape or transpose)."""
    folded: set[int] = set()
    for node in graph.nodes:  # topological order
        if node.input_bytes == 0 and all(p in folded for p in node.preds):
            folded.add(node.id)
    return folded


def link(a: Device, b: Device) -> tuple[float, float, str]:
    """(bandwidth bytes/s, latency s, name) from ``a`` to ``b``."""
    if a.name == b.name:
        return np.inf, 0.0, "same device"
    if a.spec.name == b.spec.name and a.spec.peer_link:
        return float(a.spec.peer_link["bandwidth"]), float(a.spec.peer_link["latency"]), a.spec.peer_link["name"]
    hops = [d.spec.effective_host_link for d in (a, b) if d.target.device_type != "cpu"]
    if not hops:  # two CPU devices: host memory
        hops = [a.spec.effective_host_link]
    bandwidth = min(float(h.get("bandwidth", np.inf)) for h in hops)
    latency = sum(float(h.get("latency", 0.0)) for h in hops)
    return bandwidth, latency, " + ".join(h.get("name", "link") for h in hops)


def contraction(graph: OpGraph) -> list[int | None]:
    """For each op graph node, the node it runs as part of: itself; the conv2d a following
    batch_norm folds into (``FoldBatchnormToConv2D``); or None for a node constant folding
    computes at compile time (``folded_nodes``): it runs nowhere."""
    folded = folded_nodes(graph)
    owner: list[int | None] = []
    for node in graph.nodes:
        if node.id in folded:
            owner.append(None)
            continue
        live = [p for p in dict.fromkeys(node.preds) if p not in folded]
        if node.op == "relax.nn.batch_norm" and len(live) == 1 and graph.nodes[live[0]].op == "relax.nn.conv2d":
            owner.append(owner[live[0]])
        else:
            owner.append(node.id)
    return owner


def problem(graph: OpGraph, devices: Sequence[Device], pins: Mapping[str, str] | None = None):
    """(``Problem``, sources, index) for ``graph`` on ``devices``. The problem's nodes are the
    op graph's nodes that run as themselves (``contraction``): ``index[i]`` is op graph node
    i's problem node (None: folded at compile time), ``sources[j][k]`` where problem node j's
    time on device k comes from. ``pins``: op graph node name -> device name."""
    from .problem import Problem

    owner = contraction(graph)
    keep = [node for node in graph.nodes if owner[node.id] == node.id]
    index: list[int | None] = [None if o is None else 0 for o in owner]
    position = {node.id: j for j, node in enumerate(keep)}
    for node in graph.nodes:
        if owner[node.id] is not None:
            index[node.id] = position[owner[node.id]]
    n, d = len(keep), len(devices)
    times = np.full((n, d), np.inf)
    sources = [[""] * d for _ in range(n)]
    for j, node in enumerate(keep):
        for k, device in enumerate(devices):
            cost = node_cost(node, device)
            if cost is not None:
                times[j, k], sources[j][k] = cost.seconds, cost.source
    memory, inputs, outputs = np.zeros(n), np.zeros(n), np.zeros(n)
    links: dict[tuple[int, int], float] = {}
    for node in graph.nodes:
        j = index[node.id]
        if j is None:
            continue
        memory[j] += node.weight_bytes
        inputs[j] += node.input_bytes
        outputs[j] += node.output_bytes
        for p in dict.fromkeys(node.preds):
            if index[p] is None:  # a folded constant: a weight of this node
                memory[j] += graph.nodes[p].bytes_out
            elif index[p] != j:
                links[index[p], j] = links.get((index[p], j), 0.0) + graph.nodes[p].bytes_out
    bandwidth, latency = np.full((d, d), np.inf), np.zeros((d, d))
    for a in range(d):
        for b in range(d):
            bandwidth[a, b], latency[a, b], _ = link(devices[a], devices[b])
    where = {dev.name: k for k, dev in enumerate(devices)}
    pinned = np.full(n, -1)
    by_name = {node.name: node.id for node in graph.nodes}
    for name, device in (pins or {}).items():
        if name not in by_name:
            raise UsageError(f"--pin names node '{name}', which the model does not have (see plan.json)")
        if device not in where:
            raise UsageError(f"--pin {name}={device}: no such device; devices: {', '.join(where)}")
        if index[by_name[name]] is not None:
            pinned[index[by_name[name]]] = where[device]
    capacity = np.array([dev.spec.memory_bytes or np.inf for dev in devices], dtype=float)
    pairs = sorted(links)
    prob = Problem(
        times=times, edges=np.array(pairs, dtype=np.int64).reshape(-1, 2),
        edge_bytes=np.array([links[e] for e in pairs]), bandwidth=bandwidth, latency=latency,
        memory=memory, capacity=capacity, pinned=pinned, input_bytes=inputs, output_bytes=outputs, home=0,
        names=tuple(node.name for node in keep), devices=tuple(dev.name for dev in devices))
    return prob, sources, index
