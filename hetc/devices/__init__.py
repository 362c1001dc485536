"""Device specs: one JSON data file per device model in this folder.

A spec names the hetc target that drives the device, its code architecture (``arch``, e.g.
``sm_90`` for CUDA), datasheet peak FLOP/s per dtype, memory size and bandwidth, and its link
to the host. Backends read ``arch`` (``hetc compile --arch nvidia-a100``); the placement solver
reads the numbers. Datasheet numbers are labelled by ``source``; they are never measurements.

To add a device, drop ``<name>.json`` here with the keys of ``DeviceSpec`` (``name`` must equal
the file name); ``hetc list targets`` and ``--arch`` pick it up.
"""

from __future__ import annotations

import json
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


@cache
def all_specs() -> dict[str, DeviceSpec]:
    specs = {}
    for path in sorted(_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        spec = DeviceSpec(**data)
        if spec.name != path.stem:
            raise ValueError(f"{path}: name {spec.name!r} does not match the file name")
        specs[spec.name] = spec
    return specs


def get_spec(name: str) -> DeviceSpec:
    try:
        return all_specs()[name]
    except KeyError:
        raise UsageError(f"unknown device '{name}'; known devices: {', '.join(all_specs())}") from None
