"""hetc's CPU thread pool (``pool.cc``), compiled once per machine and linked into every CPU
library hetc exports; ``hetc.runtime.standalone.install_pool`` switches a loaded library to it.

Why a pool of hetc's own, and how it claims work: see the comment at the top of ``pool.cc``.
The object file is cached under ``$HETC_CACHE_DIR`` (default ``$XDG_CACHE_HOME/hetc``, else
``~/.cache/hetc``), named by a hash of the source and the compiler command, so editing
``pool.cc`` or changing ``CXX`` rebuilds it.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from ...errors import CompileError

SOURCE = Path(__file__).with_name("pool.cc")
FLAGS = ["-O2", "-std=c++20", "-fPIC", "-fvisibility=hidden", "-c"]


def cache_dir() -> Path:
    root = os.environ.get("HETC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "hetc")
    return Path(root)


@functools.cache
def pool_object() -> str:
    """Path of the compiled pool (an object file to link into a CPU library)."""
    compiler = shlex.split(os.environ.get("CXX", "g++"))
    key = hashlib.sha256(SOURCE.read_bytes() + "\0".join(compiler + FLAGS).encode()).hexdigest()[:16]
    target = cache_dir() / f"pool-{key}.o"
    if target.is_file():
        return str(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        return _build(compiler, target)
    except OSError:  # no writable cache: build it for this process only
        own = Path(tempfile.mkdtemp(prefix="hetc-pool-"))
        atexit.register(shutil.rmtree, own, ignore_errors=True)
        return _build(compiler, own / target.name)


def _build(compiler: list[str], target: Path) -> str:
    fd, tmp = tempfile.mkstemp(suffix=".o", dir=target.parent)
    os.close(fd)
    try:
        done = subprocess.run(compiler + FLAGS + [str(SOURCE), "-o", tmp], capture_output=True, text=True)
        if done.returncode != 0:
            lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
            raise CompileError(f"building hetc's CPU thread pool with {compiler[0]} failed: "
                               f"{lines[0] if lines else 'exit status ' + str(done.returncode)}")
        os.replace(tmp, target)  # atomic: a concurrent build writes the same bytes
    except FileNotFoundError:
        raise CompileError(f"no C++ compiler '{compiler[0]}' to build hetc's CPU thread pool "
                           "(set CXX)") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return str(target)
