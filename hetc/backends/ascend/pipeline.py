"""The Ascend target's stages inside the host CPU's pipeline, and what they leave for the artifact.

``offload(options, graph, inputs)`` makes an ``AscendOffload`` for one compile. Its stages
(``byoc.RegionOffload.stages``) run after the host's inference and simplify phases and before
its layout passes (``layout = "model"``: CANN takes the model's own NCHW ONNX ops):

1. ``ascend_partition`` (``cut``): ``patterns.partition`` cuts the supported ops (those a
   placement gave Ascend) into maximal regions.
2. ``ascend_codegen``: ``name_regions`` writes each region as ONNX
   (``onnx_writer.region_model``) and names it ``ascend_region<k>_<hash of its ONNX>`` (a
   content-addressed symbol: two artifacts loaded in one process never call each other's
   regions), with why the host ops next to it stayed on the host; ``RunCodegen`` hands the
   regions to ``codegen.generate``: the host program, ATC/build script and README of each.

After the pipeline, ``records`` (manifest), ``report`` (report.json) and ``write``
(``ascend/<region>/``) describe the regions; ``serve`` makes them callable in this process.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tvm
from tvm import relax

from ...errors import CompileError
from ...graph import OpGraph
from ...options import CompileOptions
from ..byoc import TAG, BuiltRegion, RegionOffload, calls_to, codegen_functions, name_regions
from . import onnx_writer, patterns, runtime, support
from .spec import RegionSpec


@dataclass
class AscendRegion(BuiltRegion):
    spec: RegionSpec | None = None
    model: bytes = b""  # the region's ONNX subgraph
    files: dict[str, str] = field(default_factory=dict)  # host program, build script, README
    onnx_ops: dict[str, int] = field(default_factory=dict)
    host_neighbours: dict[str, str] = field(default_factory=dict)  # op left on the host -> why


class AscendOffload(RegionOffload):
    """The Ascend part of one compile (see the module doc)."""

    target = "ascend"
    layout = "model"  # partition before the host's layout passes

    def __init__(self, options: CompileOptions, graph: OpGraph) -> None:
        super().__init__(graph)
        self.options = options
        self.soc_version = soc_version(options)
        self.pending: dict[str, tuple[bytes, list, list, dict[str, int], dict[str, str]]] = {}

    def cut(self, mod: tvm.IRModule) -> tvm.IRModule:
        return patterns.partition(mod, self.allowed)

    def name_regions(self, mod: tvm.IRModule) -> tvm.IRModule:
        """Each region written as ONNX and named by its content; why its neighbours stayed."""
        reasons = patterns.unsupported_reasons(mod, self.allowed)
        names = {n.id: n.name for n in self.graph.nodes}

        def node_name(var_name: str) -> str:
            match = TAG.fullmatch(var_name)
            return names.get(int(match.group(1)), var_name) if match else var_name

        models: dict[str, tuple] = {}
        for gv_name, func in codegen_functions(mod, patterns.CODEGEN).items():
            try:
                model, inputs, outputs = onnx_writer.region_model(func, "hetc_ascend_region")
            except onnx_writer.Unsupported as err:
                raise CompileError(f"internal: an Ascend region cannot be written as ONNX: {err}") from None
            data = model.SerializeToString()
            ops = Counter(n.op_type for n in model.graph.node if n.op_type != "Identity")
            near = _neighbours(mod["main"], gv_name)
            models[gv_name] = (data, inputs, outputs, dict(ops.most_common()),
                               {node_name(v): reasons[v] for v in near if v in reasons})

        mod = name_regions(mod, patterns.CODEGEN, "ascend_region",
                           lambda gv_name: "_" + hashlib.sha256(models[gv_name][0]).hexdigest()[:12])
        for gv_name, func in codegen_functions(mod, patterns.CODEGEN).items():
            self.pending[str(func.attrs["global_symbol"])] = models[gv_name]
        return mod

    def codegen_scope(self):
        from . import codegen

        return codegen.CONTEXT.active(self)

    # -- after the pipeline ---------------------------------------------------------------------

    def serve(self) -> None:
        """Make every region callable in this process (emulation) for the compile's runner."""
        for r in self.regions:
            runtime.register_emulation(r.name, r.model)

    def records(self, part: str):
        from ...runtime.artifact import Offload

        self.assign_nodes()
        self.serve()
        return [Offload(r.name, self.target, "ascend:0", part, runtime.EXECUTION, emulated=True,
                        project=f"ascend/{r.spec.name}", nodes=r.nodes, linked=False) for r in self.regions]

    def report(self) -> dict:
        return {"execution": runtime.EXECUTION,
                "note": "Ascend regions run as ONNX subgraphs on onnxruntime (CPU) here: emulation, not NPU "
                        "execution; on a machine with CANN, ascend/<region>/build.sh builds the host library "
                        "that runs them on the NPU (hetc run --ascend-mode device)",
                "cann_version": support.VERSION, "soc_version": self.soc_version,
                "regions": [_region_report(r) for r in self.regions]}

    def write(self, root: Path) -> None:
        for r in self.regions:
            folder = root / "ascend" / r.spec.name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / r.spec.onnx_file).write_bytes(r.model)
            for rel, text in r.files.items():
                path = folder / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                if rel.endswith(".sh"):
                    path.chmod(0o755)


def _region_report(r: AscendRegion) -> dict:
    def tensors(items) -> list[dict]:
        return [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape)} for t in items]

    def nbytes(items) -> int:
        import numpy as np

        return sum(int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize for t in items)

    return {"name": r.spec.name, "symbol": r.name, "nodes": r.nodes, "onnx_ops": r.onnx_ops,
            "inputs": tensors(r.spec.inputs), "outputs": tensors(r.spec.outputs),
            "bytes_in": nbytes(r.spec.inputs), "bytes_out": nbytes(r.spec.outputs),
            "onnx_bytes": len(r.model), "host_neighbours": r.host_neighbours}


def _neighbours(main: relax.Function, gv_name: str) -> set[str]:
    """Names of the variables of ``main`` next to the region ``gv_name``: the ones it reads and
    the ops that read its results."""
    calls = calls_to(main, {gv_name})
    names = {a.name for c in calls for a in c.args if isinstance(a, relax.Var)}
    produced = set()
    for block in main.body.blocks:
        for b in block.bindings:
            v = b.value
            if any(v.same_as(c) for c in calls) or (isinstance(v, relax.TupleGetItem) and v.tuple_value in produced):
                produced.add(b.var)
            elif isinstance(v, relax.Call) and any(a in produced for a in v.args):
                names.add(b.var.name)
    return names


def soc_version(options: CompileOptions) -> str:
    """CANN's --soc_version: the ``arch`` of the first Ascend device named by ``--arch``
    (a device spec whose target is "ascend"), else the Ascend 910B's."""
    from ...devices import all_specs, get_spec

    specs = all_specs()
    for name in options.arch:
        if name in specs and specs[name].target == "ascend":
            return specs[name].arch
    return get_spec("ascend-910b").arch


def offload(options: CompileOptions, graph: OpGraph, _inputs: Sequence) -> AscendOffload:
    return AscendOffload(options, graph)
