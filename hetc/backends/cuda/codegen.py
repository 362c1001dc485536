"""CUDA code generation: TVM's CUDA codegen for the kernels, LLVM for the host side, packaged
with nvcc-built GPU binaries (``binaries.py``) so the artifact needs no compiler to run."""

from __future__ import annotations

import re
from pathlib import Path

import tvm

from ...errors import CompileError, last_line
from ...options import ARCH_PATTERN, CompileOptions

DEFAULT_ARCH = "sm_90"
# Per-block limits of every architecture since sm_70 (shared memory without the opt-in carve-out);
# MetaSchedule's CUDA rules need them on the target, dlight reads them too.
LIMITS = {"max_threads_per_block": 1024, "max_num_threads": 1024, "thread_warp_size": 32,
          "max_shared_memory_per_block": 48 * 1024, "registers_per_block": 65536}


def _arch_key(arch: str) -> tuple[int, str]:
    match = re.fullmatch(r"sm_(\d+)([a-z]?)", arch)
    return int(match.group(1)), match.group(2)


def cuda_archs(options: CompileOptions) -> list[str]:
    """The SM architectures to build binaries for, lowest first: ``--arch`` names (a device
    spec's name stands for its ``arch``), or sm_90."""
    from ...devices import get_spec

    names = [a if ARCH_PATTERN.fullmatch(a) else get_spec(a).arch for a in options.arch
             if ARCH_PATTERN.fullmatch(a) or get_spec(a).target == "cuda"] or [DEFAULT_ARCH]
    return sorted(set(names), key=_arch_key)


def cuda_target(options: CompileOptions) -> tvm.target.Target:
    """CUDA for the lowest requested architecture (its code must run on all of them).

    The host side (argument checks, kernel launches) is generic x86-64: the artifact runs on
    the GPU machine's CPU, not necessarily this one's.
    """
    return tvm.target.Target({"kind": "cuda", "arch": cuda_archs(options)[0], **LIMITS}, host={"kind": "llvm"})


def build(mod: tvm.IRModule, options: CompileOptions):
    """Lower the scheduled module to the Relax VM; kernels become CUDA source (binaries at export)."""
    try:
        executable = tvm.compile(mod, cuda_target(options), relax_pipeline="default")
    except Exception as err:
        raise CompileError(f"CUDA code generation failed: {last_line(err)}") from err
    return executable


def export(executable, path: Path, options: CompileOptions) -> None:
    """Write the executable as a shared library whose GPU code is nvcc-built fatbins."""
    from .binaries import export_library

    export_library(executable, path, cuda_archs(options))
