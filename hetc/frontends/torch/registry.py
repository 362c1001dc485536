"""hetc's converters for ATen ops that TVM's ``from_exported_program`` lacks or gets wrong.

The registry is keyed by the op overload object itself (``torch.ops.aten.erfinv.default``),
never by a string, so a typo fails at import instead of silently registering nothing. An
entry here replaces TVM's converter of the same op.

To add a converter:

1. Put the function in the file of its op family under ``ops/`` (create ``ops/<family>.py``
   and import it in ``ops/__init__.py``: registration is explicit, no discovery).
2. Decorate it with ``@converter(torch.ops.aten.<op>.<overload>)``; one function per overload.
3. The function is ``fn(importer, node) -> relax.Expr``: ``importer`` is the running
   ``HetcProgramImporter`` (``importer.env[arg]`` is the Relax value of an input node,
   ``importer.block_builder.emit(...)`` binds a value), ``node`` the ``torch.fx.Node`` (its
   ``args``/``kwargs``, ``node.meta["val"]`` the FakeTensor of its result). Read every argument
   or raise ``ConversionError`` for values you do not handle; never ignore one silently.
4. Test it against eager torch (``tests/test_torch_frontend.py``).
"""

from __future__ import annotations

from collections.abc import Callable

Converter = Callable  # (importer, torch.fx.Node) -> relax.Expr

_CONVERTERS: dict[object, Converter] = {}


def converter(op) -> Callable[[Converter], Converter]:
    """Register the decorated function as the converter of ATen overload ``op``."""
    if not hasattr(op, "_schema"):
        raise TypeError(f"converter() takes an op overload (torch.ops.aten.<op>.<overload>), got {op!r}")

    def register(fn: Converter) -> Converter:
        if op in _CONVERTERS:
            raise ValueError(f"{op} already has a converter ({_CONVERTERS[op].__qualname__})")
        _CONVERTERS[op] = fn
        return fn

    return register


def registered() -> dict[object, Converter]:
    """op overload -> converter, for every op hetc converts itself."""
    from . import ops  # noqa: F401  (registers the converters)

    return dict(_CONVERTERS)
