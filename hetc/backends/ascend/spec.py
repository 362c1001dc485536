"""What the Ascend codegen knows of one region: the contract between the ONNX writer
(``onnx_writer.py``), the host program and build files (``host.py``) and the runtime."""

from __future__ import annotations

from dataclasses import dataclass

# The CANN version whose ONNX parser / ATC op list ``support.py`` records, and the ONNX opset
# every region subgraph is written in (inside that parser's supported range).
CANN_VERSION = "8.0.0"
OPSET = 13


@dataclass(frozen=True)
class TensorIO:
    """A region input or output: its name in the region's ONNX graph, numpy dtype name and shape."""

    name: str
    dtype: str  # "float32", "float16", "int64", "int32", "bool"
    shape: tuple[int, ...]


@dataclass(frozen=True)
class RegionSpec:
    """One region's interface. ``symbol`` is the function the artifact's VM calls (a C identifier,
    ``ascend_region<k>_<content hash>``): in emulation it is registered by hetc's runtime, on a
    machine with CANN it is exported by the region's host library (``host.py``). The VM calls it
    in destination-passing style: the inputs in order, then the preallocated outputs."""

    symbol: str
    name: str  # "ascend_region<k>": the folder ascend/<name>/ in the artifact
    inputs: tuple[TensorIO, ...]
    outputs: tuple[TensorIO, ...]
    soc_version: str  # CANN --soc_version, e.g. "Ascend910B1" (from the device spec)
    onnx_file: str = "model.onnx"  # the region's subgraph, relative to its folder
