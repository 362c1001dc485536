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
    (FPGA) after them; all before the CPU's Winograd rewrite (which would turn an offloadable
    conv into kernels) and before legalization."""
    if not offloads:
        return stages
    names = [s.name for s in stages]
    legalize = names.index("legalize")
    layout = names.index("convert_layout") if "convert_layout" in names else legalize
    model = [s for o in offloads if o.layout == "model" for s in o.stages()]
    host = [s for o in offloads if o.layout != "model" for s in o.stages()]
    host_at = names.index("winograd") if "winograd" in names[layout:legalize] else legalize
    return stages[:layout] + model + stages[layout:host_at] + host + stages[host_at:]


_DPS = tvm.ir.Op.get("relax.call_dps_packed")


@relax.expr_functor.mutator
class _Seal(relax.PyExprMutator):
    """Calls of generated regions (``call_dps_packed`` of an ``ExternFunc``, which TVM's
    partitioning passes cannot visit) become calls of placeholder functions, and back."""

    def __init__(self, mod: tvm.IRModule, placeholders: dict | None = None) -> None:
        super().__init__(mod)
        self.placeholders = {} if placeholders is None else placeholders  # name -> (ExternFunc, attrs, out types)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.same_as(_DPS) and isinstance(call.args[0], relax.ExternFunc):
            out = call.ty_args[0]
            if not isinstance(out, relax.TensorType) or out.shape is None:
                return call
            params = [relax.Var(f"x{i}", a.ty) for i, a in enumerate(call.args[1].fields)]
            body = relax.op.zeros(out.shape, out.dtype)  # never runs: the call is restored after
            gv = self.builder_.add_func(relax.Function(params, body, out, is_pure=True), "hetc_sealed")
            self.placeholders[gv.name_hint] = (call.args[0], call.attrs, call.ty_args)
            return relax.Call(gv, list(call.args[1].fields))
        if isinstance(call.op, tvm.ir.GlobalVar) and call.op.name_hint in self.placeholders:
            func, attrs, ty_args = self.placeholders[call.op.name_hint]
            return relax.Call(_DPS, [func, relax.Tuple(list(call.args))], attrs, ty_args)
        return call


def _with_placeholders(mod: tvm.IRModule, mutator, run: Callable[[tvm.IRModule], tvm.IRModule]) -> tvm.IRModule:
    """``run(mod)`` with the calls ``mutator`` replaces by placeholder functions hidden from it,
    restored afterwards (``mutator(mod, placeholders)``: ``_Seal``, ``_HideSymbolic``)."""
    hide = mutator(mod)
    main = hide.visit_expr(mod["main"])
    if not hide.placeholders:
        return run(mod)
    inner = hide.builder_.get()
    inner["main"] = main
    out = run(inner)
    show = mutator(out, hide.placeholders)
    main = show.visit_expr(out["main"])
    out = show.builder_.get()
    out["main"] = main
    for gv in list(out.get_global_vars()):
        if gv.name_hint in hide.placeholders:
            del out[gv]
    return out


def sealed(mod: tvm.IRModule, partition: Callable[[tvm.IRModule], tvm.IRModule]) -> tvm.IRModule:
    """``partition(mod)`` with the regions other targets generated already hidden from it."""
    return _with_placeholders(mod, _Seal, partition)


@relax.expr_functor.mutator
class _HideSymbolic(relax.PyExprMutator):
    """Calls of ``main`` with symbolic values among their arguments (``strided_slice(x, ..., (seq,))``,
    ``arange(0, seq)``: TIR expressions of the symbolic dims) become calls of placeholder
    functions, and back: TVM 0.27's ``MergeCompositeFunctions`` finds no group for such a
    variable and aborts ("Could not find memo-ized group"). Only host ops carry such arguments
    (no region writer takes them), so hiding them changes no region."""

    def __init__(self, mod: tvm.IRModule, placeholders: dict | None = None) -> None:
        super().__init__(mod)
        self.placeholders = {} if placeholders is None else placeholders  # name -> original call

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and any(_symbolic_value(a) for a in call.args):
            tensors = [a for a in call.args if _relax_var(a)]
            params = [relax.Var(f"x{i}", a.ty) for i, a in enumerate(tensors)]
            gv = self.builder_.add_func(_placeholder(params, call.ty), "hetc_hidden")
            self.placeholders[gv.name_hint] = call
            return relax.Call(gv, tensors)
        if isinstance(call.op, tvm.ir.GlobalVar) and call.op.name_hint in self.placeholders:
            original = self.placeholders[call.op.name_hint]
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
    return _with_placeholders(mod, _HideSymbolic, relax.transform.MergeCompositeFunctions())


def _erased(ty) -> bool:
    """Whether a tensor (or tuple) type lost a shape it must have (``ndim`` only)."""
    if isinstance(ty, relax.TupleType):
        return any(_erased(f) for f in ty.fields)
    return isinstance(ty, relax.TensorType) and ty.shape is None and ty.ndim >= 0


@relax.expr_functor.mutator
class _Retype(relax.PyExprMutator):
    """Region functions typed again from their call sites and composites (see ``restore_types``),
    and ``main``'s bindings of their results re-derived from them."""

    def __init__(self, mod: tvm.IRModule, params: dict | None = None, regions: set | None = None,
                 drop: dict | None = None) -> None:
        super().__init__(mod)
        self.params = params or {}  # old param -> new param (or the shape it stands for)
        self.regions = regions or set()
        self.drop = drop or {}  # region -> indices of call arguments to drop

    def visit_var_(self, var: relax.Var) -> relax.Expr:
        return self.params[var] if var in self.params else super().visit_var_(var)

    def visit_var_binding_(self, binding) -> None:
        value = self.visit_expr(binding.value)
        region = (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar)
                  and value.op.name_hint in self.regions)
        if region:  # a fresh call: its type is inferred from the region's new signature
            drop = self.drop.get(value.op.name_hint, set())
            value = relax.Call(self.builder_.get().get_global_var(value.op.name_hint),
                               [a for k, a in enumerate(value.args) if k not in drop], value.attrs, value.ty_args)
        if region or _erased(binding.var.ty):
            output = not isinstance(binding.var, relax.DataflowVar) and self.builder_.current_block_is_dataflow()
            new = (self.builder_.emit_output if output else self.builder_.emit)(value, binding.var.name)
            self.set_var_remap(binding.var, new)
        else:
            super().visit_var_binding_(binding)


