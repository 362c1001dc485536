"""Keep kernel fusion from running a kernel before the symbolic dims it needs are bound.

A shape known only at run time (an ONNX input that is a shape, a count or axes; the number of
boxes a detector keeps) is bound to fresh symbolic dims by a ``match_cast`` inside the graph's
dataflow block. TVM 0.27's ``FuseOps`` tracks tensors but not symbolic dims: it can fuse an op
that comes before the ``match_cast`` with one after it that uses the new dims, and emits the
fused kernel at the first op's place, before the dims are bound (codegen: "PrimExpr ... has not
been computed").

Each dataflow block is therefore split at every ``match_cast`` that binds new dims: the ops
before it form one dataflow block, the ``match_cast`` a plain binding block of its own, the ops
after it the next dataflow block. ``FuseOps`` fuses within a dataflow block and never across
blocks, so every kernel still runs after the dims it reads are bound, and the ops between two
such casts stay fused. A dataflow var used across a split becomes a plain var (dataflow vars
cannot leave their block). ``match_cast``s that only restate dims already bound
(``T.max(samples // 20 - 1, 0)`` cast to ``samples // 20 - 1`` after a slice, as in every
wav2vec2-style positional conv) are left in place.

This replaced unfusing every such function whole (``ToNonDataflow``): torchvision's
SSDlite320 (TorchScript export), whose post-processing binds the kept box count, ran all its
backbone ops unfused, 2.2x onnxruntime (2-core Zen 5, AVX-512).
"""

from __future__ import annotations

import tvm
from tvm import relax


def _binds_new_dims(binding, bound: set) -> set:
    """The symbolic dims ``binding`` defines that are not in ``bound`` (empty unless a match_cast)."""
    if not isinstance(binding, relax.MatchCast):
        return set()
    return set(relax.analysis.definable_tir_vars_in_type(binding.ty)) - bound


def _param_dims(func: relax.Function) -> set:
    return {v for p in func.params for v in relax.analysis.definable_tir_vars_in_type(p.ty)}


def _segments(func: relax.Function) -> tuple[list[tuple[bool, list]], bool]:
    """``func``'s bindings as (is_dataflow, bindings) runs, dataflow blocks cut at each match_cast
    that binds new dims (that cast alone in a plain run), and whether any was cut."""
    bound = _param_dims(func)
    runs: list[tuple[bool, list]] = []
    cut = False
    for block in func.body.blocks:
        dataflow = isinstance(block, relax.DataflowBlock)
        current: list = []
        for binding in block.bindings:
            new = _binds_new_dims(binding, bound)
            bound |= new
            if new and dataflow:
                if current:
                    runs.append((True, current))
                runs.append((False, [binding]))
                current, cut = [], True
            else:
                current.append(binding)
        if current:
            runs.append((dataflow, current))
    return runs, cut


def binds_dims_in_dataflow(func: relax.Function) -> bool:
    """True if a dataflow block of ``func`` binds new symbolic dims with a ``match_cast``."""
    return isinstance(func.body, relax.SeqExpr) and _segments(func)[1]


@relax.expr_functor.mutator
class _Rebind(relax.PyExprMutator):
    """Rebuild the bindings of the split runs, renaming dataflow vars that cross a run."""

    def __init__(self, crossing: set):
        super().__init__()
        self.crossing = crossing

    def rebuild(self, func: relax.Function, runs) -> relax.Function:
        blocks = []
        for dataflow, bindings in runs:
            if dataflow:
                self.builder_._begin_dataflow_block()
            else:
                self.builder_._begin_binding_block()
            for binding in bindings:
                var = binding.var
                if isinstance(var, relax.DataflowVar) and (not dataflow or var in self.crossing):
                    new = relax.Var(var.name, var.ty)
                    self.set_var_remap(var, new)
                else:
                    new = var
                value = self.visit_expr(binding.value)
                if isinstance(binding, relax.MatchCast):
                    self.builder_.emit_normalized(relax.MatchCast(new, value, binding.ty))
                else:
                    self.builder_.emit_normalized(relax.VarBinding(new, value))
            blocks.append(self.builder_._end_block())
        body = relax.SeqExpr(blocks, self.visit_expr(func.body.body))
        return relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span)


def split_at_runtime_shapes(func: relax.Function) -> relax.Function:
    """``func`` with its dataflow blocks cut at each ``match_cast`` binding new dims."""
    runs, _ = _segments(func)
    home = {b.var: i for i, (_, bindings) in enumerate(runs) for b in bindings}
    crossing = set()
    for i, (_, bindings) in enumerate(runs):
        for binding in bindings:
            for var in relax.analysis.free_vars(binding.value):
                if isinstance(var, relax.DataflowVar) and home.get(var, i) != i:
                    crossing.add(var)
    for var in relax.analysis.free_vars(func.body.body):
        if isinstance(var, relax.DataflowVar):
            crossing.add(var)
    return _Rebind(crossing).rebuild(func, runs)


@tvm.transform.module_pass(opt_level=0, name="HetcSplitAtRuntimeShapes")
def split_at_runtime_shapes_pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    targets = [gvar for gvar, func in mod.functions.items()
               if isinstance(func, relax.Function) and binds_dims_in_dataflow(func)]
    if not targets:
        return mod
    mod = mod.clone()
    for gvar in targets:
        mod.update_func(gvar, split_at_runtime_shapes(mod[gvar]))
    return mod
