"""If, Loop, Scan and SequenceMap (ops/control_flow.py): handwritten models vs onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import assert_close, ort_run
from onnx import TensorProto, helper
from onnx_util import make, tensor
from tvm import relax, tirx

import hetc
from hetc.errors import ConversionError
from hetc.frontends.onnx import load_model, to_relax

F32, I64, BOOL = np.float32, np.int64, np.bool_


def _check(model, feeds_list, rel=1e-5, **kwargs):
    """Compile once, run every feed dict, compare each output with onnxruntime."""
    compiled = hetc.compile(model, **kwargs)
    for feeds in feeds_list:
        expected = ort_run(model, feeds)
        got = list(compiled.run(feeds).values())
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            assert_close(np.asarray(g), e, rel=rel)
    return compiled


def _functions(model) -> list[str]:
    return [gv.name_hint for gv, _ in to_relax(load_model(model)).functions_items()]


def _graph(nodes, inputs, outputs, inits=None, name="body"):
    from onnx import numpy_helper
    return helper.make_graph(nodes, name, inputs, outputs,
                             [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])


def _scalar(name, dtype):
    return tensor(name, [], dtype)


# --- Loop -------------------------------------------------------------------------------------

def _accumulate_loop(trip: str, cond: str, cond_out_node, opset=17):
    """y_{i+1} = y_i * 0.5 + w + i  (w from the outer scope), scan output y_{i+1}."""
    body = _graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["y_in", "half"], ["h"]),
         helper.make_node("Add", ["h", "w"], ["hw"]),
         helper.make_node("Add", ["hw", "fi"], ["y_out"]),
         helper.make_node("Identity", ["y_out"], ["scan"]),
         cond_out_node],
        [_scalar("i", I64), _scalar("c_in", BOOL), tensor("y_in", ["n", 3])],
        [_scalar("c_out", BOOL), tensor("y_out", ["n", 3]), tensor("scan", ["n", 3])],
        {"half": np.array(0.5, F32)})
    node = helper.make_node("Loop", [trip, cond, "y0"], ["y", "ys"], body=body)
    inputs = [tensor("y0", ["n", 3]), tensor("w", ["n", 3])]
    inputs += [_scalar(n, d) for n, d in ((trip, I64), (cond, BOOL)) if n and n not in ("M_const",)]
    return make([node], inputs, [tensor("y", ["n", 3]), tensor("ys", ["k", "n", 3])], opset=opset,
                initializers={"M_const": np.array(4, I64)} if trip == "M_const" else None)


def test_loop_symbolic_trip_count_outer_scope_and_scan_output():
    model = _accumulate_loop("M", "c", helper.make_node("Identity", ["c_in"], ["c_out"]))
    rng = np.random.default_rng(0)
    feeds = [{"y0": rng.normal(size=(n, 3)).astype(F32), "w": rng.normal(size=(n, 3)).astype(F32),
              "M": np.array(m, I64), "c": np.array(True)} for n, m in ((2, 5), (4, 1), (3, 9))]
    compiled = _check(model, feeds)
    # cond false: the body never runs (onnxruntime gives the empty scan output shape [0, 0, 3])
    y, ys = compiled.run({**feeds[0], "c": np.array(False)}).values()
    assert_close(y, feeds[0]["y0"])
    assert ys.shape == (0, 2, 3)
    assert any(name.endswith("_loop0") for name in _functions(model))  # a run-time trip count: recursion


def test_loop_constant_trip_count_is_unrolled():
    model = _accumulate_loop("M_const", "", helper.make_node("Identity", ["c_in"], ["c_out"]))
    rng = np.random.default_rng(1)
    _check(model, [{"y0": rng.normal(size=(2, 3)).astype(F32), "w": rng.normal(size=(2, 3)).astype(F32)}])
    assert not any("_loop" in name for name in _functions(model))


def test_loop_while_condition_ends_it():
    """No trip count: the body's condition (sum(y) < 50) ends the loop, after a number of
    iterations only the run knows."""
    body = _graph(
        [helper.make_node("Mul", ["y_in", "two"], ["y_out"]),
         helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["c_out"]),
         helper.make_node("Identity", ["y_out"], ["scan"])],
        [_scalar("i", I64), _scalar("c_in", BOOL), tensor("y_in", [2])],
        [_scalar("c_out", BOOL), tensor("y_out", [2]), tensor("scan", [2])],
        {"two": np.array(2.0, F32), "limit": np.array(50.0, F32)})
    model = make([helper.make_node("Loop", ["", "c", "y0"], ["y", "ys"], body=body)],
                 [_scalar("c", BOOL), tensor("y0", [2])], [tensor("y", [2]), tensor("ys", ["k", 2])])
    _check(model, [{"c": np.array(True), "y0": np.array(v, F32)} for v in ([0.5, 0.25], [3, 4], [40, 20])])


def test_loop_carried_value_that_grows():
    """The carried tensor gets one element more each iteration (its shape is not loop-invariant)."""
    body = _graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Unsqueeze", ["fi", "zero"], ["fi1"]),
         helper.make_node("Concat", ["v_in", "fi1"], ["v_out"], axis=0),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        [_scalar("i", I64), _scalar("c_in", BOOL), tensor("v_in", [None])],
        [_scalar("c_out", BOOL), tensor("v_out", [None])], {"zero": np.array([0], I64)})
    model = make([helper.make_node("Loop", ["M", "", "v0"], ["v"], body=body)],
                 [_scalar("M", I64), tensor("v0", [2])], [tensor("v", [None])])
    _check(model, [{"M": np.array(m, I64), "v0": np.array([7, 8], F32)} for m in (3, 20)])


def test_loop_state_that_grows_is_not_fixed_to_the_first_iterations_inferred_shape():
    """Mask R-CNN's mask pasting: ``res = cat(res, row)`` from ``res = zeros(0, 4)``. torch's
    exporter declares the body's input with the first iteration's shape, ``[0, 4]``, so ONNX's
    shape inference says ``[1, 4]`` for every ``cat``; that size must not become a check on the
    loop's state (it is 2 in the second iteration)."""
    body = _graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Expand", ["fi", "row_shape"], ["row"]),
         helper.make_node("Concat", ["v_in", "row"], ["v_out"], axis=0),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        [_scalar("i", I64), _scalar("c_in", BOOL), tensor("v_in", [0, 4])],
        [_scalar("c_out", BOOL), tensor("v_out", [None, 4])], {"row_shape": np.array([1, 4], I64)})
    model = make([helper.make_node("Loop", ["M", "", "v0"], ["v"], body=body)],
                 [_scalar("M", I64)], [tensor("v", [None, 4])], initializers={"v0": np.zeros((0, 4), F32)})
    inferred = onnx.shape_inference.infer_shapes(model).graph.node[0].attribute[0].g
    assert any(v.name == "v_out" and v.type.tensor_type.shape.dim[0].dim_value == 1
               for v in [*inferred.value_info, *inferred.output])  # the premise: ONNX says [1, 4]
    _check(model, [{"M": np.array(m, I64)} for m in (1, 3, 20)])


