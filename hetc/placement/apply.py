"""Applying a placement: every op of ``main`` runs on the device it is assigned, as a Relax VDevice.

A placement maps OpGraph node names (the Relax variables the imported module binds its ops to)
to devices, written ``<target>:<index>`` ("cpu:0", "cpu:1", "cuda:0"). Applying it:

1. ``tag_nodes`` renames each op's binding to ``hetc_<node id>_`` before the graph passes, so the
   placement still finds its ops after decomposition and layout conversion (which reuse and
   clash with the frontend's ``lv<N>`` names). Bindings the passes add (transposes of a layout
   change, pieces of a decomposed op) have no tag and take the device of their producer.
2. ``place_pass`` (after legalization, where every op is a ``call_tir``) puts each call's
   output on its device's VDevice (``global_infos["vdevice"]``, in ``Placement.devices`` order)
   and inserts ``R.to_vdevice`` wherever an activation crosses devices. Model inputs arrive on
   vdevice 0. A device crossing is always a ``to_vdevice`` call, which fusion treats as opaque,
   so ``FuseOps`` never groups ops of two devices (``check_fusion`` verifies it).
3. ``kernel_target_pass`` (after fusion) gives every PrimFunc the ``target`` attribute of the
   device that calls it, duplicating a PrimFunc called from devices of two different targets.
   Each backend's post-fusion stages (schedules) then handle only the functions of their target.
4. ``constant_transfer_pass`` (last): constants are materialised on vdevice 0 by the VM, so
   every constant a kernel on another device reads gets a ``to_vdevice``. It runs after the
   CPU's compile-time weight packing, so the packed weight is what moves.

``split_stages`` assembles the pipeline; ``build`` compiles it into one VM executable;
``transfers`` lists the ``to_vdevice`` calls of the result for plan.json.

To make another TVM-native target placeable, give its ``Backend`` a ``tvm_target``; its
backend's stages after the shared fusion phase must leave functions whose ``target`` attribute
is another target's alone (as the CPU and CUDA ones do).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from ..errors import CompileError, UnsupportedOpError, UsageError, last_line
from ..graph import OpGraph
from ..options import CompileOptions
from ..passes.phases import fusion_passes
from ..passes.pipeline import Stage
from ..passes.stack_locals import PIPELINE as TIR_PIPELINE
from ..passes.vm_pipeline import vm_pipeline
from ..targets import Target, TargetKind, get_target

# tag_nodes names op bindings "hetc_<node id>_"; a BlockBuilder makes a clashing name unique by
# appending digits ("hetc_3_1"), which still reads as node 3.
_TAG = re.compile(r"hetc_(\d+)_\d*")
# Kernel calls: (PrimFunc, args tuple, ...) with the output type as their type argument.
_KERNEL_CALLS = (tvm.ir.Op.get("relax.call_tir"), tvm.ir.Op.get("relax.call_tir_inplace"))
_TO_VDEVICE = tvm.ir.Op.get("relax.to_vdevice")
_DPS_PACKED = tvm.ir.Op.get("relax.call_dps_packed")  # an external target's region, after RunCodegen


@dataclass(frozen=True)
class Placement:
    """A validated placement: ``devices`` in vdevice order (vdevice 0 first), every node's device."""

    devices: tuple[str, ...]
    assignment: dict[str, str]  # OpGraph node name -> device
    targets: dict[str, Target]  # device -> its hetc target

    def index(self, device: str) -> int:
        return self.devices.index(device)

    @property
    def shares_device_type(self) -> bool:
        """Two vdevices of one device type (cpu:0 and cpu:1): see ``build``."""
        types = [self.targets[d].device_type for d in self.devices]
        return len(set(types)) < len(types)

    def runtime_devices(self) -> list[str]:
        """DLPack-style device strings for the VM, in vdevice order ("cpu:1", "cuda:0")."""
        return [f"{self.targets[d].device_type}:{d.rpartition(':')[2]}" for d in self.devices]


# -- reading and validating --------------------------------------------------------------------


