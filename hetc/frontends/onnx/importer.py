"""ONNX -> Relax conversion: hetc's converters first, TVM's ``from_onnx`` table otherwise.

``HetcGraphImporter`` subclasses TVM's importer and overrides only operator dispatch, so
TVM's graph walking, initializer handling and ``If`` support are reused unchanged.
"""

from __future__ import annotations

import contextlib
import io
import warnings

import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as tvm_onnx

from ...errors import ConversionError, HetcError
from . import ops  # noqa: F401  (registers hetc's converters)
from . import registry
from .loader import LoadedModel, _first_line

# Ops TVM's importer handles itself rather than through its converter table.
_BUILTIN_OPS = {"Constant", "If"}


def _tvm_table() -> dict:
    return tvm_onnx._get_convert_map()  # TVM has no public accessor for its table


def converter_source(op_type: str, opset: int) -> str | None:
    """Who converts ``op_type`` at ``opset``: 'hetc', 'tvm', or None if nobody does."""
    if registry.lookup(op_type, opset) is not None:
        return "hetc"
    if op_type in _tvm_table() or op_type in _BUILTIN_OPS:
        return "tvm"
    return None


def supported_ops(opset: int) -> dict[str, str]:
    """Every convertible op type at ``opset`` -> its converter's source."""
    names = set(_tvm_table()) | set(registry.registered()) | _BUILTIN_OPS
    table = {name: converter_source(name, opset) for name in sorted(names)}
    return {k: v for k, v in table.items() if v is not None}


class HetcGraphImporter(tvm_onnx.ONNXGraphImporter):
    """TVM's importer with hetc's converter registry in front of TVM's table."""

    def _check_for_unsupported_ops(self, graph):  # done by the loader, over all graphs
        return None

    def _convert_operator(self, op_name, inputs, attrs, opset):
        custom = attrs.pop("tvm_custom", {})
        node = custom.get("name") or "<unnamed>"
        entry = registry.lookup(op_name, opset)
        try:
            if entry is None:
                attrs["tvm_custom"] = custom
                return super()._convert_operator(op_name, inputs, attrs, opset)
            ctx = registry.ConvertContext(self.bb, node, op_name, opset, custom.get("num_outputs", 1))
            tracked = registry.Attrs(node, op_name, attrs)
            result = entry.fn(ctx, list(inputs), tracked)
            if tracked.unread():
                raise ctx.error(f"attribute(s) {', '.join(tracked.unread())} not handled by hetc's "
                                "converter")
            return self.bb.normalize(result) if isinstance(result, relax.Expr) else result
        except HetcError:
            raise
        except Exception as err:
            raise ConversionError(f"node '{node}' ({op_name}): {_first_line(err)}") from err


def to_relax(model: LoadedModel) -> tvm.IRModule:
    """Convert a loaded, shape-bound model to a Relax IRModule with weights as constants."""
    shapes = {spec.name: list(spec.shape) for spec in model.inputs}
    dtypes = {spec.name: spec.dtype for spec in model.inputs}
    importer = HetcGraphImporter(shapes, dtypes, keep_params_in_input=False, sanitize=True)
    # TVM prints the failing node to stdout before re-raising and warns on every renamed
    # input; hetc reports both itself.
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            return importer.from_onnx(model.proto.graph, model.opset)
        except HetcError:
            raise
        except Exception as err:
            raise ConversionError(f"{model.name}: conversion to Relax failed: {_first_line(err)}") from err
