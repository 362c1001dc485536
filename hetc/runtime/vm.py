"""Running a compiled module: one Relax VM over the devices it was built for.

Every TVM-native backend's runner is a ``VMRunner``: one device (``["cpu:0"]``, ``["cuda:0"]``)
or a placement's devices in vdevice order. Devices are checked, and the VM made, at the first
call, so a model with a GPU part compiles (and its runner is made) where there is no GPU;
``load`` checks them at once, since a library with GPU code cannot even be read without the
device's runtime. To support another device type, add what it needs to ``_NEEDS``.

CPU loops run on hetc's thread pool (``hetc/backends/cpu/pool.cc``), which TVM's JIT cannot
link: a runner made from an executable at compile time writes it to a temporary library at
its first call (what TVM's JIT would spend compiling it) and loads that, as ``load`` does an
artifact's.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from ..errors import DeviceError, InputError, last_line, runtime_check_message, shape_check_message
from ..native_log import filtered_stderr
from ..options import default_threads
from .standalone import install_pool

# TVM sizes its thread pool once, at first use, from TVM_NUM_THREADS, else half the logical
# CPUs on x86-64 (it assumes hyper-threading): one worker on a 2-core VM. Size it to the
# physical cores unless the user chose (config_threadpool can only shrink it later).
os.environ.setdefault("TVM_NUM_THREADS", str(default_threads()))

log = logging.getLogger(__name__)

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
    """Calls ``main`` with numpy arrays, returns numpy arrays (copied to and from a GPU; on the CPU
    shared with the VM where that is safe: ``__call__``)."""

    def __init__(self, module, devices: Sequence[str], threads: int = 0, export=None) -> None:
        """``module``: a loaded library, or an executable; ``export``: ``(executable, path)``
        writing it as a library (the pool linked in), done at the first call."""
        if threads:
            tvm.get_global_func("runtime.config_threadpool")(1, threads)
        self.module = module
        self.devices = list(devices)
        self.threads = threads
        self.export = export
        self.vm = None
        self.staging: dict[int, tuple] = {}  # input index -> (aligned numpy buffer, tensor over it)

    def __call__(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``main`` on numpy arrays, returning numpy arrays. On the CPU neither side is copied
        where it need not be (the fixed cost of a call: see ``_on_device``, ``to_numpy``)."""
        main = self._main()
        if not self.on_cpu:
            return _flatten(self.invoke(main, [tvm.runtime.tensor(np.require(a, requirements="C"),
                                                                   self.first) for a in args]))
        passed: list[np.ndarray] = []  # the memory each input tensor is (a staging buffer or the array)
        inputs = [self._on_device(i, np.asarray(a), passed) for i, a in enumerate(args)]
        outputs: list[np.ndarray] = []
        for value in _tensors(self.invoke(main, inputs)):
            array = to_numpy(value)
            if isinstance(value, tvm.runtime.Tensor):
                for other in (*passed, *outputs):
                    if np.may_share_memory(array, other):
                        array = array.copy()  # an output that is an input, or another output: its own copy
                        break
            outputs.append(array)
        return outputs

    def _on_device(self, index: int, array: np.ndarray, passed: list):
        """A CPU tensor for input ``index``: up to ``_STAGE_BYTES``, ``array`` copied into an
        aligned buffer kept for that input (0.2 us for a 64-byte input on a Zen 5, against 10
        us for ``tvm.runtime.tensor``, which allocates and copies through TVM); above, ``array``
        itself when it is contiguous, 64-byte aligned and writable (numpy exports no read-only
        array through DLPack), else the buffer. Appends to ``passed`` the numpy memory the
        tensor is, which an output could share."""
        if array.dtype not in _DLPACK_NUMPY or array.size == 0:
            return tvm.runtime.tensor(np.require(array, requirements="C"))
        if (array.nbytes > _STAGE_BYTES and array.flags.c_contiguous and array.flags.writeable
                and array.ctypes.data % _ALIGN == 0):
            passed.append(array)
            return tvm_ffi.from_dlpack(array, require_alignment=_ALIGN)
        staged = self.staging.get(index)
        if staged is None or staged[0].shape != array.shape or staged[0].dtype != array.dtype:
            raw = np.empty(array.nbytes + _ALIGN, np.uint8)
            start = -raw.ctypes.data % _ALIGN
            buffer = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
            staged = self.staging[index] = (buffer, tvm_ffi.from_dlpack(buffer, require_alignment=_ALIGN))
        staged[0][...] = array
        passed.append(staged[0])
        return staged[1]

    def tensor(self, index: int, array: np.ndarray):
        """``array`` as input ``index`` of ``main``, on the first device: on the CPU staged as
        ``__call__`` stages it (into the aligned buffer kept for that input: no allocation while
        its shape repeats), elsewhere copied to a new device tensor. For callers that pass TVM
        values themselves (``hetc.session``); ``function`` first."""
        if not self.on_cpu:
            return tvm.runtime.tensor(np.require(array, requirements="C"), self.first)
        return self._on_device(index, array, [])

    def call_tensors(self, args: Sequence) -> list:
        """Run ``main`` on numpy arrays or TVM tensors (already on the first device: not copied)
        and return its outputs as TVM tensors, left on the device: a decoding loop feeds its
        KV cache back this way without a round trip through numpy."""
        main = self._main()
        inputs = [a if isinstance(a, tvm.runtime.Tensor) else
                  tvm.runtime.tensor(np.require(a, requirements="C"), self.first) for a in args]
        return _tensors(self.invoke(main, inputs))

    def function(self) -> tuple:
        """(``main``, the device its inputs go to): for callers that pass TVM values themselves
        (``hetc.session``: cache buffers, shape tuples)."""
        return self._main(), self.first

    def _main(self):
        if self.vm is None:
            devices = [device(d) for d in self.devices]
            if self.export is not None:
                self.module, self.export = _exported(self.module, self.export, self.threads), None
            with filtered_stderr():
                self.vm = relax.VirtualMachine(self.module, devices)
            self.first, self.main = devices[0], self.vm["main"]
            self.on_cpu = self.first.dlpack_device_type() == _CPU
        return self.main

    @staticmethod
    def invoke(main, inputs: list):
        try:
            return main(*inputs)
        except Exception as err:  # noqa: BLE001 - TVM raises its own error classes
            message = runtime_check_message(err) or shape_check_message(err)
            if message is None:
                raise
            raise InputError(message) from None  # a run-time value or shape the model rejects