def read_placement(path: str | os.PathLike) -> dict[str, str]:
    """A plan.json (``{"nodes": [{"name", "device", ...}, ...]}``, as hetc writes it) -> assignment."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise UsageError(f"placement file {path}: cannot read it ({err.strerror})") from err
    except ValueError as err:
        raise UsageError(f"placement file {path}: not valid JSON ({err})") from err
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, list):
        raise UsageError(f"placement file {path}: expected a JSON object with a \"nodes\" list")
    assignment: dict[str, str] = {}
    for i, node in enumerate(nodes):
        if not (isinstance(node, dict) and all(isinstance(node.get(k), str) for k in ("name", "device"))):
            raise UsageError(f"placement file {path}: nodes[{i}] needs string fields \"name\" and \"device\"")
        if node["name"] in assignment:
            raise UsageError(f"placement file {path}: node '{node['name']}' is listed twice")
        assignment[node["name"]] = node["device"]
    return assignment


def _parse_device(device: str, targets: Sequence[Target]) -> Target:
    name, sep, index = device.partition(":")
    if not sep or not index.isdigit() or str(int(index)) != index:
        raise UsageError(f"invalid device '{device}'; expected <target>:<index>, e.g. cpu:0 or cuda:0")
    target = get_target(name)  # UsageError naming the known targets
    if target not in targets:
        raise UsageError(f"device '{device}': target '{name}' is not in --target "
                         f"({','.join(t.name for t in targets)}); add it there")
    if target.kind is not TargetKind.TVM_NATIVE:
        raise UsageError(f"device '{device}': placing ops on {target.kind.value} target '{name}' "
                         "is not supported yet (only TVM-native targets become VDevices)")
    return target


def default_assignment(graph: OpGraph, targets: Sequence[Target]) -> dict[str, str]:
    """Every op goes to device 0 of the first accelerator (non-CPU target, in ``targets`` order)
    that supports it; the rest to cpu:0 (device 0 of the first target if there is no CPU)."""
    host = next((t for t in targets if t.device_type == "cpu"), targets[0])
    accelerators = [t for t in targets if t.device_type != "cpu"]
    return {n.name: next((f"{t.name}:0" for t in accelerators if n.supported_by.get(t.name)), f"{host.name}:0")
            for n in graph.nodes}


def constant_bytes(mod: tvm.IRModule) -> dict[str, int]:
    """Bytes of the constants (weights) each op binding of ``main`` reads, by binding name."""
    result: dict[str, int] = {}
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            if isinstance(binding.value, relax.Call):
                result[binding.var.name] = sum(_nbytes(a.ty) for a in binding.value.args
                                               if isinstance(a, tvm.ir.GenericConst))
    return result


def _nbytes(ty) -> int:
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return 0
    try:
        return math.prod(int(d) for d in ty.shape.values) * np.dtype(str(ty.dtype)).itemsize
    except TypeError:  # symbolic dims
        return 0


def resolve_placement(spec: Mapping[str, str] | str | os.PathLike | None, graph: OpGraph,
                      targets: Sequence[Target], weight_bytes: Mapping[str, int] | None = None) -> Placement:
    """Validate ``spec`` (assignment, plan.json path, or None for ``default_assignment``) against
    the graph and the targets. Nodes it does not list go to the first device it names.

    ``weight_bytes`` (node name -> bytes of constants it reads, ``constant_bytes``) orders the
    devices: vdevice 0 is where the VM materialises constants and where inputs arrive, so it is
    the device whose ops read the most weight bytes (ties: ``targets`` order, then index), and
    the fewest weight bytes cross devices on every run.
    """
    if spec is None:
        assignment = default_assignment(graph, targets)
    elif isinstance(spec, Mapping):
        assignment = {str(k): str(v) for k, v in spec.items()}
    else:
        assignment = read_placement(spec)
    if not assignment:
        raise UsageError("the placement assigns no node to a device")
    by_name = {n.name: n for n in graph.nodes}
    unknown = [name for name in assignment if name not in by_name]
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise UsageError(f"the placement names node(s) the model does not have: {shown} "
                         f"(node names are those of plan.json, e.g. {graph.nodes[0].name})")
    device_targets = {d: _parse_device(d, targets) for d in dict.fromkeys(assignment.values())}
    first = next(iter(device_targets))
    full = {n.name: assignment.get(n.name, first) for n in graph.nodes}
    for node in graph.nodes:
        target = device_targets[full[node.name]]
        if not node.supported_by.get(target.name, False):
            raise UnsupportedOpError(f"node '{node.name}' ({node.op}) is placed on {full[node.name]}, but "
                                     f"target '{target.name}' cannot run it; place it on another device", [node.op])
    weights = dict.fromkeys(device_targets, 0)
    for name, device in full.items():
        weights[device] += (weight_bytes or {}).get(name, 0)
    order = [t.name for t in targets]
    devices = sorted(device_targets, key=lambda d: (-weights[d], order.index(d.partition(":")[0]),
                                                    int(d.partition(":")[2])))
    return Placement(tuple(devices), full, device_targets)


# -- tagging the graph's ops --------------------------------------------------------------------


@relax.expr_functor.mutator
class _Rename(relax.PyExprMutator):
    def __init__(self, names: dict[str, str], mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.names = names

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = self.visit_expr(binding.value)
        # An alias of a tagged op gets its tag too: CanonicalizeBindings folds ``gv = hetc_1`` into
        # the op's binding and keeps the alias's name (the function's output).
        name = value.name if isinstance(value, relax.Var) and _node_id(value.name) is not None else (
            self.names.get(binding.var.name, binding.var.name))
        emit = self.builder_.emit if isinstance(binding.var, relax.DataflowVar) else self.builder_.emit_output
        self.set_var_remap(binding.var, emit(value, name))


@relax.expr_functor.mutator
class _RenameAt(relax.PyExprMutator):
    """Renames the bindings of ``main`` at the given positions (binding index -> name)."""

    def __init__(self, names: dict[int, str], mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.names = names
        self.index = 0

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = self.visit_expr(binding.value)
        name = self.names.get(self.index, binding.var.name)
        self.index += 1
        emit = self.builder_.emit if isinstance(binding.var, relax.DataflowVar) else self.builder_.emit_output
        self.set_var_remap(binding.var, emit(value, name))


def _node_id(name: str) -> int | None:
    match = _TAG.fullmatch(name)
    return int(match.group(1)) if match else None


def tag_nodes(mod: tvm.IRModule, graph: OpGraph) -> tuple[tvm.IRModule, dict[int, str]]:
    """Rename every op binding of ``main`` (and aliases of it) to ``hetc_<node id>_``; returns the
    module and node id -> node name (what ``place_pass`` and ``transfers`` read tags with)."""
    tags = {n.name: f"hetc_{n.id}_" for n in graph.nodes}
    if len(tags) != len(graph.nodes):
        raise CompileError("internal: two ops of the graph are bound to the same name")
    mod = mod.clone()
    mod["main"] = _Rename(tags, mod).visit_expr(mod["main"])
    return mod, {n.id: n.name for n in graph.nodes}


def keep_tags(make_pass):
    """``make_pass()`` with the op tags it drops restored. ``FoldBatchnormToConv2D`` rebuilds
    ``main`` with fresh names; the ops of the result are matched to those before it by their
    order (longest common subsequence of op names), and each untagged op takes the tag of its
    match: the folded conv2d keeps the conv's tag (the batch_norm is folded into it)."""
    import difflib

    @tvm.transform.module_pass(opt_level=0, name="HetcKeepTags")
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        def ops(func):  # (binding index, name, op) of every op binding
            bindings = [b for block in func.body.blocks for b in block.bindings]
            return [(k, b.var.name, str(b.value.op.name)) for k, b in enumerate(bindings)
                    if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)]

        before = ops(mod["main"])
        out = make_pass()(mod)
        if not any(_node_id(name) is not None for _, name, _ in before):
            return out
        after = ops(out["main"])
        names = {}  # binding index in the result -> tag
        matcher = difflib.SequenceMatcher(None, [op for *_, op in before], [op for *_, op in after], autojunk=False)
        for block in matcher.get_matching_blocks():
            for k in range(block.size):
                old, (index, new, _) = before[block.a + k][1], after[block.b + k]
                if _node_id(old) is not None and _node_id(new) is None:
                    names[index] = old
        if not names:
            return out
        out = out.clone()
        out["main"] = _RenameAt(names, out).visit_expr(out["main"])
        return out

    return apply


