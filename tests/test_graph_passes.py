"""OpGraph numbers, CPU support checks, the pass pipeline and the CPU default schedules."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from conftest import assert_close
from onnx import helper, numpy_helper
from onnx_util import make, tensor
from tvm import relax

from hetc.backends.cpu import patterns
from hetc.backends.cpu.schedules import default_schedule_pass
from hetc.frontends.onnx import load_model, to_relax
from hetc.graph import OpNode, TensorInfo, build_opgraph
from hetc.options import CompileOptions
from hetc.passes import module_stats, run_pipeline
from hetc.passes.phases import inference_passes, simplify_passes
from hetc.targets import get_target


def _graph(model):
    return build_opgraph(to_relax(load_model(model)), [get_target("cpu")])


def test_matmul_and_conv_flops_and_params():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(8, 5)).astype(np.float32)
    k = rng.normal(size=(4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["a", "w"], ["m"]),
             helper.make_node("Conv", ["img", "k"], ["c"], kernel_shape=[3, 3])]
    model = make(nodes, [tensor("a", (2, 3, 8)), tensor("img", (1, 3, 8, 8))],
                 [tensor("m", (2, 3, 5)), tensor("c", (1, 4, 6, 6))], {"w": w, "k": k})
    graph = _graph(model)
    by_op = {n.op: n for n in graph.nodes}
    assert by_op["relax.matmul"].flops == 2 * (2 * 3) * 5 * 8
    assert by_op["relax.nn.conv2d"].flops == 2 * (1 * 4 * 6 * 6) * (3 * 3 * 3)
    assert graph.num_params == w.size + k.size
    assert graph.param_bytes == 4 * (w.size + k.size)
    assert by_op["relax.matmul"].bytes_out == 2 * 3 * 5 * 4
    assert all(n.supported_by == {"cpu": True} for n in graph.nodes)


def test_edges_follow_data_flow():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    graph = _graph(make(nodes, [tensor("x", (4,))], [tensor("y", (4,))]))
    ids = {n.op: n.id for n in graph.nodes}
    add = next(n for n in graph.nodes if n.op == "relax.add")
    assert sorted(add.preds) == sorted([ids["relax.nn.relu"], ids["relax.negative"]])


def _node(op: str, dtype: str = "float32") -> OpNode:
    t = TensorInfo((2, 2), dtype)
    return OpNode(0, "v", op, [t], [t], [], 4)


@pytest.mark.parametrize(("op", "dtype", "ok"), [
    ("relax.nn.conv2d", "float32", True),
    ("relax.topk", "float32", True),  # no FLegalize, dispatched by the build pipeline
    ("relax.nonzero", "int64", True),  # a VM packed call
    ("relax.ewise_fma", "float32", False),  # nothing lowers it on CPU
    ("relax.add", "int4", False),  # dtype the CPU target does not declare (TVM has no sub-byte storage)
])
def test_cpu_support_check_can_say_no(op, dtype, ok):
    assert patterns.supports(_node(op, dtype)) is ok


def test_inference_and_simplify_fold_batchnorm_into_conv():
    rng = np.random.default_rng(0)
    c = 4
    inits = {"k": rng.normal(size=(c, 3, 3, 3)).astype(np.float32),
             "s": rng.uniform(0.5, 1.5, c).astype(np.float32), "b": rng.normal(size=c).astype(np.float32),
             "m": rng.normal(size=c).astype(np.float32), "v": rng.uniform(0.5, 1.5, c).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], kernel_shape=[3, 3]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"])]
    model = make(nodes, [tensor("x", (1, 3, 8, 8))], [tensor("y", (1, c, 6, 6))], inits)
    mod = to_relax(load_model(model))
    optimized, reports = run_pipeline(mod, inference_passes() + simplify_passes())
    assert [r.stage for r in reports] == [s.name for s in inference_passes() + simplify_passes()]
    ops = {n.op for n in build_opgraph(optimized).nodes}
    assert "relax.nn.batch_norm" not in ops and "relax.nn.conv2d" in ops
    x = rng.normal(size=(1, 3, 8, 8)).astype(np.float32)
    run = lambda m: relax.VirtualMachine(tvm.compile(m, "llvm"), tvm.cpu())["main"](  # noqa: E731
        tvm.runtime.tensor(x)).numpy()
    assert_close(run(optimized), run(mod))


def test_stage_reports_count_ops_and_functions(examples):
    mod = to_relax(load_model(examples / "cnn.onnx"))
    before = module_stats(mod)
    _, reports = run_pipeline(mod, get_target("cpu").backend.stages(CompileOptions(num_threads=2)))
    assert reports[0].before == before
    for prev, cur in zip(reports, reports[1:]):
        assert prev.after == cur.before
    by_name = {r.stage: r for r in reports}
    # Only the Winograd rewrite makes kernels before legalize (its transforms: the example's 16 -> 32 conv)
    assert by_name["winograd"].before.tir_functions == 0 < by_name["winograd"].after.tir_functions
    assert by_name["legalize"].after.tir_functions > by_name["legalize"].before.tir_functions
    assert by_name["fuse_tir"].after.tir_functions < by_name["fuse_tir"].before.tir_functions


@pytest.mark.parametrize("name", ["cnn", "transformer", "mlp"])
def test_op_counts_count_every_call(examples, name):
    """``relax_op_counts`` reads the bindings; every call of a normalized module is bound: the
    same counts as visiting every node, at each stage of the CPU pipeline."""
    from collections import Counter

    from hetc.passes.pipeline import relax_op_counts

    def visited(mod):
        counts = Counter()

        def visit(expr):
            if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
                counts[expr.op.name] += 1

        for func in mod.functions.values():
            if isinstance(func, relax.Function):
                relax.analysis.post_order_visit(func, visit)
        return counts

    mod = to_relax(load_model(examples / f"{name}.onnx"))
    assert relax_op_counts(mod) == visited(mod)
    for stage in get_target("cpu").backend.stages(CompileOptions(num_threads=2)):
        mod, _ = run_pipeline(mod, [stage])
        assert relax_op_counts(mod) == visited(mod), stage.name


def _has_parallel_loop(func) -> bool:
    return "T.parallel" in func.script()


def _scheduled(mod):
    from hetc.backends.cpu.codegen import llvm_target
    from hetc.options import CompileOptions

    return default_schedule_pass(llvm_target(CompileOptions(num_threads=2)))(mod)


def test_default_schedules_mark_kernels_parallel_and_keep_numbers():
    a = relax.Var("a", relax.TensorType((128, 64), "float32"))
    b = relax.Var("b", relax.TensorType((64, 64), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [a, b]):
        out = bb.emit(relax.op.sum(relax.op.matmul(a, b), axis=[1]))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    funcs = {gv: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    assert funcs and not any(_has_parallel_loop(f) for f in funcs.values())
    mod = _scheduled(mod)
    for gv in funcs:
        assert _has_parallel_loop(mod[gv]) and mod[gv].attrs["tir.is_scheduled"]
    rng = np.random.default_rng(0)
    av, bv = rng.normal(size=(128, 64)).astype(np.float32), rng.normal(size=(64, 64)).astype(np.float32)
    vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(av), tvm.runtime.tensor(bv)).numpy()
    assert_close(out, (av @ bv).sum(axis=1))


def test_default_schedules_leave_small_elementwise_kernels_serial():
    x = relax.Var("x", relax.TensorType((4, 10), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        bb.emit_func_output(bb.emit(relax.op.nn.relu(x)))
    mod = _scheduled(relax.transform.LegalizeOps()(bb.get()))
    funcs = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    assert funcs and not any(_has_parallel_loop(f) for f in funcs)
    assert all(f.attrs["hetc.schedule_rule"] == "generic" for f in funcs)


def test_half_precision_contractions_accumulate_in_float32():
    """A 2048-term float16 dot product accumulated in float16 is off by many ulps; hetc's CPU
    kernels accumulate in float32 and round once, so they match the float32 result rounded."""
    import hetc

    dtype = np.float16
    rng = np.random.default_rng(0)
    w = rng.uniform(0, 1, size=(2048, 8)).astype(dtype)
    k = rng.uniform(0, 1, size=(4, 256, 3, 3)).astype(dtype)
    nodes = [helper.make_node("MatMul", ["a", "w"], ["m"]),
             helper.make_node("Conv", ["img", "k"], ["c"], kernel_shape=[3, 3])]
    model = make(nodes, [tensor("a", (2, 2048), dtype), tensor("img", (1, 256, 5, 5), dtype)],
                 [tensor("m", (2, 8), dtype), tensor("c", (1, 4, 3, 3), dtype)], {"w": w, "k": k})
    a, img = rng.uniform(0, 1, size=(2, 2048)).astype(dtype), rng.uniform(0, 1, size=(1, 256, 5, 5)).astype(dtype)
    out = hetc.compile(model, target="cpu").run({"a": a, "img": img})
    img32 = np.lib.stride_tricks.sliding_window_view(img.astype(np.float32), (3, 3), axis=(2, 3))
    expected = {"m": (a.astype(np.float32) @ w.astype(np.float32)).astype(dtype),
                "c": np.einsum("nchwij,ocij->nohw", img32, k.astype(np.float32)).astype(dtype)}
    for name, got in out.items():
        ulps = np.abs(got.astype(np.float32) - expected[name].astype(np.float32)) / np.spacing(expected[name])
        assert got.dtype == dtype and ulps.max() <= 1, f"{name}: {ulps.max()} ulps"


def test_one_input_concat_is_not_a_copy():
    """torch's GPT-2 export concatenates each past key with nothing before appending the new
    key: ``simplify_ops`` drops that one-input Concat (a copy of the whole cache per layer and
    step) and the result is the input itself."""
    nodes = [helper.make_node("Concat", ["past"], ["p"], axis=2),
             helper.make_node("Concat", ["p", "new"], ["present"], axis=2)]
    model = make(nodes, [tensor("past", ["b", 2, "t", 4]), tensor("new", ["b", 2, 1, 4])],
                 [tensor("present", ["b", 2, "n", 4])])
    mod = to_relax(load_model(model))
    mod, _ = run_pipeline(mod, simplify_passes())
    concats = [c for c in _calls(mod["main"]) if c.op.name == "relax.concat"]
    assert len(concats) == 1 and len(concats[0].args[0].fields) == 2
    import hetc

    rng = np.random.default_rng(0)
    feeds = {"past": rng.standard_normal((1, 2, 5, 4)).astype(np.float32),
             "new": rng.standard_normal((1, 2, 1, 4)).astype(np.float32)}
    got = hetc.compile(model, dims={"b": (1, 2), "t": (0, 16)}).run(feeds)["present"]
    assert_close(got, np.concatenate([feeds["past"], feeds["new"]], axis=2))


def _calls(func) -> list:
    calls = []
    relax.analysis.post_order_visit(func, lambda e: calls.append(e) if isinstance(e, relax.Call)
                                    and isinstance(e.op, tvm.ir.Op) else None)
    return calls


@pytest.mark.parametrize("exponent", [2.0, 3.0, 4.0, 2.5])
def test_small_integer_powers_become_products(exponent, capfd):
    """``Pow(x, 3)`` (the tanh GELU of GPT-2/BERT exports) would call libm's powf per element,
    unvectorized: ``simplify_ops`` writes 2, 3 and 4 as products; other exponents stay powers.
    Negative bases included, the results match onnxruntime. It runs before FoldConstant, whose
    trial legalization of ``pow(x, 3)`` printed a TVM warning per pow."""
    from conftest import ort_run

    import hetc

    inits = {"e": np.array(exponent, np.float32)}
    model = make([helper.make_node("Pow", ["x", "e"], ["y"])], [tensor("x", ["b", 64])], [tensor("y", ["b", 64])],
                 inits)
    mod, _ = run_pipeline(to_relax(load_model(model)), simplify_passes())
    ops = {c.op.name for c in _calls(mod["main"])}
    assert ops == ({"relax.power"} if exponent == 2.5 else {"relax.multiply"}), ops
    assert exponent == 2.5 or "pow(x, y)" not in capfd.readouterr().err
    x = {"x": np.random.default_rng(0).uniform(-3, 3, (2, 64)).astype(np.float32)}
    if exponent == 2.5:
        x["x"] = np.abs(x["x"])
    assert_close(hetc.compile(model).run(x)["y"], ort_run(model, x)[0])


def _batchnorm_model(dtype=np.float32):
    """Conv then BatchNorm (folded into the conv's weight) and a BatchNorm on its own."""
    rng = np.random.default_rng(3)
    c = 6
    inits = {"w": rng.standard_normal((c, 3, 3, 3)).astype(dtype)}
    for prefix in ("a", "b"):
        inits |= {f"{prefix}_scale": rng.standard_normal(c).astype(dtype),
                  f"{prefix}_bias": rng.standard_normal(c).astype(dtype),
                  f"{prefix}_mean": rng.standard_normal(c).astype(dtype),
                  f"{prefix}_var": rng.uniform(0.1, 2.0, c).astype(dtype)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["y", "a_scale", "a_bias", "a_mean", "a_var"], ["z"]),
             helper.make_node("Relu", ["z"], ["r"]),
             helper.make_node("BatchNormalization", ["r", "b_scale", "b_bias", "b_mean", "b_var"], ["out"],
                              epsilon=1e-3)]
    return make(nodes, [tensor("x", [1, 3, 8, 8], dtype)], [tensor("out", [1, c, 8, 8], dtype)], inits)


