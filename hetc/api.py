"""The Python API: ``hetc.compile`` and ``hetc.load``.

    model = hetc.compile("model.onnx", target="cpu")
    outputs = model.run({"x": x})
    model.save("build/")
    model = hetc.load("build/")
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import tvm
import tvm_ffi

from .errors import HetcError, UnsupportedOpError, UsageError
from .frontends.onnx import load_model, op_histogram, to_relax
from .frontends.onnx.loader import ModelSource
from .graph import OpGraph, build_opgraph
from .native_log import filtered_stderr
from .options import CompileOptions
from .passes import run_pipeline
from .runtime.artifact import Manifest, Part
from .runtime.model import CompiledModel, load
from .targets import Target, TargetKind, get_target, parse_targets

__all__ = ["CompiledModel", "Inspection", "compile", "inspect_model", "load"]


def _host_target(targets: list[Target], split: bool) -> Target | None:
    """The TVM-native target that runs the model around external (BYOC) targets' regions, or
    None when the model is split over several TVM-native devices (a placement)."""
    native = [t for t in targets if t.kind is TargetKind.TVM_NATIVE]
    external = [t.name for t in targets if t.kind is TargetKind.EXTERNAL]
    if external and (split or len(native) > 1):
        raise UsageError(f"target(s) {', '.join(external)} with a placement over several devices come with "
                         f"the placement solver; use --target {','.join(external)},cpu")
    if split or len(native) > 1:
        return None
    if not native:
        raise UsageError(f"target(s) {', '.join(external)} run regions of the model that the host calls; "
                         f"add the host: --target {','.join(external)},cpu")
    if external and native[0].name != "cpu":
        raise UsageError(f"target(s) {', '.join(external)} are driven by the host CPU; use "
                         f"--target {','.join(external)},cpu")
    return native[0]


def _check_supported(graph: OpGraph, target: Target) -> None:
    rejected = [n for n in graph.nodes if not n.supported_by.get(target.name, False)]
    if rejected:
        ops = sorted({n.op for n in rejected})
        detail = sorted({f"{n.op} ({', '.join(sorted({t.dtype for t in n.inputs + n.outputs}))})"
                         for n in rejected})
        raise UnsupportedOpError(f"target '{target.name}' cannot run: {'; '.join(detail)}", ops)


def _graph_summary(graph: OpGraph) -> dict:
    return {"nodes": len(graph.nodes), "flops": graph.flops, "params": graph.num_params,
            "param_bytes": graph.param_bytes, "ops": dict(graph.histogram().most_common())}


def _kernel_schedules(mod: tvm.IRModule) -> dict[str, str]:
    """Each kernel's schedule: a default rule's name, "tuned" (a database record) or "none"."""
    result = {}
    for gv, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            attrs = func.attrs or {}
            rule = attrs.get("hetc.schedule_rule")
            result[gv.name_hint] = str(rule) if rule is not None else (
                "tuned" if attrs.get("tir.is_scheduled") else "none")
    return dict(sorted(result.items()))


def compile(
    model: ModelSource,
    target: str | Sequence[str] = "cpu",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    layout: str | None = None,
    num_threads: int = 0,
    base_dir: str | os.PathLike | None = None,
    constant_inputs: Mapping[str, np.ndarray] | None = None,
    database: str | os.PathLike | None = None,
    arch: Sequence[str] = (),
    placement: Mapping[str, str] | str | os.PathLike | None = None,
    precision: str | os.PathLike | None = None,
    calibration: str | os.PathLike | None = None,
) -> CompiledModel:
    """Compile an ONNX model (path or ``ModelProto``) for ``target``.

    ``input_shapes`` binds dynamic input dims; ``layout="NHWC"`` converts conv layouts;
    ``base_dir`` locates external data for a ``ModelProto``; ``constant_inputs`` freezes graph
    inputs to the given values (for inputs that decide output shapes: axes, pads, shapes).
    ``database`` is a tuning database written by ``hetc.tune``: tuned kernels replace the
    default schedules for the tasks it has records for. ``arch`` lists the GPU architectures
    to build binaries for (``"sm_90"``, or a device name from ``hetc/devices``; default sm_90).
    ``placement`` splits the model over devices: ``{node name: "cpu:0" | "cpu:1" | "cuda:0" ...}``
    or a plan.json path (docs/placement.md); with several targets and no placement, every op the
    first accelerator supports goes to it and the rest to cpu:0. ``precision`` and
    ``calibration`` choose the FPGA's number types (docs/fpga.md): "float" (default), "fixed"
    (ranges from the ``calibration`` .npz of model inputs), a type like "ap_fixed<16,6>", or a
    JSON file of per-layer types.
    """
    targets = parse_targets(target)
    options = CompileOptions(tuple(t.name for t in targets),
                             {k: tuple(v) for k, v in (input_shapes or {}).items()}, layout, num_threads,
                             None if database is None else str(database), tuple(arch),
                             None if precision is None else str(precision),
                             None if calibration is None else str(calibration))
    if (precision is not None or calibration is not None) and not any(t.backend.offload for t in targets):
        raise UsageError("--precision and --calibration choose the number types of FPGA regions; "
                         "add the fpga target (--target fpga,cpu)")
    host = _host_target(targets, placement is not None)
    with filtered_stderr():
        if host is None:
            return _compile_split(model, targets, options, placement, base_dir, constant_inputs)
        return _compile(model, host, targets, options, base_dir, constant_inputs)


def _import(model: ModelSource, targets: list[Target], options: CompileOptions,
            base_dir: str | os.PathLike | None, constant_inputs):
    """Load and convert the model: (loaded model, Relax module, op graph, {"import": seconds})."""
    start = time.perf_counter()
    loaded = load_model(model, options.input_shapes, base_dir, constant_inputs)
    mod = to_relax(loaded)
    times = {"import": time.perf_counter() - start}
    return loaded, mod, build_opgraph(mod, targets), times


def _compile(model: ModelSource, tgt: Target, targets: list[Target], options: CompileOptions,
             base_dir: str | os.PathLike | None, constant_inputs) -> CompiledModel:
    loaded, mod, graph, times = _import(model, targets, options, base_dir, constant_inputs)
    _check_supported(graph, tgt)
    # External targets cut their regions out inside the host's pipeline (Backend.offload).
    offloads = [t.backend.offload(options, graph, loaded.inputs) for t in targets if t.kind is TargetKind.EXTERNAL]
    if offloads:
        from .placement.apply import tag_nodes

        mod, _ = tag_nodes(mod, graph)  # op names survive the graph passes, for the regions' node lists

    start = time.perf_counter()
    mod, stage_reports = run_pipeline(
        mod, tgt.backend.stages(options, offloads) if offloads else tgt.backend.stages(options))
    times["passes"] = time.perf_counter() - start
    kernels = _kernel_schedules(mod)
    start = time.perf_counter()
    executable = tgt.backend.build(mod, options)
    times["codegen"] = time.perf_counter() - start

    library = f"{tgt.name}/model.so"
    manifest = Manifest(
        model=Path(loaded.name).name, targets=list(options.targets), inputs=loaded.inputs,
        outputs=loaded.outputs,
        parts=[Part("main", tgt.name, f"{tgt.device_type}:0", emulated=False, library=library,
                    threads=options.num_threads)],
        tvm_version=tvm.__version__, tvm_ffi_version=tvm_ffi.__version__,
        offloads=[record for o in offloads for record in o.records("main")],
    )
    report = _report(manifest, loaded, options, constant_inputs, graph, stage_reports, kernels, times)
    device = {name: record.device for record in manifest.offloads for name in record.nodes}
    for o in offloads:
        report.setdefault("offload", {})[o.target] = o.report()
    # with offloads, "placed": false marks ops folded into others before partitioning
    seen = set().union(*(o.seen for o in offloads)) if offloads else None
    plan = {"solver": "single-target" if not offloads else "offload-supported",
            "parts": {"main": tgt.name},
            "nodes": [{"name": n.name, "op": n.op, "device": device.get(n.name, f"{tgt.device_type}:0"),
                       **({"placed": n.name in seen} if seen is not None else {})} for n in graph.nodes]}

    def write_parts(tmp: Path) -> None:
        (tmp / tgt.name).mkdir()
        tgt.backend.export(executable, tmp / library, options)
        for o in offloads:
            o.write(tmp)

    return CompiledModel(manifest, report, plan, [tgt.backend.runner(executable, options.num_threads)],
                         write_parts)


def _report(manifest: Manifest, loaded, options: CompileOptions, constant_inputs, graph: OpGraph,
            stage_reports, kernels: dict[str, str], times: dict[str, float]) -> dict:
    return {
        "model": manifest.model, "opset": loaded.opset, "options": asdict(options),
        "constant_inputs": sorted(constant_inputs or {}),
        "onnx_ops": dict(op_histogram(loaded.proto).most_common()),
        "graph": _graph_summary(graph), "stages": [r.to_json() for r in stage_reports],
        "kernels": kernels,
        "seconds": times,
    }


def _compile_split(model: ModelSource, targets: list[Target], options: CompileOptions, placement,
                   base_dir: str | os.PathLike | None, constant_inputs) -> CompiledModel:
    """One VM executable over several devices (``hetc.placement``); the host CPU's runtime drives it."""
    from . import placement as pl

    loaded, mod, graph, times = _import(model, targets, options, base_dir, constant_inputs)
    placed = pl.resolve_placement(placement, graph, targets, pl.constant_bytes(mod))
    mod, names = pl.tag_nodes(mod, graph)

    start = time.perf_counter()
    mod, stage_reports = run_pipeline(mod, pl.split_stages(placed, names, targets, options))
    times["passes"] = time.perf_counter() - start
    kernels = _kernel_schedules(mod)
    moved, found = pl.transfers(mod, placed, names), pl.placed_nodes(mod)
    start = time.perf_counter()
    executable = pl.build(mod, placed, options)
    times["codegen"] = time.perf_counter() - start

    host, writer, devices = get_target("cpu"), pl.library_target(placed), placed.runtime_devices()
    library = "split/model.so"
    manifest = Manifest(
        model=Path(loaded.name).name, targets=list(options.targets), inputs=loaded.inputs,
        outputs=loaded.outputs,
        parts=[Part("main", host.name, devices[0], emulated=False, library=library, threads=options.num_threads,
                    devices=devices)],
        tvm_version=tvm.__version__, tvm_ffi_version=tvm_ffi.__version__,
    )
    report = _report(manifest, loaded, options, constant_inputs, graph, stage_reports, kernels, times)
    report["placement"] = {"devices": list(placed.devices), "transfers": len(moved),
                           "transfer_bytes": sum(t["bytes"] for t in moved)}
    plan = {"solver": "given" if placement is not None else "accelerator-first",
            "parts": {"main": ",".join(placed.devices)}, "devices": list(placed.devices),
            "nodes": [{"name": n.name, "op": n.op, "device": placed.assignment[n.name],
                       "placed": n.name in found} for n in graph.nodes],
            "transfers": moved}

    def write_parts(tmp: Path) -> None:
        (tmp / "split").mkdir()
        writer.backend.export(executable, tmp / library, options)

    runner = host.backend.runner(executable, options.num_threads, devices)
    return CompiledModel(manifest, report, plan, [runner], write_parts)


