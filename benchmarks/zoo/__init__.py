"""The model zoo's registry (``ZOO``) and the builders' shared helpers.

One module per source registers its architectures: ``transformers_zoo``, ``torchvision_zoo``,
``timm_zoo``, ``torchaudio_zoo``, ``optimum_zoo``. They import their library only inside the
builders, so listing the zoo needs none of them. A builder returns ``(torch module, {input
name: example tensor})``; the module's outputs (a tensor or a tuple) are the model's. An
entry with ``export`` set instead writes its ONNX file itself (optimum's exporter).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

SOURCES = ("transformers", "torchvision", "timm", "torchaudio", "optimum")
TORCH_EXPORTERS = ("torchscript", "dynamo")


@dataclass(frozen=True)
class Arch:
    name: str
    source: str  # one of SOURCES
    build: Callable[[], tuple] | None  # -> (torch module, {input name: tensor})
    # input name -> {axis: dim name} for the TorchScript exporter's dynamic_axes; None: the batch
    # (axis 0) of every input; {}: every dim static (one batch size is checked)
    dynamic: dict[str, dict[int, str]] | None = None
    exporters: tuple[str, ...] = TORCH_EXPORTERS
    # (path, exporter) -> {"opset", "inputs": {name: array}, "inputs_b2": {...} or None}
    export: Callable | None = None


ZOO: dict[str, Arch] = {}


def arch(name: str, source: str, dynamic: dict[str, dict[int, str]] | None = None,
         exporters: tuple[str, ...] = TORCH_EXPORTERS):
    """Register an architecture builder under ``name``."""
    assert source in SOURCES, source
    assert name not in ZOO, f"duplicate zoo entry {name}"

    def register(fn):
        ZOO[name] = Arch(name, source, fn, dynamic, exporters)
        return fn
    return register


def register(entry: Arch) -> None:
    assert entry.source in SOURCES and entry.name not in ZOO, entry.name
    ZOO[entry.name] = entry


def load_all() -> dict[str, Arch]:
    from . import optimum_zoo, timm_zoo, torchaudio_zoo, torchvision_zoo, transformers_zoo  # noqa: F401
    return ZOO


def wrap(model, names: list[str], keys: tuple[str, ...] = (), **fixed):
    """A module taking ``names`` positionally, calling ``model`` by keyword (transformers 5
    takes inputs by keyword), returning the output fields ``keys`` (default: the first)."""
    import torch

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args):
            out = self.model(**dict(zip(names, args)), **fixed)
            if not keys:
                return out[0]
            return tuple(getattr(out, k) if hasattr(out, k) else out[k] for k in keys)

    return Wrapper().eval()


def bn_stats(model) -> None:
    """Non-trivial BatchNorm statistics, as a trained model has (constructors leave 0 and 1)."""
    import torch

    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
