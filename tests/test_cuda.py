"""The CUDA target: dlight schedules on every kernel, nvcc-built fatbins in the artifact, clear
errors without a GPU. Compiling needs no GPU (and nvcc for the binaries); tests that run the
kernels are marked ``gpu`` and skip without one."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from conftest import assert_close, ort_run, run_cli

import hetc
from hetc.backends.cuda import binaries
from hetc.backends.cuda.codegen import cuda_archs, cuda_target
from hetc.backends.cuda.pipeline import check_device_kernels, host_kernels, pre_schedule_stages, stages
from hetc.errors import CompileError
from hetc.frontends.onnx import load_model, to_relax
from hetc.options import CompileOptions
from hetc.passes import run_pipeline

needs_nvcc = pytest.mark.skipif(not binaries.shutil.which("nvcc"), reason="nvcc (CUDA toolkit) not installed")


def _has_gpu() -> bool:
    try:
        import tvm

        return bool(tvm.cuda(0).exist)
    except Exception:  # noqa: BLE001 - no CUDA runtime at all
        return False


needs_gpu = pytest.mark.skipif(not _has_gpu(), reason="no NVIDIA GPU on this machine")


def _scheduled(path, options=None, stage_list=None):
    mod = to_relax(load_model(path, None, None, None))
    options = options or CompileOptions(targets=("cuda",))
    mod, _ = run_pipeline(mod, stage_list if stage_list is not None else stages(options))
    return mod


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_every_kernel_is_a_gpu_kernel(examples, name):
    options = CompileOptions(targets=("cuda",))
    mod = _scheduled(examples / f"{name}.onnx", options)
    kernels = [gv.name_hint for gv, f in mod.functions.items() if type(f).__name__ == "PrimFunc"]
    assert kernels and host_kernels(mod, cuda_target(options)) == []
    for gv, func in mod.functions.items():
        if gv.name_hint in kernels:
            assert str(func.attrs["hetc.schedule_rule"]).startswith("dlight."), gv.name_hint
    # the built executable's device module holds exactly these kernels
    from hetc.backends.cuda.codegen import build

    (device,) = binaries.cuda_modules(build(mod, options).mod)
    source = device.inspect_source("cuda")
    assert all(f"{k}_kernel" in source for k in kernels)


def test_unscheduled_kernel_is_a_compile_error(examples):
    """Without the GPU schedules TVM would silently build host code: hetc refuses."""
    options = CompileOptions(targets=("cuda",))
    mod = _scheduled(examples / "mlp.onnx", stage_list=pre_schedule_stages(options))
    target = cuda_target(options)
    assert host_kernels(mod, target)  # nothing is bound to GPU threads yet
    with pytest.raises(CompileError, match=r"kernel\(s\) got no GPU schedule and would run as host code: fused_"):
        check_device_kernels(mod, target)


def test_arch_from_flags_and_device_specs():
    assert cuda_archs(CompileOptions()) == ["sm_90"]
    assert cuda_archs(CompileOptions(arch=("sm_90", "nvidia-a100", "sm_90"))) == ["sm_80", "sm_90"]
    assert cuda_archs(CompileOptions(arch=("nvidia-l4",))) == ["sm_89"]
    # code is generated for the lowest architecture so that it runs on all of them
    assert cuda_target(CompileOptions(arch=("sm_90", "sm_80"))).attrs["arch"] == "sm_80"
    assert binaries.gencode_flags(["sm_80", "sm_90"]) == [
        "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
        "-gencode", "arch=compute_90,code=compute_90"]


def _blob(modules: list[tuple[bytes, bytes, bytes]]) -> bytes:
    """A packed-imports blob in TVM's layout: u64 length, a tree header, then key + payload."""
    def s(b: bytes) -> bytes:
        return struct.pack("<Q", len(b)) + b

    body = struct.pack("<QQ", 1, 0) + s(b"_lib")
    for fmt, table, data in modules:
        payload = s(fmt) + table + s(data)
        body += s(b"cuda") + struct.pack("<Q", len(payload)) + payload
    return struct.pack("<Q", len(body)) + body


