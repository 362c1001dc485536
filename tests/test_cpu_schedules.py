"""Default CPU schedules: every op kind, odd shapes, 1x1, strides, batch > 1, against onnxruntime.

Each case also checks which rule scheduled its kernels, so a rule that silently stops
matching (and falls back to the slow generic schedule) fails here, not only in a benchmark.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from onnx import helper, numpy_helper
from onnx_util import conv_model, make, tensor

import hetc
from hetc.backends.cpu.codegen import llvm_target
from hetc.backends.cpu.schedules import simd_lanes
from hetc.backends.cpu.schedules.gemm import choose_tile, is_box, tile_candidates
from hetc.options import CompileOptions

RNG = np.random.default_rng(0)


def _w(*shape) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]) or 1)).astype(np.float32)


def _conv_model(n, c, h, w, k, kernel, stride=1, pad=0, group=1, bias=True, relu=False, residual=False):
    weight = _w(k, c // group, kernel, kernel)
    return conv_model([n, c, h, w], weight, _w(k) if bias else None, stride, [pad] * 4, group=group,
                      residual=residual, relu=relu)


def _single(op, in_shapes, out_shape, inits=None, **attrs):
    names = [f"i{k}" for k in range(len(in_shapes))]
    node = helper.make_node(op, names + list(inits or {}), ["out"], **attrs)
    return make([node], [tensor(nm, s) for nm, s in zip(names, in_shapes)], [tensor("out", out_shape)], inits)


def _conv_pool_model(pool, **attrs):
    conv = _conv_model(1, 8, 11, 11, 32, 3, pad=1, relu=True)
    nodes = list(conv.graph.node) + [helper.make_node(pool, ["z"], ["p"], kernel_shape=[3, 3], **attrs)]
    size = (11 + 2 - 3) // attrs.get("strides", [1])[0] + 1
    return make(nodes, [tensor("x", [1, 8, 11, 11])], [tensor("p", [1, 32, size, size])],
                {i.name: numpy_helper.to_array(i) for i in conv.graph.initializer})



CASES = {
    # name: (model, rule every heavy kernel must get)
    "conv3x3_batch2_odd": (lambda: _conv_model(2, 3, 15, 13, 16, 3, pad=1, relu=True), "contraction"),
    "conv1x1": (lambda: _conv_model(1, 64, 7, 7, 32, 1), "contraction"),
    "conv3x3_stride2_residual": (lambda: _conv_model(1, 8, 17, 17, 24, 3, stride=2, pad=1, residual=True,
                                                     relu=True), "contraction"),
    "conv7x7_stride2_nobias": (lambda: _conv_model(1, 3, 32, 32, 64, 7, stride=2, pad=3, bias=False),
                               "contraction"),
    "conv_48_channels": (lambda: _conv_model(1, 24, 9, 9, 48, 3, pad=1), "contraction"),
    "conv_odd_channels": (lambda: _conv_model(1, 5, 10, 10, 7, 3, pad=1), "contraction"),
    "depthwise3x3": (lambda: _conv_model(1, 32, 14, 14, 32, 3, pad=1, group=32, relu=True), "sliding-window"),
    "depthwise3x3_stride2": (lambda: _conv_model(2, 48, 15, 15, 48, 3, stride=2, pad=1, group=48),
                             "sliding-window"),
    "depthwise5x5_prime_width": (lambda: _conv_model(1, 16, 13, 13, 16, 5, pad=2, group=16), "sliding-window"),
    # 24 channels are whole vectors on AVX2 (8 lanes) only; on AVX-512 they are padded to 32
    # (ragged_conv.py) for the sliding-window kernel
    "depthwise_24_channels": (lambda: _conv_model(1, 24, 10, 10, 24, 3, pad=1, group=24), "sliding-window"),
    "conv3x3_rgb_stem": (lambda: _conv_model(1, 3, 32, 32, 32, 3, stride=2, pad=1, relu=True), "contraction"),
    "grouped_conv": (lambda: _conv_model(1, 16, 8, 8, 32, 3, pad=1, group=4), None),
    "matmul_const_odd": (lambda: _single("MatMul", [[2, 37, 53]], [2, 37, 29], {"W": _w(53, 29)}), "contraction"),
    "matmul_const_bert": (lambda: _single("MatMul", [[1, 128, 96]], [1, 128, 192], {"W": _w(96, 192)}),
                          "contraction"),
    "batch_matmul_runtime": (lambda: _single("MatMul", [[3, 16, 24], [3, 24, 40]], [3, 16, 40]), "contraction"),
    "gemm_transB_bias": (lambda: _single("Gemm", [[5, 64]], [5, 48], {"W": _w(48, 64), "C": _w(48)}, transB=1),
                         "contraction"),
    "gemv": (lambda: _single("Gemm", [[1, 200]], [1, 10], {"W": _w(10, 200)}, transB=1), None),
    "maxpool3x3_s2": (lambda: _single("MaxPool", [[2, 16, 15, 15]], [2, 16, 8, 8], kernel_shape=[3, 3],
                                      strides=[2, 2], pads=[1, 1, 1, 1]), None),
    "avgpool2x2": (lambda: _single("AveragePool", [[1, 32, 8, 8]], [1, 32, 4, 4], kernel_shape=[2, 2],
                                   strides=[2, 2]), None),
    "avgpool3x3_pad_excluded": (lambda: _single("AveragePool", [[1, 16, 9, 9]], [1, 16, 9, 9], kernel_shape=[3, 3],
                                                pads=[1, 1, 1, 1]), None),
    # after a conv the pool is NHWC too: channels innermost, the sliding-window rule's form
    "conv_then_maxpool": (lambda: _conv_pool_model("MaxPool", pads=[1, 1, 1, 1], strides=[2, 2]), "sliding-window"),
    "conv_then_avgpool": (lambda: _conv_pool_model("AveragePool", pads=[1, 1, 1, 1]), "sliding-window"),
    "global_avgpool": (lambda: _single("GlobalAveragePool", [[2, 64, 7, 7]], [2, 64, 1, 1]), None),
    "softmax": (lambda: _single("Softmax", [[4, 12, 33]], [4, 12, 33], axis=-1), None),
    "layernorm": (lambda: _single("LayerNormalization", [[2, 10, 96]], [2, 10, 96],
                                  {"g": _w(96) + 1, "b": _w(96)}, axis=-1), None),
    "reduce_mean": (lambda: _single("ReduceMean", [[3, 40, 50]], [3, 1, 50], axes=[1], keepdims=1), None),
    "reduce_sum_odd_rows": (lambda: _single("ReduceSum", [[2, 9, 2, 5, 3]], [2, 9, 1, 5, 3],
                                            {"axes": np.array([2], np.int64)}, keepdims=1), None),
    "int8_matmul": (lambda: make([helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
                                 [tensor("a", [4, 32], np.uint8)], [tensor("y", [4, 16], np.int32)],
                                 {"b": RNG.integers(0, 255, (32, 16)).astype(np.uint8)}), None),
    "transpose": (lambda: _single("Transpose", [[2, 3, 17, 16]], [2, 17, 16, 3], perm=[0, 2, 3, 1]), None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_default_schedule_matches_onnxruntime(name):
    build, rule = CASES[name]
    model = build()
    rng = np.random.default_rng(1)
    inputs = {}
    for v in model.graph.input:
        shape = [d.dim_value for d in v.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)
        inputs[v.name] = (rng.standard_normal(shape).astype(dtype) if dtype.kind == "f"
                          else rng.integers(0, 255, shape).astype(dtype))
    compiled = hetc.compile(model, "cpu")
    outputs = compiled.run(inputs)
    actual = outputs if isinstance(outputs, list) else list(outputs.values())
    for got, want in zip(actual, ort_run(model, inputs)):
        assert_close(np.asarray(got), want)
    kernels = compiled.report["kernels"]
    assert "none" not in kernels.values(), kernels
    if rule is not None:
        assert rule in kernels.values(), kernels


@pytest.mark.parametrize("n, lanes, regs, extents", [(64, 16, 32, [56, 56]), (768, 16, 32, [128]),
                                                    (512, 8, 16, [7, 7]), (96, 16, 32, [7]),
                                                    (3, 16, 32, [2, 9, 5])])
def test_register_tile_divides_and_fits(n, lanes, regs, extents):
    m = int(np.prod(extents))
    tile = choose_tile(m, n, lanes, regs, extents)
    vectors = tile.vj // tile.width if tile.width else 1
    assert m % tile.rows == 0 and n % tile.vj == 0 and (not tile.width or tile.vj % tile.width == 0)
    assert tile.rows * vectors + vectors + 1 <= regs
    assert is_box(tile.rows, extents)
    if n % lanes == 0 and m >= 4 and extents[-1] % 4 == 0:
        assert tile.width == lanes and tile.rows * vectors >= 8  # a real micro-kernel


def test_tile_rows_are_boxes_in_the_fused_axes():
    assert is_box(8, [56, 56]) and is_box(112, [56, 56]) and is_box(45, [2, 9, 5])
    assert not is_box(10, [2, 9, 5])  # would straddle (a0=0, a1=8) and (a0=1, a1=0)
    assert not is_box(12, [56, 56])
    assert all(is_box(t.rows, [2, 9, 5]) for t in tile_candidates(90, 3, 16, 32, [2, 9, 5]))


def test_register_tile_uses_half_vectors_for_24_channels():
    tile = choose_tile(3136, 24, 16, 32, [56, 56])
    assert tile.width == 8 and tile.vj == 24 and tile.rows >= 4
    assert choose_tile(10, 7, 16, 32, [10]).width == 0  # 7 columns: scalar, still correct
    assert choose_tile(64, 64, 0, 32, [64]).width == 0  # int8/bool: no explicit vectors


@pytest.mark.parametrize("name", ["depthwise3x3_stride2", "depthwise5x5_prime_width", "conv_then_maxpool",
                                  "conv_then_avgpool"])
def test_every_sliding_window_variant_is_correct(name):
    """The tuner measures all of a rule's variants, so each must compute the same as the
    unscheduled kernel (row bands with a padded buffer included)."""
    import tvm
    from tvm import tirx

    from hetc import api
    from hetc.backends.cpu.codegen import llvm_target
    from hetc.backends.cpu.pipeline import pre_schedule_stages
    from hetc.backends.cpu.schedules import depthwise
    from hetc.options import CompileOptions
    from hetc.targets import parse_targets

    options, targets = CompileOptions(), parse_targets("cpu")
    _, mod, _, _ = api._import(CASES[name][0](), targets, options, None, None)
    mod, _ = api.run_pipeline(mod, pre_schedule_stages(options))
    target = llvm_target(options)
    checked = 0
    for func in (f for f in mod.functions.values() if isinstance(f, tirx.PrimFunc)):
        schedules = []
        for variant in range(depthwise.RULE.variants):
            sch = depthwise.apply(func, target, 16, variant)
            if sch is None:
                break
            schedules.append(sch.mod["main"])
        if not schedules:
            continue
        rng = np.random.default_rng(0)
        values = [rng.standard_normal([int(d) for d in b.shape]).astype(b.dtype) for b in func.params]

        def run(f, values=values):
            f = f.with_attr("global_symbol", "main").with_attr("tir.is_scheduled", True)
            lib = tvm.tirx.build(tvm.IRModule({"main": f}), target=target)
            args = [tvm.runtime.tensor(v) for v in values]
            lib["main"](*args)
            return args[-1].numpy()

        want = run(func)
        for f in schedules:
            assert_close(run(f), want)
        checked += 1
    assert checked == 1


def _symbolic_conv_model(depthwise=False):
    """Conv + bias + ReLU (or a depthwise conv) with a symbolic batch."""
    c, k = (16, 16) if depthwise else (8, 24)
    inits = {"W": _w(k, 1 if depthwise else c, 3, 3), "B": _w(k)}
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["y"], kernel_shape=[3, 3], pads=[1] * 4,
                              group=c if depthwise else 1), helper.make_node("Relu", ["y"], ["z"])]
    return make(nodes, [tensor("x", ["batch", c, 9, 11])], [tensor("z", ["batch", k, 9, 11])], inits)


def _matmul_model(k: int, n: int):
    return make([helper.make_node("MatMul", ["x", "W"], ["y0"]), helper.make_node("Add", ["y0", "B"], ["y"])],
                [tensor("x", ["batch", "seq", k])], [tensor("y", ["batch", "seq", n])], {"W": _w(k, n), "B": _w(n)})


SYMBOLIC_CASES = {
    # name: (model, dims, sizes to run, rule the heavy kernel must get)
    "conv_batch": (_symbolic_conv_model, {"batch": (1, 8)}, [{"batch": b} for b in (1, 3, 8)], "contraction"),
    "depthwise_batch": (lambda: _symbolic_conv_model(depthwise=True), {"batch": (1, 8)},
                        [{"batch": b} for b in (1, 5)], "sliding-window"),
    # seq is the matmul's rows: tails of 1..tile-1 rows are padded to a whole tile
    "matmul_seq": (lambda: make([helper.make_node("MatMul", ["x", "W"], ["y0"]),
                                 helper.make_node("Add", ["y0", "B"], ["y"])],
                                [tensor("x", ["batch", "seq", 48])], [tensor("y", ["batch", "seq", 40])],
                                {"W": _w(48, 40), "B": _w(40)}),
                   {"batch": (1, 4), "seq": (1, 64)},
                   [{"batch": 1, "seq": s} for s in (1, 5, 16, 37)] + [{"batch": 3, "seq": 13}, {"batch": 3, "seq": 1}],
                   "contraction"),
    # a weight of many column panels: panel major (the panels parallel, seq serial inside)
    "matmul_seq_panels": (lambda: _matmul_model(64, 384), {"batch": (1, 4), "seq": (1, 64)},
                          [{"batch": 1, "seq": s} for s in (1, 13, 64)] + [{"batch": 2, "seq": 5}, {"batch": 4, "seq": 1}],
                          "contraction"),
    # attention scores: seq is the rows and the columns, and the reduction of scores x values
    "attention_seq": (lambda: make([helper.make_node("MatMul", ["q", "kt"], ["s"]),
                                    helper.make_node("MatMul", ["s", "v"], ["y"])],
                                   [tensor("q", ["batch", 2, "seq", 16]), tensor("kt", ["batch", 2, 16, "seq"]),
                                    tensor("v", ["batch", 2, "seq", 16])], [tensor("y", ["batch", 2, "seq", 16])]),
                      {"batch": (1, 4), "seq": (1, 64)},
                      [{"batch": 1, "seq": s} for s in (1, 7, 32)] + [{"batch": 2, "seq": 19}], "contraction"),
    # attention scores against keys read in place (Q @ transpose(K), fused): the keys are a
    # run-time tensor (a KV cache) indexed [.., j, k]; the contraction copies each column
    # panel of it with j last inside the kernel (no transpose of the whole cache)
    "attention_keys_in_place": (lambda: make([helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
                                              helper.make_node("MatMul", ["q", "kt"], ["s0"]),
                                              helper.make_node("Mul", ["s0", "c"], ["s"])],
                                             [tensor("q", ["batch", 2, "seq", 32]),
                                              tensor("k", ["batch", 2, "total", 32])],
                                             [tensor("s", ["batch", 2, "seq", "total"])],
                                             {"c": np.array(0.125, np.float32)}),
                                {"batch": (1, 4), "seq": (1, 64), "total": (1, 128)},
                                [{"batch": 1, "seq": 1, "total": t} for t in (1, 17, 100)]
                                + [{"batch": 2, "seq": 5, "total": 33}], "contraction"),
    "attention_keys_in_place_no_epilogue": (
        lambda: make([helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
                      helper.make_node("MatMul", ["q", "kt"], ["s"])],
                     [tensor("q", ["batch", 2, "seq", 32]), tensor("k", ["batch", 2, "total", 32])],
                     [tensor("s", ["batch", 2, "seq", "total"])]),
        {"batch": (1, 4), "seq": (1, 64), "total": (1, 128)},
        [{"batch": 1, "seq": 1, "total": 40}, {"batch": 3, "seq": 2, "total": 7}], "contraction"),
    # a column count the SIMD width does not divide (an LM head's vocabulary): the packed
    # weight is padded with zero columns, the tile stays vectorized
    "matmul_odd_columns": (lambda: _matmul_model(64, 1001), {"batch": (1, 4), "seq": (1, 64)},
                           [{"batch": 1, "seq": s} for s in (1, 6)] + [{"batch": 2, "seq": 1}], "contraction"),
}


@pytest.mark.parametrize("name", list(SYMBOLIC_CASES))
def test_symbolic_extents_keep_their_rule_and_match_onnxruntime(name):
    """One artifact with symbolic dims: the contraction / sliding-window rules take the kernels
    (not generic) and every size, tails that are not a multiple of the tile included, matches."""
    build, dims, sizes, rule = SYMBOLIC_CASES[name]
    model = build()
    compiled = hetc.compile(model, "cpu", dims=dims)
    kernels = compiled.report["kernels"]
    assert rule in kernels.values() and "none" not in kernels.values(), kernels
    if rule == "contraction":
        heavy = [k for k in kernels if "matmul" in k or "conv" in k]
        assert heavy and all(kernels[k] == "contraction" for k in heavy), kernels
    rng = np.random.default_rng(2)
    for size in sizes:
        inputs = {v.name: rng.standard_normal([size[d.dim_param] if d.dim_param else d.dim_value
                                               for d in v.type.tensor_type.shape.dim]).astype(np.float32)
                  for v in model.graph.input}
        outputs = compiled.run(inputs)
        for got, want in zip(outputs.values(), ort_run(model, inputs)):
            assert got.shape == want.shape
            assert_close(np.asarray(got), want)


def test_a_transpose_read_by_a_matmul_and_more_stays_a_kernel_of_its_own():
    """``x @ transpose(k)`` fuses into one kernel reading ``k`` in place only where nothing else
    reads the transpose: TVM's FuseTransposeMatmul fused it regardless and failed on the tuple
    its fused function then returns ('TupleType' object has no attribute 'dtype'; timm's
    lambda_resnet26t). Here the transpose also feeds a Relu that is an output."""
    model = make([helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
                  helper.make_node("MatMul", ["q", "kt"], ["s"]),
                  helper.make_node("Relu", ["kt"], ["r"])],
                 [tensor("q", ["batch", 8, 16]), tensor("k", ["batch", 12, 16])],
                 [tensor("s", ["batch", 8, 12]), tensor("r", ["batch", 16, 12])])
    compiled = hetc.compile(model, "cpu", dims={"batch": (1, 4)})
    rng = np.random.default_rng(0)
    inputs = {"q": rng.standard_normal((3, 8, 16)).astype(np.float32),
              "k": rng.standard_normal((3, 12, 16)).astype(np.float32)}
    for got, want in zip(compiled.run(inputs).values(), ort_run(model, inputs)):
        assert_close(np.asarray(got), want)
    # with the transpose read by the matmul alone, the pair is one kernel (no transpose kernel)
    single = make([helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
                   helper.make_node("MatMul", ["q", "kt"], ["s"])],
                  [tensor("q", ["batch", 8, 16]), tensor("k", ["batch", 12, 16])], [tensor("s", ["batch", 8, 12])])
    kernels = hetc.compile(single, "cpu", dims={"batch": (1, 4)}).report["kernels"]
    assert not any("transpose" in name for name in kernels), kernels


def test_symbolic_rows_under_many_panels_run_panel_major():
    """With symbolic rows (batch x seq) and a weight of many column panels the parallel loop is
    the static panel loop and every row loop runs inside it, as in a static build (rows outside
    made BERT's projections 2x slower than static: every row tile streamed the whole weight)."""
    from tvm import tirx

    from hetc import api
    from hetc.backends.cpu.pipeline import pre_schedule_stages
    from hetc.backends.cpu.schedules import gemm
    from hetc.targets import parse_targets

    options, targets = CompileOptions(), parse_targets("cpu")
    _, mod, _, _ = api._import(_matmul_model(64, 384), targets, options, None, None)
    mod, _ = api.run_pipeline(mod, pre_schedule_stages(options))
    (func,) = [f for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc) and "matmul" in gv.name_hint]
    sch = gemm.apply(func, llvm_target(options), 8)
    loops = [sch.get(lp) for lp in sch.get_loops(sch.get_sblock("matmul_update"))]  # outermost first
    kinds = [(lp.kind, isinstance(lp.extent, tirx.IntImm)) for lp in loops]
    first_parallel = next(k for k, (kind, _) in enumerate(kinds) if kind == tirx.ForKind.PARALLEL)
    assert kinds[first_parallel][1], kinds  # the panels: a static extent
    # batch and seq's row tiles: serial symbolic loops inside the panel loop, none outside it
    # (a batch loop outside re-streamed every weight panel per batch row: 1.8x slower)
    assert first_parallel == 0, kinds
    assert kinds[1:3] == [(tirx.ForKind.SERIAL, False)] * 2, kinds


