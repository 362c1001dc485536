"""Running a CPU library: the Relax VM on ``tvm.cpu(0)``; or, for a model split over several
devices by a placement (``SplitRunner``), one VM over all of them driven from the CPU."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from ...errors import DeviceError
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


# What a device type needs, for the error raised where it is absent.
_NEEDS = {"cuda": "an NVIDIA GPU"}


def _device(spec: str):
    """``"cuda:0"`` -> ``tvm.cuda(0)``, or DeviceError where that device is not present."""
    kind, _, index = spec.partition(":")
    device = tvm.device(kind, int(index))
    if kind != "cpu":
        try:
            present = device.exist
        except (RuntimeError, ValueError):  # no runtime library for that device type in this process
            present = False
        if not present:
            raise DeviceError(f"this model runs ops on {spec}, which needs {_NEEDS.get(kind, 'that device')}; "
                              "none is available here (no driver or device)")
    return device


class SplitRunner:
    """Calls ``main`` of a module compiled for several devices (``hetc.placement``): one Relax VM
    over ``devices`` ("cpu:0", "cuda:0", ...) in vdevice order. Inputs go to vdevice 0; outputs
    come back as numpy arrays from wherever they are. The devices are checked, and the VM made,
    at the first call, so a model with a GPU part compiles and loads where there is no GPU."""

    def __init__(self, module, threads: int = 0, devices: Sequence[str] = ()) -> None:
        if threads:
            tvm.get_global_func("runtime.config_threadpool")(1, threads)
        self.module = module
        self.devices = list(devices)
        self.vm = None

    def __call__(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        if self.vm is None:
            devices = [_device(d) for d in self.devices]
            with filtered_stderr():
                self.vm = relax.VirtualMachine(self.module, devices)
            self.first = devices[0]
        inputs = [tvm.runtime.tensor(np.require(a, requirements="C"), self.first) for a in args]
        return _flatten(self.vm["main"](*inputs))


def _flatten(value) -> list[np.ndarray]:
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    if isinstance(value, tvm.runtime.ShapeTuple):  # an ONNX Shape output the VM kept symbolic
        return [np.array(list(value), np.int64)]
    return [arr for item in value for arr in _flatten(item)]


def load(path: Path, threads: int = 0, devices: Sequence[str] = ()) -> CPURunner | SplitRunner:
    """A runner for the library at ``path``; ``devices`` (a split part's, in vdevice order) -> SplitRunner."""
    for spec in devices:
        _device(spec)  # a library with GPU code cannot even be loaded without the device's runtime
    with filtered_stderr():
        module = tvm.runtime.load_module(str(path))
    return SplitRunner(module, threads, devices) if devices else CPURunner(module, threads)


def from_executable(executable, threads: int = 0, devices: Sequence[str] = ()) -> CPURunner | SplitRunner:
    return SplitRunner(executable, threads, devices) if devices else CPURunner(executable, threads)
