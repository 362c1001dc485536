"""The Python API: ``hetc.compile`` and ``hetc.load``.

    model = hetc.compile("model.onnx", target="cpu")
    outputs = model.run({"x": x})
    model.save("build/")
    model = hetc.load("build/")
"""

from __future__ import annotations

import contextvars
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import tvm
import tvm_ffi

from . import crash
from .backends.cpu import int8 as cpu_int8
from .backends.cpu.codegen import isa_record
from .errors import HetcError, UnsupportedOpError, UsageError
from .frontends.onnx import load_model, op_histogram, to_relax
from .frontends.onnx.loader import ModelSource
from .frontends.torch import is_torch_source
from .graph import OpGraph, build_opgraph
from .native_log import filtered_stderr
from .options import CompileOptions, plan_values
from .passes import run_pipeline
from .runtime.artifact import Manifest, Part
from .runtime.model import CompiledModel, load
from .stack import deep
from .targets import Target, TargetKind, get_target, parse_targets

__all__ = ["CompiledModel", "Inspection", "compile", "inspect_model", "load"]


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


def winograd_decisions(mod: tvm.IRModule) -> list[dict]:
    """How each eligible 3x3 conv runs on the CPU and why (``hetc/backends/cpu/winograd.py``)."""
    from .backends.cpu.winograd import decisions

    return decisions(mod)


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


def _tuning_report(mod: tvm.IRModule, options: CompileOptions) -> dict:
    """What ``--db`` did: tuned vs default kernels, symbolic kernels given a record's schedule
    (``hetc.tuning.replay``) and records that did not apply."""
    from .tuning.replay import summary

    return {"database": options.database, **summary(mod)}


_SYMBOL = re.compile(r'^(\w+) = TypeVar\("\w+"\)$', re.MULTILINE)  # how TVMScript declares a symbolic var
_LAUNCH = re.compile(r'T\.thread_binding\((.+?), thread="((?:blockIdx|threadIdx)\.[xyz])"')


def _kernel_dims(mod: tvm.IRModule) -> dict[str, dict]:
    """The kernels that take symbolic dims: for each, the dims (``dims``: names, from its
    buffers' shapes) and, for GPU kernels, the launch extents that depend on them (``launch``:
    {"blockIdx.x": "(batch * seq + 31) // 32"}). Read from each kernel's TVMScript (TVM 0.27's
    Python API has no TIR visitor)."""
    result = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        text = func.script()
        dims = sorted(set(_SYMBOL.findall(text)))
        if not dims:
            continue
        launch = {}
        for extent, axis in _LAUNCH.findall(text):
            extent = re.sub(r"T\.int64\((\d+)\)", r"\1", extent)
            if any(re.search(rf"\b{d}\b", extent) for d in dims):
                launch[axis] = extent
        result[gv.name_hint] = {"dims": dims, **({"launch": launch} if launch else {})}
    return dict(sorted(result.items()))


