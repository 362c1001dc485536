"""Test helper: public CANN files for checking hetc's Ascend host programs without a CANN toolkit.

- ``cann_include()``: the CANN public headers (acl/, ge/, graph/) that the torch-npu wheel ships
  under ``torch_npu/include``; their ``ge/ge_ir_build.h`` is trimmed (no build API) and there is no
  ``parser/onnx_parser.h``, which is what ``hetc/backends/ascend/cann/hetc_ge.h`` fills in.
- ``ort_cann_provider()``: ``libonnxruntime_providers_cann.so`` from the onnxruntime-cann wheel,
  whose imported symbols are the mangled names of the CANN functions ONNX Runtime calls.

Each wheel is fetched once with ``pip download`` (for a fixed platform, so any local Python works),
and only those files are unpacked, into ``$HETC_TEST_CACHE/cann`` (default
``~/.cache/hetc-tests/cann``), keyed by version; the wheel itself is not kept and nothing is
installed or imported (onnxruntime-cann needs numpy<2). The headers are under the CANN licence,
not an OSI one: they live only in that cache, never in the repository. Without network or wheel,
the functions return None and ``require(...)`` skips the test with the reason.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

TORCH_NPU = "2.14.0"
ONNXRUNTIME_CANN = "1.24.4"
# The wheels pip fetches (both exist for this target); the files we use are the same in all of them.
_PIP_TARGET = ["--only-binary=:all:", "--platform", "manylinux_2_28_x86_64", "--python-version", "3.11",
               "--implementation", "cp", "--abi", "cp311"]

_failures: dict[str, str] = {}


def cache_dir() -> Path:
    return Path(os.environ.get("HETC_TEST_CACHE") or Path.home() / ".cache" / "hetc-tests") / "cann"


@functools.cache
def cann_include() -> Path | None:
    """``torch_npu/include`` of torch-npu, or None (see ``failure``)."""
    root = _fetch("torch-npu", TORCH_NPU, "torch_npu/include/")
    return root / "torch_npu" / "include" if root else None


@functools.cache
def ort_cann_provider() -> Path | None:
    """``libonnxruntime_providers_cann.so`` of onnxruntime-cann, or None (see ``failure``)."""
    root = _fetch("onnxruntime-cann", ONNXRUNTIME_CANN, "onnxruntime/capi/libonnxruntime_providers_cann.so")
    return root / "onnxruntime" / "capi" / "libonnxruntime_providers_cann.so" if root else None


def failure(package: str) -> str:
    """Why fetching ``package`` ("torch-npu", "onnxruntime-cann") failed."""
    return _failures.get(package, f"{package} was not fetched")


def require(what) -> Path:
    """``what()`` (``cann_include`` or ``ort_cann_provider``), or skip the test with the reason."""
    path = what()
    if path is None:
        package = "torch-npu" if what is cann_include else "onnxruntime-cann"
        pytest.skip(failure(package))
    return path


def _fetch(package: str, version: str, member: str) -> Path | None:
    """The cache folder holding the wheel's files under ``member`` (a folder ending in / or a file)."""
    dest = cache_dir() / f"{package}-{version}"
    if (dest / ".complete").is_file():
        return dest
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{package}-") as tmp:
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--quiet",
                 *_PIP_TARGET, "-d", tmp, f"{package}=={version}"],
                check=False, capture_output=True, text=True, timeout=300)
            wheels = sorted(Path(tmp).glob("*.whl"))
            if proc.returncode != 0 or not wheels:
                lines = (proc.stderr or proc.stdout).strip().splitlines()
                _failures[package] = f"cannot download {package}=={version}: {lines[-1] if lines else 'no wheel'}"
                return None
            unpacked = Path(tmp) / "files"
            with zipfile.ZipFile(wheels[0]) as wheel:
                names = [n for n in wheel.namelist() if n.startswith(member) and not n.endswith("/")]
                if not names or any(".." in Path(n).parts or n.startswith("/") for n in names):
                    _failures[package] = f"{wheels[0].name} has no usable {member}"
                    return None
                for name in names:
                    wheel.extract(name, unpacked)
            (unpacked / ".complete").write_text(f"{package}=={version}\n")
            try:
                unpacked.rename(dest)  # atomic: a concurrent session may have won the race
            except OSError:
                if not (dest / ".complete").is_file():
                    shutil.rmtree(dest, ignore_errors=True)
                    unpacked.rename(dest)
        return dest
    except (OSError, subprocess.SubprocessError, zipfile.BadZipFile) as err:
        _failures[package] = f"cannot fetch {package}=={version}: {err}"
        return None
