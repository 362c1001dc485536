"""Keep kernel fusion from running a kernel before the symbolic dims it needs are bound.

A shape known only at run time (an ONNX input that is a shape, a count or axes) is bound to
fresh symbolic dims by a ``match_cast`` inside the graph's dataflow block. TVM 0.27's
``FuseOps`` tracks tensors but not symbolic dims: it can fuse an op that comes before the
``match_cast`` with one after it that uses the new dims, and emits the fused kernel at the
first op's place, before the dims are bound (codegen: "PrimExpr ... has not been computed").
Functions with such a ``match_cast`` are turned into plain binding blocks
(``ToNonDataflow``), which ``FuseOps`` leaves alone: their ops run unfused, in order. Other
functions (static shapes, symbolic input dims) are unchanged, and so are those whose
``match_cast`` only restates dims already bound (``T.max(samples // 20 - 1, 0)`` cast to
``samples // 20 - 1`` after a slice, as in every wav2vec2-style positional conv): unfusing a
whole model for one of those made wav2vec2's TorchScript export (symbolic batch and length)
run 86 kernels instead of 43, 2.6x slower (2-core Zen 5, AVX-512).
"""

from __future__ import annotations

import tvm
from tvm import relax


def binds_dims_in_dataflow(func: relax.Function) -> bool:
    """True if a dataflow block of ``func`` binds new symbolic dims with a ``match_cast``."""
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return False
    bound = {v for p in func.params for v in relax.analysis.definable_tir_vars_in_type(p.ty)}
    for block in body.blocks:
        for binding in block.bindings:
            if not isinstance(binding, relax.MatchCast):
                continue
            new = set(relax.analysis.definable_tir_vars_in_type(binding.ty)) - bound
            if new and isinstance(block, relax.DataflowBlock):
                return True
            bound |= new
    return False


@tvm.transform.module_pass(opt_level=0, name="HetcUnfuseRuntimeShapes")
def unfuse_runtime_shapes_pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    targets = [gvar for gvar, func in mod.functions.items()
               if isinstance(func, relax.Function) and binds_dims_in_dataflow(func)]
    if not targets:
        return mod
    lowered = relax.transform.ToNonDataflow()(tvm.IRModule({gvar: mod[gvar] for gvar in targets}))
    mod = mod.clone()
    for gvar in targets:
        mod.update_func(gvar, lowered[gvar])
    return mod
