"""``filtered_stderr``: TVM's known noise on fd 2 dropped, the rest replayed, fd 2 restored even
when captures overlap across threads (the tuning export builds beside nvcc)."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading

from hetc.native_log import filtered_stderr

NOISE = b"[12:00:00] executable.cc:42: Warning: Scope Saving: x\n"


@contextlib.contextmanager
def fd2_to_file():
    """fd 2 sent to a file, ``sys.stderr`` on fd 2 (as on a terminal), inside the test body
    (pytest's own fd capture is re-installed between a fixture's setup and the test)."""
    saved, sink, stderr = os.dup(2), tempfile.TemporaryFile(), sys.stderr
    os.dup2(sink.fileno(), 2)
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 - fd 2 itself
    output = []
    try:
        yield output
    finally:
        sys.stderr = stderr
        os.dup2(saved, 2)
        os.close(saved)
        sink.seek(0)
        output.append(sink.read().decode())
        sink.close()


def test_noise_dropped_rest_replayed():
    with fd2_to_file() as out, filtered_stderr():
        os.write(2, NOISE + b"kept line\n")
    err = out[0]
    assert "kept line" in err and "Scope Saving" not in err


def test_overlapping_threads_share_one_capture_and_restore_fd2():
    inside, release = threading.Barrier(2), threading.Event()

    def worker(tag: bytes, wait: bool) -> None:
        with filtered_stderr():
            inside.wait()  # both captures in force at once
            os.write(2, NOISE + tag)
            if wait:
                release.wait(5)

    first = threading.Thread(target=worker, args=(b"first\n", False))
    second = threading.Thread(target=worker, args=(b"second\n", True))
    with fd2_to_file() as out:
        first.start()
        second.start()
        first.join()  # the first to enter leaves first: fd 2 must stay captured for the second
        os.write(2, b"while second runs\n")
        release.set()
        second.join()
        os.write(2, b"after both\n")
    err = out[0]
    assert "Scope Saving" not in err
    assert err.index("after both") > err.index("second") and "first" in err and "while second runs" in err
