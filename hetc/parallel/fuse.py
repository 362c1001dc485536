"""Fusing adjacent collectives of a rank's program into one call each.

Each collective costs a latency term (α in ``collectives.py``) whatever its size, so k calls
of the same kind that could run together should be one: their inputs are flattened and
concatenated, the collective runs once on the concatenation, and each result is a slice of
it reshaped back. That is exact for a broadcast and for an elementwise reduction (sum, max,
...), the two kinds TVM's lowering emits around a Megatron layer (input broadcasts, the
all-reduce after each row-parallel matmul).

Legal when, within one dataflow block: the calls have the same collective, dtype and
non-tensor arguments (reduction op, group); no call's input depends on another's result;
and nothing between the first and the last uses a result. The fused call then sits where
the last one was. ``fuse_collectives`` groups calls greedily in binding order: a group closes
as soon as a binding reads one of its results.

To fuse another collective, add its global name to ``FUSABLE`` (it must act elementwise on
its first argument's flattened data, with the result shaped like it).
"""

from __future__ import annotations

import math

import tvm
from tvm import relax

from .shard import packed_name

FUSABLE = ("runtime.disco.broadcast_from_worker0", "runtime.disco.allreduce")


def _collective(value) -> tuple | None:
    """The fusion key of a fusable collective call: (name, dtype, other arguments), else None."""
    name = packed_name(value)
    if name not in FUSABLE:
        return None
    args = value.args[1].fields
    ty = args[0].ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    return name, str(ty.dtype), tuple(str(a) for a in args[1:])


def _groups(block: relax.BindingBlock) -> list[list[relax.VarBinding]]:
    """Groups of two or more bindings of ``block`` that may become one collective."""
    done, open_groups = [], {}  # key -> bindings
    owner = {}  # result var -> key of the open group holding it
    for binding in block.bindings:
        value = binding.value
        used = set(relax.analysis.free_vars(value))
        for key in {owner[v] for v in used if v in owner}:  # a result is read: that group is complete
            done.append(open_groups.pop(key))
            owner = {v: k for v, k in owner.items() if k != key}
        key = _collective(value)
        if key is not None:
            open_groups.setdefault(key, []).append(binding)
            owner[binding.var] = key
    done += open_groups.values()
    return [g for g in done if len(g) > 1]


@relax.expr_functor.mutator
class _Fuse(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, groups: list[list[relax.VarBinding]]) -> None:
        super().__init__(mod)
        self.group_of = {b.var: g for g in groups for b in g}

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        group = self.group_of.get(binding.var)
        if group is None:
            return super().visit_var_binding_(binding)
        if not binding.var.same_as(group[-1].var):
            return None  # emitted with the last of its group (nothing reads it before then)
        calls = [b.value for b in group]
        inputs = [self.visit_expr(c.args[1].fields[0]) for c in calls]
        shapes = [[int(d) for d in x.ty.shape] for x in inputs]
        sizes = [math.prod(s) for s in shapes]
        flat = self.builder_.emit(relax.op.concat([relax.op.reshape(x, [n]) for x, n in zip(inputs, sizes)], axis=0))
        first = calls[0]
        out_ty = relax.TensorType([sum(sizes)], str(inputs[0].ty.dtype))
        name = packed_name(first).split(".")[-1]
        fused = self.builder_.emit(relax.Call(first.op, [first.args[0], relax.Tuple([flat, *first.args[1].fields[1:]])],
                                              first.attrs, [out_ty]), f"fused_{name}")
        offset = 0
        for b, shape, n in zip(group, shapes, sizes):
            piece = relax.op.reshape(relax.op.strided_slice(fused, [0], [offset], [offset + n]), shape)
            emit = self.builder_.emit if isinstance(b.var, relax.DataflowVar) else self.builder_.emit_output
            self.set_var_remap(b.var, emit(piece, b.var.name))
            offset += n
        return None


def fuse_collectives(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each group of fusable collectives in ``main`` made one call (legalized:
    the concatenations and slices are ``call_tir``s)."""
    groups = [g for block in mod["main"].body.blocks for g in _groups(block)]
    if not groups:
        return mod
    out = mod.clone()
    out["main"] = _Fuse(mod, groups).visit_expr(mod["main"])
    return relax.transform.LegalizeOps()(out)