@pytest.mark.parametrize("m", [0, 1, 50000])
def test_loop_many_iterations(m):
    """Far more iterations than the VM's recursion could take in one chain (about 3000)."""
    body = _graph([helper.make_node("Add", ["s_in", "one"], ["s_out"]),
                   helper.make_node("Identity", ["c_in"], ["c_out"])],
                  [_scalar("i", I64), _scalar("c_in", BOOL), tensor("s_in", [1])],
                  [_scalar("c_out", BOOL), tensor("s_out", [1])], {"one": np.array([1.0], F32)})
    model = make([helper.make_node("Loop", ["M", "", "s0"], ["s"], body=body)],
                 [_scalar("M", I64), tensor("s0", [1])], [tensor("s", [1])])
    out = hetc.compile(model).run({"M": np.array(m, I64), "s0": np.zeros(1, F32)})["s"]
    assert out.tolist() == [float(m)]


def test_loop_body_with_if_and_nested_loop():
    """Even iterations add x, odd ones run an inner Loop (x's row count times) that doubles."""
    inner = _graph([helper.make_node("Mul", ["t_in", "two"], ["t_out"]),
                    helper.make_node("Identity", ["ci"], ["co"])],
                   [_scalar("j", I64), _scalar("ci", BOOL), tensor("t_in", ["n", 2])],
                   [_scalar("co", BOOL), tensor("t_out", ["n", 2])], name="inner")
    then = _graph([helper.make_node("Add", ["y_in", "x"], ["a"])], [], [tensor("a", ["n", 2])], name="then")
    other = _graph([helper.make_node("Shape", ["x"], ["shp"], end=1),
                    helper.make_node("Squeeze", ["shp"], ["rows"]),
                    helper.make_node("Loop", ["rows", "", "y_in"], ["b"], body=inner)],
                   [], [tensor("b", ["n", 2])], name="else")
    body = _graph([helper.make_node("Mod", ["i", "two_i"], ["r"]),
                   helper.make_node("Equal", ["r", "zero_i"], ["even"]),
                   helper.make_node("If", ["even"], ["y_out"], then_branch=then, else_branch=other),
                   helper.make_node("Identity", ["c_in"], ["c_out"])],
                  [_scalar("i", I64), _scalar("c_in", BOOL), tensor("y_in", ["n", 2])],
                  [_scalar("c_out", BOOL), tensor("y_out", ["n", 2])],
                  {"two_i": np.array(2, I64), "zero_i": np.array(0, I64), "two": np.array(2.0, F32)})
    model = make([helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)],
                 [_scalar("M", I64), tensor("x", ["n", 2])], [tensor("y", ["n", 2])])
    rng = np.random.default_rng(2)
    _check(model, [{"M": np.array(m, I64), "x": rng.normal(size=(n, 2)).astype(F32)}
                   for m, n in ((5, 2), (4, 3))])