def compile(
    model: ModelSource,
    target_or_inputs=None,
    /,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    target: str | Sequence[str] | None = None,
    example_inputs=None,
    dynamic_shapes=None,
    layout: str | None = None,
    num_threads: int = 0,
    base_dir: str | os.PathLike | None = None,
    constant_inputs: Mapping[str, np.ndarray] | None = None,
    database: str | os.PathLike | None = None,
    arch: Sequence[str] = (),
    placement: Mapping[str, str] | str | os.PathLike | None = None,
    precision: str | os.PathLike | None = None,
    calibration: str | os.PathLike | None = None,
    pins: Mapping[str, str] | None = None,
    devices: Mapping[str, str] | None = None,
    objective: str = "latency",
    tp: int = 1,
    pp: int = 1,
    micro_batches: int = 1,
    dims: Mapping[str, Sequence[int]] | None = None,
    plan_shape: Mapping[str, int] | None = None,
    gears: Mapping[str, Sequence[int]] | None = None,
    cpu: str | None = None,
    winograd: str = "auto",
    kv_cache: int | None = None,
    weights: str | None = None,
) -> CompiledModel:
    """Compile an ONNX model (path or ``ModelProto``) or a PyTorch program for ``target``.

    ``hetc.compile("model.onnx", "cpu")``; ``hetc.compile(module, (x,), target="cpu",
    dynamic_shapes=({0: "batch"},))``: the second positional argument is the target (a name or
    names) or, for a torch ``nn.Module``, its ``example_inputs``. A torch source (an eval-mode
    ``nn.Module`` with ``example_inputs``, a ``torch.export.ExportedProgram``, or a ``.pt2``
    file) goes through ``hetc.frontends.torch`` (docs/torch.md); ``dynamic_shapes`` is
    torch.export's, where a dim may also be given by name (``{0: "batch"}``, range from ``dims``).

    Input dims the model leaves unknown (``dim_param`` or unnamed) stay symbolic: one artifact
    runs every size in their range. ``dims`` declares ranges (``{"batch": (1, 64)}``; default
    ``DEFAULT_DIM_RANGE``), ``plan_shape`` the size costs and placement assume for a dim
    (default: the range's low end), ``gears`` the sizes Ascend regions are built for
    (``{"batch": [1, 8, 32]}``; default ``options.default_gears`` of the range);
    ``input_shapes`` binds dims statically (the fastest code
    for one shape). ``layout="NHWC"`` converts conv layouts;
    ``base_dir`` locates external data for a ``ModelProto``; ``constant_inputs`` freezes graph
    inputs to the given values (for inputs that decide output shapes: axes, pads, shapes).
    ``database`` is a tuning database written by ``hetc.tune``: tuned kernels replace the
    default schedules for the tasks it has records for. ``arch`` lists the GPU architectures
    to build binaries for (``"sm_90"``, or a device name from ``hetc/devices``; default sm_90).
    ``placement`` splits the model over devices: ``{node name: "cpu:0" | "cpu:1" | "cuda:0" ...}``
    or a plan.json path (docs/placement.md); with several targets and no placement, the placement
    solver chooses one by cost (``hetc.placement.plan``): ``pins`` ({node name: device}) fix
    nodes, ``devices`` ({target: device spec name}) choose the specs costs come from, and
    ``objective`` is "latency" or "throughput". ``precision`` and
    ``calibration`` choose the FPGA's number types (docs/fpga.md): "float" (default), "fixed"
    (ranges from the ``calibration`` .npz of model inputs), a type like "ap_fixed<16,6>", or a
    JSON file of per-layer types. ``tp`` and/or ``pp`` (>= 2) compile a tensor- and/or
    pipeline-parallel CPU artifact whose run is ``tp x pp`` processes (docs/parallel.md), rank
    ``s * tp + t`` being tensor-parallel rank t of stage s; with ``pp``, ``micro_batches``
    streams that many slices of the batch through the stages, so the stages overlap. ``cpu``
    names the CPU the host code is for (an LLVM CPU such as "haswell" for AVX2 machines;
    default: this machine's); the artifact records the instruction sets it uses, and loading
    it on a CPU without them is refused (docs/cpu.md). ``winograd``: how the CPU computes 3x3
    stride-1 convs, "auto" (a cost rule per conv), "off" (direct), "2" or "4" (every eligible
    conv as Winograd F(2x2,3x3) or F(4x4,3x3)). ``kv_cache``: for a decoder exported with its KV
    cache as inputs and outputs (``past_key_values.*`` / ``present.*``), keep the cache in
    preallocated buffers of this many positions, updated in place: ``hetc.session`` and
    ``hetc.generate`` decode with them, and ``run`` still takes and returns the exported
    signature (docs/decoding.md). ``weights="int8"``: constant matmul weights stored as int8 with a
    scale per output channel, dequantized inside the matmul (CPU; docs/decoding.md).
    """
    target, example_inputs = _target_and_inputs(target_or_inputs, target, example_inputs)
    targets = parse_targets(target)
    if any(t.kind is TargetKind.EXTERNAL for t in targets) and not any(t.name == "cpu" for t in targets):
        targets = [*targets, get_target("cpu")]  # external devices' regions are called by the host CPU
    options = CompileOptions(tuple(t.name for t in targets),
                             {k: tuple(v) for k, v in (input_shapes or {}).items()}, layout, num_threads,
                             None if database is None else str(database), tuple(arch),
                             None if precision is None else str(precision),
                             None if calibration is None else str(calibration),
                             {k: (int(v[0]), int(v[1])) for k, v in (dims or {}).items()},
                             {k: int(v) for k, v in (plan_shape or {}).items()},
                             {k: tuple(sorted({int(x) for x in v})) for k, v in (gears or {}).items()},
                             cpu, str(winograd), int(kv_cache or 0), weights)
    if gears and not any(t.name == "ascend" for t in targets):
        raise UsageError("--gears chooses the shapes Ascend regions are built for; add the ascend target "
                         "(--target ascend,cpu)")
    if (precision is not None or calibration is not None) and not any(t.backend.offload for t in targets):
        raise UsageError("--precision and --calibration choose the number types of FPGA regions; "
                         "add the fpga target (--target fpga,cpu)")
    solving = placement is None or placement == "auto"
    if (pins or devices) and (len(targets) == 1 or not solving):
        raise UsageError("--pin and --device steer the placement solver: use them with several targets "
                         "and no --placement")
    if tp < 1 or pp < 1 or micro_batches < 1:
        raise UsageError(f"--tp, --pp and --micro-batches must be >= 1, got {tp}, {pp}, {micro_batches}")
    if micro_batches > 1 and pp < 2:
        raise UsageError("--micro-batches streams a batch through pipeline stages: give --pp N (N >= 2)")
    if is_torch_source(model):
        model = _load_torch(model, example_inputs, dynamic_shapes, options, base_dir, constant_inputs, tp * pp)
    elif example_inputs is not None or dynamic_shapes is not None:
        raise UsageError("example_inputs and dynamic_shapes are for torch modules; an ONNX model's inputs are "
                         "its own (bind dims with input_shapes=)")
    if options.kv_cache and (tp > 1 or pp > 1 or len(targets) > 1 or placement is not None):
        raise UsageError("--kv-cache compiles a decoder for one target: it does not combine with several targets, "
                         "--placement, --tp or --pp")
    if tp > 1 or pp > 1:
        if placement is not None or pins or devices or precision is not None:
            raise UsageError("--tp/--pp do not combine with --placement, --pin, --device or --precision")
        from .parallel.compile import compile_parallel

        with filtered_stderr():
            return deep(lambda: compile_parallel(model, options, tp, pp, base_dir, constant_inputs, micro_batches))
    with filtered_stderr():
        if len(targets) == 1 and placement is None:
            return deep(lambda: _compile(model, targets[0], targets, options, base_dir, constant_inputs))
        return deep(lambda: _compile_multi(model, targets, options, placement, base_dir, constant_inputs, pins,
                                           devices, objective))


