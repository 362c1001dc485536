"""Tensor-parallel compilation: a Megatron sharding plan, lowered through ``relax.distributed``.

``tensor_parallel_plan`` finds the linear layers to shard: a matmul by a constant weight
whose input is replicated becomes column-parallel (weight and bias split on the output
features, ``S[1]``/``S[0]``); the matmul that consumes its result, through elementwise ops,
head reshapes/transposes, softmax and batched matmuls (attention, split by heads), becomes
row-parallel (weight split on the input features, ``S[0]``), whose partial sums TVM turns
into one all-reduce. A column candidate whose sharded values reach anything else (a layer
norm, a model output, a reduction) stays replicated, so every pair costs exactly one
all-reduce in the forward pass.

``shard_module`` annotates those weights in the global view and runs TVM's distributed
passes in the order that works (``docs/dev/tvm.md``): LegalizeOps, PropagateSharding,
LowerGlobalViewToLocalView, LegalizeRedistribute, LowerDistIR, LegalizeOps (the collectives
become ``runtime.disco.*`` calls). ``rank_module`` turns that SPMD program into rank k's:
the weight scatters become compile-time slices of the constants, so each rank's library
holds only its shard (packed for the CPU schedules), and only the input broadcasts and the
all-reduces remain as collectives.

To shard another op family, teach ``_propagates`` how a sharded value passes through it; the
distributed passes must also know its sharding rule (TVM's ``FInferDistType``/TIR analysis).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax
from tvm.relax import distributed as dist

from ..errors import UsageError

# Ops through which a value sharded on its feature/head axis stays sharded, with no
# communication: elementwise arithmetic, the head split/merge reshapes and transposes,
# softmax over the (unsharded) key axis and attention's batched matmuls.
_PROPAGATES = {
    "relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.erf", "relax.tanh",
    "relax.exp", "relax.sigmoid", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.relu", "relax.nn.silu",
    "relax.reshape", "relax.permute_dims", "relax.nn.softmax", "relax.matmul", "relax.astype",
}


class NothingToShard(UsageError):
    """The function has no column/row linear pair to split."""


@dataclass
class ShardPlan:
    """Which weights are split how: constant -> placement text ("S[0]", "S[1]")."""

    tp: int
    placements: dict = field(default_factory=dict)  # GenericConst -> "S[k]"
    columns: int = 0  # column-parallel matmuls
    allreduces: int = 0  # row-parallel matmuls: one all-reduce each in the forward pass

    def describe(self) -> dict:
        return {"tp": self.tp, "column_parallel": self.columns, "row_parallel": self.allreduces,
                "sharded_weights": len(self.placements)}


def _is_weight(expr) -> bool:
    return isinstance(expr, tvm.ir.GenericConst) and len(expr.ty.shape) == 2


def tensor_parallel_plan(fn: relax.Function, tp: int) -> ShardPlan:
    """The Megatron column/row pairs of ``fn`` (see the module docstring) for ``tp`` ranks."""
    bindings = [b for block in fn.body.blocks for b in block.bindings]
    consumers: dict = {}
    for b in bindings:
        if isinstance(b.value, relax.Call):
            for arg in b.value.args:
                if isinstance(arg, relax.Var):
                    consumers.setdefault(arg, []).append(b)
    outputs = set(relax.analysis.free_vars(fn.body.body))

    plan = ShardPlan(tp)
    for b in bindings:
        call = b.value
        if not (isinstance(call, relax.Call) and call.op.name == "relax.matmul" and _is_weight(call.args[1])):
            continue
        if call.args[1] in plan.placements:
            continue
        pair = _column_region(b, consumers, outputs, tp)
        if pair is None:
            continue
        bias, rows = pair
        plan.placements[call.args[1]] = "S[1]"
        if bias is not None:
            plan.placements[bias] = "S[0]"
        for row in rows:
            plan.allreduces += row not in plan.placements
            plan.placements[row] = "S[0]"
        plan.columns += 1
    if not plan.columns:
        raise NothingToShard("--tp: the model has no linear layer pair (a matmul by a constant weight "
                             "whose result reaches another one) to split across ranks")
    return plan


def _column_region(start, consumers, outputs, tp: int):
    """(bias constant or None, row weights) if the column-parallel matmul bound by ``start`` has a
    clean region ending in row-parallel matmuls; None otherwise."""
    weight = start.value.args[1]
    if int(weight.ty.shape[1]) % tp:
        return None
    bias, rows, seen, stack = None, [], set(), [start]
    while stack:
        b = stack.pop()
        if b.var in seen:
            continue
        seen.add(b.var)
        if b.var in outputs:
            return None
        for user in consumers.get(b.var, []):
            call = user.value
            op = call.op.name
            if op == "relax.matmul" and call.args[0].same_as(b.var) and _is_weight(call.args[1]):
                if int(call.args[1].ty.shape[0]) % tp:
                    return None
                rows.append(call.args[1])  # row-parallel: its result is a partial sum, the region ends
                continue
            if op not in _PROPAGATES:
                return None
            if op == "relax.reshape" and len(call.ty.shape) > len(b.var.ty.shape) and int(call.ty.shape[-2]) % tp:
                return None  # a head split: the heads must divide among the ranks
            if op == "relax.add" and b is start and isinstance(call.args[1], tvm.ir.GenericConst):
                if len(call.args[1].ty.shape) != 1:
                    return None
                bias = call.args[1]
            elif op in ("relax.add", "relax.subtract", "relax.multiply", "relax.divide") and any(
                    isinstance(a, tvm.ir.GenericConst) and int(np.prod([int(d) for d in a.ty.shape])) > 1
                    for a in call.args):
                return None  # a full-size constant operand would need its own split
            stack.append(user)
    return (bias, rows) if rows else None


def _annotated(fn: relax.Function, plan: ShardPlan, mesh) -> tuple[relax.Function, dict[str, np.ndarray]]:
    """``fn`` with the planned constants lifted to parameters and annotated with their sharding;
    returns the parameter values by name."""
    lifted = {c: relax.Var(f"tp_w{i}", c.ty) for i, c in enumerate(plan.placements)}
    values = {v.name: c.value.numpy() for c, v in lifted.items()}

    @relax.expr_functor.mutator
    class Annotate(relax.PyExprMutator):
        def visit_generic_const_(self, const):
            for c, var in lifted.items():
                if c.same_as(const):
                    placement = dist.Placement.from_text(plan.placements[c])
                    return relax.op.distributed.annotate_sharding(var, mesh, placement)
            return const

    body = Annotate().visit_expr(fn.body)
    out = relax.Function(list(fn.params) + list(lifted.values()), body, fn.ret_ty, attrs=fn.attrs)
    return out, values


def shard_module(mod: tvm.IRModule, tp: int, legalize_map: dict | None = None):
    """(SPMD module in the local view with ``runtime.disco`` collectives, lifted weights by name,
    the plan). ``mod``: after hetc's graph passes, before legalization."""
    plan = tensor_parallel_plan(mod["main"], tp)
    mesh = dist.device_mesh((tp,), tvm.ir.Range(0, tp))
    fn, values = _annotated(mod["main"], plan, mesh)
    out = tvm.IRModule({"main": fn})
    out.update_global_info("mesh", [mesh])
    seq = tvm.transform.Sequential([
        relax.transform.Normalize(),
        relax.transform.LegalizeOps(customize_legalize_map=legalize_map),  # first: else no all-reduce
        dist.transform.PropagateSharding(),
        dist.transform.LowerGlobalViewToLocalView(),
        dist.transform.LegalizeRedistribute(),
        dist.transform.LowerDistIR(),
        relax.transform.LegalizeOps(),  # the ccl ops -> runtime.disco.* calls
    ])
    return seq(out), values, plan


