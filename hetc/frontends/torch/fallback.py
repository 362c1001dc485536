"""How the ``torch.compile`` backend says that something runs in eager torch instead of hetc."""

from __future__ import annotations

import warnings


class HetcFallbackWarning(UserWarning):
    """A graph (or a call) ran eagerly in torch instead of through hetc; the message says why."""


def warn_fallback(message: str, stacklevel: int = 3) -> None:
    """One ``HetcFallbackWarning`` of one line (Python shows each distinct message once)."""
    warnings.warn(message.splitlines()[0] if message else "hetc: eager fallback", HetcFallbackWarning,
                  stacklevel=stacklevel)
