"""ONNX frontend: ``load_model`` validates, ``to_relax`` converts (see registry.py to extend)."""

from .loader import LoadedModel, TensorSpec, load_model, op_histogram
from .registry import converter

__all__ = ["LoadedModel", "TensorSpec", "converter", "load_model", "op_histogram", "to_relax"]


def to_relax(model: LoadedModel, value_shapes: dict | None = None):
    """Convert a loaded model to a Relax IRModule (imports TVM on first use); see
    ``importer.to_relax`` for ``value_shapes``."""
    from .importer import to_relax as _to_relax

    return _to_relax(model, value_shapes)
