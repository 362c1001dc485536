"""The artifact directory: a versioned manifest, written atomically, read with validation.

Layout (schema 1)::

    out/
      manifest.json      what is here: versions, targets, inputs/outputs, parts, file hashes
      report.json        compile report: pass stages, timings, op graph summary
      plan.json          which device runs each op
      cpu/model.so       one folder per device part (the VM library for TVM-native targets)

A new artifact is written into a hidden temporary sibling and renamed into place, so a failed
compile leaves nothing behind and an existing good artifact is replaced only by a complete one.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import __version__
from ..errors import ArtifactError, OutputPathError
from ..frontends.onnx.loader import TensorSpec
from . import standalone
from .standalone import MANIFEST, SCHEMA_VERSION, sha256


@dataclass(frozen=True)
class Part:
    """A piece of the model that one device runs."""

    name: str
    target: str
    device: str  # e.g. "cpu:0"
    emulated: bool  # True where the device is absent and the part runs in emulation
    library: str  # path relative to the artifact root
    threads: int = 0  # worker threads the part runs with; 0 = all cores
    # A part split over several devices by a placement: all of them, in the executable's vdevice
    # order (the VM's device list; inputs go to the first). Empty for a one-device part; schema-1
    # manifests written before this field load with it empty.
    devices: list[str] = field(default_factory=list)
    # A CPU part's instruction sets: {"mcpu": "znver5", "features": ["avx2", "avx512f", ...]}
    # (/proc/cpuinfo names); loading on a CPU without one of them is refused. Empty: unchecked
    # (other parts, and manifests written before this field).
    cpu: dict = field(default_factory=dict)


@dataclass
class Offload:
    """A region of a part that an external (BYOC) target runs: its code is linked into the
    part's library, so the part's runner runs it. ``execution`` says how it runs here:
    "c-simulation" (FPGA, g++-compiled HLS C++), "emulation" (onnxruntime standing in for the
    device) or "device"; ``emulated`` is True unless it is "device". A loaded artifact's records
    say how the regions run in this process (``Backend.serve``)."""

    name: str  # the region's symbol in the library
    target: str
    device: str  # e.g. "fpga:0"
    part: str  # the part whose library holds it
    execution: str
    emulated: bool
    project: str = ""  # the region's generated sources, relative to the artifact root
    nodes: list[str] = field(default_factory=list)  # the model's ops it runs
    # True: the region's code is in the part's library. False: the runtime provides its symbol
    # before the VM starts (the target's ``Backend.serve``: Ascend's emulation or host library).
    linked: bool = True


@dataclass
class Manifest:
    model: str
    targets: list[str]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    parts: list[Part]
    tvm_version: str
    tvm_ffi_version: str
    hetc_version: str = __version__
    schema_version: int = SCHEMA_VERSION
    files: dict[str, str] = field(default_factory=dict)  # relative path -> sha256
    offloads: list[Offload] = field(default_factory=list)  # written only when there are any
    # tensor/pipeline parallel artifacts (hetc.parallel): kind, ranks and what each rank runs,
    # sends and receives; written only when there is one (docs/parallel.md)
    parallel: dict = field(default_factory=dict)
    # symbolic input dims -> [low, high] (inputs' shapes name them); written only when there are any
    dims: dict[str, list[int]] = field(default_factory=dict)
    # symbolic dims some Ascend region takes -> the sizes ("gears") the regions are built for;
    # other sizes are refused at run time; written only when there are any
    gears: dict[str, list[int]] = field(default_factory=dict)
    # a decoder compiled with its KV cache in place (hetc/passes/kv_cache.py ``CacheLayout``):
    # what ``main`` takes instead of the past inputs; written only when there is one
    kv_cache: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        data = asdict(self)
        for optional in ("offloads", "parallel", "dims", "gears", "kv_cache"):
            if not data[optional]:
                del data[optional]
        # "devices" (split parts) and "cpu" (CPU parts) are written only where set: older
        # manifests read as before.
        data["parts"] = [{k: v for k, v in part.items() if k not in ("devices", "cpu") or v}
                         for part in data["parts"]]
        data["inputs"] = [s.to_json() for s in self.inputs]
        data["outputs"] = [s.to_json() for s in self.outputs]
        return data

    @classmethod
    def from_json(cls, data: dict) -> Manifest:
        return cls(
            model=str(data["model"]),
            targets=[str(t) for t in data["targets"]],
            inputs=[TensorSpec.from_json(s) for s in data["inputs"]],
            outputs=[TensorSpec.from_json(s) for s in data["outputs"]],
            parts=[Part(**p) for p in data["parts"]],
            tvm_version=str(data["tvm_version"]),
            tvm_ffi_version=str(data["tvm_ffi_version"]),
            hetc_version=str(data["hetc_version"]),
            schema_version=int(data["schema_version"]),
            files={str(k): str(v) for k, v in data["files"].items()},
            offloads=[Offload(**o) for o in data.get("offloads", [])],
            parallel=dict(data.get("parallel", {})),
            dims={str(k): [int(v[0]), int(v[1])] for k, v in data.get("dims", {}).items()},
            gears={str(k): [int(x) for x in v] for k, v in data.get("gears", {}).items()},
            kv_cache=dict(data.get("kv_cache", {})),
        )


def _is_artifact(directory: Path) -> bool:
    """Whether ``directory`` holds a hetc manifest (any schema version), not just any JSON."""
    try:
        data = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and {"schema_version", "hetc_version", "parts"} <= set(data)


def check_output_path(out: Path) -> None:
    """Fail early (before compiling) if ``out`` can't become an artifact directory."""
    if out.exists():
        if not out.is_dir():
            raise OutputPathError(f"{out}: exists and is not a directory")
        if any(out.iterdir()) and not _is_artifact(out):
            raise OutputPathError(f"{out}: exists, is not empty and is not a hetc artifact; "
                                  "refusing to overwrite it")
    ancestor = out.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputPathError(f"{out}: cannot create it, {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputPathError(f"{out}: cannot create it, {ancestor} is not writable")


def write_artifact(out: Path, fill: Callable[[Path], Manifest]) -> Manifest:
    """Create ``out`` atomically: ``fill(tmp_dir)`` writes the files and returns the manifest."""
    out = Path(out).absolute()
    check_output_path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
    except OSError as err:
        raise OutputPathError(f"{out}: cannot write: {err.strerror}") from err
    try:
        manifest = fill(tmp)
        manifest.files = {str(p.relative_to(tmp)): sha256(p)
                          for p in sorted(tmp.rglob("*")) if p.is_file()}
        (tmp / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=2) + "\n")
        _swap_into_place(tmp, out)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputPathError(f"{out}: cannot write: {err.strerror or err}") from err
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


_RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with renameat2(RENAME_EXCHANGE); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0


def _swap_into_place(tmp: Path, out: Path) -> None:
    if not out.exists():
        tmp.rename(out)
        return
    if _exchange(tmp, out):  # readers see the old artifact or the new one, never neither
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
    out.rename(old)
    try:
        tmp.rename(out)
    except OSError:
        old.rename(out)  # put the previous artifact back
        raise
    shutil.rmtree(old, ignore_errors=True)


def read_manifest(root: Path) -> Manifest:
    """Read and validate ``root/manifest.json`` against this hetc and TVM. The structure and
    every file's sha256 are checked by the standalone runner's ``read_manifest`` (one set of
    checks for ``hetc run`` and runtime-only deployments)."""
    import tvm
    import tvm_ffi

    root = Path(root)
    try:
        data = standalone.read_manifest(root)
        manifest = Manifest.from_json(data)
    except standalone.RunError as err:
        raise ArtifactError(str(err)) from None
    except (KeyError, TypeError, ValueError) as err:
        raise ArtifactError(f"{root / MANIFEST}: malformed manifest (bad or missing field {err})") from err
    if manifest.tvm_version != tvm.__version__ or manifest.tvm_ffi_version != tvm_ffi.__version__:
        raise ArtifactError(
            f"{root}: built with TVM {manifest.tvm_version} / tvm-ffi {manifest.tvm_ffi_version}, "
            f"this is TVM {tvm.__version__} / tvm-ffi {tvm_ffi.__version__}; recompile the model"
        )
    return manifest
