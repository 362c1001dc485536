"""Tensor parallelism on transformers models exported by torch.onnx.export, as users bring them.

BERT (biases added constant-first, GELU from Erf, shared zero biases), GPT-2 (fused QKV
projection split three ways, Gemm on flattened tokens, tied LM head) and a Llama config
(no biases, rotary embeddings by slices and concats, grouped-query attention's repeat_kv, a
SiLU-gated MLP), from both of torch's exporters. The Megatron plan must find attention split
by heads and the MLP column- then row-parallel in every layer: two all-reduces per layer, the
heads (pooler, LM head) replicated with their reason; the rank processes must match
onnxruntime.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import hetc
from hetc.errors import UsageError
from tests.conftest import assert_close, ort_run

pytest.importorskip("torch", reason="torch exports the models and runs the collectives")
pytest.importorskip("transformers", reason="transformers builds the models")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import model_zoo

pytestmark = pytest.mark.torch

LAYERS = 2
SHAPES = {"input_ids": [2, 16], "attention_mask": [2, 16]}
# column-parallel projections per layer: q, k, v and the MLP's up (and Llama's gate)
COLUMNS = {"bert": 4, "gpt2": 4, "llama": 5}
MEGATRON = {"allreduce": 2 * LAYERS, "broadcast_from_worker0": 1}  # + the inputs' broadcast, fused into one


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(name, exporter) -> (model path, inputs, onnxruntime's outputs), exported on first use."""
    out, cache = tmp_path_factory.mktemp("exported"), {}

    def get(name: str, exporter: str):
        if (name, exporter) not in cache:
            path = out / f"{name}-{exporter}.onnx"
            model_zoo.export(model_zoo.ZOO[name], exporter, path)
            inputs = dict(np.load(path.with_suffix(".npz")))
            cache[name, exporter] = path, inputs, ort_run(path, inputs)
        return cache[name, exporter]

    return get


def _plan(path: Path):
    from hetc.frontends.onnx import load_model, to_relax
    from hetc.parallel.compile import _GRAPH_STAGES
    from hetc.parallel.projections import split_fused_projections
    from hetc.parallel.shard import tensor_parallel_plan
    from hetc.passes import run_pipeline

    mod, _ = run_pipeline(to_relax(load_model(path, SHAPES, None, None)), _GRAPH_STAGES)
    mod, fused = split_fused_projections(mod)
    return tensor_parallel_plan(mod["main"], 2), fused


def _run_and_check(compiled, inputs, reference) -> dict:
    from hetc.parallel.runtime import close_all

    try:
        outputs = compiled.run(inputs)
    finally:
        close_all()
    for got, ref in zip(outputs.values(), reference, strict=True):
        assert_close(got, ref)
    return compiled.manifest.parallel


@pytest.mark.parametrize("exporter", ["torchscript", pytest.param("dynamo", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_megatron_blocks_on_exported_graphs(exported, name, exporter):
    path, _, _ = exported(name, exporter)
    plan, fused = _plan(path)
    assert fused == (LAYERS if name == "gpt2" else 0)  # GPT-2's c_attn: one matmul, split into q, k, v
    assert [b["kind"] for b in plan.blocks] == ["attention", "mlp"] * LAYERS
    assert all(len(b["rows"]) == 1 for b in plan.blocks)  # one all-reduce per block
    assert plan.allreduces == 2 * LAYERS and plan.columns == COLUMNS[name] * LAYERS
    assert [len(b["columns"]) for b in plan.blocks if b["kind"] == "mlp"] == [COLUMNS[name] - 3] * LAYERS
    heads = [r for r in plan.replicated if r["layer"].startswith("matmul")]
    assert len(heads) == 1 and "reaches a model output" in heads[0]["reason"]  # pooler / LM head
    if name == "llama":  # grouped-query attention: 4 query heads, 2 key/value heads, 1 of each per rank
        attention = plan.blocks[0]["columns"]
        assert attention == ["matmul [64->64]", "matmul [64->32]", "matmul [64->32]"]


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_tp2_runs_exported_models(exported, name):
    path, inputs, reference = exported(name, "torchscript")
    compiled = hetc.compile(path, "cpu", SHAPES, tp=2)
    parallel = _run_and_check(compiled, inputs, reference)
    assert [r["collectives"] for r in parallel["ranks"]] == [MEGATRON] * 2
    assert parallel["collective_bytes"]["allreduce"] == 2 * LAYERS * 2 * 16 * 64 * 4  # [2, 16, 64] fp32 each
    assert [b["kind"] for b in parallel["blocks"]] == ["attention", "mlp"] * LAYERS


@pytest.mark.slow
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_tp2_pp2_runs_exported_models(exported, name, exporter):
    path, inputs, reference = exported(name, exporter)
    compiled = hetc.compile(path, "cpu", SHAPES, tp=2, pp=2)
    parallel = _run_and_check(compiled, inputs, reference)
    ranks = parallel["ranks"]
    assert [r["stage"] for r in ranks] == [0, 0, 1, 1]
    # no stage holds half a block: the two groups' all-reduces add up to the Megatron count
    leaders = [ranks[0], ranks[2]]
    assert sum(r["collectives"].get("allreduce", 0) for r in leaders) == 2 * LAYERS
    for group in (ranks[:2], ranks[2:]):
        assert group[0]["collectives"] == group[1]["collectives"]
    blocks = [b["kind"] for s in parallel["stage_shards"] for b in s["blocks"]]
    assert sorted(blocks) == sorted(["attention", "mlp"] * LAYERS)
    assert len(parallel["stage_send_bytes"]) == 1 and parallel["stage_send_bytes"][0] > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_tp2_runs_dynamo_exports(exported, name):
    path, inputs, reference = exported(name, "dynamo")
    parallel = _run_and_check(hetc.compile(path, "cpu", SHAPES, tp=2), inputs, reference)
    assert [r["collectives"] for r in parallel["ranks"]] == [MEGATRON] * 2


def test_a_block_left_whole_says_why(tmp_path):
    """A column whose split features reach a LayerNorm (a reduction over them) stays
    replicated; with nothing else to split, the error names the reason."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 8)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("LayerNormalization", ["h", "g"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                               numpy_helper.from_array(np.ones(16, np.float32), "g")])
    path = tmp_path / "ln.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(UsageError, match="no linear layer pair.*layer_norm"):
        hetc.compile(path, "cpu", tp=2)


def test_an_op_tvm_cannot_shard_is_a_one_line_error(tmp_path):
    """TVM's distributed passes need a sharding rule for every op of the graph, split or not
    (BLOOM's ALiBi uses CumSum, which has none): a clear error, not TVM's internal text."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"]), helper.make_node("CumSum", ["x", "axis"], ["c"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1"),
         numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w2"),
         numpy_helper.from_array(np.array(1, np.int64), "axis")])
    path = tmp_path / "cumsum.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(UsageError, match=r"^--tp: TVM's distributed passes cannot shard this graph: .*cumsum[^\n]*$"):
        hetc.compile(path, "cpu", tp=2)