def _target_and_inputs(target_or_inputs, target, example_inputs) -> tuple:
    """(target, example_inputs) from ``compile``'s second positional argument, which is a
    target name (or names) for every model, or a torch module's example inputs."""
    if target_or_inputs is None:
        return target or "cpu", example_inputs
    names = isinstance(target_or_inputs, str) or (
        isinstance(target_or_inputs, Sequence) and all(isinstance(t, str) for t in target_or_inputs)
        and len(target_or_inputs) > 0)
    if names:
        if target is not None:
            raise UsageError(f"the target is given twice: {target_or_inputs!r} and target={target!r}")
        return target_or_inputs, example_inputs
    if example_inputs is not None:
        raise UsageError("example_inputs are given twice: positionally and as example_inputs=")
    return target or "cpu", target_or_inputs


def _load_torch(model, example_inputs, dynamic_shapes, options: CompileOptions, base_dir, constant_inputs,
                ranks: int):
    """The validated torch program (``hetc.frontends.torch``); the ONNX-only options refused."""
    given = [name for name, value in (("input_shapes", options.input_shapes), ("base_dir", base_dir),
                                      ("constant_inputs", constant_inputs)) if value]
    if given or ranks > 1:
        raise UsageError(f"{', '.join(given) or '--tp/--pp'} apply to ONNX models; a torch program's shapes come "
                         "from torch.export (dynamic_shapes=, dims=)")
    try:
        from .frontends.torch import loader
    except ImportError as err:  # torch is an optional extra
        raise UsageError(f"compiling a torch program needs torch ({err}): pip install 'hetc[torch]'") from err
    crash.set_stage("load")
    with filtered_stderr():
        return deep(lambda: loader.load_program(model, example_inputs, dynamic_shapes, options.dims))