def test_replace_sources_keeps_the_function_table():
    # a function table with bytes that look like lengths and the word "cuda" in it
    table = struct.pack("<Q", 1) + struct.pack("<Q", 4) + b"cuda" + bytes(range(40))
    blob = _blob([(b"cuda", table, b"__global__ void k() {}"), (b"cuda", table, b"__global__ void j() {}")])
    (first, second) = binaries.find_cuda_blobs(blob)
    assert (first.fmt, first.data, second.data) == ("cuda", b"__global__ void k() {}", b"__global__ void j() {}")
    patched = binaries.replace_sources(blob, {"__global__ void k() {}": b"\x50\xed\x55\xbaK",
                                              "__global__ void j() {}": b"\x50\xed\x55\xbaJJ"})
    assert struct.unpack_from("<Q", patched)[0] == len(patched) - 8
    assert [(b.fmt, b.data) for b in binaries.find_cuda_blobs(patched)] == [
        ("fatbin", b"\x50\xed\x55\xbaK"), ("fatbin", b"\x50\xed\x55\xbaJJ")]
    assert patched.count(table) == 2
    with pytest.raises(CompileError, match="no compiled binary"):
        binaries.replace_sources(blob, {})


@needs_nvcc
def test_artifact_carries_fatbins_for_every_arch(examples, tmp_path):
    out = tmp_path / "art"
    result = run_cli("compile", examples / "cnn.onnx", "--target", "cuda", "--arch", "sm_80,nvidia-h100", "-o", out)
    assert result.code == 0, result.stderr
    library = out / "cuda" / "model.so"
    (embedded,) = binaries.read_embedded(library)
    assert embedded.fmt == "fatbin"
    assert binaries.fatbin_contents(embedded.data) == ["ptx compute_90", "sass sm_80", "sass sm_90"]
    assert b"__global__" not in library.read_bytes()  # no CUDA source left to JIT-compile
    report = (out / "report.json").read_text()
    assert '"none"' not in report and "dlight." in report
    # without a GPU, running says so in one line
    if not _has_gpu():
        run = run_cli("run", out, "--inputs", examples / "cnn_inputs.npz")
        assert run.code == 1 and "needs an NVIDIA GPU (cuda:0) and none is available here" in run.stderr
        assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_compile_in_process_runs_only_on_a_gpu(examples):
    compiled = hetc.compile(examples / "mlp.onnx", target="cuda")
    inputs = dict(np.load(examples / "mlp_inputs.npz"))
    if _has_gpu():
        assert_close(compiled.run(inputs)["probs"], ort_run(examples / "mlp.onnx", inputs)[0])
    else:
        with pytest.raises(hetc.errors.DeviceError, match="needs an NVIDIA GPU"):
            compiled.run(inputs)


def test_bad_arch_and_tuning_without_gpu_are_one_line_errors(examples, tmp_path):
    bad = run_cli("compile", examples / "mlp.onnx", "--target", "cuda", "--arch", "sm_9x", "-o", tmp_path / "a")
    assert bad.code == 2 and "invalid arch 'sm_9x'" in bad.stderr and not (tmp_path / "a").exists()
    if not _has_gpu():
        tune = run_cli("tune", examples / "mlp.onnx", "--target", "cuda", "--trials", "4", "--db", tmp_path / "db")
        assert tune.code == 1 and "tuning for cuda" in tune.stderr and "needs an NVIDIA GPU" in tune.stderr
        assert not (tmp_path / "db").exists()


def test_tuning_records_apply_to_cuda_kernels(examples, tmp_path):
    """``--db`` with CUDA records: the recorded schedules replace dlight's. The records here
    come from MetaSchedule's CUDA design space with a made-up run time (measuring them needs a
    GPU); what is tested is that hetc finds, applies and builds them."""
    from tvm.s_tir import meta_schedule as ms

    from hetc.backends.cuda.pipeline import pre_schedule_stages as cuda_pre
    from hetc.tuning.database import open_for_tuning
    from hetc.tuning.tasks import extract

    options = CompileOptions(targets=("cuda",))
    target = cuda_target(options)
    mod = _scheduled(examples / "mlp.onnx", stage_list=cuda_pre(options))
    tasks = extract(mod, target)
    db_dir = tmp_path / "db"
    with open_for_tuning(db_dir, target) as db:
        for task in tasks:
            space = ms.space_generator.PostOrderApply(sch_rules="cuda", postprocs="cuda", mutator_probs="cuda")
            ctx = ms.TuneContext(mod=task.mod, target=target, space_generator=space, task_name=task.name)
            sch = ctx.generate_design_space()[0]
            workload = db.db.commit_workload(task.mod)
            db.db.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, [1e-5], target,
                                                                ms.arg_info.ArgInfo.from_prim_func(
                                                                    next(iter(task.mod.functions.values())))))
    compiled = hetc.compile(examples / "mlp.onnx", target="cuda", database=db_dir)
    kinds = set(compiled.report["kernels"].values())
    assert "tuned" in kinds and "none" not in kinds


