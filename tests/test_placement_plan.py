"""The placement cost model and its use: device specs as data, roofline and backend estimates
with their sources, links, `hetc plan` (table, JSON that is a valid --placement, HTML/SVG),
and `hetc compile` with several targets placing by cost (pins, a device too small for the
weights), checked against onnxruntime."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import assert_close, ort_run, run_cli

import hetc
import hetc.api
from hetc.devices import all_specs
from hetc.graph import OpNode, TensorInfo
from hetc.placement.cost import devices_for, link, node_cost
from hetc.targets import parse_targets


def _node(op, inputs, outputs, flops, supported=("cpu", "cuda", "ascend", "fpga"), **kw):
    return OpNode(0, "n", op, [TensorInfo(s, "float32") for s in inputs], [TensorInfo(s, "float32") for s in outputs],
                  [], flops, dict.fromkeys(supported, True), **kw)


def test_shipped_specs_are_valid_and_say_where_their_numbers_come_from():
    specs = all_specs()
    for name in ("dev-cpu", "nvidia-h100", "nvidia-a100", "ascend-910b", "ascend-310p", "alveo-u250"):
        spec = specs[name]
        assert spec.source and spec.peak_flops and spec.memory_bandwidth > 0, name
    assert "measured" in specs["dev-cpu"].source and specs["dev-cpu"].target == "cpu"
    assert "datasheet" in specs["nvidia-h100"].source.lower()
    assert specs["alveo-u250"].params["dsp"] == 12288


def test_user_specs_from_hetc_devices(tmp_path, monkeypatch):
    spec = {"name": "tiny-npu", "description": "test", "target": "ascend", "arch": "Ascend310P3", "source": "test",
            "peak_flops": {"float32": 1e12}, "memory_bytes": 1000, "memory_bandwidth": 1e11}
    (tmp_path / "tiny-npu.json").write_text(json.dumps(spec))
    monkeypatch.setenv("HETC_DEVICES", str(tmp_path))
    all_specs.cache_clear()
    try:
        assert all_specs()["tiny-npu"].memory_bytes == 1000
        (tmp_path / "broken.json").write_text("{")
        all_specs.cache_clear()
        with pytest.raises(hetc.HetcError, match="broken.json: not a valid spec"):
            all_specs()
    finally:
        monkeypatch.delenv("HETC_DEVICES")
        all_specs.cache_clear()


def test_roofline_and_backend_estimates_name_their_source():
    cpu, cuda, ascend, fpga = devices_for(parse_targets("cpu,cuda,ascend,fpga"))
    h100 = cuda.spec
    matmul = _node("relax.matmul", [(64, 1024), (1024, 1024)], [(64, 1024)], 2 * 64 * 1024 * 1024)
    cost = node_cost(matmul, cuda)
    roofline = max(matmul.flops / h100.peak_flops["float32"], (matmul.bytes_in + matmul.bytes_out)
                   / h100.memory_bandwidth)
    # the H100's roofline is scaled by what a real H100 measured (benchmarks/results/h100-*)
    scale = h100.measured["kernel_time_scale"]
    assert scale > 1 and h100.kernel_time_scale == scale
    assert cost.seconds == pytest.approx(roofline * scale + h100.launch_overhead)
    assert cost.source == f"roofline:nvidia-h100*{scale:g}(measured)"
    assert node_cost(matmul, ascend).source == "roofline:ascend-910b"  # nothing measured: datasheet
    conv = _node("relax.nn.conv2d", [(2, 16, 32, 32), (32, 16, 3, 3)], [(2, 32, 32, 32)], 2 * 2 * 32 * 32 * 32 * 16 * 9)
    fcost = node_cost(conv, fpga)
    # 3*3*16*32 = 4608 MACs per pixel > 4096 multipliers: reuse 2, so 32*32 pixels x 2 = 2048 cycles
    # of MACs per sample; writing 32*32*32 scalars (one per cycle) takes longer: batch 2, 4 ns
    assert fcost.source == "fpga-estimate:alveo-u250" and fcost.seconds == pytest.approx(2 * 32768 * 4e-9)
    wide = _node("relax.nn.conv2d", [(1, 512, 4, 4), (8, 512, 3, 3)], [(1, 8, 4, 4)], 0)
    # 3*3*512*8 = 36864 MACs per pixel: reuse 9, 16 pixels x 9 = 144 cycles > 128 written, 8192 read
    assert node_cost(wide, fpga).seconds == pytest.approx(8192 * 4e-9)
    unsupported = _node("relax.matmul", [(4, 4)], [(4, 4)], 32, supported=("cpu",))
    assert node_cost(unsupported, ascend) is None and node_cost(unsupported, cpu) is not None


def test_links_peer_host_and_through_the_host():
    targets = parse_targets("cpu,cuda,ascend")
    cpu, cuda, ascend = devices_for(targets)
    assert link(cpu, cpu)[:2] == (np.inf, 0.0)
    bw, lat, name = link(cpu, cuda)
    measured = cuda.spec.measured["host_link"]  # pageable copies measured on an H100, not the datasheet
    assert (bw, lat) == (measured["bandwidth"], measured["latency"]) and "PCIe" in name
    assert bw < cuda.spec.host_link["bandwidth"] and lat > cuda.spec.host_link["latency"]
    bw, lat, _ = link(cuda, ascend)  # through the host: latencies add, the slower link counts
    assert lat == pytest.approx(measured["latency"] + ascend.spec.host_link["latency"])
    assert bw == min(measured["bandwidth"], ascend.spec.host_link["bandwidth"])
    from hetc.placement.cost import Device

    other = Device("cuda:1", cuda.target, cuda.spec)
    assert link(cuda, other)[0] == cuda.spec.peer_link["bandwidth"]


def test_plan_cli_prints_writes_json_html_svg_and_the_json_is_a_placement(examples, tmp_path):
    out = tmp_path / "plan.json"
    result = run_cli("plan", examples / "cnn.onnx", "--target", "cpu,fpga", "-o", out, "--html", tmp_path / "p.html",
                     "--svg", tmp_path / "p.svg")
    assert result.code == 0, result.stderr
    assert "predicted" in result.stdout and "cpu:0" in result.stdout and "fpga:0" in result.stdout
    data = json.loads(out.read_text())
    assert data["solver"] in ("milp", "chain-dp") and data["optimal"]
    assert {n["device"] for n in data["nodes"]} <= {"cpu:0", "fpga:0"}
    assert all(n["source"] for n in data["nodes"])
    assert "<svg" in (tmp_path / "p.svg").read_text() and "<svg" in (tmp_path / "p.html").read_text()
    # a cpu-only plan is a valid --placement for a cpu build
    cpu_plan = tmp_path / "cpu.json"
    assert run_cli("plan", examples / "mlp.onnx", "--target", "cpu", "-o", cpu_plan).code == 0
    compiled = hetc.compile(examples / "mlp.onnx", "cpu", placement=cpu_plan)
    inputs = dict(np.load(examples / "mlp_inputs.npz"))
    assert_close(compiled.run(inputs)["probs"], ort_run(examples / "mlp.onnx", inputs)[0])


@pytest.mark.parametrize("targets", ["cpu,fpga", "cpu,ascend"])
def test_compile_places_by_cost_and_matches_onnxruntime(examples, targets):
    model, inputs = examples / "cnn.onnx", dict(np.load(examples / "cnn_inputs.npz"))
    compiled = hetc.compile(model, targets)
    prediction = compiled.plan["prediction"]
    assert prediction["solver"] == compiled.plan["solver"] and prediction["predicted_seconds"] > 0
    for got, want in zip(compiled.run(inputs).values(), ort_run(model, inputs)):
        assert_close(got, want)
    chosen = {n["name"]: n["device"] for n in compiled.report["placement_plan"]["nodes"]}
    placed = {n["name"]: n["device"] for n in compiled.plan["nodes"] if n.get("placed", True)}
    accelerator = targets.split(",")[1] + ":0"
    assert {n for n, d in placed.items() if d == accelerator} <= {n for n, d in chosen.items() if d == accelerator}


def test_pins_move_nodes_where_the_user_says(examples):
    model, inputs = examples / "cnn.onnx", dict(np.load(examples / "cnn_inputs.npz"))
    free = hetc.compile(model, "cpu,ascend")
    assert not free.manifest.offloads, "a CNN this small is cheaper on the CPU than across PCIe"
    convs = [n.name for n in hetc.api.inspect_model(model).graph.nodes if n.op == "relax.nn.conv2d"]
    pinned = hetc.compile(model, "cpu,ascend", pins=dict.fromkeys(convs, "ascend:0"))
    devices = {n["name"]: n["device"] for n in pinned.plan["nodes"]}
    assert [devices[c] for c in convs] == ["ascend:0", "ascend:0"]
    chosen = {n["name"] for n in pinned.report["placement_plan"]["nodes"] if n["device"] == "ascend:0"}
    assert set(convs) <= {n for n, d in devices.items() if d == "ascend:0"} <= chosen  # the plan, not all it supports
    assert pinned.manifest.offloads
    for got, want in zip(pinned.run(inputs).values(), ort_run(model, inputs)):
        assert_close(got, want)


def test_a_device_too_small_for_the_weights_gets_none_of_them(examples, tmp_path, monkeypatch):
    spec = {"name": "tiny-npu", "description": "an NPU with 1 KB of memory", "target": "ascend",
            "arch": "Ascend310P3", "source": "test", "peak_flops": {"float32": 1e15}, "memory_bytes": 1024,
            "memory_bandwidth": 1e13, "host_link": {"name": "fast", "bandwidth": 1e12, "latency": 0.0}}
    (tmp_path / "tiny-npu.json").write_text(json.dumps(spec))
    monkeypatch.setenv("HETC_DEVICES", str(tmp_path))
    all_specs.cache_clear()
    try:
        planned = hetc.plan(examples / "cnn.onnx", "cpu,ascend", devices={"ascend": "tiny-npu"})
    finally:
        monkeypatch.delenv("HETC_DEVICES")
        all_specs.cache_clear()
    on_npu = [n for n, k in zip(planned.graph.nodes, planned.device_index()) if k == 1]
    assert sum(n.weight_bytes for n in on_npu) <= 1024
    assert any(n.op == "relax.nn.conv2d" for n in planned.graph.nodes)
    assert not any(n.op == "relax.nn.conv2d" for n in on_npu)  # conv weights are > 1 KB


@pytest.mark.parametrize("args, message", [
    (["--target", "cpu,ascend", "--pin", "nope=cpu:0"], "--pin names node 'nope'"),
    (["--target", "cpu,ascend", "--pin", "lv=npu:3"], "no such device"),
    (["--target", "cpu,ascend", "--pin", "lv"], "invalid --pin"),
    (["--target", "cpu,ascend", "--device", "cuda=nvidia-a100"], "not in --target"),
    (["--target", "cpu,ascend", "--device", "ascend=nvidia-a100"], "is for target 'cuda'"),
    (["--target", "cpu", "--pin", "lv=cpu:0"], "use them with several targets"),
])
def test_bad_placement_options_fail_in_one_line(examples, tmp_path, args, message):
    result = run_cli("compile", examples / "cnn.onnx", *args, "-o", tmp_path / "never")
    lines = result.stderr.strip().splitlines()
    assert result.code != 0 and len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "never").exists()


def _runnable(compiled) -> bool:
    """No GPU here: an artifact with a cuda part compiles but cannot run."""
    devices = compiled.manifest.parts[0].devices or [compiled.manifest.parts[0].device]
    return not any(d.startswith("cuda") for d in devices)


@pytest.mark.parametrize("targets", ["cuda,ascend", "cpu,fpga", "cpu,cuda,ascend,fpga"])
@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_device_combinations_compile_and_the_runnable_ones_match(examples, name, targets):
    model, inputs = examples / f"{name}.onnx", dict(np.load(examples / f"{name}_inputs.npz"))
    compiled = hetc.compile(model, targets)
    assert compiled.plan["prediction"]["predicted_seconds"] > 0
    if _runnable(compiled):
        for got, want in zip(compiled.run(inputs).values(), ort_run(model, inputs)):
            assert_close(got, want)


@pytest.mark.parametrize("split", [False, True])
def test_cpu_ascend_and_fpga_in_one_artifact(examples, tmp_path, split):
    """A given placement over three kinds of device: the CPU real (one vdevice, or two as a split
    module), Ascend regions in emulation, FPGA regions in C-simulation; after a save and load too."""
    model, inputs = examples / "cnn.onnx", dict(np.load(examples / "cnn_inputs.npz"))
    names = [n.name for n in hetc.api.inspect_model(model).graph.nodes]
    third = len(names) // 3
    placement = {n: ("ascend:0" if i < third else "fpga:0" if i < 2 * third else ("cpu:1" if split else "cpu:0"))
                 for i, n in enumerate(names)}
    compiled = hetc.compile(model, "cpu,ascend,fpga", placement=placement)
    assert sorted(o.target for o in compiled.manifest.offloads) == ["ascend", "fpga"]
    assert compiled.manifest.parts[0].devices == (["cpu:0", "cpu:1"] if split else ["cpu:0"])
    reloaded = hetc.load(compiled.save(tmp_path / "a"))
    for model_ in (compiled, reloaded):
        for got, want in zip(model_.run(inputs).values(), ort_run(model, inputs)):
            assert_close(got, want)


@pytest.mark.torch
@pytest.mark.slow
def test_torch_resnet18_on_device_combinations(tmp_path):
    torch_models = pytest.importorskip("torch_models")
    pytest.importorskip("torch")
    model, inputs_path = torch_models.export("resnet18", tmp_path)
    inputs = dict(np.load(inputs_path))
    for targets in ("cuda,ascend", "cpu,fpga", "cpu,cuda,ascend,fpga", "cpu,ascend"):
        compiled = hetc.compile(model, targets)
        assert compiled.plan["prediction"]["optimal"] or compiled.plan["prediction"]["solver"] == "heuristic"
        if _runnable(compiled):
            for got, want in zip(compiled.run(inputs).values(), ort_run(model, inputs)):
                assert_close(got, want)
