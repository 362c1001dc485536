"""What the external (BYOC) backends share: finding and naming their regions, tracing which
model ops each region holds, and the ``Offload`` skeleton their pipelines build on.

An external target's ``Backend.offload`` returns a ``RegionOffload`` subclass for one compile
(see ``hetc/backends/fpga/pipeline.py`` and ``hetc/backends/ascend/pipeline.py``). Its stages
run inside the host's pipeline: ``partition`` cuts the module into ``"Codegen": <codegen>``
functions (``FuseOpsByPattern`` -> ``MergeCompositeFunctions``), ``name_regions`` gives them
stable symbols in call order, and ``RunCodegen`` hands them to ``relax.ext.<codegen>``. After
the pipeline, ``records`` (manifest ``offloads``), ``report`` and ``write`` describe them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import tvm
from tvm import relax

from ..graph import OpGraph

TAG = re.compile(r"hetc_(\d+)_")


def module_pass(name: str, fn: Callable[[tvm.IRModule], tvm.IRModule]):
    """A module pass that applies ``fn`` (a Stage's pass factory returns one)."""

    @tvm.transform.module_pass(opt_level=0, name=name)
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return fn(mod)

    return apply


def func_attr(func, key: str):
    attrs = func.attrs
    return None if attrs is None or key not in attrs else attrs[key]


def codegen_functions(mod: tvm.IRModule, codegen: str) -> dict[str, relax.Function]:
    """The module's functions made for ``codegen`` (attr ``"Codegen"``), by name."""
    return {gv.name_hint: f for gv, f in mod.functions.items()
            if isinstance(f, relax.Function) and str(func_attr(f, "Codegen") or "") == codegen}


def calls_to(func: relax.Function, names: set[str]) -> list[relax.Call]:
    """The calls in ``func`` to the module functions named ``names``, in binding order."""
    return [b.value for block in func.body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.GlobalVar)
            and b.value.op.name_hint in names]


def name_regions(mod: tvm.IRModule, codegen: str, prefix: str,
                 suffix: Callable[[str], str] = lambda _name: "") -> tvm.IRModule:
    """Give the ``codegen`` functions the symbols ``<prefix><k><suffix(function name)>``, k in
    the order ``main`` calls them (the symbol is what the VM calls and what the artifact names)."""
    found = codegen_functions(mod, codegen)
    order: dict[str, int] = {}
    for call in calls_to(mod["main"], set(found)):
        order.setdefault(call.op.name_hint, len(order))
    for gv in list(mod.get_global_vars()):
        if gv.name_hint in found:
            k = order.get(gv.name_hint, len(order))
            func = found[gv.name_hint]
            mod[gv] = func.with_attr("global_symbol", f"{prefix}{k}{suffix(gv.name_hint)}")
    return mod


def node_ids(func) -> set[int]:
    """The op graph ids named in a function and the functions bound inside it (op bindings
    carry ``hetc_<node id>_`` tags, from ``placement.apply.tag_nodes``; composites that
    replaced one tagged op carry its id as attr ``hetc_node``)."""
    ids: set[int] = set()

    def visit(expr) -> None:
        if isinstance(expr, relax.Function):
            for block in expr.body.blocks:
                for binding in block.bindings:
                    match = TAG.fullmatch(binding.var.name)
                    if match:
                        ids.add(int(match.group(1)))
                    visit(binding.value)
            node = func_attr(expr, "hetc_node")  # a single-op composite (ascend/patterns.py)
            if node is not None:
                ids.add(int(node))

    visit(func)
    return ids


def op_calls(func: relax.Function) -> list[tuple[relax.Var, relax.Call]]:
    """(variable, call) for every operator call bound in ``func`` (not calls to functions)."""
    return [(b.var, b.value) for block in func.body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)]


def isolated_movement(func: relax.Function, ok: Callable[[relax.Call], bool], movement: frozenset[str]) -> set:
    """The data-movement calls of ``func`` (op names in ``movement``) that ``ok`` accepts but
    that are not connected, through other such calls, to an accepted op that computes: alone
    they would make a region that only moves data to the device and back."""
    producer, users = {}, {}
    calls = []
    for var, call in op_calls(func):
        calls.append(call)
        producer[var] = call
        for arg in call.args:
            users.setdefault(arg, []).append(call)
    bound = {id(c): v for v, c in producer.items()}
    good = {id(c) for c in calls if ok(c)}
    moving = {id(c) for c in calls if str(c.op.name) in movement and id(c) in good}

    def neighbours(call):
        return [producer[a] for a in call.args if a in producer] + users.get(bound[id(call)], [])

    anchored: set[int] = set()
    todo = [c for c in calls if id(c) in good and id(c) not in moving]
    while todo:
        for near in neighbours(todo.pop()):
            if id(near) in moving and id(near) not in anchored:
                anchored.add(id(near))
                todo.append(near)
    return {c for c in calls if id(c) in moving and id(c) not in anchored}


@dataclass
class BuiltRegion:
    """One region after codegen: its symbol, the op graph ids named inside (``node_ids``) and,
    after ``RegionOffload.assign_nodes``, all the model's ops it runs. Backends subclass it."""

    name: str
    node_ids: set[int] = field(default_factory=set)
    nodes: list[str] = field(default_factory=list)


class RegionOffload:
    """The part of one compile an external target runs (subclasses: ``stages``, ``records``,
    ``report``, ``write``). ``partition_with`` records which ops the regions took."""

    target = ""

    def __init__(self, graph: OpGraph) -> None:
        self.graph = graph
        self.regions: list = []  # BuiltRegion (or a subclass), in codegen order
        self.offloaded: set[int] = set()  # op graph ids inside some region
        self.seen: set[str] = set()  # ops still in the graph when it is partitioned (not folded away)

    def partition_with(self, mod: tvm.IRModule, partition: Callable[[tvm.IRModule], tvm.IRModule]) -> tvm.IRModule:
        before = node_ids(mod["main"])
        names = {n.id: n.name for n in self.graph.nodes}
        self.seen = {names[i] for i in before if i in names}
        mod = partition(mod)
        self.offloaded = before - node_ids(mod["main"])
        return mod

    def assign_nodes(self) -> None:
        """Each offloaded node's region. A region's function names most of its ops, but a
        composite's last op is renamed by the partitioner: such a node joins the region of a
        neighbour in the op graph (the rest of its composite)."""
        where = {i: r for r in self.regions for i in r.node_ids}
        links = {n.id: set(n.preds) for n in self.graph.nodes}
        for n in self.graph.nodes:
            for p in n.preds:
                links.setdefault(p, set()).add(n.id)
        todo = [i for i in sorted(self.offloaded) if i not in where]
        while todo:
            left = [i for i in todo if not any(j in where for j in links.get(i, ()))]
            for i in todo:
                if i not in left:
                    where[i] = next(where[j] for j in sorted(links.get(i, ())) if j in where)
            if len(left) == len(todo):
                for i in left:  # no placed neighbour at all: only possible with one region
                    if self.regions:
                        where[i] = self.regions[0]
                break
            todo = left
        names = {n.id: n.name for n in self.graph.nodes}
        for r in self.regions:
            r.nodes = [names[i] for i in sorted(where) if where[i] is r and i in names]