def _import(model: ModelSource, targets: list[Target], options: CompileOptions,
            base_dir: str | os.PathLike | None, constant_inputs):
    """Load and convert the model: (loaded model, Relax module, op graph, {"import": seconds}).
    A torch program arrives loaded (``_load_torch``) and is only converted."""
    start = time.perf_counter()
    crash.set_stage("load")
    if getattr(model, "frontend", None) == "torch":
        from .frontends import torch as torch_frontend

        loaded, mod = model, torch_frontend.to_relax(model)
    else:
        loaded = load_model(model, options.input_shapes, base_dir, constant_inputs, options.dims,
                            fuse_qdq_convs=cpu_int8.integer_kernels(options), decoder_cache=bool(options.kv_cache))
        mod = to_relax(loaded)
    crash.set_stage("op graph")
    times = {"import": time.perf_counter() - start}
    return loaded, mod, build_opgraph(mod, targets, plan_values(loaded.dims, options.plan_shape)), times


def _compile_multi(model: ModelSource, targets: list[Target], options: CompileOptions, placement,
                   base_dir: str | os.PathLike | None, constant_inputs, pins, devices, objective: str) -> CompiledModel:
    """Several devices. The assignment of ops to devices comes from the placement solver
    (``placement`` None or "auto"), from "accelerator-first" (every op the first accelerator in
    ``targets`` supports goes to it), or from the user (a {node: device} mapping or plan.json).
    Ops on external devices become their BYOC regions (called from cpu:0); the TVM-native
    devices get the rest, as a split module when there are several."""
    from .placement import default_assignment, read_placement

    imported = _import(model, targets, options, base_dir, constant_inputs)
    loaded, _, graph, times = imported
    external = {t.name for t in targets if t.kind is TargetKind.EXTERNAL}
    planned = None
    if placement is None or placement == "auto":
        from .placement.plan import make_plan

        start = time.perf_counter()
        planned = make_plan(graph, targets, Path(loaded.name).name, specs=devices, pins=pins, objective=objective)
        times["placement"] = time.perf_counter() - start
        assignment, solver = planned.assignment, planned.result.solver
    elif placement == "accelerator-first":
        assignment, solver = default_assignment(graph, targets), "accelerator-first"
    else:
        assignment = dict(placement) if isinstance(placement, Mapping) else read_placement(placement)
        solver = "given"
    # each external target: the op graph ids it was given
    allowed = {name: {n.id for n in graph.nodes if assignment.get(n.name, "").partition(":")[0] == name}
               for name in external}
    native = {node: "cpu:0" if device.partition(":")[0] in external else device
              for node, device in assignment.items()}
    on = set(native.values())
    if solver != "given" and len(on) == 1 and (on == {"cpu:0"} or not any(allowed.values())):
        # one TVM-native device runs the rest (the host, when there are regions): no split
        compiled = _compile(model, get_target(on.pop().partition(":")[0]), targets, options, base_dir,
                            constant_inputs, imported=imported, allowed=allowed, solver=solver)
    else:
        compiled = _compile_split(model, targets, options, native, base_dir, constant_inputs, imported=imported,
                                  allowed=allowed, solver=solver)
    if planned is not None:
        prediction = planned.to_json()
        if loaded.dims:  # the sizes the cost models assumed for the symbolic dims
            prediction["plan_shape"] = plan_values(loaded.dims, options.plan_shape)
        compiled.plan["prediction"] = {k: v for k, v in prediction.items() if k not in ("nodes", "edges")}
        compiled.report["placement_plan"] = prediction
    return compiled


