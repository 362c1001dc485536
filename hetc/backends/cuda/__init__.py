"""The CUDA target: TVM's CUDA codegen with dlight schedules, nvcc-built fatbins in the artifact."""

from ...targets import Backend, Target, TargetKind, register_target
from . import codegen, patterns, pipeline, runtime

CUDA = register_target(Target(
    name="cuda",
    kind=TargetKind.TVM_NATIVE,
    description="NVIDIA GPU through TVM's CUDA codegen (dlight schedules; fatbins built with nvcc, "
                "--arch, default sm_90)",
    device_type="cuda",
    dtypes=patterns.DTYPES,
    backend=Backend(supports=patterns.supports, stages=pipeline.stages, build=codegen.build,
                    export=codegen.export, load=runtime.load, runner=runtime.from_executable,
                    tvm_target=codegen.cuda_target),
))