def test_loop_body_with_constant_of_shape_of_a_run_time_shape():
    """A ConstantOfShape of a shape computed from the iteration number (Mask R-CNN's
    paste_masks_in_image): TVM's ConvertToDataflow left the body function using variables it no
    longer bound; the importer keeps such a function as it was (``importer._closed``)."""
    body = _graph([helper.make_node("Reshape", ["i", "one"], ["i1"]),
                   helper.make_node("Add", ["i1", "one"], ["n"]),
                   helper.make_node("Concat", ["n", "two"], ["shape"], axis=0),
                   helper.make_node("ConstantOfShape", ["shape"], ["z"],
                                    value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
                   helper.make_node("ReduceSum", ["z"], ["s"], keepdims=0),
                   helper.make_node("Add", ["acc", "s"], ["acc_out"]),
                   helper.make_node("Identity", ["c"], ["c_out"])],
                  [_scalar("i", I64), _scalar("c", BOOL), _scalar("acc", F32)],
                  [_scalar("c_out", BOOL), _scalar("acc_out", F32)],
                  {"one": np.array([1], I64), "two": np.array([2], I64)})
    model = make([helper.make_node("Loop", ["trip", "cond", "a0"], ["a"], body=body)],
                 [_scalar("trip", I64), _scalar("cond", BOOL), _scalar("a0", F32)], [_scalar("a", F32)])
    for f in to_relax(load_model(model)).functions.values():
        assert not isinstance(f, relax.Function) or not relax.analysis.free_vars(f)
    _check(model, [{"trip": np.array(n, I64), "cond": np.array(True), "a0": np.array(0.5, F32)} for n in (3, 20)])


def _sequence_loop(trip: int, cond_source: str):
    """``seq += [x * i]`` for ``trip`` iterations, concatenated: the body's condition output is
    ``Identity(cond_source)`` (its own ``c_in``, or the enclosing graph's constant ``true``)."""
    body = _graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["x", "fi"], ["xi"]),
         helper.make_node("SequenceInsert", ["seq_in", "xi"], ["seq_out"]),
         helper.make_node("Identity", [cond_source], ["c_out"])],
        [_scalar("i", I64), _scalar("c_in", BOOL),
         helper.make_tensor_sequence_value_info("seq_in", TensorProto.FLOAT, [3])],
        [_scalar("c_out", BOOL), helper.make_tensor_sequence_value_info("seq_out", TensorProto.FLOAT, [3])])
    cond = "true" if cond_source == "true" else ""
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], dtype=TensorProto.FLOAT),
             helper.make_node("Loop", ["M", cond, "empty"], ["seq"], body=body),
             helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0)]
    inits = {"M": np.array(trip, I64), **({"true": np.array(True)} if cond else {})}
    return make(nodes, [tensor("x", [3])], [tensor("y", [3 * trip])], inits)


