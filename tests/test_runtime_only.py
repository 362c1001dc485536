"""Runtime-only deployment: a bundle from scripts/runtime_bundle.py runs a hetc artifact in a
process that can import only the bundle's site/ and numpy (no hetc, no onnx, no TVM compiler)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hetc

ROOT = Path(__file__).resolve().parents[1]
BUNDLE_SCRIPT = ROOT / "scripts" / "runtime_bundle.py"
GPU_HERE = Path("/dev/nvidia0").exists()

# Run inside the isolated interpreter: prove the full install is out of reach, run the
# runner in-process, then report which TVM libraries the process mapped.
PROBE = """
import json, runpy, sys
blocked = []
for name in ("hetc", "onnx", "onnxruntime"):
    try:
        __import__(name)
    except ImportError:
        blocked.append(name)
sys.argv = ["standalone.py", *sys.argv[1:]]
code = None
try:
    runpy.run_path(STANDALONE, run_name="__main__")
except SystemExit as exit:
    code = exit.code
import tvm
maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libtvm" in line})
print(json.dumps({"blocked": blocked, "code": code, "maps": maps, "runtime_only": tvm.base._RUNTIME_ONLY,
                  "tvm_file": tvm.__file__}))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(artifact dir, inputs, reference outputs, bundle dir) for the example MLP."""
    import models as example_models  # examples/, put on sys.path by conftest

    tmp = tmp_path_factory.mktemp("runtime_only")
    proto = example_models.mlp()
    inputs = example_models.sample_inputs(proto)
    compiled = hetc.compile(proto, target="cpu")
    artifact = compiled.save(tmp / "mlp")
    reference = compiled.run(inputs)
    np.savez(tmp / "inputs.npz", **inputs)
    proc = _run(sys.executable, BUNDLE_SCRIPT, tmp / "bundle", "--artifact", artifact)
    assert proc.returncode == 0, proc.stderr
    assert "MiB" in proc.stdout
    return artifact, tmp / "inputs.npz", reference, tmp / "bundle"


@pytest.fixture(scope="module")
def isolated(built, tmp_path_factory) -> dict:
    """Environment for an interpreter that sees only the bundle's site/ and numpy.

    ``PYTHON`` is this venv's interpreter with ``-S`` (no site-packages, no .pth files);
    numpy is reached through a folder of symlinks to this venv's numpy."""
    tmp = tmp_path_factory.mktemp("isolated")
    numpy_dir = tmp / "numpy_only"
    numpy_dir.mkdir()
    for src in Path(np.__file__).parent.parent.glob("numpy*"):
        if not src.name.endswith(".dist-info"):
            (numpy_dir / src.name).symlink_to(src)
    python = tmp / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TVM_"))}
    env.update(PYTHON=str(python), PYTHONPATH=str(numpy_dir), TVM_USE_RUNTIME_LIB="1")
    return env


def _run(*cmd, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=False, timeout=120,
                          **kwargs)


def _run_sh(bundle: Path, env: dict, *args, cwd: Path) -> subprocess.CompletedProcess:
    return _run(bundle / "run.sh", *args, env=env, cwd=cwd)


def _assert_one_line_error(proc: subprocess.CompletedProcess, text: str) -> None:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr and text in lines[0], proc.stderr


