"""CPU code generation: LLVM for the host CPU, packaged as one shared library."""

from __future__ import annotations

from pathlib import Path

import tvm

from ...errors import CompileError, last_line, unlowered_call
from ...native_log import filtered_stderr
from ...options import CompileOptions
from ...passes.stack_locals import PIPELINE as TIR_PIPELINE
from ...passes.vm_pipeline import vm_pipeline
from .pool import pool_object


def llvm_target(options: CompileOptions) -> tvm.target.Target:
    """LLVM for this machine's CPU (plain "llvm" would be generic x86-64 without AVX2).

    Floating-point reassociation is allowed (``fast-math-reassoc``): without it LLVM keeps every
    scalar reduction loop (softmax's max and sum, a layer norm's mean) one sequential chain. A
    2x12x384x384 softmax ran 6.9 -> 3.4 ms on a Zen 3 (reciprocals then also allowed), 4.1 -> 3.7
    ms on a Zen 5 (the same with or without reciprocals); the register-blocked matmuls,
    vectorized by hand, came out bit-identical. Sums are then added in another order, as
    onnxruntime's vectorized reductions do. Not allowed: ``nnan``/``ninf`` (NaN and Inf keep
    their meaning) and ``arcp``, which turns ``x / s`` into ``x * (1 / s)``, an ulp off for some
    ``x``: DynamicQuantizeLinear's ``round(x / scale)`` then missed onnxruntime's by a step."""
    # LLVM's tuning for Intel's AVX-512 server cores prefers 256-bit vectors for the loops it
    # vectorizes itself (TVM's explicit vectors are 512-bit either way); AMD's Zen 4/5 tuning
    # does not. Loops hetc leaves to LLVM (the int8-weight matmuls: 8-bit loads) then ran half
    # width there: a Llama 134M decoding step with int8 weights 13.6 -> 12.3 ms at batch 1 and
    # 22.5 -> 17.5 ms at batch 4 with 512-bit ones (2-core Intel Xeon, LLVM emeraldrapids).
    extra = {"mattr": ["-prefer-256-bit"]} if _x86(tvm.target.codegen.llvm_get_system_triple()) else {}
    return tvm.target.Target({
        "kind": "llvm",
        "mcpu": options.cpu or tvm.target.codegen.llvm_get_system_cpu(),
        "num-cores": options.threads,
        "fast-math-reassoc": True,
        **extra,
    })


def _x86(triple: str) -> bool:
    return triple.startswith(("x86_64", "i386", "i686"))


# x86 instruction sets generated code may use: LLVM feature name -> /proc/cpuinfo flag.
ISA_FLAGS = {"sse4.2": "sse4_2", "avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c",
             "avx512f": "avx512f", "avx512bw": "avx512bw", "avx512dq": "avx512dq", "avx512vl": "avx512vl",
             "avx512vnni": "avx512_vnni", "avxvnni": "avx_vnni", "avx512bf16": "avx512_bf16",
             "avx512fp16": "avx512_fp16", "amx-tile": "amx_tile", "amx-int8": "amx_int8"}


def isa_record(options: CompileOptions) -> dict:
    """What a CPU library needs of the CPU that runs it (the manifest part's ``cpu``):
    ``{"mcpu": LLVM CPU, "features": [/proc/cpuinfo flags]}``; checked when it is loaded
    (``hetc.runtime.standalone.cpu_problem``). Empty off x86."""
    target = llvm_target(options)
    triple = str(target.attrs.get("mtriple", "") or tvm.target.codegen.llvm_get_system_triple())
    if not _x86(triple):
        return {}
    features = [flag for feature, flag in ISA_FLAGS.items()
                if tvm.target.codegen.target_has_features(feature, target)]
    return {"mcpu": str(target.attrs["mcpu"]), "features": features}


@tvm.transform.module_pass(opt_level=0, name="HetcShapeFuncNoAlias")
def _shape_funcs_noalias(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Mark the VM's shape functions (symbolic dims) ``tirx.noalias``, as every kernel is.

    One function without the attribute in the module made LLVM code generation treat every
    kernel's buffers as possibly aliased: the register tiles' accumulators were stored and
    reloaded at every step and allocated per tile from the workspace pool (a 768x768 matmul
    with symbolic rows ran 3-5x slower than its static build; with the attribute, 36 instead
    of 12 FMAs per unrolled step)."""
    updates = {gv: f.with_attr("tirx.noalias", True) for gv, f in mod.functions.items()
               if isinstance(f, tvm.tirx.PrimFunc) and not (f.attrs and "tirx.noalias" in f.attrs)
               and (f.attrs or {}).get("tirx.is_host_func", False)}
    for gv, f in updates.items():
        mod[gv] = f
    return mod


def build(mod: tvm.IRModule, options: CompileOptions):
    """Lower the optimized module to the Relax VM and generate LLVM code."""
    target = llvm_target(options)
    try:
        pipeline = tvm.transform.Sequential([vm_pipeline(), _shape_funcs_noalias])
        return tvm.compile(mod, target, relax_pipeline=pipeline, tir_pipeline=TIR_PIPELINE)
    except Exception as err:
        reason = unlowered_call(err, mod) or last_line(err)
        raise CompileError(f"CPU code generation failed: {reason}") from err


def export(executable, path: Path, options: CompileOptions | None = None) -> None:
    """Write the executable as a shared library (links with g++), hetc's thread pool linked in
    (``pool.py``; switched on after loading: ``hetc.runtime.standalone.install_pool``)."""
    with filtered_stderr():
        executable.export_library(str(path), addons=[pool_object()])
