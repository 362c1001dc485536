"""``hetc compile --tp N`` / ``--pp N``: one CPU executable per rank, and a manifest that says
how the ranks work together (``manifest.parallel``, docs/parallel.md).

- Tensor parallel (``shard.py``): the graph passes, then the Megatron sharding through
  ``relax.distributed``, then each rank's program (its weight shards as constants), with
  adjacent collectives fused (``fuse.py``), through the rest of the CPU pipeline: fusion,
  tuned or default schedules, weight packing.
- Pipeline parallel (``pipeline.py``): the ONNX graph, rewritten for the micro-batch size,
  cut into stage models, each compiled by the normal CPU pipeline; the runtime streams the
  micro-batches through the stages, sending the live tensors between them.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import tvm
import tvm_ffi

from ..backends.cpu import pipeline as cpu_pipeline
from ..devices import get_spec
from ..errors import UsageError
from ..frontends.onnx import load_model, to_relax
from ..options import CompileOptions
from ..passes import run_pipeline
from ..passes.phases import inference_passes, simplify_passes
from ..passes.pipeline import Stage
from ..runtime.artifact import Manifest, Part
from ..runtime.model import CompiledModel
from ..targets import get_target
from . import pipeline, shard
from .fuse import fuse_collectives

_GRAPH_STAGES = inference_passes() + simplify_passes()  # before sharding


def _cpu_stages_after(name: str, options: CompileOptions) -> list[Stage]:
    """The CPU pipeline after its stage ``name``: a sharded module continues after
    ``legalize``, an unsharded one after the graph passes it already went through."""
    stages = cpu_pipeline.stages(options)
    return stages[[s.name for s in stages].index(name) + 1:]


def _tensor_programs(mod, tp: int, options: CompileOptions, require_pairs: bool = True):
    """``tp`` rank programs of ``mod`` (after the graph passes), their collective counts and the
    sharding summary. Without a linear-layer pair to split: an error, or (``require_pairs``
    False: a pipeline stage of a TP x PP artifact) one replicated program, for the group's
    first rank only (the others have nothing to do: their programs are None)."""
    cpu = get_target("cpu")
    try:
        spmd, values, plan = shard.shard_module(mod, tp, cpu_pipeline.FAST_MATH)
    except shard.NothingToShard as err:
        if require_pairs:
            raise
        mod, _ = run_pipeline(mod, _cpu_stages_after(_GRAPH_STAGES[-1].name, options))
        programs = [cpu.backend.build(mod, options)] + [None] * (tp - 1)
        return programs, [{}] * tp, {**err.plan.describe(), "collective_bytes": {}}
    programs, counts = [], []
    for rank in range(tp):
        local = fuse_collectives(shard.rank_module(spmd, values, rank, tp))
        traffic = shard.collective_traffic(local)
        unplanned = sorted(set(traffic) - {"allreduce", "broadcast_from_worker0"})
        if unplanned or traffic.get("allreduce", (0, 0))[0] > plan.allreduces:
            raise UsageError(f"--tp: TVM's sharding propagation disagrees with the plan ({plan.allreduces} "
                             f"all-reduce(s)): rank {rank} makes {shard.collectives(local)}")
        counts.append({name: calls for name, (calls, _) in traffic.items()})
        if rank == 0:
            described = plan.describe()
            described["collective_bytes"] = {name: size for name, (_, size) in traffic.items()}
        local, _ = run_pipeline(local, _cpu_stages_after("legalize", options))
        programs.append(cpu.backend.build(local, options))
    return programs, counts, described


def compile_parallel(model, options: CompileOptions, tp: int = 1, pp: int = 1, base_dir=None,
                     constant_inputs=None, micro_batches: int = 1) -> CompiledModel:
    """A ``CompiledModel`` whose run starts ``tp x pp`` rank processes (``runtime.py``).

    Global rank ``s * tp + t`` is tensor-parallel rank ``t`` of pipeline stage ``s``; the
    ranks of one stage form its tensor-parallel group (``tp_group``), whose first rank (the
    stage's *leader*) receives the stage's inputs and sends its outputs on."""
    if options.targets != ("cpu",):
        raise UsageError("--tp/--pp compile for the CPU target here (one process per rank); "
                         f"got --target {','.join(options.targets)}")
    cpu = get_target("cpu")
    start = time.perf_counter()
    loaded = load_model(model, options.input_shapes, base_dir, constant_inputs)
    loaded.require_static("--tp/--pp")
    model_inputs = [s.name for s in loaded.inputs]
    ranks, libraries = [], {}  # libraries: path in the artifact -> program
    if pp == 1:
        mod, _ = run_pipeline(to_relax(loaded), _GRAPH_STAGES)
        programs, counts, shards = _tensor_programs(mod, tp, options)
        summary = {"kind": "tensor", **shards}
        for rank, program in enumerate(programs):
            libraries[f"cpu/rank{rank}.so"] = program
            ranks.append({"library": f"cpu/rank{rank}.so", "model_inputs": model_inputs, "collectives": counts[rank]})
    else:
        spec = get_spec("dev-cpu")
        stages = pipeline.split(loaded.proto, pp, spec.peak_flops["float32"] / spec.memory_bandwidth,
                                micro_batches, _static_shapes, whole_blocks=tp > 1)
        summary = {"kind": "pipeline", "pp": pp, "tp": tp, "micro_batches": micro_batches,
                   "stage_flops": [s.flops for s in stages], "stage_weight_bytes": [s.weight_bytes for s in stages]}
        shards = []
        for k, stage in enumerate(stages):
            sub = load_model(stage.model, {}, base_dir, None)
            if tp == 1:
                mod, _ = run_pipeline(to_relax(sub), cpu.backend.stages(options))
                stage_programs, counts = [cpu.backend.build(mod, options)], [{}]
            else:
                mod, _ = run_pipeline(to_relax(sub), _GRAPH_STAGES)
                stage_programs, counts, described = _tensor_programs(mod, tp, options, require_pairs=False)
                shards.append(described)
            group = [k * tp + t for t in range(tp)]
            for t, program in enumerate(stage_programs):
                # a rank with no program of its own (a replicated stage's) names its leader's library
                library = f"cpu/rank{group[t] if program is not None else group[0]}.so"
                if program is not None:
                    libraries[library] = program
                ranks.append({"library": library, "model_inputs": model_inputs,
                              "stage": k, "tp_group": group, "inputs": stage.inputs, "outputs": stage.outputs,
                              "receive": stage.receive, "send": stage.send, "results": stages[-1].send,
                              "results_from": (pp - 1) * tp, "previous": group[0] - tp,
                              "next": group[0] + tp if k < pp - 1 else 0,
                              "micro_batches": micro_batches, "collectives": counts[t]})
        if shards:
            summary["stage_shards"] = shards
        summary["stage_send_bytes"] = [micro_batches * stage.send_bytes for stage in stages[:-1]]
    parallel = {**summary, "ranks": ranks, "communication": "torch.distributed (gloo) in a TVM disco session"}
    manifest = Manifest(
        model=Path(loaded.name).name, targets=["cpu"], inputs=loaded.inputs, outputs=loaded.outputs,
        parts=[Part(f"rank{k}", "cpu", f"cpu:{k}", emulated=False, library=r["library"],
                    threads=options.num_threads) for k, r in enumerate(ranks)],
        tvm_version=tvm.__version__, tvm_ffi_version=tvm_ffi.__version__, parallel=parallel)
    report = {"parallel": summary, "times": {"total": time.perf_counter() - start}}

    def write_parts(tmp: Path) -> None:
        (tmp / "cpu").mkdir()
        for library, program in libraries.items():
            cpu.backend.export(program, tmp / library, options)

    compiled = CompiledModel(manifest, report, {"parallel": summary}, [], write_parts)
    compiled._runners.append(_LazyRunner(compiled, options.num_threads))
    return compiled


def _static_shapes(proto) -> dict:
    """The static shape of every value of ``proto`` (inputs fixed) as the importer finds them."""
    found: dict = {}
    to_relax(load_model(proto, {}, None, None), found)
    return found


class _LazyRunner:
    """Runs a compiled, not yet saved, parallel model: the rank processes load their programs
    from files, so the first run saves the artifact to a temporary directory."""

    def __init__(self, compiled: CompiledModel, threads: int) -> None:
        self.compiled, self.threads, self.runner, self.tmp = compiled, threads, None, None

    def __call__(self, args):
        if self.runner is None:
            from .runtime import ParallelRunner

            self.tmp = tempfile.TemporaryDirectory(prefix="hetc-parallel-")
            root = self.compiled.save(Path(self.tmp.name) / "artifact")
            self.runner = ParallelRunner(root, self.compiled.manifest.parallel, self.compiled.manifest.outputs,
                                         self.threads)
        return self.runner(args)


