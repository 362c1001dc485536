"""hetc's CPU thread pool (hetc/backends/cpu/pool.cc) and the fixed cost of a call
(hetc/runtime/vm.py): correctness only; their speed is measured by benchmarks/cpu_latency.py."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tvm
from conftest import assert_close, ort_run
from onnx import helper
from onnx_util import make, tensor

import hetc
from hetc.backends.cpu import codegen
from hetc.runtime import vm
from hetc.runtime.standalone import install_pool


def _stats(library) -> tuple[int, int]:
    lib = ctypes.CDLL(str(library))
    launches, worker_chunks = ctypes.c_uint64(), ctypes.c_uint64()
    lib.hetc_pool_stats(ctypes.byref(launches), ctypes.byref(worker_chunks))
    return launches.value, worker_chunks.value


@pytest.fixture(scope="module")
def cnn(examples, tmp_path_factory):
    """The example CNN (parallel loops in every convolution), saved with two threads."""
    out = tmp_path_factory.mktemp("pool") / "cnn"
    hetc.compile(examples / "cnn.onnx", target="cpu", num_threads=2).save(out)
    return out, dict(np.load(examples / "cnn_inputs.npz"))


def test_parallel_loops_run_on_hetc_pool_with_its_workers(cnn, examples):
    root, inputs = cnn
    model = hetc.load(root)
    expected = ort_run(examples / "cnn.onnx", inputs)
    before, _ = _stats(root / "cpu" / "model.so")
    for _ in range(200):
        outputs = model.run(inputs)
    launches, worker_chunks = _stats(root / "cpu" / "model.so")
    assert launches - before >= 200  # every call's loops went through the pool, not TVM's
    # and its worker took part (on a machine busy with other processes the calling thread can
    # finish every chunk before the worker is scheduled: give it up to 20 s of calls)
    deadline = time.monotonic() + 20
    while worker_chunks == 0 and time.monotonic() < deadline:
        model.run(inputs)
        worker_chunks = _stats(root / "cpu" / "model.so")[1]
    assert worker_chunks > 0
    for got, want in zip(outputs.values(), expected):
        assert_close(got, want)


def test_a_forked_child_runs_on_a_pool_of_its_own(cnn):
    root, inputs = cnn
    model = hetc.load(root)
    want = model.run(inputs)  # the parent's workers exist now; the child has none of them
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        got = pool.apply_async(_run_in_child, (str(root), inputs)).get(timeout=120)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def _run_in_child(root: str, inputs):
    return hetc.load(root).run(inputs)


def test_tvm_pool_is_kept_for_libraries_without_hetc_pool(examples, tmp_path, monkeypatch):
    compiled = hetc.compile(examples / "cnn.onnx", target="cpu")
    executable = compiled._runners[0].module  # before the first call: the executable itself
    inputs = dict(np.load(examples / "cnn_inputs.npz"))
    (want,) = compiled.run(inputs).values()
    plain = tmp_path / "plain.so"  # as an older hetc wrote them: TVM's pool stays
    executable.export_library(str(plain))
    got = vm.load(plain, ["cpu:0"])(list(inputs.values()))
    assert not install_pool(plain, 2)
    np.testing.assert_array_equal(got[0], want)
    pooled = tmp_path / "pooled.so"
    codegen.export(executable, pooled)
    tvm.runtime.load_module(str(pooled))
    monkeypatch.setenv("HETC_POOL", "tvm")  # the documented way back to TVM's pool
    assert not install_pool(pooled, 2)
    monkeypatch.delenv("HETC_POOL")
    assert install_pool(pooled, 2)


def test_compiled_runner_uses_a_library_not_the_jit(examples):
    compiled = hetc.compile(examples / "mlp.onnx", target="cpu")
    runner = compiled._runners[0]
    assert [m.kind for m in runner.module.mod.imports] == ["llvm"]  # TVM would JIT this
    compiled.run(dict(np.load(examples / "mlp_inputs.npz")))
    assert [m.kind for m in runner.module.imports] == ["library"]  # written with the pool linked in, loaded


# -- the fixed cost of a call: inputs and outputs are not copied where they need not be ------

def _identity_twice(shape):
    nodes = [helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Relu", ["x"], ["b"]),
             helper.make_node("Identity", ["b"], ["c"])]
    return make(nodes, [tensor("x", shape)], [tensor(n, shape) for n in "abc"])


@pytest.mark.parametrize("rows", [4, 4096])  # 96 bytes: copied in; 96 KB: passed in place when aligned
@pytest.mark.parametrize("layout", ["aligned", "unaligned", "strided"])
def test_outputs_own_their_memory_whatever_the_inputs(layout, rows):
    model = _identity_twice([rows, 6])
    compiled = hetc.compile(model, target="cpu")
    base = np.random.default_rng(0).standard_normal(2 * rows * 8).astype(np.float32)
    n = rows * 6
    if layout == "aligned":
        raw = np.empty(n * 4 + 64, np.uint8)
        start = -raw.ctypes.data % 64
        x = raw[start:start + n * 4].view(np.float32).reshape(rows, 6)
        x[...] = base[:n].reshape(rows, 6)
        assert x.ctypes.data % 64 == 0
    elif layout == "unaligned":
        x = base[1:n + 1].reshape(rows, 6)
        assert x.ctypes.data % 64 != 0
    else:
        x = base[:rows * 8].reshape(8, rows).T[:, :6]  # not contiguous
    keep = x.copy()
    first = compiled.run({"x": x})
    want = ort_run(model, {"x": keep})
    for got, ref in zip(first.values(), want):
        np.testing.assert_array_equal(got, ref)
        assert got.flags.writeable and not np.may_share_memory(got, x)
    assert not np.may_share_memory(first["b"], first["c"])  # one tensor returned twice: two arrays
    first["a"][...] = 0  # writing an output changes neither the input ...
    np.testing.assert_array_equal(x, keep)
    second = compiled.run({"x": -x})  # ... nor is the output changed by the next call
    np.testing.assert_array_equal(first["b"], np.maximum(keep, 0))
    np.testing.assert_array_equal(first["a"], 0)
    np.testing.assert_array_equal(second["a"], -keep)


def test_inputs_of_every_dtype_and_shape_still_checked():
    model = make([helper.make_node("Add", ["x", "y"], ["z"])], [tensor("x", [2, 3]), tensor("y", [2, 3])],
                 [tensor("z", [2, 3])])
    compiled = hetc.compile(model, target="cpu")
    x = np.ones((2, 3), np.float32)
    with pytest.raises(hetc.errors.InputError, match="dtype float64"):
        compiled.run({"x": x, "y": x.astype(np.float64)})
    with pytest.raises(hetc.errors.InputError, match=r"dim 1 is 4, not 3"):
        compiled.run({"x": x, "y": np.ones((2, 4), np.float32)})
    with pytest.raises(hetc.errors.InputError, match="missing input"):
        compiled.run({"x": x, "w": x})
    np.testing.assert_array_equal(compiled.run({"x": x, "y": x.tolist()} | {"y": x})["z"], 2 * x)
    with pytest.raises(hetc.errors.InputError, match="dtype float64"):  # a list is not float32
        compiled.run({"x": x, "y": x.tolist()})


def test_pool_size_follows_the_environment(examples, tmp_path):
    """TVM_NUM_THREADS=1 (or num_threads=1): loops run inline in the caller, no worker."""
    out = tmp_path / "one"
    hetc.compile(examples / "cnn.onnx", target="cpu", num_threads=1).save(out)
    code = ("import sys, numpy as np, hetc, ctypes\n"
            f"m = hetc.load({str(out)!r}); x = dict(np.load({str(examples / 'cnn_inputs.npz')!r}))\n"
            "for _ in range(50): m.run(x)\n"
            f"lib = ctypes.CDLL({str(out / 'cpu' / 'model.so')!r})\n"
            "a, b = ctypes.c_uint64(), ctypes.c_uint64()\n"
            "lib.hetc_pool_stats(ctypes.byref(a), ctypes.byref(b))\n"
            "print(a.value, b.value)\n"
            # and the loops are the pool's (inline), not TVM's pool's, which would also launch nothing here
            "import tvm\n"
            "runtime = tvm.base._LOADED_LIBS['tvm_runtime']\n"
            "tvm_launch = ctypes.cast(runtime.TVMBackendParallelLaunch, ctypes.c_void_p)\n"
            "print(ctypes.c_void_p.in_dll(lib, '__TVMBackendParallelLaunch').value != tvm_launch.value)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TVM_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    launches, chunks, ours = done.stdout.split()
    assert [launches, chunks] == ["0", "0"]  # inline: nothing launched on the pool
    assert ours == "True"


# -- the CPU the code is for (--cpu) and the check when it is loaded ------------------------

def _disassembly(library) -> str:
    import shutil

    if shutil.which("objdump") is None:
        pytest.skip("no objdump to read the generated instructions")
    return subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(library)], capture_output=True,
                          text=True, check=True).stdout


def test_code_for_an_avx2_cpu_has_no_avx512_and_still_matches(examples, tmp_path):
    inputs = dict(np.load(examples / "cnn_inputs.npz"))
    want = ort_run(examples / "cnn.onnx", inputs)
    from hetc.runtime.artifact import read_manifest

    found = {}
    for cpu in ("haswell", "skylake-avx512"):
        out = hetc.compile(examples / "cnn.onnx", target="cpu", cpu=cpu).save(tmp_path / cpu)
        code = _disassembly(out / "cpu" / "model.so")
        found[cpu] = code.count("%zmm"), code.count("%ymm")
        part = read_manifest(out).parts[0]  # not hetc.load: an AVX2 host refuses the AVX-512 build
        assert part.cpu["mcpu"] == cpu and "avx2" in part.cpu["features"]
        assert ("avx512f" in part.cpu["features"]) == (cpu != "haswell")
    assert found["haswell"][0] == 0 and found["haswell"][1] > 100  # 8-lane AVX2 code, no zmm register
    assert found["skylake-avx512"][0] > 100
    from hetc.runtime.standalone import host_cpu_flags

    if {"avx2", "fma"} <= (host_cpu_flags() or set()):  # this CPU runs the AVX2 build
        got = hetc.load(tmp_path / "haswell").run(inputs)
        for a, b in zip(got.values(), want):
            assert_close(a, b)


def test_an_artifact_for_missing_instructions_is_refused_at_load(examples, tmp_path):
    import json

    from hetc.runtime.standalone import cpu_problem

    out = hetc.compile(examples / "mlp.onnx", target="cpu").save(tmp_path / "a")
    manifest = json.loads((out / "manifest.json").read_text())
    assert cpu_problem(manifest["parts"][0], flags=set(manifest["parts"][0]["cpu"]["features"])) is None
    problem = cpu_problem(manifest["parts"][0], flags={"sse4_2", "avx", "avx2", "fma"})
    if "avx512f" in manifest["parts"][0]["cpu"]["features"]:
        assert "avx512f" in problem and "--cpu haswell" in problem
    manifest["parts"][0]["cpu"]["features"].append("hetc_test_missing_flag")  # no CPU has it
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(hetc.errors.ArtifactError, match="uses hetc_test_missing_flag, which this CPU lacks"):
        hetc.load(out)
    from conftest import run_cli

    np.savez(tmp_path / "in.npz", **dict(np.load(examples / "mlp_inputs.npz")))
    result = run_cli("run", out, "--inputs", tmp_path / "in.npz")
    assert result.code != 0 and "which this CPU lacks" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_unknown_cpu_is_a_usage_error(examples, tmp_path):
    from conftest import run_cli

    with pytest.raises(hetc.errors.UsageError, match="unknown CPU 'pentium9000'"):
        hetc.compile(examples / "mlp.onnx", target="cpu", cpu="pentium9000")
    result = run_cli("compile", examples / "mlp.onnx", "-o", tmp_path / "out", "--cpu", "pentium9000")
    assert result.code != 0 and "unknown CPU 'pentium9000'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_pool_object_is_built_where_it_can_be(tmp_path, monkeypatch):
    from hetc.backends.cpu import pool

    blocker = tmp_path / "file"
    blocker.write_text("")  # the cache "directory" is a file: built in a temporary one instead
    monkeypatch.setenv("HETC_CACHE_DIR", str(blocker / "cache"))
    pool.pool_object.cache_clear()
    try:
        built = pool.pool_object()
        assert os.path.getsize(built) > 0 and not built.startswith(str(blocker))
        monkeypatch.setenv("CXX", "no-such-compiler-hetc")
        monkeypatch.setenv("HETC_CACHE_DIR", str(tmp_path / "cache"))
        pool.pool_object.cache_clear()
        with pytest.raises(hetc.errors.CompileError, match="no C.. compiler 'no-such-compiler-hetc'"):
            pool.pool_object()
        assert not list((tmp_path / "cache").glob("*"))  # nothing half-written
    finally:
        pool.pool_object.cache_clear()
    # the temporary directory goes when the process does
    env = {**{k: v for k, v in os.environ.items() if k != "CXX"}, "HETC_CACHE_DIR": str(blocker / "cache")}
    done = subprocess.run([sys.executable, "-c", "from hetc.backends.cpu import pool; print(pool.pool_object())"],
                          capture_output=True, text=True, env=env, check=True)
    own = Path(done.stdout.strip()).parent
    assert own.name.startswith("hetc-pool-") and not own.exists()
