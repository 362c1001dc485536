"""Models that failed with symbolic dims (issue 31), and one focused regression per root cause.

The model tests export transformers / torchvision architectures as users do (``symbolic_models.py``:
TorchScript exporter, opset 17, ``dynamic_axes`` for batch and sequence), compile them once for
the CPU and compare with onnxruntime at two batch sizes / sequence lengths (max abs error <=
1e-4 x max |reference|). The regressions are one- or few-node ONNX models (no torch), each of
which failed before its fix:

- Expand to a constant shape of an input with a symbolic dim (ViTMAE): TVM read ``dim.value``;
  to a shape given at run time, one of whose elements is 1 where the input's dim is not.
- Squeeze of an axis whose extent only the run time knows, and Split by constant sizes of such an
  axis (a mixture-of-experts layer's per-expert rows of NonZero): refused at import; now cast to
  the size the node requires and checked when the model runs.
- ConvTranspose after a Conv (DPT's reassemble stage): the NHWC layout pass carried the conv's
  layout into ``conv2d_transpose``, which TVM cannot lower; and the message blamed the shapes.
- Tile by a symbolic dim (RAFT's coordinate grid tiled by the batch): TVM's converter gave the
  output fresh dims whose later substitution left a dim no binding defines.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from onnx import helper
from onnx_util import make, tensor

import hetc
from hetc.errors import HetcError

RNG = np.random.default_rng(0)


def _i64(*values) -> np.ndarray:
    return np.array(values, np.int64)


def _check(model, runs: list[dict]) -> hetc.CompiledModel:
    """Compile ``model`` once (CPU) and compare every run with onnxruntime."""
    compiled = hetc.compile(model, "cpu")
    for inputs in runs:
        for actual, expected in zip(compiled.run(inputs).values(), ort_run(model, inputs), strict=True):
            assert_close(actual, expected)
    return compiled


# --------------------------------------------------------------------------------- Expand

def test_expand_to_a_constant_shape_keeps_a_symbolic_dim():
    """ViTMAE: ``Expand(ids[batch, k, 1], [1, 1, 3])``; TVM's converter read ``.value`` of batch."""
    model = make([helper.make_node("Expand", ["x", "shape"], ["y"])], [tensor("x", ["N", 4, 1])],
                 [tensor("y", ["N", 4, 3])], {"shape": _i64(1, 1, 3)})
    _check(model, [{"x": RNG.normal(size=(n, 4, 1)).astype(np.float32)} for n in (1, 3)])


def test_expand_to_a_constant_shape_broadcasts_a_leading_one():
    model = make([helper.make_node("Expand", ["x", "shape"], ["y"])], [tensor("x", [1, "S"])],
                 [tensor("y", [2, 3, "S"])], {"shape": _i64(2, 3, 1)})
    _check(model, [{"x": RNG.normal(size=(1, s)).astype(np.float32)} for s in (1, 5)])


@pytest.mark.parametrize("rows", [3, "R"])
def test_expand_to_a_shape_given_at_run_time_keeps_dims_it_gives_as_one(rows):
    """ONNX's test_expand_dim_changed: [3, 1] to [2, 1, 6] is [2, 3, 6] (TVM's gave [2, 1, 6])."""
    model = make([helper.make_node("Expand", ["x", "shape"], ["y"])],
                 [tensor("x", [rows, 1]), tensor("shape", [3], np.int64)], [tensor("y", ["a", "b", "c"])])
    _check(model, [{"x": RNG.normal(size=(3, 1)).astype(np.float32), "shape": _i64(*s)}
                   for s in ((2, 1, 6), (1, 3, 1))])


# ------------------------------------------------------------------------ Squeeze and Split

def test_squeeze_of_a_symbolic_axis_is_checked_at_run_time():
    model = make([helper.make_node("Squeeze", ["x", "axes"], ["y"])], [tensor("x", ["N", 3])],
                 [tensor("y", [3])], {"axes": _i64(0)})
    compiled = _check(model, [{"x": RNG.normal(size=(1, 3)).astype(np.float32)}])
    with pytest.raises(HetcError):  # onnxruntime refuses it too
        compiled.run({"x": np.zeros((2, 3), np.float32)})


