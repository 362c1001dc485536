"""Graph patterns that real exports write (found by benchmarks/model_zoo.py), with a symbolic
batch as ``dynamic_axes`` users leave it, compiled once and run at two batch sizes against
onnxruntime:

- Pad before a conv (TensorFlow "same" padding: transformers' MobileNetV1, EfficientNet),
- Resize of a symbolic-batch tensor by constant scales, and to ``Concat(Shape(x)[:2], (h, w))``
  (SegFormer's decode head),
- a Reshape whose shape comes from float arithmetic on constants (DINOv2's ``int(sqrt(n))``),
- a Concat of a shape slice with a tensor computed at run time (MobileViT),
- a slice ``[:-1]`` of a conv's ``L + 1`` outputs added to ``L`` (wav2vec2's positional conv).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import assert_close, ort_run
from onnx import TensorProto, helper, numpy_helper

import hetc

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "pattern", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _const(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _check(model: onnx.ModelProto, make_inputs, batches=(1, 3)) -> hetc.CompiledModel:
    compiled = hetc.compile(model, "cpu")
    for batch in batches:
        inputs = make_inputs(batch)
        got = compiled.run(inputs)
        for actual, expected in zip(got.values(), ort_run(model, inputs)):
            assert_close(actual, expected)
    return compiled


def _image(channels: int, size: int):
    return lambda b: {"x": RNG.standard_normal((b, channels, size, size)).astype(np.float32)}


def test_pad_before_conv_is_folded_into_the_conv():
    w = RNG.standard_normal((8, 4, 3, 3)).astype(np.float32)
    model = _model(
        [helper.make_node("Pad", ["x", "pads"], ["p"], mode="constant"),
         helper.make_node("Conv", ["p", "w"], ["y"], strides=[2, 2]),
         helper.make_node("Pad", ["y", "pads2"], ["z"], mode="constant")],  # no conv after: one nn.pad
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 9, 9])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 8, 5, 5])],
        [_const("pads", np.array([0, 0, 0, 1, 0, 0, 1, 0], np.int64)), _const("w", w),
         _const("pads2", np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64))])
    compiled = _check(model, _image(4, 9))
    kernels = list(compiled.report["kernels"])
    # the pad before the conv is gone (in the conv's padding); the one after it is one nn.pad
    assert [k for k in kernels if "pad" in k and "conv2d" not in k] and not any("pad" in k and "conv2d" in k
                                                                                for k in kernels)
    assert sum("pad" in k for k in kernels) == 1 and not any("concatenate" in k for k in kernels)


def test_resize_by_constant_scales_keeps_a_symbolic_batch():
    model = _model(
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [_const("scales", np.array([1, 1, 2, 2], np.float32))])
    _check(model, _image(3, 4))


def test_resize_to_sizes_built_from_the_input_shape():
    model = _model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Slice", ["s", "zero", "two"], ["nc"]),
         helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
         helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 7, 6])],
        [_const("zero", np.array([0], np.int64)), _const("two", np.array([2], np.int64)),
         _const("hw", np.array([7, 6], np.int64))])
    _check(model, _image(3, 4))


def test_reshape_to_float_shape_arithmetic():
    # int(16 ** 0.5) = 4, as DINOv2 computes the side of its position-embedding grid
    model = _model(
        [helper.make_node("Pow", ["n", "half"], ["root"]),
         helper.make_node("Cast", ["root"], ["side"], to=TensorProto.INT64),
         helper.make_node("Concat", ["minus1", "side", "side"], ["shape"], axis=0),
         helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("Resize", ["r", "", "scales"], ["y"], mode="nearest")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8, 8])],
        [_const("n", np.array([16.0], np.float32)), _const("half", np.array([0.5], np.float32)),
         _const("minus1", np.array([-1], np.int64)), _const("scales", np.array([1, 2, 2], np.float32))])
    _check(model, lambda b: {"x": RNG.standard_normal((b, 16)).astype(np.float32)})


def test_concat_of_a_shape_slice_and_a_runtime_tensor():
    # the new shape's last entry is computed from the data (ArgMax + 2): known at run time only
    model = _model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Slice", ["s", "zero", "one"], ["b"]),
         helper.make_node("ReduceMax", ["idx"], ["m"], keepdims=1),
         helper.make_node("Concat", ["b", "m"], ["shape"], axis=0),
         helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 6]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "k"])],
        [_const("zero", np.array([0], np.int64)), _const("one", np.array([1], np.int64))])
    _check(model, lambda b: {"x": RNG.standard_normal((b, 2, 6)).astype(np.float32),
                             "idx": np.array([12], np.int64)})


def test_conv_output_sliced_by_one_added_to_its_input():
    # wav2vec2: a strided feature conv (T = floor((L - 3) / 2) + 1), a positional conv with even
    # kernel (T + 1 outputs) sliced [:-1], added to its input: T and min(max(T, 0), T + 1)
    w1 = RNG.standard_normal((4, 1, 3)).astype(np.float32)
    w2 = RNG.standard_normal((4, 1, 4)).astype(np.float32)
    model = _model(
        [helper.make_node("Conv", ["x", "w1"], ["f"], strides=[2], group=4),
         helper.make_node("Conv", ["f", "w2"], ["c"], pads=[2, 2], group=4),
         helper.make_node("Slice", ["c", "zero", "minus1", "two"], ["s"]),
         helper.make_node("Add", ["f", "s"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, "samples"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, "frames"])],
        [_const("w1", w1), _const("w2", w2), _const("zero", np.array([0], np.int64)),
         _const("minus1", np.array([-1], np.int64)), _const("two", np.array([2], np.int64))])
    compiled = hetc.compile(model, "cpu")
    for batch, samples in ((1, 10), (2, 17)):
        inputs = {"x": RNG.standard_normal((batch, 4, samples)).astype(np.float32)}
        assert_close(compiled.run(inputs)["y"], ort_run(model, inputs)[0])


@pytest.mark.parametrize("value", [0.0, 1.5])
def test_pad_with_a_symbolic_batch_matches_onnxruntime(value):
    model = _model(
        [helper.make_node("Pad", ["x", "pads", "v"], ["y"], mode="constant")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 5])],
        [_const("pads", np.array([0, 1, 1, 0, 0, 1], np.int64)), _const("v", np.array(value, np.float32))])
    _check(model, lambda b: {"x": RNG.standard_normal((b, 2, 3)).astype(np.float32)})


def test_reshape_to_float_arithmetic_on_a_static_part_of_a_symbolic_shape():
    # MobileViT's unfold: ceil(h / patch) * patch from Shape(x)[2], with a symbolic batch; then a
    # LayerNorm whose scale must meet the reshaped tensor's last dim
    scale = RNG.standard_normal(6).astype(np.float32)
    model = _model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "two"], ["h"], axis=0),
         helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT),
         helper.make_node("Div", ["hf", "four"], ["q"]),
         helper.make_node("Ceil", ["q"], ["c"]),
         helper.make_node("Cast", ["c"], ["ci"], to=TensorProto.INT64),
         helper.make_node("Mul", ["ci", "three"], ["side"]),
         helper.make_node("Unsqueeze", ["side", "zero"], ["last"]),
         helper.make_node("Concat", ["minus1", "last"], ["shape"], axis=0),
         helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("LayerNormalization", ["r", "scale"], ["y"], axis=-1)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 6])],
        [_const("two", np.array(2, np.int64)), _const("four", np.array(4.0, np.float32)),
         _const("three", np.array(3, np.int64)), _const("zero", np.array([0], np.int64)),
         _const("minus1", np.array([-1], np.int64)), _const("scale", scale)])
    _check(model, _image(4, 6))


@pytest.mark.parametrize("start_sign", [-1, 1])
def test_slice_with_a_symbolic_start_and_an_unbounded_end(start_sign):
    # T5's relative position bias, bias[:, :, -seq:, :]: starts = -Shape(x)[1], ends = INT64_MAX.
    # TVM's converter assumed symbolic bounds in range: an extent of seq + INT64_MAX, which
    # failed code generation ("Literal value ... exceeds range of int64"); a positive start of
    # seq gives an empty slice
    sign = [helper.make_node("Neg", ["n"], ["start"])] if start_sign < 0 else [
        helper.make_node("Identity", ["n"], ["start"])]
    model = _model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "one"], ["n"], axis=0), *sign,
         helper.make_node("Slice", ["bias", "start", "end", "two"], ["b"]),
         helper.make_node("Add", ["b", "b"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"]),
         helper.make_tensor_value_info("bias", TensorProto.FLOAT, [1, 2, "seq", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, None, "seq"])],
        [_const("one", np.array([1], np.int64)), _const("two", np.array([2], np.int64)),
         _const("end", np.array([np.iinfo(np.int64).max], np.int64))])
    compiled = hetc.compile(model, "cpu")
    for seq in (3, 5):
        inputs = {"x": np.zeros((1, seq), np.float32),
                  "bias": RNG.standard_normal((1, 2, seq, seq)).astype(np.float32)}
        got, want = compiled.run(inputs)["y"], ort_run(model, inputs)[0]
        assert got.shape == want.shape == ((1, 2, seq, seq) if start_sign < 0 else (1, 2, 0, seq))
        assert_close(got, want)


def test_constant_table_sliced_by_a_symbolic_start():
    # MPT's ALiBi bias: a constant of 128 positions sliced [128 - seq:] and added to the scores
    # (TVM's converter left an extent of seq + INT64_MAX - 128; the importer's simplifier overflowed)
    table = RNG.standard_normal((2, 1, 8)).astype(np.float32)
    model = _model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
         helper.make_node("Sub", ["eight", "n"], ["start"]),
         helper.make_node("Unsqueeze", ["start", "zero"], ["starts"]),
         helper.make_node("Slice", ["table", "starts", "end", "two"], ["b"]),
         helper.make_node("Add", ["x", "b"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, "seq", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, "seq", "seq"])],
        [_const("one", np.array(2, np.int64)), _const("two", np.array([2], np.int64)),
         _const("zero", np.array([0], np.int64)), _const("eight", np.array(8, np.int64)),
         _const("end", np.array([np.iinfo(np.int64).max], np.int64)), _const("table", table)])
    compiled = hetc.compile(model, "cpu")
    for batch, seq in ((1, 3), (2, 8)):
        inputs = {"x": RNG.standard_normal((batch, 2, seq, seq)).astype(np.float32)}
        assert_close(compiled.run(inputs)["y"], ort_run(model, inputs)[0])


def test_integer_slice_of_a_symbolic_dim_has_a_plain_extent():
    # x[:, 1:] as exporters write it (ends = INT64_MAX): TVM's clamping left min(INT64_MAX, t) - 1,
    # which its simplifier cannot reduce (Mask R-CNN's mask pasting added such dims and lost the
    # Concat's shape); resolved here it is t - 1
    from tvm import relax

    from hetc.frontends.onnx import load_model, to_relax

    model = _model(
        [helper.make_node("Slice", ["x", "one", "end", "one"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "t"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "t1"])],
        [_const("one", np.array([1], np.int64)), _const("end", np.array([np.iinfo(np.int64).max], np.int64))])
    out = to_relax(load_model(model))["main"].body.body
    assert isinstance(out.ty, relax.TensorType) and "9223372036854775807" not in str(out.ty)
    compiled = hetc.compile(model, "cpu")
    for t in (2, 7):
        x = {"x": RNG.standard_normal((2, t)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0])


@pytest.mark.parametrize("value", [0.0, -2.5])
def test_pad_by_a_length_computed_from_a_symbolic_dim(value):
    # torch.onnx.export of F.pad(x, (0, 0, 0, (4 - t % 4) % 4)) on a [batch, t, 3] input: the
    # widths built from Shape(x)[1], reversed and transposed into ONNX's order (SEW pads its
    # upsampled sequence back to the input's length this way). Shape arithmetic gives the
    # widths [0, 0, 0, 0, w, 0] at compile time; evaluated at run time instead, every axis was
    # gathered and the symbolic batch refused ("pads axis 0, whose size batch is symbolic").
    i64 = lambda name, v: _const(name, np.array(v, np.int64))
    end = np.iinfo(np.int64).min
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["t"], axis=0),
        helper.make_node("Mod", ["t", "four"], ["r"]),
        helper.make_node("Sub", ["four", "r"], ["s"]),
        helper.make_node("Mod", ["s", "four"], ["w"]),
        helper.make_node("Unsqueeze", ["w", "axis0"], ["w1"]),
        helper.make_node("Concat", ["zeros3", "w1"], ["torch_order"], axis=0),
        helper.make_node("ConstantOfShape", ["two"], ["rest"], value=numpy_helper.from_array(np.zeros(1, np.int64))),
        helper.make_node("Concat", ["torch_order", "rest"], ["flat"], axis=0),
        helper.make_node("Reshape", ["flat", "pairs"], ["grid"]),
        helper.make_node("Slice", ["grid", "minus1", "end", "axis0", "minus1"], ["flipped"]),
        helper.make_node("Transpose", ["flipped"], ["onnx_order"], perm=[1, 0]),
        helper.make_node("Reshape", ["onnx_order", "minus1"], ["pads"]),
        helper.make_node("Pad", ["x", "pads", "v"], ["y"], mode="constant"),
    ]
    model = _model(
        nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "t", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "padded", 3])],
        [i64("one", 1), i64("four", 4), i64("axis0", [0]), i64("zeros3", [0, 0, 0]), i64("two", [2]),
         i64("pairs", [-1, 2]), i64("minus1", [-1]), i64("end", [end]), _const("v", np.array(value, np.float32))])
    compiled = hetc.compile(model, "cpu")
    for batch, t in ((1, 5), (3, 8), (2, 3)):
        x = {"x": RNG.standard_normal((batch, t, 3)).astype(np.float32)}
        got, want = compiled.run(x)["y"], ort_run(model, x)[0]
        assert got.shape == want.shape == (batch, t + (4 - t % 4) % 4, 3)
        assert_close(got, want)


def test_slices_to_the_shorter_of_two_symbolic_lengths_add():
    # SEW's x[..., :n] + y[..., :n], n = min(len(x), len(y)), x a conv's t - 4 outputs: the
    # slice of x ended at max(min(t - 4, u), 0) (t - 4 < 0 under t's range from 1), the other
    # path at min(t - 4, u); the Add's shape was lost ("emit_te now only supports Tensor that
    # has ShapeExpr shape"). A dim of a tensor that exists is >= 0, so both end at min(t - 4, u).
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Shape", ["c"], ["sc"], start=2, end=3),
        helper.make_node("Shape", ["y"], ["sy"], start=2, end=3),
        helper.make_node("Min", ["sc", "sy"], ["n"]),
        helper.make_node("Slice", ["c", "zero", "n", "two"], ["a"]),
        helper.make_node("Slice", ["y", "zero", "n", "two"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Relu", ["s"], ["out"]),
    ]
    model = _model(
        nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, "t"]),
                helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1, "u"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 1, "n"])],
        [_const("w", RNG.standard_normal((1, 1, 5)).astype(np.float32)), _const("zero", np.array([0], np.int64)),
         _const("two", np.array([2], np.int64))])
    compiled = hetc.compile(model, "cpu")
    for t, u in ((10, 4), (7, 9)):
        inputs = {"x": RNG.standard_normal((2, 1, t)).astype(np.float32),
                  "y": RNG.standard_normal((2, 1, u)).astype(np.float32)}
        got, want = compiled.run(inputs)["out"], ort_run(model, inputs)[0]
        assert got.shape == want.shape == (2, 1, min(t - 4, u))
        assert_close(got, want)


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_same_auto_pad_becomes_the_convs_own_padding(mode):
    # torch's Conv2d(padding="same") and TF-style exports write auto_pad=SAME_*. TVM's converter
    # padded the input with an NCHW topi pad (a call_tir no layout rule sees): in an NHWC model a
    # transpose, a scalar pad and a transpose back per conv (transformers' EfficientNet: 32 of
    # 120 ms). With static spatial dims the pads are now the conv's own; odd totals (a stride 2
    # on an even map, an even kernel) put the extra pad at the end (UPPER) or the start (LOWER).
    from tvm import relax

    from hetc.frontends.onnx import load_model, to_relax

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], auto_pad=mode, group=8),  # depthwise 5x5
        helper.make_node("Conv", ["a", "w2"], ["b"], auto_pad=mode, strides=[2, 2]),  # 3x3 stride 2 on 10x10
        helper.make_node("Conv", ["b", "w3"], ["y"], auto_pad=mode),  # an even kernel: 2x2
    ]
    model = _model(
        nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16, 5, 5])],
        [_const("w1", RNG.standard_normal((8, 1, 5, 5)).astype(np.float32)),
         _const("w2", RNG.standard_normal((16, 8, 3, 3)).astype(np.float32)),
         _const("w3", RNG.standard_normal((16, 16, 2, 2)).astype(np.float32))])
    main = to_relax(load_model(model))["main"]
    calls = [v for v in relax.analysis.get_var2val(main).values() if isinstance(v, relax.Call)]
    assert not [c for c in calls if c.op.name == "relax.call_tir"]  # no separate pad
    paddings = [[int(p) for p in c.attrs.padding] for c in calls if c.op.name == "relax.nn.conv2d"]
    odd = [0, 0, 1, 1] if mode == "SAME_UPPER" else [1, 1, 0, 0]
    assert paddings == [[2, 2, 2, 2], odd, odd]
    _check(model, lambda b: {"x": RNG.standard_normal((b, 8, 10, 10)).astype(np.float32)})


@pytest.mark.parametrize("kernel", [3, 4])
@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_same_auto_pad_on_symbolic_spatial_dims(mode, kernel):
    # tf2onnx's convs with a run-time image size: with a stride the pad total depends on
    # n mod stride, an expression here (TVM's converter failed on it: "Cannot use and / or /
    # not operator to Expr"); the input is padded by blocks of those widths before the conv
    # (a 4x4 kernel: totals 2 or 3, an even kernel's odd split; an axis's two pads go there together)
    model = _model(
        [helper.make_node("Conv", ["x", "w", "bias"], ["y"], auto_pad=mode, strides=[2, 2])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, "oh", "ow"])],
        [_const("w", RNG.standard_normal((6, 4, kernel, kernel)).astype(np.float32)),
         _const("bias", RNG.standard_normal(6).astype(np.float32))])
    compiled = hetc.compile(model, "cpu")
    for h, w in ((9, 9), (8, 12), (1, 2)):
        x = {"x": RNG.standard_normal((1, 4, h, w)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0])
