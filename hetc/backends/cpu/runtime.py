"""Running a CPU library: the Relax VM on ``tvm.cpu(0)``, or, for a model split over several
devices by a placement, one VM over all of them driven from the CPU (``hetc.runtime.vm``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...runtime import vm
from . import codegen


def load(path: Path, threads: int = 0, devices: Sequence[str] = ()) -> vm.VMRunner:
    """A runner for the library at ``path``; ``devices``: a split part's, in vdevice order."""
    return vm.load(path, list(devices) or ["cpu:0"], threads)


def from_executable(executable, threads: int = 0, devices: Sequence[str] = ()) -> vm.VMRunner:
    """A runner that writes ``executable`` as a library at its first call (``vm.VMRunner``)."""
    return vm.VMRunner(executable, list(devices) or ["cpu:0"], threads, export=codegen.export)