def test_one_row_runs_its_own_loops_over_the_same_packed_weight():
    """A contraction with symbolic rows is padded to a multi-row register tile; at one row (a
    decoding step) that is 4-5x the multiply-adds. The default schedule carries a one-row
    branch taken when batch * seq == 1, without padding, that reads the same packed weight
    (one packing block). (SYMBOLIC_CASES run both branches against onnxruntime.)"""
    from tvm import tirx

    from hetc import api
    from hetc.backends.cpu.pipeline import pre_schedule_stages
    from hetc.backends.cpu.schedules import PREPROC, schedule_func
    from hetc.targets import parse_targets

    options, targets = CompileOptions(), parse_targets("cpu")
    _, mod, _, _ = api._import(_matmul_model(64, 384), targets, options, None, None)
    mod, _ = api.run_pipeline(mod, pre_schedule_stages(options))
    (func,) = [f for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc) and "matmul" in gv.name_hint]
    target = llvm_target(options)
    scheduled, rule = schedule_func(func, target, simd_lanes(target))
    text = scheduled.script()
    assert rule == "contraction" and "if batch * seq == T.int64(1):" in text, text
    assert text.count(PREPROC) == 1, text  # one packed copy of the weight for every branch
    one_row, leading, general = text.split("if batch * seq == T.int64(1):")[1].split("else:")
    assert "_pad" not in one_row and "_pad" in general  # padded rows only in the multi-row branches
    # seq == 1 with several sequences (a batched decoding step): the tile runs along the batch
    assert "if seq == T.int64(1):" in leading and "(batch + T.int64(" in leading, leading
    assert "(seq + T.int64(" in general and "(batch + T.int64(" not in general, general
    # static rows: nothing to dispatch on
    _, mod, _, _ = api._import(_matmul_model(64, 384), targets, CompileOptions(input_shapes={"x": (1, 1, 64)}),
                               None, None)
    mod, _ = api.run_pipeline(mod, pre_schedule_stages(options))
    (func,) = [f for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc) and "matmul" in gv.name_hint]
    assert "if " not in schedule_func(func, target, simd_lanes(target))[0].script()


