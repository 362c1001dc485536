"""CPU collectives for TVM's disco runtime, over ``torch.distributed`` (gloo), and the disco
worker entry point that installs them.

The TVM wheel has no CPU collective library (its CCLs are NCCL and RCCL), and a collective
with none aborts the process. The SPMD programs hetc compiles call TVM's global functions
``runtime.disco.allreduce``, ``broadcast_from_worker0``, ``allgather`` and
``scatter_from_worker0`` (the lowering of ``relax.ccl``). ``install()`` registers
gloo-backed versions of them in this process (pipeline stages send and receive through
``dist()`` in ``runtime.py``, between their executables). A disco ``ProcessSession`` started
with ``entrypoint="hetc.parallel.worker"`` runs it in every worker process, and the controller
runs it for worker 0 (a thread of the controller). The process group is created at the first collective, from ``HETC_DIST_INIT``
(a ``file://`` or ``tcp://`` rendezvous) and ``HETC_DIST_WORLD``, which the controller sets
before it starts the workers; the rank is disco's worker id. In a TP x PP artifact each stage's
ranks also form a group of their own (``set_groups``, called at load), and the collectives run
in the caller's group, rooted at its first rank.

To add a collective: register its TVM global name in ``_COLLECTIVES`` with a function of
the same signature (inputs, then the destination tensor for destination-passing calls).
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
from tvm_ffi import get_global_func, register_global_func

_lock = threading.Lock()
_group = None  # this rank's tensor-parallel group (None: all ranks), see set_groups
_root = 0  # the global rank of its first member, the "worker 0" of its collectives
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


def set_groups(groups) -> None:
    """Make this rank's collectives run within its group of ``groups`` (lists of global ranks;
    a TP x PP artifact's tensor-parallel groups). Every rank calls this with the same groups:
    creating a group is itself collective. No groups: the collectives span all ranks."""
    global _group, _root
    d = dist() if groups else None
    _group, _root = None, 0
    rank = int(get_global_func("runtime.disco.worker_id")()[0])
    for members in groups:
        group = d.new_group(ranks=list(members))
        if rank in members:
            _group, _root = group, members[0]


def _views(*tensors):
    """numpy views of TVM tensors (no copy). The collectives move data with torch.distributed
    but compute with numpy: a torch op here would wake torch's OpenMP threads, which then spin
    on the rank's own cores and starve gloo's I/O threads (an all-reduce of 512 KB took 6.5 ms
    instead of 0.5 ms)."""
    return [np.from_dlpack(t) for t in tensors]


def _comm(array: np.ndarray):
    import torch

    return torch.from_numpy(array)


def _allreduce(src, op_type, _in_group, dst) -> None:
    d = dist()
    src, out = _views(src, dst)
    np.copyto(out, src)
    op = _REDUCE_OPS[int(op_type[0])]
    d.all_reduce(_comm(out), d.ReduceOp.SUM if op == "AVG" else getattr(d.ReduceOp, op), group=_group)
    if op == "AVG":  # gloo has no AVG
        out /= d.get_world_size(_group)


def _broadcast_from_worker0(src, _in_group, dst) -> None:
    d = dist()
    src, out = _views(src, dst)
    if d.get_rank() == _root:
        np.copyto(out, src)
    d.broadcast(_comm(out), src=_root, group=_group)


def _allgather(src, _in_group, dst) -> None:
    d = dist()
    local, out = _views(src, dst)
    parts = [np.empty_like(local) for _ in range(d.get_world_size(_group))]
    d.all_gather([_comm(p) for p in parts], _comm(np.ascontiguousarray(local)), group=_group)
    np.copyto(out, np.concatenate(parts, axis=0).reshape(out.shape))


def _scatter_from_worker0(src, _in_group, dst) -> None:
    d = dist()
    src, out = _views(src, dst)
    chunks = None
    if d.get_rank() == _root:
        chunks = [_comm(np.ascontiguousarray(c).reshape(out.shape)) for c in np.split(src, d.get_world_size(_group))]
    d.scatter(_comm(out), chunks, src=_root, group=_group)


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
    # run the importable module, not this __main__ copy: runtime.py sets the groups on that one
    from hetc.parallel import worker  # noqa: PLW0406

    try:
        worker.main()
    except (OSError, KeyboardInterrupt):
        pass
