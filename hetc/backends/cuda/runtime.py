"""Running a CUDA library: the Relax VM on ``tvm.cuda(0)``; inputs and outputs are host numpy.

Compiling needs no GPU; running does. A runner made at compile time (``hetc.compile``) checks
for the GPU at its first call; loading an artifact (``hetc run``, ``hetc.load``) checks at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from ...errors import DeviceError
from ...native_log import filtered_stderr
from ..cpu.runtime import _flatten


def gpu_device(index: int = 0, needed_by: str = "this artifact"):
    """``tvm.cuda(index)``, or DeviceError saying that ``needed_by`` needs one and there is none."""
    try:
        device = tvm.cuda(index)
        present = device.exist
    except Exception:  # noqa: BLE001 - no CUDA runtime library / driver in this process
        present = False
    if not present:
        raise DeviceError(f"{needed_by} needs an NVIDIA GPU (cuda:{index}) and none is available here "
                          "(no CUDA driver or device)")
    return device


class CUDARunner:
    """Calls ``main`` on the GPU with numpy arrays (copied in and out), returns numpy arrays."""

    def __init__(self, module) -> None:
        self.module = module
        self.vm = None

    def __call__(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        if self.vm is None:
            device = gpu_device()
            with filtered_stderr():
                self.vm = relax.VirtualMachine(self.module, device)
            self.device = device
        result = self.vm["main"](*[tvm.runtime.tensor(np.require(a, requirements="C"), self.device) for a in args])
        return _flatten(result)


def load(path: Path, threads: int = 0) -> CUDARunner:
    gpu_device()  # before loading: without the CUDA runtime the library's GPU part cannot be read
    with filtered_stderr():
        return CUDARunner(tvm.runtime.load_module(str(path)))


def from_executable(executable, threads: int = 0) -> CUDARunner:
    return CUDARunner(executable)