def test_a_kernel_printed_too_long_keeps_its_general_schedule(monkeypatch):
    """Run-time dispatch combines schedules as printed text parsed back; the printer writes a
    shared expression once per use (an SE block's inlined gate and SiLU: a 96,000-character
    line, 4.7 s to parse per kernel). Above ``MAX_SCRIPT`` the general schedule stands alone,
    and the kernel still gives onnxruntime's result at one row and at several."""
    from hetc.backends.cpu.schedules import dispatch

    model = _matmul_model(64, 384)
    assert "if batch * seq" in _scheduled_text(model, CompileOptions())
    monkeypatch.setattr(dispatch, "MAX_SCRIPT", 2000)
    assert "if batch * seq" not in _scheduled_text(model, CompileOptions())
    compiled = hetc.compile(model, "cpu", dims={"batch": (1, 4), "seq": (1, 64)})
    for shape in ((1, 1, 64), (2, 9, 64)):
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        assert_close(np.asarray(next(iter(compiled.run({"x": x}).values()))), ort_run(model, {"x": x})[0])


def _scheduled_text(model, options: CompileOptions, kernel: str = "matmul") -> str:
    """The printed default schedule of ``model``'s ``kernel`` (the CPU's rules)."""
    from tvm import tirx

    from hetc import api
    from hetc.backends.cpu.pipeline import pre_schedule_stages
    from hetc.backends.cpu.schedules import schedule_func
    from hetc.targets import parse_targets

    _, mod, _, _ = api._import(model, parse_targets("cpu"), options, None, None)
    mod, _ = api.run_pipeline(mod, pre_schedule_stages(options))
    (func,) = [f for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc) and kernel in gv.name_hint]
    target = llvm_target(options)
    return schedule_func(func, target, simd_lanes(target))[0].script()