_CPU = tvm.cpu().dlpack_device_type()
_ALIGN = 64  # what TVM's kernels assume of every buffer (tvm.runtime.from_dlpack checks it)
_STAGE_BYTES = 64 * 1024  # inputs up to this size are copied (cheaper than checking alignment)
# dtypes numpy exchanges through DLPack (not ml_dtypes' bfloat16/float8: those are copied);
# numpy dtypes, not names: dtype.name takes 1.4 us on a Zen 5
_DLPACK_NUMPY = frozenset(np.dtype(name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
    "float64"))


def to_numpy(value) -> np.ndarray:
    """A numpy view of a CPU output (it keeps the tensor alive), else a copy (a GPU tensor, or
    a dtype numpy does not take through DLPack: bfloat16, float8)."""
    if isinstance(value, tvm.runtime.ShapeTuple):  # an ONNX Shape output the VM kept symbolic
        return np.array(list(value), np.int64)
    try:
        return np.from_dlpack(value)  # refuses a tensor numpy cannot read in place
    except (BufferError, TypeError, RuntimeError, ValueError):
        return value.numpy()


def _tensors(value) -> list:
    if isinstance(value, (tvm.runtime.Tensor, tvm.runtime.ShapeTuple)):
        return [value]
    return [t for item in value for t in _tensors(item)]


def _flatten(value) -> list[np.ndarray]:
    return [to_numpy(t) if isinstance(t, tvm.runtime.ShapeTuple) else t.numpy() for t in _tensors(value)]


def load(path: Path, devices: Sequence[str], threads: int = 0) -> VMRunner:
    """A runner for the library at ``path``; the devices are checked before it is read."""
    for spec in devices:
        device(spec)
    with filtered_stderr():
        return VMRunner(_load_library(path, threads), devices, threads)


def _load_library(path: Path, threads: int):
    module = tvm.runtime.load_module(str(path))
    install_pool(path, threads)
    return module


def _exported(executable, export, threads: int):
    """``executable`` written to a temporary library and loaded (it stays mapped when the file
    is gone). Where TVM cannot read back what it wrote (a zero-element constant fails to load:
    "Invalid DLTensor file format"), the executable itself, JIT-compiled by TVM, with TVM's pool."""
    with tempfile.TemporaryDirectory(prefix="hetc-") as tmp:
        path = Path(tmp) / "model.so"
        try:
            export(executable, path)
            with filtered_stderr():
                return _load_library(path, threads)
        except Exception as err:  # noqa: BLE001 - TVM's own errors; the JIT path reports real problems
            log.debug("running the executable JIT-compiled, on TVM's pool: %s", last_line(err))
            return executable
