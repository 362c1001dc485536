"""Ranks of a ``--tp``/``--pp`` artifact as plain processes, on one machine or several, joined
through torch.distributed's standard ``env://`` rendezvous (the torchrun environment:
``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``).

Two ways to start them, one command per machine (node):

- ``hetc run ART --nnodes N --node-rank K --master-addr A --master-port P``: node K holds
  global ranks ``K*n .. K*n + n - 1``, n = ranks / N (``node_places``). Its ``hetc run``
  process is the first of them and starts the others as ``python -m hetc.parallel.launch ART``
  with their environment set (``run_node``). Node 0's ``hetc run`` is global rank 0: it reads
  the inputs, gets the outputs and compares them with ``--reference`` as on one machine.
- ``torchrun --nnodes N --nproc-per-node n --node-rank K --master-addr A --master-port P
  -m hetc.parallel.launch ART --inputs X.npz --outputs Y.npz``: torchrun starts every rank
  (``main``); rank 0 reads X.npz and writes Y.npz.

Every rank then does the same (``LaunchedRank``): it joins the gloo group through ``env://``
(``gloo.init_from_env``; a peer that does not appear within ``--timeout`` seconds is an
error, and the same bound holds for every collective), pins its threads to its share of its
node's cores (``runtime._cores`` over the node's local ranks), loads its program
(``runtime.load_program``) and runs one step: global rank 0 with the inputs, the others on
placeholders of the inputs' shapes (from the manifest), which the SPMD programs' own
broadcasts from rank 0 and the pipeline receives overwrite. No rank needs a disco session.
gloo listens on the address the hostname resolves to, often loopback (``127.0.1.1`` in
``/etc/hosts``, containers, network namespaces), which other machines cannot reach: unless
``GLOO_SOCKET_IFNAME`` is set, each rank sets it to the interface holding the address it
reaches ``MASTER_ADDR`` from (``_interface_towards``).

This module imports nothing of ``hetc.cli``: the CLI calls ``run_node``; ``main`` is the
per-rank entry for ``python -m``.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from ..errors import DeviceError, HetcError, UsageError, last_line
from ..npz import load_npz, save_npz

log = logging.getLogger(__name__)

DEFAULT_PORT = 29500  # torchrun's
DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Rendezvous:
    """Where and how long the ranks meet: torch's ``env://`` store at ``master_addr:master_port``
    (served by global rank 0's process)."""

    master_addr: str
    master_port: int
    world_size: int
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class RankPlace:
    """One rank's place: its global rank and its index among its node's ``local_world_size``
    ranks (which share the node's cores)."""

    rank: int
    local_rank: int
    local_world_size: int

    def environment(self, rendezvous: Rendezvous) -> dict[str, str]:
        """The torchrun variables that put a process at this place."""
        return {"MASTER_ADDR": rendezvous.master_addr, "MASTER_PORT": str(rendezvous.master_port),
                "WORLD_SIZE": str(rendezvous.world_size), "RANK": str(self.rank),
                "LOCAL_RANK": str(self.local_rank), "LOCAL_WORLD_SIZE": str(self.local_world_size)}


def node_places(ranks: int, nnodes: int, node_rank: int) -> list[RankPlace]:
    """The places of node ``node_rank``'s ranks, out of ``ranks`` split evenly over ``nnodes``
    nodes in order (node 0 has global rank 0)."""
    if not 0 <= node_rank < nnodes:
        raise UsageError(f"--node-rank {node_rank}: must be in 0..{nnodes - 1} with --nnodes {nnodes}")
    if ranks % nnodes:
        raise UsageError(f"--nnodes {nnodes}: the artifact's {ranks} rank(s) do not divide evenly among "
                         f"{nnodes} nodes")
    per_node = ranks // nnodes
    return [RankPlace(node_rank * per_node + i, i, per_node) for i in range(per_node)]


def _env_int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = env.get(name)
    if value is None and default is not None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name}={value!r} in the environment: expected an integer (set by torchrun or "
                         "hetc run --nnodes)" if value is not None else
                         f"{name} is not set: start this rank with torchrun or hetc run --nnodes") from None


