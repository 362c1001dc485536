"""The CPU target: LLVM code for the host CPU, run by the Relax VM."""

from ...targets import Backend, Feature, Target, TargetKind, register_target
from . import codegen, patterns, pipeline, runtime

CPU = register_target(Target(
    name="cpu",
    kind=TargetKind.TVM_NATIVE,
    description="host CPU through LLVM (mcpu of this machine, multi-threaded)",
    device_type="cpu",
    dtypes=patterns.DTYPES,
    backend=Backend(supports=patterns.supports, stages=pipeline.stages, build=codegen.build,
                    export=codegen.export, load=runtime.load, runner=runtime.from_executable,
                    tvm_target=codegen.llvm_target),
    features=frozenset({Feature.NHWC_LAYOUT, Feature.MULTITHREADED}),
))