def test_weights_streamed_by_several_rows_are_prefetched():
    """A weight beyond a core's cache read by a tile of several rows (a batched decoding step)
    is prefetched a few KB ahead of the row being read, on an Intel core: without it four rows
    streamed a 2048x2048 weight at 8.0 instead of 11.5 GB/s (one core, 2-core Intel Xeon, LLVM
    emeraldrapids, AVX-512). Not in the one-row branch, nor where the batch loop runs around
    a tile along seq (each sequence re-reads the panel from cache), nor for a small weight;
    nowhere on a Zen core, where they cost 20% at batch 4 (``prefetch.py``). The leading-rows
    branch's tile has 4 rows (``LEADING_TILE_ROWS``)."""
    from hetc.backends.cpu.schedules import prefetch
    from hetc.backends.cpu.schedules.gemm import LEADING_TILE_ROWS

    k = 512
    n = prefetch.MIN_BYTES // (4 * k)
    for cpu, pays in (("skylake-avx512", True), ("haswell", True), ("znver4", False), ("znver3", False)):
        options = CompileOptions(cpu=cpu)
        assert prefetch.pays(llvm_target(options)) == pays
        text = _scheduled_text(_matmul_model(k, n), options)
        one_row, leading, general = text.split("if batch * seq == T.int64(1):")[1].split("else:")
        assert ("llvm.prefetch" in leading) == pays and "llvm.prefetch" not in one_row + general, text
        rows = LEADING_TILE_ROWS
        assert f"(batch + T.int64({rows - 1})) // T.int64({rows})" in leading, leading  # the batch in tiles of 4
        assert "llvm.prefetch" not in _scheduled_text(_matmul_model(64, 384), options)
    model = _matmul_model(k, n)
    compiled = hetc.compile(model, dims={"batch": (1, 8), "seq": (1, 64)})
    for shape in [(3, 1, k), (1, 1, k), (2, 5, k), (7, 1, k)]:  # each branch, a partial tile
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        assert_close(compiled.run({"x": x})["y"], ort_run(model, {"x": x})[0])


@pytest.mark.parametrize("cpu", [None, "haswell"])
def test_rgb_stem_pads_in_a_pass_of_its_own(cpu):
    """A 3-channel stem's padding is a pass before the conv, not a bounds check on every
    broadcast of its micro-kernel: inlined, ResNet-50's 7x7 stride-2 stem ran 2.6x slower
    (4.74 against 1.82 ms, the pass included; 2-core Zen 3, LLVM znver3, AVX2)."""
    model = _conv_model(1, 3, 32, 32, 16, 7, stride=2, pad=3, relu=True)
    text = _scheduled_text(model, CompileOptions(cpu=cpu), kernel="conv2d")
    update = [line for line in text.splitlines() if "conv2d_nhwc_intermediate_local[" in line and " + " in line]
    assert update and not any("if_then_else" in line for line in update), text
    assert "pad_temp[" in text and "if_then_else" in text, text  # the padding pass
    x = RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)
    out = hetc.compile(model, cpu=cpu).run({"x": x})
    assert_close(next(iter(out.values())), ort_run(model, {"x": x})[0])