def restore_types(mod: tvm.IRModule, codegen: str) -> tvm.IRModule:
    """Give the ``codegen`` regions back the shapes ``MergeCompositeFunctions`` erases when they
    are symbolic (TVM 0.27 types a merged function's parameters and result ``R.Tensor(ndim=2)``):
    first each result from the composite functions that produce it, with ``main``'s bindings of
    the results re-derived from those; then the parameters from the arguments at the call site."""
    regions = codegen_functions(mod, codegen)
    changed = set()
    dims = {v.name: v for v in relax.analysis.defined_symbolic_vars(mod["main"])}
    for name, func in regions.items():
        if not _erased(func.ret_ty):
            continue
        ret = _result_type(func, dims)
        if ret is not None:
            mod = _replace(mod, name, relax.Function(func.params, func.body, ret, func.is_pure, func.attrs))
            changed.add(name)
    if changed:
        retype = _Retype(mod, regions=changed, drop={})
        main = retype.visit_expr(mod["main"])
        mod = retype.builder_.get()
        mod["main"] = main
    for _ in range(len(regions) + 1):  # a region's arguments may be the results of one fixed in this round
        mod, progress = _restore_params(mod, codegen)
        if not progress:
            break
    return mod


def _restore_params(mod: tvm.IRModule, codegen: str) -> tuple[tvm.IRModule, bool]:
    """The regions' erased parameters typed from their arguments in ``main`` (where those are
    typed), symbolic shape arguments moved inside; whether anything changed."""
    regions = codegen_functions(mod, codegen)
    calls = {c.op.name_hint: c for c in calls_to(mod["main"], set(regions))}
    drop: dict[str, set[int]] = {}
    for name, func in regions.items():
        call = calls.get(name)
        if call is None:
            continue
        # a reshape's symbolic target shape is passed in as a parameter: put it back inside
        shapes = {k for k, a in enumerate(call.args) if isinstance(a, relax.ShapeExpr)}
        erased = {k for k, (p, a) in enumerate(zip(func.params, call.args)) if _erased(p.ty) and not _erased(a.ty)}
        if not shapes and not erased:
            continue
        params = {p: a if k in shapes else relax.Var(p.name, a.ty) if k in erased else p
                  for k, (p, a) in enumerate(zip(func.params, call.args))}
        body = _Retype(mod, params).visit_expr(func.body)
        kept = [v for k, v in enumerate(params.values()) if k not in shapes]
        mod = _replace(mod, name, relax.Function(kept, body, func.ret_ty, func.is_pure, func.attrs))
        drop[name] = shapes
    if drop:
        retype = _Retype(mod, regions=set(drop), drop=drop)
        main = retype.visit_expr(mod["main"])
        mod = retype.builder_.get()
        mod["main"] = main
    return mod, bool(drop)


