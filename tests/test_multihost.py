"""Ranks across machines (hetc/parallel/launch.py): a --tp/--pp artifact's ranks as plain
processes that meet through torch.distributed's env:// rendezvous, one ``hetc run --nnodes``
per node (or torchrun with ``-m hetc.parallel.launch``).

The fast tests run on this host over 127.0.0.1 with a small MLP: one node in this process and
the other as a child process, or ``--nnodes 1`` with its second rank as a child process. The
slow ones make two "hosts" out of network namespaces joined by a veth pair (root only) and run
test_parallel_exec.py's 2-layer encoder, tensor- and pipeline-parallel, one rank per namespace.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import hetc
from hetc import cli
from hetc.parallel import launch
from tests.conftest import assert_close, ort_run, save

pytest.importorskip("torch")

import models as example_models

HOST_A, HOST_B = "10.231.0.1", "10.231.0.2"  # the two namespaces' addresses on their veth pair


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hetc(*args) -> list[str]:
    return [sys.executable, "-m", "hetc", *map(str, args)]


def _error_line(capsys) -> str:
    """The one line a failed command wrote to stderr (and nothing on stdout, no traceback)."""
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hetc: error: "), err
    assert "Traceback" not in out + err
    return lines[0]


def _check_outputs(path: Path, reference: list[np.ndarray]) -> None:
    with np.load(path) as got:
        for name, ref in zip(got.files, reference, strict=True):
            assert_close(got[name], ref)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """A 3-layer MLP (batch 4) compiled for 2 ranks, tensor- and pipeline-parallel, and as one
    process; its inputs and onnxruntime's outputs."""
    out = tmp_path_factory.mktemp("mlp")
    model = example_models.mlp(batch=4)
    path = save(model, out / "mlp.onnx")
    inputs = example_models.sample_inputs(model)
    np.savez(out / "inputs.npz", **inputs)
    for name, options in {"tp": {"tp": 2}, "pp": {"pp": 2}, "single": {}}.items():
        hetc.compile(model, "cpu", **options).save(out / name)
    return out, path, ort_run(model, inputs)