def _start_offloads(options: CompileOptions, graph: OpGraph, loaded, targets: list[Target], allowed) -> list:
    """The ``Offload`` builds of the external targets that were given ops (``allowed``: target ->
    op graph ids), each limited to those."""
    offloads = []
    _IDLE.set([])
    for t in targets:
        if t.kind is TargetKind.EXTERNAL:
            offload = t.backend.offload(options, graph, loaded.inputs)  # checks the target's options
            offload.allowed = (allowed or {}).get(t.name)
            if offload.allowed:
                offloads.append(offload)
            elif getattr(offload, "kept_on_cpu", None) is not None and offload.kept_on_cpu():
                _IDLE.set([*_IDLE.get(), offload])  # given nothing: its report still says why
    return offloads


# external targets a compile gave no ops, whose reports still explain why (FPGA: symbolic dims)
_IDLE: contextvars.ContextVar = contextvars.ContextVar("hetc_idle_offloads", default=[])


def _finish_offloads(offloads: list, manifest: Manifest, report: dict, plan: dict) -> None:
    """The regions in the report, and in plan.json the device of every op a region runs;
    "placed": false marks ops folded into others before partitioning."""
    for o in _IDLE.get():
        report.setdefault("offload", {})[o.target] = o.report()
    _IDLE.set([])
    if not offloads:
        return
    for o in offloads:
        report.setdefault("offload", {})[o.target] = o.report()
        if hasattr(o, "gears_used"):
            manifest.gears.update(o.gears_used())
    device = {name: r.device for r in manifest.offloads for name in r.nodes}
    seen = set().union(*(o.seen for o in offloads))
    for node in plan["nodes"]:
        node["device"] = device.get(node["name"], node["device"])
        node["placed"] = node.get("placed", True) and node["name"] in seen


def _compile(model: ModelSource, tgt: Target, targets: list[Target], options: CompileOptions,
             base_dir: str | os.PathLike | None, constant_inputs, imported=None, allowed=None,
             solver: str | None = None) -> CompiledModel:
    loaded, mod, graph, times = imported or _import(model, targets, options, base_dir, constant_inputs)
    if solver is None:
        _check_supported(graph, tgt)
    kv_layout = None
    if options.kv_cache:  # the decoder's cache in place (hetc/passes/kv_cache.py)
        mod, kv_layout = _inplace_cache(mod, loaded, options)
    # External targets cut their regions out inside the host's pipeline (Backend.offload).
    offloads = _start_offloads(options, graph, loaded, targets, allowed)
    if offloads:
        from .placement.apply import tag_nodes

        mod, _ = tag_nodes(mod, graph)  # op names survive the graph passes, for the regions' node lists

    start = time.perf_counter()
    mod, stage_reports = run_pipeline(
        mod, tgt.backend.stages(options, offloads) if offloads else tgt.backend.stages(options))
    times["passes"] = time.perf_counter() - start
    kernels, convs = _kernel_schedules(mod), winograd_decisions(mod)
    kernel_dims = _kernel_dims(mod) if loaded.dims else {}
    start = time.perf_counter()
    crash.set_stage("codegen")
    executable = tgt.backend.build(mod, options)
    times["codegen"] = time.perf_counter() - start

    library = f"{tgt.name}/model.so"
    manifest = Manifest(
        model=Path(loaded.name).name, targets=list(options.targets), inputs=loaded.inputs,
        outputs=loaded.outputs,
        parts=[Part("main", tgt.name, f"{tgt.device_type}:0", emulated=False, library=library,
                    threads=options.num_threads, cpu=isa_record(options) if tgt.name == "cpu" else {})],
        tvm_version=tvm.__version__, tvm_ffi_version=tvm_ffi.__version__,
        offloads=[record for o in offloads for record in o.records("main")],
        dims={k: list(v) for k, v in loaded.dims.items()},
        kv_cache=kv_layout.to_json() if kv_layout is not None else {},
    )
    report = _report(manifest, loaded, options, constant_inputs, graph, stage_reports, kernels, times)
    report["winograd"] = convs
    if kernel_dims:
        report["kernel_dims"] = kernel_dims
    if options.database is not None:
        report["tuning"] = _tuning_report(mod, options)
    plan = {"solver": solver or ("single-target" if not offloads else "offload-supported"),
            "parts": {"main": tgt.name},
            "nodes": [{"name": n.name, "op": n.op, "device": f"{tgt.device_type}:0"} for n in graph.nodes]}
    _finish_offloads(offloads, manifest, report, plan)

    def write_parts(tmp: Path) -> None:
        (tmp / tgt.name).mkdir()
        tgt.backend.export(executable, tmp / library, options)
        for o in offloads:
            o.write(tmp)

    return CompiledModel(manifest, report, plan, [tgt.backend.runner(executable, options.num_threads)],
                         write_parts)


