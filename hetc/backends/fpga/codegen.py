"""FPGA code generation: each BYOC region becomes typed layers, an HLS project and a C-simulation
object that the host's library links.

``relax.ext.hetc_fpga`` is the codegen ``RunCodegen`` calls with the regions of the module; it
works for the ``FpgaOffload`` of the compile in progress (``active``). Per region,
``generate``:

1. ``region.region_from_function``: the Region (layers, weights, reuse factors);
2. number types (``precision``, from ``--precision`` / ``--calibration``), and with calibration
   data each layer's measured error against float;
3. ``emit.project_files``: the Vitis HLS project, with a testbench whose data are the
   calibration samples (or seeded random inputs) and the bit-exact emulated outputs;
4. ``estimates.estimate``: cycles and resources (analytical);
5. ``emit.csim_source`` compiled by g++ into an object exporting the region's symbol, returned
   as a static library: ``export_library`` links it into the artifact's model.so, where the
   VM's ``call_dps_packed`` finds it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tvm
import tvm_ffi

from ...errors import UsageError
from ..byoc import CodegenContext, node_ids
from . import emit, estimates, precision, toolchain
from .layers import NumType, Region
from .region import region_from_function

CONTEXT = CodegenContext("hetc_fpga")


@tvm.register_global_func("relax.ext.hetc_fpga")
def _codegen(functions, _options, _constant_names):
    offload = CONTEXT.current()
    return [generate(func, offload) for func in functions]


def generate(func, offload):
    """The static library (C-simulation object) of one region; records it on ``offload``."""
    from .pipeline import FpgaRegion

    symbol = str(func.attrs["global_symbol"])
    region = region_from_function(func, symbol, offload.limits)
    region.name = symbol  # the VM calls the region by this symbol ("fpga_region<k>": a plain identifier)
    samples = offload.region_inputs(symbol)
    typed, how = _types(region, offload.options, samples)
    errors = precision.error_report(typed, precision.choose(region, "float"), samples) if (
        samples is not None and how != "float") else {}
    options = emit.EmitOptions()
    files = emit.project_files(typed, options)
    files.update(_testbench(typed, samples))
    estimate = estimates.estimate(typed, options.clock_ns).to_json()
    obj = Path(offload.workdir.name) / f"{symbol}.o"
    source = obj.with_suffix(".cc")
    source.write_text(emit.csim_source(typed, options))
    # Only the TVM-FFI entry is exported, and no symbol is STB_GNU_UNIQUE: the kernels' static
    # buffers (templates' static locals) would otherwise be one object process-wide, shared by
    # every artifact loaded with the same namespace and config names, sized by the first one.
    flags = ["-std=c++17", "-fPIC", "-fvisibility=hidden", "-fvisibility-inlines-hidden", "-fno-gnu-unique", "-c",
             "-I", tvm_ffi.libinfo.find_include_path(), "-I", tvm_ffi.libinfo.find_dlpack_include_path()]
    toolchain.compile_cpp([source], obj, flags)
    offload.regions.append(FpgaRegion(symbol, node_ids(func), region=typed, files=files, estimate=estimate,
                                      errors=errors, precision=how))
    return tvm.runtime.load_static_library(str(obj), [emit.top_name(typed)])


def check_precision(spec: str | None) -> None:
    """A one-line error for a --precision that is none of float, fixed, a type or a JSON file."""
    if spec in (None, "float", "fixed"):
        return
    if spec.endswith(".json"):
        if not Path(spec).is_file():
            raise UsageError(f"--precision {spec}: no such file")
        return
    try:
        NumType.parse(spec)
    except ValueError:
        raise UsageError(f"invalid --precision {spec!r}: use float, fixed, a type like ap_fixed<16,6>, or a "
                         ".json file of per-layer types") from None


def _types(region: Region, options, samples) -> tuple[Region, str]:
    """The region with its number types, and a description of how they were chosen."""
    spec = options.precision or "float"
    if spec in ("float", "fixed"):
        return precision.choose(region, spec, samples), (
            spec if spec == "float" or samples is None else "fixed (calibrated)")
    if spec.endswith(".json"):
        return _from_json(region, spec), f"per-layer types from {Path(spec).name}"
    try:
        NumType.parse(spec)
    except ValueError:
        raise UsageError(f"invalid --precision {spec!r}: use float, fixed, a type like ap_fixed<16,6>, or a "
                         ".json file of per-layer types") from None
    return precision.choose(region, spec), spec


def _from_json(region: Region, path: str) -> Region:
    """``{"default": "ap_fixed<16,6>", "layers": {"<region>.<layer>[.weight|.bias|.accum]": type}}``
    (docs/fpga.md); keys for other regions are skipped."""
    try:
        data = json.loads(Path(path).read_text())
        default = str(data.get("default", "fixed"))
        layers = {str(k): str(v) for k, v in dict(data.get("layers", {})).items()}
    except FileNotFoundError:
        raise UsageError(f"--precision {path}: no such file") from None
    except (OSError, ValueError, TypeError, AttributeError) as err:
        raise UsageError(f"--precision {path}: not a JSON object of types ({err})") from None
    mine = {k.partition(".")[2]: v for k, v in layers.items() if k.partition(".")[0] == region.name}
    return precision.choose(region, default, overrides=mine)


def _testbench(region: Region, samples) -> dict[str, str]:
    """Testbench data: the calibration samples (up to 4) or seeded normal inputs, and the
    outputs the bit-exact emulation computes for them (tolerance 0 for fixed point; for float,
    whose sums the C++ orders differently, 1e-4 relative plus 1e-5 x max |expected| absolute, so
    values that cancel to near zero are not held to a relative bound)."""
    from . import emulate

    if samples is None:
        rng = np.random.default_rng(0)
        samples = [rng.standard_normal((2, *shape)).astype(np.float32) for _, shape in region.inputs]
    samples = [np.asarray(s)[:4] for s in samples]
    fixed = not all(layer.result.is_float for layer in region.layers)
    values = emulate.run(region, samples, fixed=fixed)
    expected = [values[name].astype(np.float32) for name in region.outputs]
    if fixed:
        return emit.testbench_data(region, samples, expected, atol=0.0, rtol=0.0)
    scale = max((float(np.max(np.abs(e))) for e in expected if e.size), default=0.0)
    return emit.testbench_data(region, samples, expected, atol=1e-5 * scale, rtol=1e-4)