@dataclass
class Inspection:
    """What ``hetc inspect`` shows: the ONNX view, and the op graph when shapes are static."""

    model: str
    ir_version: int
    opset: int
    producer: str
    inputs: list[tuple[str, list[int | str], str]]  # name, dims (symbolic names kept), dtype
    outputs: list[tuple[str, list[int | str], str]]
    onnx_ops: dict[str, int]
    converters: dict[str, str | None]  # op -> "hetc" | "tvm" | None (unsupported)
    targets: list[str]
    graph: OpGraph | None = None
    graph_error: str | None = None  # why there is no op graph (dynamic shapes, ...)


def _dims(value) -> list[int | str]:
    shape = value.type.tensor_type.shape
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in shape.dim]


def inspect_model(model: ModelSource, input_shapes: Mapping[str, Sequence[int]] | None = None,
                  target: str | Sequence[str] | None = None) -> Inspection:
    """Summarize a model without compiling it; never fails on unsupported ops or dynamic dims."""
    from .frontends.onnx.importer import converter_source
    from .frontends.onnx.loader import model_opset, read_model
    from .targets import all_targets

    targets = parse_targets(target) if target else all_targets()
    proto, label = read_model(model)
    opset = model_opset(proto)
    inits = {t.name for t in proto.graph.initializer}
    from onnx import helper

    def describe(values) -> list:
        return [(v.name, _dims(v), helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name)
                for v in values if v.name not in inits]

    ops = op_histogram(proto)
    result = Inspection(Path(label).name, proto.ir_version, opset, proto.producer_name,
                        describe(proto.graph.input), describe(proto.graph.output), dict(ops.most_common()),
                        {op: converter_source(op, opset) for op in ops}, [t.name for t in targets])
    try:
        result.graph = build_opgraph(to_relax(load_model(proto, input_shapes)), targets)
    except HetcError as err:
        result.graph_error = str(err)
    return result