def _dequantized_conv_model():
    """A QDQ export's weight: int8 with a per-channel DequantizeLinear (zero points nonzero)."""
    rng = np.random.default_rng(5)
    inits = {"wq": rng.integers(-128, 128, (6, 3, 3, 3)).astype(np.int8),
             "ws": rng.uniform(1e-3, 2e-2, 6).astype(np.float32),
             "wz": rng.integers(-5, 5, 6).astype(np.int8)}
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
             helper.make_node("Conv", ["x", "w"], ["out"], pads=[1, 1, 1, 1])]
    return make(nodes, [tensor("x", [1, 3, 8, 8])], [tensor("out", [1, 6, 8, 8])], inits)


def _matmul_integer_model():
    """onnxruntime's dynamic quantization of a linear layer: the weight's column sums times the
    activation's zero point (an integer ``sum`` over a constant, ``MatMulInteger``'s converter)."""
    rng = np.random.default_rng(3)
    inits = {"b": rng.integers(-128, 128, (64, 48)).astype(np.int8), "az": np.array(7, np.uint8)}
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "az"], ["out"])]
    return make(nodes, [tensor("a", [4, 64], np.uint8)], [tensor("out", [4, 48], np.int32)], inits)


@pytest.mark.parametrize("build", [_batchnorm_model, _dequantized_conv_model])
def test_numpy_folding_equals_tvm_folding_bit_for_bit(build):
    """fold_numpy evaluates BatchNorm's parameter arithmetic (sqrt, divide, multiply, add of an
    epsilon scalar, reshape) and a dequantized weight (astype, int32 subtract, multiply) with
    numpy; FoldConstant, left alone, would build a kernel for each."""
    from hetc.passes.fold_numpy import fold_numpy_pass

    mod = to_relax(load_model(build()))
    stages = [s for s in inference_passes() + simplify_passes() if s.name not in ("fold_numpy",)]
    before_fold = stages[:[s.name for s in stages].index("fold_constants")]
    mod, _ = run_pipeline(mod, before_fold)
    by_numpy = fold_numpy_pass(mod)
    assert module_stats(by_numpy).relax_calls <= module_stats(mod).relax_calls - 4
    with tvm.transform.PassContext(opt_level=3):
        by_tvm = relax.transform.FoldConstant()(mod)
        both = relax.transform.FoldConstant()(by_numpy)
    assert module_stats(both).relax_calls == module_stats(by_tvm).relax_calls  # nothing left over

    def constants(m):
        found = []

        @relax.expr_functor.visitor
        class Collect(relax.PyExprVisitor):
            def visit_constant_(self, const):
                found.append(const.value.numpy())

        Collect().visit_expr(m["main"])
        return sorted(found, key=lambda a: (a.shape, a.tobytes()))

    ours, theirs = constants(both), constants(by_tvm)
    assert [a.shape for a in ours] == [a.shape for a in theirs]
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


