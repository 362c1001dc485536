"""`--target ascend,cpu`: CANN's support table, the BYOC partitioning into maximal acyclic
regions, the Relax -> ONNX writer, and whole models whose Ascend regions run in emulation
(onnxruntime) and match onnxruntime on the original model. There is no NPU here: every output
must say "emulation"."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from conftest import assert_close, ort_run, run_cli
from onnx import helper
from onnx_util import make, tensor

import hetc
from hetc.backends.ascend import onnx_writer, support
from hetc.backends.ascend.patterns import CODEGEN, check_reason, partition
from hetc.backends.byoc import codegen_functions

RNG = np.random.default_rng(0)


def _w(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _relax(model: onnx.ModelProto):
    """The module the Ascend partitioner sees (after the host's inference and simplify phases)."""
    from hetc.frontends.onnx import to_relax
    from hetc.frontends.onnx.loader import load_model
    from hetc.passes.phases import inference_passes, simplify_passes
    from hetc.passes.pipeline import run_pipeline

    mod, _ = run_pipeline(to_relax(load_model(model, {}, None, None)), inference_passes() + simplify_passes())
    return mod


def _host_ops(mod) -> list[str]:
    from hetc.backends.byoc import op_calls

    return [str(call.op.name) for _, call in op_calls(mod["main"])]


def _region_ops(mod) -> list[list[str]]:
    """Per region (in ``main``'s call order), the Relax ops of its composites."""
    import tvm
    from tvm import relax

    from hetc.backends.byoc import calls_to

    funcs = codegen_functions(mod, CODEGEN)
    out = []
    for call in calls_to(mod["main"], set(funcs)):
        ops = []

        def visit(e, ops=ops):
            if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op):
                ops.append(str(e.op.name))

        relax.analysis.post_order_visit(funcs[call.op.name_hint], visit)
        out.append(ops)
    return out


# -- the support table -------------------------------------------------------------------------


def test_table_is_versioned_data_that_can_say_no():
    node = helper.make_node
    assert support.VERSION == "8.0.0" and len(support.TABLE) > 120
    assert support.check([node("Relu", ["x"], ["y"])], {"x": "float32"}) is None
    assert "not in CANN 8.0.0's ONNX op list" in support.check([node("LayerNormalization", ["x"], ["y"])], {})
    assert "opsets 12-18, not 11" in support.check([node("Celu", ["x"], ["y"])], {"x": "float32"}, opset=11)
    assert "Relu on int64" in support.check([node("Relu", ["x"], ["y"])], {"x": "int64"})
    reason = support.check([node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2])], {"x": "float32"})
    assert "dilations other than 1" in reason
    reason = support.check([node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2])], {"x": "float32"})
    assert "only 2-D windows" in reason


def test_constants_only_node_is_refused():
    import tvm
    from tvm import relax

    def reason(call):
        return check_reason(relax.BlockBuilder().normalize(call))

    a, b = (relax.const(_w(2, 3)) for _ in range(2))
    assert "all inputs are constants" in reason(relax.op.add(a, b))
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    assert reason(relax.op.add(x, a)) is None
    y = relax.Var("y", relax.TensorType((2, 3), "float64"))
    assert "ONNX Add on float64" in reason(relax.op.add(y, relax.const(np.ones((2, 3)), "float64")))
    z = relax.Var("z", relax.TensorType((tvm.tirx.Var("n", "int64"), 3), "float32"))
    assert reason(relax.op.nn.relu(z)) is None  # a symbolic dim: the region is built for its gears
    u = relax.Var("u", relax.TensorType(None, "float32", ndim=2))
    assert "data-dependent" in reason(relax.op.nn.relu(u))


# -- partitioning ------------------------------------------------------------------------------


