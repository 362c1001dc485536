"""Parallel compilation pieces that need no second process: collective fusion, rebatching a
model for micro-batches, and the stage cut (the planner's DP)."""

from __future__ import annotations

import models as example_models
import numpy as np
import onnx
import pytest
import tvm
from onnx import helper
from onnx_util import make, tensor
from tvm import relax

from hetc.errors import UsageError
from hetc.parallel import pipeline
from hetc.parallel.fuse import fuse_collectives
from hetc.parallel.shard import collectives, packed_name


def _allreduce(x: relax.Expr, op: int = 0) -> relax.Call:
    return relax.call_dps_packed("runtime.disco.allreduce", [x, relax.ShapeExpr([op]), relax.prim_value(0)], x.ty)


def _broadcast(x: relax.Expr) -> relax.Call:
    return relax.call_dps_packed("runtime.disco.broadcast_from_worker0", [x, relax.prim_value(0)], x.ty)


def _module(build) -> tvm.IRModule:
    a = relax.Var("a", relax.TensorType((2, 3), "float32"))
    b = relax.Var("b", relax.TensorType((4,), "float32"))
    c = relax.Var("c", relax.TensorType((2, 3), "int64"))
    bb = relax.BlockBuilder()
    with bb.function("main", [a, b, c]):
        with bb.dataflow():
            out = bb.emit_output(build(bb, a, b, c))
        bb.emit_func_output(out)
    return bb.get()


def test_independent_collectives_of_one_kind_fuse():
    def build(bb, a, b, c):
        ra, rb = bb.emit(_allreduce(a)), bb.emit(_allreduce(b))  # independent sums: one call
        rmax = bb.emit(_allreduce(a, op=3))  # a max is another collective
        ba, bc = bb.emit(_broadcast(a)), bb.emit(_broadcast(c))  # two dtypes: two calls
        return relax.Tuple([ra, rb, rmax, ba, bc])

    mod = _module(build)
    assert collectives(mod) == {"allreduce": 3, "broadcast_from_worker0": 2}
    fused = fuse_collectives(mod)
    assert collectives(fused) == {"allreduce": 2, "broadcast_from_worker0": 2}
    out = fused["main"].ret_ty
    assert [tuple(int(d) for d in f.shape) for f in out.fields] == [(2, 3), (4,), (2, 3), (2, 3), (2, 3)]
    sizes = sorted(int(call.ty.shape[0]) for call in _calls(fused, "allreduce") if len(call.ty.shape) == 1)
    assert sizes == [10]  # 6 + 4 elements in the fused sum


def test_a_collective_that_reads_another_result_does_not_fuse():
    def build(bb, a, b, c):
        first = bb.emit(_allreduce(a))
        between = bb.emit(relax.op.add(first, a))  # reads the first result
        return relax.Tuple([bb.emit(_allreduce(between)), bb.emit(_allreduce(b))])

    fused = fuse_collectives(_module(build))
    # the first stands alone (its result is read before the others); the last two fuse
    assert collectives(fused) == {"allreduce": 2}


def _calls(mod: tvm.IRModule, name: str) -> list:
    found = []

    def visit(expr):
        if packed_name(expr) == f"runtime.disco.{name}":
            found.append(expr)

    relax.analysis.post_order_visit(mod["main"], visit)
    return found


def test_rebatch_rewrites_the_batch_and_fixed_reshapes():
    model = example_models.bert(1, 32, 2, 64, seq=8, batch=6)
    small = pipeline.rebatch(model, 3)
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in small.graph.output}
    assert dims == {"last_hidden_state": [2, 8, 32], "pooler_output": [2, 32]}
    onnx.checker.check_model(small, full_check=True)
    # the rebatched model computes the same function on a slice of the batch
    import onnxruntime as ort

    inputs = example_models.sample_inputs(model)
    full = ort.InferenceSession(model.SerializeToString()).run(None, inputs)
    part = ort.InferenceSession(small.SerializeToString()).run(None, {k: v[2:4] for k, v in inputs.items()})
    for f, p in zip(full, part, strict=True):
        np.testing.assert_allclose(p, f[2:4], rtol=1e-5, atol=1e-6)


def test_rebatch_refuses_what_it_cannot_split():
    x = tensor("x", (4, 6))
    fixed = make([helper.make_node("Reshape", ["x", "s"], ["y"])], [x], [tensor("y", (2, 12))],
                 {"s": np.array([2, 12], np.int64)})
    with pytest.raises(UsageError, match="--micro-batches 2: .*batch"):
        pipeline.rebatch(fixed, 2)
    relu = make([helper.make_node("Relu", ["x"], ["y"])], [x], [tensor("y", (4, 6))])
    with pytest.raises(UsageError, match="--micro-batches 3 does not divide the batch of 4"):
        pipeline.rebatch(relu, 3)


def test_stage_cut_is_the_planner_dp():
    """The cut balances the stages' FLOPs: on a chain of equal matmuls, an even split."""
    rng = np.random.default_rng(0)
    nodes, inits = [], {}
    for i in range(6):
        inits[f"w{i}"] = rng.normal(size=(16, 16)).astype(np.float32)
        nodes.append(helper.make_node("MatMul", [f"h{i}", f"w{i}"], [f"h{i + 1}"]))
    model = make(nodes, [tensor("h0", (4, 16))], [tensor("h6", (4, 16))], inits)
    stages = pipeline.split(model, 3)
    assert [len(s.model.graph.node) for s in stages] == [2, 2, 2]
    assert [s.weight_bytes for s in stages] == [2 * 16 * 16 * 4] * 3
    assert stages[0].send == stages[1].receive and stages[1].send == stages[2].receive
    with pytest.raises(UsageError, match="--pp 7: the model has only 6 op"):
        pipeline.split(model, 7)


def test_ranks_get_cores_of_their_own(monkeypatch):
    from hetc.parallel import runtime

    monkeypatch.setattr(runtime.os, "sched_getaffinity", lambda _pid: {4, 5, 6, 7}, raising=False)
    assert [runtime._cores(rank, 2, 0) for rank in range(2)] == [[4, 5], [6, 7]]
    assert [runtime._cores(rank, 4, 1) for rank in range(4)] == [[4], [5], [6], [7]]
    assert runtime._cores(2, 3, 2) == [4, 5]  # more threads than cores: they wrap around
