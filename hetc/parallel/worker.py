"""CPU collectives for TVM's disco runtime, over ``torch.distributed`` (gloo), and the disco
worker entry point that installs them.

The TVM wheel has no CPU collective library (its CCLs are NCCL and RCCL), and a collective
with none aborts the process. The SPMD programs hetc compiles call TVM's global functions
``runtime.disco.allreduce``, ``broadcast_from_worker0``, ``allgather`` and
``scatter_from_worker0`` (the lowering of ``relax.ccl``). ``install()`` registers
gloo-backed versions of them in this process (pipeline stages send and receive through
``dist()`` in ``runtime.py``, between their executables); a disco ``ProcessSession`` started with ``entrypoint="hetc.parallel.worker"``
runs it in every worker process, and the controller runs it for worker 0 (a thread of the
controller). The process group is created at the first collective, from ``HETC_DIST_INIT``
(a ``file://`` or ``tcp://`` rendezvous) and ``HETC_DIST_WORLD``, which the controller sets
before it starts the workers; the rank is disco's worker id.

To add a collective: register its TVM global name in ``_COLLECTIVES`` with a function of
the same signature (inputs, then the destination tensor for destination-passing calls).
"""

from __future__ import annotations

import os
import sys
import threading

from tvm_ffi import get_global_func, register_global_func

_lock = threading.Lock()
_REDUCE_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "AVG")  # relax.ccl's op_type codes, in order


def dist():
    """torch.distributed with the process group initialised (once per process)."""
    import torch.distributed as dist

    with _lock:
        if not dist.is_initialized():
            rank = int(get_global_func("runtime.disco.worker_id")()[0])
            dist.init_process_group("gloo", init_method=os.environ["HETC_DIST_INIT"],
                                    world_size=int(os.environ["HETC_DIST_WORLD"]), rank=rank)
    return dist


def _torch(tensor):
    import torch

    return torch.from_dlpack(tensor)


def _allreduce(src, op_type, _in_group, dst) -> None:
    d = dist()
    out = _torch(dst)
    out.copy_(_torch(src))
    op = _REDUCE_OPS[int(op_type[0])]
    if op == "AVG":  # gloo has no AVG
        d.all_reduce(out, d.ReduceOp.SUM)
        out /= d.get_world_size()
    else:
        d.all_reduce(out, getattr(d.ReduceOp, op))


def _broadcast_from_worker0(src, _in_group, dst) -> None:
    d = dist()
    out = _torch(dst)
    if d.get_rank() == 0:
        out.copy_(_torch(src))
    d.broadcast(out, src=0)


def _allgather(src, _in_group, dst) -> None:
    import torch

    d = dist()
    local = _torch(src).contiguous()
    parts = [torch.empty_like(local) for _ in range(d.get_world_size())]
    d.all_gather(parts, local)
    _torch(dst).copy_(torch.cat(parts, dim=0).reshape(_torch(dst).shape))


def _scatter_from_worker0(src, _in_group, dst) -> None:
    d = dist()
    out = _torch(dst)
    chunks = list(_torch(src).contiguous().chunk(d.get_world_size(), dim=0)) if d.get_rank() == 0 else None
    d.scatter(out, [c.contiguous().reshape(out.shape) for c in chunks] if chunks else None, src=0)


_COLLECTIVES = {
    "runtime.disco.allreduce": _allreduce,
    "runtime.disco.broadcast_from_worker0": _broadcast_from_worker0,
    "runtime.disco.allgather": _allgather,
    "runtime.disco.scatter_from_worker0": _scatter_from_worker0,
}


def install() -> None:
    """Register the gloo collectives as TVM global functions in this process."""
    for name, fn in _COLLECTIVES.items():
        register_global_func(name, fn, override=True)


def main() -> None:
    """Disco worker process: ``<worker_id> <num_workers> <num_groups> <read_fd> <write_fd>``."""
    from . import runtime

    runtime.disco()  # loads TVM's runtime, which defines the worker loop
    install()
    runtime.install()
    worker_id, num_workers, num_groups, reader, writer = (int(a) for a in sys.argv[1:6])
    get_global_func("runtime.disco.WorkerProcess")(worker_id, num_workers, num_groups, reader, writer)


if __name__ == "__main__":
    try:
        main()
    except (OSError, KeyboardInterrupt):
        pass
