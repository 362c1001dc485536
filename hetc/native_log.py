"""Filtering what TVM's C++ side writes straight to file descriptor 2.

TVM 0.27 logs ``Warning: Scope Saving:``/``Scope Loaded:`` on every VM executable export and
load, and ``Fast mode segfaults when there are out-of-bounds indices`` for every legalized
``take`` with non-constant indices, bypassing Python. ``filtered_stderr()`` captures fd 2 around such calls and replays
everything except those known-harmless lines, so hetc's own output stays one line per error.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

_NOISE = re.compile(rb"executable\.cc:\d+: Warning: Scope (Saving|Loaded):"
                    rb"|Warning: Fast mode segfaults when there are out-of-bounds indices")


@contextlib.contextmanager
def filtered_stderr() -> Iterator[None]:
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # stderr replaced (pytest capture, notebooks)
        fd = 2
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), fd)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            capture.seek(0)
            kept = [ln for ln in capture.read().splitlines(keepends=True) if not _NOISE.search(ln)]
            if kept:
                os.write(fd, b"".join(kept))
