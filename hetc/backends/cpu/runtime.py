"""Running a CPU library: the Relax VM on ``tvm.cpu(0)``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from ...native_log import filtered_stderr


class CPURunner:
    """Calls ``main`` of a compiled module with numpy arrays, returns numpy arrays."""

    def __init__(self, module) -> None:
        self.device = tvm.cpu(0)
        with filtered_stderr():
            self.vm = relax.VirtualMachine(module, self.device)

    def __call__(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        result = self.vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(a), self.device) for a in args])
        return _flatten(result)


def _flatten(value) -> list[np.ndarray]:
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    return [arr for item in value for arr in _flatten(item)]


def load(path: Path) -> CPURunner:
    with filtered_stderr():
        return CPURunner(tvm.runtime.load_module(str(path)))


def from_executable(executable) -> CPURunner:
    return CPURunner(executable)
