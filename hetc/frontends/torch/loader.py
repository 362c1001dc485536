"""Load a PyTorch program: export a module, or read an ``ExportedProgram`` / ``.pt2``; validate it.

Loading is strict and happens before any conversion, as for ONNX (``frontends/onnx/loader.py``):
the module must be in eval mode, ``torch.export`` must succeed (a dim marked dynamic that the
code specializes is a one-line ``ShapeError`` with torch's suggested fix), the program must not
mutate its inputs or buffers, every op must have a converter (all missing ones are listed at
once, ``importer.check_supported``), and every input and output must be a tensor.

Symbolic dims: each ``torch.export.Dim`` of the inputs becomes a hetc symbolic dim of the
Dim's name with the range torch.export proved for it (``range_constraints``); a dim with
no name of its own (a program exported elsewhere, ``Dim.AUTO``) is ``<input>_<axis>``, as
ONNX's unnamed dims are. An upper bound torch leaves open is ``DEFAULT_DIM_RANGE``'s.
"""

from __future__ import annotations

import math
import os
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...errors import ModelLoadError, ShapeError, UsageError, first_line
from ...options import MAX_DIM
from ..onnx.loader import DEFAULT_DIM_RANGE, TensorSpec


@dataclass
class LoadedProgram:
    """A validated, decomposed (core ATen) ``ExportedProgram`` with hetc's view of its signature:
    the same fields the compile pipeline reads from an ONNX ``LoadedModel``."""

    program: Any  # torch.export.ExportedProgram, decomposed to core ATen ops
    name: str  # file name or module class, for messages and the manifest
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    dims: dict[str, tuple[int, int]] = field(default_factory=dict)  # symbolic dim -> (low, high)
    symbols: dict[str, str] = field(default_factory=dict)  # torch's symbol ("s77") -> hetc dim name
    frontend: str = "torch"
    opset: int | None = None  # ONNX only

    @property
    def ops(self) -> Counter:
        """ATen op -> count (``aten.conv2d.default``: 53)."""
        return Counter(str(n.target) for n in self.program.graph.nodes if n.op == "call_function")

    def require_static(self, what: str) -> None:
        if self.dims:
            raise UsageError(f"{what} needs static input shapes; {self.name} has symbolic dims "
                             f"({', '.join(self.dims)}): export it without dynamic_shapes")


def dtype_name(dtype: torch.dtype) -> str:
    """numpy's name of a torch dtype (``torch.float32`` -> ``float32``, ``torch.bool`` -> ``bool``)."""
    return str(dtype).removeprefix("torch.")


def _as_args(example_inputs) -> tuple:
    if example_inputs is None:
        raise UsageError("compiling a torch module needs example_inputs (a tuple of tensors, in forward's "
                         "argument order): hetc.compile(module, (x,), ...)")
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (list, tuple)):
        return tuple(example_inputs)
    raise UsageError(f"example_inputs must be a tensor or a tuple of tensors, got {type(example_inputs).__name__}")


def _named_dims(dynamic_shapes, ranges: Mapping[str, Sequence[int]]):
    """``dynamic_shapes`` with hetc-style names (``{0: "batch"}``) turned into ``torch.export.Dim``s
    (one per name, range from ``ranges``, else ``DEFAULT_DIM_RANGE``); Dims pass through."""
    made: dict[str, Any] = {}

    def convert(value):
        if isinstance(value, str):
            if value not in made:
                low, high = ranges.get(value, DEFAULT_DIM_RANGE)
                made[value] = torch.export.Dim(value, min=int(low), max=int(high))
            return made[value]
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(convert(v) for v in value)
        return value

    return convert(dynamic_shapes)


def _export(module: torch.nn.Module, args: tuple, dynamic_shapes, name: str):
    if module.training:
        raise UsageError(f"{name} is in training mode; hetc compiles inference graphs: call module.eval() first")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.export.export(module, args, dynamic_shapes=dynamic_shapes, strict=False)
    except torch._dynamo.exc.UserError as err:  # constraint violations, bad dynamic_shapes specs
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        detail = next((line.lstrip("- ") for line in lines[1:] if line.startswith("-")), lines[0] if lines else "")
        fix = next((lines[i + 1] for i, line in enumerate(lines[:-1]) if line.startswith("Suggested fixes")), "")
        raise ShapeError(f"{name}: torch.export rejected dynamic_shapes: {detail}"
                         + (f" (suggested: {fix})" if fix else "")) from err
    except Exception as err:  # torch raises many types; the first line says what failed
        raise ModelLoadError(f"{name}: torch.export failed: {first_line(err)}") from err


