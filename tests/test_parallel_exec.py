"""Tensor- and pipeline-parallel compilation and execution: a BERT-style encoder as 2 processes.

Each rank is a disco worker process; collectives (TP) and stage transfers (PP) go through
torch.distributed's gloo backend, so these tests need torch (skipped without it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import onnx
import pytest

import hetc
from hetc.errors import UsageError
from tests.conftest import assert_close, ort_run, run_cli, save

pytest.importorskip("torch")
psutil = pytest.importorskip("psutil")

import models as example_models

LAYERS = 2


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """A 2-layer BERT encoder (hidden 64, 4 heads, FFN 128, sequence 32) and its inputs."""
    out = tmp_path_factory.mktemp("encoder")
    model = example_models.bert(LAYERS, 64, 4, 128, seq=32)
    path = save(model, out / "encoder.onnx")
    inputs = example_models.sample_inputs(model)
    inputs["attention_mask"][:, -5:] = 0  # padding, so the mask matters
    np.savez(out / "inputs.npz", **inputs)
    return path, inputs, ort_run(path, inputs)


def _workers() -> list:
    """This process's disco worker processes (worker 0 is a thread of this process)."""
    return [p for p in psutil.Process().children(recursive=True) if "hetc.parallel.worker" in " ".join(p.cmdline())]


@pytest.mark.parametrize("degree", ["tp", "pp"])
def test_two_processes_match_onnxruntime(encoder, degree, tmp_path):
    path, inputs, reference = encoder
    compiled = hetc.compile(path, "cpu", **{degree: 2})
    outputs = compiled.run(inputs)
    assert len(_workers()) == 1  # rank 1 is a process of its own; rank 0 runs in this one
    for got, ref in zip(outputs.values(), reference, strict=True):
        assert_close(got, ref)
    # a second step reuses the session
    again = compiled.run(inputs)
    for got, ref in zip(again.values(), reference, strict=True):
        assert_close(got, ref)
    # closing removes the session's rendezvous directory (one was left per start)
    from hetc.parallel.runtime import close_all

    rendezvous = Path(urlparse(os.environ["HETC_DIST_INIT"]).path).parent
    assert rendezvous.is_dir() and rendezvous.name.startswith("hetc-dist-")
    close_all()
    assert not rendezvous.exists()

    parallel = compiled.manifest.parallel
    assert parallel["kind"] == {"tp": "tensor", "pp": "pipeline"}[degree]
    assert len(parallel["ranks"]) == 2
    if degree == "tp":
        # Megatron: one all-reduce after attention and one after the MLP, per layer; the two
        # inputs are broadcast from rank 0 in one fused call; nothing else communicates
        for rank in parallel["ranks"]:
            assert rank["collectives"] == {"allreduce": 2 * LAYERS, "broadcast_from_worker0": 1}
    else:
        first, second = parallel["ranks"]
        assert [s["name"] for s in first["send"]] == [s["name"] for s in second["receive"]]
        assert [s["name"] for s in second["send"]] == ["last_hidden_state", "pooler_output"]
        flops = parallel["stage_flops"]
        assert max(flops) / min(flops) < 1.5  # balanced by the DP


def test_micro_batched_pipeline_matches_onnxruntime():
    """A batch of 4 streamed through 2 stages as 4 micro-batches of 1 (the model hard-codes its
    batch in its head reshapes, which ``rebatch`` rewrites)."""
    model = example_models.bert(LAYERS, 64, 4, 128, seq=16, batch=4)
    inputs = example_models.sample_inputs(model)
    inputs["attention_mask"][1:, -3:] = 0
    reference = ort_run(model, inputs)
    compiled = hetc.compile(model, "cpu", pp=2, micro_batches=4)
    for got, ref in zip(compiled.run(inputs).values(), reference, strict=True):
        assert_close(got, ref)
    parallel = compiled.manifest.parallel
    assert parallel["micro_batches"] == 4
    assert all(spec["shape"][0] == 1 for r in parallel["ranks"] for spec in r["receive"] + r["send"])
    assert [o.shape[0] for o in compiled.manifest.outputs] == [4, 4]


def test_tensor_and_pipeline_parallel_together():
    """TP=2 inside each of 2 pipeline stages: 4 processes, a batch of 4 as 2 micro-batches."""
    model = example_models.bert(LAYERS, 64, 4, 128, seq=16, batch=4)
    inputs = example_models.sample_inputs(model)
    inputs["attention_mask"][2:, -4:] = 0
    reference = ort_run(model, inputs)
    compiled = hetc.compile(model, "cpu", tp=2, pp=2, micro_batches=2)
    for _ in range(2):  # the second step reuses the session and its groups
        for got, ref in zip(compiled.run(inputs).values(), reference, strict=True):
            assert_close(got, ref)
    assert len(_workers()) == 3
    parallel = compiled.manifest.parallel
    assert (parallel["kind"], parallel["tp"], parallel["pp"]) == ("pipeline", 2, 2)
    ranks = parallel["ranks"]
    assert [r["tp_group"] for r in ranks] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [r["stage"] for r in ranks] == [0, 0, 1, 1]
    assert ranks[0]["next"] == 2 and ranks[2]["previous"] == 0 and ranks[2]["next"] == 0
    # within a stage the ranks make the same calls; over the stages, one all-reduce after
    # attention and one after the MLP per layer, and each stage broadcasts its inputs once
    assert ranks[0]["collectives"] == ranks[1]["collectives"] and ranks[2]["collectives"] == ranks[3]["collectives"]
    assert ranks[0]["collectives"]["allreduce"] + ranks[2]["collectives"]["allreduce"] == 2 * LAYERS
    assert all(r["collectives"]["broadcast_from_worker0"] == 1 for r in ranks)


