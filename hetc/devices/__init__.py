"""Device specs: one JSON data file per device model in this folder (and in ``$HETC_DEVICES``).

A spec names the hetc target that drives the device, its code architecture (``arch``, e.g.
``sm_90`` for CUDA), peak FLOP/s per dtype, memory size and bandwidth, the fixed cost of
launching one kernel, and its links: to the host (``host_link``) and to a peer of the same
model (``peer_link``, e.g. NVLink) and, for a device that comes in multi-node systems, to a
device of the same model in another node (``node_link``: the network bandwidth per device, e.g.
one InfiniBand NIC per GPU in a DGX); two devices of different models talk through the host.
Backends read ``arch`` (``hetc compile --arch nvidia-a100``) and ``params`` (backend-specific
numbers, e.g. an FPGA's DSP count and clock); the placement cost model and the parallel
planner (``hetc/parallel``) read the rest.
``source`` says where the numbers come from: a datasheet, or a measurement on a named machine
(``measure.py``); datasheet numbers are never presented as measurements. ``measured`` holds what
a run on a real device found (``benchmarks/gpu_check.py`` prints it as ``calibration``): the
cost model scales its roofline by ``kernel_time_scale`` and uses the measured ``host_link``.

To add a device, drop ``<name>.json`` here or in a folder named by ``$HETC_DEVICES`` with the
keys of ``DeviceSpec`` (``name`` must equal the file name); ``hetc list targets``, ``--arch``
and ``--device`` pick it up.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from ..errors import UsageError

_DIR = Path(__file__).parent


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    description: str
    target: str  # the hetc target that compiles for it
    arch: str  # code architecture for that target ("sm_90")
    source: str  # where the numbers come from
    peak_flops: dict[str, float] = field(default_factory=dict)  # dtype -> FLOP/s
    memory_bytes: float = 0.0
    memory_bandwidth: float = 0.0  # bytes/s
    host_link: dict = field(default_factory=dict)  # name, bandwidth (bytes/s), latency (s)
    peer_link: dict = field(default_factory=dict)  # to another device of this model: name, bandwidth, latency
    node_link: dict = field(default_factory=dict)  # to this model in another node: name, bandwidth, latency
    launch_overhead: float = 0.0  # seconds per kernel launch / offloaded call
    params: dict = field(default_factory=dict)  # backend-specific numbers (FPGA: dsp, clock_ns, ...)
    # Measured on a real device of this model, replacing datasheet numbers where the cost model
    # uses them: ``kernel_time_scale`` (hetc's measured / roofline-predicted latency),
    # ``host_link`` (as an artifact sees it: pageable host memory), ``source`` (where, when).
    measured: dict = field(default_factory=dict)

    @property
    def effective_host_link(self) -> dict:
        """The measured host link where there is one, else the datasheet's."""
        return self.measured.get("host_link") or self.host_link

    @property
    def kernel_time_scale(self) -> float:
        return float(self.measured.get("kernel_time_scale", 1.0))


@cache
def all_specs() -> dict[str, DeviceSpec]:
    specs = {}
    folders = [_DIR] + [Path(p) for p in os.environ.get("HETC_DEVICES", "").split(os.pathsep) if p]
    for path in [p for folder in folders for p in sorted(folder.glob("*.json"))]:
        try:
            spec = DeviceSpec(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError) as err:
            raise UsageError(f"device spec {path}: not a valid spec ({err})") from None
        if spec.name != path.stem:
            raise UsageError(f"device spec {path}: name {spec.name!r} does not match the file name")
        specs[spec.name] = spec
    return specs


def get_spec(name: str) -> DeviceSpec:
    try:
        return all_specs()[name]
    except KeyError:
        raise UsageError(f"unknown device '{name}'; known devices: {', '.join(all_specs())}") from None