def test_loop_carried_sequence_with_constant_trip_count():
    _check(_sequence_loop(3, "c_in"), [{"x": np.array([1, 2, 3], F32)}])


@pytest.mark.parametrize("trip", [1, 2])
def test_loop_with_the_outer_true_as_its_condition_is_unrolled(trip):
    """torch's exporter (torchvision MViT's pooling) writes ``cond_out = Identity(outer constant
    true)`` and a trip count of 1: no early exit, so a loop-carried sequence is unrolled."""
    _check(_sequence_loop(trip, "true"), [{"x": np.array([1, 2, 3], F32)}])


def test_unrolled_iteration_number_declared_as_a_vector_stays_a_constant():
    """MViT's pooling loop: the body declares its iteration number as ``[1]`` and slices
    ``x[table[i]:table[i + 1]]``; unrolled, the bounds are constants, so the slice's shape is
    known at compile time (a run-time bound made it unknown, and a later Concat lost its rank)."""
    body = _graph(
        [helper.make_node("Gather", ["table", "i"], ["lo"]),
         helper.make_node("Add", ["i", "one"], ["i1"]),
         helper.make_node("Gather", ["table", "i1"], ["hi"]),
         helper.make_node("Slice", ["x", "lo", "hi", "axis"], ["part"]),
         helper.make_node("SequenceInsert", ["seq_in", "part"], ["seq_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        [tensor("i", [1], I64), _scalar("c_in", BOOL),
         helper.make_tensor_sequence_value_info("seq_in", TensorProto.FLOAT, ["b", None])],
        [_scalar("c_out", BOOL), helper.make_tensor_sequence_value_info("seq_out", TensorProto.FLOAT, ["b", None])],
        {"table": np.array([0, 1, 5], I64), "one": np.array([1], I64), "axis": np.array([1], I64)})
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], dtype=TensorProto.FLOAT),
             helper.make_node("Loop", ["M", "", "empty"], ["seq"], body=body),
             helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=1)]
    model = make(nodes, [tensor("x", ["b", 6])], [tensor("y", ["b", 5])], {"M": np.array(2, I64)})
    out = to_relax(load_model(model))["main"].ret_ty
    assert isinstance(out.shape.values[1], tirx.IntImm) and int(out.shape.values[1]) == 5, out
    _check(model, [{"x": np.arange(12, dtype=F32).reshape(2, 6)}])


def test_loop_carried_sequence_with_run_time_trip_count_is_refused():
    body = _graph([helper.make_node("SequenceInsert", ["seq_in", "x"], ["seq_out"]),
                   helper.make_node("Identity", ["c_in"], ["c_out"])],
                  [_scalar("i", I64), _scalar("c_in", BOOL),
                   helper.make_tensor_sequence_value_info("seq_in", TensorProto.FLOAT, [3])],
                  [_scalar("c_out", BOOL),
                   helper.make_tensor_sequence_value_info("seq_out", TensorProto.FLOAT, [3])])
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], dtype=TensorProto.FLOAT),
             helper.make_node("Loop", ["M", "", "empty"], ["seq"], body=body, name="grow"),
             helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0)]
    model = make(nodes, [tensor("x", [3]), _scalar("M", I64)], [tensor("y", [None])])
    with pytest.raises(ConversionError, match=r"node 'grow' \(Loop\): loop-carried value 0 is not a tensor"):
        hetc.compile(model)


