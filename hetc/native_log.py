"""Filtering what TVM's C++ side writes straight to file descriptor 2.

TVM 0.27 logs ``Warning: Scope Saving:``/``Scope Loaded:`` on every VM executable export and
load, ``Fast mode segfaults when there are out-of-bounds indices`` for every legalized
``take`` with non-constant indices, and ``BlockBuilder destroyed with remaining blocks`` after
a failed conversion, bypassing Python. ``filtered_stderr()`` captures fd 2 around such calls and replays
everything except those known-harmless lines, so hetc's own output stays one line per error.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator

log = logging.getLogger(__name__)

_NOISE = re.compile(rb"executable\.cc:\d+: Warning: Scope (Saving|Loaded):"
                    rb"|Warning: Fast mode segfaults when there are out-of-bounds indices"
                    # Printed when an IR builder is freed after a failed conversion or pass,
                    # possibly later than the error that hetc already reported.
                    rb"|Warning: BlockBuilder destroyed with remaining blocks")


_lock = threading.Lock()
_active = {"depth": 0, "saved": -1, "capture": None, "fd": 2}  # the one capture in force


@contextlib.contextmanager
def filtered_stderr() -> Iterator[None]:
    """Capture fd 2; on success replay it minus known noise, on error log it at debug level
    (the raised error already says what went wrong, in one line).

    fd 2 belongs to the process, so overlapping uses (nested, or from several threads: the
    tuning export builds beside nvcc) share one capture: the first to enter redirects, the
    last to leave restores and replays (logged at debug level if that one failed).
    """
    with _lock:
        if _active["depth"] == 0:
            try:
                fd = sys.stderr.fileno()
            except (AttributeError, OSError, ValueError):  # stderr replaced (pytest capture, notebooks)
                fd = 2
            sys.stderr.flush()
            capture = tempfile.TemporaryFile()
            _active.update(fd=fd, saved=os.dup(fd), capture=capture)
            os.dup2(capture.fileno(), fd)
        _active["depth"] += 1
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        with _lock:
            _active["depth"] -= 1
            if _active["depth"] == 0:
                fd, saved, capture = _active["fd"], _active["saved"], _active["capture"]
                sys.stderr.flush()
                os.dup2(saved, fd)
                os.close(saved)
                capture.seek(0)
                kept = [ln for ln in capture.read().splitlines(keepends=True) if not _NOISE.search(ln)]
                capture.close()
                if kept and failed:
                    log.debug("native log before the error:\n%s", b"".join(kept).decode(errors="replace"))
                elif kept:
                    os.write(fd, b"".join(kept))


def release_frames(err: BaseException) -> None:
    """Free the TVM objects a failed call's frames still hold, now, while fd 2 is filtered
    (their C++ destructors warn), instead of whenever the traceback is collected."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:  # the error and the ones it was raised from
        seen.add(id(err))
        traceback.clear_frames(err.__traceback__)
        err = err.__cause__ or err.__context__
    gc.collect()
