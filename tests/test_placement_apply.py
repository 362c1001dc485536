"""Applying a placement: a model split over two CPU vdevices runs and matches the one-device build
and onnxruntime; plan.json records every transfer; bad placements are one-line errors; a cpu,cuda
split compiles (it runs only where there is a GPU)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from conftest import assert_close, ort_run, save
from onnx import TensorProto, helper
from onnx_util import make, tensor

import hetc
from hetc import api
from hetc.cli import main as cli_main
from hetc.errors import DeviceError

HAS_CUDA_BACKEND = importlib.util.find_spec("hetc.backends.cuda") is not None


def _nodes(model) -> list[str]:
    return [n.name for n in api.inspect_model(model).graph.nodes]


def _halves(names: list[str]) -> dict[str, str]:
    return {name: "cpu:0" if i < len(names) // 2 else "cpu:1" for i, name in enumerate(names)}


@pytest.fixture(scope="module")
def mlp_split(examples):
    """The MLP with its first half on cpu:0 and its second half on cpu:1."""
    model = examples / "mlp.onnx"
    return hetc.compile(model, target="cpu", placement=_halves(_nodes(model)))


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_two_cpu_split_matches_one_device_and_onnxruntime(examples, name, mlp_split):
    model = examples / f"{name}.onnx"
    inputs = dict(np.load(examples / f"{name}_inputs.npz"))
    split = mlp_split if name == "mlp" else hetc.compile(model, target="cpu", placement=_halves(_nodes(model)))
    assert split.plan["devices"] == ["cpu:0", "cpu:1"] and split.manifest.parts[0].devices == ["cpu:0", "cpu:1"]
    assert any(t["kind"] == "activation" for t in split.plan["transfers"])
    out = split.run(inputs)
    one_device = hetc.compile(model, target="cpu").run(inputs)
    for (key, value), ref in zip(out.items(), ort_run(model, inputs)):
        assert_close(value, one_device[key], rel=1e-5)
        assert_close(value, ref, rel=1e-5)


def test_interleaved_placement_and_artifact_round_trip(examples, tmp_path):
    """Every other op on the other device: many crossings; the saved artifact loads and runs."""
    model = examples / "mlp.onnx"
    inputs = dict(np.load(examples / "mlp_inputs.npz"))
    names = _nodes(model)
    compiled = hetc.compile(model, placement={n: f"cpu:{i % 2}" for i, n in enumerate(names)})
    assert {n["device"] for n in compiled.plan["nodes"]} == {"cpu:0", "cpu:1"}
    loaded = hetc.load(compiled.save(tmp_path / "art"))
    assert loaded.manifest.parts[0].devices == ["cpu:0", "cpu:1"]
    assert loaded.plan["transfers"] == compiled.plan["transfers"]
    assert_close(loaded.run(inputs)["probs"], ort_run(model, inputs)[0], rel=1e-5)
    # The plan.json hetc writes is itself a placement.
    again = hetc.compile(model, placement=tmp_path / "art" / "plan.json")
    assert (again.plan["nodes"], again.plan["transfers"]) == (compiled.plan["nodes"], compiled.plan["transfers"])


def test_plan_records_transfers_with_their_bytes(mlp_split):
    transfers, devices = mlp_split.plan["transfers"], mlp_split.plan["devices"]
    # By hand: the MLP (batch 4, widths 64-128-128-10) is cut after its second matmul; the
    # [4, 128] float32 activation crosses to cpu:1: 4 * 128 * 4 bytes.
    moved = [t for t in transfers if t["kind"] == "activation"]
    assert moved == [{"value": moved[0]["value"], "kind": "activation", "shape": [4, 128], "dtype": "float32",
                      "bytes": 2048, "from": "cpu:0", "to": "cpu:1"}]
    node = next(n for n in mlp_split.plan["nodes"] if n["name"] == moved[0]["value"])
    assert node["op"] == "relax.matmul" and node["device"] == "cpu:0"
    # Constants live on vdevice 0 (cpu:0 here); those read on cpu:1 (bias 2, weight 3, bias 3) are copied.
    constants = [t for t in transfers if t["kind"] == "constant"]
    assert constants and all(t["from"] == devices[0] == "cpu:0" and t["to"] == "cpu:1" for t in constants)
    assert sorted(t["bytes"] for t in constants) == [40, 512, 128 * 10 * 4]
    assert all(t["bytes"] == int(np.prod(t["shape"])) * 4 for t in transfers)
    report = mlp_split.report["placement"]
    assert report == {"devices": devices, "transfers": len(transfers),
                      "transfer_bytes": sum(t["bytes"] for t in transfers)}


def _cli(capsys, *args) -> tuple[int, str]:
    code = cli_main([str(a) for a in args])
    return code, capsys.readouterr().err


def _plan(path, nodes: dict[str, str]):
    path.write_text(json.dumps({"nodes": [{"name": k, "op": "?", "device": v} for k, v in nodes.items()]}))
    return path


@pytest.mark.parametrize("case, fragment", [
    ("unknown node", "the model does not have: nosuchnode"),
    ("target not in --target", "target 'cuda' is not in --target (cpu)"),
    ("unknown target", "unknown target 'tpu'"),
    ("bad device", "invalid device 'cpu'"),
    ("malformed json", "not valid JSON"),
    ("no nodes list", "a \"nodes\" list"),
    ("missing file", "cannot read it"),
])
def test_invalid_placements_are_one_line_errors(examples, tmp_path, capsys, case, fragment):
    first = _nodes(examples / "mlp.onnx")[0]
    plan = tmp_path / "plan.json"
    if case == "unknown node":
        _plan(plan, {first: "cpu:0", "nosuchnode": "cpu:1"})
    elif case == "target not in --target":
        _plan(plan, {first: "cuda:0"})
    elif case == "unknown target":
        _plan(plan, {first: "tpu:0"})
    elif case == "bad device":
        _plan(plan, {first: "cpu"})
    elif case == "malformed json":
        plan.write_text('{"nodes": [')
    elif case == "no nodes list":
        plan.write_text('{"name": "lv"}')
    out = tmp_path / "out"
    code, err = _cli(capsys, "compile", examples / "mlp.onnx", "--placement", plan, "-o", out)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("hetc: error: ") and fragment in err, err
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == (["plan.json"] if plan.exists() else [])


@pytest.fixture(scope="module")
def float8_model(tmp_path_factory):
    """Relu (CUDA can run it) then a Cast to float8 (only hetc's CPU lowering can)."""
    model = make([helper.make_node("Relu", ["x"], ["r"]),
                  helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT8E4M3FN)],
                 [tensor("x", (2, 3))], [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, (2, 3))],
                 opset=19)
    return save(model, tmp_path_factory.mktemp("f8") / "f8.onnx")