# --- If ---------------------------------------------------------------------------------------

def test_if_runs_only_the_taken_branch():
    """The then branch reshapes x to a run-time shape that is wrong when cond is false, as
    onnxruntime never runs it then; computing both branches would fail."""
    then = _graph([helper.make_node("Reshape", ["x", "shape"], ["r"]),
                   helper.make_node("ReduceSum", ["r", "axis1"], ["s"], keepdims=0)],
                  [], [tensor("s", [None])],
                  {"axis1": np.array([1], I64)}, name="then")
    other = _graph([helper.make_node("ReduceSum", ["x", "axis1b"], ["s2"], keepdims=0)],
                   [], [tensor("s2", [None])],
                   {"axis1b": np.array([1], I64)}, name="else")
    model = make([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                 [_scalar("c", BOOL), tensor("x", [2, 6]), tensor("shape", [2], I64)], [tensor("y", [None])])
    x = np.arange(12, dtype=F32).reshape(2, 6)
    _check(model, [{"c": np.array(True), "x": x, "shape": np.array([3, 4], I64)},
                   {"c": np.array(False), "x": x, "shape": np.array([5, 5], I64)}])


def test_if_branches_with_symbolic_shapes_both_run():
    """Both branches allocate intermediates of a symbolic size (TVM's memory planner, given them
    as branches of one function, hands the else branch storage only the then branch allocates)."""
    def branch(name, op):
        return _graph([helper.make_node("Add", ["x", f"{name}_k"], [f"{name}_a"]),
                       helper.make_node(op, [f"{name}_a", f"{name}_a"], [f"{name}_b"]),
                       helper.make_node("Relu", [f"{name}_b"], [f"{name}_r"]),
                       helper.make_node("Concat", [f"{name}_r", f"{name}_a"], [f"{name}_y"], axis=0)],
                      [], [tensor(f"{name}_y", [None, 4])], {f"{name}_k": np.array(1.5, F32)}, name=name)

    node = helper.make_node("If", ["c"], ["y"], then_branch=branch("t", "Mul"),
                            else_branch=branch("e", "Sub"))
    model = make([node],
                 [_scalar("c", BOOL), tensor("x", ["n", 4])], [tensor("y", [None, 4])])
    x = np.random.default_rng(7).normal(size=(3, 4)).astype(F32)
    _check(model, [{"c": np.array(v), "x": x} for v in (True, False, True)])


def test_if_branch_adds_outer_values_of_one_expression_dim():
    """torchvision's batched NMS: boxes ``[k1 + k2, 4]`` and per-class offsets ``[k1 + k2]``
    (two concats of the same run-time sizes) meet in an Add inside the If's branch. Inside the
    branch function both must get one dim, or the Add infers no shape and nothing after it can
    be legalized (SSDlite: 'emit_te now only supports Tensor that has ShapeExpr shape')."""
    other = _graph([helper.make_node("Unsqueeze", ["offsets", "one"], ["col"]),
                    helper.make_node("Add", ["boxes", "col"], ["moved"]),
                    helper.make_node("Unsqueeze", ["moved", "zero"], ["y"])],
                   [], [tensor("y", [1, None, 4])], {"one": np.array([1], I64), "zero": np.array([0], I64)},
                   name="else")
    then = _graph([helper.make_node("Unsqueeze", ["boxes", "zero_t"], ["y_t"])], [],
                  [tensor("y_t", [1, None, 4])], {"zero_t": np.array([0], I64)}, name="then")
    model = make([helper.make_node("Concat", ["a", "b"], ["boxes"], axis=0),
                  helper.make_node("Concat", ["oa", "ob"], ["offsets"], axis=0),
                  helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                 [_scalar("c", BOOL), tensor("a", ["k1", 4]), tensor("b", ["k2", 4]),
                  tensor("oa", ["k1"]), tensor("ob", ["k2"])], [tensor("y", [1, None, 4])])
    rng = np.random.default_rng(3)
    feeds = {"a": rng.normal(size=(3, 4)).astype(F32), "b": rng.normal(size=(2, 4)).astype(F32),
             "oa": rng.normal(size=3).astype(F32), "ob": rng.normal(size=2).astype(F32)}
    _check(model, [{"c": np.array(v), **feeds} for v in (False, True)])


def test_if_with_constant_condition_converts_one_branch():
    then = _graph([helper.make_node("Add", ["x", "x"], ["a"])], [], [tensor("a", [2])], name="then")
    other = _graph([helper.make_node("Neg", ["x"], ["b"])], [], [tensor("b", [2])], name="else")
    model = make([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                 [tensor("x", [2])], [tensor("y", [2])], {"c": np.array([True])})
    _check(model, [{"x": np.array([1, 2], F32)}])
    ifs = []
    relax.analysis.post_order_visit(to_relax(load_model(model))["main"],
                                    lambda e: ifs.append(e) if isinstance(e, relax.If) else None)
    assert not ifs


def test_if_with_sequence_output_inside_the_graph():
    then = _graph([helper.make_node("SequenceConstruct", ["x", "x"], ["s"])], [],
                  [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])], name="then")
    other = _graph([helper.make_node("Neg", ["x"], ["nx"]),
                    helper.make_node("SequenceConstruct", ["nx", "x"], ["t"])],
                   [], [helper.make_tensor_sequence_value_info("t", TensorProto.FLOAT, [2])], name="else")
    nodes = [helper.make_node("If", ["c"], ["seq"], then_branch=then, else_branch=other),
             helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0)]
    model = make(nodes, [_scalar("c", BOOL), tensor("x", [2])], [tensor("y", [4])])
    _check(model, [{"c": np.array(v), "x": np.array([1, 2], F32)} for v in (True, False)])