def place_from_env(timeout_s: float, env: Mapping[str, str] | None = None) -> tuple[RankPlace, Rendezvous]:
    """This process's place and rendezvous from the torchrun environment (``LOCAL_RANK``
    defaults to 0 and ``LOCAL_WORLD_SIZE`` to 1: all the node's cores)."""
    env = os.environ if env is None else env
    world = _env_int(env, "WORLD_SIZE")
    rank = _env_int(env, "RANK")
    local_world = _env_int(env, "LOCAL_WORLD_SIZE", 1)
    local_rank = _env_int(env, "LOCAL_RANK", 0)
    if not 0 <= rank < world or not 0 <= local_rank < local_world:
        raise UsageError(f"RANK={rank}, WORLD_SIZE={world}, LOCAL_RANK={local_rank}, LOCAL_WORLD_SIZE={local_world} "
                         "in the environment: a rank must be below its world size")
    if not env.get("MASTER_ADDR"):
        raise UsageError("MASTER_ADDR is not set: start this rank with torchrun or hetc run --nnodes")
    port = _env_int(env, "MASTER_PORT")
    return RankPlace(rank, local_rank, local_world), Rendezvous(env["MASTER_ADDR"], port, world, timeout_s)


def _interface_towards(addr: str) -> str | None:
    """The network interface holding the address this machine reaches ``addr`` from; None for
    loopback or when it cannot tell. gloo binds to the address the hostname resolves to, and
    falls back to loopback where that is not local (a ``127.0.1.1`` hostname, a network
    namespace): peers on other machines then cannot reach it."""
    import psutil

    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(addr, None, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((sockaddr[0], 9))  # a UDP connect sends nothing: it only picks the route
            local = probe.getsockname()[0]
    except OSError:
        return None
    if ipaddress.ip_address(local).is_loopback:
        return None
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == local for a in addresses):
            return name
    return None


