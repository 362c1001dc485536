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
from . import host, onnx_writer, patterns, runtime, support
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

    def __init__(self, options: CompileOptions, graph: OpGraph, inputs: Sequence = ()) -> None:
        super().__init__(graph)
        self.options = options
        self.soc_version = soc_version(options)
        self.gears = model_gears(options, inputs)  # symbolic dim -> the sizes regions are built for
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

    def gears_used(self) -> dict[str, list[int]]:
        """The gears of the symbolic dims some region takes (the manifest's ``gears``: the run
        time refuses other sizes of those dims)."""
        used: dict[str, set[int]] = {}
        for r in self.regions:
            for k, name in enumerate(r.spec.dims):
                used.setdefault(name, set()).update(g[k] for g in r.spec.gears)
        return {name: sorted(sizes) for name, sizes in sorted(used.items())}

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

    def nbytes(items) -> int:  # at the largest gear, with symbolic dims
        import numpy as np

        shapes = [[r.spec.shape_at(t, g) for t in items] for g in r.spec.gears] if r.spec.dynamic else [
            [t.shape for t in items]]
        return max(sum(int(np.prod(s, dtype=np.int64)) * np.dtype(t.dtype).itemsize for s, t in zip(row, items))
                   for row in shapes)

    gears = {"dims": list(r.spec.dims), "gears": [list(g) for g in r.spec.gears],
             "atc": host.atc_gears(r.spec)} if r.spec.dims else {}
    return {"name": r.spec.name, "symbol": r.name, "nodes": r.nodes, "onnx_ops": r.onnx_ops,
            "inputs": tensors(r.spec.inputs), "outputs": tensors(r.spec.outputs),
            "bytes_in": nbytes(r.spec.inputs), "bytes_out": nbytes(r.spec.outputs),
            "onnx_bytes": len(r.model), "host_neighbours": r.host_neighbours, **gears}


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


def offload(options: CompileOptions, graph: OpGraph, inputs: Sequence) -> AscendOffload:
    return AscendOffload(options, graph, inputs)


MAX_GEAR_COMBINATIONS = 100  # ATC: --dynamic_batch_size / --dynamic_dims take 2..100 gears


def model_gears(options: CompileOptions, inputs: Sequence) -> dict[str, tuple[int, ...]]:
    """The gears of every symbolic dim of the model's inputs: ``options.gears`` (checked against
    the dims' ranges), else ``default_gears`` of the range."""
    from ...errors import UsageError
    from ...frontends.onnx.loader import DEFAULT_DIM_RANGE
    from ...options import check_gears, default_gears

    names = sorted({d for spec in inputs for d in spec.shape if isinstance(d, str)})
    unknown = sorted(set(options.gears) - set(names))
    if unknown:
        raise UsageError(f"--gears {', '.join(unknown)}: the model has no such symbolic dim "
                         f"({'its dims: ' + ', '.join(names) if names else 'its input shapes are static'})")
    result = {}
    for name in names:
        bounds = tuple(options.dims.get(name, DEFAULT_DIM_RANGE))
        if name in options.gears:
            check_gears(name, options.gears[name], bounds)
            result[name] = tuple(options.gears[name])
        else:
            result[name] = default_gears(bounds)
    return result


def region_gears(spec: RegionSpec, gears: dict[str, tuple[int, ...]]) -> RegionSpec:
    """``spec`` with its symbolic dims' gears (every combination of the dims' gears), and how
    ATC takes them (``RegionSpec.dynamic``); unchanged when its shapes are static."""
    import itertools

    from .spec import dim_names

    tensors = spec.inputs + spec.outputs
    names = sorted({n for t in tensors for d in t.shape for n in dim_names(d)})
    if not names:
        return spec
    missing = [n for n in names if n not in gears]
    if missing:
        raise CompileError(f"internal: Ascend region {spec.name} uses symbolic dims {missing} with no gears")
    combos = tuple(itertools.product(*(gears[n] for n in names)))
    if len(combos) > MAX_GEAR_COMBINATIONS:
        from ...errors import UsageError

        sizes = " x ".join(f"{len(gears[n])} ({n})" for n in names)
        raise UsageError(f"Ascend region {spec.name} takes dims {', '.join(names)}: {sizes} = {len(combos)} gear "
                         f"combinations, more than ATC's {MAX_GEAR_COMBINATIONS}; give fewer with --gears "
                         f"{names[0]}=...")
    symbolic_inputs = [(axis, d) for t in spec.inputs for axis, d in enumerate(t.shape) if isinstance(d, str)]
    if len(combos) == 1:  # one gear: built statically at it (ATC needs at least two gears)
        from dataclasses import replace

        from .spec import TensorIO

        spec = replace(spec, dims=tuple(names), gears=combos)
        return replace(spec, inputs=tuple(TensorIO(t.name, t.dtype, spec.shape_at(t, combos[0])) for t in spec.inputs),
                       outputs=tuple(TensorIO(t.name, t.dtype, spec.shape_at(t, combos[0])) for t in spec.outputs))
    if len(names) == 1 and symbolic_inputs and all(axis == 0 and d == names[0] for axis, d in symbolic_inputs):
        dynamic = "batch"
    else:
        dynamic = "dims"
    from dataclasses import replace

    return replace(spec, dims=tuple(names), gears=combos, dynamic=dynamic)