def test_two_nodes_over_loopback(mlp, tmp_path, capsys):
    """Node 1 as another process, node 0 (global rank 0, with the inputs) in this one."""
    out, model, reference = mlp
    port = _free_port()
    common = ["--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(port), "--timeout", "60"]
    node1 = subprocess.Popen(_hetc("run", out / "pp", "--node-rank", "1", *common), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        code = cli.main(["run", str(out / "pp"), "--inputs", str(out / "inputs.npz"), "--outputs",
                         str(tmp_path / "y.npz"), "--reference", str(model), "--node-rank", "0", *common])
        stdout, stderr = node1.communicate(timeout=60)
    finally:
        node1.kill()
    assert code == 0, capsys.readouterr()
    assert "pipeline-parallel in 2 processes on 2 node(s)" in " ".join(capsys.readouterr().out.split())
    assert node1.returncode == 0, stderr
    assert "node 1 of 2: ranks 1..1 of 2 ran" in stdout and "node 0 has the outputs" in stdout
    _check_outputs(tmp_path / "y.npz", reference)


def test_local_ranks_are_child_processes(mlp, tmp_path, capsys):
    """--nnodes 1: this process is rank 0, rank 1 a ``python -m hetc.parallel.launch`` child."""
    out, model, reference = mlp
    code = cli.main(["run", str(out / "tp"), "--inputs", str(out / "inputs.npz"), "--outputs", str(tmp_path / "y.npz"),
                     "--reference", str(model), "--nnodes", "1", "--master-port", str(_free_port()), "--timeout", "60"])
    assert code == 0, capsys.readouterr()
    assert "tensor-parallel in 2 processes on 1 node(s)" in " ".join(capsys.readouterr().out.split())
    _check_outputs(tmp_path / "y.npz", reference)


@pytest.mark.parametrize("node", [0, 1])
def test_a_peer_that_never_appears_is_an_error(mlp, capsys, node):
    """Node 0 serves the rendezvous and waits for node 1; node 1 retries connecting to node 0.
    Neither peer ever appears: each ends with one line after about --timeout seconds."""
    out, _, _ = mlp
    port = _free_port()
    start = time.perf_counter()
    code = cli.main(["run", str(out / "pp"), "--inputs", str(out / "inputs.npz"), "--nnodes", "2", "--node-rank",
                     str(node), "--master-addr", "127.0.0.1", "--master-port", str(port), "--timeout", "2"])
    assert code == 1
    assert time.perf_counter() - start < 20
    assert _error_line(capsys).startswith(
        f"hetc: error: rank {node} of 2: the ranks did not all meet at 127.0.0.1:{port} within 2 s (--timeout): ")


def test_a_failed_launch_leaves_this_process_usable(mlp, capsys):
    """After a rank in this process failed to meet its peers, a one-machine run (a disco session,
    whose fresh workers name their group as torch names its first) still meets its workers."""
    from hetc.parallel import runtime

    out, _, reference = mlp
    code = cli.main(["run", str(out / "tp"), "--inputs", str(out / "inputs.npz"), "--nnodes", "2", "--master-addr",
                     "127.0.0.1", "--master-port", str(_free_port()), "--timeout", "1"])
    assert code == 1 and "did not all meet" in _error_line(capsys)
    inputs = dict(np.load(out / "inputs.npz"))
    try:
        for got, ref in zip(hetc.load(out / "tp").run(inputs).values(), reference, strict=True):
            assert_close(got, ref)
    finally:
        runtime.close_all()


@pytest.mark.parametrize(("args", "message"), [
    (["--nnodes", "0"], "Invalid value for '--nnodes': 0 is not in the range x>=1."),
    (["--nnodes", "2", "--node-rank", "2", "--master-addr", "h"], "--node-rank 2: must be in 0..1 with --nnodes 2"),
    (["--nnodes", "2", "--node-rank", "1"], "--nnodes 2 needs --master-addr: node 0's address, reachable from every node"),
    (["--node-rank", "1"], "--node-rank is for ranks across machines: it needs --nnodes N"),
    (["--master-addr", "h"], "--master-addr is for ranks across machines: it needs --nnodes N"),
    (["--nnodes", "3", "--master-addr", "h"], "--nnodes 3: the artifact's 2 rank(s) do not divide evenly among 3 nodes"),
    (["--nnodes", "1", "--master-port", "70000"], "Invalid value for '--master-port': 70000 is not in the range 1<=x<=65535."),
    (["--nnodes", "1", "--timeout", "0"], "Invalid value for '--timeout': 0.0 is not in the range x>0."),
    (["--nnodes", "1", "--master-addr", " "], "--master-addr: empty address"),
])
def test_bad_launch_options(mlp, capsys, args, message):
    out, _, _ = mlp
    assert cli.main(["run", str(out / "tp"), "--inputs", str(out / "inputs.npz"), *args]) == 2
    assert _error_line(capsys) == f"hetc: error: {message}"


def test_launch_needs_a_parallel_artifact_and_inputs_on_node_0(mlp, capsys):
    out, _, _ = mlp
    assert cli.main(["run", str(out / "single"), "--inputs", str(out / "inputs.npz"), "--nnodes", "1"]) == 2
    assert _error_line(capsys) == (f"hetc: error: --nnodes: {out / 'single'} runs as one process "
                                   "(compile with --tp N or --pp N for ranks)")
    assert cli.main(["run", str(out / "tp"), "--nnodes", "2", "--master-addr", "h"]) == 2
    assert _error_line(capsys) == ("hetc: error: missing option --inputs X.npz "
                                   "(node 0 runs global rank 0, which reads them)")
    assert cli.main(["run", str(out / "tp")]) == 2
    assert _error_line(capsys) == "hetc: error: missing option --inputs X.npz"


def test_node_places():
    assert launch.node_places(4, 2, 1) == [launch.RankPlace(2, 0, 2), launch.RankPlace(3, 1, 2)]
    assert launch.node_places(2, 1, 0) == [launch.RankPlace(0, 0, 2), launch.RankPlace(1, 1, 2)]
    assert launch.RankPlace(3, 1, 2).environment(launch.Rendezvous("h", 7, 4)) == {
        "MASTER_ADDR": "h", "MASTER_PORT": "7", "WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2"}


@pytest.mark.parametrize(("env", "message"), [
    ({}, "WORLD_SIZE is not set: start this rank with torchrun or hetc run --nnodes"),
    ({"WORLD_SIZE": "2", "RANK": "x"}, "RANK='x' in the environment: expected an integer (set by torchrun or hetc run --nnodes)"),
    ({"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
     "RANK=2, WORLD_SIZE=2, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1 in the environment: a rank must be below its world size"),
    ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_PORT": "1"},
     "MASTER_ADDR is not set: start this rank with torchrun or hetc run --nnodes"),
])
def test_rank_entry_needs_the_torchrun_environment(mlp, capsys, monkeypatch, env, message):
    out, _, _ = mlp
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert launch.main([str(out / "tp")]) == 2
    assert _error_line(capsys) == f"hetc: error: {message}"


def test_rank_entry_checks_rank_0s_inputs_and_the_world(mlp, capsys, monkeypatch):
    out, _, _ = mlp
    env = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert launch.main([str(out / "tp")]) == 2
    assert _error_line(capsys) == "hetc: error: global rank 0 needs --inputs X.npz"
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert launch.main([str(out / "tp"), "--inputs", str(out / "inputs.npz")]) == 2
    assert _error_line(capsys) == f"hetc: error: a world of 3 rank(s): {out / 'tp'} was compiled for 2"
    assert launch.main([str(out / "tp"), "--timeout", "-1"]) == 2
    assert _error_line(capsys) == "hetc: error: --timeout -1: must be positive"


# --- two hosts: network namespaces ------------------------------------------------------------


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def two_hosts():
    """Two network namespaces joined by a veth pair, HOST_A and HOST_B: each sees only the
    other (and its own loopback), as two machines on one link would. Deleted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command (iproute2) to make network namespaces")
    tag = f"{os.getpid() % 100000}"
    a, b = f"hetc{tag}a", f"hetc{tag}b"
    made = []
    try:
        for ns in (a, b):
            _ip("netns", "add", ns)
            made.append(ns)
        _ip("link", "add", f"hv{tag}a", "type", "veth", "peer", "name", f"hv{tag}b")
        for ns, end, address in ((a, f"hv{tag}a", HOST_A), (b, f"hv{tag}b", HOST_B)):
            _ip("link", "set", end, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", end)
            _ip("-n", ns, "link", "set", end, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
    except (subprocess.CalledProcessError, OSError) as err:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True, timeout=30)
        detail = err.stderr.strip() if isinstance(err, subprocess.CalledProcessError) else str(err)
        pytest.skip(f"cannot make network namespaces here: {detail}")
    yield a, b
    for ns in made:  # the veth pair goes with its namespaces
        subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """test_parallel_exec.py's 2-layer encoder compiled --tp 2 and --pp 2, its inputs and
    onnxruntime's outputs."""
    out = tmp_path_factory.mktemp("encoder")
    model = example_models.bert(2, 64, 4, 128, seq=32)
    path = save(model, out / "encoder.onnx")
    inputs = example_models.sample_inputs(model)
    inputs["attention_mask"][:, -5:] = 0
    np.savez(out / "inputs.npz", **inputs)
    for degree in ("tp", "pp"):
        hetc.compile(model, "cpu", **{degree: 2}).save(out / degree)
    return out, path, ort_run(model, inputs)


def _in(ns: str, command: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *command]


def _run_two_nodes(node0: list[str], node1: list[str]) -> None:
    """Start node 1's command, run node 0's; both must succeed."""
    second = subprocess.Popen(node1, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = subprocess.run(node0, check=False, capture_output=True, text=True, timeout=300)
        _, stderr = second.communicate(timeout=120)
    finally:
        second.kill()
    assert first.returncode == 0, first.stderr + first.stdout
    assert second.returncode == 0, stderr


@pytest.mark.slow
@pytest.mark.parametrize("degree", ["tp", "pp"])
def test_ranks_on_two_hosts(two_hosts, encoder, tmp_path, degree):
    """One rank in each namespace; node 0 has rank 0, the inputs and the outputs."""
    (a, b), (out, model, reference) = two_hosts, encoder
    common = ["--nnodes", "2", "--master-addr", HOST_A, "--master-port", str(_free_port()), "--timeout", "120"]
    _run_two_nodes(
        _in(a, _hetc("run", out / degree, "--node-rank", "0", "--inputs", out / "inputs.npz", "--outputs",
                     tmp_path / "y.npz", "--reference", model, *common)),
        _in(b, _hetc("run", out / degree, "--node-rank", "1", *common)))
    _check_outputs(tmp_path / "y.npz", reference)


@pytest.mark.slow
def test_torchrun_on_two_hosts(two_hosts, encoder, tmp_path):
    """The same with torchrun starting the ranks: ``-m hetc.parallel.launch``."""
    (a, b), (out, _, reference) = two_hosts, encoder
    port = str(_free_port())

    def torchrun(ns: str, node: int, *args) -> list[str]:
        return _in(ns, [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                        "--node-rank", str(node), "--master-addr", HOST_A, "--master-port", port,
                        "-m", "hetc.parallel.launch", str(out / "tp"), "--timeout", "120", *map(str, args)])

    _run_two_nodes(torchrun(a, 0, "--inputs", out / "inputs.npz", "--outputs", tmp_path / "y.npz"), torchrun(b, 1))
    _check_outputs(tmp_path / "y.npz", reference)
