"""Running a tensor- or pipeline-parallel artifact: one process per rank.

A rank's part of a step is ``_Program``, whatever started the rank. On one machine (``hetc
run``, ``CompiledModel.run``) the ranks are a TVM disco session: the controller starts a disco
``ProcessSession`` whose workers run ``hetc.parallel.worker`` (worker 0 is a thread of the
controller); every worker installs the gloo collectives (``gloo.py``) and the two functions
below, then the controller calls them on all workers at once:

- ``hetc.parallel.load(root, threads)``: the worker loads its rank's executable(s) from the
  artifact (``manifest.parallel.ranks[k].library``).
- ``hetc.parallel.run(*inputs, *outputs)``: one step. Inputs are valid on worker 0 only (the
  controller copies them there); outputs are written on worker 0, where the controller reads
  them. Tensor parallel: every rank runs its SPMD program, which broadcasts the inputs and
  all-reduces the partial sums itself. Pipeline parallel: the leader of stage s (the first
  rank of its ``tp_group``; every rank when ``tp`` is 1) receives the tensors live at its
  stage boundary from the leader of stage s - 1 (stage 0's from the inputs), runs its stage,
  and sends the tensors live at the next boundary on; the last stage sends the model outputs
  to rank 0. With ``tp`` > 1 the other ranks of a stage run its SPMD program on placeholders,
  which the program's input broadcast from the leader overwrites; their collectives stay in
  their group (``gloo.set_groups``, called at load). With m micro-batches
  (``record["micro_batches"]``) rank 0 splits the inputs into m along the batch and every
  rank works through them in order, sending each one on without waiting (``isend``): stage
  s computes micro-batch j + 1 while stage s + 1 computes j. Rank 0 concatenates the m
  results.

The session is started at the first run and kept for the next ones (``close`` ends it). A
process holds one torch.distributed group, so one session at a time: starting another
closes the previous one (it restarts at its next run).

Ranks on several machines are plain processes instead (``launch.py``): each builds its
``_Program`` itself, with its rank and cores from the torchrun-style environment, and global
rank 0 plays worker 0's part (it has the inputs and gets the outputs).
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import ArtifactError, DeviceError, HetcError, last_line
from . import gloo

_programs: dict = {}  # this process's loaded rank programs, by rank
_active: list = []  # the ParallelRunner whose session is up: worker 0's process group is this process's


def disco():
    """``tvm.runtime.disco``, working around its load-order bug (docs/dev/tvm.md)."""
    import tvm.runtime

    if getattr(tvm.runtime, "disco", None) is None:
        sys.modules.pop("tvm.runtime.disco._ffi_api", None)
        return importlib.import_module("tvm.runtime.disco")
    return tvm.runtime.disco


def _worker_id() -> int:
    """This disco worker's id, its global rank (a disco session only)."""
    from tvm_ffi import get_global_func

    return int(get_global_func("runtime.disco.worker_id")()[0])


_SHARE_CORES = -3  # TVM's ThreadGroup::kSpecifyThreadShareAllCore: the pool's threads float over a core list