def test_squeeze_of_a_static_axis_other_than_one_is_refused():
    model = make([helper.make_node("Squeeze", ["x", "axes"], ["y"])], [tensor("x", ["N", 3])],
                 [tensor("y", ["N", 3])], {"axes": _i64(1)})
    with pytest.raises(HetcError, match=r"\(Squeeze\): .*(must be 1|only axes of size 1)"):
        hetc.compile(model, "cpu")


def test_split_by_constant_sizes_of_a_symbolic_axis_gives_static_parts():
    nodes = [helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=0),
             helper.make_node("Squeeze", ["a", "axes"], ["a1"]),
             helper.make_node("ReduceSum", ["b", "axes"], ["b1"], keepdims=0),
             helper.make_node("Add", ["a1", "b1"], ["y"])]
    model = make(nodes, [tensor("x", ["N", 3])], [tensor("y", [3])], {"sizes": _i64(1, 2), "axes": _i64(0)})
    compiled = _check(model, [{"x": RNG.normal(size=(3, 3)).astype(np.float32)}])
    with pytest.raises(HetcError):  # the sizes must add up to the axis, as onnxruntime checks
        compiled.run({"x": np.zeros((4, 3), np.float32)})


def test_mixture_of_experts_rows_of_nonzero():
    """The eager MoE loop as traced: the experts hit (``NonZero``, a data-dependent count),
    split into one row per expert hit when traced, each squeezed to the index of its expert,
    whose tokens are gathered, weighted and scattered back (ScatterND, as ``index_add_``)."""
    experts, tokens, hidden = 3, 5, 4
    nodes = [
        helper.make_node("Greater", ["hits", "zero_f"], ["hit"]),
        helper.make_node("NonZero", ["hit"], ["nz"]),              # [1, K]
        helper.make_node("Transpose", ["nz"], ["rows"], perm=[1, 0]),  # [K, 1]
        helper.make_node("Split", ["rows", "split"], ["e0", "e1"], axis=0),
        helper.make_node("Squeeze", ["e0", "axes0"], ["i0"]),       # [1]
        helper.make_node("Squeeze", ["e1", "axes0"], ["i1"]),
        helper.make_node("Gather", ["w", "i0"], ["w0"], axis=0),    # [1, hidden, hidden]
        helper.make_node("Gather", ["w", "i1"], ["w1"], axis=0),
        helper.make_node("MatMul", ["x", "w0"], ["y0"]),            # [1, tokens, hidden]
        helper.make_node("MatMul", ["x", "w1"], ["y1"]),
        helper.make_node("Add", ["y0", "y1"], ["y"]),
    ]
    w = RNG.normal(size=(experts, hidden, hidden)).astype(np.float32)
    model = make(nodes, [tensor("hits", [experts]), tensor("x", ["T", hidden])], [tensor("y", [1, "T", hidden])],
                 {"w": w, "zero_f": np.array(0, np.float32), "split": _i64(1, 1), "axes0": _i64(0)})
    x = RNG.normal(size=(tokens, hidden)).astype(np.float32)
    compiled = _check(model, [{"hits": np.array(h, np.float32), "x": x} for h in ([2, 0, 1], [0, 3, 1])])
    with pytest.raises(HetcError):  # three experts hit, two rows traced: onnxruntime refuses it too
        compiled.run({"hits": np.ones(experts, np.float32), "x": x})


# ---------------------------------------------------------------------------- ConvTranspose

