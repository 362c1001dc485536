"""Register tiles on the stack: small buffers of fixed size become stack allocations.

TVM's ``LowerTVMBuiltin`` turns every allocation on the CPU into a ``TVMBackendAllocWorkspace``
call (a pointer LLVM knows nothing about) unless it is in "global" scope and under 1 KB. A
contraction's accumulator tile (``cache_write(.., "local")``, 5 x 64 floats = 1280 bytes) was
therefore workspace memory, and LLVM keeps such a tile in registers only as long as nothing in
the reduction loop may touch memory it cannot tell apart from it. A software prefetch
(``prefetch.py``) is such a call: with it in the loop every accumulator was stored back at
every reduction step (20 stores per step for a 5 x 4-vector tile), and a decoding step of four
sequences with int8 weights ran 1.4x slower than with the tile on the stack (96 chained
768 x 2048 int8 matmuls at batch 4: 15.6 -> 11.3 ms, 2-core Intel Xeon, LLVM emeraldrapids).

A stack allocation (``alloca``) is private to the function, so LLVM promotes the whole tile to
registers. A kernel's small per-row intermediates ("global" scope, over 1 KB: a softmax row of
384 floats, ``T_fast_exp``) were a workspace call per row; on the stack a 12 x 128 x 384 softmax
took 0.75 instead of 0.96 ms (one alternating loop, same CPU, busy with other work). The pass
below marks every "local" or "global" allocation of a constant size up to ``MAX_BYTES``
with TVM's ``disable_lower_builtin`` annotation, which ``LowerTVMBuiltin``
honours, and the LLVM code generator then emits an ``alloca`` for it. It runs on the host
module just before ``LowerTVMBuiltin``: the TIR pipeline ``PIPELINE`` (TVM's default one
otherwise), which every CPU build uses (``backends/cpu/codegen.build``, and the host code of a
placed build: ``placement/apply.build``). The tuner's candidates are still built with TVM's
own pipeline (``tuning/worker.py`` imports nothing of hetc). TVM 0.27's Python API has no TIR
mutator: ``_rebuild`` rebuilds only the statements on the path to a changed allocation and
leaves every other node as it is.
"""

from __future__ import annotations

import math

import tvm
from tvm import tirx
from tvm.tirx import compilation_pipeline

PIPELINE = "hetc_cpu"
# Larger buffers stay workspace memory (a worker thread's stack holds every one of its function).
MAX_BYTES = 16 * 1024
ANNOTATION = "disable_lower_builtin"


def _stack_sized(alloc: tirx.AllocBuffer) -> bool:
    buffer = alloc.buffer
    if buffer.scope() not in ("local", "global") or ANNOTATION in alloc.annotations:
        return False
    if not all(isinstance(extent, tirx.IntImm) for extent in buffer.shape):
        return False
    elements = math.prod(int(extent) for extent in buffer.shape)
    return 0 < elements * tvm.runtime.DataType(str(buffer.dtype)).bits // 8 <= MAX_BYTES


def _rebuild(stmt: tirx.Stmt) -> tirx.Stmt:
    """``stmt`` with its stack-sized local allocations marked (the same object if none is)."""
    if isinstance(stmt, tirx.AllocBuffer):
        if not _stack_sized(stmt):
            return stmt
        return tirx.AllocBuffer(stmt.buffer, {**stmt.annotations, ANNOTATION: tirx.IntImm("bool", 1)})
    if isinstance(stmt, tirx.SeqStmt):
        seq = [_rebuild(s) for s in stmt.seq]
        return stmt if all(a.same_as(b) for a, b in zip(seq, stmt.seq)) else tirx.SeqStmt(seq, stmt.span)
    if isinstance(stmt, tirx.IfThenElse):
        then = _rebuild(stmt.then_case)
        other = None if stmt.else_case is None else _rebuild(stmt.else_case)
        if then.same_as(stmt.then_case) and (other is None or other.same_as(stmt.else_case)):
            return stmt
        return tirx.IfThenElse(stmt.condition, then, other, stmt.span)
    if isinstance(stmt, (tirx.For, tirx.AttrStmt, tirx.While)):
        body = _rebuild(stmt.body)
        if body.same_as(stmt.body):
            return stmt
        if isinstance(stmt, tirx.For):
            return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body, stmt.thread_binding,
                            stmt.annotations, stmt.step, stmt.span)
        if isinstance(stmt, tirx.AttrStmt):
            return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, body, stmt.span)
        return tirx.While(stmt.condition, body, stmt.span)
    return stmt  # leaves (stores, evaluations, bindings): no allocation inside


@tvm.transform.module_pass(opt_level=0, name="HetcStackLocals")
def stack_locals(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Mark the stack-sized local allocations of every PrimFunc (module docstring)."""
    for gv, func in list(mod.functions.items()):
        if isinstance(func, tirx.PrimFunc):
            body = _rebuild(func.body)
            if not body.same_as(func.body):
                mod[gv] = func.with_body(body)
    return mod


def _pipeline(**kwargs):
    lower, finalize_host, finalize_device = compilation_pipeline.get_tir_pipeline("default", **kwargs)
    return lower, lambda: tvm.transform.Sequential([stack_locals, finalize_host()]), finalize_device


compilation_pipeline.register_tir_pipeline(PIPELINE, _pipeline)
