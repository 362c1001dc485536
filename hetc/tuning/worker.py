"""Functions that run in MetaSchedule's builder and runner worker processes.

They are pickled by reference, so they live in this small module that imports nothing but TVM.
"""

from __future__ import annotations

import os


def build(mod, target, _params):
    """Build one candidate, as ``meta_schedule.builder.default_build`` does, minus its
    ``import tvm.s_tir.tensor_intrin``: that import takes 25-45 s on a 2-core machine, longer
    than the builder's timeout, so with the default every candidate would fail. Building needs
    no registered intrinsics: tensorization already happened when the main process scheduled
    the candidate.
    """
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm.tirx.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def runner_init(threads: int) -> None:
    """Measure with the number of threads the compiled model will use."""
    os.environ["TVM_NUM_THREADS"] = str(threads)
    import tvm

    tvm.get_global_func("runtime.config_threadpool")(1, threads)
    # AMX tile state for the int8-amx candidates (as hetc.backends.cpu.schedules.amx.request_permission)
    import ctypes
    import platform

    if platform.system() == "Linux" and platform.machine() == "x86_64":
        ctypes.CDLL(None).syscall(158, 0x1023, 18)
