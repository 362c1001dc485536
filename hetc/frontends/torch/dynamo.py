"""``torch.compile(model, backend="hetc")``: hetc as a Dynamo backend.

    compiled = torch.compile(model, backend="hetc", dynamic=True)
    compiled = torch.compile(model, backend="hetc", options={"target": "cuda"})

Dynamo traces the model into FX graphs (graph breaks are Dynamo's: code it cannot trace runs
in Python between them) and calls ``hetc_backend`` once per graph. Each graph is frozen and
exported (``graph_program.py``), compiled by ``hetc.compile`` for the target, cached on disk
(``cache.py``) and called with torch tensors through DLPack (``tensors.py``). With
``dynamic=True`` Dynamo's symbolic sizes become the artifact's symbolic dims: one artifact
serves every size in range, and Dynamo does not recompile for a new batch size.

Inference only: a graph that needs gradients (grad mode on and a tensor that requires them)
runs eagerly, with one ``HetcFallbackWarning``; so does a graph hetc cannot compile (an op
without a converter, ...), the warning giving the reason in one line. The user's program
never fails because of the backend.

The backend is registered under "hetc" by the ``torch_dynamo_backends`` entry point in
pyproject.toml (torch finds it without ``import hetc``) and, when ``torch._dynamo`` is
already loaded, by ``import hetc`` itself (``register``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

import torch

from ...errors import ArtifactError, HetcError, UsageError, last_line
from .fallback import warn_fallback

log = logging.getLogger(__name__)

BACKEND_NAME = "hetc"


@dataclass(frozen=True)
class BackendOptions:
    """``torch.compile(..., options={...})`` for the hetc backend; every key is optional."""

    target: str = "cpu"  # hetc target: "cpu" or "cuda" (the tensors' device must match)
    num_threads: int = 0  # CPU worker threads; 0 = all cores
    cpu: str | None = None  # LLVM CPU to build for (haswell, znver4, ...); None = this machine's
    winograd: str = "auto"  # 3x3 conv algorithm on the CPU (hetc/backends/cpu/winograd.py)
    database: str | None = None  # a tuning database written by `hetc tune`
    arch: tuple[str, ...] = ()  # GPU architectures (sm_90, ...); () = the target's default
    cache: bool | str = True  # compile cache on disk: True (default place), False, or a directory

    @classmethod
    def parse(cls, options: Mapping | None) -> BackendOptions:
        options = dict(options or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise UsageError(f"unknown hetc backend option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        if "arch" in options:
            options["arch"] = (options["arch"],) if isinstance(options["arch"], str) else tuple(options["arch"])
        if isinstance(options.get("cache"), os.PathLike):
            options["cache"] = os.fspath(options["cache"])
        return cls(**options)

    def compile_kwargs(self) -> dict:
        """The ``hetc.compile`` keywords these options give."""
        return {"target": self.target, "num_threads": self.num_threads, "cpu": self.cpu, "winograd": self.winograd,
                "database": self.database, "arch": self.arch}

    def key(self) -> dict:
        """What of these options the compiled code depends on (the cache key's part)."""
        return {k: v for k, v in asdict(self).items() if k != "cache"}


def _needs_grad(example_inputs) -> bool:
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)


def _ops(gm: torch.fx.GraphModule) -> int:
    return sum(n.op == "call_function" or n.op == "call_method" or n.op == "call_module" for n in gm.graph.nodes)


def hetc_backend(gm: torch.fx.GraphModule, example_inputs: list, options: Mapping | None = None):
    """The Dynamo backend: a callable that runs ``gm`` through hetc, or ``gm.forward`` itself
    (with a ``HetcFallbackWarning`` saying why) where hetc does not take the graph."""
    opts = BackendOptions.parse(options)
    if _needs_grad(example_inputs):
        warn_fallback("hetc compiles for inference; a graph that needs gradients runs eagerly (use torch.no_grad() "
                      "or torch.inference_mode())")
        return gm.forward
    try:
        return compile_graph(gm, example_inputs, opts)
    except Exception as err:  # the user's program must run: eager torch instead
        log.debug("hetc backend: graph runs eagerly", exc_info=True)
        reason = str(err) if isinstance(err, HetcError) else f"{type(err).__name__}: {last_line(err)}"
        warn_fallback(f"hetc: a graph of {_ops(gm)} ops runs eagerly: {reason}")
        return gm.forward


def compile_graph(gm: torch.fx.GraphModule, example_inputs: list, opts: BackendOptions):
    """``gm`` compiled by hetc (or loaded from the compile cache), as a ``tensors.CompiledGraph``;
    errors propagate."""
    from ...runtime.model import load
    from .cache import cache_root, graph_key
    from .graph_program import export_graph, layout_of
    from .tensors import CompiledGraph

    layout = layout_of(gm, example_inputs)
    root = cache_root(opts.cache)
    entry = root / graph_key(gm, example_inputs, layout.frozen, opts.key()) if root is not None else None
    if entry is not None and (entry / "manifest.json").is_file():
        try:
            model = load(entry)
            log.info("hetc backend: graph of %d ops loaded from the cache (%s)", _ops(gm), entry)
            return CompiledGraph(model, layout, gm, example_inputs)
        except ArtifactError as err:  # damaged, or built for another CPU: compile it again
            log.warning("hetc backend: cache entry %s unusable (%s); compiling again", entry, err)
    from ... import api

    # torch.export and its decompositions trace anew: outside Dynamo's tracing context, whose
    # shape environment and guards they would otherwise share with the frame being compiled
    with torch._guards.tracing(None), torch._guards.compile_context(None):
        program = export_graph(gm, example_inputs, layout)
        model = api.compile(program, **opts.compile_kwargs())
    log.info("hetc backend: graph of %d ops compiled for %s", _ops(gm), opts.target)
    if entry is not None:
        model = load(model.save(entry))
    return CompiledGraph(model, layout, gm, example_inputs)


def register() -> None:
    """Register the backend under "hetc" with Dynamo (a no-op where it already is)."""
    from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend

    # an entry point torch has found but not loaded yet: torch registers it itself (it is loading it
    # now, if this runs from `import hetc` inside that load)
    if BACKEND_NAME not in _COMPILER_FNS and _BACKENDS.get(BACKEND_NAME) is None:
        register_backend(compiler_fn=hetc_backend, name=BACKEND_NAME)