@contextlib.contextmanager
def _environment(updates: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``updates`` (torch's ``env://`` reads it), restored afterwards."""
    saved = {k: os.environ.get(k) for k in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_SOURCE_LOCATION = re.compile(r"\[/[^\]]+:\d+\]\s*")  # torch's and gloo's "[/__w/pytorch/.../pair.h:311] "


def _torch_message(err: BaseException) -> str:
    """A torch.distributed error in one line, without its C++ source locations."""
    return _SOURCE_LOCATION.sub("", last_line(err))


class LaunchedRank:
    """One rank of a parallel artifact in this process, its place given by the torchrun
    environment (``os.environ`` at ``start``). ``__call__`` is global rank 0's step (inputs in,
    outputs out, like ``runtime.ParallelRunner``); the other ranks call ``step()``."""

    def __init__(self, root: Path, manifest, place: RankPlace, rendezvous: Rendezvous) -> None:
        self.root, self.manifest, self.place, self.rendezvous = Path(root), manifest, place, rendezvous
        self.program = None
        self.stepped = False  # a step completed here: the others are to be waited for at close

    def start(self) -> None:
        """Join the group (bounded by the rendezvous timeout) and load this rank's program."""
        from ..native_log import filtered_stderr
        from . import gloo, runtime

        try:
            import torch.distributed  # noqa: F401
        except ImportError:
            raise DeviceError("running a --tp/--pp artifact needs torch for its collectives (gloo): "
                              "pip install 'hetc[torch]'") from None
        runtime.close_all()  # a process holds one group: a disco session's goes
        rdv, place = self.rendezvous, self.place
        try:
            with filtered_stderr():  # torch's C++ side logs every retry to fd 2; the error says it in one line
                gloo.init_from_env(rdv.timeout_s)
        except Exception as err:
            message = _torch_message(err)
            if "connectFullMesh" in message:  # the store was reached, the peers' gloo addresses were not
                message += ("; the ranks' gloo addresses do not reach each other: set GLOO_SOCKET_IFNAME to "
                            "the interface that reaches the other nodes")
            raise HetcError(f"rank {place.rank} of {rdv.world_size}: the ranks did not all meet at "
                            f"{rdv.master_addr}:{rdv.master_port} within {rdv.timeout_s:g} s "
                            f"(--timeout): {message}") from err
        gloo.install()
        threads = self.manifest.parts[0].threads if self.manifest.parts else 0
        cores = runtime._cores(place.local_rank, place.local_world_size, threads)
        try:
            self.program = runtime.load_program(self.root, self.manifest.parallel, place.rank, cores)
        except HetcError:
            raise
        except Exception as err:
            raise HetcError(f"rank {place.rank}: cannot load its program from {self.root}: {last_line(err)}") from err

    def step(self, arrays: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        """One step: ``arrays`` (the model's inputs, in order) on global rank 0, placeholders
        elsewhere; returns the outputs on rank 0, an empty list elsewhere."""
        import tvm

        if self.program is None:
            self.start()
        if arrays is None:
            inputs = [tvm.runtime.empty(tuple(s.shape), s.dtype) for s in self.manifest.inputs]
        else:
            inputs = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in arrays]
        outputs = [tvm.runtime.empty(tuple(s.shape), s.dtype) for s in self.manifest.outputs]
        try:
            self.program.run([*inputs, *outputs])
        except HetcError:
            raise
        except Exception as err:
            raise HetcError(f"rank {self.place.rank}: parallel run failed: {_torch_message(err)}") from err
        self.stepped = True
        return [o.numpy() for o in outputs] if self.place.rank == 0 else []

    __call__ = step

    def close(self) -> None:
        """After a step, wait for every rank to finish theirs (global rank 0 serves the
        rendezvous store and must not leave first); then leave the group. After a failure,
        leave at once: the others' collectives then fail instead of waiting out the timeout."""
        import torch.distributed as td

        from . import gloo, runtime

        if self.stepped and td.is_initialized():
            try:
                td.barrier()
            except RuntimeError as err:  # torch's DistError: a peer died, nothing to wait for
                log.debug("rank %d: final barrier failed: %s", self.place.rank, last_line(err))
        if self.program is not None:
            self.program = None
            runtime.restore_threads()
        self.stepped = False
        gloo.leave()


def run_rank(root: Path, manifest, place: RankPlace, rendezvous: Rendezvous,
             inputs: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray] | None:
    """Run one step as the rank at ``place`` of the artifact at ``root`` (``manifest``: its
    validated manifest); global rank 0 takes ``inputs`` (checked like ``CompiledModel.run``'s)
    and returns the outputs, the others return None. The torchrun variables of ``place`` are
    set in ``os.environ`` meanwhile, and ``GLOO_SOCKET_IFNAME`` to the interface towards the
    master where the user has not set it (``_interface_towards``)."""
    from ..runtime.model import CompiledModel

    if not manifest.parallel:
        raise UsageError(f"{root} is not a --tp/--pp artifact: it runs as one process, not as ranks")
    if len(manifest.parallel["ranks"]) != rendezvous.world_size:
        raise UsageError(f"a world of {rendezvous.world_size} rank(s): {root} was compiled for "
                         f"{len(manifest.parallel['ranks'])}")
    rank = LaunchedRank(root, manifest, place, rendezvous)
    environment = place.environment(rendezvous)
    if "GLOO_SOCKET_IFNAME" not in os.environ:  # the user's choice of interface wins
        interface = _interface_towards(rendezvous.master_addr)
        if interface:
            log.debug("rank %d: gloo on %s (towards %s)", place.rank, interface, rendezvous.master_addr)
            environment["GLOO_SOCKET_IFNAME"] = interface
    with _environment(environment):
        try:
            if place.rank == 0:
                if inputs is None:
                    raise UsageError("global rank 0 needs the inputs (--inputs)")
                return CompiledModel(manifest, _runners=[rank]).run(inputs)
            rank.step()
            return None
        finally:
            rank.close()


@dataclass
class _Child:
    place: RankPlace
    process: subprocess.Popen
    stderr: IO[bytes]


def _start_child(root: Path, place: RankPlace, rendezvous: Rendezvous) -> _Child:
    stderr = tempfile.TemporaryFile()  # noqa: SIM115 (the child's lifetime; run_node closes it)
    command = [sys.executable, "-m", "hetc.parallel.launch", str(root), "--timeout", f"{rendezvous.timeout_s:g}"]
    if log.isEnabledFor(logging.DEBUG):
        command.append("--debug")
    env = {**os.environ, **place.environment(rendezvous)}
    return _Child(place, subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=stderr), stderr)


def _child_error(child: _Child) -> str:
    child.stderr.seek(0)
    lines = [ln.strip() for ln in child.stderr.read().decode(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("hetc: error: ")]
    reason = errors[-1].removeprefix("hetc: error: ") if errors else (lines[-1] if lines else "no message")
    return f"rank {child.place.rank} (local rank {child.place.local_rank}) exited with code {child.process.returncode}: {reason}"


def run_node(root: Path, manifest, places: Sequence[RankPlace], rendezvous: Rendezvous,
             inputs: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray] | None:
    """Run one step on this node: ``places[0]`` in this process (``run_rank``), the others as
    ``python -m hetc.parallel.launch`` child processes; returns rank 0's outputs where it runs
    here, else None. A child that fails is reported by its rank and its own error line."""
    root = Path(root).absolute()
    children = [_start_child(root, place, rendezvous) for place in places[1:]]
    try:
        try:
            outputs = run_rank(root, manifest, places[0], rendezvous, inputs)
        except HetcError as err:
            failed = [c for c in children if c.process.poll() not in (None, 0)]
            if failed:  # the child's failure is the cause, this rank's the consequence
                raise HetcError(_child_error(failed[0])) from err
            raise
        for child in children:
            try:
                child.process.wait(timeout=rendezvous.timeout_s)
            except subprocess.TimeoutExpired:
                raise HetcError(f"rank {child.place.rank} did not finish within {rendezvous.timeout_s:g} s "
                                "of this node's first rank (--timeout)") from None
            if child.process.returncode != 0:
                raise HetcError(_child_error(child))
        return outputs
    finally:
        for child in children:  # only on failure are any still running
            if child.process.poll() is None:
                child.process.terminate()
                try:
                    child.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.process.kill()
                    child.process.wait()
            child.stderr.close()


class _Arguments(argparse.ArgumentParser):
    def error(self, message: str):  # one line through main's handler, not argparse's usage dump
        raise UsageError(message)


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = _Arguments(prog="python -m hetc.parallel.launch",
                        description="One rank of a --tp/--pp artifact, placed by the torchrun environment.")
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--inputs", type=Path, help=".npz of the model inputs (read by global rank 0)")
    parser.add_argument("--outputs", type=Path, help=".npz the outputs are written to (by global rank 0)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help="seconds to wait for the other ranks (rendezvous and each collective)")
    parser.add_argument("--debug", action="store_true", help="tracebacks and debug logs")
    args = parser.parse_args(argv)
    if not args.timeout > 0:
        raise UsageError(f"--timeout {args.timeout:g}: must be positive")
    return args


def _run_from_env(args: argparse.Namespace) -> None:
    from ..runtime.artifact import read_manifest

    place, rendezvous = place_from_env(args.timeout)
    root = args.artifact.absolute()
    manifest = read_manifest(root)
    inputs = None
    if place.rank == 0:
        if args.inputs is None:
            raise UsageError("global rank 0 needs --inputs X.npz")
        inputs = load_npz(args.inputs)
    outputs = run_rank(root, manifest, place, rendezvous, inputs)
    if outputs is not None and args.outputs is not None:
        save_npz(args.outputs, outputs)


def main(argv: Sequence[str] | None = None) -> int:
    """Per-rank entry: ``python -m hetc.parallel.launch ART [--inputs X.npz] [--outputs Y.npz]
    [--timeout S]``; errors are one ``hetc: error:`` line and a non-zero exit, as in ``hetc``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    try:
        _run_from_env(_parse(argv))
    except HetcError as err:
        if debug:
            traceback.print_exc()
        message = " ".join(part.strip() for part in str(err).splitlines() if part.strip())
        sys.stderr.write(f"hetc: error: {message}\n")
        return err.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("hetc: interrupted\n")
        return 130
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.DEBUG if "--debug" in sys.argv else logging.WARNING,
                        format="%(name)s: %(message)s")
    sys.exit(main())
