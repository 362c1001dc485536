"""The FPGA's stages inside the host CPU's pipeline, and what they leave for the artifact.

``offload(options, graph, inputs)`` makes an ``FpgaOffload`` for one compile. Its stages
(``byoc.RegionOffload.stages``) run after the host's layout passes (NHWC) and before
legalization:

1. ``fpga_partition`` (``cut``): the pattern table (``patterns.py``) cuts the supported ops
   (those a placement gave the FPGA) into ``Codegen: hetc_fpga`` functions, one per region.
2. ``fpga_codegen``: ``name_regions`` names them ``fpga_region<k>`` (their symbols in the
   library) and records, for calibration, how each region input follows from the model
   inputs; ``RunCodegen`` hands each region to ``codegen.generate``: a ``Region`` with its
   number types, the Vitis HLS project, the estimates and the C-simulation object that is
   linked into the host's library.

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
from ..byoc import BuiltRegion, RegionOffload, calls_to, codegen_functions, name_regions
from . import patterns
from .runtime import EXECUTION


@dataclass
class FpgaRegion(BuiltRegion):
    """One region after codegen (``codegen.generate`` fills it)."""

    region: object = None  # layers.Region with its types
    files: dict[str, str] = field(default_factory=dict)  # the HLS project, relative path -> text
    estimate: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)  # layer -> measured error against float (fixed point, calibrated)
    precision: str = "float"  # how the types were chosen


class FpgaOffload(RegionOffload):
    """The FPGA part of one compile (see the module doc)."""

    target = "fpga"

    def __init__(self, options: CompileOptions, graph: OpGraph, inputs: Sequence) -> None:
        from .codegen import check_precision
        from .precision import load_calibration

        check_precision(options.precision)
        super().__init__(graph)
        self.options = options
        self.limits = patterns.Limits()
        self.calibration = (load_calibration(options.calibration, inputs)
                            if options.calibration is not None else None)
        self.input_names = [spec.name for spec in inputs]
        self.sources: dict[str, list] = {}  # region -> per input: (model input index, ops) | None
        self.workdir = tempfile.TemporaryDirectory(prefix="hetc-fpga-")  # the objects, until export

    def cut(self, mod: tvm.IRModule) -> tvm.IRModule:
        return patterns.partition(mod, self.limits, self.allowed)

    # -- stages ---------------------------------------------------------------------------------

    def name_regions(self, mod: tvm.IRModule) -> tvm.IRModule:
        """Symbols ``fpga_region<k>`` (their names in the library), and for calibration how each
        region input follows from the model inputs."""
        mod = name_regions(mod, patterns.CODEGEN, "fpga_region")
        bindings = {b.var: b.value for block in mod["main"].body.blocks for b in block.bindings}
        params = list(mod["main"].params)
        for call in calls_to(mod["main"], set(codegen_functions(mod, patterns.CODEGEN))):
            symbol = str(mod[call.op].attrs["global_symbol"])
            self.sources[symbol] = [_trace(arg, bindings, params) for arg in call.args]
        return mod

    def codegen_scope(self):
        from . import codegen

        return codegen.CONTEXT.active(self)

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

    def records(self, part: str):
        from ...runtime.artifact import Offload

        self.assign_nodes()
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
                             "estimate": r.estimate} for r in self.regions],
                **({"kept_on_cpu": kept} if (kept := self.kept_on_cpu()) else {})}

    def kept_on_cpu(self) -> list[dict]:
        """The model's ops the FPGA has a kernel for that stay on the CPU because their shapes
        use symbolic dims, each with the reason ("symbolic dim seq (...)")."""
        offloaded = {n for r in self.regions for n in r.nodes}
        return [{"node": n.name, "op": n.op, "dims": list(n.symbolic), "reason": patterns.symbolic_reason(n.symbolic)}
                for n in self.graph.nodes
                if n.symbolic and n.op in patterns.SUPPORTED_OPS and n.name not in offloaded]

    def write(self, root: Path) -> None:
        from .emit import write_files

        for r in self.regions:
            write_files(r.files, root / "fpga" / r.name)


def offload(options: CompileOptions, graph: OpGraph, inputs: Sequence) -> FpgaOffload:
    return FpgaOffload(options, graph, inputs)


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
