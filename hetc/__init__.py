"""hetc: a heterogeneous deep-learning compiler (ONNX -> TVM Relax -> CPU/GPU/NPU/FPGA)."""

__version__ = "0.1.0"

import sys

from .errors import HetcError

__all__ = ["CompiledModel", "HetcError", "__version__", "compile", "generate", "load", "plan", "session", "tune"]


def __getattr__(name: str):
    # The API imports TVM (slow); load it on first use so `hetc --version` stays fast.
    if name in {"compile", "load", "plan", "CompiledModel"}:
        from . import api

        return getattr(api, name)
    if name in {"generate", "session"}:  # decoding with a KV cache (hetc/generate.py, hetc/session.py)
        import importlib

        return importlib.import_module(f".{name}", __name__)  # the module, callable as its function
    if name == "tune":
        from .tuning import tune

        return tune
    raise AttributeError(f"module 'hetc' has no attribute {name!r}")


def _register_dynamo_backend() -> None:
    """``torch.compile(backend="hetc")``: torch finds the backend through the entry point in
    pyproject.toml without this; where ``torch._dynamo`` is loaded already (a checkout run without
    installing), register it now. Never imports torch: ``import hetc`` stays fast without it."""
    if "torch._dynamo" in sys.modules:
        from .frontends.torch.dynamo import register

        register()


_register_dynamo_backend()