@pytest.mark.skipif(not HAS_CUDA_BACKEND, reason="hetc/backends/cuda is not there yet")
def test_op_on_a_target_that_cannot_run_it(float8_model, tmp_path, capsys):
    plan = _plan(tmp_path / "plan.json", dict(zip(_nodes(float8_model), ["cpu:0", "cuda:0"])))
    code, err = _cli(capsys, "compile", float8_model, "--target", "cpu,cuda", "--placement", plan,
                     "-o", tmp_path / "out")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "is placed on cuda:0, but target 'cuda' cannot run it" in err and not (tmp_path / "out").exists()


@pytest.mark.skipif(not HAS_CUDA_BACKEND, reason="hetc/backends/cuda is not there yet")
def test_solver_placement_over_cpu_and_cuda_compiles(float8_model, tmp_path):
    """Without --placement the solver places by cost; the Relu pinned to the GPU, the float8 Cast
    (only the CPU runs it) stays on cpu:0, with a transfer each way."""
    relu = _nodes(float8_model)[0]
    compiled = hetc.compile(float8_model, target="cpu,cuda", pins={relu: "cuda:0"})
    assert [n["device"] for n in compiled.plan["nodes"]] == ["cuda:0", "cpu:0"]
    assert compiled.plan["solver"] in ("milp", "chain-dp") and compiled.plan["prediction"]["optimal"]
    assert [(t["kind"], t["from"], t["to"], t["bytes"]) for t in compiled.plan["transfers"]] == [
        ("input", "cpu:0", "cuda:0", 24), ("activation", "cuda:0", "cpu:0", 24)]