def _conv_then_transpose(batch):
    nodes = [helper.make_node("Conv", ["x", "w0"], ["h"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("ConvTranspose", ["h", "w", "b"], ["y"], kernel_shape=[4, 4], strides=[4, 4])]
    inits = {"w0": RNG.normal(size=(8, 3, 3, 3)).astype(np.float32),
             "w": RNG.normal(size=(8, 4, 4, 4)).astype(np.float32), "b": RNG.normal(size=4).astype(np.float32)}
    return make(nodes, [tensor("x", [batch, 3, 4, 4])], [tensor("y", [batch, 4, 16, 16])], inits)


@pytest.mark.parametrize("batch", ["N", 2])
def test_conv_transpose_after_a_conv_keeps_a_layout_it_can_be_lowered_in(batch):
    """DPT: the conv's NHWC layout reached ``conv2d_transpose`` (TVM lowers only NCHW/IOHW)."""
    runs = [{"x": RNG.normal(size=(n, 3, 4, 4)).astype(np.float32)} for n in ((1, 3) if batch == "N" else (2,))]
    _check(_conv_then_transpose(batch), runs)


def test_an_op_without_a_lowering_is_named_with_its_layouts():
    """The message names what TVM cannot lower, not the shapes, when the shapes are known."""
    from tvm import relax

    from hetc.errors import last_line, unlowered_call

    x = relax.Var("x", relax.TensorType((1, 4, 4, 8), "float32"))
    w = relax.Var("w", relax.TensorType((8, 4, 4, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv2d_transpose(x, w, strides=4, data_layout="NHWC", out_layout="NHWC"))
        bb.emit_func_output(y)
    err = RuntimeError("CodeGenVM cannot emit this Relax operator directly.\nOffending call:\n"
                       "R.nn.conv2d_transpose(x, w, strides=[4, 4])")
    assert unlowered_call(err, bb.get()) == ("the operator nn.conv2d_transpose could not be lowered to code: TVM "
                                             "has no lowering for it with data_layout=NHWC, kernel_layout=IOHW, "
                                             "out_layout=NHWC")
    assert "--input-shape" in last_line(err)  # the shape hint stays for calls of unknown shape
    assert unlowered_call(RuntimeError("another error"), bb.get()) is None


# ------------------------------------------------------------------------------------- Tile

def _tile_by_batch(tail: str):
    """RAFT: a constant grid tiled by ``Shape(x)[0]``, then added to x or joined with it."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
             helper.make_node("Concat", ["n1", "ones3"], ["reps"], axis=0),
             helper.make_node("Tile", ["grid", "reps"], ["t"])]
    inits = {"grid": RNG.normal(size=(1, 2, 4, 4)).astype(np.float32), "zero": np.array(0, np.int64),
             "axes0": _i64(0), "ones3": _i64(1, 1, 1)}
    if tail == "add":
        nodes.append(helper.make_node("Add", ["x", "t"], ["y"]))
        out = [2]
    else:
        nodes += [helper.make_node("Concat", ["x", "t"], ["xt"], axis=1),
                  helper.make_node("Conv", ["xt", "w"], ["y"], kernel_shape=[1, 1])]
        inits["w"] = RNG.normal(size=(5, 4, 1, 1)).astype(np.float32)
        out = [5]
    return make(nodes, [tensor("x", ["N", 2, 4, 4])], [tensor("y", ["N", *out, 4, 4])], inits)


@pytest.mark.parametrize("tail", ["add", "concat_conv"])
def test_tile_by_a_symbolic_dim(tail):
    _check(_tile_by_batch(tail), [{"x": RNG.normal(size=(n, 2, 4, 4)).astype(np.float32)} for n in (1, 3)])


def test_tile_by_repeats_given_at_run_time():
    model = make([helper.make_node("Tile", ["x", "reps"], ["y"])], [tensor("x", ["N", 3]), tensor("reps", [2], np.int64)],
                 [tensor("y", ["a", "b"])])
    x = RNG.normal(size=(2, 3)).astype(np.float32)
    _check(model, [{"x": x, "reps": _i64(*r)} for r in ((1, 1), (3, 2))])


# ------------------------------------------------------------------------------ the models

def _model_case(name: str, tmp_path):
    pytest.importorskip("torch", reason="torch is needed to export the models")
    symbolic_models = pytest.importorskip("symbolic_models")
    case = symbolic_models.CASES[name]
    try:
        symbolic_models.import_torchvision()
        __import__(case.library)
    except Exception as err:  # noqa: BLE001 - torchvision's wheel can fail to import with a CPU torch
        pytest.skip(f"{case.library} does not import: {err}")
    path = symbolic_models.export(name, tmp_path / f"{name}.onnx")
    errors = symbolic_models.errors(name, path)
    assert max(errors) <= 1e-4, errors


MODELS = [  # export + one compile + two runs each: 2-20 s on 2 cores, RAFT about a minute
    pytest.param("gptj", marks=pytest.mark.slow),
    "vitmae",
    pytest.param("mixtral", marks=pytest.mark.slow),
    pytest.param("qwen2-moe", marks=pytest.mark.slow),
    "dpt",
    pytest.param("raft-small", marks=pytest.mark.slow),
]


@pytest.mark.torch
@pytest.mark.parametrize("name", MODELS)
def test_model_with_symbolic_dims_matches_onnxruntime(name, tmp_path):
    _model_case(name, tmp_path)
