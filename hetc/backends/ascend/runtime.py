"""Ascend regions at run time: the function each region's symbol names, in this process.

The artifact's VM calls ``ascend_region<k>_<hash>`` (destination-passing: inputs, then the
outputs to fill). Before the VM starts, ``serve`` registers that name as a global function in
one of two modes, chosen by ``--ascend-mode`` / ``HETC_ASCEND_MODE``:

- ``device``: the region's host library ``ascend/<region>/lib<symbol>.so`` (built by its
  ``build.sh`` on a machine with CANN) runs it on the NPU through AscendCL. Needs that library,
  CANN's ``libascendcl.so`` and an NPU; otherwise a one-line error says which is missing.
- ``emulation``: onnxruntime runs the region's ONNX subgraph on the CPU. Never NPU execution;
  the manifest, ``hetc run`` and the report say "emulation".

``auto`` (the default) is ``device`` when all of device mode's needs are met, else emulation.
Symbols are content-addressed, so registering one twice registers the same computation.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import numpy as np
import tvm

from ...errors import DeviceError, UsageError

EXECUTION = "emulation"  # how regions run on a machine without an NPU
MODES = ("auto", "device", "emulation")
MODE_ENV = "HETC_ASCEND_MODE"


def mode() -> str:
    value = os.environ.get(MODE_ENV, "auto")
    if value not in MODES:
        raise UsageError(f"invalid {MODE_ENV}={value!r}; choose {', '.join(MODES)}")
    return value


def serve(root: Path, record) -> str:
    """Register the region of manifest record ``record`` (artifact at ``root``); returns how it
    will run: "device" or "emulation"."""
    folder = root / record.project
    wanted = mode()
    if wanted != "emulation":
        missing = device_missing(folder / f"lib{record.name}.so")
        if missing is None:
            library = tvm.runtime.load_module(str(folder / f"lib{record.name}.so"))
            tvm.register_global_func(record.name, library[record.name], override=True)
            return "device"
        if wanted == "device":
            raise DeviceError(f"--ascend-mode device: {record.name} cannot run on an NPU here: {missing}")
    try:
        model = (folder / "model.onnx").read_bytes()
    except OSError as err:
        raise DeviceError(f"{folder / 'model.onnx'}: cannot read the region's subgraph ({err.strerror})") from None
    register_emulation(record.name, model)
    return EXECUTION


def device_missing(library: Path) -> str | None:
    """What device mode lacks here (None: the host library, CANN's runtime and an NPU are present)."""
    if not library.is_file():
        return f"no {library.name} (run {library.parent.name}/build.sh on a machine with CANN)"
    try:
        acl = ctypes.CDLL("libascendcl.so")
    except OSError:
        return "CANN's libascendcl.so is not installed"
    count = ctypes.c_uint32(0)
    if acl.aclrtGetDeviceCount(ctypes.byref(count)) != 0 or count.value == 0:
        return "no Ascend NPU found (aclrtGetDeviceCount)"
    return None


def register_emulation(symbol: str, model: bytes) -> None:
    """Register ``symbol`` as onnxruntime running the region's ONNX subgraph ``model``."""
    runner = _Emulated(model)
    tvm.register_global_func(symbol, runner, override=True)


class _Emulated:
    """A DPS function over an onnxruntime session (created on first call)."""

    def __init__(self, model: bytes) -> None:
        self.model = model
        self.session = None
        self.lock = threading.Lock()

    def __call__(self, *args) -> None:
        with self.lock:
            if self.session is None:
                import onnxruntime as ort

                self.session = ort.InferenceSession(self.model, providers=["CPUExecutionProvider"])
                self.names = [i.name for i in self.session.get_inputs()]
        n = len(self.names)
        feeds = {name: arg.numpy() for name, arg in zip(self.names, args[:n])}
        for out, value in zip(args[n:], self.session.run(None, feeds)):
            out.copyfrom(np.require(value, requirements="C"))
