"""What the Ascend target can run, and the BYOC partitioning into maximal regions.

One pattern per Relax op that ``onnx_writer`` can write (``hetc_ascend.<op>``), each checked
by ``onnx_writer.op_reason``: the op is written to ONNX on its own and the nodes are checked
against CANN's table (``support.py``: op type, opset, dtype, attributes), its shapes must be
static and at least one input must be computed (CANN's parser folds constants-only nodes, so
ORT's CANN provider keeps them off the device too). ``partition`` runs on ``main`` in the
model's own layout (NCHW: before the host's layout passes)::

    FuseOpsByPattern(table, annotate_codegen=False)   # one composite per supported op
    MergeCompositeFunctions()                          # maximal acyclic regions, "Codegen": "hetc_ascend"

``MergeCompositeFunctions`` merges neighbouring composites only where the merged function
cannot create a cycle through host ops (A -> host op -> B with A -> B stays two regions).
Transposes/reshapes/casts not connected to a supported op that computes are left on the host:
alone they would only move data to the NPU and back.

Between the two passes each composite function gets the op graph id of the op it replaced
(attr ``hetc_node``), so the report can list every region's model ops.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ...graph import OpNode
from ..byoc import (
    TAG,
    calls_to,
    codegen_functions,
    func_attr,
    isolated_movement,
    merge_composites,
    op_calls,
    op_graph_ids,
    placed_here,
    restore_types,
)
from . import onnx_writer

CODEGEN = "hetc_ascend"
MOVEMENT = frozenset({"relax.permute_dims", "relax.reshape", "relax.expand_dims", "relax.squeeze",
                      "relax.astype"})


def check_reason(call) -> str | None:
    """Why this Relax call stays on the host (None: CANN takes it)."""
    return onnx_writer.op_reason(call)


def supports(node: OpNode) -> bool:
    """The target registry's filter, from what an OpNode shows (op, dtypes, static shapes);
    attribute rules are applied by the pattern check on the Relax call."""
    from . import support

    dtypes = {t.dtype for t in node.inputs} | {t.dtype for t in node.outputs}
    return node.op in onnx_writer.WRITERS and bool(node.outputs) and dtypes <= support.ANY


def pattern_table(exclude: set | frozenset = frozenset(), allowed: set[int] | None = None,
                  ids: dict | None = None) -> list:
    """A ``FusionPattern`` per writable op, refusing calls with a reason, in ``exclude``, or
    tagged as ops a placement put elsewhere (``allowed``: the op graph ids it gave Ascend)."""
    from tvm.relax.dpl import is_op, wildcard
    from tvm.relax.transform import FusionPattern

    def check(ctx) -> bool:
        calls = [e for e in ctx.matched_bindings.values() if isinstance(e, relax.Call)]
        return placed_here(ctx, allowed, ids or {}) and all(c not in exclude and check_reason(c) is None for c in calls)

    # explicit arity: ``varg_default_wildcard`` patterns of multiply/divide fail inside TVM's matcher
    return [FusionPattern(f"{CODEGEN}.{op.removeprefix('relax.')}",
                          is_op(op)(*[wildcard() for _ in range(tvm.ir.Op.get(op).num_inputs)]), {}, check)
            for op in sorted(onnx_writer.WRITERS)]


def partition(mod: tvm.IRModule, allowed: set[int] | None = None) -> tvm.IRModule:
    """The supported ops of ``main`` (those a placement gave Ascend, with ``allowed``) cut into
    ``"Codegen": "hetc_ascend"`` regions."""
    isolated = isolated_movement(mod["main"], lambda c: check_reason(c) is None, MOVEMENT, allowed)
    before = [var for var, _ in _bindings(mod["main"])]
    table = pattern_table(isolated, allowed, op_graph_ids(mod["main"]))
    mod = relax.transform.FuseOpsByPattern(table, annotate_codegen=False)(mod)
    mod = _annotate(mod, before)
    return restore_types(merge_composites(mod), CODEGEN)


def _bindings(func) -> list:
    return [(b.var, b.value) for block in func.body.blocks for b in block.bindings]


def _annotate(mod: tvm.IRModule, before: list) -> tvm.IRModule:
    """Single-op composites replace their op's binding in place: record the op's tag."""
    after = _bindings(mod["main"])
    if len(after) != len(before):
        return mod
    for old, (_, value) in zip(before, after):
        match = TAG.fullmatch(old.name)
        if match and isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar):
            func = mod[value.op]
            if func_attr(func, "Composite") is not None:
                mod[value.op] = func.with_attr("hetc_node", match.group(1))
    return mod


def unsupported_reasons(mod: tvm.IRModule, allowed: set[int] | None = None) -> dict[str, str]:
    """For every op left on the host next to a region (an input of one, or using one's
    output): its variable's name -> why it was not offloaded (``allowed``: the op graph ids a
    placement gave Ascend)."""
    regions = set(codegen_functions(mod, CODEGEN))
    calls = calls_to(mod["main"], regions)
    region_vars = {b.var for b in _region_bindings(mod["main"], regions)}
    inputs = {a for c in calls for a in c.args}
    isolated = isolated_movement(mod["main"], lambda c: check_reason(c) is None, MOVEMENT, allowed)
    ids = op_graph_ids(mod["main"])
    reasons = {}
    for var, call in op_calls(mod["main"]):
        near = var in inputs or any(_reads(a, region_vars) for a in call.args)
        if not near:
            continue
        reason = check_reason(call)
        if reason is None and allowed is not None and ids.get(var) is not None and ids[var] not in allowed:
            reason = "the placement keeps it on the host (cheaper there, transfers included)"
        if reason is None:
            reason = ("moves data only, next to no NPU computation" if call in isolated
                      else "would join regions into a cycle through host ops")
        reasons[var.name] = reason
    return reasons


def _region_bindings(func, regions: set[str]) -> list:
    """Bindings whose value is a region's result (the call or a projection of it)."""
    out, seen = [], set()
    for block in func.body.blocks:
        for b in block.bindings:
            v = b.value
            if (isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.GlobalVar) and v.op.name_hint in regions) or (
                    isinstance(v, relax.TupleGetItem) and v.tuple_value in seen):
                out.append(b)
                seen.add(b.var)
    return out


def _reads(arg, region_vars: set) -> bool:
    if isinstance(arg, relax.Tuple):
        return any(_reads(f, region_vars) for f in arg.fields)
    return arg in region_vars