# --- Scan -------------------------------------------------------------------------------------

def _cumsum_scan(length, opset=16, reverse=False):
    """Running sum of x's rows along axis 1 (reversed), plus the running product of a second
    input, outputs stacked along axis 1 (reversed)."""
    body = _graph([helper.make_node("Add", ["s_in", "xs"], ["s_out"]),
                   helper.make_node("Mul", ["s_out", "zs"], ["p"]),
                   helper.make_node("Add", ["p", "w"], ["e"])],
                  [tensor("s_in", [2]), tensor("xs", [2]), tensor("zs", [2])],
                  [tensor("s_out", [2]), tensor("e", [2])])
    rev = 1 if reverse else 0
    node = helper.make_node("Scan", ["s0", "x", "z"], ["s", "ys"], body=body, num_scan_inputs=2,
                            scan_input_axes=[1, 0], scan_input_directions=[rev, 0],
                            scan_output_axes=[-1], scan_output_directions=[rev])
    inputs = [tensor("s0", [2]), tensor("x", [2, length]), tensor("z", [length, 2]), tensor("w", [2])]
    return make([node], inputs, [tensor("s", [2]), tensor("ys", [2, length])], opset=opset)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("length", [5, "t"])
def test_scan_axes_and_directions(length, reverse):
    model = _cumsum_scan(length, reverse=reverse)
    rng = np.random.default_rng(3)
    sizes = [5] if length == 5 else [5, 1, 30]
    feeds = [{"s0": rng.normal(size=2).astype(F32), "x": rng.normal(size=(2, t)).astype(F32),
              "z": rng.normal(size=(t, 2)).astype(F32), "w": rng.normal(size=2).astype(F32)} for t in sizes]
    _check(model, feeds)
    assert any("_loop" in name for name in _functions(model)) == (length == "t")


