"""FPGA partitioning: the pattern checks say no to what the kernels cannot take (with a reason),
``supports(OpNode)`` agrees on what an import-time node shows, and small ONNX models go
through hetc's frontend, the CPU pipeline's phases up to the layout passes, the BYOC pattern
table and ``region_from_function`` into Regions whose float emulation reproduces onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from conftest import assert_close, ort_run
from onnx import helper
from onnx_util import make, tensor
from tvm import relax

from hetc.backends.fpga import emulate, estimates, patterns, precision
from hetc.backends.fpga.layers import OPS, c_identifier
from hetc.backends.fpga.patterns import Limits, check_reason, node_reason, supports
from hetc.backends.fpga.region import fpga_functions, region_from_function, unsupported_reasons
from hetc.frontends.onnx import load_model, to_relax
from hetc.graph import build_opgraph
from hetc.passes import run_pipeline
from hetc.passes.phases import inference_passes, layout_passes, simplify_passes

RNG = np.random.default_rng(0)


def _w(*shape, scale=0.3) -> np.ndarray:
    return RNG.normal(0, scale, shape).astype(np.float32)


# -- the checks, on single Relax calls -----------------------------------------------------------


def _var(shape, dtype="float32", name="x") -> relax.Var:
    return relax.Var(name, relax.TensorType(shape, dtype))


def _call(expr):
    return relax.BlockBuilder().normalize(expr)


def _conv(c=8, f=8, k=3, groups=1, dilation=1, dtype="float32", layout="NHWC"):
    x = _var((1, 16, 16, c) if layout == "NHWC" else (1, c, 16, 16), dtype)
    w = relax.const(np.ones((f, k, k, c // groups) if layout == "NHWC" else (f, c // groups, k, k), dtype))
    return _call(relax.op.nn.conv2d(x, w, padding=(k // 2, k // 2), dilation=dilation, groups=groups,
                                    data_layout=layout, kernel_layout="OHWI" if layout == "NHWC" else "OIHW"))


def _dense(n_in, n_out, dtype="float32"):
    return _call(relax.op.matmul(_var((4, n_in), dtype), relax.const(np.ones((n_in, n_out), dtype))))


@pytest.mark.parametrize("call, words", [
    (lambda: _conv(dilation=2), "dilation"),
    (lambda: _conv(groups=2), "groups=2"),
    (lambda: _conv(c=8, f=16, groups=8), "groups=8"),  # channel multiplier 2 is not depthwise
    (lambda: _conv(k=9), "9x9"),
    (lambda: _conv(layout="NCHW"), "layout NCHW"),
    (lambda: _conv(dtype="int32"), "dtype int32"),
    (lambda: _dense(16, 16, "int32"), "dtype int32"),
    (lambda: _call(relax.op.nn.relu(_var((tvm.tirx.Var("n", "int64"), 8)))), "symbolic dim n"),
    (lambda: _call(relax.op.add(relax.const(np.ones((2, 3), "float32")), relax.const(np.ones((2, 3), "float32")))),
     "constants"),
    (lambda: _call(relax.op.matmul(_var((4, 8)), _var((8, 3), name="y"))), "two activations"),
    (lambda: _call(relax.op.add(_var((2, 4, 4, 3)), relax.const(np.ones((1, 4, 4, 3), "float32")))), "per-channel"),
    (lambda: _call(relax.op.add(_var((2, 4, 4, 3)), _var((2, 1, 1, 3), name="y"))), "broadcasts"),
    (lambda: _call(relax.op.maximum(_var((2, 3)), _var((2, 3), name="y"))), "two activations"),
    (lambda: _call(relax.op.divide(_var((2, 3)), relax.const(np.array([1, 0, 2], "float32")))), "zeros"),
    (lambda: _call(relax.op.nn.softmax(_var((2, 3, 5)), axis=1)), "last axis"),
    (lambda: _call(relax.op.nn.layer_norm(_var((2, 3, 5)), _var((3, 5), name="g"), _var((3, 5), name="b"),
                                          axes=[1, 2])), "not constant"),
    (lambda: _call(relax.op.permute_dims(_var((2, 3, 5)), [1, 0, 2])), "batch axis"),
    (lambda: _call(relax.op.reshape(_var((2, 3, 4)), (3, 8))), "batch axis"),
    (lambda: _call(relax.op.mean(_var((2, 4, 4, 3)), axis=[1])), "axes [1]"),
    (lambda: _call(relax.op.nn.max_pool2d(_var((1, 7, 7, 3)), (2, 2), (2, 2), ceil_mode=True, layout="NHWC")),
     "ceil_mode"),
    (lambda: _call(relax.op.nn.avg_pool2d(_var((1, 8, 8, 3)), (3, 3), dilation=(2, 2), layout="NHWC")), "dilation"),
    (lambda: _call(relax.op.exp(_var((2, 3)))), "no FPGA kernel for relax.exp"),
])
def test_checks_reject_with_a_reason(call, words):
    reason = check_reason(call())
    assert reason is not None and words in reason, reason


def test_checks_accept_what_the_kernels_take():
    accepted = [
        _conv(), _conv(groups=8), _conv(k=7), _dense(64, 10),
        _call(relax.op.add(_var((2, 4, 4, 3)), relax.const(np.ones((1, 1, 1, 3), "float32")))),
        _call(relax.op.multiply(_var((2, 4, 4, 3)), _var((2, 4, 4, 3), name="y"))),
        _call(relax.op.maximum(_var((2, 3)), relax.const(np.float32(0)))),
        _call(relax.op.nn.softmax(_var((2, 3, 5)), axis=-1)),
        _call(relax.op.mean(_var((2, 4, 4, 3)), axis=[1, 2], keepdims=True)),
        _call(relax.op.permute_dims(_var((2, 3, 5)), [0, 2, 1])),
        _call(relax.op.nn.max_pool2d(_var((1, 8, 8, 3)), (3, 3), (2, 2), padding=(1, 1), layout="NHWC")),
    ]
    assert [check_reason(c) for c in accepted] == [None] * len(accepted)


def test_multiplier_and_weight_budgets():
    dense = _dense(64, 64)  # 4096 multiplies per row
    assert check_reason(dense) is None  # 4096 multipliers at reuse 1
    assert patterns.choose_reuse(4096, Limits(max_multipliers=1000)) == 5  # ceil(4096 / 5) = 820 <= 1000
    assert check_reason(dense, Limits(max_multipliers=1000, max_reuse=5)) is None
    reason = check_reason(dense, Limits(max_multipliers=1000, max_reuse=4))
    assert "4096 multipliers" in reason and "reused 4 times" in reason
    assert "bytes" in check_reason(dense, Limits(max_weight_bytes=4 * 4095))
    conv = _conv(c=64, f=64)  # 3*3*64*64 = 36864 per pixel: reuse 9 at the default 4096
    assert check_reason(conv) is None and "multipliers" in check_reason(conv, Limits(max_reuse=8))


def test_pattern_table_names_and_kinds():
    table = patterns.pattern_table()
    names = [p.name for p in table]
    assert len(set(names)) == len(names) and all(n.startswith("hetc_fpga.") for n in names)
    kinds = {n.split(".", 1)[1] for n in names} | {"transpose", "scale_shift"}
    assert set(OPS) - {"clip"} <= kinds | {"add", "multiply"}


# -- supports(OpNode): the import-time graph -----------------------------------------------------


def test_supports_opnode_on_import_graph():
    model = make([helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),  # ok
                  helper.make_node("Conv", ["a", "w2"], ["b"], group=2, pads=[1, 1, 1, 1]),  # groups 2 of 8
                  helper.make_node("Conv", ["b", "w3"], ["c"], pads=[4, 4, 4, 4]),  # 9x9
                  helper.make_node("Relu", ["c"], ["d"]),
                  helper.make_node("Cast", ["d"], ["e"], to=6),  # float -> int32
                  helper.make_node("Add", ["e", "e"], ["y"])],
                 [tensor("x", [1, 3, 8, 8])], [tensor("y", [1, 8, 8, 8], np.int32)],
                 {"w1": _w(8, 3, 3, 3), "w2": _w(8, 4, 3, 3), "w3": _w(8, 8, 9, 9)})
    nodes = list(build_opgraph(to_relax(load_model(model))).nodes)
    by_op = {}
    for n in nodes:
        by_op.setdefault(n.op, []).append(n)
    convs = by_op["relax.nn.conv2d"]
    assert [supports(n) for n in convs] == [True, False, False]
    assert "groups=2" in node_reason(convs[1]) and "9x9" in node_reason(convs[2])
    assert supports(by_op["relax.nn.relu"][0])
    cnn_nodes = build_opgraph(to_relax(load_model(_cnn()))).nodes  # NCHW: the bias adds are (1, C, 1, 1)
    assert all(supports(n) for n in cnn_nodes if n.op in ("relax.add", "relax.nn.conv2d", "relax.mean"))
    assert "int32" in node_reason(by_op["relax.add"][0])
    assert "no FPGA kernel" in node_reason(by_op["relax.astype"][0])


# -- end to end: ONNX -> Relax -> BYOC partition -> Region -> emulation == onnxruntime --------------


def _partition(model, limits=None):
    mod = to_relax(load_model(model))
    mod, _ = run_pipeline(mod, inference_passes() + simplify_passes() + layout_passes("NHWC"))
    return patterns.partition(mod, limits)


def _only_region(part):
    funcs = fpga_functions(part)
    assert len(funcs) == 1, list(funcs)
    (name, func), = funcs.items()
    region = region_from_function(func, name)
    names = [n for n, _ in region.inputs] + [layer.name for layer in region.layers]
    assert len(set(names)) == len(names) and all(c_identifier(n) == n for n in names)
    return region


def _mlp():
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["z"]),
             helper.make_node("Softmax", ["z"], ["y"], axis=-1)]
    return make(nodes, [tensor("x", [3, 20])], [tensor("y", [3, 7])],
                {"w1": _w(32, 20), "b1": _w(32), "w2": _w(32, 7), "b2": _w(7)})


def _cnn():
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2], group=8),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Add", ["c2", "r2"], ["a"]),  # a skip connection inside the region
             helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    return make(nodes, [tensor("x", [2, 3, 16, 16])], [tensor("y", [2, 5])],
                {"w1": _w(8, 3, 3, 3), "b1": _w(8), "w2": _w(8, 1, 3, 3), "b2": _w(8), "wf": _w(5, 8), "bf": _w(5)})


def test_mlp_becomes_one_region_matching_onnxruntime():
    model = _mlp()
    part = _partition(model)
    assert unsupported_reasons(part) == {}
    region = _only_region(part)
    assert [layer.op for layer in region.layers] == ["dense", "relu", "dense", "softmax"]
    assert region.inputs == [("x", (20,))] and region.batch == 3
    assert region.layers[0].weights["weight"].shape == (20, 32)  # Gemm transB folded to (n_in, n_out)
    x = RNG.normal(0, 1, (3, 20)).astype(np.float32)
    y = emulate.run(region, [x])[region.outputs[0]]
    assert_close(y.astype(np.float32), ort_run(model, {"x": x})[0], rel=1e-4)


def test_cnn_becomes_one_region_matching_onnxruntime():
    model = _cnn()
    part = _partition(model)
    assert unsupported_reasons(part) == {}
    region = _only_region(part)
    ops = [layer.op for layer in region.layers]
    # the NCHW input is transposed inside; conv+bias+relu is not fused where the conv output is
    # also used by the Add (it would leak out of the composite)
    assert ops[:2] == ["transpose", "conv2d"] and ops.count("conv2d") == 2 and "add" in ops
    assert {"max_pool2d", "global_avg_pool2d", "dense"} <= set(ops)
    dw = [layer for layer in region.layers if layer.op == "conv2d"][1]
    assert dw.attrs == {"strides": (2, 2), "pads": (1, 1, 1, 1), "groups": 8}
    assert dw.weights["weight"].shape == (3, 3, 1, 8)  # (KH, KW, C/groups, F) from OHWI
    x = RNG.normal(0, 1, (2, 3, 16, 16)).astype(np.float32)
    out = emulate.run(region, [x])
    assert_close(out[region.outputs[0]].astype(np.float32), ort_run(model, {"x": x})[0], rel=1e-4)

    # precision and estimates run on the real region
    fixed = precision.choose(region, "fixed", [RNG.normal(0, 1, (8, 3, 16, 16))])
    report = precision.error_report(fixed, region, [x])
    assert max(r["max_rel_err"] for r in report.values()) < 0.02
    est = estimates.estimate(fixed).to_json()
    assert est["estimate"] is True and est["dsp"] > 0 and len(est["layers"]) == len(region.layers)


def test_partial_offload_matches_the_sub_model():
    """Exp stays on the CPU; every other op (pools with padding, sigmoid, a two-input multiply, a
    clip pair, a decomposed batch norm, transposes, layer_norm, softmax) forms one region whose
    input is exp(x)."""
    c = 6
    body = [
        helper.make_node("Conv", ["e", "w1", "b1"], ["c1"], pads=[2, 1, 1, 2], kernel_shape=[5, 5]),
        helper.make_node("AveragePool", ["c1"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
        helper.make_node("Sigmoid", ["ap"], ["sg"]),
        helper.make_node("Mul", ["sg", "c1"], ["m"]),
        helper.make_node("Clip", ["m", "lo", "hi"], ["cl"]),
        helper.make_node("MaxPool", ["cl"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["mp", "s", "bb", "mu", "var"], ["bn"]),
        helper.make_node("AveragePool", ["bn"], ["ap2"], kernel_shape=[2, 2], pads=[0, 0, 1, 1]),
        helper.make_node("Tanh", ["ap2"], ["th0"]),
        helper.make_node("LeakyRelu", ["th0"], ["th"], alpha=0.2),
        helper.make_node("Transpose", ["th"], ["tr"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["tr", "shape"], ["rs"]),
        helper.make_node("LayerNormalization", ["rs", "g", "beta"], ["ln"], axis=-1, epsilon=1e-5),
        helper.make_node("Softmax", ["ln"], ["y"], axis=-1)]
    inits = {"w1": _w(c, 3, 5, 5), "b1": _w(c), "lo": np.float32(-1), "hi": np.float32(2.5), "s": 1 + _w(c),
             "bb": _w(c), "mu": _w(c), "var": 1 + np.abs(_w(c)), "shape": np.array([2, -1, c], np.int64),
             "g": 1 + _w(c), "beta": _w(c)}
    model = make([helper.make_node("Exp", ["x"], ["e"]), *body], [tensor("x", [2, 3, 12, 12])],
                 [tensor("y", [2, 36, c])], inits)
    sub_model = make(body, [tensor("e", [2, 3, 12, 12])], [tensor("y", [2, 36, c])], inits)
    part = _partition(model)
    reasons = unsupported_reasons(part)
    assert list(reasons.values()) == ["no FPGA kernel for relax.exp"]
    region = _only_region(part)
    ops = [layer.op for layer in region.layers]
    assert ops.count("clip") == 1 and ops.count("scale_shift") == 1  # Clip pair, BN as one layer
    assert {"avg_pool2d", "sigmoid", "multiply", "tanh", "leaky_relu", "transpose", "reshape", "layer_norm",
            "softmax"} <= set(ops)
    x = RNG.normal(0, 0.5, (2, 3, 12, 12)).astype(np.float32)
    e = np.exp(x)
    y = emulate.run(region, [e])[region.outputs[0]]
    assert_close(y.astype(np.float32), ort_run(sub_model, {"e": e})[0], rel=1e-4)


def test_rejected_node_stays_on_cpu_with_its_reason():
    model = make([helper.make_node("Conv", ["x", "w"], ["c"], pads=[2, 2, 2, 2], dilations=[2, 2]),
                  helper.make_node("Relu", ["c"], ["y"])],
                 [tensor("x", [1, 3, 8, 8])], [tensor("y", [1, 4, 8, 8])], {"w": _w(4, 3, 3, 3)})
    part = _partition(model)
    reasons = unsupported_reasons(part)
    assert any("dilation" in r for r in reasons.values()), reasons
    # the input's NCHW -> NHWC transpose alone would be a region moving data only
    assert "moves data only, next to no FPGA computation" in reasons.values()
    region = _only_region(part)
    assert [layer.op for layer in region.layers] == ["relu", "transpose"]
    # a tighter budget keeps a dense layer on the CPU
    tight = Limits(max_multipliers=64, max_reuse=3)  # 20x32 and 32x7 need reuse 10 and 4
    part = _partition(_mlp(), tight)
    assert sum("multipliers" in r for r in unsupported_reasons(part, tight).values()) == 2


def test_single_op_regions_with_annotate_codegen():
    """``annotate_codegen=True`` without merging: one function per composite, each a Region."""
    mod = to_relax(load_model(_mlp()))
    mod, _ = run_pipeline(mod, inference_passes() + simplify_passes() + layout_passes("NHWC"))
    mod = relax.transform.FuseOpsByPattern(patterns.pattern_table(), annotate_codegen=True)(mod)
    regions = [region_from_function(f, n) for n, f in fpga_functions(mod).items()]
    assert sorted(layer.op for r in regions for layer in r.layers) == ["dense", "dense", "relu", "softmax"]
