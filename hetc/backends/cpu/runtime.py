"""Running a CPU library: the Relax VM on ``tvm.cpu(0)``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from ...native_log import filtered_stderr
from ...options import default_threads

# TVM sizes its thread pool once, at first use, from TVM_NUM_THREADS, else half the logical
# CPUs on x86-64 (it assumes hyper-threading): one worker on a 2-core VM. Size it to the
# physical cores unless the user chose (config_threadpool can only shrink it later).
os.environ.setdefault("TVM_NUM_THREADS", str(default_threads()))


class CPURunner:
    """Calls ``main`` of a compiled module with numpy arrays, returns numpy arrays."""

    def __init__(self, module, threads: int = 0) -> None:
        if threads:
            tvm.get_global_func("runtime.config_threadpool")(1, threads)
        self.device = tvm.cpu(0)
        with filtered_stderr():
            self.vm = relax.VirtualMachine(module, self.device)

    def __call__(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        result = self.vm["main"](*[tvm.runtime.tensor(np.require(a, requirements="C"), self.device) for a in args])
        return _flatten(result)


def _flatten(value) -> list[np.ndarray]:
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    if isinstance(value, tvm.runtime.ShapeTuple):  # an ONNX Shape output the VM kept symbolic
        return [np.array(list(value), np.int64)]
    return [arr for item in value for arr in _flatten(item)]


def load(path: Path, threads: int = 0) -> CPURunner:
    with filtered_stderr():
        return CPURunner(tvm.runtime.load_module(str(path)), threads)


def from_executable(executable, threads: int = 0) -> CPURunner:
    return CPURunner(executable, threads)