def test_int8_weights_are_prefetched_at_one_row_too():
    """int8 weights (``weights="int8"``): the hardware prefetchers fell behind even at one row.
    On CPUs with an integer dot product the kernel rounds each row to int16 and runs one-row
    tiles of ``vpdpwssd`` (``vpmaddwd`` on AVX2) over panels streamed with prefetches; elsewhere
    the float kernel converts every vector before its multiply-add (96 chained 768x2048 int8
    matmuls read 12.2 GB/s at one row without prefetches, 18.4 with them; 2-core Intel Xeon,
    LLVM emeraldrapids), and both of its decoding branches prefetch. Not on a Zen core
    (``prefetch.pays``)."""
    from hetc.backends.cpu.schedules import prefetch
    from hetc.backends.cpu.schedules.int8 import instruction
    from hetc.passes.weight_int8 import quantize, reference

    k = 1024
    n = prefetch.MIN_BYTES // k
    for cpu in ("cascadelake", "haswell", "znver4"):  # VNNI and AVX2 on Intel cores; a Zen core
        options = CompileOptions(weights="int8", cpu=cpu)
        pays = prefetch.pays(llvm_target(options))
        assert pays == (cpu != "znver4")
        text = _scheduled_text(_matmul_model(k, n), options)
        assert "int16" in text and ("vpdpwssd" in text or "pmaddw" in text), text
        assert ("llvm.prefetch" in text) == pays, text
    for cpu in (None, "haswell"):
        options = CompileOptions(weights="int8", cpu=cpu)
        text = _scheduled_text(_matmul_model(k, n), options)
        words = "int16" in text
        assert words == (instruction(llvm_target(options)) is not None), text  # every x86 CPU with AVX2
        if not words:
            one_row, leading, _ = text.split("if batch * seq == T.int64(1):")[1].split("else:")
            assert "T.vectorized" in one_row and 'T.Cast("float32"' in one_row
        model = _matmul_model(k, n)
        compiled = hetc.compile(model, dims={"batch": (1, 4), "seq": (1, 64)}, weights="int8", cpu=cpu)
        w, b = (numpy_helper.to_array(init) for init in model.graph.initializer)
        q, scale = quantize(w)
        for shape in [(3, 1, k), (1, 1, k), (2, 5, k)]:  # each branch
            x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
            expected = (reference(x, q, scale) if words else (x.astype(np.float64) @ q.astype(np.float64)) * scale) + b
            np.testing.assert_allclose(compiled.run({"x": x})["y"], expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_accumulator_tiles_are_on_the_stack():
    """``passes/stack_locals.py``: the built code allocates no register tile from TVM's
    workspace (a pointer LLVM cannot tell apart from the operands: with a prefetch in the
    loop, the tile was stored back at every reduction step). TVM's own TIR pipeline does."""
    import re

    import tvm

    from hetc import api
    from hetc.backends.cpu.codegen import build
    from hetc.backends.cpu.pipeline import stages
    from hetc.passes.vm_pipeline import vm_pipeline
    from hetc.targets import parse_targets

    options = CompileOptions(dims={"batch": (1, 4), "seq": (1, 64)})
    _, mod, _, _ = api._import(_matmul_model(512, 1024), parse_targets("cpu"), options, None, None)
    mod, _ = api.run_pipeline(mod, stages(options))
    workspace_tiles = re.compile(r"%\w*_local\w* = tail call ptr")

    def llvm_ir(executable) -> str:
        return "".join(lib.inspect_source("ll") for lib in executable.mod.imports)

    assert workspace_tiles.search(llvm_ir(tvm.compile(mod, llvm_target(options), relax_pipeline=vm_pipeline())))
    assert not workspace_tiles.search(llvm_ir(build(mod, options)))


@pytest.mark.parametrize("batch,size", [(1, 32), (3, 16)])
def test_conv_accumulator_is_a_register_tile(batch, size):
    """The accumulator of a conv whose rows fuse n x oh x ow lowers to a tile-sized local
    buffer: splitting the fused rows by the tile left TVM unable to bound its region, so it
    became the whole output in memory (ResNet-50's stem at batch 8: std::bad_alloc)."""
    import re

    import tvm
    from tvm import tirx

    from hetc import api
    from hetc.backends.cpu.pipeline import pre_schedule_stages
    from hetc.backends.cpu.schedules import gemm
    from hetc.targets import parse_targets

    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["y"], kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["y"], ["z"])]
    model = make(nodes, [tensor("x", [batch, 8, size, size])], [tensor("z", [batch, 32, size, size])],
                 {"W": _w(32, 8, 3, 3), "B": _w(32)})
    options, targets = CompileOptions(), parse_targets("cpu")
    _, mod, _, _ = api._import(model, targets, options, None, None)
    mod, _ = api.run_pipeline(mod, pre_schedule_stages(options))
    (func,) = [f for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc) and "conv" in gv.name_hint]
    target = llvm_target(options)
    lanes = simd_lanes(target)
    sch = gemm.apply(func, target, lanes)
    assert sch is not None
    lowered = tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")})
    lowered = tvm.tirx.transform.BindTarget(target.with_host(target))(lowered)
    script = tvm.tirx.get_default_tir_pipeline(target)[0](lowered).script()
    sizes = [int(n) for n in re.findall(r"alloc_local\(\((?:T\.int64\()?(\d+)", script)]
    assert sizes and max(sizes) <= 64, sizes  # a few rows x a few vectors, not the output


@pytest.mark.parametrize("rows,rule", [(1, "generic"), (4, "row-reduction")])
def test_layer_norm_of_one_row_is_not_scheduled_as_rows_of_columns(rows, rule):
    """One row (a decoding step) drops the unit axes: dlight's row rule took the columns for
    rows and recomputed the row's statistics per column (0.62 ms instead of 5 us)."""
    inits = {"g": _w(768), "b": _w(768)}
    model = make([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)],
                 [tensor("x", [1, rows, 768])], [tensor("y", [1, rows, 768])], inits, opset=17)
    compiled = hetc.compile(model, "cpu")
    assert set(compiled.report["kernels"].values()) == {rule}, compiled.report["kernels"]
    x = np.random.default_rng(0).standard_normal((1, rows, 768)).astype(np.float32)
    assert_close(compiled.run({"x": x})["y"], ort_run(model, {"x": x})[0])


@pytest.mark.parametrize("rows", [197, 3137, 17, 13])
def test_static_rows_without_a_good_divisor_are_padded_to_whole_tiles(rows):
    """197 tokens (ViT-B/16) or 3137 (CoaT: prime) allowed only a one-row tile, which reloads
    every weight vector per row (a 3137x152 @ 152x608 matmul 2.2x slower, 2-core Zen 5, AVX-512); the rows are padded
    to whole tiles instead, as for a symbolic count. So are short counts (17 tokens: a ViT-B/16
    at 64x64, where the one-row tile ran a 17x768x3072 MLP 6.7x onnxruntime). The schedule is
    checked as AVX-512 code on any machine (with AVX2's 16 registers, 13 rows' padded tile scores
    exactly 1.5x the unpadded one, the threshold, and stays unpadded)."""
    import re

    from tvm import te

    from hetc.backends.cpu.schedules import schedule_func

    a, b = te.placeholder((rows, 64), name="a"), te.placeholder((64, 96), name="b")
    k = te.reduce_axis((0, 64), "k")
    c = te.compute((rows, 96), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="matmul")
    target = llvm_target(CompileOptions(cpu="skylake-avx512"))  # scheduled only, not run
    scheduled, rule = schedule_func(te.create_prim_func([a, b, c]).with_attr("layout_free_buffers", [1]), target,
                                    simd_lanes(target))
    script = scheduled.script()
    assert rule == "contraction" and '"a_pad"' in script, script
    assert max(int(u) for u in re.findall(r"T\.unroll\((\d+)\)", script)) >= 4, script
    w = np.random.default_rng(2).standard_normal((64, 96)).astype(np.float32)
    model = make([helper.make_node("MatMul", ["x", "w"], ["y"])], [tensor("x", [1, rows, 64])],
                 [tensor("y", [1, rows, 96])], {"w": w})
    data = {"x": np.random.default_rng(3).standard_normal((1, rows, 64)).astype(np.float32)}
    assert_close(hetc.compile(model, "cpu").run(data)["y"], ort_run(model, data)[0], rel=1e-5)