def _usable_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def _cores(rank: int, ranks: int, threads: int) -> list[int]:
    """Rank ``rank``'s cores: its ``threads`` (default: an equal share) of the cores this
    process may use, disjoint from the other ranks' while there are enough. ``rank`` and
    ``ranks`` count the ranks sharing this machine: all of them in a disco session, the node's
    local ranks when launched (``launch.py``)."""
    usable = _usable_cores()
    share = threads or max(1, len(usable) // ranks)
    return [usable[(rank * share + i) % len(usable)] for i in range(share)]


def restore_threads() -> None:
    """The controller's thread pool back to every core (worker 0 ran in this process)."""
    import tvm

    from ..options import default_threads

    cores = [str(c) for c in _usable_cores()]
    tvm.get_global_func("runtime.config_threadpool")(_SHARE_CORES, default_threads(), cores)


class _Program:
    """One rank's executable(s) and its part of the step protocol (global rank ``rank``, its
    thread pool on ``cores``)."""

    def __init__(self, root: Path, record: dict, kind: str, rank: int, cores: Sequence[int]) -> None:
        import tvm
        from tvm import relax

        # each rank's threads on cores of their own: TVM's default (mode 1, "big cores") pins
        # every process's threads to the same first cores, and the ranks then share one core
        tvm.get_global_func("runtime.config_threadpool")(_SHARE_CORES, len(cores), [str(c) for c in cores])
        self.record, self.kind, self.rank = record, kind, rank
        # a replicated pipeline stage (no collectives) runs on its leader only: the others idle
        self.idle = rank != record.get("tp_group", [rank])[0] and not record["collectives"]
        self.vm = None if self.idle else relax.VirtualMachine(
            tvm.runtime.load_module(str(root / record["library"])), tvm.cpu())

    def run(self, args: Sequence) -> None:
        import tvm

        if self.idle:
            return
        n_in = len(self.record["model_inputs"])
        inputs, outputs = list(args[:n_in]), list(args[n_in:])
        rank = self.rank
        if self.kind == "tensor":
            result = _flatten(self.vm["main"](*inputs))
            if rank == 0:
                for dst, value in zip(outputs, result, strict=True):
                    dst.copyfrom(value)
            return
        d = gloo.dist()
        record = self.record
        m = int(record["micro_batches"])
        leader = rank == record["tp_group"][0]
        if rank == 0:
            chunks = [np.array_split(x.numpy(), m) for x in inputs]
        placeholders = {spec["name"]: spec for spec in record["receive"]}
        pending = []  # isend handles and the buffers they read (a rank goes on while they send)
        for j in range(m):
            if not leader:  # the stage program broadcasts its inputs from the leader
                live = {name: np.empty(placeholders[name]["shape"], placeholders[name]["dtype"])
                        for name in record["inputs"]}
            elif record["stage"] == 0:
                live = dict(zip(record["model_inputs"], (c[j] for c in chunks)))
            else:
                live = _recv(d, record["receive"], record["previous"])
            stage_in = [tvm.runtime.tensor(np.ascontiguousarray(live[name])) for name in record["inputs"]]
            live.update(zip(record["outputs"], _flatten(self.vm["main"](*stage_in))))
            if leader:
                pending += _send(d, [live[spec["name"]] for spec in record["send"]], record["next"])
        if rank == 0:
            results = [_recv(d, record["results"], record["results_from"]) for _ in range(m)]
            for dst, spec in zip(outputs, record["results"], strict=True):
                dst.copyfrom(np.concatenate([r[spec["name"]] for r in results]))
        for work, _ in pending:
            work.wait()


def _flatten(value) -> list:
    import tvm

    if isinstance(value, tvm.runtime.Tensor):
        return [value]
    return [t for item in value for t in _flatten(item)]


def _send(d, values: Sequence, peer: int) -> list:
    """Start sending ``values`` to ``peer``; the (request, buffer) pairs to wait on."""
    import torch

    pending = []
    for value in values:
        buf = torch.from_numpy(np.ascontiguousarray(value if isinstance(value, np.ndarray) else value.numpy()))
        pending.append((d.isend(buf, dst=peer), buf))
    return pending


def _recv(d, specs: Sequence[dict], peer: int) -> dict:
    import torch

    out = {}
    for spec in specs:
        buf = torch.from_numpy(np.empty(spec["shape"], spec["dtype"]))
        d.recv(buf, src=peer)
        out[spec["name"]] = buf.numpy()
    return out


def load_program(root: Path, parallel: dict, rank: int, cores: Sequence[int]) -> _Program:
    """Global rank ``rank``'s program of the artifact at ``root`` (``parallel``: its manifest's
    ``parallel``), after joining its tensor-parallel group: every rank calls this at once."""
    program = _Program(Path(root), parallel["ranks"][rank], parallel["kind"], rank, cores)
    groups = {tuple(r["tp_group"]) for r in parallel["ranks"] if len(r.get("tp_group", ())) > 1}
    gloo.set_groups(sorted(groups))
    return program


def _load(root: str, threads: int) -> int:
    import json

    parallel = json.loads((Path(root) / "manifest.json").read_text())["parallel"]
    rank = _worker_id()
    _programs[rank] = load_program(Path(root), parallel, rank, _cores(rank, len(parallel["ranks"]), threads))
    return rank


def _run(*args) -> None:
    _programs[_worker_id()].run(args)


def install() -> None:
    """Register ``hetc.parallel.load``/``run`` as TVM global functions in this process."""
    from tvm_ffi import register_global_func

    register_global_func("hetc.parallel.load", _load, override=True)
    register_global_func("hetc.parallel.run", _run, override=True)


def close_all() -> None:
    """End the running session, if any (its rank processes exit; this process's threads are
    its own again)."""
    while _active:
        _active[0].close()


class ParallelRunner:
    """Runs an artifact's rank programs as ``ranks`` processes; called like a ``VMRunner``."""

    def __init__(self, root: Path, parallel: dict, outputs: Sequence, threads: int = 0) -> None:
        self.root, self.parallel, self.outputs = Path(root), parallel, list(outputs)
        self.ranks = len(parallel["ranks"])
        self.threads = threads  # per rank; 0: an equal share of the cores (``_cores``)
        self.session = None
        self._rendezvous: Path | None = None
        self._lock = threading.Lock()

    def _start(self) -> None:
        try:
            import torch.distributed  # noqa: F401
        except ImportError:
            raise DeviceError("running a --tp/--pp artifact needs torch for its collectives (gloo): "
                              "pip install 'hetc[torch]'") from None
        close_all()
        disco_module = disco()
        self._rendezvous = Path(tempfile.mkdtemp(prefix="hetc-dist-"))  # removed by close(), else at exit
        atexit.register(shutil.rmtree, self._rendezvous, ignore_errors=True)
        rendezvous = self._rendezvous / "init"
        os.environ["HETC_DIST_INIT"] = rendezvous.as_uri()
        os.environ["HETC_DIST_WORLD"] = str(self.ranks)
        gloo.install()  # worker 0 runs in this process
        install()
        try:
            self.session = disco_module.ProcessSession(num_workers=self.ranks, entrypoint="hetc.parallel.worker")
            self.session.get_global_func("hetc.parallel.load")(str(self.root), self.threads)
            self.session._sync_all()
            _active.append(self)
        except Exception as err:
            self.close()
            raise ArtifactError(f"{self.root}: cannot start {self.ranks} ranks: {last_line(err)}") from err

    def __call__(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        import tvm

        with self._lock:
            if self.session is None:
                self._start()
            sess = self.session
            try:
                inputs = []
                for array in args:
                    array = np.ascontiguousarray(array)
                    ref = sess.empty(array.shape, str(array.dtype))
                    sess.copy_to_worker_0(tvm.runtime.tensor(array), ref)
                    inputs.append(ref)
                outputs = [sess.empty(tuple(s.shape), s.dtype) for s in self.outputs]
                sess.get_global_func("hetc.parallel.run")(*inputs, *outputs)
                hosts = [tvm.runtime.empty(tuple(s.shape), s.dtype) for s in self.outputs]
                for host, ref in zip(hosts, outputs, strict=True):
                    sess.copy_from_worker_0(host, ref)
                sess._sync_all()  # the copies are queued: wait for them before reading
                return [host.numpy() for host in hosts]
            except HetcError:
                raise
            except Exception as err:
                self.close()
                raise ArtifactError(f"parallel run failed: {last_line(err)}") from err

    def close(self) -> None:
        """End the session: the worker processes exit, this process leaves the group."""
        if self.session is not None:
            # dropping the last reference shuts the workers down (an explicit shutdown() would be
            # repeated by the destructor, on a closed pipe, which aborts the process)
            self.session = None
            gc.collect()
        if self in _active:
            _active.remove(self)
        if _programs:
            restore_threads()
        _programs.clear()
        gloo.leave()
        if self._rendezvous is not None:  # every start made one: 357 were left in a CI machine's /tmp
            shutil.rmtree(self._rendezvous, ignore_errors=True)
            self._rendezvous = None