def _chain_with_host_op():
    """MatMul -> Relu -> CumSum (no CANN mapping in hetc) -> Add -> Relu."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("CumSum", ["b", "axis"], ["c"]), helper.make_node("Add", ["c", "bias"], ["d"]),
             helper.make_node("Relu", ["d"], ["y"])]
    return make(nodes, [tensor("x", [4, 8])], [tensor("y", [4, 8])],
                {"w": _w(8, 8), "axis": np.array(1, np.int64), "bias": _w(8)})


def test_supported_and_unsupported_ops_side_by_side():
    mod = partition(_relax(_chain_with_host_op()))
    assert _region_ops(mod) == [["relax.matmul", "relax.nn.relu"], ["relax.add", "relax.nn.relu"]]
    assert _host_ops(mod) == ["relax.cumsum"]
    from hetc.backends.ascend.patterns import unsupported_reasons

    (reason,) = unsupported_reasons(mod).values()
    assert "cumsum has no CANN ONNX mapping" in reason


def test_a_merge_that_would_create_a_cycle_is_split():
    """a = MatMul(x); c = CumSum(a) on the host; y = Add(a, c). Merging MatMul and Add would
    make a region that feeds the host op and waits for it: they stay two regions."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("CumSum", ["a", "axis"], ["c"]),
             helper.make_node("Add", ["a", "c"], ["y"])]
    model = make(nodes, [tensor("x", [4, 8])], [tensor("y", [4, 8])], {"w": _w(8, 8), "axis": np.array(0, np.int64)})
    mod = partition(_relax(model))
    assert _region_ops(mod) == [["relax.matmul"], ["relax.add"]]
    assert _host_ops(mod) == ["relax.cumsum"]
    compiled = hetc.compile(model, "ascend,cpu", placement="accelerator-first")
    x = {"x": _w(4, 8)}
    assert_close(compiled.run(x)["y"], ort_run(model, x)[0])
    assert len(compiled.manifest.offloads) == 2


