"""Lower ops whose output shape only the run time knows, before any other graph pass.

``relax.dynamic_strided_slice`` (ONNX Slice with run-time starts/ends/axes/steps) legalizes to a
shape function, a ``tensor_to_shape`` and a ``match_cast`` to fresh symbolic dims, then the
slice itself. TVM 0.27's ``FoldConstant`` legalizes such a call to check whether it can fold it
and leaks the shape function's bindings into the graph without adding the function to the
module (``FuseOps`` then fails: "There is no definition of I.GlobalVar("shape_func")"). Lowering
these calls first, through the op's own ``FLegalize``, gives ``FoldConstant`` plain
``call_tir``s instead.
"""

from __future__ import annotations

import tvm
from tvm import relax

from .pipeline import rewrite_functions

# Ops whose legalization computes their output shape with a kernel at run time.
DYNAMIC_OPS = frozenset({"relax.dynamic_strided_slice"})


@relax.expr_functor.mutator
class _LowerDynamic(relax.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name in DYNAMIC_OPS:
            return call.op.get_attr("FLegalize")(self.builder_, self.builder_.normalize(call))
        return call


def _has_dynamic_ops(func: relax.Function) -> bool:
    found = []
    relax.analysis.post_order_visit(
        func, lambda e: found.append(e) if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op)
        and e.op.name in DYNAMIC_OPS else None)
    return bool(found)


@tvm.transform.module_pass(opt_level=0, name="HetcLegalizeDynamic")
def legalize_dynamic_pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Legalize the ``DYNAMIC_OPS`` calls of every Relax function; other modules are returned as
    they are."""
    funcs = {gvar: func for gvar, func in mod.functions.items()
             if isinstance(func, relax.Function) and _has_dynamic_ops(func)}
    if not funcs:
        return mod
    return rewrite_functions(_LowerDynamic(mod), mod, funcs)
