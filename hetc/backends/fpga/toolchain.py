"""The host tools the FPGA target needs: Xilinx's arbitrary-precision headers, hetc's HLS kernel
library, and g++ for C-simulation.

There is no FPGA and no Xilinx tool in the loop: designs are verified by compiling the HLS C++
with g++ against the ``ap_types`` headers (``ap_fixed.h``, ``hls_stream.h``, ...) that hls4ml
ships, and running it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ...errors import CompileError

AP_TYPES_MISSING = "the FPGA target needs hls4ml's ap_types headers: pip install hls4ml==1.3.0"


def ap_types_include() -> Path:
    """The ``ap_types`` header directory of the installed hls4ml package (found without importing
    hls4ml); ``CompileError`` if hls4ml is not installed."""
    spec = importlib.util.find_spec("hls4ml")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / "templates" / "vivado" / "ap_types"
        if (path / "ap_fixed.h").is_file() and (path / "hls_stream.h").is_file():
            return path
    raise CompileError(AP_TYPES_MISSING)


def hls_include() -> Path:
    """hetc's HLS kernel library (``hetc_hls.h`` and the headers it includes)."""
    return Path(__file__).resolve().parent / "hls"


def compile_cpp(sources: Sequence[str | Path], output: str | Path, extra_flags: Sequence[str] = (),
                shared: bool = False) -> Path:
    """g++ ``sources`` into the executable (or, with ``shared``, the shared library) ``output``.

    The HLS headers are on the include path (``-I hls_include()``, ``-isystem ap_types_include()``).
    The defaults are ``-std=c++14 -O2 -Wno-unknown-pragmas -ffp-contract=off`` (no fused
    multiply-adds: float layers must round every operation, as the numpy emulation does);
    ``extra_flags`` come last, so they can override them (``-std=c++17`` where TVM-FFI headers are
    included) or add ``-c`` or libraries. ``$CXX`` replaces g++ when set. A failure raises
    ``CompileError`` with the compiler's first error line.
    """
    cxx = os.environ.get("CXX") or "g++"
    if not shutil.which(cxx):
        raise CompileError(f"the FPGA target's C-simulation needs a C++ compiler: {cxx} is not on PATH")
    output = Path(output)
    cmd = [cxx, "-std=c++14", "-O2", "-Wno-unknown-pragmas", "-ffp-contract=off", "-I", str(hls_include()),
           "-isystem", str(ap_types_include())]
    if shared:
        cmd += ["-fPIC", "-shared"]
    cmd += [*map(str, sources), *extra_flags, "-o", str(output)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        text = proc.stderr + proc.stdout
        lines = [ln for ln in text.splitlines() if "error" in ln] or text.strip().splitlines() or ["no output"]
        names = ", ".join(Path(s).name for s in sources)
        raise CompileError(f"{cxx} failed on {names}: {lines[0].strip()[:400]}")
    return output