@pytest.mark.parametrize("tokens", [962, 197, 256])
def test_softmax_rows_no_vector_divides_are_not_split_with_a_guard(tokens):
    """A row of 962 tokens (timm PiT) split by the vector width with a guarded tail ran scalar
    (4.3 ms a call, 2-core Zen 5, AVX-512); left whole, LLVM vectorizes it with its own remainder loop. Rows a vector
    divides are split as dlight does."""
    from tvm import te, topi

    from hetc.backends.cpu.schedules import schedule_func

    x = te.placeholder((2, 24, tokens), name="x")
    func = te.create_prim_func([x, topi.nn.fast_softmax(x)])
    target = llvm_target(CompileOptions())
    scheduled, rule = schedule_func(func, target, simd_lanes(target))
    assert rule == "row-reduction"
    assert "T.where(" not in scheduled.script(), scheduled.script()
    model = make([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [tensor("x", [2, 24, tokens])],
                 [tensor("y", [2, 24, tokens])], {}, opset=17)
    data = {"x": np.random.default_rng(1).standard_normal((2, 24, tokens)).astype(np.float32)}
    assert_close(hetc.compile(model, "cpu").run(data)["y"], ort_run(model, data)[0], rel=1e-5)


@pytest.mark.parametrize("shape,axis,lanes", [((1, 4, 16, 128), -1, True), ((2, 5, 384), 2, True),
                                               ((3, 16), -1, False), ((2, 6, 50), -1, False), ((2, 64, 3), 1, False)])
def test_softmax_rows_reduce_in_vector_partials(shape, axis, lanes):
    """``pipeline._fast_softmax``: over a last axis the lanes divide into several steps, each
    row's max and sum are first 16 partial results, a loop over the steps with the lanes
    vectorized inside (``reduction._lane_partial_loops``); dlight's plain row reductions stayed
    scalar chains (a 12 x 128 x 128 softmax: 0.43 ms against onnxruntime's 0.059, 2-core Intel
    Xeon, LLVM emeraldrapids). Other rows keep TOPI's form. Both match onnxruntime."""
    from tvm import te

    from hetc.backends.cpu.pipeline import _fast_softmax
    from hetc.backends.cpu.schedules import schedule_func

    x = te.placeholder(shape, name="x")
    target = llvm_target(CompileOptions())
    scheduled, rule = schedule_func(te.create_prim_func([x, _fast_softmax(x, axis)]), target, simd_lanes(target))
    script = scheduled.script()
    assert ("T_softmax_maxpart_update" in script) == lanes
    if lanes:
        assert rule == "row-reduction"
        for part in ("T_softmax_maxpart_update", "T_softmax_exppart_update"):  # a vector step per 16 elements
            loop = script[:script.index(f'T.sblock("{part}")')].rsplit("for ", 1)[1]
            assert "in T.vectorized(" in loop.split("\n")[0], script
    model = make([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], [tensor("x", list(shape))],
                 [tensor("y", list(shape))], {}, opset=17)
    data = {"x": 4 * np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    assert_close(hetc.compile(model, "cpu").run(data)["y"], ort_run(model, data)[0], rel=1e-5)


@pytest.mark.parametrize("dims", [{"batch": (1, 1), "seq": (1, 1)}, {"batch": (1, 4), "seq": (1, 64)}])
def test_odd_column_count_gets_a_vector_tile_over_padded_weights(dims):
    """50257 columns (GPT-2's LM head) are not a multiple of any SIMD width: the scalar tile
    they got ran 1.5x slower (Zen 3, AVX2) than the vector tile over weights padded with zero columns at
    compile time. The packed weight is padded, the micro-kernel vectorized, the result exact."""
    import tvm

    captured = {}
    build = tvm.compile

    def grab(mod, *args, **kwargs):
        captured["mod"] = mod
        return build(mod, *args, **kwargs)

    model = _matmul_model(64, 1001)
    tvm.compile = grab
    try:
        compiled = hetc.compile(model, "cpu", dims=dims)
    finally:
        tvm.compile = build
    (func,) = [f for gv, f in captured["mod"].functions.items()
               if isinstance(f, tvm.tirx.PrimFunc) and "matmul" in gv.name_hint]
    packed = [p for p in func.params if p.name.endswith("_global")]  # the panels pack_panels made
    assert packed, func.script()
    panels, _, width = [int(d) for d in packed[0].shape]
    assert panels * width > 1001 and width % 4 == 0, (panels, width)
    assert "T.vectorized" in func.script()
    rng = np.random.default_rng(0)
    for seq in ((1,) if dims["seq"][1] == 1 else (1, 7)):
        x = {"x": rng.standard_normal((1, seq, 64)).astype(np.float32)}
        assert_close(compiled.run(x)["y"], ort_run(model, x)[0])


def test_cpu_target_reassociates_but_keeps_nan_and_inf():
    """The CPU target lets LLVM reassociate sums (vectorized softmax/layer norm reductions: 2x
    faster) but assumes nothing about NaN or Inf: a row with a NaN stays NaN, a row with -inf
    gets a zero there, as in onnxruntime."""
    target = llvm_target(CompileOptions())
    assert target.attrs["fast-math-reassoc"]
    assert not any(k in target.attrs for k in ("fast-math", "fast-math-nnan", "fast-math-ninf", "fast-math-arcp"))
    model = make([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [tensor("x", [3, 40])], [tensor("y", [3, 40])])
    x = np.random.default_rng(0).standard_normal((3, 40)).astype(np.float32)
    x[1, 7] = np.nan
    x[2, 3] = -np.inf
    got = hetc.compile(model, "cpu").run({"x": x})["y"]
    want = ort_run(model, {"x": x})[0]
    assert np.isnan(got[1]).all() and np.isnan(want[1]).all()
    assert got[2, 3] == 0.0
    assert_close(got[[0, 2]], want[[0, 2]])


def test_division_by_a_run_time_scalar_is_exact():
    """``x / s`` stays a division: with reciprocals allowed (LLVM's ``arcp``), the loop computes
    ``1 / s`` once and multiplies, off by an ulp for some ``x``, and ``round(x / scale)`` in
    DynamicQuantizeLinear then lands one quantization step away from onnxruntime's."""
    model = make([helper.make_node("Div", ["x", "s"], ["y"])], [tensor("x", [4096]), tensor("s", [])],
                 [tensor("y", [4096])])
    x = np.random.default_rng(0).uniform(-300, 300, 4096).astype(np.float32)
    s = np.float32(0.0235294122248888)  # the DynamicQuantizeLinear test's scale, (max - min) / 255
    got = hetc.compile(model, "cpu").run({"x": x, "s": np.array(s)})["y"]
    np.testing.assert_array_equal(got, x / s)


@pytest.mark.parametrize("channels, width", [(96, 32), (144, 16), (64, 64), (24, 8)])
def test_byte_pad_is_vectorized_by_what_divides_the_channels(channels, width):
    """A uint8 pad (before an int8 conv) is one vector register of bytes per step where the
    channels allow, else the widest part of one that divides them: MobileNetV2's 96 and 144
    channels ran one byte at a time (1.35 ms for a 1.2 MB pad, vectorized 0.07 ms; Zen 4, AVX-512)."""
    from tvm import te, tirx

    from hetc.backends.cpu.schedules import schedule_func

    target = llvm_target(CompileOptions())
    lanes = simd_lanes(target)
    if 4 * lanes < width:
        pytest.skip(f"{lanes} float32 lanes: bytes go {4 * lanes} at a time at most")
    x = te.placeholder((1, 10, 10, channels), "uint8", name="x")
    padded = te.compute((1, 12, 12, channels), lambda n, h, w, c: tirx.if_then_else(
        tirx.all(h >= 1, h < 11, w >= 1, w < 11), x[n, h - 1, w - 1, c], tirx.const(7, "uint8")), name="pad")
    func = te.create_prim_func([x, padded])
    scheduled, _ = schedule_func(func, target, lanes)
    text = scheduled.script()
    want = width if channels % (4 * lanes) else 4 * lanes
    assert f"T.vectorized({want})" in text, text
    data = np.random.default_rng(0).integers(0, 256, (1, 10, 10, channels)).astype(np.uint8)
    import tvm

    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=target)
    out = tvm.runtime.tensor(np.zeros((1, 12, 12, channels), np.uint8))
    lib["main"](tvm.runtime.tensor(data), out)
    np.testing.assert_array_equal(out.numpy(), np.pad(data, [(0, 0), (1, 1), (1, 1), (0, 0)], constant_values=7))


@pytest.mark.parametrize("src, dst, channels", [("uint8", "int16", 64), ("int8", "int16", 48), ("uint8", "int32", 24)])
def test_widening_pad_is_vector_code(src, dst, channels):
    """An int8 conv's input padded and widened for ``vpmaddwd`` (``Cast(int16,
    if_then_else(in bounds, x, zero point))``) runs in vectors (``common.widening_copy``): left
    to LLVM it ran one byte at a time with the fused index divided per element (0.4 ms for
    ResNet-50 int8's 58x58x64 pads, Zen 3). The result is numpy's."""
    import tvm
    from tvm import te, tirx

    from hetc.backends.cpu.schedules import schedule_func

    target = llvm_target(CompileOptions())
    lanes = simd_lanes(target)
    x = te.placeholder((1, 10, 10, channels), src, name="x")
    widened = te.compute((1, 12, 12, channels), lambda n, h, w, c: tirx.Cast(dst, tirx.if_then_else(
        tirx.all(h >= 1, h < 11, w >= 1, w < 11), x[n, h - 1, w - 1, c], tirx.const(7, src))), name="pad")
    scheduled, _ = schedule_func(te.create_prim_func([x, widened]), target, lanes)
    text = scheduled.script()
    assert "T.vectorized(" in text, text
    info = np.iinfo(src)
    data = np.random.default_rng(1).integers(info.min, info.max + 1, (1, 10, 10, channels)).astype(src)
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=target)
    out = tvm.runtime.tensor(np.zeros((1, 12, 12, channels), dst))
    lib["main"](tvm.runtime.tensor(data), out)
    want = np.pad(data, [(0, 0), (1, 1), (1, 1), (0, 0)], constant_values=7).astype(dst)
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("shape, perm, dtype, vector, tiles", [
    ((1, 56, 56, 256), (0, 3, 1, 2), "float32", 8, 56 * 16 * 7),  # NHWC -> NCHW at a CNN's output
    ((2, 28, 28, 64), (0, 3, 1, 2), "float32", 4, 2 * 28 * 4 * 7),
    ((1, 40, 40, 21), (0, 3, 1, 2), "float32", None, 40 * 2 * 5),  # 21 classes: a tail tile, scalar
    ((3, 4, 70, 48), (0, 1, 3, 2), "float32", None, 12 * 5 * 3),  # keys transposed, 70 = 4 x 16 + 6
    ((1, 32, 32, 48), (0, 3, 1, 2), "uint8", None, 32 * 2 * 3),
])
def test_transposing_copy_moves_tiles(shape, perm, dtype, vector, tiles):
    """A copy whose contiguous output axis is not the input's goes tile by tile (both axes split,
    the two tile loops innermost, one parallel task per tile): done row by row, NHWC -> NCHW
    of a 56x56x256 map took 2.1 ms (9x the tiled copy; 2-core Intel Xeon, LLVM emeraldrapids,
    AVX-512)."""
    import tvm
    from tvm import te

    from hetc.backends.cpu.schedules import schedule_func

    target = llvm_target(CompileOptions())
    x = te.placeholder(shape, dtype, name="x")
    out_shape = tuple(shape[p] for p in perm)
    y = te.compute(out_shape, lambda *i: x[tuple(i[perm.index(d)] for d in range(len(shape)))], name="t")
    scheduled, _ = schedule_func(te.create_prim_func([x, y]), target, simd_lanes(target))
    text = scheduled.script()
    assert f"T.parallel({tiles})" in text, text
    assert (f"T.vectorized({vector})" in text) if vector else ("T.vectorized" not in text), text
    data = (np.random.default_rng(0).integers(0, 200, shape)).astype(dtype)
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=target)
    out = tvm.runtime.tensor(np.zeros(out_shape, dtype))
    lib["main"](tvm.runtime.tensor(data), out)
    np.testing.assert_array_equal(out.numpy(), data.transpose(perm))


