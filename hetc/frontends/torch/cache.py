"""The ``torch.compile`` backend's compile cache on disk: one artifact per graph and options.

A key is the SHA-256 of everything the artifact depends on: the graph's code, each
placeholder's dtype, shape (symbolic dims by expression) and role, the frozen module state's
bytes, the backend options, and the versions of hetc, TVM and torch. An entry is an artifact
directory (``CompiledModel.save``, written atomically), so a second process start loads it
instead of compiling. The cache lives in ``$HETC_CACHE_DIR/torch`` (default
``~/.cache/hetc/torch``); ``options={"cache": False}`` turns it off, ``{"cache": "DIR"}`` moves it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch

KEY_VERSION = 1  # bump when what a key covers changes


def cache_root(setting: bool | str | os.PathLike = True) -> Path | None:
    """The cache directory for the ``cache`` option, or None when caching is off."""
    if setting is False or setting is None:
        return None
    if setting is not True:
        return Path(setting)
    base = os.environ.get("HETC_CACHE_DIR") or Path.home() / ".cache" / "hetc"
    return Path(base) / "torch"


def _tensor_bytes(tensor: torch.Tensor):
    """The tensor's bytes as a buffer (any dtype, bfloat16 included), without a copy on the CPU."""
    return tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy()


def graph_key(gm: torch.fx.GraphModule, example_inputs: list, frozen: list[int], options: dict) -> str:
    """The cache key of ``gm`` compiled with ``options`` (see the module docstring)."""
    import tvm

    from ... import __version__

    digest = hashlib.sha256()

    def add(*parts) -> None:
        for part in parts:
            digest.update(part if isinstance(part, bytes) else str(part).encode())
            digest.update(b"\0")

    add(KEY_VERSION, __version__, tvm.__version__, torch.__version__, sorted(options.items()), gm.code)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, (node, value) in enumerate(zip(placeholders, example_inputs)):
        meta = node.meta.get("example_value", value)
        if isinstance(meta, torch.Tensor):
            add(i, meta.dtype, tuple(str(d) for d in meta.shape), tuple(str(s) for s in meta.stride()))
        else:
            add(i, type(meta).__name__, str(meta))
    for i in frozen:
        add(i, hashlib.sha256(_tensor_bytes(example_inputs[i])).hexdigest())
    return digest.hexdigest()[:32]