# -- placing the legalized module -----------------------------------------------------------------


def _with_vdevice(ty, vdevice: relax.VDevice):
    if isinstance(ty, relax.TensorType):
        return relax.TensorType(ty.shape, ty.dtype, vdevice)
    if isinstance(ty, relax.TupleType):
        return relax.TupleType([_with_vdevice(f, vdevice) for f in ty.fields])
    return ty


def _is_call(expr, op) -> bool:
    return isinstance(expr, relax.Call) and expr.op.same_as(op)


def _is_kernel(expr) -> bool:
    return any(_is_call(expr, op) for op in _KERNEL_CALLS)


@relax.expr_functor.mutator
class _Place(relax.PyExprMutator):
    """Rebuilds ``main`` with each call_tir on its vdevice and a to_vdevice at every crossing."""

    def __init__(self, mod: tvm.IRModule, vdevices: list, device_of: dict[int, int], host: int | None) -> None:
        super().__init__(mod)
        self.vdevices = vdevices
        self.device_of = device_of  # node id -> vdevice index
        self.host = host  # vdevice of cpu:0, where external targets' regions take and give their tensors
        self.placed: set[int] = set()  # the nodes found (the others were folded or decomposed)
        self.where: dict = {}  # new Var -> vdevice index (Relax Vars hash by identity)
        self.moved: dict = {}  # (Var, index) -> the Var holding its copy there

    def _device(self, expr) -> int | None:
        if isinstance(expr, relax.Var):
            return self.where.get(expr, 0)  # function parameters arrive on vdevice 0
        if isinstance(expr, relax.Tuple):
            return next((d for f in expr.fields if (d := self._device(f)) is not None), None)
        if isinstance(expr, relax.TupleGetItem):
            return self._device(expr.tuple_value)
        return None

    def _on(self, expr, index: int):
        if not isinstance(expr, relax.Var) or not isinstance(expr.ty, relax.TensorType):
            return expr
        if self.where.get(expr, 0) == index:
            return expr
        key = (expr, index)
        if key not in self.moved:
            copy = self.builder_.emit(relax.op.to_vdevice(expr, self.vdevices[index]), f"{expr.name}_to{index}")
            self.where[copy] = index
            self.moved[key] = copy
        return self.moved[key]

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        if _is_kernel(value):
            args = [self.visit_expr(a) for a in value.args[1].fields]
            node = _node_id(binding.var.name)
            if node is not None:
                self.placed.add(node)
            index = self.device_of[node] if node is not None else next(
                (d for a in args if (d := self._device(a)) is not None), 0)
            args = [self._on(a, index) for a in args]
            ty = _with_vdevice(value.ty_args[0], self.vdevices[index])
            new = relax.Call(value.op, [value.args[0], relax.Tuple(args), *value.args[2:]], value.attrs, [ty])
        elif _is_call(value, _DPS_PACKED) and self.host is not None:  # a region: its tensors on the host
            index = self.host
            args = [self._on(self.visit_expr(a), index) for a in value.args[1].fields]
            ty = _with_vdevice(value.ty_args[0], self.vdevices[index])
            new = relax.Call(value.op, [value.args[0], relax.Tuple(args)], value.attrs, [ty])
        else:  # tuples, projections, aliases, other calls (inputs not moved): where their first input is
            new = self.visit_expr(value)
            index = self._device(new) if not isinstance(new, relax.Call) else next(
                (d for a in new.args if (d := self._device(a)) is not None), None)
        emit = self.builder_.emit if isinstance(binding.var, relax.DataflowVar) else self.builder_.emit_output
        var = emit(new, binding.var.name)
        if index is not None:
            self.where[var] = index
        self.set_var_remap(binding.var, var)


