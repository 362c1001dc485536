"""CPU collectives for hetc's SPMD programs, over ``torch.distributed`` (gloo), and the process
group they run in.

The TVM wheel has no CPU collective library (its CCLs are NCCL and RCCL), and a collective
with none aborts the process. The SPMD programs hetc compiles call TVM's global functions
``runtime.disco.allreduce``, ``broadcast_from_worker0``, ``allgather`` and
``scatter_from_worker0`` (the lowering of ``relax.ccl``). ``install()`` registers
gloo-backed versions of them in this process; pipeline stages send and receive through
``dist()`` (``runtime.py``), between their executables.

A rank's process joins the group in one of two ways:

- in a disco session (``runtime.ParallelRunner``, one machine): lazily, at the first
  collective, from ``HETC_DIST_INIT`` (a ``file://`` or ``tcp://`` rendezvous) and
  ``HETC_DIST_WORLD``, which the controller sets before it starts the workers; the rank is
  disco's worker id;
- launched as a plain process (``launch.py``, any number of machines): ``init_from_env``
  before anything else, through torch's ``env://`` rendezvous (``MASTER_ADDR``,
  ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, as torchrun sets them), with a timeout.

In a TP x PP artifact each stage's ranks also form a group of their own (``set_groups``,
called at load), and the collectives run in the caller's group, rooted at its first rank.

To add a collective: register its TVM global name in ``_COLLECTIVES`` with a function of
the same signature (inputs, then the destination tensor for destination-passing calls).
"""

from __future__ import annotations

import datetime
import os
import threading

import numpy as np
from tvm_ffi import get_global_func, register_global_func

_lock = threading.Lock()
_group = None  # this rank's tensor-parallel group (None: all ranks), see set_groups
_root = 0  # the global rank of its first member, the "worker 0" of its collectives
_REDUCE_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "AVG")  # relax.ccl's op_type codes, in order


def dist():
    """torch.distributed with the process group initialised (once per process; in a disco
    worker from ``HETC_DIST_INIT``, see the module docstring)."""
    import torch.distributed as dist

    with _lock:
        if not dist.is_initialized():
            rank = int(get_global_func("runtime.disco.worker_id")()[0])
            _init(init_method=os.environ["HETC_DIST_INIT"], world_size=int(os.environ["HETC_DIST_WORLD"]), rank=rank)
    return dist


def init_from_env(timeout_s: float) -> None:
    """Join the group through torch's ``env://`` rendezvous (``MASTER_ADDR``, ``MASTER_PORT``,
    ``RANK``, ``WORLD_SIZE``). Raises torch's error when the peers do not all appear within
    ``timeout_s``; the same bound then applies to every collective, so a rank whose peer dies
    fails instead of waiting forever."""
    with _lock:
        _init(init_method="env://", timeout=datetime.timedelta(seconds=timeout_s))


def _init(**options) -> None:
    """``init_process_group`` on gloo that leaves torch as it was when it fails. torch counts
    the failed group all the same, so this process's next default group would be named "1"
    where fresh peers name theirs "0", and its rendezvous would wait for keys they never
    write (a disco session after a failed launch hung so)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    count = distributed_c10d._world.group_count
    try:
        dist.init_process_group("gloo", **options)
    except BaseException:
        distributed_c10d._world.group_count = count
        raise


def leave() -> None:
    """Leave the process group, if this process is in one (its tensor-parallel group too)."""
    global _group, _root
    import torch.distributed as dist

    with _lock:
        _group, _root = None, 0
        if dist.is_initialized():
            dist.destroy_process_group()


def set_groups(groups) -> None:
    """Make this rank's collectives run within its group of ``groups`` (lists of global ranks;
    a TP x PP artifact's tensor-parallel groups). Every rank calls this with the same groups:
    creating a group is itself collective. No groups: the collectives span all ranks."""
    global _group, _root
    _group, _root = None, 0
    if not groups:
        return
    d = dist()
    rank = d.get_rank()
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
