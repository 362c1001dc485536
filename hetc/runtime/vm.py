"""Running a compiled module: one Relax VM over the devices it was built for.

Every TVM-native backend's runner is a ``VMRunner``: one device (``["cpu:0"]``, ``["cuda:0"]``)
or a placement's devices in vdevice order. Devices are checked, and the VM made, at the first
call, so a model with a GPU part compiles (and its runner is made) where there is no GPU;
``load`` checks them at once, since a library with GPU code cannot even be read without the
device's runtime. To support another device type, add what it needs to ``_NEEDS``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from ..errors import DeviceError, InputError, runtime_check_message
from ..native_log import filtered_stderr
from ..options import default_threads

# TVM sizes its thread pool once, at first use, from TVM_NUM_THREADS, else half the logical
# CPUs on x86-64 (it assumes hyper-threading): one worker on a 2-core VM. Size it to the
# physical cores unless the user chose (config_threadpool can only shrink it later).
os.environ.setdefault("TVM_NUM_THREADS", str(default_threads()))

# What a device type needs, for the error raised where it is absent.
_NEEDS = {"cuda": "an NVIDIA GPU"}


def device(spec: str, needed_by: str = "this artifact"):
    """``"cuda:0"`` -> ``tvm.cuda(0)``, or DeviceError saying that ``needed_by`` needs it and it is absent."""
    kind, _, index = spec.partition(":")
    dev = tvm.device(kind, int(index or 0))
    if kind != "cpu":
        try:
            present = dev.exist
        except Exception:  # noqa: BLE001 - no runtime library for that device type in this process
            present = False
        if not present:
            raise DeviceError(f"{needed_by} needs {_NEEDS.get(kind, 'that device')} ({spec}) and none is "
                              "available here (no driver or device)")
    return dev


class VMRunner:
    """Calls ``main`` with numpy arrays (copied to the first device), returns numpy arrays."""

    def __init__(self, module, devices: Sequence[str], threads: int = 0) -> None:
        if threads:
            tvm.get_global_func("runtime.config_threadpool")(1, threads)
        self.module = module
        self.devices = list(devices)
        self.vm = None

    def __call__(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        return _flatten(self.call_tensors(args))

    def call_tensors(self, args: Sequence) -> list:
        """Run ``main`` on numpy arrays or TVM tensors (already on the first device: not copied)
        and return its outputs as TVM tensors, left on the device: a decoding loop feeds its
        KV cache back this way without a round trip through numpy."""
        if self.vm is None:
            devices = [device(d) for d in self.devices]
            with filtered_stderr():
                self.vm = relax.VirtualMachine(self.module, devices)
            self.first = devices[0]
        inputs = [a if isinstance(a, tvm.runtime.Tensor) else
                  tvm.runtime.tensor(np.require(a, requirements="C"), self.first) for a in args]
        try:
            return _tensors(self.vm["main"](*inputs))
        except Exception as err:  # noqa: BLE001 - TVM raises its own error classes
            message = runtime_check_message(err)
            if message is None:
                raise
            raise InputError(message) from None  # a run-time value the model rejects


def _tensors(value) -> list:
    if isinstance(value, (tvm.runtime.Tensor, tvm.runtime.ShapeTuple)):
        return [value]
    return [t for item in value for t in _tensors(item)]


def _flatten(value) -> list[np.ndarray]:
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    if isinstance(value, tvm.runtime.ShapeTuple):  # an ONNX Shape output the VM kept symbolic
        return [np.array(list(value), np.int64)]
    return [arr for item in value for arr in _flatten(item)]


def load(path: Path, devices: Sequence[str], threads: int = 0) -> VMRunner:
    """A runner for the library at ``path``; the devices are checked before it is read."""
    for spec in devices:
        device(spec)
    with filtered_stderr():
        return VMRunner(tvm.runtime.load_module(str(path)), devices, threads)
