"""No silent death: where compilation is when it dies, and a one-line report.

``hetc compile`` used to die of a SIGSEGV inside a TVM pass with exit code 139 and no word.
Now it prints ``hetc: error: internal crash (SIGSEGV) in stage canonicalize; please report``.

Design (``run_guarded``, used by the CLI for ``compile``): the command runs in a forked child
and the parent only waits for it. A Python signal handler cannot report a fault in native code
(Python handlers run between bytecodes, and the faulting thread never gets back there), and a
native handler may have no stack to run on (a recursion overflow, the failure that prompted
this) and cannot safely remove directories. The waiting parent has neither problem: it sees
the child's death in ``waitpid``, reads the stage the child was in from a shared memory page,
removes the temporary artifact directory the child may have left next to ``-o``, and writes
the line to its own fd 2, which nothing redirects (``native_log`` redirects fd 2 in the child
only). The child's stderr is kept in a file and replayed when the child exits, so what a dying
process prints itself (tvm-ffi's SIGSEGV handler, installed when ``tvm_ffi`` loads, prints
a native backtrace) never joins the one line; ``--debug`` keeps stderr live instead and adds
Python's faulthandler stacks. The fork happens before TVM is imported, so the child starts
clean; costs: one fork, and warnings printed at the end of a run rather than as they happen.

``set_stage(name)`` is the "current stage" record: one write into that page, cheap enough for
every converted node. The pass pipeline, the importer and the API call it; it works (and costs
nothing) without the guard too.

A chain of ops needs no bigger stack: TVM's native recursion grows with the size of one fused
kernel (FuseOps caps a group at about 256 ops: 1-2 MiB), not with the graph's depth; a
20,000-op chain compiles on a 2 MiB thread stack (docs/dev/tvm.md). Other recursions do grow:
Keypoint R-CNN overflowed the 8 MiB main thread in legalization, so the API compiles on a
thread with a 1 GiB stack (``hetc/stack.py``).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT}

_SIZE = 4096
_PATH_AT = 2048  # the page: stage name (NUL-terminated) at 0, the artifact's -o path at _PATH_AT
_PAGE = mmap.mmap(-1, _SIZE)  # anonymous and MAP_SHARED: a forked child's writes reach the parent


def _put(offset: int, text: str, limit: int) -> None:
    data = text.encode("utf-8", "replace")[: limit - 1]
    _PAGE[offset:offset + len(data) + 1] = data + b"\0"


def _get(offset: int, limit: int) -> str:
    raw = _PAGE[offset:offset + limit]
    return raw[: raw.find(b"\0")].decode("utf-8", "replace") if b"\0" in raw else ""


def set_stage(name: str) -> None:
    """Record what compilation is doing now (a pass stage, ``convert Add 'n7'``, ``codegen``)."""
    _put(0, name, _PATH_AT)


def current_stage() -> str:
    return _get(0, _PATH_AT) or "startup"


def note_output(path: str | os.PathLike) -> None:
    """The artifact directory being written (``-o``), whose temporary sibling a crash may leave."""
    _put(_PATH_AT, os.fspath(path), _SIZE - _PATH_AT)


def _remove_partial_output(since: float) -> None:
    """Remove the temporary directories ``runtime.artifact.write_atomic`` made next to the
    recorded output path since ``since`` (a crash leaves them; the rename never happened)."""
    out = _get(_PATH_AT, _SIZE - _PATH_AT)
    if not out:
        return
    out = Path(out)
    for tmp in out.parent.glob(f".{out.name}.tmp-*"):
        try:
            if tmp.is_dir() and tmp.stat().st_mtime >= since - 1:
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def crash_line(sig: int, stage: str) -> str:
    if sig in CRASH_SIGNALS:
        return f"hetc: error: internal crash ({_signal_name(sig)}) in stage {stage}; please report"
    hint = " (out of memory?)" if sig == signal.SIGKILL else ""
    return f"hetc: error: killed by {_signal_name(sig)} in stage {stage}{hint}"


def _child(fn: Callable[[], int], debug: bool, capture) -> None:
    """The forked child: run ``fn`` and leave with its exit code, never returning to the caller.
    Its stderr goes to ``capture`` (None: the terminal), which the parent replays if it exits."""
    code = 1
    try:
        import faulthandler

        if capture is not None:
            sys.stderr.flush()
            os.dup2(capture.fileno(), 2)
        if debug:  # the Python stacks of every thread, before the parent's one line, to the
            # terminal even while native_log has fd 2 redirected
            terminal = _FAULT_FILE.setdefault("file", os.fdopen(os.dup(2), "w"))
            faulthandler.enable(file=terminal, all_threads=True)
        code = fn()
    except SystemExit as err:
        code = err.code if isinstance(err.code, int) else (0 if err.code is None else 1)
    except BaseException:  # noqa: BLE001  (what the interpreter would print for an uncaught error)
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


_FAULT_FILE: dict = {}  # faulthandler writes to this file, which must stay open


def _replay(capture, fd: int) -> None:
    capture.seek(0)
    while chunk := capture.read(1 << 16):
        os.write(fd, chunk)


def run_guarded(fn: Callable[[], int], debug: bool = False) -> int:
    """``fn()`` (an exit code) run in a forked child; a child killed by a signal is reported in one
    line on this process's stderr, its partial artifact removed, and ``128 + signal`` returned.

    The child's stderr is kept in a file and written out when it exits normally (so warnings
    come at the end): what a dying process prints (TVM's own SIGSEGV backtrace, a C++
    ``terminate called ...``, ``Fatal Python error``) never mixes with the one line. With
    ``debug`` it is not kept: the child writes live, with Python's faulthandler stacks.
    Without ``os.fork`` (or with HETC_NO_CRASH_GUARD=1) ``fn`` runs here, unguarded."""
    if not hasattr(os, "fork") or os.environ.get("HETC_NO_CRASH_GUARD") == "1":
        return fn()
    set_stage("startup")
    note_output("")
    started = time.time()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    with contextlib.ExitStack() as stack:
        capture = None if debug else stack.enter_context(tempfile.TemporaryFile())
        pid = os.fork()
        if pid == 0:
            _child(fn, debug, capture)  # does not return
        # Ctrl-C reaches the child too (same process group); it reports and exits on its own.
        previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
                    signal.SIGTERM: signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGTERM))}
        try:
            while True:
                try:
                    _, status = os.waitpid(pid, 0)
                    break
                except InterruptedError:
                    continue
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if os.WIFEXITED(status):
            if capture is not None:
                _replay(capture, 2)
            return os.WEXITSTATUS(status)
        sig = os.WTERMSIG(status)
        _remove_partial_output(started)
        os.write(2, (crash_line(sig, current_stage()) + "\n").encode())
        return 128 + sig