def test_attribute_outside_the_table_stays_on_the_host():
    """MaxPool with dilations 2 is valid ONNX that CANN's MaxPool does not take."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("MaxPool", ["b"], ["y"], kernel_shape=[2, 2], dilations=[2, 2])]
    model = make(nodes, [tensor("x", [1, 3, 12, 12])], [tensor("y", [1, 4, 10, 10])], {"w": _w(4, 3, 3, 3)})
    mod = partition(_relax(model))
    assert _region_ops(mod) == [["relax.nn.conv2d", "relax.nn.relu"]]
    assert _host_ops(mod) == ["relax.nn.max_pool2d"]
    compiled = hetc.compile(model, "ascend,cpu", placement="accelerator-first")
    (region,) = compiled.report["offload"]["ascend"]["regions"]
    assert any("dilations other than 1" in why for why in region["host_neighbours"].values()), region
    x = {"x": _w(1, 3, 12, 12)}
    assert_close(compiled.run(x)["y"], ort_run(model, x)[0])


def test_isolated_data_movement_is_not_offloaded():
    """A transpose alone (next to host ops only) would just move data to the NPU and back."""
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["a"]), helper.make_node("Transpose", ["a"], ["y"], perm=[1, 0])]
    model = make(nodes, [tensor("x", [4, 8])], [tensor("y", [8, 4])], {"axis": np.array(0, np.int64)})
    mod = partition(_relax(model))
    assert _region_ops(mod) == [] and sorted(_host_ops(mod)) == ["relax.cumsum", "relax.permute_dims"]


# -- the ONNX writer ---------------------------------------------------------------------------


def test_region_subgraph_is_valid_onnx_with_every_writer_exercised(examples):
    """The transformer example is one region: layer norm written as CANN-listed ops, Erf GELU,
    attention reshapes/transposes; the subgraph passes onnx.checker (full check) and runs."""
    mod = partition(_relax(onnx.load(examples / "transformer.onnx")))
    (func,) = codegen_functions(mod, CODEGEN).values()
    model, inputs, outputs = onnx_writer.region_model(func, "region")
    ops = {n.op_type for n in model.graph.node}
    assert {"ReduceMean", "Sqrt", "Erf", "Transpose", "Reshape", "Softmax", "MatMul"} <= ops
    assert "LayerNormalization" not in ops  # not in CANN's ONNX list
    assert model.opset_import[0].version == 13
    assert support.check(model.graph.node, {}) is None
    reshapes = [n for n in model.graph.node if n.op_type == "Reshape"]
    shapes = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    assert all(shapes[n.input[1]][0] == 0 for n in reshapes), "batch kept free for ATC's batch gears"
    assert [t.name for t in inputs] == ["input0"] and [t.name for t in outputs] == ["output0"]


# -- whole models ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_example_models_match_onnxruntime_in_emulation(examples, tmp_path, name):
    model, inputs = examples / f"{name}.onnx", dict(np.load(examples / f"{name}_inputs.npz"))
    compiled = hetc.compile(model, "ascend,cpu", placement="accelerator-first")
    for got, want in zip(compiled.run(inputs).values(), ort_run(model, inputs)):
        assert_close(got, want)
    out = compiled.save(tmp_path / "artifact")
    (region,) = json.loads((out / "manifest.json").read_text())["offloads"]
    assert (region["target"], region["device"], region["execution"], region["emulated"], region["linked"]) == (
        "ascend", "ascend:0", "emulation", True, False)
    folder = out / region["project"]
    for rel in ("model.onnx", "host.cc", "build.sh", "README.md"):
        assert (folder / rel).is_file(), rel
    onnx.checker.check_model(onnx.load(folder / "model.onnx"), full_check=True)
    assert "emulation" in compiled.report["offload"]["ascend"]["execution"]
    reloaded = hetc.load(out)  # the regions are served again from the saved subgraphs
    assert reloaded.manifest.offloads[0].execution == "emulation"
    for got, want in zip(reloaded.run(inputs).values(), ort_run(model, inputs)):
        assert_close(got, want)


def test_report_gives_each_region_its_ops_shapes_and_bytes(examples):
    compiled = hetc.compile(examples / "cnn.onnx", "ascend,cpu", placement="accelerator-first")
    (region,) = compiled.report["offload"]["ascend"]["regions"]
    assert region["onnx_ops"]["Conv"] == 2 and region["inputs"][0]["shape"] == [2, 3, 32, 32]
    assert region["bytes_in"] == 2 * 3 * 32 * 32 * 4 and region["bytes_out"] == 2 * 10 * 4
    assert len(region["nodes"]) >= 10 and region["symbol"].startswith("ascend_region0_")
    plan = {n["name"]: n["device"] for n in compiled.plan["nodes"]}
    assert sum(d == "ascend:0" for d in plan.values()) == len(region["nodes"])


def test_two_artifacts_in_one_process_keep_their_own_regions(tmp_path):
    """Region symbols are content hashes: same names (ascend_region0) never collide."""
    def scaled(k):
        nodes = [helper.make_node("Mul", ["x", "s"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
        return make(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])], {"s": np.full(3, k, np.float32)})

    x = {"x": np.abs(_w(2, 3))}
    first, second = hetc.compile(scaled(2.0), "ascend,cpu", placement="accelerator-first"), hetc.compile(scaled(5.0), "ascend,cpu", placement="accelerator-first")
    assert first.manifest.offloads[0].name != second.manifest.offloads[0].name
    np.testing.assert_allclose(first.run(x)["y"], 2 * x["x"], rtol=1e-6)
    np.testing.assert_allclose(second.run(x)["y"], 5 * x["x"], rtol=1e-6)


def test_cli_says_emulation_and_device_mode_fails_in_one_line(examples, tmp_path):
    out = tmp_path / "artifact"
    compiled = run_cli("compile", examples / "mlp.onnx", "--target", "ascend,cpu", "--placement", "accelerator-first", "-o", out)
    assert compiled.code == 0, compiled.stderr
    assert "runs as emulation (onnxruntime on the CPU, not the device)" in " ".join(compiled.stdout.split())
    inputs = examples / "mlp_inputs.npz"
    result = run_cli("run", out, "--inputs", inputs, "--reference", examples / "mlp.onnx")
    assert result.code == 0 and "emulation" in result.stdout, result.stdout + result.stderr
    device = run_cli("run", out, "--inputs", inputs, "--ascend-mode", "device")
    lines = device.stderr.strip().splitlines()
    assert device.code != 0 and len(lines) == 1 and "Traceback" not in device.stderr
    assert "cannot run on an NPU here" in lines[0] and "build.sh" in lines[0], lines
    standalone = run_cli_standalone(out, inputs)
    assert standalone.returncode == 1 and "run this artifact with `hetc run`" in standalone.stderr


def run_cli_standalone(out, inputs):
    import subprocess
    import sys

    from hetc.runtime import standalone

    return subprocess.run([sys.executable, standalone.__file__, str(out), "--inputs", str(inputs)],
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("args, message", [
    (["--target", "ascend,cpu", "--arch", "ascend-9000"], "invalid arch 'ascend-9000'"),
])
def test_bad_ascend_options_fail_in_one_line(examples, tmp_path, args, message):
    result = run_cli("compile", examples / "mlp.onnx", *args, "-o", tmp_path / "never")
    lines = result.stderr.strip().splitlines()
    assert result.code != 0 and len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "never").exists()


def test_the_host_cpu_is_implied(examples):
    compiled = hetc.compile(examples / "mlp.onnx", "ascend", placement="accelerator-first")
    assert compiled.manifest.targets == ["ascend", "cpu"] and compiled.manifest.offloads


def test_soc_version_comes_from_the_device_spec(examples, tmp_path):
    compiled = hetc.compile(examples / "mlp.onnx", "ascend,cpu", placement="accelerator-first", arch=["ascend-310p"])
    assert compiled.report["offload"]["ascend"]["soc_version"] == "Ascend310P3"
    out = compiled.save(tmp_path / "a")
    build = (out / compiled.manifest.offloads[0].project / "build.sh").read_text()
    assert "Ascend310P3" in build


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "bert_encoder"])
def test_torch_exported_models_match_onnxruntime_in_emulation(name, tmp_path):
    torch_models = pytest.importorskip("torch_models")
    pytest.importorskip("torch")
    model, inputs = torch_models.export(name, tmp_path)
    out = tmp_path / "artifact"
    compiled = run_cli("compile", model, "--target", "ascend,cpu", "--placement", "accelerator-first", "-o", out)
    assert compiled.code == 0, compiled.stderr
    result = run_cli("run", out, "--inputs", inputs, "--reference", model, "--tolerance", "1e-4")
    assert result.code == 0, result.stdout + result.stderr
    assert "runs as emulation" in " ".join(result.stdout.split())
    report = json.loads((out / "report.json").read_text())["offload"]["ascend"]
    ops = sum(len(r["nodes"]) for r in report["regions"])
    assert ops >= (25 if name == "resnet18" else 140), ops



# ---- symbolic dims: gears ------------------------------------------------------------------------------

def _encoder_block():
    """x[batch, seq, 16]: layer norm, q k^T over seq, softmax, @ v, a reshape to [batch * seq, 16]
    and back: regions whose shapes are expressions of both dims."""
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1, epsilon=1e-5),
             helper.make_node("MatMul", ["n", "w"], ["q"]),
             helper.make_node("Transpose", ["q"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "q"], ["a"]),
             helper.make_node("Reshape", ["a", "flat"], ["f"]),
             helper.make_node("Relu", ["f"], ["r"]),
             helper.make_node("Shape", ["x"], ["xs"]),
             helper.make_node("Reshape", ["r", "xs"], ["y"])]
    inits = {"g": _w(16), "b": _w(16), "w": _w(16, 16) / 4, "flat": np.array([-1, 16], np.int64)}
    return make(nodes, [tensor("x", ("batch", "seq", 16))], [tensor("y", ("batch", "seq", 16))], inits)


def test_symbolic_dims_become_gears_and_every_gear_matches_onnxruntime(tmp_path):
    model = _encoder_block()
    compiled = hetc.compile(model, "ascend,cpu", placement="accelerator-first", dims={"batch": (1, 4), "seq": (1, 64)},
                            gears={"seq": [16, 64]})
    assert compiled.manifest.gears == {"batch": [1, 2, 4], "seq": [16, 64]}  # batch: the default, powers of two
    report = compiled.report["offload"]["ascend"]
    assert report["execution"] == "emulation" and all(r.emulated for r in compiled.manifest.offloads)
    region = max(report["regions"], key=lambda r: sum(r["onnx_ops"].values()))
    assert region["dims"] == ["batch", "seq"] and len(region["gears"]) == 6
    assert region["atc"][0].startswith("--dynamic_dims=")
    for batch in (1, 2, 4):
        for seq in (16, 64):
            x = RNG.standard_normal((batch, seq, 16)).astype(np.float32)
            assert_close(compiled.run({"x": x})["y"], ort_run(model, {"x": x})[0])
    with pytest.raises(hetc.errors.InputError, match=r"^input 'x' dim 1 \('seq'\) is 20, not one of the gears the "
                                                     r"Ascend regions are built for: seq in 16, 64 "):
        compiled.run({"x": np.zeros((1, 20, 16), np.float32)})

    out = compiled.save(tmp_path / "art")
    folder = out / "ascend" / region["name"]
    build = (folder / "build.sh").read_text()
    # ATC: -1 for every symbolic dim of --input_shape, ND, and one gear per (batch, seq) combination
    assert "--input_format=ND" in build and "input0:-1,-1,16" in build
    assert "--dynamic_dims=" in build and build.count(";", build.index("--dynamic_dims=")) >= 5
    host = (folder / "host.cc").read_text()
    assert "constexpr int kDynamic = 2;" in host and "aclmdlSetInputDynamicDims" in host
    assert 'kGearDims = "batch, seq"' in host
    sub = onnx.load(folder / "model.onnx")
    assert [d.dim_param for d in sub.graph.input[0].type.tensor_type.shape.dim][:2] == ["batch", "seq"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["gears"] == {"batch": [1, 2, 4], "seq": [16, 64]}


def test_symbolic_batch_alone_uses_atc_dynamic_batch_size():
    model = make([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                 [tensor("x", ("batch", 8))], [tensor("y", ("batch", 4))], {"w": _w(8, 4)})
    compiled = hetc.compile(model, "ascend,cpu", placement="accelerator-first", gears={"batch": [1, 8, 32]},
                            dims={"batch": (1, 32)})
    (region,) = compiled.report["offload"]["ascend"]["regions"]
    assert region["atc"] == ["--dynamic_batch_size=1,8,32"] and region["gears"] == [[1], [8], [32]]
    for batch in (1, 8, 32):
        x = RNG.standard_normal((batch, 8)).astype(np.float32)
        assert_close(compiled.run({"x": x})["y"], ort_run(model, {"x": x})[0])
    with pytest.raises(hetc.errors.InputError, match="batch in 1, 8, 32"):
        compiled.run({"x": np.zeros((3, 8), np.float32)})


@pytest.mark.parametrize("gears, message", [
    ({"batch": [1, 64]}, r"--gears batch: 64 outside the dim's range 1\.\.32"),
    ({"heads": [1, 2]}, r"--gears heads: the model has no such symbolic dim \(its dims: batch\)"),
])
def test_gears_must_lie_within_the_declared_range(gears, message):
    model = make([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", ("batch", 8))], [tensor("y", ("batch", 8))])
    with pytest.raises(hetc.errors.UsageError, match=message):
        hetc.compile(model, "ascend,cpu", dims={"batch": (1, 32)}, gears=gears)


def test_default_gears_are_powers_of_two_in_range_capped():
    from hetc.options import default_gears, parse_gears

    assert default_gears((1, 8)) == (1, 2, 4, 8)
    assert default_gears((1, 512)) == (1, 8, 16, 32, 64, 128, 256, 512)  # at most 8: the low end + the largest
    assert default_gears((3, 100)) == (3, 4, 8, 16, 32, 64, 100)
    assert default_gears((5, 5)) == (5,)
    assert parse_gears("batch=8,1,8") == ("batch", (1, 8))
    with pytest.raises(hetc.errors.UsageError, match="expected DIM=SIZE,SIZE"):
        parse_gears("batch=0,4")


def test_cli_gears_outside_the_range_is_a_one_line_error(tmp_path):
    model = make([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", ("batch", 8))], [tensor("y", ("batch", 8))])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    result = run_cli("compile", path, "--target", "ascend,cpu", "--dim", "batch=1:8", "--gears", "batch=1,16",
                     "-o", tmp_path / "never")
    lines = result.stderr.strip().splitlines()
    assert result.code != 0 and len(lines) == 1 and "--gears batch: 16 outside the dim's range 1..8" in lines[0]
    assert not (tmp_path / "never").exists()


def test_plan_shape_reaches_the_ascend_cost_model():
    """Placement costs symbolic dims at --plan-shape (default: the range's low end): the Ascend
    and CPU times of the same op grow with it, and the compile report records the sizes."""
    from hetc.api import plan

    model = make([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                 [tensor("x", ("batch", 64))], [tensor("y", ("batch", 64))], {"w": _w(64, 64)})

    def times(**kwargs):
        p = plan(model, "ascend,cpu", dims={"batch": (1, 4096)}, **kwargs)
        j = p.problem.names.index(next(n.name for n in p.graph.nodes if n.op == "relax.matmul"))
        return {d.target.name: float(p.problem.times[j, k]) for k, d in enumerate(p.devices)}

    small, large = times(), times(plan_shape={"batch": 4096})
    assert all(large[t] > small[t] for t in ("ascend", "cpu")), (small, large)
    compiled = hetc.compile(model, "ascend,cpu", dims={"batch": (1, 4096)}, plan_shape={"batch": 256},
                            gears={"batch": [1, 256]})
    assert compiled.report["placement_plan"]["plan_shape"] == {"batch": 256}


@pytest.mark.slow
def test_exported_bert_runs_every_gear_in_emulation(tmp_path):
    """A transformers BERT exported with symbolic batch and seq: the Ascend regions are built
    for the gears and each gear matches onnxruntime on the whole model."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import hf_models

    path = hf_models.export_bert(tmp_path / "bert.onnx", "bert-tiny")
    compiled = hetc.compile(path, "ascend,cpu", placement="accelerator-first", dims={"batch": (1, 4), "seq": (1, 64)},
                            gears={"batch": [1, 4], "seq": [16, 64]})
    regions = compiled.report["offload"]["ascend"]["regions"]
    assert sum(sum(r["onnx_ops"].values()) for r in regions) > 50
    assert any(r.get("dims") == ["batch", "seq"] and r["atc"][0].startswith("--dynamic_dims=") for r in regions)
    for batch in (1, 4):
        for seq in (16, 64):
            inputs = hf_models.bert_inputs(batch, seq)
            for got, want in zip(compiled.run(inputs).values(), ort_run(path, inputs)):
                assert_close(got, want)