@pytest.mark.skipif(not HAS_CUDA_BACKEND, reason="hetc/backends/cuda is not there yet")
def test_cpu_cuda_split_compiles_with_a_cuda_module(examples, tmp_path):
    from hetc.backends.cuda.binaries import read_embedded

    model = examples / "mlp.onnx"
    names = _nodes(model)
    halves = {n: "cpu:0" if i < len(names) // 2 else "cuda:0" for i, n in enumerate(names)}
    compiled = hetc.compile(model, target="cpu,cuda", placement=halves)
    assert compiled.manifest.parts[0].devices == ["cpu:0", "cuda:0"]
    assert {t["to"] for t in compiled.plan["transfers"]} == {"cuda:0"}
    out = compiled.save(tmp_path / "art")
    assert [b.fmt for b in read_embedded(out / compiled.manifest.parts[0].library)] == ["fatbin"]
    import tvm

    if not tvm.cuda(0).exist:
        with pytest.raises(DeviceError, match="needs an NVIDIA GPU"):
            compiled.run(dict(np.load(examples / "mlp_inputs.npz")))
        with pytest.raises(DeviceError, match="needs an NVIDIA GPU"):
            hetc.load(out)


@pytest.mark.skipif(not HAS_CUDA_BACKEND, reason="hetc/backends/cuda is not there yet")
def test_kernel_called_from_cpu_and_cuda_is_duplicated(examples):
    """Every other op of the transformer on the GPU: kernels both devices call get one copy per
    target, scheduled by that target's rules (dlight on the GPU, hetc's rules on the CPU)."""
    model = examples / "transformer.onnx"
    names = _nodes(model)
    compiled = hetc.compile(model, target="cpu,cuda", placement={n: ("cpu:0", "cuda:0")[i % 2]
                                                                 for i, n in enumerate(names)})
    kernels = compiled.report["kernels"]
    copies = {k: v for k, v in kernels.items() if "_cuda" in k or "_cpu" in k}
    assert copies, kernels
    for name, rule in copies.items():
        assert rule.startswith("dlight.") == ("_cuda" in name), (name, rule)
    assert all(rule != "none" for rule in kernels.values())


def test_manifest_part_devices_round_trip_and_old_manifests_load():
    from hetc.runtime.artifact import Manifest, Part

    split = Manifest("m.onnx", ["cpu"], [], [], [Part("main", "cpu", "cpu:0", False, "split/model.so",
                                                      devices=["cpu:0", "cpu:1"])], "tvm", "ffi")
    data = split.to_json()
    assert data["parts"][0]["devices"] == ["cpu:0", "cpu:1"]
    assert Manifest.from_json(data).parts[0].devices == ["cpu:0", "cpu:1"]
    del data["parts"][0]["devices"]  # a schema-1 manifest from before the field
    assert Manifest.from_json(data).parts[0].devices == []
    one = Manifest("m.onnx", ["cpu"], [], [], [Part("main", "cpu", "cpu:0", False, "cpu/model.so")], "tvm", "ffi")
    assert "devices" not in one.to_json()["parts"][0]


@pytest.mark.skipif(not HAS_CUDA_BACKEND, reason="hetc/backends/cuda is not there yet")
def test_cpu_only_rewrites_stay_off_a_split_module(tmp_path):
    """The CPU's pre-fusion conv rewrites (Winograd, outputs padded to its vector width and
    sliced back) run before placement: a split module leaves them out, else the slice fused into a
    GPU conv (ResNet-50 over cpu,cuda: a kernel over 48 KiB of shared memory, nvcc refused it)."""
    from hetc.placement.apply import CPU_ONLY_REWRITES

    rng = np.random.default_rng(0)
    w = rng.normal(size=(20, 8, 3, 3)).astype(np.float32)  # 20 outputs: no vector width divides them
    model = save(make([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
                       helper.make_node("Relu", ["y"], ["z"])],
                      [tensor("x", [1, 8, 16, 16])], [tensor("z", [1, 20, 16, 16])], {"w": w}, name="ragged"),
                 tmp_path / "ragged.onnx")
    alone = hetc.compile(model, target="cpu")
    assert any("strided_slice" in k for k in alone.report["kernels"])  # the CPU pads and slices
    conv, relu = _nodes(model)
    split = hetc.compile(model, target="cpu,cuda", placement={conv: "cuda:0", relu: "cpu:0"})
    stages = [s["stage"] for s in split.report["stages"]]
    assert not set(CPU_ONLY_REWRITES) & set(stages) and "place" in stages
    assert not any("strided_slice" in k for k in split.report["kernels"]), split.report["kernels"]
