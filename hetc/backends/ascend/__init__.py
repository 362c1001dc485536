"""The Ascend NPU target: regions CANN can compile, as a TVM BYOC integration.

Regions of supported ops become ONNX subgraphs with an ATC build script and an AscendCL host
program (``ascend/<region>/`` in the artifact); here, without an NPU, onnxruntime runs them
(emulation, labelled so everywhere). See docs/ascend.md.
"""

from ...targets import Backend, Target, TargetKind, register_target
from . import patterns, pipeline, runtime


def _host_only(*_args, **_kwargs):
    """Ascend regions are called by the host's part; the NPU has no part of its own."""
    from ...errors import UsageError

    raise UsageError("the ascend target runs regions of a model that the host CPU calls; "
                     "compile with --target ascend,cpu")


ASCEND = register_target(Target(
    name="ascend",
    kind=TargetKind.EXTERNAL,
    description="Huawei Ascend NPU through CANN (ONNX subgraphs, ATC, AscendCL; onnxruntime emulation "
                "without an NPU; with --target ascend,cpu)",
    device_type="ascend",
    dtypes=frozenset({"float32", "float16"}),
    backend=Backend(supports=patterns.supports, stages=lambda options: [], build=_host_only, export=_host_only,
                    load=_host_only, runner=_host_only, offload=pipeline.offload, serve=runtime.serve),
))