def _tvm_target(target: Target, options: CompileOptions) -> tvm.target.Target:
    """The TVM target of a placeable hetc target (kernels of its devices are compiled for it)."""
    if target.backend.tvm_target is None:
        raise UsageError(f"target '{target.name}' cannot be placed on a VDevice yet")
    return target.backend.tvm_target(options)


def vdevices(placement: Placement, options: CompileOptions) -> list:
    return [relax.VDevice(_tvm_target(placement.targets[d], options), int(d.rpartition(":")[2]), "global")
            for d in placement.devices]


PLACED_ATTR = "hetc.placed_nodes"  # module attribute: the OpGraph nodes place_pass found as ops


def place_pass(placement: Placement, names: dict[int, str], options: CompileOptions) -> tvm.transform.Pass:
    """Put every call_tir of ``main`` on its device and insert the activation transfers; records
    the nodes it found in the module attribute ``PLACED_ATTR``."""
    device_of = {i: placement.index(placement.assignment[name]) for i, name in names.items()}

    @tvm.transform.module_pass(opt_level=0, name="HetcPlaceOps")
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        vdevs = vdevices(placement, options)
        mod = mod.clone()
        mod.update_global_info("vdevice", vdevs)
        host = placement.index("cpu:0") if "cpu:0" in placement.devices else None
        placer = _Place(mod, vdevs, device_of, host)
        mod["main"] = placer.visit_expr(mod["main"])
        return mod.with_attr(PLACED_ATTR, sorted(names[i] for i in placer.placed))

    return apply