def _read_pt2(path: Path):
    if not path.is_file():
        raise ModelLoadError(f"{path}: no such file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.export.load(str(path))
    except Exception as err:  # zipfile, pickle and torch errors alike
        raise ModelLoadError(f"{path}: not a valid .pt2 archive written by torch.export.save "
                             f"({first_line(err)})") from err


def _check_pure(program, name: str) -> None:
    signature = program.graph_signature
    mutated = [*signature.user_inputs_to_mutate.values(), *signature.buffers_to_mutate.values()]
    if mutated:
        raise ModelLoadError(f"{name}: the program writes to {', '.join(sorted(mutated))} in place; hetc compiles "
                             "pure inference graphs (no buffer or input mutation: call module.eval(), "
                             "return new tensors instead)")


def user_placeholders(program) -> list:
    """The program's placeholders of the user's inputs, in signature order."""
    from torch.export.graph_signature import InputKind

    names = [spec.arg.name for spec in program.graph_signature.input_specs if spec.kind == InputKind.USER_INPUT]
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    return [nodes[n] for n in names]


def _dim_names(program) -> dict[str, str]:
    """torch's symbol -> the name of the ``Dim`` it was exported with, as torch.export's shape
    environment remembers it (``{"L['x'].size()[0]": "batch"}``)."""
    names: dict[str, str] = {}
    for node in user_placeholders(program):
        for size in getattr(node.meta.get("val"), "shape", ()):
            if not isinstance(size, torch.SymInt) or not size.node.expr.is_Symbol:
                continue
            env = size.node.shape_env
            debug = getattr(env, "source_name_to_debug_name", {})
            for source in getattr(env, "var_to_sources", {}).get(size.node.expr, []):
                name = debug.get(source.name if isinstance(source.name, str) else source.name())
                if isinstance(name, str) and name.isidentifier():
                    names.setdefault(str(size.node.expr), name)
    return names


def _symbol_names(placeholders: list, dynamic_shapes, user_args: int,
                  known: dict[str, str] | None = None) -> dict[str, str]:
    """torch's symbol -> hetc name: a Dim's own name where ``dynamic_shapes`` gave one or the
    program remembers one (``known``), else ``<input>_<axis>`` of its first use."""
    names: dict[str, str] = dict(known or {})
    specs: list = []
    if isinstance(dynamic_shapes, dict):
        specs = [dynamic_shapes.get(n.name) for n in placeholders]
    elif isinstance(dynamic_shapes, (list, tuple)) and len(dynamic_shapes) == user_args:
        specs = list(dynamic_shapes)
    for node, spec in zip(placeholders, specs):
        if not isinstance(spec, dict):
            continue
        shape = node.meta["val"].shape
        for axis, dim in spec.items():
            dim_name = getattr(dim, "__name__", None)
            if isinstance(axis, int) and 0 <= axis < len(shape) and isinstance(shape[axis], torch.SymInt) \
                    and isinstance(dim_name, str) and dim_name.isidentifier():
                names.setdefault(str(shape[axis].node.expr), dim_name)
    for node in placeholders:
        for axis, size in enumerate(node.meta["val"].shape):
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                names.setdefault(str(size.node.expr), f"{node.name}_{axis}")
    return names


def _ranges(program, symbols: Mapping[str, str], declared: Mapping[str, Sequence[int]],
            name: str) -> dict[str, tuple[int, int]]:
    """Each dim's (low, high): torch.export's proven range, narrowed by ``declared``."""
    proven = {str(sym): vr for sym, vr in program.range_constraints.items()}
    ranges = {}
    for sym, dim in symbols.items():
        vr = proven.get(sym)
        low = int(vr.lower) if vr is not None else DEFAULT_DIM_RANGE[0]
        upper = float(vr.upper) if vr is not None else math.inf
        high = DEFAULT_DIM_RANGE[1] if math.isinf(upper) else min(int(upper), MAX_DIM)
        if dim in declared:
            want_low, want_high = (int(v) for v in declared[dim])
            if want_low < low or want_high > high:
                raise UsageError(f"{name}: --dim {dim}={want_low}:{want_high} is outside the range torch.export "
                                 f"proved for it ({low}..{high})")
            low, high = want_low, want_high
        ranges[dim] = (max(low, 0), high)
    unknown = sorted(set(declared) - set(ranges))
    if unknown:
        raise UsageError(f"--dim names unknown dim(s) {', '.join(unknown)}; {name} has "
                         f"{', '.join(ranges) or 'no symbolic dims'}")
    return ranges


def _spec(name: str, value, symbols: Mapping[str, str], what: str, label: str) -> TensorSpec:
    if not isinstance(value, torch.Tensor):
        raise ModelLoadError(f"{label}: {what} is a {type(value).__name__}, not a tensor; hetc compiles "
                             "programs whose inputs and outputs are tensors")
    shape = tuple(symbols.get(str(d.node.expr)) if isinstance(d, torch.SymInt) and not d.node.expr.is_number
                  else int(d) for d in value.shape)
    return TensorSpec(name, shape, dtype_name(value.dtype))


def load_program(source, example_inputs=None, dynamic_shapes=None,
                 dims: Mapping[str, Sequence[int]] | None = None) -> LoadedProgram:
    """Export ``source`` (an eval-mode ``nn.Module`` with ``example_inputs`` and optional
    ``dynamic_shapes``, in torch.export's format or with dim names as strings:
    ``({0: "batch"},)``), or read it (an ``ExportedProgram``, a ``.pt2`` path); validate it
    and decompose it to core ATen ops. ``dims`` ({name: (low, high)}) names the ranges of
    string-named dims, or narrows those torch.export proved."""
    dims = dict(dims or {})
    if isinstance(source, (str, os.PathLike)):
        label = Path(source).name
        if example_inputs is not None or dynamic_shapes is not None:
            raise UsageError(f"{label} is an exported program: its inputs and dynamic dims were fixed by "
                             "torch.export; example_inputs and dynamic_shapes are for modules")
        program = _read_pt2(Path(source))
    elif isinstance(source, torch.export.ExportedProgram):
        label = "exported_program"
        if example_inputs is not None or dynamic_shapes is not None:
            raise UsageError("an ExportedProgram's inputs and dynamic dims were fixed by torch.export; "
                             "example_inputs and dynamic_shapes are for modules")
        program = source
    elif isinstance(source, torch.nn.Module):
        label = type(source).__name__
        dynamic_shapes = _named_dims(dynamic_shapes, dims)
        program = _export(source, _as_args(example_inputs), dynamic_shapes, label)
    else:
        raise UsageError(f"cannot compile a {type(source).__name__}: give an ONNX model, an nn.Module with "
                         "example_inputs, a torch.export.ExportedProgram or a .pt2 file")
    known = _dim_names(program)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = program.run_decompositions()
    except Exception as err:
        raise ModelLoadError(f"{label}: torch could not decompose the program to core ATen ops: "
                             f"{first_line(err)}") from err
    _check_pure(program, label)  # functionalized by the decomposition: mutations are in its signature now
    from .importer import check_supported

    check_supported(program, label)
    placeholders = user_placeholders(program)
    known.update(_dim_names(program))
    symbols = _symbol_names(placeholders, dynamic_shapes, len(placeholders), known)
    ranges = _ranges(program, symbols, dims, label)
    inputs = [_spec(n.name, n.meta.get("val"), symbols, f"input '{n.name}'", label) for n in placeholders]
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    from torch.export.graph_signature import OutputKind

    values = [arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg
              for arg, spec in zip(output_node.args[0], program.graph_signature.output_specs)
              if spec.kind == OutputKind.USER_OUTPUT]
    outputs = [_spec(f"output_{i}", v, symbols, f"output {i}", label) for i, v in enumerate(values)]
    return LoadedProgram(program, label, inputs, outputs, ranges, symbols)
