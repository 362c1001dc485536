"""PyTorch frontend: ``torch.export`` -> Relax through TVM's own translator, and the
``torch.compile`` backend.

    load_program(source, example_inputs, dynamic_shapes)  ->  LoadedProgram   (loader.py)
    to_relax(loaded)                                      ->  tvm.IRModule    (importer.py)

A source is an ``nn.Module`` (exported here with ``example_inputs``), a
``torch.export.ExportedProgram``, or a saved ``.pt2`` file. TVM's
``from_exported_program`` converts the graph; hetc's converters (``registry.py``) fill what
its table lacks. From the Relax module on, the pipeline is the ONNX path's: passes,
placement, backends, artifact.

``dynamo.py`` is the ``torch.compile(backend="hetc")`` backend. torch is an optional extra
(``hetc[torch]``): nothing here is imported by ``import hetc``; ``is_torch_source`` tells,
without importing torch, whether a model is for this frontend.
"""

from __future__ import annotations

import os
import sys

__all__ = ["is_torch_source", "load_program", "to_relax"]

PT2_SUFFIX = ".pt2"  # torch.export.save's archive


def is_torch_source(model: object) -> bool:
    """Whether ``model`` is for this frontend: a ``.pt2`` path, or a torch object (which can
    only exist if torch is already imported, so this never imports it)."""
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model).endswith(PT2_SUFFIX)
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    return isinstance(model, (torch.nn.Module, torch.export.ExportedProgram))


def load_program(*args, **kwargs):
    """``loader.load_program`` (imports torch on first use)."""
    from .loader import load_program as _load

    return _load(*args, **kwargs)


def to_relax(loaded):
    """``importer.to_relax`` (imports TVM's torch translator on first use)."""
    from .importer import to_relax as _to_relax

    return _to_relax(loaded)