def _relax_main(body) -> tvm.IRModule:
    """``main(x: (1, 4) float32) = x + body(bb, x)``, built in Relax (the ONNX importer folds
    constant subgraphs itself)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.add(x, body(bb, x)))
        bb.emit_func_output(out)
    return bb.get()


def _exp_concat(bb, x):
    e = bb.emit(relax.op.exp(relax.const(np.full((1, 2), 0.5, np.float32))))
    pair = bb.emit(relax.Tuple([e, relax.const(np.ones((1, 2), np.float32))]))
    return relax.op.concat(pair, axis=1)


def _gather_index(bb, x):
    """What torch's exporter writes for ``x[:, 1]`` (Gather's index made non-negative): a
    static shape_of, shape_to_tensor, take, a comparison, where."""
    dims = bb.emit(relax.op.shape_to_tensor(bb.emit(relax.op.shape_of(x))))
    size = bb.emit(relax.op.take(dims, relax.const(1, "int64"), axis=0, mode="wrap"))
    negative = bb.emit(relax.op.less(relax.const(1, "int64"), relax.const(0, "int64")))
    index = bb.emit(relax.op.where(negative, relax.op.add(relax.const(1, "int64"), size), relax.const(1, "int64")))
    return relax.op.take(x, index, axis=1, mode="fast")


@pytest.mark.parametrize("build", [_batchnorm_model, _dequantized_conv_model, _exp_concat, _gather_index])
def test_fold_constants_runs_only_where_a_call_can_fold(build):
    """``fold_constants_pass`` skips FoldConstant (it legalizes every call looking for constant
    ones) when no call reads only constants: after fold_numpy on BatchNorm, dequantized weights
    and a Gather's index arithmetic there is none, and FoldConstant would only drop the
    bindings of constants numpy read into their uses; an ``exp`` of a constant and a ``concat``
    of two (ops numpy leaves to it, one through a tuple) still fold. Either way the module is
    FoldConstant's."""
    import tvm_ffi

    from hetc.passes.fold_numpy import _may_fold, fold_constants_pass, fold_numpy_pass

    if build in (_exp_concat, _gather_index):
        mod = fold_numpy_pass(_relax_main(build))
    else:
        stages = inference_passes() + simplify_passes()
        mod, _ = run_pipeline(to_relax(load_model(build())), stages[:[s.name for s in stages].index("fold_constants")])
    with tvm.transform.PassContext(opt_level=3):
        by_tvm = relax.transform.FoldConstant()(mod)
        ours = fold_constants_pass(mod)
    dead_dropped = relax.transform.DeadCodeElimination()(mod)
    folds = not tvm_ffi.structural_equal(by_tvm, dead_dropped, map_free_vars=True)
    assert _may_fold(mod) == folds == (build is _exp_concat)
    tvm.ir.assert_structural_equal(ours, by_tvm, map_free_vars=True)  # skipped or not, FoldConstant's module
    if build is _gather_index:  # numpy folded the index: one take of x at a constant, one add
        assert module_stats(ours).relax_calls == 2, ours["main"].script()


