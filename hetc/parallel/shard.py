"""Tensor-parallel compilation: a Megatron sharding plan, lowered through ``relax.distributed``.

``tensor_parallel_plan`` finds the blocks to shard (``megatron.py``: column-parallel
projections, attention split by heads, row-parallel projections, one all-reduce each), after
fused projections are split into one matmul per part (``projections.py``).

``shard_module`` annotates those weights in the global view and runs TVM's distributed
passes in the order that works (``docs/dev/tvm.md``): LegalizeOps, PropagateSharding,
LowerGlobalViewToLocalView, LegalizeRedistribute, LowerDistIR, LegalizeOps (the collectives
become ``runtime.disco.*`` calls). ``rank_module`` turns that SPMD program into rank k's:
the weight scatters become compile-time slices of the constants, so each rank's library
holds only its shard (packed for the CPU schedules), and only the input broadcasts and the
all-reduces remain as collectives.

To shard another op family, teach ``megatron.py`` where the split axis goes through it; the
distributed passes must also know its sharding rule (TVM's ``FInferDistType``/TIR analysis).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import tvm
from tvm import relax
from tvm.relax import distributed as dist

from ..errors import UsageError, last_line, plain
from .megatron import ShardPlan, megatron_plan
from .projections import split_fused_projections


class NothingToShard(UsageError):
    """The function has no column/row linear pair to split (``plan`` says why not)."""

    def __init__(self, message: str, plan: ShardPlan) -> None:
        super().__init__(message)
        self.plan = plan


def tensor_parallel_plan(fn: relax.Function, tp: int) -> ShardPlan:
    """The Megatron blocks of ``fn`` for ``tp`` ranks (``megatron.py``); an error without any."""
    plan = megatron_plan(fn, tp)
    if not plan.blocks:
        why = "; ".join(sorted({r["reason"] for r in plan.replicated})) or "it has no matmul by a constant weight"
        raise NothingToShard("--tp: the model has no linear layer pair (a matmul by a constant weight "
                             f"whose result reaches another one) to split across ranks: {why}", plan)
    return plan


def _annotated(fn: relax.Function, plan: ShardPlan, mesh) -> tuple[relax.Function, dict[str, np.ndarray]]:
    """``fn`` with each planned use of a constant lifted to a parameter of its own, annotated
    with its sharding; returns the parameter values by name."""
    sites: dict = {}  # call -> {argument index: (parameter, placement)}
    values, params = {}, []
    for i, (call, k, placement) in enumerate(plan.placements):
        const = call.args[k]
        var = relax.Var(f"tp_w{i}", const.ty)
        sites.setdefault(call, {})[k] = (var, placement)
        values[var.name] = const.value.numpy()
        params.append(var)

    @relax.expr_functor.mutator
    class Annotate(relax.PyExprMutator):
        def visit_call_(self, call):
            new = super().visit_call_(call)
            replace = sites.get(call)  # Relax nodes hash and compare by identity
            if not replace:
                return new
            args = list(new.args)
            for k, (var, placement) in replace.items():
                args[k] = relax.op.distributed.annotate_sharding(var, mesh, dist.Placement.from_text(placement))
            return relax.Call(new.op, args, new.attrs, new.ty_args)

    body = Annotate().visit_expr(fn.body)
    out = relax.Function(list(fn.params) + params, body, fn.ret_ty, attrs=fn.attrs)
    return out, values


def shard_module(mod: tvm.IRModule, tp: int, legalize_map: dict | None = None):
    """(SPMD module in the local view with ``runtime.disco`` collectives, lifted weights by name,
    the plan). ``mod``: after hetc's graph passes, before legalization."""
    mod, _ = split_fused_projections(mod)
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
    try:
        return seq(out), values, plan
    except Exception as err:  # noqa: BLE001 (TVM raises many kinds: a missing rule for an op such as relax.cumsum)
        why = plain(last_line(err))
        unsharded = ShardPlan(tp, replicated=[{"layer": "every layer", "reason": f"TVM's distributed passes: {why}"}])
        raise NothingToShard(f"--tp: TVM's distributed passes cannot shard this graph: {why}", unsharded) from None


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
    return {name: count for name, (count, _) in collective_traffic(mod).items()}


def collective_traffic(mod: tvm.IRModule) -> dict[str, tuple[int, int]]:
    """Per ``runtime.disco`` collective of ``main``: (calls, payload bytes per step), the
    payload being the size of each call's input tensor."""
    counts: Counter = Counter()
    sizes: Counter = Counter()

    def visit(expr) -> None:
        name = packed_name(expr)
        if name and name.startswith("runtime.disco."):
            name = name.removeprefix("runtime.disco.")
            counts[name] += 1
            ty = expr.args[1].fields[0].ty
            if isinstance(ty, relax.TensorType) and ty.shape is not None:
                sizes[name] += int(np.prod([int(d) for d in ty.shape])) * np.dtype(str(ty.dtype)).itemsize

    relax.analysis.post_order_visit(mod["main"], visit)
    return {name: (counts[name], sizes[name]) for name in counts}