def rank_module(spmd: tvm.IRModule, values: dict[str, np.ndarray], rank: int, tp: int) -> tvm.IRModule:
    """Rank ``rank``'s program: the lifted weights bound back as constants and each weight
    scatter replaced by the rank's slice, folded at compile time; replicated constants lose
    their DTensor type."""
    fn = spmd["main"].bind_params({name: tvm.runtime.tensor(value) for name, value in values.items()})

    @relax.expr_functor.mutator
    class Slice(relax.PyExprMutator):
        def visit_generic_const_(self, const):
            # constants left replicated keep a DTensor type ("R") that the local view does not strip
            return relax.const(const.value) if isinstance(const.ty, dist.DTensorType) else const

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if packed_name(call) == "runtime.disco.scatter_from_worker0":
                # the input is already reshaped/transposed to [tp, ...shard]: take row ``rank``
                return relax.op.take(call.args[1].fields[0], relax.const(rank, "int64"), axis=0)
            return call

    mod = spmd.clone()
    mod["main"] = Slice().visit_expr(fn)
    mod = tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.FoldConstant(),
                                    relax.transform.DeadCodeElimination()])(mod)
    left = collectives(mod)
    if left.get("scatter_from_worker0"):
        raise UsageError(f"--tp: {left['scatter_from_worker0']} weight scatter(s) did not fold into constants")
    return mod


def packed_name(call) -> str | None:
    """The global name a ``call_dps_packed`` calls (``runtime.disco.allreduce`` ...), else None."""
    if isinstance(call, relax.Call) and getattr(call.op, "name", None) == "relax.call_dps_packed":
        func = call.args[0]
        return str(func.global_symbol) if isinstance(func, relax.ExternFunc) else None
    return None


def collectives(mod: tvm.IRModule) -> dict[str, int]:
    """How many calls of each ``runtime.disco`` collective the module's ``main`` makes."""
    counts: Counter = Counter()

    def visit(expr) -> None:
        name = packed_name(expr)
        if name and name.startswith("runtime.disco."):
            counts[name.removeprefix("runtime.disco.")] += 1

    relax.analysis.post_order_visit(mod["main"], visit)
    return dict(counts)
