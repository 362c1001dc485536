"""The FPGA's stages inside the host CPU's pipeline, and what they leave for the artifact.

``offload(options, graph, inputs)`` makes an ``FpgaOffload`` for one compile. Its stages run
after the host's layout passes (NHWC) and before legalization:

1. ``fpga_partition``: the pattern table (``patterns.py``) cuts the supported ops into
   ``Codegen: hetc_fpga`` functions, one per connected region (BYOC).
2. ``fpga_regions``: names the regions ``fpga_region<k>`` (their symbols in the library) and
   records, for calibration, how each region input follows from the model inputs.
3. ``fpga_codegen``: ``RunCodegen`` hands each region to ``codegen.generate``: a ``Region``
   with its number types, the Vitis HLS project, the estimates and the C-simulation object
   that is linked into the host's library.

After the pipeline, ``records`` (manifest), ``report`` (report.json) and ``write`` (the HLS
projects under ``fpga/<region>/``) describe what was generated.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from ...errors import CompileError
from ...graph import OpGraph
from ...options import CompileOptions
from ...passes.pipeline import Stage
from . import patterns
from .runtime import EXECUTION


@dataclass
class BuiltRegion:
    """One region after codegen (``codegen.generate`` fills it)."""

    name: str
    region: object  # layers.Region with its types
    files: dict[str, str]  # the HLS project, relative path -> text
    estimate: dict
    errors: dict  # layer -> measured error against float (fixed point with calibration data)
    precision: str  # how the types were chosen
    node_ids: set[int] = field(default_factory=set)  # op graph ids of the model's ops named inside
    nodes: list[str] = field(default_factory=list)  # all the model's ops inside (``_assign_nodes``)


class FpgaOffload:
    """The FPGA part of one compile (see the module doc)."""

    target = "fpga"

    def __init__(self, options: CompileOptions, graph: OpGraph, inputs: Sequence) -> None:
        from .precision import load_calibration

        self.options = options
        self.graph = graph
        self.limits = patterns.Limits()
        self.calibration = (load_calibration(options.calibration, inputs)
                            if options.calibration is not None else None)
        self.input_names = [spec.name for spec in inputs]
        self.sources: dict[str, list] = {}  # region -> per input: (model input index, ops) | None
        self.regions: list[BuiltRegion] = []
        self.offloaded: set[int] = set()
        self.seen: set[str] = set()  # ops still in the graph when it is partitioned (not folded away)
        self.workdir = tempfile.TemporaryDirectory(prefix="hetc-fpga-")  # the objects, until export

    def stages(self) -> list[Stage]:
        return [
            Stage("fpga_partition", "cut the ops the FPGA kernels support into regions (BYOC)",
                  lambda: _module_pass("HetcFpgaPartition", self._partition)),
            Stage("fpga_regions", "name the regions and trace their inputs to the model inputs",
                  lambda: _module_pass("HetcFpgaRegions", self._name_regions)),
            Stage("fpga_codegen", "HLS projects and C-simulation objects for the regions",
                  lambda: _module_pass("HetcFpgaCodegen", self._codegen)),
        ]

    # -- stages ---------------------------------------------------------------------------------

    def _partition(self, mod: tvm.IRModule) -> tvm.IRModule:
        from .codegen import node_ids

        before = node_ids(mod["main"])
        names = {n.id: n.name for n in self.graph.nodes}
        self.seen = {names[i] for i in before if i in names}
        mod = patterns.partition(mod, self.limits)
        self.offloaded = before - node_ids(mod["main"])  # node ids now inside some region
        return mod

    def _name_regions(self, mod: tvm.IRModule) -> tvm.IRModule:
        from .region import fpga_functions

        found = fpga_functions(mod)
        order = {gv.name_hint: k for k, gv in enumerate(_called_in_order(mod["main"], found))}
        updates = {}
        for gv, func in mod.functions.items():
            if gv.name_hint in found:
                updates[gv] = func.with_attr("global_symbol", f"fpga_region{order.get(gv.name_hint, len(order))}")
        for gv, func in updates.items():
            mod[gv] = func
        bindings = {b.var: b.value for block in mod["main"].body.blocks for b in block.bindings}
        params = list(mod["main"].params)
        for call in _calls_to(mod["main"], set(found)):
            symbol = str(mod[call.op].attrs["global_symbol"])
            self.sources[symbol] = [_trace(arg, bindings, params) for arg in call.args]
        return mod

    def _codegen(self, mod: tvm.IRModule) -> tvm.IRModule:
        from . import codegen

        with codegen.active(self):
            return relax.transform.RunCodegen()(mod)

    # -- calibration ----------------------------------------------------------------------------

    def region_inputs(self, symbol: str) -> list[np.ndarray] | None:
        """The calibration samples as the region's inputs (batch axis first), or None without
        calibration data. A region input must follow from a model input through transposes
        and reshapes (the layout passes' own); otherwise this says so."""
        if self.calibration is None:
            return None
        arrays = []
        for k, source in enumerate(self.sources.get(symbol, [])):
            if source is None:
                raise CompileError(f"--calibration: input {k} of FPGA region {symbol} is computed on the CPU, "
                                   "and calibrating such regions is not supported yet; give the types "
                                   "instead (--precision ap_fixed<W,I> or a per-layer JSON file)")
            index, ops = source
            x = self.calibration[self.input_names[index]].astype(np.float32)
            for op, arg in ops:
                x = np.transpose(x, arg) if op == "permute_dims" else x.reshape((x.shape[0], *arg[1:]))
            arrays.append(x)
        return arrays

    # -- after the pipeline ---------------------------------------------------------------------

    def _assign_nodes(self) -> None:
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

    def records(self, part: str):
        from ...runtime.artifact import Offload

        self._assign_nodes()
        return [Offload(r.name, self.target, "fpga:0", part, EXECUTION, emulated=True, project=f"fpga/{r.name}",
                        nodes=r.nodes) for r in self.regions]

    def report(self) -> dict:
        return {"execution": EXECUTION, "note": "FPGA regions run as C-simulation (g++, ap_fixed headers); "
                                                "latency and resources are analytical estimates",
                "regions": [{"name": r.name, "precision": r.precision, "nodes": r.nodes,
                             "layers": [{"name": layer.name, "op": layer.op, "shape": list(layer.shape),
                                         "result": str(layer.result),
                                         **({"weight": str(layer.weight)} if layer.weight else {}),
                                         **({"accum": str(layer.accum)} if layer.accum else {}),
                                         "reuse": layer.reuse,
                                         **({"error_vs_float": r.errors[layer.name]} if layer.name in r.errors
                                            else {})}
                                        for layer in r.region.layers],
                             "estimate": r.estimate} for r in self.regions]}

    def write(self, root: Path) -> None:
        from .emit import write_files

        for r in self.regions:
            write_files(r.files, root / "fpga" / r.name)


def offload(options: CompileOptions, graph: OpGraph, inputs: Sequence) -> FpgaOffload:
    return FpgaOffload(options, graph, inputs)


def _module_pass(name: str, fn):
    @tvm.transform.module_pass(opt_level=0, name=name)
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return fn(mod)

    return apply


def _calls_to(func: relax.Function, names: set[str]) -> list[relax.Call]:
    return [b.value for block in func.body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.GlobalVar)
            and b.value.op.name_hint in names]


def _called_in_order(func: relax.Function, found: dict) -> list:
    seen, order = set(), []
    for call in _calls_to(func, set(found)):
        if call.op.name_hint not in seen:
            seen.add(call.op.name_hint)
            order.append(call.op)
    return order


def _trace(expr, bindings: dict, params: list) -> tuple[int, list] | None:
    """(model input index, [(op, arg)] applied in order) when ``expr`` is a model input moved
    by transposes/reshapes that keep the batch axis first; None otherwise."""
    ops = []
    while True:
        for k, param in enumerate(params):
            if expr.same_as(param):
                return k, list(reversed(ops))
        value = bindings.get(expr)
        if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
            return None
        if value.op.name == "relax.permute_dims" and value.attrs.axes is not None:
            axes = [int(a) for a in value.attrs.axes]
            if axes[0] != 0:
                return None
            ops.append(("permute_dims", axes))
        elif value.op.name == "relax.reshape":
            shape = value.ty.shape
            in_shape = value.args[0].ty.shape
            if shape is None or in_shape is None or int(shape[0]) != int(in_shape[0]):
                return None
            ops.append(("reshape", [int(d) for d in shape]))
        else:
            return None
        expr = value.args[0]