@pytest.mark.parametrize("shape, dtype", [((2, 3, 40, 24), "float32"), ((1, 4, 17, 33), "uint8"),
                                          ((1, 2, 16, 16), "float32")])
def test_image_channels_move_last_row_by_row(shape, dtype):
    """NCHW -> NHWC of an image (a CNN's first kernel): rows in parallel, each written in order with
    its few channels unrolled. Fused whole, the copy divided its index by the row and the
    channel count per element: 0.19 ms for a 224x224 RGB image, 0.07 ms row by row (2-core AMD
    EPYC, LLVM znver3)."""
    import tvm
    from tvm import te

    from hetc.backends.cpu.schedules import schedule_func

    target = llvm_target(CompileOptions())
    perm = (0, 2, 3, 1)
    x = te.placeholder(shape, dtype, name="x")
    out_shape = tuple(shape[p] for p in perm)
    y = te.compute(out_shape, lambda n, h, w, c: x[n, c, h, w], name="t")
    scheduled, _ = schedule_func(te.create_prim_func([x, y]), target, simd_lanes(target))
    text = scheduled.script()
    assert f"T.unroll({shape[1]})" in text, text
    # the only divisions split the parallel loop into the rows, once per row
    assert all("_fused" in line for line in text.splitlines() if "//" in line or "%" in line), text
    assert (f"T.parallel({shape[0] * shape[2]})" in text) == (shape[0] * shape[1] * shape[2] * shape[3] >= 4096), text
    data = (np.random.default_rng(0).integers(0, 200, shape)).astype(dtype)
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=target)
    out = tvm.runtime.tensor(np.zeros(out_shape, dtype))
    lib["main"](tvm.runtime.tensor(data), out)
    np.testing.assert_array_equal(out.numpy(), data.transpose(perm))


