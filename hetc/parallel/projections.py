"""Fused projections split into one matmul per part, before tensor-parallel planning.

GPT-2 (and other exporters' fused QKV) computes ``x @ W_qkv + b`` once and splits the result
into Q, K and V along the features. Splitting ``W_qkv``'s columns over the ranks would give
rank 0 all of Q and half of K; Megatron splits each part by heads instead. Rewriting

    y = split(reshape*(add(matmul(x, W), b)), [i1, i2, ...], axis=-1)

into a tuple of ``reshape*(add(matmul(x, W[:, lo:hi]), b[lo:hi]))``, one per part, is exact
and lets the planner (``megatron.py``) treat each part as a column-parallel projection of
its own. Only chains whose intermediate values have no other use are rewritten, and only
reshapes that keep the last (feature) axis.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .megatron import static_dims


def _last_dim_kept(src, dst) -> bool:
    return src is not None and dst is not None and len(src) >= 1 and len(dst) >= 1 and src[-1] == dst[-1]


def split_fused_projections(mod: tvm.IRModule) -> tuple[tvm.IRModule, int]:
    """``mod`` with its fused projections split (see the module docstring); and how many."""
    fn = mod["main"]
    bindings = {b.var: b.value for block in fn.body.blocks for b in block.bindings}
    uses: dict = {}
    for value in bindings.values():
        if isinstance(value, relax.Call):
            for a in value.args:
                if isinstance(a, relax.Var):
                    uses[a] = uses.get(a, 0) + 1
    count = 0

    def chain(var):
        """(x, W, b or None, [reshape shapes]) if ``var`` is reshape*(add?(matmul(x, W const)))."""
        shapes = []
        while isinstance(var, relax.Var) and uses.get(var, 0) == 1 and isinstance(bindings.get(var), relax.Call):
            call = bindings[var]
            op = call.op.name if isinstance(call.op, tvm.ir.Op) else None
            if op == "relax.reshape" and _last_dim_kept(static_dims(call.args[0]), static_dims(var)):
                shapes.append(static_dims(var))
                var = call.args[0]
                continue
            bias = None
            if op == "relax.add":
                consts = [a for a in call.args if isinstance(a, tvm.ir.GenericConst)]
                others = [a for a in call.args if not isinstance(a, tvm.ir.GenericConst)]
                if len(consts) != 1 or len(others) != 1 or static_dims(consts[0]) != static_dims(var)[-1:]:
                    return None
                bias, var = consts[0], others[0]
                if not (isinstance(var, relax.Var) and uses.get(var, 0) == 1 and isinstance(bindings.get(var), relax.Call)):
                    return None
                call = bindings[var]
                op = call.op.name if isinstance(call.op, tvm.ir.Op) else None
            if op == "relax.matmul" and isinstance(call.args[1], tvm.ir.GenericConst) and len(static_dims(call.args[1])) == 2:
                return call.args[0], call.args[1], bias, shapes[::-1]
            return None
        return None

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def visit_call_(self, call):
            nonlocal count
            if getattr(call.op, "name", None) == "relax.split":
                dims = static_dims(call.args[0])
                found = chain(call.args[0]) if dims is not None and int(call.attrs.axis) % len(dims) == len(dims) - 1 else None
                if found is not None:
                    x, weight, bias, shapes = found
                    sections = call.attrs.indices_or_sections
                    total = dims[-1]
                    if hasattr(sections, "__len__"):  # split points
                        cuts = [int(i) for i in sections]
                    else:  # a number of equal sections
                        cuts = list(range(total // int(sections), total, total // int(sections)))
                    bounds = list(zip([0, *cuts], [*cuts, total], strict=True))
                    w, b = weight.value.numpy(), None if bias is None else bias.value.numpy()
                    parts = []
                    for lo, hi in bounds:
                        part = relax.op.matmul(self.visit_expr(x), relax.const(np.ascontiguousarray(w[:, lo:hi])))
                        if b is not None:
                            part = relax.op.add(part, relax.const(np.ascontiguousarray(b[lo:hi])))
                        for shape in shapes:
                            part = relax.op.reshape(part, [*shape[:-1], hi - lo])
                        parts.append(part)
                    count += 1
                    return relax.Tuple(parts)
            return super().visit_call_(call)

    out = mod.clone()
    out["main"] = Rewrite().visit_expr(fn)
    if count:
        out = tvm.transform.Sequential([relax.transform.Normalize(), relax.transform.DeadCodeElimination()])(out)
    return out, count
