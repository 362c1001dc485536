"""Running a CUDA library: the Relax VM on ``tvm.cuda(0)``; inputs and outputs are host numpy.

Compiling needs no GPU; running does. A runner made at compile time (``hetc.compile``) checks
for the GPU at its first call; loading an artifact (``hetc run``, ``hetc.load``) checks at once.
"""

from __future__ import annotations

from pathlib import Path

from ...runtime import vm


def gpu_device(index: int = 0, needed_by: str = "this artifact"):
    """``tvm.cuda(index)``, or DeviceError saying that ``needed_by`` needs one and there is none."""
    return vm.device(f"cuda:{index}", needed_by)


def load(path: Path, threads: int = 0) -> vm.VMRunner:
    return vm.load(path, ["cuda:0"])


def from_executable(executable, threads: int = 0) -> vm.VMRunner:
    return vm.VMRunner(executable, ["cuda:0"])
