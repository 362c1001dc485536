"""Modules callable as their main function: ``hetc.generate(...)``, ``hetc.session(...)``.

Python binds a package's submodule to its name once it is imported, so ``hetc.generate`` is the
module ``hetc/generate.py`` after any ``import hetc.generate``; making that module callable keeps
``hetc.generate(model, ids, n)`` working either way. A module opts in with
``make_callable(__name__, function)`` at its end.
"""

from __future__ import annotations

import sys
import types


class _CallableModule(types.ModuleType):
    __hetc_call__ = None

    def __call__(self, *args, **kwargs):
        return type(self).__hetc_call__(*args, **kwargs)


def make_callable(name: str, function) -> None:
    """Calling module ``name`` calls ``function``."""
    kind = type(f"Callable_{name.rpartition('.')[2]}", (_CallableModule,), {"__hetc_call__": staticmethod(function)})
    sys.modules[name].__class__ = kind
