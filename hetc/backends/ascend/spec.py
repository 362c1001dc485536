"""What the Ascend codegen knows of one region: the contract between the ONNX writer
(``onnx_writer.py``), the host program and build files (``host.py``) and the runtime."""

from __future__ import annotations

import re
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
    shape: tuple[int | str, ...]  # a str: a symbolic dim (its expression, e.g. "batch * seq")


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
    # Symbolic dims (tensors' shapes hold their expressions as text): the region is built for
    # ``gears``, each the sizes of ``dims`` in order. ``dynamic`` says how ATC gets them: "batch"
    # (one dim, the leading axis of the inputs: --dynamic_batch_size, aclmdlSetDynamicBatchSize)
    # or "dims" (--dynamic_dims with --input_format=ND, aclmdlSetInputDynamicDims); "" when static.
    dims: tuple[str, ...] = ()
    gears: tuple[tuple[int, ...], ...] = ()
    dynamic: str = ""

    def gear_values(self, gear: tuple[int, ...]) -> dict[str, int]:
        return dict(zip(self.dims, gear))

    def shape_at(self, t: TensorIO, gear: tuple[int, ...]) -> tuple[int, ...]:
        """``t``'s shape with the symbolic dims at ``gear``'s sizes."""
        values = self.gear_values(gear)
        return tuple(d if isinstance(d, int) else evaluate(d, values) for d in t.shape)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EXPR = re.compile(r"[A-Za-z0-9_ +\-*/%()]*")


def dim_names(dim: int | str) -> set[str]:
    """The symbolic dims a dim expression uses."""
    return set() if isinstance(dim, int) else set(_NAME.findall(dim))


def evaluate(dim: int | str, values: dict[str, int]) -> int:
    """A dim expression (TVM's printing: ``batch * seq``, ``(seq + 1) // 2``) at ``values``."""
    if isinstance(dim, int):
        return dim
    if not _EXPR.fullmatch(dim) or not dim_names(dim) <= set(values):
        raise ValueError(f"cannot evaluate the dim {dim!r} at {values}")
    return int(eval(dim, {"__builtins__": {}}, dict(values)))  # noqa: S307 - checked: names, digits, arithmetic