def test_bundle_has_no_compiler(built):
    bundle = built[3]
    files = [p for p in bundle.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert "libtvm_compiler.so" not in names
    assert {"libtvm_runtime.so", "libtvm_ffi.so", "standalone.py", "run.sh"} <= names
    assert not (bundle / "site" / "tvm" / "relax").exists()
    assert sum(p.stat().st_size for p in files) < 64 * 2**20
    info = json.loads((bundle / "BUNDLE.json").read_text())
    assert info["artifacts"] == ["mlp"] and info["python_version"] == f"{sys.version_info[0]}.{sys.version_info[1]}"


def test_isolated_run_matches_hetc(built, isolated, tmp_path):
    _, inputs, reference, bundle = built
    probe = tmp_path / "probe.py"
    probe.write_text(f"STANDALONE = {str(bundle / 'standalone.py')!r}\n" + PROBE)
    env = dict(isolated, PYTHONPATH=f"{bundle / 'site'}:{isolated['PYTHONPATH']}")
    out = tmp_path / "out.npz"
    proc = _run(isolated["PYTHON"], probe, bundle / "artifacts" / "mlp", "--inputs", inputs, "--outputs", out,
                env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["blocked"] == ["hetc", "onnx", "onnxruntime"]
    assert report["code"] in (0, None) and report["runtime_only"]
    assert report["tvm_file"].startswith(str(bundle / "site"))
    assert not any("libtvm_compiler" in m for m in report["maps"])
    assert any(m.startswith(str(bundle / "site")) and m.endswith("libtvm_runtime.so") for m in report["maps"])
    with np.load(out) as got:
        assert sorted(got.files) == sorted(reference)
        for name, want in reference.items():
            np.testing.assert_allclose(got[name], want, rtol=1e-5)


def test_run_sh_timing(built, isolated, tmp_path):
    _, inputs, reference, bundle = built
    out, timings = tmp_path / "out.npz", tmp_path / "t.json"
    proc = _run_sh(bundle, isolated, bundle / "artifacts" / "mlp", "--inputs", inputs, "--outputs", out,
                   "--repeat", 5, "--warmup", 1, "--json", timings, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "median" in proc.stdout and proc.stderr == ""
    data = json.loads(timings.read_text())
    assert data["runs"] == 5 and data["warmup"] == 1 and data["median_ms"] > 0 and data["devices"] == ["cpu:0"]
    with np.load(out) as got:
        for name, want in reference.items():
            np.testing.assert_allclose(got[name], want, rtol=1e-5)


def test_bad_inputs(built, isolated, tmp_path):
    _, inputs, _, bundle = built
    art = bundle / "artifacts" / "mlp"
    with np.load(inputs) as npz:
        (name, good), = ((k, npz[k]) for k in npz.files)
    np.savez(tmp_path / "dtype.npz", **{name: good.astype(np.float64)})
    np.savez(tmp_path / "shape.npz", **{name: good[:1]})
    np.savez(tmp_path / "missing.npz", other=good)
    cases = {"dtype.npz": "has dtype float64, expected float32", "shape.npz": "has shape",
             "missing.npz": f"missing input(s) {name}", "absent.npz": "no such inputs file"}
    for file, text in cases.items():
        _assert_one_line_error(_run_sh(bundle, isolated, art, "--inputs", tmp_path / file, cwd=tmp_path), text)
    _assert_one_line_error(_run_sh(bundle, isolated, tmp_path / "nope", "--inputs", inputs, cwd=tmp_path),
                           "no such artifact directory")


def test_corrupt_library_is_a_hash_mismatch(built, isolated, tmp_path):
    _, inputs, _, bundle = built
    art = shutil.copytree(bundle / "artifacts" / "mlp", tmp_path / "mlp")
    lib = art / "cpu" / "model.so"
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    lib.write_bytes(bytes(data))
    _assert_one_line_error(_run_sh(bundle, isolated, art, "--inputs", inputs, cwd=tmp_path),
                           "file cpu/model.so is damaged (sha256 mismatch")


def _with_part(src: Path, dst: Path, **fields) -> Path:
    art = shutil.copytree(src, dst)
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["parts"][0].update(fields)
    (art / "manifest.json").write_text(json.dumps(manifest))
    return art


def test_part_devices(built, isolated, tmp_path):
    _, inputs, reference, bundle = built
    art = _with_part(bundle / "artifacts" / "mlp", tmp_path / "two_cpus", devices=["cpu:0", "cpu:1"])
    out = tmp_path / "out.npz"
    proc = _run_sh(bundle, isolated, art, "--inputs", inputs, "--outputs", out, "--repeat", 1, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "on cpu:0, cpu:1" in proc.stdout
    with np.load(out) as got:
        for name, want in reference.items():
            np.testing.assert_allclose(got[name], want, rtol=1e-5)


@pytest.mark.skipif(GPU_HERE, reason="checks the message given where there is no GPU")
def test_cuda_part_without_gpu(built, isolated, tmp_path):
    _, inputs, _, bundle = built
    art = _with_part(bundle / "artifacts" / "mlp", tmp_path / "gpu", device="cuda:0")
    _assert_one_line_error(_run_sh(bundle, isolated, art, "--inputs", inputs, cwd=tmp_path),
                           "this artifact needs an NVIDIA GPU (cuda:0) and none is available here")


def test_size_limit(built, tmp_path):
    artifact = built[0]
    out = tmp_path / "small"
    proc = _run(sys.executable, BUNDLE_SCRIPT, out, "--artifact", artifact, "--max-mib", 1)
    assert proc.returncode == 1 and "over the 1 MiB limit" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert not out.exists() and not list(tmp_path.glob(".small*"))


def test_wheel_tags():
    spec = importlib.util.spec_from_file_location("runtime_bundle", BUNDLE_SCRIPT)
    bundle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bundle)
    manylinux = "manylinux_2_28_x86_64"
    assert bundle.fits([("py3", "none", manylinux)], "3.12")  # apache-tvm: any CPython 3
    assert not bundle.fits([("cp311", "cp311", manylinux)], "3.12")  # apache-tvm-ffi: per version
    assert bundle.fits([("cp311", "cp311", manylinux)], "3.11")
    assert bundle.fits([("cp38", "abi3", manylinux)], "3.12") and not bundle.fits([("cp313", "abi3", manylinux)],
                                                                                 "3.12")


def test_fpga_c_simulation_runs_with_the_runtime_only(built, isolated, tmp_path):
    """An artifact with an FPGA region: its C-simulation is inside model.so, so TVM's runtime
    alone runs it, and the runner says the region ran as C-simulation."""
    pytest.importorskip("hls4ml", reason="the FPGA target needs hls4ml's ap_types headers")
    import models as example_models

    _, _, _, bundle = built
    proto = example_models.mlp()
    inputs = example_models.sample_inputs(proto)
    compiled = hetc.compile(proto, target="fpga,cpu", placement="accelerator-first")
    artifact = compiled.save(tmp_path / "mlp_fpga")
    np.savez(tmp_path / "inputs.npz", **inputs)
    out = tmp_path / "out.npz"
    proc = _run_sh(bundle, isolated, artifact, "--inputs", tmp_path / "inputs.npz", "--outputs", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "fpga region fpga_region0: ran as c-simulation (emulated, not on the device)" in proc.stdout
    with np.load(out) as got:
        for name, want in compiled.run(inputs).items():
            np.testing.assert_allclose(got[name], want, rtol=1e-6)