# -- after fusion: kernel targets -------------------------------------------------------------------


def _vdevice_index(ty, vdevs: list) -> int | None:
    """Index in ``vdevs`` of the vdevice a value of type ``ty`` lives on (first field of a tuple)."""
    if isinstance(ty, relax.TupleType):
        return next((i for f in ty.fields if (i := _vdevice_index(f, vdevs)) is not None), None)
    vdev = getattr(ty, "vdevice", None)
    if vdev is None:
        return None
    key = (str(vdev.target), int(vdev.vdevice_id), str(vdev.memory_scope))
    return next((i for i, v in enumerate(vdevs)
                 if (str(v.target), int(v.vdevice_id), str(v.memory_scope)) == key), None)


def _kernel_calls(func: relax.Function) -> list[tuple[relax.Var, relax.Call]]:
    return [(b.var, b.value) for block in func.body.blocks for b in block.bindings if _is_kernel(b.value)]


@relax.expr_functor.mutator
class _KernelTargets(relax.PyExprMutator):
    """Sets each PrimFunc's ``target``; a PrimFunc called from devices of two targets gets a copy
    per extra target (``<name>_<target>``) and those calls are pointed at it."""

    def __init__(self, mod: tvm.IRModule, placement: Placement) -> None:
        super().__init__(mod)
        self.mod = mod
        self.vdevs = list(mod.global_infos["vdevice"])
        self.target_of = [placement.targets[d].name for d in placement.devices]  # vdevice index -> target
        self.copies: dict[tuple[str, str], tvm.ir.GlobalVar] = {}  # (PrimFunc name, target) -> copy

    def run(self) -> tvm.IRModule:
        callers: dict[str, dict[str, int]] = {}  # PrimFunc name -> target name -> a vdevice index
        for _, call in _kernel_calls(self.mod["main"]):
            index = _vdevice_index(call.ty_args[0], self.vdevs)
            if index is None:
                raise CompileError(f"internal: kernel {call.args[0].name_hint} has no device after placement")
            callers.setdefault(call.args[0].name_hint, {}).setdefault(self.target_of[index], index)
        for name, by_target in callers.items():
            gv = self.mod.get_global_var(name)
            for k, (target, index) in enumerate(by_target.items()):
                func = self.mod[gv].with_attr("target", self.vdevs[index].target)
                if k == 0:
                    self.builder_.update_func(gv, func)
                else:  # add_func gives the GlobalVar the callee type call_tir checks for
                    copy = f"{name}_{target}"
                    self.copies[(name, target)] = self.builder_.add_func(func, copy)
        if self.copies:
            main = self.mod.get_global_var("main")
            self.builder_.update_func(main, self.visit_expr(self.mod["main"]))
        return self.builder_.get()

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = self.visit_expr(binding.value)
        if _is_kernel(value):
            target = self.target_of[_vdevice_index(value.ty_args[0], self.vdevs)]
            copy = self.copies.get((value.args[0].name_hint, target))
            if copy is not None:
                value = relax.Call(value.op, [copy, *value.args[1:]], value.attrs, value.ty_args)
        emit = self.builder_.emit if isinstance(binding.var, relax.DataflowVar) else self.builder_.emit_output
        self.set_var_remap(binding.var, emit(value, binding.var.name))


