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

    def __init__(self, module, threads: int = 0) -> None:
        if threads:  # 0 keeps TVM's default: one worker per physical core
            tvm.get_global_func("runtime.config_threadpool")(1, threads)
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


def load(path: Path, threads: int = 0) -> CPURunner:
    with filtered_stderr():
        return CPURunner(tvm.runtime.load_module(str(path)), threads)


def from_executable(executable, threads: int = 0) -> CPURunner:
    return CPURunner(executable, threads)