def test_integer_sum_of_a_weight_is_folded_with_numpy():
    """MatMulInteger's zero-point term ``za * colsum(b)`` becomes one constant in fold_numpy
    (FoldConstant built a kernel per weight: 2.8 s of BERT-base int8's compile on a 2-core Zen 4), equal to
    numpy's int64 sum; the model still gives numpy's exact product."""
    import hetc
    from hetc.passes.fold_numpy import fold_numpy_pass

    model = _matmul_integer_model()
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    mod = to_relax(load_model(model))
    stages = inference_passes() + simplify_passes()
    mod, _ = run_pipeline(mod, stages[:[s.name for s in stages].index("fold_numpy")])
    folded = fold_numpy_pass(mod)
    script = folded["main"].script()
    assert "R.sum" not in script and "R.multiply" not in script, script
    want = 7 * inits["b"].astype(np.int64).sum(axis=0)
    values = [b.value for block in folded["main"].body.blocks for b in block.bindings]
    values += [arg for v in values if isinstance(v, relax.Call) for arg in v.args]
    consts = [v.value.numpy() for v in values if isinstance(v, tvm.ir.GenericConst)]
    assert any(c.shape == want.shape and np.array_equal(c, want) for c in consts)
    a = np.random.default_rng(0).integers(0, 256, (4, 64)).astype(np.uint8)
    got = hetc.compile(model, "cpu").run({"a": a})["out"]
    np.testing.assert_array_equal(got, (a.astype(np.int64) - 7) @ inits["b"].astype(np.int64))


