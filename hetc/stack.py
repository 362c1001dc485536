"""Run the compiler on a thread with a deep native stack.

TVM's passes recurse over expressions: a deep graph or a long symbolic expression takes tens of
thousands of native frames. The main thread has the process's stack limit (8 MiB by default):
torchvision's Keypoint R-CNN died with SIGSEGV in legalization under it and compiled with
``ulimit -s unlimited``. ``deep(fn)`` runs ``fn`` on a thread whose stack is ``STACK_BYTES``
(address space reserved, pages committed only as they are touched) and returns its result or
raises its exception in the caller. The thread runs in a copy of the caller's context
(``contextvars``); TVM's own contexts (``PassContext``, ``Target``) are per thread: enter them
inside ``fn``.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
STACK_BYTES = 1 << 30


def deep(fn: Callable[[], T]) -> T:
    """``fn()`` on a thread with a ``STACK_BYTES`` stack (already on one: called directly)."""
    if getattr(_local, "deep", False):
        return fn()
    result: dict = {}
    context = contextvars.copy_context()

    def run() -> None:
        _local.deep = True
        try:
            result["value"] = context.run(fn)
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller
            result["error"] = err

    previous = threading.stack_size(STACK_BYTES)
    try:
        worker = threading.Thread(target=run, name="hetc-compile", daemon=True)
        worker.start()
    finally:
        threading.stack_size(previous)
    worker.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


_local = threading.local()