def _inplace_cache(mod: tvm.IRModule, loaded, options: CompileOptions):
    """(module, CacheLayout): ``main`` with the decoder's cache in buffers of ``options.kv_cache``
    positions (``hetc/passes/kv_cache.py``), checked against the dims' ranges."""
    from .generate import cache_names
    from .passes.kv_cache import inplace_cache

    crash.set_stage("kv_cache")
    names, outputs = [s.name for s in loaded.inputs], [s.name for s in loaded.outputs]
    past, present = cache_names(names, outputs)
    mod, layout = inplace_cache(mod, list(zip(past, present)), [n for n in names if n not in past], outputs,
                                options.kv_cache)
    ranges = {name: loaded.dims.get(name, (0, None)) for name in (layout.past_dim, layout.new_dim)}
    if all(high is not None for _, high in ranges.values()):
        most = sum(high for _, high in ranges.values())
        if options.kv_cache > most:
            raise UsageError(f"--kv-cache {options.kv_cache} is more positions than the model's dims allow: "
                             + " + ".join(f"{name} <= {high}" for name, (_, high) in ranges.items())
                             + f" = {most} (declare larger ranges with --dim)")
    return mod, layout


def _report(manifest: Manifest, loaded, options: CompileOptions, constant_inputs, graph: OpGraph,
            stage_reports, kernels: dict[str, str], times: dict[str, float]) -> dict:
    return {
        "model": manifest.model, "opset": loaded.opset, "options": asdict(options),
        "constant_inputs": sorted(constant_inputs or {}),
        **({"frontend": "torch", "torch_ops": dict(loaded.ops.most_common())} if loaded.opset is None else
           {"onnx_ops": dict(op_histogram(loaded.proto).most_common())}),
        "graph": _graph_summary(graph), "stages": [r.to_json() for r in stage_reports],
        "kernels": kernels,
        "seconds": times,
    }


