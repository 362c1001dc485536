"""hetc: a heterogeneous deep-learning compiler (ONNX -> TVM Relax -> CPU/GPU/NPU/FPGA)."""

__version__ = "0.1.0"

from .errors import HetcError

__all__ = ["CompiledModel", "HetcError", "__version__", "compile", "generate", "load", "plan", "tune"]


def __getattr__(name: str):
    # The API imports TVM (slow); load it on first use so `hetc --version` stays fast.
    if name in {"compile", "load", "plan", "CompiledModel"}:
        from . import api

        return getattr(api, name)
    if name == "generate":  # greedy decoding with a KV cache (hetc/generate.py)
        import importlib

        return importlib.import_module(".generate", __name__)  # the module, callable as its generate()
    if name == "tune":
        from .tuning import tune

        return tune
    raise AttributeError(f"module 'hetc' has no attribute {name!r}")
