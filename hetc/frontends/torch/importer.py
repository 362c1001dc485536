"""ExportedProgram -> Relax: TVM's translator, with hetc's converters and dim names in front.

``HetcProgramImporter`` subclasses TVM's ``ExportedProgramImporter`` and changes three things:
its op table (hetc's registry, ``registry.py``, overrides and extends TVM's), the names of
symbolic dims (torch's ``s77`` becomes the loader's ``batch``), and its errors (every
unsupported op at once, as ``UnsupportedOpError``; a failing converter as a one-line
``ConversionError`` naming the node). Graph walking, parameters bound as constants and the
function signature stay TVM's.
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings

import sympy
import torch
import tvm
from tvm import relax
from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

from ...errors import ConversionError, HetcError, UnsupportedOpError, first_line
from ...native_log import release_frames
from ..onnx import symbolic
from ..onnx.importer import check_outputs, narrow_dims
from . import registry
from .loader import LoadedProgram


class HetcProgramImporter(ExportedProgramImporter):
    """TVM's importer with hetc's converter registry and dim names (``symbols``: torch's
    symbol name -> hetc's dim name)."""

    def __init__(self, symbols: dict[str, str] | None = None) -> None:
        self._names = dict(symbols or {})
        self.node_now = None  # the node being converted, for error messages
        super().__init__()

    def create_convert_map(self) -> dict:
        table = super().create_convert_map()
        for op, fn in registry.registered().items():
            table[op.__name__] = functools.partial(fn, self)
        return {name: self._tracked(fn) for name, fn in table.items()}

    def _tracked(self, fn):
        def convert(node, *rest):
            self.node_now = node
            return self._with_proven_shape(node, fn(node, *rest))

        return convert

    def _process_derived_symbol(self, symbol, table):
        # TVM names a dim's TIR variable str(symbol): rename torch's symbols inside the expression
        renames = {s: sympy.Symbol(self._names[str(s)]) for s in getattr(symbol, "free_symbols", ())
                   if str(s) in self._names}
        self._dims = table  # dim name -> its TIR variable, as TVM fills it
        return super()._process_derived_symbol(symbol.xreplace(renames) if renames else symbol, table)

    def _with_proven_shape(self, node, value):
        """``value`` with the shape torch.export proved for ``node`` where TVM's inference lost it:
        a slice ``[:, :seq]`` of a 64-long buffer is ``min(seq, 64)`` long to TVM, which then
        cannot tell that it broadcasts against ``seq`` (an add of unknown shape, which no later
        pass can legalize), while torch.export knows ``seq <= 64``. The proof becomes a reshape
        to that shape (a view; a ``match_cast`` would do, but TVM 0.27's CanonicalizeBindings
        crashes on one inside a dataflow block)."""
        ty = getattr(value, "ty", None)
        fake = node.meta.get("val")
        if not isinstance(ty, relax.TensorType) or not hasattr(fake, "shape") or ty.ndim != len(fake.shape):
            return value
        shape = ty.shape.values if isinstance(ty.shape, relax.ShapeExpr) else None
        if shape is not None and all(isinstance(d, (tvm.tirx.IntImm, tvm.tirx.Var)) for d in shape):
            return value
        proven = [self._proven_dim(d) for d in fake.shape]
        if any(d is None for d in proven):
            return value
        return self.block_builder.emit(relax.op.reshape(value, relax.ShapeExpr(proven)))

    def _proven_dim(self, size):
        """A torch size as a TIR dim: an int, or the variable of a plain symbol (else None)."""
        if not isinstance(size, torch.SymInt):
            return int(size)
        expr = size.node.expr
        if expr.is_number:
            return int(expr)
        name = self._names.get(str(expr), str(expr))
        return getattr(self, "_dims", {}).get(name) if expr.is_Symbol else None

    def _check_unsupported_func_type(self, nodes) -> None:
        missing = unsupported_ops(nodes, self.convert_map)
        if missing:
            raise UnsupportedOpError(f"unsupported op(s): {', '.join(missing)} (see docs/torch.md to add a converter)",
                                     missing)


def unsupported_ops(nodes, table: dict) -> list[str]:
    """The call_function targets of ``nodes`` that ``table`` (name -> converter) lacks, sorted."""
    return sorted({str(n.target) for n in nodes
                   if n.op == "call_function" and getattr(n.target, "__name__", str(n.target)) not in table})


@functools.cache
def convert_table() -> dict:
    """op name -> converter: TVM's table with hetc's registry in front."""
    return HetcProgramImporter().convert_map


def check_supported(program, label: str) -> None:
    """An ``UnsupportedOpError`` listing every op of ``program`` no converter handles."""
    missing = unsupported_ops(program.graph.nodes, convert_table())
    if missing:
        raise UnsupportedOpError(f"{label}: unsupported op(s): {', '.join(missing)} (see docs/torch.md to add a "
                                 "converter)", missing)


def _declare_ranges(mod: tvm.IRModule, loaded: LoadedProgram) -> tvm.IRModule:
    """Each symbolic dim of ``main``'s inputs known to lie in its range, to hetc's simplifier (as
    the ONNX importer does). TVM's translator also writes the ranges as ``tir_var_*_bound``
    attributes; they go, as in a module from ONNX: with an upper bound, TVM's memory planning
    allocates every buffer at its largest size once (a 65536-image batch for a CNN)."""
    seen = {}
    for param in mod["main"].params:
        shape = getattr(param.ty, "shape", None)
        for dim in (shape.values if isinstance(shape, relax.ShapeExpr) else []):
            if isinstance(dim, tvm.tirx.Var) and dim.name in loaded.dims:
                seen[dim.name] = dim
    for name, var in seen.items():
        symbolic.declare(var, *loaded.dims[name])
    attrs = mod["main"].attrs
    if attrs is not None and any(k in attrs for k in _BOUNDS):
        mod["main"] = mod["main"].without_attr(_BOUNDS[0]).without_attr(_BOUNDS[1])
    return mod


_BOUNDS = ("tir_var_lower_bound", "tir_var_upper_bound")


def to_relax(loaded: LoadedProgram) -> tvm.IRModule:
    """Convert a loaded program to a Relax IRModule with weights as constants; each symbolic
    input dim is one int64 TIR variable of its hetc name, known to lie in its range."""
    importer = HetcProgramImporter(loaded.symbols)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            mod = importer.from_exported_program(loaded.program, False, False, False, None)
        except HetcError:
            raise
        except Exception as err:
            node = importer.node_now
            where = f"node '{node.name}' ({node.target})" if node is not None else "the graph"
            release_frames(err)
            raise ConversionError(f"{loaded.name}: {where}: {first_line(err)}") from err
    mod = _declare_ranges(mod, loaded)
    check_outputs(mod, loaded)
    narrow_dims(mod, loaded)
    return mod
