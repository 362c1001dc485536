"""Symbolic dims and kernel fusion: a ``match_cast`` binding dims at run time splits its
dataflow block there, the ops on each side still fused, and one that only restates dims already
bound leaves the block whole (``passes/shape_binding.py``); a a reshape between symbolic
shapes is a view, not a kernel (``passes/phases._symbolic_reshape_as_view``)."""

from __future__ import annotations

import numpy as np
from conftest import assert_close
from onnx import TensorProto, helper, numpy_helper
from tvm import relax
from tvm.script import relax as R
from tvm.script import tirx as T

import hetc
from hetc.passes.shape_binding import binds_dims_in_dataflow, split_at_runtime_shapes

RNG = np.random.default_rng(5)


def test_match_cast_restating_bound_dims_does_not_unfuse():
    @R.function
    def restates(x: R.Tensor(("n", "t"), "float32")):
        n, t = T.int64(), T.int64()
        with R.dataflow():
            y = R.strided_slice(x, axes=[1], begin=[1], end=[t])
            z = R.match_cast(y, R.Tensor((n, t - 1), "float32"))
            out = R.add(z, z)
            R.output(out)
        return out

    @R.function
    def binds_new(x: R.Tensor(("n", "t"), "float32")):
        with R.dataflow():
            y = R.unique(x)
            m = T.int64()
            z = R.match_cast(y, R.Tensor((m,), "float32"))
            out = R.add(z, z)
            R.output(out)
        return out

    assert not binds_dims_in_dataflow(restates)
    assert binds_dims_in_dataflow(binds_new)



def test_split_at_a_runtime_shape_keeps_both_sides_dataflow():
    @R.function
    def binds(x: R.Tensor(("n", "t"), "float32")):
        with R.dataflow():
            a = R.exp(x)
            b = R.add(a, a)
            y = R.unique(b)
            m = T.int64()
            z = R.match_cast(y, R.Tensor((m,), "float32"))
            out = R.add(z, z)
            s = R.sum(a)  # a crosses the split: it must leave its block as a plain var
            res = R.multiply(out, s)
            R.output(res)
        return res

    split = split_at_runtime_shapes(binds)
    kinds = [(type(b).__name__, [x.var.name for x in b.bindings]) for b in split.body.blocks]
    assert kinds == [("DataflowBlock", ["a", "b", "y"]), ("BindingBlock", ["z"]),
                     ("DataflowBlock", ["out", "s", "res"])], kinds
    first = split.body.blocks[0].bindings
    assert not isinstance(first[0].var, relax.DataflowVar)  # used after the split
    assert isinstance(first[1].var, relax.DataflowVar)  # used only in its block
    assert not binds_dims_in_dataflow(split)


def test_ops_around_a_runtime_shape_stay_fused():
    """Ops before and after a NonZero (which binds its count at run time) fuse: SSDlite320's
    backbone ran unfused, one kernel per op, when any match_cast unfused the whole function."""
    w = RNG.standard_normal((6, 6)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "one"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Greater", ["r", "half"], ["g"]),
             helper.make_node("NonZero", ["g"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             helper.make_node("GatherND", ["r", "idx"], ["picked"]),
             helper.make_node("Mul", ["picked", "two"], ["p2"]),
             helper.make_node("Sigmoid", ["p2"], ["y"])]
    consts = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(1), "one"),
              numpy_helper.from_array(np.float32(0.5), "half"), numpy_helper.from_array(np.float32(2), "two")]
    graph = helper.make_graph(nodes, "nonzero", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["k"])], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    compiled = hetc.compile(model, "cpu")
    kernels = list(compiled.report["kernels"])
    assert any("matmul" in k and "relu" in k for k in kernels), kernels  # before the NonZero
    assert any("multiply" in k and "sigmoid" in k for k in kernels), kernels  # after it
    from conftest import ort_run

    for seed in range(3):
        x = {"x": np.random.default_rng(seed).standard_normal((4, 6)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


def _reshape_model():
    w = RNG.standard_normal((4, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("MatMul", ["r", "w"], ["m"]),
         helper.make_node("Relu", ["m"], ["y"])], "reshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "t", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "t2", 4])],
        [numpy_helper.from_array(np.array([0, -1, 4], np.int64), "shape"), numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, w


def test_symbolic_reshape_is_a_view():
    model, w = _reshape_model()
    compiled = hetc.compile(model, "cpu")
    assert not [name for name in compiled.report["kernels"] if "reshape" in name], compiled.report["kernels"]
    for n, t in ((1, 5), (3, 11)):
        x = RNG.standard_normal((n, t, 8)).astype(np.float32)
        assert_close(compiled.run({"x": x})["y"], np.maximum(x.reshape(n, 2 * t, 4) @ w, 0), rel=1e-5)


def test_reshapes_after_a_strided_conv_are_views_in_the_vm():
    """Reshapes over dims a strided conv computes (``(t - 3) // 2 + 1``) reach the VM as
    ``R.reshape``; its lowering (``passes/vm_pipeline.py``) keeps them views instead of TVM's
    unscheduled copy kernels (1.1 ms of wav2vec2-conformer's 2 ms, 2-core Zen 5, AVX-512)."""
    import re

    from conftest import ort_run

    w = (RNG.standard_normal((8, 8, 3)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], strides=[2]),
             helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["t", "shape"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv_reshape", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8, "t"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "f", 2, 4])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([0, 0, 2, 4], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    compiled = hetc.compile(model, "cpu")
    text = compiled._runners[0].module.as_text()
    assert "vm.builtin.reshape" in text
    assert not re.findall(r"call\s+reshape", text), text
    for n, t in ((1, 9), (2, 30)):
        x = {"x": RNG.standard_normal((n, 8, t)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)