def kernel_target_pass(placement: Placement) -> tvm.transform.Pass:
    """Give every PrimFunc the ``target`` attribute of the devices calling it (``_KernelTargets``)."""

    @tvm.transform.module_pass(opt_level=0, name="HetcKernelTargets")
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return _KernelTargets(mod, placement).run()

    return apply


def check_fusion(mod: tvm.IRModule) -> None:
    """Every kernel's tensor inputs live on its own device (constants excepted): fusion kept
    each group within one device. Raises CompileError otherwise."""
    vdevs = list(mod.global_infos["vdevice"])
    params = set(mod["main"].params)
    for _, call in _kernel_calls(mod["main"]):
        index = _vdevice_index(call.ty_args[0], vdevs)
        for arg in call.args[1].fields:
            if isinstance(arg, relax.Var) and isinstance(arg.ty, relax.TensorType):
                source = _vdevice_index(arg.ty, vdevs)
                source = 0 if source is None and arg in params else source
                if source not in (None, index):
                    raise CompileError(f"internal: kernel {call.args[0].name_hint} on vdevice {index} reads "
                                       f"{arg.name} from vdevice {source}")


# -- last: constants used off vdevice 0 -----------------------------------------------------------------


@relax.expr_functor.mutator
class _MoveConstants(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, vdevs: list) -> None:
        super().__init__(mod)
        self.vdevs = vdevs
        self.moved: dict = {}  # (constant, index) -> Var; constants hash by identity

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = self.visit_expr(binding.value)
        index = _vdevice_index(value.ty_args[0], self.vdevs) if _is_kernel(value) else None
        if index:
            kernel = value.args[0].name_hint
            args = list(value.args[1].fields)
            for j, arg in enumerate(args):
                if isinstance(arg, tvm.ir.GenericConst):
                    if (arg, index) not in self.moved:
                        self.moved[(arg, index)] = self.builder_.emit(
                            relax.op.to_vdevice(arg, self.vdevs[index]), f"{kernel}_arg{j}_to{index}")
                    args[j] = self.moved[(arg, index)]
            value = relax.Call(value.op, [value.args[0], relax.Tuple(args), *value.args[2:]], value.attrs,
                               value.ty_args)
        emit = self.builder_.emit if isinstance(binding.var, relax.DataflowVar) else self.builder_.emit_output
        self.set_var_remap(binding.var, emit(value, binding.var.name))


def constant_transfer_pass() -> tvm.transform.Pass:
    """A ``to_vdevice`` for every constant a kernel off vdevice 0 reads (the VM puts constants on vdevice 0)."""

    @tvm.transform.module_pass(opt_level=0, name="HetcMoveConstants")
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        mod["main"] = _MoveConstants(mod, list(mod.global_infos["vdevice"])).visit_expr(mod["main"])
        check_fusion(mod)
        return mod

    return apply


# -- the pipeline, the build, the record ----------------------------------------------------------------


CPU_ONLY_REWRITES = ("winograd", "ragged_conv")  # pre-fusion CPU stages a split module leaves out