@pytest.mark.parametrize("op, shape, rule", [
    ("ReduceMin", (128, 3072), "full-reduction"),
    ("ReduceMax", (6, 40, 96), "full-reduction"),
    ("ReduceSum", (64, 1000), "full-reduction"),
    ("ReduceMax", (33, 17), "generic"),  # 561 elements: not worth the pool
    ("ReduceMin", (129, 131), "generic"),  # no lanes-wide division of 16,899 elements
])
def test_whole_tensor_reduction_runs_in_parallel_vector_partials(op, shape, rule):
    """A tensor reduced to one value (DynamicQuantizeLinear's min and max) is factored into
    chunks x lanes partial results; min and max stay exact, a float sum within rounding of
    onnxruntime's (a different order of additions)."""
    model = _single(op, [shape], [], keepdims=0)
    x = RNG.standard_normal(shape).astype(np.float32)
    compiled = hetc.compile(model, "cpu")
    got = compiled.run({"i0": x})["out"]
    assert list(compiled.report["kernels"].values()) == [rule], compiled.report["kernels"]
    if op == "ReduceSum":
        np.testing.assert_allclose(got, np.sum(x.astype(np.float64)), rtol=1e-5, atol=1e-3)
    else:
        np.testing.assert_array_equal(got, ort_run(model, {"i0": x})[0])


@pytest.mark.parametrize("name", ["matmul", "conv3x3", "depthwise", "conv1x1"])
def test_numpy_weight_packing_equals_the_packing_kernels(name):
    """``fold_packing_numpy`` scatters each weight into its packed layout with numpy; the
    constants equal what FoldConstant gets by building and running the packing functions."""
    import tvm
    from tvm import relax

    from hetc import api
    from hetc.backends.cpu.fold_packing import _Packer
    from hetc.backends.cpu.pipeline import pre_schedule_stages, schedule_passes
    from hetc.passes.pipeline import rewrite_functions
    from hetc.targets import parse_targets

    model = {"matmul": lambda: _single("MatMul", [(24, 96)], (24, 96), {"w": _w(96, 96)}),
             "conv3x3": lambda: _conv_model(1, 32, 14, 14, 48, 3, pad=1, relu=True),
             "depthwise": lambda: _conv_model(1, 48, 12, 12, 48, 3, pad=1, group=48),
             "conv1x1": lambda: _conv_model(1, 40, 9, 9, 24, 1)}[name]()
    options = CompileOptions()
    _, mod, _, _ = api._import(model, parse_targets("cpu"), options, None, None)
    stages = pre_schedule_stages(options) + schedule_passes(options)
    mod, _ = api.run_pipeline(mod, stages[:[s.name for s in stages].index("fold_packing_numpy")])
    packer = _Packer(mod)
    ours = rewrite_functions(packer, mod)
    assert packer.count >= 1
    with tvm.transform.PassContext(opt_level=3):
        theirs, ours = relax.transform.FoldConstant()(mod), relax.transform.FoldConstant()(ours)

    def constants(m):
        found = []
        relax.analysis.post_order_visit(
            m["main"], lambda e: found.append(e.value.numpy()) if isinstance(e, tvm.ir.GenericConst) else None)
        return found

    a, b = constants(theirs), constants(ours)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


def test_seq_first_rows_with_a_symbolic_batch_tile_the_static_seq():
    """``[seq, batch, k] @ w`` with the batch symbolic (torch's seq-first MultiheadAttention, as
    torchvision's ViT exports it): the register tile runs along the static seq (padded to whole
    tiles), the batch outside; along the batch, one image's 17 tokens were 17 tiles of 5
    padded rows (ViT-B/16's QKV projection 2.5x slower, 2-core Zen 5, AVX-512)."""
    import re

    from tvm import te, tirx

    from hetc.backends.cpu.schedules import schedule_func

    batch = tirx.Var("batch", "int64")
    a, b = te.placeholder((17, batch, 64), name="a"), te.placeholder((64, 96), name="b")
    k = te.reduce_axis((0, 64), "k")
    c = te.compute((17, batch, 96), lambda s, n, j: te.sum(a[s, n, k] * b[k, j], axis=k), name="matmul")
    target = llvm_target(CompileOptions(cpu="skylake-avx512"))  # scheduled only, not run
    scheduled, rule = schedule_func(te.create_prim_func([a, b, c]).with_attr("layout_free_buffers", [1]), target,
                                    simd_lanes(target))
    script = scheduled.script()
    assert rule == "contraction" and '"a_pad"' in script, script
    pad = re.search(r"a_pad = T\.sblock_alloc_buffer\(\((?:T\.int64\()?(\d+)\)?, batch,", script)
    assert pad and int(pad.group(1)) > 17, script  # the seq padded, the batch not
    w = np.random.default_rng(2).standard_normal((64, 96)).astype(np.float32)
    model = make([helper.make_node("MatMul", ["x", "w"], ["y"])], [tensor("x", [17, "n", 64])],
                 [tensor("y", [17, "n", 96])], {"w": w})
    compiled = hetc.compile(model, "cpu")
    for n in (1, 3):
        data = {"x": np.random.default_rng(n).standard_normal((17, n, 64)).astype(np.float32)}
        assert_close(compiled.run(data)["y"], ort_run(model, data)[0], rel=1e-5)


@pytest.mark.parametrize("columns", [2000, 400])
def test_columns_only_one_vector_divides_get_a_wider_panel(columns):
    """A constant weight with 2000 columns (wav2letter) or 400 (RegNet-400MF): only a 1-vector
    panel divides them, so each broadcast fed one multiply-add vector (a 51x2000x2000 matmul at
    167 GFLOP/s, 2-core Zen 5, AVX-512); the packed weight gets zero columns up to a wider panel
    at compile time instead and the extra columns are not stored."""
    import re

    from tvm import te

    from hetc.backends.cpu.schedules import schedule_func

    a, b = te.placeholder((48, 64), name="a"), te.placeholder((64, columns), name="b")
    k = te.reduce_axis((0, 64), "k")
    c = te.compute((48, columns), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="matmul")
    target = llvm_target(CompileOptions(cpu="skylake-avx512"))  # scheduled only, not run
    lanes = simd_lanes(target)
    scheduled, rule = schedule_func(te.create_prim_func([a, b, c]).with_attr("layout_free_buffers", [1]), target, lanes)
    script = scheduled.script()
    panel = re.search(r"b(?:_pad)?_global = T\.sblock_alloc_buffer\(\((.*?)\)\)", script)
    assert rule == "contraction" and panel, script
    assert int(re.findall(r"\d+", panel.group(1))[-1]) >= 2 * lanes, script  # the panel width
    w = np.random.default_rng(2).standard_normal((64, columns)).astype(np.float32)
    model = make([helper.make_node("MatMul", ["x", "w"], ["y"])], [tensor("x", [48, 64])], [tensor("y", [48, columns])],
                 {"w": w})
    data = {"x": np.random.default_rng(3).standard_normal((48, 64)).astype(np.float32)}
    assert_close(hetc.compile(model, "cpu").run(data)["y"], ort_run(model, data)[0], rel=1e-5)
