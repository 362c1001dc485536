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


def _after_sharding(options: CompileOptions) -> list[Stage]:
    """The CPU pipeline after its ``legalize`` stage (the sharded module is legalized)."""
    stages = cpu_pipeline.stages(options)
    return stages[[s.name for s in stages].index("legalize") + 1:]


def compile_parallel(model, options: CompileOptions, tp: int = 1, pp: int = 1, base_dir=None,
                     constant_inputs=None, micro_batches: int = 1) -> CompiledModel:
    """A ``CompiledModel`` whose run starts ``tp`` or ``pp`` rank processes (``runtime.py``)."""
    if options.targets != ("cpu",):
        raise UsageError("--tp/--pp compile for the CPU target here (one process per rank); "
                         f"got --target {','.join(options.targets)}")
    if (tp > 1) == (pp > 1):
        raise UsageError("give one of --tp N or --pp N (N >= 2); combining them is not supported yet")
    cpu = get_target("cpu")
    start = time.perf_counter()
    loaded = load_model(model, options.input_shapes, base_dir, constant_inputs)
    ranks, programs = [], []
    if tp > 1:
        mod, _ = run_pipeline(to_relax(loaded), inference_passes() + simplify_passes())
        spmd, values, plan = shard.shard_module(mod, tp, cpu_pipeline.FAST_MATH)
        summary = {"kind": "tensor", **plan.describe()}
        for rank in range(tp):
            local = fuse_collectives(shard.rank_module(spmd, values, rank, tp))
            counts = shard.collectives(local)
            local, _ = run_pipeline(local, _after_sharding(options))
            programs.append(cpu.backend.build(local, options))
            ranks.append({"library": f"cpu/rank{rank}.so", "model_inputs": [s.name for s in loaded.inputs],
                          "collectives": counts})
    else:
        spec = get_spec("dev-cpu")
        stages = pipeline.split(loaded.proto, pp, spec.peak_flops["float32"] / spec.memory_bandwidth,
                                micro_batches)
        summary = {"kind": "pipeline", "pp": pp, "micro_batches": micro_batches,
                   "stage_flops": [s.flops for s in stages], "stage_weight_bytes": [s.weight_bytes for s in stages]}
        for rank, stage in enumerate(stages):
            sub = load_model(stage.model, {}, base_dir, None)
            mod, _ = run_pipeline(to_relax(sub), cpu.backend.stages(options))
            programs.append(cpu.backend.build(mod, options))
            ranks.append({"library": f"cpu/rank{rank}.so", "model_inputs": [s.name for s in loaded.inputs],
                          "inputs": stage.inputs, "outputs": stage.outputs, "receive": stage.receive,
                          "send": stage.send, "results": stages[-1].send, "micro_batches": micro_batches,
                          "collectives": {}})
    parallel = {**summary, "ranks": ranks, "communication": "torch.distributed (gloo) in a TVM disco session"}
    manifest = Manifest(
        model=Path(loaded.name).name, targets=["cpu"], inputs=loaded.inputs, outputs=loaded.outputs,
        parts=[Part(f"rank{k}", "cpu", f"cpu:{k}", emulated=False, library=r["library"],
                    threads=options.num_threads) for k, r in enumerate(ranks)],
        tvm_version=tvm.__version__, tvm_ffi_version=tvm_ffi.__version__, parallel=parallel)
    report = {"parallel": summary, "times": {"total": time.perf_counter() - start}}

    def write_parts(tmp: Path) -> None:
        (tmp / "cpu").mkdir()
        for rank, program in enumerate(programs):
            cpu.backend.export(program, tmp / ranks[rank]["library"], options)

    compiled = CompiledModel(manifest, report, {"parallel": summary}, [], write_parts)
    compiled._runners.append(_LazyRunner(compiled, options.num_threads))
    return compiled


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


