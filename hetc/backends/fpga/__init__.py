"""The FPGA target: HLS C++ over a hand-written kernel library, verified by C-simulation.

Regions of supported ops become Vitis HLS projects (``fpga/<region>/`` in the artifact) and
run here as C-simulation linked into the host CPU's library (docs/fpga.md).
"""

from ...targets import Backend, Target, TargetKind, register_target
from . import estimates, patterns, pipeline, runtime

FPGA = register_target(Target(
    name="fpga",
    kind=TargetKind.EXTERNAL,
    description="FPGA through HLS C++ (Vitis HLS projects; runs here as C-simulation; with --target fpga,cpu)",
    device_type="fpga",
    dtypes=frozenset({"float32"}),
    backend=Backend(supports=patterns.supports, stages=lambda options: [], build=runtime.host_only,
                    export=runtime.host_only, load=runtime.host_only, runner=runtime.host_only,
                    offload=pipeline.offload, cost=estimates.node_seconds),
))