def split_stages(placement: Placement, names: dict[int, str], targets: Sequence[Target],
                 options: CompileOptions, offloads: Sequence = ()) -> list[Stage]:
    """The pipeline of a split module.

    Up to fusion: the stages of the first target (in ``targets`` order) that runs any op (its
    layout and legalization) with the external targets' ``offloads`` stages (``byoc.with_offloads``:
    their regions become calls that ``place`` keeps on cpu:0), and ``place`` inserted just before
    fusion. After fusion:
    ``kernel_targets``, then, for every target that runs ops, its own stages after the shared
    fusion phase (schedules; each touches only its own functions), then ``move_constants``.
    """
    used = [t for t in targets if t in placement.targets.values()]
    if options.database is not None and len(used) > 1:
        raise UsageError("--db with a placement over several targets is not supported yet; "
                         "compile without --db, or place every op on one target")
    fusion = [s.name for s in fusion_passes()]

    def cut(stages: list[Stage], name: str) -> int:
        names = [s.name for s in stages]
        if name not in names:
            raise CompileError(f"internal: the pipeline of a placed target has no stage '{name}'")
        return names.index(name)

    from ..backends.byoc import with_offloads

    base = with_offloads(used[0].backend.stages(options), offloads)
    if len(used) > 1:
        # Rewrites for the CPU's kernels run before ``place`` knows which ops stay on the CPU, so
        # split modules leave them out. Winograd replaces a conv by three kernels, two of them
        # bound to new, untagged names: a conv placed off the CPU would lose its device (docs/cpu.md,
        # "Winograd convolution"). ragged_conv pads a conv's outputs to the CPU's vector width and
        # slices them back: on the GPU the slice fused into the conv left a kernel no dlight rule
        # schedules within 48 KiB of shared memory (ResNet-50 over cpu,cuda stopped compiling).
        base = [s for s in base if s.name not in CPU_ONLY_REWRITES]
    start, end = cut(base, fusion[0]), cut(base, fusion[-1]) + 1
    stages = base[:start] + [
        Stage("place", "put every op on its device (VDevice) and copy values that cross devices",
              lambda: place_pass(placement, names, options)),
    ] + base[start:end] + [
        Stage("kernel_targets", "give every kernel its device's target (a copy per target if shared)",
              lambda: kernel_target_pass(placement)),
    ]
    for target in used:
        own = target.backend.stages(options)
        stages += own[cut(own, fusion[-1]) + 1:]
    return stages + [Stage("move_constants", "copy the constants read off vdevice 0 to their device",
                           constant_transfer_pass)]


def build(mod: tvm.IRModule, placement: Placement, options: CompileOptions):
    """One VM executable for all devices; the host code (and CPU kernels) for this machine's CPU.

    ``StaticPlanBlockMemory`` lets two vdevices of one device type share storage, and the VM
    then fails at run time (``Mismatched ... device_id``); it is left out in that case, so the
    VM allocates those tensors from its pooled allocator instead.
    """
    host = _tvm_target(get_target("cpu"), options)
    try:
        return tvm.compile(mod, host, relax_pipeline=vm_pipeline(not placement.shares_device_type),
                           tir_pipeline=TIR_PIPELINE)
    except Exception as err:
        devices = ",".join(placement.devices)
        raise CompileError(f"code generation for {devices} failed: {last_line(err)}") from err


def placed_nodes(mod: tvm.IRModule) -> set[str]:
    """The OpGraph nodes ``place_pass`` found as ops of their own; the others were folded into
    constants, decomposed or merged by the graph passes, and what remains of them runs on the
    device of its producer."""
    return {str(name) for name in (mod.get_attr(PLACED_ATTR) or [])}


def library_target(placement: Placement) -> Target:
    """The target whose backend writes the split executable: the first accelerator's (its export
    also packages the host code, e.g. CUDA binaries), else the CPU's."""
    return next((t for t in placement.targets.values() if t.device_type != "cpu"), get_target("cpu"))


def transfers(mod: tvm.IRModule, placement: Placement, names: dict[int, str]) -> list[dict]:
    """Every ``to_vdevice`` of the compiled module: what moves, how many bytes, from and to which device.

    ``value`` is the OpGraph node that produced it, a model input's name, or for a constant
    ``<kernel>_arg<j>`` (the kernel reading it and the argument's position).
    """
    vdevs = list(mod.global_infos["vdevice"])
    params = {p: p.name for p in mod["main"].params}
    result = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            if not _is_call(binding.value, _TO_VDEVICE):
                continue
            source, ty = binding.value.args[0], binding.var.ty
            label = binding.var.name.rpartition("_to")[0]
            if isinstance(source, tvm.ir.GenericConst):
                kind, origin = "constant", 0
            else:
                kind = "input" if source in params else "activation"
                origin = _vdevice_index(source.ty, vdevs) or 0
            node = _node_id(label)
            result.append({"value": label if node is None else names[node], "kind": kind,
                           "shape": [int(d) for d in ty.shape.values], "dtype": str(ty.dtype), "bytes": _nbytes(ty),
                           "from": placement.devices[origin], "to": placement.devices[_vdevice_index(ty, vdevs)]})
    return result