def _replace(mod: tvm.IRModule, name: str, func: relax.Function) -> tvm.IRModule:
    """``mod`` with ``func`` as the function ``name``, under a new GlobalVar typed from ``func``
    (the old one keeps its old signature; ``BlockBuilder.add_func`` types the new one)."""
    del mod[mod.get_global_var(name)]
    bb = relax.BlockBuilder(mod)
    bb.add_func(func, name)
    return bb.get()


def _result_type(func: relax.Function, dims: dict):
    """A merged region's result type from the composite functions its result comes from, with
    their symbolic vars replaced by ``main``'s of the same name (``dims``); None: not found."""
    locals_, types = {}, {}
    for block in func.body.blocks:
        for b in block.bindings:
            v = b.value
            if isinstance(v, relax.Function):
                locals_[b.var] = v
            elif isinstance(v, relax.Call) and v.op in locals_:
                types[b.var] = locals_[v.op].ret_ty
            elif isinstance(v, relax.Call) and isinstance(v.op, relax.Function):
                types[b.var] = v.op.ret_ty
            elif isinstance(v, relax.TupleGetItem) and isinstance(types.get(v.tuple_value), relax.TupleType):
                types[b.var] = types[v.tuple_value].fields[v.index]
            elif isinstance(v, relax.Var) and v in types:
                types[b.var] = types[v]
    result = func.body.body
    fields = result.fields if isinstance(result, relax.Tuple) else [result]
    found = [types.get(f, getattr(f, "ty", None)) for f in fields]
    if any(t is None or _erased(t) for t in found):
        return None
    found = [_rename_dims(t, dims) for t in found]
    return relax.TupleType(found) if isinstance(result, relax.Tuple) else found[0]


def _rename_dims(ty, dims: dict):
    """``ty`` with each symbolic var replaced by the var of ``dims`` (name -> var) of its name."""
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer

    if isinstance(ty, relax.TupleType):
        return relax.TupleType([_rename_dims(f, dims) for f in ty.fields])
    if not isinstance(ty, relax.TensorType) or ty.shape is None or not hasattr(ty.shape, "values"):
        return ty
    analyzer = Analyzer()
    for d in ty.shape.values:
        if not isinstance(d, (int, tirx.IntImm)):
            for v in tirx.analysis.undefined_vars(d):
                if v.name in dims and not v.same_as(dims[v.name]):
                    analyzer.bind(v, dims[v.name])
    return relax.TensorType([d if isinstance(d, (int, tirx.IntImm)) else analyzer.simplify(d)
                             for d in ty.shape.values], ty.dtype)


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
