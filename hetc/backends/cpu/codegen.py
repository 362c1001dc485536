"""CPU code generation: LLVM for the host CPU, packaged as one shared library."""

from __future__ import annotations

from pathlib import Path

import tvm

from ...errors import CompileError, last_line
from ...native_log import filtered_stderr
from ...options import CompileOptions


def llvm_target(options: CompileOptions) -> tvm.target.Target:
    """LLVM for this machine's CPU (plain "llvm" would be generic x86-64 without AVX2)."""
    return tvm.target.Target({
        "kind": "llvm",
        "mcpu": tvm.target.codegen.llvm_get_system_cpu(),
        "num-cores": options.threads,
    })


def build(mod: tvm.IRModule, options: CompileOptions):
    """Lower the optimized module to the Relax VM and generate LLVM code."""
    try:
        return tvm.compile(mod, llvm_target(options), relax_pipeline="default")
    except Exception as err:
        raise CompileError(f"CPU code generation failed: {last_line(err)}") from err


def export(executable, path: Path, options: CompileOptions | None = None) -> None:
    """Write the executable as a shared library (links with g++)."""
    with filtered_stderr():
        executable.export_library(str(path))