def test_stage_without_a_pair_runs_replicated():
    """An MLP of three linear layers in 2 stages: the cut keeps the first pair whole (no stage
    gets half a block), so stage 0 is sharded over its group and stage 1 (the last layer and
    the softmax over its features) has nothing to split: its leader alone runs it."""
    model = example_models.mlp(batch=4)
    inputs = example_models.sample_inputs(model)
    compiled = hetc.compile(model, "cpu", tp=2, pp=2)
    for got, ref in zip(compiled.run(inputs).values(), ort_run(model, inputs), strict=True):
        assert_close(got, ref)
    parallel = compiled.manifest.parallel
    assert [r["collectives"] for r in parallel["ranks"]] == [{"allreduce": 1, "broadcast_from_worker0": 1}] * 2 + [{}] * 2
    assert [s["column_parallel"] for s in parallel["stage_shards"]] == [1, 0]
    assert parallel["stage_shards"][1]["replicated"] == [
        {"layer": "matmul [128->10]", "reason": "relax.nn.softmax over the split axis"}]


def test_cli_compile_and_run_tp(encoder, tmp_path):
    path, _, _ = encoder
    out = tmp_path / "tp"
    result = run_cli("compile", path, "--tp", "2", "-o", out)
    assert result.code == 0, result.stderr
    assert "tensor-parallel over 2 ranks" in result.stdout and "4 allreduce" in result.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert [p["library"] for p in manifest["parts"]] == ["cpu/rank0.so", "cpu/rank1.so"]
    inputs = path.parent / "inputs.npz"
    result = run_cli("run", out, "--ranks", "2", "--inputs", inputs, "--reference", path)
    assert result.code == 0, result.stderr + result.stdout
    assert "tensor-parallel in 2 processes" in result.stdout
    result = run_cli("run", out, "--ranks", "3", "--inputs", inputs)
    assert result.code == 2 and result.stderr.strip() == (
        f"hetc: error: --ranks 3: {out} was compiled for 2 rank(s)")


def test_cli_compile_and_run_tp_times_pp(encoder, tmp_path):
    path, _, _ = encoder
    out = tmp_path / "tpxpp"
    result = run_cli("compile", path, "--tp", "2", "--pp", "2", "-o", out)
    assert result.code == 0, result.stderr
    text = " ".join(result.stdout.split())  # rich wraps long lines
    assert "pipeline-parallel x tensor-parallel 2 over 4 ranks" in text
    assert "rank 0: stage 0, receives 2, sends" in text and "rank 3: stage 1, 2 allreduce, 1 broadcast_from_worker0" in text
    result = run_cli("run", out, "--inputs", path.parent / "inputs.npz", "--reference", path)
    assert result.code == 0, result.stderr + result.stdout
    assert "pipeline-parallel x tensor-parallel 2 in 4 processes" in " ".join(result.stdout.split())


def test_pipeline_split_is_by_cost(encoder):
    from hetc.parallel.pipeline import split

    path, _, _ = encoder
    stages = split(onnx.load(path), 2)
    total = sum(s.flops for s in stages)
    assert all(s.flops > 0.3 * total for s in stages)
    # what stage 0 sends is exactly what stage 1 receives, and stage 1 needs no model input directly
    assert stages[0].send == stages[1].receive
    assert "input_ids" not in stages[1].inputs


def test_tensor_parallel_plan_pairs(encoder):
    from hetc.frontends.onnx import load_model, to_relax
    from hetc.parallel.shard import tensor_parallel_plan
    from hetc.passes import run_pipeline
    from hetc.passes.phases import inference_passes, simplify_passes

    path, _, _ = encoder
    mod, _ = run_pipeline(to_relax(load_model(path, {}, None, {})), inference_passes() + simplify_passes())
    plan = tensor_parallel_plan(mod["main"], 2)
    kinds = sorted(placement for _, _, placement in plan.placements)
    # per layer: q, k, v, fc1 column-split (weight S[1], bias S[0]); out-proj and fc2 row-split (S[0])
    assert kinds.count("S[1]") == 4 * LAYERS
    assert kinds.count("S[0]") == (4 + 2) * LAYERS
    assert plan.allreduces == 2 * LAYERS  # the pooler's dense stays replicated: nothing follows it


def test_bad_parallel_options(examples, encoder):
    path, _, _ = encoder
    with pytest.raises(UsageError, match="--micro-batches streams a batch through pipeline stages"):
        hetc.compile(path, "cpu", tp=2, micro_batches=2)
    with pytest.raises(UsageError, match="no linear layer pair"):
        hetc.compile(examples / "cnn.onnx", "cpu", tp=2)
    with pytest.raises(UsageError, match="heads|divid|no linear layer pair"):
        hetc.compile(path, "cpu", tp=3)  # 64 hidden, 4 heads: 3 divides neither
    result = run_cli("compile", path, "--tp", "2", "--target", "cuda", "-o", examples / "never")
    assert result.code == 2 and "--tp/--pp compile for the CPU target" in result.stderr
    assert not (examples / "never").exists()
