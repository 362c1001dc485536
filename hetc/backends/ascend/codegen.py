"""Ascend code generation: ``relax.ext.hetc_ascend``, the codegen ``RunCodegen`` calls with the
regions of the module, working for the ``AscendOffload`` of the compile in progress (``active``).

Per region (``generate``): the ``RegionSpec`` (symbol, inputs, outputs, soc version), the host
program and build script (``host.host_files``) and a README. No code is linked into the host's
library: the VM calls the region's symbol, which the runtime provides in the artifact's process
(``runtime.py``: onnxruntime emulation, or the region's host library built on a CANN machine).
"""

from __future__ import annotations

import tvm

from ..byoc import CodegenContext, node_ids
from .spec import OPSET, RegionSpec

CONTEXT = CodegenContext("hetc_ascend")


@tvm.register_global_func("relax.ext.hetc_ascend")
def _codegen(functions, _options, _constant_names):
    offload = CONTEXT.current()
    for func in functions:
        generate(func, offload)
    return []  # nothing to link: the runtime provides each region's symbol (module doc)


def generate(func, offload) -> None:
    """Record one region on ``offload`` with its generated files."""
    from .host import host_files
    from .pipeline import AscendRegion, region_gears

    symbol = str(func.attrs["global_symbol"])
    model, inputs, outputs, ops, neighbours = offload.pending[symbol]
    name = symbol.rsplit("_", 1)[0]
    spec = region_gears(RegionSpec(symbol, name, tuple(inputs), tuple(outputs), offload.soc_version), offload.gears)
    files = host_files(spec)
    files["README.md"] = readme(spec, ops)
    offload.regions.append(AscendRegion(symbol, node_ids(func), spec=spec, model=model, files=files,
                                        onnx_ops=ops, host_neighbours=neighbours))


def _gears_text(spec: RegionSpec) -> str:
    if not spec.dynamic:
        return ""
    from .host import atc_gears

    gears = ", ".join("(" + ", ".join(map(str, g)) + ")" for g in spec.gears)
    return (f"Symbolic dims ({', '.join(spec.dims)}): built for the gears {gears}; build.sh passes "
            f"`{atc_gears(spec)[0][:200]}` to ATC, and host.cc selects the gear of each call's inputs.\n\n")


def readme(spec: RegionSpec, ops: dict[str, int]) -> str:
    def rows(items) -> str:
        return "".join(f"| {t.name} | {t.dtype} | {list(t.shape)} |\n" for t in items)

    return f"""# {spec.name}: an Ascend region ({sum(ops.values())} ONNX ops)

`{spec.onnx_file}` is the region as an ONNX subgraph (opset {OPSET}), the graph CANN compiles.
Here (no NPU) hetc runs it with onnxruntime on the CPU: emulation, not NPU execution.

On a machine with CANN and an NPU (soc `{spec.soc_version}`):

    ASCEND_TOOLKIT_HOME=/usr/local/Ascend/ascend-toolkit/latest ./build.sh   # model.om + lib{spec.symbol}.so
    DYNAMIC_BATCH=1,2,4,8 ./build.sh                                           # with batch gears
    hetc run ARTIFACT --inputs x.npz --ascend-mode device

`build.sh` runs ATC offline (`model.om`) and builds `host.cc` into `lib{spec.symbol}.so`, which
exports `{spec.symbol}`: the function the artifact's VM calls (inputs, then outputs). Without
`model.om` it builds the graph in-process with CANN's graph engine from `{spec.onnx_file}`.

{_gears_text(spec)}Ops: {", ".join(f"{k} x{v}" for k, v in ops.items())}

| input | dtype | shape |
|---|---|---|
{rows(spec.inputs)}
| output | dtype | shape |
|---|---|---|
{rows(spec.outputs)}"""