def _compile_split(model: ModelSource, targets: list[Target], options: CompileOptions, placement,
                   base_dir: str | os.PathLike | None, constant_inputs, imported=None, allowed=None,
                   solver: str | None = None) -> CompiledModel:
    """One VM executable over several devices (``hetc.placement``); the host CPU's runtime drives
    it and calls the external targets' regions (on cpu:0)."""
    from . import placement as pl

    loaded, mod, graph, times = imported or _import(model, targets, options, base_dir, constant_inputs)
    native = [t for t in targets if t.kind is TargetKind.TVM_NATIVE]
    placed = pl.resolve_placement(placement, graph, native, pl.constant_bytes(mod))
    offloads = _start_offloads(options, graph, loaded, targets, allowed)
    mod, names = pl.tag_nodes(mod, graph)

    start = time.perf_counter()
    mod, stage_reports = run_pipeline(mod, pl.split_stages(placed, names, native, options, offloads))
    times["passes"] = time.perf_counter() - start
    kernels, convs = _kernel_schedules(mod), winograd_decisions(mod)
    kernel_dims = _kernel_dims(mod) if loaded.dims else {}
    moved, found = pl.transfers(mod, placed, names), pl.placed_nodes(mod)
    start = time.perf_counter()
    crash.set_stage("codegen")
    executable = pl.build(mod, placed, options)
    times["codegen"] = time.perf_counter() - start

    host, writer, devices = get_target("cpu"), pl.library_target(placed), placed.runtime_devices()
    library = "split/model.so"
    manifest = Manifest(
        model=Path(loaded.name).name, targets=list(options.targets), inputs=loaded.inputs,
        outputs=loaded.outputs,
        parts=[Part("main", host.name, devices[0], emulated=False, library=library, threads=options.num_threads,
                    devices=devices, cpu=isa_record(options))],
        tvm_version=tvm.__version__, tvm_ffi_version=tvm_ffi.__version__,
        offloads=[record for o in offloads for record in o.records("main")],
        dims={k: list(v) for k, v in loaded.dims.items()},
    )
    report = _report(manifest, loaded, options, constant_inputs, graph, stage_reports, kernels, times)
    report["winograd"] = convs
    if kernel_dims:
        report["kernel_dims"] = kernel_dims
    if options.database is not None:
        report["tuning"] = _tuning_report(mod, options)
    report["placement"] = {"devices": list(placed.devices), "transfers": len(moved),
                           "transfer_bytes": sum(t["bytes"] for t in moved)}
    plan = {"solver": solver or ("given" if placement is not None else "accelerator-first"),
            "parts": {"main": ",".join(placed.devices)}, "devices": list(placed.devices),
            "nodes": [{"name": n.name, "op": n.op, "device": placed.assignment[n.name],
                       "placed": n.name in found} for n in graph.nodes],
            "transfers": moved}
    _finish_offloads(offloads, manifest, report, plan)

    def write_parts(tmp: Path) -> None:
        (tmp / "split").mkdir()
        writer.backend.export(executable, tmp / library, options)
        for o in offloads:
            o.write(tmp)

    runner = host.backend.runner(executable, options.num_threads, devices)
    return CompiledModel(manifest, report, plan, [runner], write_parts)


def plan(model: ModelSource, target: str | Sequence[str], input_shapes: Mapping[str, Sequence[int]] | None = None,
         *, pins: Mapping[str, str] | None = None, devices: Mapping[str, str] | None = None,
         objective: str = "latency", solver: str = "auto", time_limit: float = 10.0,
         base_dir: str | os.PathLike | None = None, constant_inputs: Mapping[str, np.ndarray] | None = None,
         dims: Mapping[str, Sequence[int]] | None = None, plan_shape: Mapping[str, int] | None = None):
    """Place the model's ops on device 0 of each target by cost, without generating code
    (``hetc plan``): a ``hetc.placement.plan.Plan``. Symbolic dims are costed at ``plan_shape``
    (default: the low end of each one's range, ``dims``)."""
    from .placement.plan import make_plan

    targets = parse_targets(target)
    options = CompileOptions(tuple(t.name for t in targets), {k: tuple(v) for k, v in (input_shapes or {}).items()},
                             dims={k: (int(v[0]), int(v[1])) for k, v in (dims or {}).items()},
                             plan_shape={k: int(v) for k, v in (plan_shape or {}).items()})
    if is_torch_source(model):
        model = _load_torch(model, None, None, options, base_dir, constant_inputs, 1)
    with filtered_stderr():
        loaded, _, graph, _ = _import(model, targets, options, base_dir, constant_inputs)
        return make_plan(graph, targets, Path(loaded.name).name, specs=devices, pins=pins, objective=objective,
                         solver=solver, time_limit=time_limit)


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
                  target: str | Sequence[str] | None = None,
                  plan_shape: Mapping[str, int] | None = None) -> Inspection:
    """Summarize a model without compiling it; never fails on unsupported ops or dynamic dims.
    The op graph's symbolic dims are costed at ``plan_shape`` (default: 1 each)."""
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
        loaded = load_model(proto, input_shapes)
        result.graph = build_opgraph(to_relax(loaded), targets, plan_values(loaded.dims, dict(plan_shape or {})))
    except HetcError as err:
        result.graph_error = str(err)
    return result
