"""Device meshes: ``--mesh 8xH100`` (one node of 8 devices) or ``2x8xA100`` (nodes x devices).

A mesh is ``nodes`` identical nodes of ``devices_per_node`` devices of one device spec
(``hetc/devices``). Devices in a node talk over the spec's ``peer_link`` (NVLink), devices in
different nodes over its ``node_link`` (the network bandwidth each device has to itself, e.g.
one 400 Gb/s InfiniBand NIC per GPU in a DGX H100).

Ranks are numbered node by node, and a parallel plan lays its degrees out Megatron-style:
tensor parallel innermost (consecutive ranks), then data parallel, then pipeline parallel
outermost. A communication group is therefore ``size`` ranks ``stride`` apart (``group``), and
what matters for its cost is how many of its members share a node (``Group.per_node``).

To add a short name, add it to ``ALIASES``; any device spec name works as is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..devices import DeviceSpec, all_specs
from ..errors import UsageError

ALIASES = {"h100": "nvidia-h100", "h200": "nvidia-h200", "a100": "nvidia-a100", "l4": "nvidia-l4"}

_MESH = re.compile(r"^(?:(\d+)x)?(\d+)x(.+)$", re.IGNORECASE)


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth: float  # bytes/s each device can send (one direction)
    latency: float  # seconds per message (the alpha of the alpha-beta model)


@dataclass(frozen=True)
class Group:
    """``size`` ranks that communicate, ``per_node`` of them in each node they span."""

    size: int
    per_node: int

    @property
    def nodes(self) -> int:
        return -(-self.size // self.per_node)


@dataclass(frozen=True)
class Mesh:
    nodes: int
    devices_per_node: int
    spec: DeviceSpec
    intra: Link  # between devices of one node
    inter: Link | None  # between nodes (None for a single node)

    @property
    def size(self) -> int:
        return self.nodes * self.devices_per_node

    def group(self, size: int, stride: int) -> Group:
        """The group of ``size`` ranks ``stride`` apart (ranks 0, stride, 2*stride, ...)."""
        per_node = max(1, min(size, self.devices_per_node // stride))
        return Group(size, per_node)

    def link(self, group: Group) -> Link:
        """The slowest link a group's members use: the network once it spans nodes."""
        return self.intra if group.nodes == 1 or self.inter is None else self.inter

    def __str__(self) -> str:
        prefix = f"{self.nodes}x" if self.nodes > 1 else ""
        return f"{prefix}{self.devices_per_node}x{self.spec.name}"


def _link(spec: DeviceSpec, key: str) -> Link:
    data = getattr(spec, key)
    return Link(str(data.get("name", key)), float(data["bandwidth"]), float(data.get("latency", 0.0)))


def parse_mesh(text: str) -> Mesh:
    """``8xH100``, ``2x8xA100`` or ``4xnvidia-h100`` (case-insensitive) -> a ``Mesh``."""
    match = _MESH.match(text.strip())
    if not match:
        raise UsageError(f"invalid --mesh {text!r}; expected DEVICESxSPEC or NODESxDEVICESxSPEC, "
                         "e.g. 8xH100, 2x8xA100")
    nodes, per_node = int(match.group(1) or 1), int(match.group(2))
    name = ALIASES.get(match.group(3).lower(), match.group(3).lower())
    specs = all_specs()
    if name not in specs:
        known = ", ".join([a.upper() for a in ALIASES] + list(specs))
        raise UsageError(f"--mesh {text}: unknown device '{match.group(3)}'; known: {known}")
    if nodes < 1 or per_node < 1:
        raise UsageError(f"--mesh {text}: node and device counts must be at least 1")
    spec = specs[name]
    if per_node > 1 and not spec.peer_link:
        raise UsageError(f"--mesh {text}: device spec '{name}' has no peer_link to mesh its devices with")
    if nodes > 1 and not spec.node_link:
        raise UsageError(f"--mesh {text}: device spec '{name}' has no node_link (network between nodes); "
                         f"use one node, e.g. {per_node}x{match.group(3)}")
    intra = _link(spec, "peer_link") if spec.peer_link else Link("none", float("inf"), 0.0)
    return Mesh(nodes, per_node, spec, intra, _link(spec, "node_link") if nodes > 1 else None)
