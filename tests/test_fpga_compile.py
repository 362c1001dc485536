"""`hetc compile --target fpga,cpu` end to end: the example MLP and CNN and a torch-exported small
CNN compile to an artifact whose FPGA regions run as C-simulation and match onnxruntime; every
generated project's testbench compiles and passes under g++; bad FPGA options fail in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_close, ort_run, run_cli

import hetc

pytest.importorskip("hls4ml", reason="the FPGA target needs hls4ml's ap_types headers")

from hetc.backends.fpga.toolchain import ap_types_include


def _inputs(examples, name):
    return dict(np.load(examples / f"{name}_inputs.npz"))


def _check_testbench(project):
    """The project's own testbench, built the way its README says, passes on its tb_data."""
    (top,) = [p.stem for p in (project / "firmware").glob("*.cpp")]
    binary = project / "tb_run"
    build = subprocess.run(["g++", "-std=c++14", "-O1", "-Wno-unknown-pragmas", "-I", project / "firmware",
                            "-isystem", ap_types_include(), project / "tb" / f"{top}_tb.cpp",
                            project / "firmware" / f"{top}.cpp", "-o", binary], capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr[-2000:]
    run = subprocess.run([binary, project / "tb_data"], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]


def _check_artifact(compiled, out, min_ops):
    (region,) = compiled.manifest.offloads
    assert (region.target, region.device, region.execution, region.emulated) == ("fpga", "fpga:0",
                                                                                "c-simulation", True)
    assert len(region.nodes) >= min_ops
    project = out / region.project
    for rel in ("run_hls.tcl", "host/host.cpp", "host/Makefile", "README.md", "firmware/parameters.h"):
        assert (project / rel).is_file(), rel
    assert "csim_design" in (project / "run_hls.tcl").read_text()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["offloads"][0]["execution"] == "c-simulation"
    estimate = compiled.report["offload"]["fpga"]["regions"][0]["estimate"]
    assert estimate["estimate"] is True and estimate["dsp"] > 0
    return project


@pytest.mark.parametrize("name, min_ops", [("mlp", 8), ("cnn", 10)])
def test_example_model_in_float_matches_onnxruntime(examples, tmp_path, name, min_ops):
    model, inputs = examples / f"{name}.onnx", _inputs(examples, name)
    compiled = hetc.compile(model, "fpga,cpu", placement="accelerator-first")
    for got, want in zip(compiled.run(inputs).values(), ort_run(model, inputs)):
        assert_close(got, want)
    out = compiled.save(tmp_path / "artifact")
    project = _check_artifact(compiled, out, min_ops)
    _check_testbench(project)
    reloaded = hetc.load(out)  # the C-simulation is inside the saved library
    for got, want in zip(reloaded.run(inputs).values(), ort_run(model, inputs)):
        assert_close(got, want)


def test_fixed_point_from_calibration_meets_its_bound(examples, tmp_path):
    """16-bit types chosen from calibration ranges: the whole-model error stays within 1% of
    max |reference| (docs/fpga.md states the bound), the report gives every layer's type and its
    measured error against float, and the testbench (tolerance 0: the C-simulation equals
    hetc's bit-exact numpy emulation) passes."""
    model = examples / "cnn.onnx"
    inputs = _inputs(examples, "cnn")
    (name,) = inputs
    rng = np.random.default_rng(7)
    calibration = tmp_path / "calibration.npz"
    np.savez(calibration, **{name: rng.standard_normal((16, *inputs[name].shape[1:])).astype(np.float32)})
    compiled = hetc.compile(model, "fpga,cpu", placement="accelerator-first", calibration=calibration)
    region = compiled.report["offload"]["fpga"]["regions"][0]
    assert region["precision"] == "fixed (calibrated)"
    for layer in region["layers"]:
        assert layer["result"].startswith("ap_fixed<16,"), layer
        assert layer["error_vs_float"]["max_rel_err"] < 0.01, layer
    (got,) = compiled.run(inputs).values()
    (want,) = ort_run(model, inputs)
    err = np.max(np.abs(got - want)) / np.max(np.abs(want))
    assert 0 < err <= 0.01  # fixed point is really used, and within its bound
    out = compiled.save(tmp_path / "artifact")
    project = _check_artifact(compiled, out, 10)
    assert (project / "tb_data" / "expected.txt").read_text().startswith("tolerance 0 0")
    _check_testbench(project)


@pytest.mark.torch
def test_torch_exported_small_cnn(tmp_path):
    torch_models = pytest.importorskip("torch_models")
    pytest.importorskip("torch")
    model, inputs = torch_models.export("small_cnn", tmp_path)
    out = tmp_path / "artifact"
    compiled = run_cli("compile", model, "--target", "fpga,cpu", "--placement", "accelerator-first", "-o", out)
    assert compiled.code == 0, compiled.stderr
    assert "runs as C-simulation (emulated: no FPGA here)" in " ".join(compiled.stdout.split())
    result = run_cli("run", out, "--inputs", inputs, "--reference", model, "--tolerance", "1e-4")
    assert result.code == 0, result.stdout + result.stderr
    assert "C-simulation" in result.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    (region,) = manifest["offloads"]
    assert len(region["nodes"]) >= 10
    _check_testbench(out / region["project"])


def test_types_from_a_json_file_reach_the_layers(examples, tmp_path):
    spec = tmp_path / "types.json"
    spec.write_text(json.dumps({"default": "ap_fixed<18,8>", "layers": {
        "fpga_region0.dense_0.accum": "ap_fixed<40,16>", "other_region.x": "float"}}))
    compiled = hetc.compile(examples / "mlp.onnx", "fpga,cpu", placement="accelerator-first", precision=spec)
    layers = {layer["name"]: layer for layer in compiled.report["offload"]["fpga"]["regions"][0]["layers"]}
    assert layers["dense_0"]["accum"] == "ap_fixed<40,16>"
    assert layers["dense_0"]["result"] == "ap_fixed<18,8>"


@pytest.mark.parametrize("args, message", [
    (["--target", "fpga", "--precision", "fixed16"], "invalid --precision"),  # the host cpu is implied
    (["--target", "fpga,cpu", "--precision", "int7"], "invalid --precision 'int7'"),
    (["--target", "fpga,cpu", "--precision", "missing.json"], "missing.json: no such file"),
    (["--target", "fpga,cpu", "--calibration", "missing.npz"], "missing.npz: not found"),
    (["--target", "fpga,cpu", "--calibration", "{bad}", "--precision", "float"],
     "--calibration chooses fixed-point types"),
    (["--target", "fpga,cpu", "--calibration", "{bad}"], "no array for input"),
    (["--target", "cpu", "--precision", "fixed"], "add the fpga target"),
])
def test_bad_fpga_options_fail_in_one_line(examples, tmp_path, args, message):
    bad = tmp_path / "bad.npz"
    np.savez(bad, nothing=np.zeros(3, np.float32))
    out = tmp_path / "never"
    result = run_cli("compile", examples / "mlp.onnx", *[a.replace("{bad}", str(bad)) for a in args], "-o", out,
                     cwd=tmp_path)
    assert result.code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr, result.stderr
    assert not out.exists()


def test_two_artifacts_with_the_same_region_names_in_one_process(tmp_path):
    """Two models whose FPGA regions have the same names (fpga_region0, conv2d_1_config) but other
    shapes, compiled and run in one process: each region's static buffers are its own. With
    STB_GNU_UNIQUE symbols the second, larger region wrote past the first one's line buffers and
    crashed the process (run in a subprocess so that a regression fails cleanly)."""
    script = tmp_path / "two.py"
    script.write_text(f"""
import sys
import numpy as np
sys.path.insert(0, {str(Path(__file__).parent)!r})
from onnx import helper
from onnx_util import make, tensor
from conftest import assert_close, ort_run
import hetc

for size in (8, 96):
    w = np.random.default_rng(size).standard_normal((8, 3, 3, 3)).astype(np.float32)
    model = make([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                 [tensor("x", [1, 3, size, size])], [tensor("y", [1, 8, size, size])], {{"w": w}})
    compiled = hetc.compile(model, "cpu,fpga", placement="accelerator-first")
    assert [o.name for o in compiled.manifest.offloads] == ["fpga_region0"]
    x = {{"x": np.random.default_rng(1).standard_normal((1, 3, size, size)).astype(np.float32)}}
    assert_close(compiled.run(x)["y"], ort_run(model, x)[0])
print("ok")
""")
    run = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout[-2000:] + run.stderr[-2000:]


def test_symbolic_dims_keep_ops_on_cpu_and_the_report_says_why():
    """FPGA kernels are generated for static shapes: with a symbolic batch every op stays on the
    CPU, the FPGA report names the dim per op, and the model still runs at any batch. Bound
    statically (input_shapes), the same model gets its FPGA region."""
    from onnx import helper
    from onnx_util import make, tensor

    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(8, 4)).astype(np.float32), rng.normal(size=(4,)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    model = make(nodes, [tensor("x", ("batch", 8))], [tensor("y", ("batch", 4))], {"w": w, "b": b})

    compiled = hetc.compile(model, "fpga,cpu", placement="accelerator-first", dims={"batch": (1, 16)})
    assert compiled.manifest.offloads == []
    fpga = compiled.report["offload"]["fpga"]
    assert fpga["regions"] == []
    kept = {k["op"]: k["reason"] for k in fpga["kept_on_cpu"]}
    assert {"relax.matmul", "relax.add", "relax.nn.relu"} <= set(kept)
    assert all(r.startswith("symbolic dim batch ") for r in kept.values()), kept
    assert all(k["dims"] == ["batch"] for k in fpga["kept_on_cpu"])
    for batch in (1, 5, 16):
        x = rng.normal(size=(batch, 8)).astype(np.float32)
        assert_close(compiled.run({"x": x})["y"], np.maximum(x @ w + b, 0))

    static = hetc.compile(model, "fpga,cpu", placement="accelerator-first", input_shapes={"x": (2, 8)})
    assert len(static.manifest.offloads) == 1 and "kept_on_cpu" not in static.report["offload"]["fpga"]