def test_scan_opset8_batch():
    body = _graph([helper.make_node("Add", ["s_in", "xs"], ["s_out"]),
                   helper.make_node("Identity", ["s_out"], ["e"])],
                  [tensor("s_in", [2]), tensor("xs", [2])], [tensor("s_out", [2]), tensor("e", [2])])
    node = helper.make_node("Scan", ["", "s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1,
                            directions=[1])
    model = make([node], [tensor("s0", [3, 2]), tensor("x", [3, 4, 2])],
                 [tensor("s", [3, 2]), tensor("ys", [3, 4, 2])],
                 opset=8)
    rng = np.random.default_rng(4)
    _check(model, [{"s0": rng.normal(size=(3, 2)).astype(F32), "x": rng.normal(size=(3, 4, 2)).astype(F32)}])


def test_scan_opset8_sequence_lens_is_refused():
    body = _graph([helper.make_node("Add", ["s_in", "xs"], ["s_out"])],
                  [tensor("s_in", [2]), tensor("xs", [2])], [tensor("s_out", [2])])
    node = helper.make_node("Scan", ["lens", "s0", "x"], ["s"], body=body, num_scan_inputs=1, name="sc")
    model = make([node], [tensor("lens", [1], I64), tensor("s0", [1, 2]), tensor("x", [1, 4, 2])],
                 [tensor("s", [1, 2])], opset=8)
    with pytest.raises(ConversionError, match=r"node 'sc' \(Scan\): input sequence_lens is not supported"):
        hetc.compile(model)


# --- SequenceMap ------------------------------------------------------------------------------

def test_sequence_map_over_a_split():
    body = _graph([helper.make_node("Mul", ["a", "b"], ["p"]), helper.make_node("Add", ["p", "bias"], ["q"]),
                   helper.make_node("Shape", ["a"], ["sh"])],
                  [tensor("a", [None, 3]), tensor("b", [3])],
                  [tensor("q", [None, 3]), tensor("sh", [2], I64)])
    nodes = [helper.make_node("SplitToSequence", ["x", "parts"], ["seq"], axis=0),
             helper.make_node("SequenceMap", ["seq", "v"], ["out", "shapes"], body=body),
             helper.make_node("ConcatFromSequence", ["out"], ["y"], axis=0),
             helper.make_node("ConcatFromSequence", ["shapes"], ["z"], axis=0)]
    model = make(nodes, [tensor("x", [5, 3]), tensor("v", [3]), tensor("bias", [3])],
                 [tensor("y", [5, 3]), tensor("z", [4], I64)], {"parts": np.array([2, 3], I64)})
    rng = np.random.default_rng(5)
    _check(model, [{"x": rng.normal(size=(5, 3)).astype(F32), "v": rng.normal(size=3).astype(F32),
                    "bias": rng.normal(size=3).astype(F32)}])


# --- optimum's merged decoder -----------------------------------------------------------------

# optimum-onnx pins transformers < 4.58, so it may live in a venv of its own: HETC_OPTIMUM_PYTHON
# names its interpreter (default: /work/optvenv/bin/python where it exists, else this one).
_EXPORT = """
import sys
from pathlib import Path
import torch
from transformers import GPT2Config, GPT2LMHeadModel
from optimum.exporters.onnx import export_models
from optimum.exporters.onnx.model_configs import GPT2OnnxConfig

out = Path(sys.argv[1])
cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128)
torch.manual_seed(0)
model = GPT2LMHeadModel(cfg).eval()
# optimum-onnx 0.1 exports a decoder as one model.onnx with past inputs; its merged decoder (an
# If on use_cache_branch) comes from the two legacy exports, merged by the config's post-processing
configs = {"decoder_model": (model, GPT2OnnxConfig(cfg, task="text-generation", use_past=True,
                                                   use_past_in_inputs=False)),
           "decoder_with_past_model": (model, GPT2OnnxConfig(cfg, task="text-generation", use_past=True,
                                                             use_past_in_inputs=True))}
export_models(configs, out, opset=18)
configs["decoder_model"][1].post_process_exported_models(out, configs, [f"{k}.onnx" for k in configs])
"""


def _optimum_python() -> str | None:
    import importlib.util
    import os
    import sys
    from pathlib import Path

    named = os.environ.get("HETC_OPTIMUM_PYTHON")
    if named:
        return named
    if Path("/work/optvenv/bin/python").exists():
        return "/work/optvenv/bin/python"
    try:  # find_spec imports the parents: without optimum at all it raises
        return sys.executable if importlib.util.find_spec("optimum.exporters.onnx") else None
    except ModuleNotFoundError:
        return None


@pytest.mark.torch
@pytest.mark.slow
def test_optimum_merged_gpt2_decoder_generates_like_onnxruntime(tmp_path):
    import subprocess

    import onnx
    import onnxruntime as ort

    from hetc.generate import runner

    python = _optimum_python()
    if python is None:
        pytest.skip("optimum-onnx is not installed (set HETC_OPTIMUM_PYTHON to a Python that has it)")
    script = tmp_path / "export.py"
    script.write_text(_EXPORT)
    done = subprocess.run([python, str(script), str(tmp_path)], check=False, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    model = onnx.load(tmp_path / "decoder_model_merged.onnx")
    assert [n.op_type for n in model.graph.node] == ["If"]
    assert "use_cache_branch" in [i.name for i in model.graph.input]
    # optimum declares the merged model's attention_mask [batch_size, sequence_length], the no-past
    # branch's; with a past it is past + sequence long. onnxruntime does not check dim names, hetc
    # does: hetc/frontends/onnx/merged_decoder.py re-declares it as the presents' length.
    mask = next(i for i in model.graph.input if i.name == "attention_mask")
    assert mask.type.tensor_type.shape.dim[1].dim_param == "sequence_length"
    compiled = hetc.compile(model, dims={"batch_size": (1, 2), "sequence_length": (1, 32),
                                         "past_sequence_length": (0, 32)})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

    prompt = np.random.default_rng(6).integers(0, 1000, size=(2, 5)).astype(I64)
    ours, theirs = runner(compiled), runner(session)
    cache_ours, cache_theirs = ours.start(2), theirs.start(2)
    ids, mask_now = prompt, np.ones_like(prompt)
    for _ in range(16):  # the first step takes the no-cache branch, the others the cache branch
        logits, cache_ours = ours.step(ids, mask_now, cache_ours)
        expected, cache_theirs = theirs.step(ids, mask_now, cache_theirs)
        assert_close(np.asarray(logits), expected, rel=1e-4)
        ids = np.argmax(expected[:, -1], axis=-1)[:, None].astype(I64)
        assert (np.argmax(np.asarray(logits)[:, -1], axis=-1)[:, None] == ids).all()
        mask_now = np.ones((2, mask_now.shape[1] + 1), I64)
    tokens = hetc.generate(compiled, prompt, max_new_tokens=16)
    assert tokens.shape == (2, 21)
    assert (tokens == hetc.generate(session, prompt, max_new_tokens=16)).all()
    # with the cache in place: the branch with the past on every call, as optimum declares it
    # (hetc/frontends/onnx/merged_decoder.py re-declares the mask's length)
    in_place = hetc.compile(tmp_path / "decoder_model_merged.onnx", kv_cache=64, dims={
        "batch_size": (1, 2), "sequence_length": (1, 32), "past_sequence_length": (0, 32)})
    assert "kv_write" in {k.rstrip("0123456789_") for k in in_place.report["kernels"]}
    assert (hetc.generate(in_place, prompt, max_new_tokens=16) == tokens).all()


def test_branch_function_dims_keep_the_callers_ranges():
    """A function's own copy of a caller's dim keeps its range, so ``past + seq == -1`` still
    folds to false inside an If's branch (optimum's merged T5/BART/Whisper decoders: ScatterND's
    index and update dims differed by an unsimplified ``Select`` and legalization refused)."""
    from tvm import tirx

    from hetc.frontends.onnx import symbolic
    from hetc.frontends.onnx.ops.control_flow import _Dims

    past, seq = tirx.Var("past", "int64"), tirx.Var("seq", "int64")
    symbolic.declare(past, 0, 511)
    symbolic.declare(seq, 1, 512)
    dims = _Dims()
    inner_past, total = dims.dim(past), dims.dim(past + seq)
    assert dims.dim(past + seq).same_as(total)  # one expression, one var
    one = tirx.const(1, "int64")
    assert symbolic.simplify(tirx.Select(inner_past + total == -1, one, total)).same_as(total)
    assert symbolic.simplify(total >= 1) == 1