def _attention_block():
    """x[batch, seq, 16] -> layer norm -> q k^T softmax -> @ v: matmuls, reductions and
    elementwise kernels whose extents are the symbolic batch and seq."""
    from onnx import helper
    from onnx_util import make, tensor

    rng = np.random.default_rng(0)
    w = rng.normal(size=(16, 16)).astype(np.float32)
    inits = {"w": w, "g": np.ones(16, np.float32), "b": np.zeros(16, np.float32)}
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "w"], ["q"]),
             helper.make_node("Transpose", ["q"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "q"], ["y"])]
    return make(nodes, [tensor("x", ("batch", "seq", 16))], [tensor("y", ("batch", "seq", 16))], inits)


def test_symbolic_dims_compile_and_the_report_lists_each_kernels_extents():
    """dlight schedules kernels over symbolic extents; report.json's kernel_dims names, per
    kernel, the dims it takes and the launch extents that depend on them."""
    compiled = hetc.compile(_attention_block(), "cuda", dims={"batch": (1, 8), "seq": (1, 256)})
    kernels, dims = compiled.report["kernels"], compiled.report["kernel_dims"]
    assert all(rule.startswith("dlight.") for rule in kernels.values()), kernels
    assert set(dims) <= set(kernels) and len(dims) >= 3
    for name, entry in dims.items():
        assert entry["dims"] and set(entry["dims"]) <= {"batch", "seq"}, (name, entry)
        assert entry.get("launch"), f"{name}: no launch extent depends on {entry['dims']}"
    # the q k^T matmul: one block row per 32 (or so) positions of seq, per batch element
    scores = [e for n, e in dims.items() if kernels[n] == "dlight.Matmul" and e["dims"] == ["batch", "seq"]]
    assert scores and any("seq" in extent for e in scores for extent in e["launch"].values())
    assert any("batch" in extent for e in dims.values() for extent in e["launch"].values())
    # the same model with static shapes has no symbolic kernels
    static = hetc.compile(_attention_block(), "cuda", input_shapes={"x": (2, 8, 16)})
    assert "kernel_dims" not in static.report


@pytest.mark.slow
@needs_nvcc
def test_exported_bert_with_symbolic_dims_compiles_to_fatbins(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import hf_models

    model = hf_models.export_bert(tmp_path / "bert.onnx", "bert-tiny")
    result = run_cli("compile", model, "--target", "cuda", "--dim", "batch=1:8", "--dim", "seq=1:128",
                     "-o", tmp_path / "art")
    assert result.code == 0, result.stderr
    (embedded,) = binaries.read_embedded(tmp_path / "art" / "cuda" / "model.so")
    assert binaries.fatbin_contents(embedded.data) == ["ptx compute_90", "sass sm_90"]
    import json

    report = json.loads((tmp_path / "art" / "report.json").read_text())
    launches = [x for e in report["kernel_dims"].values() for x in e.get("launch", {}).values()]
    assert any("seq" in x for x in launches) and any("batch" in x for x in launches)


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize("name", ["resnet18", "bert_tiny"])
def test_full_size_models_compile_for_cuda(tmp_path, name):
    import models as example_models

    example_models.write(name, tmp_path)
    result = run_cli("compile", tmp_path / f"{name}.onnx", "--target", "cuda", "-o", tmp_path / "art")
    assert result.code == 0, result.stderr
    (embedded,) = binaries.read_embedded(tmp_path / "art" / "cuda" / "model.so")
    assert binaries.fatbin_contents(embedded.data) == ["ptx compute_90", "sass sm_90"]


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_cuda_artifact_matches_onnxruntime(examples, tmp_path, name):
    out = tmp_path / "art"
    assert run_cli("compile", examples / f"{name}.onnx", "--target", "cuda", "-o", out).code == 0
    result = run_cli("run", out, "--inputs", examples / f"{name}_inputs.npz", "--reference",
                     examples / f"{name}.onnx", "--tolerance", "1e-4")
    assert result.code == 0, result.stdout + result.stderr


def test_plan_shape_reaches_the_cuda_cost_model():
    """With symbolic dims, placement over cuda,cpu costs each op at --plan-shape."""
    from hetc.api import plan

    def times(**kwargs):
        p = plan(_attention_block(), "cuda,cpu", dims={"batch": (1, 64), "seq": (1, 512)}, **kwargs)
        j = p.problem.names.index(next(n.name for n in p.graph.nodes if n.op == "relax.matmul"))
        return [float(p.problem.times[j, k]) for k in range(len(p.devices))]

    small, large = times(), times(plan_shape={"batch": 64, "seq": 512})
    assert all(b > a for a, b in zip(small, large)), (small, large)