def test_weight_standardization_and_split_fold_with_numpy():
    """NFNet's standardized conv weights, ``(w - mean(w)) / sqrt(var(w) + eps)`` on a constant,
    then split per group: numpy folds the float means (in float64, rounded once), the max and
    the split, so nothing is left for FoldConstant, which built a kernel per weight (dm_nfnet_f0
    compiled in 91 s on a Zen 3, 46 of them in FoldConstant; 28 s after)."""
    from hetc.passes.fold_numpy import _may_fold, fold_numpy_pass

    w = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)

    def standardized(bb, x):
        const = relax.const(w)
        mean = bb.emit(relax.op.mean(const, axis=[1], keepdims=True))
        centred = bb.emit(relax.op.subtract(const, mean))
        var = bb.emit(relax.op.mean(relax.op.multiply(centred, centred), axis=[1], keepdims=True))
        scaled = bb.emit(relax.op.divide(centred, relax.op.sqrt(relax.op.add(var, relax.const(1e-5, "float32")))))
        peak = bb.emit(relax.op.max(const, axis=[1], keepdims=True))
        parts = bb.emit(relax.op.split(relax.op.multiply(scaled, peak), 2, axis=0))
        return relax.op.multiply(relax.TupleGetItem(parts, 0), relax.TupleGetItem(parts, 1))

    folded = fold_numpy_pass(_relax_main(standardized))
    assert not _may_fold(folded), folded["main"].script()
    binding = [b for block in folded["main"].body.blocks for b in block.bindings][-1]  # x + the folded body
    assert isinstance(binding.value.args[1], tvm.ir.GenericConst), folded["main"].script()
    x = w.astype(np.float64)
    s = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * x.max(1, keepdims=True)
    np.testing.assert_allclose(binding.value.args[1].value.numpy(), s[:1] * s[1:], rtol=2e-6)


def test_batchnorm_model_through_numpy_folding_matches_onnxruntime():
    import hetc
    from conftest import ort_run

    model = _batchnorm_model()
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    compiled = hetc.compile(model, target="cpu")
    stages = {s["stage"]: s for s in compiled.report["stages"]}
    assert stages["fold_numpy"]["after"]["relax_calls"] < stages["fold_numpy"]["before"]["relax_calls"]
    assert_close(compiled.run({"x": x})["out"], ort_run(model, {"x": x})[0])
