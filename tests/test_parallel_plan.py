"""The parallel planner's analytical half (hetc/parallel/{mesh,collectives,model,memory,schedule,
stages,planner,cli}.py): published closed forms (pipeline bubbles, Megatron tensor-parallel
traffic, ZeRO memory, Korthikanti activations), alpha-beta collectives on hand-computed cases,
the stage DP against brute force, and the planner and CLI end to end on presets."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

from hetc.errors import HetcError, UsageError
from hetc.parallel import collectives as cc
from hetc.parallel.cli import parallel, parse_bytes
from hetc.parallel.memory import layer_activations, model_states
from hetc.parallel.mesh import Group, Link, parse_mesh
from hetc.parallel.model import (
    PRESETS,
    SHARDINGS,
    TransformerConfig,
    from_onnx,
    load_model,
    parse_model,
    transformer,
)
from hetc.parallel.planner import PlanOptions, plan_parallel
from hetc.parallel.schedule import Schedule
from hetc.parallel.stages import Infeasible, StageProblem, brute_force, partition

GB = 1e9


# --- pipeline schedules ----------------------------------------------------------------------

@pytest.mark.parametrize(("p", "m"), [(1, 1), (2, 1), (4, 8), (8, 8), (8, 32), (16, 64)])
def test_bubble_gpipe_and_1f1b(p, m):
    for name in ("gpipe", "1f1b"):
        s = Schedule(name)
        assert s.bubble_fraction(p, m) == pytest.approx((p - 1) / (m + p - 1))
        assert s.bubble_ratio(p, m) == pytest.approx((p - 1) / m)  # Narayanan et al. 2021, section 2.2.1
        t = 1.7  # forward + backward per micro-batch
        step = s.step_seconds(p, m, t)
        assert step == pytest.approx((m + p - 1) * t)
        assert (step - m * t) / step == pytest.approx(s.bubble_fraction(p, m))  # idle share of the step
        assert (step - m * t) / (m * t) == pytest.approx(s.bubble_ratio(p, m))  # bubble over ideal time


@pytest.mark.parametrize(("p", "m", "v"), [(2, 2, 2), (4, 8, 2), (4, 8, 4), (8, 16, 3)])
def test_bubble_interleaved(p, m, v):
    s = Schedule("interleaved", v)
    assert s.bubble_ratio(p, m) == pytest.approx((p - 1) / (v * m))  # (1/v)(p - 1)/m
    assert s.bubble_fraction(p, m) == pytest.approx((p - 1) / (v * m + p - 1))
    ratio = s.bubble_ratio(p, m)
    assert s.bubble_fraction(p, m) == pytest.approx(ratio / (1 + ratio))
    t = 3.0
    step = s.step_seconds(p, m, t)
    assert step == pytest.approx(m * t + (p - 1) * t / v)  # the fill and drain shrink v-fold
    assert step < Schedule("1f1b").step_seconds(p, m, t)


def test_activations_in_flight():
    p, m, v = 8, 64, 2
    assert Schedule("gpipe").in_flight(p, m, 0) == m
    assert [Schedule("1f1b").in_flight(p, m, k) for k in range(p)] == [8, 7, 6, 5, 4, 3, 2, 1]
    assert Schedule("1f1b").in_flight(p, 3, 0) == 3  # fewer micro-batches than stages
    # Korthikanti et al. 2022, 4.2.3: the first stage of interleaved 1F1B holds p (1 + (p - 1)/(p v))
    assert Schedule("interleaved", v).in_flight(p, m, 0) == pytest.approx(p * (1 + (p - 1) / (p * v)))
    assert Schedule("interleaved", v).in_flight(p, m, p - 1) >= 1
    with pytest.raises(ValueError):
        Schedule("interleaved", 1)
    with pytest.raises(ValueError):
        Schedule("zigzag")


# --- collectives -------------------------------------------------------------------------------

LINK = Link("test", bandwidth=100e9, latency=1e-6)


def test_flat_collectives_hand_computed():
    s = 1e9
    ring = cc.ring_all_reduce(s, 4, LINK)
    assert ring.seconds == pytest.approx(6e-6 + 1.5 * s / 100e9)  # 2(n-1) alpha + 2(n-1)/n S/beta
    assert ring.bytes_sent == pytest.approx(1.5e9)
    tree = cc.tree_all_reduce(s, 4, LINK)
    assert tree.seconds == pytest.approx(4e-6 + 2 * s / 100e9)  # 2 log2(n) alpha + 2 S/beta
    gather = cc.all_gather_flat(s, 4, LINK)
    assert gather.seconds == pytest.approx(3e-6 + 0.75 * s / 100e9)
    assert gather.bytes_sent == pytest.approx(0.75e9)
    assert cc.p2p(s, LINK).seconds == pytest.approx(1e-6 + 0.01)
    assert cc.ring_all_reduce(s, 1, LINK) == cc.NONE and cc.p2p(0, LINK) == cc.NONE


def test_group_collectives_single_node_and_hierarchical():
    one = parse_mesh("8xH100")
    nv = one.intra
    g = one.group(8, 1)
    big, small = 1e9, 1e3
    assert cc.all_reduce(big, g, one).seconds == pytest.approx(cc.ring_all_reduce(big, 8, nv).seconds)
    latency_bound = cc.tree_all_reduce(small, 8, nv).seconds  # 6 alpha beats the ring's 14
    assert cc.all_reduce(small, g, one).seconds == pytest.approx(latency_bound)
    assert cc.reduce_scatter(big, g, one) == cc.all_gather(big, g, one) == cc.all_gather_flat(big, 8, nv)
    assert cc.all_to_all(big, g, one) == cc.all_gather_flat(big, 8, nv)

    two = parse_mesh("2x8xH100")
    ib = two.inter
    assert ib.bandwidth == 50e9 and two.intra.bandwidth == 450e9
    g = two.group(16, 1)
    assert (g.per_node, g.nodes) == (8, 2)
    expected = 2 * (7 * nv.latency + 7 / 8 * big / nv.bandwidth) + (2 * ib.latency + big / 8 / ib.bandwidth)
    assert cc.all_reduce(big, g, two).seconds == pytest.approx(expected)
    assert cc.all_reduce(big, g, two).bytes_sent == pytest.approx(2 * 7 / 8 * big + big / 8)
    across = two.group(2, 8)  # one member per node: the flat forms on the network
    assert (across.per_node, across.nodes) == (1, 2)
    assert cc.all_reduce(big, across, two) == cc.ring_all_reduce(big, 2, ib)
    assert cc.all_gather(big, across, two) == cc.all_gather_flat(big, 2, ib)
    a2a = cc.all_to_all(big, g, two)
    assert a2a.bytes_sent == pytest.approx(15 / 16 * big)
    assert a2a.seconds == pytest.approx(7 * nv.latency + 7 / 16 * big / nv.bandwidth
                                        + 8 * ib.latency + 8 / 16 * big / ib.bandwidth)


# --- model and Megatron tensor parallelism ----------------------------------------------------

def test_presets_match_published_sizes():
    params = {name: transformer(config).params for name, config in PRESETS.items()}
    assert params["gpt3-175b"] == pytest.approx(175e9, rel=0.01)
    assert params["gpt3-13b"] == pytest.approx(13e9, rel=0.02)
    assert params["gpt2-xl"] == pytest.approx(1.558e9, rel=0.01)
    assert params["bert-base"] == pytest.approx(110e6, rel=0.02)
    assert params["bert-large"] == pytest.approx(335e6, rel=0.02)


def test_block_flops_params_and_activations():
    s, h, a, L = 2048, 4096, 32, 4
    model = transformer(TransformerConfig(L, h, a, s, 50000, scores=True))
    block = [x for x in model.layers if x.name.startswith("block.0.")]
    assert sum(x.params for x in block) == 12 * h * h + 13 * h
    assert sum(x.flops for x in block) == 24 * s * h * h + 4 * s * s * h  # Narayanan et al. 2021
    for t in (1, 2, 4, 8):  # Korthikanti et al. 2022, eq. 2: s b h (10 + 24/t + 5 a s/(h t)), b = 1
        kept = sum(layer_activations(x, t) for x in block)
        assert kept == pytest.approx(s * h * (10 + 24 / t + 5 * a * s / (h * t)))
    flash = transformer(TransformerConfig(L, h, a, s, 50000))
    kept = sum(layer_activations(x, 1) for x in flash.layers if x.name.startswith("block.0."))
    assert kept == pytest.approx(34 * s * h + 4 * a * s)  # the scores are not kept


@pytest.mark.parametrize("t", [2, 4, 8])
def test_megatron_tensor_parallel_volume_per_layer(t):
    s, h, b = 2048, 4096, 4
    model = transformer(TransformerConfig(2, h, 32, s, 50000))
    block = [x for x in model.layers if x.name.startswith("block.0.")]
    assert [x.sharding.forward for x in block] == [("all-reduce",), ("all-reduce",)]  # 2 per block forward
    assert [x.sharding.backward for x in block] == [("all-reduce",), ("all-reduce",)]  # 2 more backward
    assert all(x.tp_bytes == s * h * 2 for x in block)  # b s h values of 2 bytes per sample
    mesh = parse_mesh("8xH100")
    ar = cc.all_reduce(b * s * h * 2, mesh.group(t, 1), mesh)
    assert ar.bytes_sent == pytest.approx(2 * (t - 1) / t * b * s * h * 2)  # ring: each device sends 2(t-1)/t


def test_planner_counts_megatron_all_reduces():
    layers, s, h = 3, 1024, 4096
    model = parse_model(f"gpt:layers={layers},hidden={h},heads=32,seq={s},vocab=32000")
    search = plan_parallel(model, parse_mesh("2xH100"), PlanOptions(batch=1, top=10))
    plan = next(p for p in search.plans if (p.dp, p.tp, p.pp) == (1, 2, 1))
    ring = 2 * (2 - 1) / 2 * s * h * 2  # one all-reduce of b s h bf16 values at t = 2
    # 2 per block and the vocab-parallel embedding's one, forward only
    assert plan.comm["tensor"].bytes_sent == pytest.approx((2 * layers + 1) * ring)
    train = plan_parallel(model, parse_mesh("2xH100"), PlanOptions(batch=1, training=True, top=10))
    plan = next(p for p in train.plans if (p.dp, p.tp, p.pp) == (1, 2, 1))
    # + 2 per block backward and the LM head's input gradient
    assert plan.comm["tensor"].bytes_sent == pytest.approx((4 * layers + 2) * ring)


def test_model_specs_and_errors():
    assert parse_model("gpt3-13b:seq=1024").layers[1] == parse_model("gpt3-13b", seq=1024).layers[1]
    assert parse_model("bert-base:dtype=fp32").dtype == "float32"
    spec = parse_model("gpt:layers=24,hidden=2048,heads=16,seq=2048,vocab=50257")
    assert spec.heads == 16 and len(spec.layers) == 2 * 24 + 3
    for bad, words in [("gpt:layers=2", "hidden must be given"),
                       ("gpt:layers=2,hidden=10,heads=3", "multiple"),
                       ("gpt3-13b:depth=2", "keys:"), ("gpt3-13b:dtype=int4", "dtype"), ("llama", "preset"),
                       ("gpt3-13b:layers=x", "not an integer"), ("missing.onnx", "no such file")]:
        with pytest.raises(UsageError, match=words):
            load_model(bad)


# --- memory ------------------------------------------------------------------------------------

def test_zero_memory_paper_example():
    """Rajbhandari et al. 2020, figure 1: Phi = 7.5B, N_d = 64 -> 120, 31.4, 16.6, 1.88 GB."""
    phi, nd = 7.5e9, 64
    got = [model_states(phi, 2, True, zero, nd).total / GB for zero in range(4)]
    assert got == pytest.approx([120, 31.4, 16.6, 1.875], abs=0.05)


@pytest.mark.parametrize(("phi", "nd"), [(1e9, 2), (13e9, 8), (175e9, 1024)])
def test_zero_memory_forms(phi, nd):
    states = [model_states(phi, 2, True, zero, nd) for zero in range(4)]
    assert [s.total for s in states] == pytest.approx(
        [16 * phi, 4 * phi + 12 * phi / nd, 2 * phi + 14 * phi / nd, 16 * phi / nd])
    assert (states[1].weights, states[1].gradients, states[1].optimizer) == pytest.approx((2 * phi, 2 * phi,
                                                                                           12 * phi / nd))
    assert model_states(phi, 4, True, 0, nd).total == pytest.approx(16 * phi)  # fp32: 4 + 4 + 8
    assert model_states(phi, 2, False).total == 2 * phi  # inference: the weights


# --- pipeline stages: DP = brute force ---------------------------------------------------------

def _random_problem(rng: np.random.Generator) -> StageProblem:
    n = int(rng.integers(1, 10))
    p = int(rng.integers(1, min(n, 4) + 1))
    state = rng.uniform(0, 10, n)
    acts = rng.uniform(0, 3, n)
    in_flight = np.sort(rng.integers(1, 5, p).astype(float))[::-1]
    total = state.sum() + in_flight[0] * acts.sum()
    return StageProblem(times=rng.uniform(0.1, 5, n), send=rng.uniform(0, 2, n), state_bytes=state,
                        activation_bytes=acts, in_flight=in_flight,
                        limit=float(rng.uniform(0.1, 1.0) * total), names=tuple(f"L{i}" for i in range(n)))


@pytest.mark.parametrize("seed", range(50))
def test_stage_dp_equals_brute_force(seed):
    problem = _random_problem(np.random.default_rng(seed))
    try:
        expected = brute_force(problem)
    except Infeasible:
        with pytest.raises(Infeasible):
            partition(problem)
        return
    got = partition(problem)
    assert got.objective == pytest.approx(expected.objective, rel=1e-12)
    assert len(got.stages()) == problem.p and got.bounds[-1] == problem.n
    assert all(m <= problem.limit * (1 + 1e-12) for m in got.memory)


def test_stage_dp_memory_limit_and_errors():
    ones = np.ones(4) * GB
    # stage memory = state + in_flight x activations; 1F1B-like: the first stage keeps 3 micro-batches
    problem = StageProblem(times=np.ones(4), send=np.zeros(4), state_bytes=ones, activation_bytes=ones,
                           in_flight=np.array([3.0, 1.0]), limit=8 * GB, names=("a", "b", "c", "d"))
    balanced = partition(problem)
    assert balanced.bounds == (0, 2, 4) and balanced.memory == (8 * GB, 4 * GB) and balanced.objective == 2
    tighter = partition(StageProblem(**{**problem.__dict__, "limit": 6 * GB}))  # the first stage must shrink
    assert tighter.bounds == (0, 1, 4) and tighter.memory == (4 * GB, 6 * GB) and tighter.objective == 3
    with pytest.raises(Infeasible, match=r"no split of 4 layers into 2 stages fits in 5.9 GB per device "
                                         r"\(each would need at least 4 GB\)"):
        partition(StageProblem(**{**problem.__dict__, "limit": 5.9 * GB}))
    big = StageProblem(**{**problem.__dict__, "state_bytes": np.array([1, 50, 1, 1]) * GB, "limit": 10 * GB})
    with pytest.raises(Infeasible, match=r"layer 'b' alone needs 51 GB per device, over the limit of 10 GB"):
        partition(big)
    with pytest.raises(Infeasible, match="cannot split 4 layers into 5"):
        partition(StageProblem(**{**problem.__dict__, "in_flight": np.ones(5)}))


# --- mesh --------------------------------------------------------------------------------------

def test_parse_mesh():
    one = parse_mesh("8xH100")
    assert (one.nodes, one.devices_per_node, one.spec.name, one.size) == (1, 8, "nvidia-h100", 8)
    assert one.inter is None
    two = parse_mesh("2x8xa100")
    assert (two.nodes, two.devices_per_node, two.spec.name) == (2, 8, "nvidia-a100")
    assert two.inter.bandwidth == 25e9 and two.intra.bandwidth == 300e9 and str(two) == "2x8xnvidia-a100"
    assert parse_mesh("4xnvidia-h100").spec.name == "nvidia-h100"
    assert two.group(8, 1) == Group(8, 8) and two.group(2, 8) == Group(2, 1)
    assert two.group(4, 4) == Group(4, 2)  # ranks 0, 4 | 8, 12
    assert two.link(two.group(2, 8)) is two.inter and two.link(two.group(8, 1)) is two.intra


@pytest.mark.parametrize(("text", "words"), [
    ("8xB200", "unknown device 'B200'; known: H100, H200, A100, L4, "), ("H100", "expected DEVICESxSPEC"),
    ("2x8xL4", "no node_link"), ("0x8xH100", "at least 1"), ("8x", "expected")])
def test_parse_mesh_errors(text, words):
    with pytest.raises(UsageError, match=words):
        parse_mesh(text)


# --- planner -----------------------------------------------------------------------------------

def test_gpt3_175b_training_does_not_fit_on_16_a100():
    """Mixed-precision Adam needs 16 bytes per parameter: 2.8 TB, 175 GB on each of 16 devices."""
    with pytest.raises(Infeasible, match=r"16 bytes per parameter\) need 175 GB per device") as err:
        plan_parallel(parse_model("gpt3-175b"), parse_mesh("2x8xA100"), PlanOptions(batch=64, training=True))
    assert "\n" not in str(err.value) and "candidates over the memory limit" in str(err.value)


def test_gpt3_175b_inference_on_2x8_a100():
    mesh = parse_mesh("2x8xA100")
    search = plan_parallel(parse_model("gpt3-175b"), mesh, PlanOptions(batch=64))
    limit = 0.9 * 80e9
    assert search.memory_limit == limit
    for p in search.plans:
        assert p.dp * p.tp * p.pp == 16 and p.tp <= 8 and p.memory.total <= limit
        assert p.dp * p.micro_batches * p.micro_batch_size == 64
    chosen = search.chosen
    assert chosen.tp * chosen.pp >= 8  # 350 GB of bf16 weights need at least 5 devices per replica
    assert chosen.memory.weights == pytest.approx(350e9 / (chosen.tp * chosen.pp), rel=0.05)
    assert [p.step_seconds for p in search.plans] == sorted(p.step_seconds for p in search.plans)


def test_gpt3_13b_training_on_2x8_a100():
    model, mesh = parse_model("gpt3-13b"), parse_mesh("2x8xA100")
    search = plan_parallel(model, mesh, PlanOptions(batch=256, training=True))
    chosen = search.chosen
    assert chosen.memory.total <= 72e9 and chosen.tp <= 8 and chosen.zero in (0, 1, 2, 3)
    # no faster than the ideal: 6 x params x tokens at the assumed 50% of peak on all 16 devices
    tokens = 256 * 2048
    ideal = 6 * model.params * tokens / (16 * 312e12 * 0.5)
    assert ideal < chosen.step_seconds < 1.5 * ideal
    assert search.rejected["candidates over the memory limit"] > 0


def test_tiny_memory_limit_rejects_everything():
    words = r"no parallel plan for gpt2-xl on 8xnvidia-h100 fits in 0\.1 GB per device \(\d+ candidates over"
    with pytest.raises(Infeasible, match=words):
        plan_parallel(parse_model("gpt2-xl"), parse_mesh("8xH100"), PlanOptions(batch=8, memory_limit=0.1e9))


def test_planner_respects_tp_constraints_and_zero():
    search = plan_parallel(parse_model("gpt2-xl"), parse_mesh("8xH100"),  # 25 heads: tp = 1 only
                           PlanOptions(batch=16, training=True, zero=3, top=20))
    assert all(p.tp == 1 for p in search.plans)
    assert all(p.zero == 3 for p in search.plans)
    assert search.rejected["tensor-parallel degrees not dividing the 25 heads"] == 3
    with pytest.raises(UsageError, match="--training only"):
        plan_parallel(parse_model("gpt2-xl"), parse_mesh("8xH100"), PlanOptions(batch=16, zero=1))


# --- ONNX models -------------------------------------------------------------------------------

def test_from_onnx_bert_tiny(tmp_path):
    import models as example_models  # tests/conftest.py puts examples/ on the path

    path, _ = example_models.write("bert_tiny", tmp_path)
    model = from_onnx(path)
    # the compiler's Megatron plan: 2 heads, so tp 2 at most; per layer q, k, v and the MLP's
    # up projection split, attention split by heads, 2 row projections carrying the all-reduces
    assert model.dtype == "float32" and model.heads == 2 and len(model.layers) > 50
    matmuls = [x for x in model.layers if x.kind == "matmul"]
    assert Counter((x.tp, bool(x.params)) for x in matmuls) == {
        ("split", True): 4 * 2, ("split", False): 2 * 2, ("row", True): 2 * 2, ("replicated", True): 1}  # + pooler
    assert SHARDINGS["row"].forward == ("all-reduce",) and SHARDINGS["split"].forward == ()
    assert all(x.output_bytes >= 0 for x in model.layers)
    assert model.layers[-1].output_bytes == 0  # nothing is live after the last op
    search = plan_parallel(model, parse_mesh("2xH100"), PlanOptions(batch=4))
    assert search.chosen.dp * search.chosen.tp * search.chosen.pp == 2


# --- CLI ---------------------------------------------------------------------------------------

def test_cli_plan_text_and_json():
    runner = CliRunner()
    args = ["plan", "gpt2-xl", "--mesh", "8xH100", "--batch", "16", "--training"]
    text = runner.invoke(parallel, args)
    assert text.exit_code == 0, text.output
    for words in ("chosen plan (model prediction)", "runners-up", "memory/device", "ZeRO",
                  "predictions from the α-β and roofline models, not measurements"):
        assert words in text.output
    out = runner.invoke(parallel, [*args, "--json", "--top", "2", "--memory-limit", "40GB"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["memory_limit_bytes"] == 40e9 and data["training"] and len(data["runners_up"]) == 2
    chosen = data["chosen"]
    assert chosen["dp"] * chosen["tp"] * chosen["pp"] == 8 and chosen["memory_bytes"]["total"] <= 40e9
    assert math.isclose(chosen["step_seconds"], chosen["pipeline_seconds"] + chosen["data_parallel_seconds"])


@pytest.mark.parametrize(("args", "error", "words"), [
    (["--zero", "1"], UsageError, "--training only"),
    (["--memory-limit", "lots"], UsageError, "invalid --memory-limit"),
    (["--memory-limit", "1MB"], HetcError, "no parallel plan"),
    (["--mesh", "8xTPU"], UsageError, "unknown device"),
])
def test_cli_errors(args, error, words):
    base = {"--mesh": "8xH100"}
    argv = ["plan", "gpt2-xl", "--batch", "8"]
    for key, value in {**base, **dict(zip(args[::2], args[1::2], strict=True))}.items():
        argv += [key, value]
    result = CliRunner().invoke(parallel, argv)
    assert isinstance(result.exception, error) and words in str(result.exception)


def test_parse_bytes():
    assert parse_bytes("40GB") == 40e9
    assert parse_bytes("40") == 40e9
    assert parse_bytes("1.5GiB") == 1.5 * 2**30
    assert parse_bytes("4e10B") == 4e10
    with pytest.raises(UsageError):
        parse_bytes("0GB")
