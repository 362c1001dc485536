"""Compile options shared by the API, the CLI and the backends."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .errors import UsageError

LAYOUTS = (None, "NHWC", "NCHW")


@dataclass(frozen=True)
class CompileOptions:
    targets: tuple[str, ...] = ("cpu",)  # target names, validated against the registry
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # binds dynamic dims
    layout: str | None = None  # conv layout to convert to; None = the target's preferred layout
    num_threads: int = 0  # CPU worker threads; 0 = all cores of this machine
    database: str | None = None  # tuning database directory (hetc tune); None = default schedules

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise UsageError(f"invalid layout {self.layout!r}; choose NHWC or NCHW, or leave it unset")
        if self.num_threads < 0:
            raise UsageError(f"num_threads must be >= 0, got {self.num_threads}")

    @property
    def threads(self) -> int:
        return self.num_threads or default_threads()


def default_threads() -> int:
    """Physical cores this process may run on (hyper-threads add little to compute kernels)."""
    import psutil

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or usable
    return max(1, min(usable, physical))


def parse_input_shape(spec: str) -> tuple[str, tuple[int, ...]]:
    """``"name=1,3,224,224"`` -> ("name", (1, 3, 224, 224))."""
    name, sep, dims = spec.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
    except ValueError:
        shape = ()
    if not sep or not name or not shape or any(d < 0 for d in shape):
        raise UsageError(f"invalid --input-shape {spec!r}; expected NAME=D0,D1,... with dims >= 0")
    return name, shape
