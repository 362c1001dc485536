"""The HLS kernel library's C++ unit tests (tests/fpga/kernels/test_*.cpp): each is compiled with
g++ against hls4ml's ap_types headers (and its nnet_utils, which some tests compare with) and run;
it prints one line per check and exits with the number of failed checks."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hetc.backends.fpga import toolchain
from hetc.errors import CompileError

KERNEL_TESTS = Path(__file__).parent / "fpga" / "kernels"
SOURCES = sorted(KERNEL_TESTS.glob("test_*.cpp"))


def _ap_types() -> Path:
    try:
        return toolchain.ap_types_include()
    except CompileError:
        pytest.skip("hls4ml's ap_types headers are not installed: pip install hls4ml==1.3.0")


def test_every_kernel_header_has_a_test():
    headers = {p.stem.removeprefix("hetc_") for p in toolchain.hls_include().glob("hetc_*.h")}
    tested = {p.stem.removeprefix("test_") for p in SOURCES}
    # hetc_hls.h only includes the others; common and window are exercised through every kernel
    assert headers - {"hls", "common", "window"} <= tested, headers - tested


@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_kernel(source: Path, tmp_path: Path):
    ap_types = _ap_types()
    binary = toolchain.compile_cpp(
        [source], tmp_path / source.stem,
        ["-I", str(KERNEL_TESTS), "-isystem", str(ap_types.parent), "-Wall", "-Wno-unused-label", "-Werror=return-type"])
    proc = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout and proc.stdout.count("\nok ") + proc.stdout.startswith("ok ") >= 3, proc.stdout
