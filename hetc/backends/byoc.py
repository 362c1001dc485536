"""What the external (BYOC) backends share: finding and naming their regions, tracing which
model ops each region holds, and the ``Offload`` skeleton their pipelines build on.

An external target's ``Backend.offload`` returns a ``RegionOffload`` subclass for one compile
(see ``hetc/backends/fpga/pipeline.py`` and ``hetc/backends/ascend/pipeline.py``). Its two
stages run inside the host's pipeline (``with_offloads`` puts them before or after the layout
passes, by the offload's ``layout``): ``<target>_partition`` calls ``cut`` (``FuseOpsByPattern``
-> ``MergeCompositeFunctions``: ``"Codegen": <codegen>`` functions called from ``main``), with
the regions of targets before it sealed (``sealed``) and limited to the ops a placement gave
the target (``placed_here``); ``<target>_codegen`` calls ``name_regions`` (stable symbols in
call order) and ``RunCodegen``, which hands them to ``relax.ext.<codegen>`` (working for the
compile set in its ``CodegenContext``). After the pipeline, ``records`` (manifest
``offloads``), ``report`` and ``write`` describe them.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import tvm
from tvm import relax

from ..graph import OpGraph

TAG = re.compile(r"hetc_(\d+)_\d*")  # placement.apply.tag_nodes' names (a clash adds digits)


def with_offloads(stages: list, offloads) -> list:
    """A target pipeline with the offloads' stages inserted: those that cut in the model's
    layout (``layout = "model"``: Ascend, ONNX's NCHW) before the layout passes, the others
    (FPGA) after them; all before legalization."""
    if not offloads:
        return stages
    names = [s.name for s in stages]
    legalize = names.index("legalize")
    layout = names.index("convert_layout") if "convert_layout" in names else legalize
    model = [s for o in offloads if o.layout == "model" for s in o.stages()]
    host = [s for o in offloads if o.layout != "model" for s in o.stages()]
    return stages[:layout] + model + stages[layout:legalize] + host + stages[legalize:]


_DPS = tvm.ir.Op.get("relax.call_dps_packed")


@relax.expr_functor.mutator
class _Seal(relax.PyExprMutator):
    """Calls of generated regions (``call_dps_packed`` of an ``ExternFunc``, which TVM's
    partitioning passes cannot visit) become calls of placeholder functions, and back."""

    def __init__(self, mod: tvm.IRModule, sealed: dict | None = None) -> None:
        super().__init__(mod)
        self.sealed = {} if sealed is None else sealed  # placeholder name -> (ExternFunc, attrs, out types)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.same_as(_DPS) and isinstance(call.args[0], relax.ExternFunc):
            out = call.ty_args[0]
            if not isinstance(out, relax.TensorType) or out.shape is None:
                return call
            params = [relax.Var(f"x{i}", a.ty) for i, a in enumerate(call.args[1].fields)]
            body = relax.op.zeros(out.shape, out.dtype)  # never runs: the call is restored after
            gv = self.builder_.add_func(relax.Function(params, body, out, is_pure=True), "hetc_sealed")
            self.sealed[gv.name_hint] = (call.args[0], call.attrs, call.ty_args)
            return relax.Call(gv, list(call.args[1].fields))
        if isinstance(call.op, tvm.ir.GlobalVar) and call.op.name_hint in self.sealed:
            func, attrs, ty_args = self.sealed[call.op.name_hint]
            return relax.Call(_DPS, [func, relax.Tuple(list(call.args))], attrs, ty_args)
        return call


def sealed(mod: tvm.IRModule, partition: Callable[[tvm.IRModule], tvm.IRModule]) -> tvm.IRModule:
    """``partition(mod)`` with the regions other targets generated already hidden from it."""
    seal = _Seal(mod)
    main = seal.visit_expr(mod["main"])
    if not seal.sealed:
        return partition(mod)
    inner = seal.builder_.get()
    inner["main"] = main
    out = partition(inner)
    unseal = _Seal(out, seal.sealed)
    main = unseal.visit_expr(out["main"])
    out = unseal.builder_.get()
    out["main"] = main
    for gv in list(out.get_global_vars()):
        if gv.name_hint in seal.sealed:
            del out[gv]
    return out


@relax.expr_functor.mutator
class _HideSymbolic(relax.PyExprMutator):
    """Calls of ``main`` with symbolic values among their arguments (``strided_slice(x, ..., (seq,))``,
    ``arange(0, seq)``: TIR expressions of the symbolic dims) become calls of placeholder
    functions, and back: TVM 0.27's ``MergeCompositeFunctions`` finds no group for such a
    variable and aborts ("Could not find memo-ized group"). Only host ops carry such arguments
    (no region writer takes them), so hiding them changes no region."""

    def __init__(self, mod: tvm.IRModule, hidden: dict | None = None) -> None:
        super().__init__(mod)
        self.hidden = {} if hidden is None else hidden  # placeholder name -> original call

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and any(_symbolic_value(a) for a in call.args):
            tensors = [a for a in call.args if _relax_var(a)]
            params = [relax.Var(f"x{i}", a.ty) for i, a in enumerate(tensors)]
            gv = self.builder_.add_func(_placeholder(params, call.ty), "hetc_hidden")
            self.hidden[gv.name_hint] = call
            return relax.Call(gv, tensors)
        if isinstance(call.op, tvm.ir.GlobalVar) and call.op.name_hint in self.hidden:
            original = self.hidden[call.op.name_hint]
            args = iter(call.args)  # the tensor arguments, in order
            return relax.Call(original.op, [next(args) if _relax_var(a) else a for a in original.args],
                              original.attrs, original.ty_args)
        return call


def _symbolic_value(arg) -> bool:
    """A TIR expression that is not a constant (``seq``, ``batch * seq``), alone or in a tuple."""
    if isinstance(arg, relax.Tuple):
        return any(_symbolic_value(f) for f in arg.fields)
    return isinstance(getattr(arg, "ty", None), tvm.ir.PrimType) and not isinstance(arg, tvm.ir.Constant)


def _relax_var(arg) -> bool:
    return isinstance(arg, relax.Var) and not isinstance(arg.ty, tvm.ir.PrimType)


def _placeholder(params: list, ty) -> relax.Function:
    """A function of ``params`` typed to return ``ty``; it never runs (the call is restored)."""
    return relax.Function(params, relax.SeqExpr([], relax.const(0)), ty, is_pure=True)


def merge_composites(mod: tvm.IRModule) -> tvm.IRModule:
    """``MergeCompositeFunctions`` with the calls that take symbolic values hidden from it (see
    ``_HideSymbolic``)."""
    hide = _HideSymbolic(mod)
    main = hide.visit_expr(mod["main"])
    if not hide.hidden:
        return relax.transform.MergeCompositeFunctions()(mod)
    inner = hide.builder_.get()
    inner["main"] = main
    out = relax.transform.MergeCompositeFunctions()(inner)
    show = _HideSymbolic(out, hide.hidden)
    main = show.visit_expr(out["main"])
    out = show.builder_.get()
    out["main"] = main
    for gv in list(out.get_global_vars()):
        if gv.name_hint in hide.hidden:
            del out[gv]
    return out


class CodegenContext:
    """Which ``RegionOffload`` a registered ``relax.ext.<codegen>`` works for: ``RunCodegen``
    calls the codegen by name, so the compile in progress is set around it (``active``)."""

    def __init__(self, codegen: str) -> None:
        self.codegen = codegen
        self.var: contextvars.ContextVar = contextvars.ContextVar(codegen)

    @contextlib.contextmanager
    def active(self, offload):
        token = self.var.set(offload)
        try:
            yield
        finally:
            self.var.reset(token)

    def current(self):
        offload = self.var.get(None)
        if offload is None:
            from ..errors import CompileError

            raise CompileError(f"internal: {self.codegen} regions reached RunCodegen outside an hetc compile")
        return offload


def module_pass(name: str, fn: Callable[[tvm.IRModule], tvm.IRModule]):
    """A module pass that applies ``fn`` (a Stage's pass factory returns one)."""

    @tvm.transform.module_pass(opt_level=0, name=name)
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return fn(mod)

    return apply


def op_graph_ids(func: relax.Function) -> dict:
    """Each bound variable of ``func`` -> the op graph id it belongs to: its own tag, or for a
    binding the graph passes made (a decomposed op's pieces, a layout transpose) the id of the
    value it reads first, as ``placement.apply`` places such bindings with their producer."""
    ids: dict = {}
    for block in func.body.blocks:
        for b in block.bindings:
            match = TAG.fullmatch(b.var.name)
            if match:
                ids[b.var] = int(match.group(1))
                continue
            v = b.value
            args = [v.tuple_value] if isinstance(v, relax.TupleGetItem) else list(getattr(v, "args", []))
            if isinstance(v, relax.Var):
                args = [v]
            ids[b.var] = next((ids[a] for a in args if a in ids), None)
    return ids


def placed_here(ctx, allowed: set[int] | None, ids: dict) -> bool:
    """Whether every op a pattern matched belongs (``op_graph_ids``) to an op the placement gave
    this target (``allowed``: op graph ids; None: every op)."""
    if allowed is None:
        return True
    return all(ids.get(var) in allowed for var in ctx.matched_bindings if ids.get(var) is not None)


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


def isolated_movement(func: relax.Function, ok: Callable[[relax.Call], bool], movement: frozenset[str],
                      allowed: set[int] | None = None) -> set:
    """The data-movement calls of ``func`` (op names in ``movement``) that ``ok`` accepts but
    that are not connected, through other such calls, to an accepted op that computes (and that
    a placement gave the target: ``allowed`` op graph ids, see ``placed_here``): alone they
    would make a region that only moves data to the device and back."""
    ids = op_graph_ids(func) if allowed is not None else {}
    producer, users = {}, {}
    calls = []
    for var, call in op_calls(func):
        calls.append(call)
        producer[var] = call
        for arg in call.args:
            users.setdefault(arg, []).append(call)
    bound = {id(c): v for v, c in producer.items()}
    good = {id(c) for c in calls if ok(c) and (allowed is None or ids.get(bound[id(c)]) in allowed
                                               or ids.get(bound[id(c)]) is None)}
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
    layout = "host"  # "model": partition before the host's layout passes (see with_offloads)

    def __init__(self, graph: OpGraph) -> None:
        self.graph = graph
        self.regions: list = []  # BuiltRegion (or a subclass), in codegen order
        self.allowed: set[int] | None = None  # op graph ids a placement gave this target (None: all it supports)
        self.offloaded: set[int] = set()  # op graph ids inside some region
        self.seen: set[str] = set()  # ops still in the graph when it is partitioned (not folded away)

    def stages(self) -> list:
        """``<target>_partition`` (``cut``, with the regions of targets before it sealed) and
        ``<target>_codegen`` (``name_regions``, then ``RunCodegen`` in ``codegen_scope``)."""
        from ..passes.pipeline import Stage

        t = self.target
        return [Stage(f"{t}_partition", f"cut the ops {t} runs into regions (BYOC)",
                      lambda: module_pass(f"Hetc_{t}_partition", lambda m: self.partition_with(m, self.cut))),
                Stage(f"{t}_codegen", f"generate the code of the {t} regions (RunCodegen)",
                      lambda: module_pass(f"Hetc_{t}_codegen", self.codegen))]

    def cut(self, mod: tvm.IRModule) -> tvm.IRModule:
        """The target's partitioning: ``"Codegen"`` functions called from ``main``."""
        raise NotImplementedError

    def name_regions(self, mod: tvm.IRModule) -> tvm.IRModule:
        """Give the regions their symbols (``name_regions``) and record what codegen needs."""
        raise NotImplementedError

    def codegen_scope(self):
        """A context in which ``relax.ext.<codegen>`` works for this compile."""
        raise NotImplementedError

    def codegen(self, mod: tvm.IRModule) -> tvm.IRModule:
        mod = self.name_regions(mod)
        with self.codegen_scope():
            return relax.transform.RunCodegen()(mod)

    def partition_with(self, mod: tvm.IRModule, partition: Callable[[tvm.IRModule], tvm.IRModule]) -> tvm.IRModule:
        before = node_ids(mod["main"])
        names = {n.id: n.name for n in self.graph.nodes}
        self.seen = {names[i] for i in before if i in names}
        mod = sealed(mod, partition)
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
