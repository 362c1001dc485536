"""The NHWC layout conversion reaches every conv of a model, also past the ops TVM 0.27's
ConvertLayout mis-handles (hetc/passes/phases.py, frontends/onnx/ops/split.py): a Split into
one part (typed as a tensor, "Invalid Call") and a stack ("Invalid SLayout"). Either one,
anywhere in the model, made the pass give up on the whole model: torchvision's detectors have
both and kept every conv in NCHW, on TVM's generic loop nest (Mask R-CNN 35x onnxruntime)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from onnx import helper
from onnx_util import make, tensor

import hetc

RNG = np.random.default_rng(7)


def _model(tail: str):
    """Split(x) into one part -> Conv -> Relu -> ``tail`` (``stack``: ConcatFromSequence with a
    new axis over two slices, which the importer turns into a stack)."""
    w = (RNG.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("Split", ["x"], ["part"], axis=0),
             helper.make_node("Conv", ["part", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"])]
    out = [1, 16, 12, 12]
    if tail == "stack":
        nodes += [helper.make_node("SplitToSequence", ["r", "two"], ["seq"], axis=1),
                  helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0, new_axis=1)]
        out = [2, 1, 8, 12, 12]
    else:
        nodes += [helper.make_node("Identity", ["r"], ["y"])]
    return make(nodes, [tensor("x", [1, 8, 12, 12])], [tensor("y", out)],
                {"w": w, "two": np.array([8, 8], np.int64)})


@pytest.mark.parametrize("tail", ["plain", "stack"])
def test_convs_become_nhwc_past_a_one_part_split_and_a_stack(tail):
    model = _model(tail)
    compiled = hetc.compile(model, "cpu")
    layout = next(s for s in compiled.report["stages"] if s["stage"] == "convert_layout")
    assert layout["after"]["relax_calls"] > layout["before"]["relax_calls"], layout  # transposes added
    x = {"x": RNG.standard_normal((1, 8, 12, 12)).astype(np.float32)}
    assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)


def test_stack_with_a_constant_after_a_conv_keeps_the_conversion():
    """Mask R-CNN's box decoding: ``stack((slice(boxes), constant))`` in the block of the convs."""
    from tvm import relax

    from hetc.passes.phases import layout_passes
    from hetc.passes.pipeline import relax_op_counts, run_pipeline

    x = relax.Var("x", relax.TensorType([1, 8, 12, 12], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.op.nn.conv2d(x, relax.const(RNG.standard_normal((4, 8, 3, 3)).astype(np.float32)),
                                           padding=1))
            boxes = bb.emit(relax.op.reshape(c, [144, 4]))
            half = bb.emit(relax.op.strided_slice(boxes, [1], [0], [4], [2]))
            y = bb.emit_output(relax.op.stack([half, relax.const(np.ones((144, 2), np.float32))], axis=0))
        bb.emit_func_output(y)
    mod, _ = run_pipeline(bb.get(), layout_passes("NHWC"))
    counts = relax_op_counts(mod)
    assert counts["relax.permute_dims"] >= 1, counts  # the conv went NHWC (transposes around it)


@pytest.mark.parametrize("activation", ["HardSwish", "HardSigmoid"])
def test_hard_activations_between_nhwc_convs_add_no_transposes(activation):
    """HardSwish/HardSigmoid are maximum/minimum (frontends/onnx/ops/math.py), which layout
    conversion sees through; TVM's own converters emit ``clip``, which it kept in NCHW with a
    transpose on each side fused into every activation (MobileNetV3 in torchvision's
    TorchScript exports)."""
    w1 = (RNG.standard_normal((16, 8, 3, 3)) * 0.3).astype(np.float32)
    w2 = (RNG.standard_normal((8, 16, 1, 1)) * 0.3).astype(np.float32)
    attrs = {"alpha": 0.3, "beta": 0.4} if activation == "HardSigmoid" else {}
    model = make([helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
                  helper.make_node(activation, ["c"], ["a"], **attrs),
                  helper.make_node("Conv", ["a", "w2"], ["y"])],
                 [tensor("x", [1, 8, 12, 12])], [tensor("y", [1, 8, 12, 12])], {"w1": w1, "w2": w2}, opset=17)
    compiled = hetc.compile(model, "cpu")
    kernels = list(compiled.report["kernels"])
    # only the model's input and output are transposed, not the activation's
    assert not [k for k in kernels if "transpose" in k and any(op in k for op in ("clip", "minimum", "add"))], kernels
    assert len([k for k in kernels if "transpose" in k]) <= 2, kernels
    x = {"x": (RNG.standard_normal((1, 8, 12, 12)) * 3).astype(np.float32)}
    assert_close(compiled.run(x)["y"], ort_run(model, x)[0], rel=1e-5)
