"""No silent death (issue 31, item 5): the MobileBERT/Funnel recursion in TVM's
CanonicalizeBindings, a one-line report for a fatal fault inside ``hetc compile``, and graphs
deep enough to overflow a default stack."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import crash_models
import numpy as np
import onnx
import pytest
from conftest import assert_close, ort_run, run_cli

from hetc import crash


def _compile_and_load(model: onnx.ModelProto | Path, tmp_path: Path, *args: str):
    import hetc

    path = model if isinstance(model, Path) else tmp_path / "model.onnx"
    if not isinstance(model, Path):
        onnx.save(model, path)
    out = tmp_path / "out"
    result = run_cli("compile", path, "-o", out, *args)
    assert result.code == 0, result.stderr
    return hetc.load(out)


def _first(outputs) -> np.ndarray:
    return outputs[0] if isinstance(outputs, (list, tuple)) else next(iter(outputs.values()))


# --- the recursion: a match_cast of f(seq) to seq --------------------------------------------

def test_trigram_shapes_compile_symbolic_and_match(tmp_path):
    """x[:, 1:] padded back to seq, concatenated and added to x: dims TVM sees as
    ``min(INT64_MAX, seq) - min(1, seq) + 1`` against ``seq``. This used to kill the process
    (SIGSEGV in canonicalize); now it compiles with seq symbolic and matches onnxruntime."""
    model = crash_models.trigram()
    compiled = _compile_and_load(model, tmp_path)
    assert compiled.manifest.dims.keys() == {"batch", "seq"}
    for batch, seq in [(1, 5), (3, 17)]:
        x = np.random.default_rng(seq).standard_normal((batch, seq, 4)).astype(np.float32)
        assert_close(_first(compiled.run({"x": x})), ort_run(model, {"x": x})[0])


def test_cast_of_a_dim_to_itself_is_checked_at_run_time():
    """A dim not provably equal to the one it is cast to, whose pattern variable its own value
    contains (``n`` from ``n // 2 * 2``), is checked by the run, not by a ``match_cast`` (which
    CanonicalizeBindings would substitute into itself)."""
    import tvm
    from tvm import relax, tirx

    from hetc.frontends.onnx import dim_cast

    n = tirx.Var("n", "int64")
    a = relax.Var("a", relax.TensorType([n], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [a]):
        with bb.dataflow():
            even = bb.match_cast(a, relax.TensorType([tirx.floordiv(n, 2) * 2], "float32"))
            back = dim_cast.cast_dims(bb, even, [n])
            out = bb.emit_output(bb.emit(relax.op.add(back, a)))
        bb.emit_func_output(out)
    mod = relax.transform.CanonicalizeBindings()(bb.get())
    vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), 2 * x)
    assert "run-time check" in mod.script() and "match_cast(lv, R.Tensor((n,)" not in mod.script()


def test_equal_dims_are_reshaped_not_cast():
    """Dims equal over the declared ranges need no check: a reshape (a view), no match_cast."""
    from tvm import relax, tirx

    from hetc.frontends.onnx import dim_cast, symbolic

    seq = tirx.Var("seq", "int64")
    symbolic.declare(seq, 1, 4096)
    odd = tirx.min(tirx.IntImm("int64", 2**63 - 1), seq) - tirx.min(tirx.IntImm("int64", 1), seq) + 1
    assert dim_cast.canonical(odd).same_as(seq) and dim_cast.equal_in_range(odd, seq)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([2, odd], "float32"))
    with bb.function("f", [x]):
        y = dim_cast.cast_dims(bb, x, [tirx.IntImm("int64", 2), seq])
        bb.emit_func_output(y)
    text = bb.get().script()
    assert "R.reshape" in text and "match_cast" not in text


# --- a fatal fault is one line ---------------------------------------------------------------

def test_stage_record():
    crash.set_stage("fuse_ops")
    assert crash.current_stage() == "fuse_ops"
    crash.set_stage("convert (Add node '" + "n" * 5000 + "')")  # longer than the record: cut
    assert crash.current_stage().startswith("convert (Add node 'nnn")
    crash.note_output("/some/out")
    assert crash.current_stage().startswith("convert")
    line = "hetc: error: internal crash (SIGSEGV) in stage fuse_ops; please report"
    assert crash.crash_line(11, "fuse_ops") == line


_INJECT = textwrap.dedent("""
    import ctypes, os, sys

    import tvm
    from tvm import relax

    how, where = sys.argv[1], sys.argv[2]

    def deeper(n):  # each level through C (sorted calls the key), so on the native stack
        return sorted([0], key=lambda _: deeper(n + 1))

    def die():
        if how == "segv":
            ctypes.string_at(0)  # a real SIGSEGV in native code
        if how == "overflow":
            deeper(0)  # the main thread's 8 MiB stack overflows
        os.abort()

    if how == "overflow":
        sys.setrecursionlimit(10**8)  # Python lets it recurse until the native stack overflows

    if where == "canonicalize":
        @tvm.transform.module_pass(opt_level=0, name="Crash")
        def crashing(mod, _ctx):
            die()
        relax.transform.CanonicalizeBindings = lambda: crashing
    else:  # while the artifact is written into its temporary directory
        from hetc.targets import get_target
        backend = get_target("cpu").backend
        export = backend.export
        def crashing_export(executable, path, options=None):
            export(executable, path, options)
            die()
        object.__setattr__(backend, "export", crashing_export)

    from hetc.cli import main
    sys.argv[1:] = sys.argv[3:]
    sys.exit(main())  # as the console script calls it
""")


@pytest.mark.parametrize("how,where,stage,signal", [
    ("segv", "canonicalize", "canonicalize", "SIGSEGV"),
    ("abort", "canonicalize", "canonicalize", "SIGABRT"),
    ("overflow", "canonicalize", "canonicalize", "SIGSEGV"),
    ("segv", "export", "write artifact", "SIGSEGV"),
])
def test_fatal_fault_in_compile_is_one_line(tmp_path, examples, how, where, stage, signal):
    import subprocess

    script = tmp_path / "inject.py"
    script.write_text(_INJECT)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(script), how, where, "compile", str(examples / "mlp.onnx"),
                           "-o", str(out)], capture_output=True, text=True, timeout=600, check=False)
    assert proc.stderr == f"hetc: error: internal crash ({signal}) in stage {stage}; please report\n"
    assert proc.returncode != 0 and "compiled" not in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inject.py"]  # no artifact, no temp dir


def test_errors_still_reach_the_user_through_the_guard(tmp_path):
    result = run_cli("compile", tmp_path / "missing.onnx", "-o", tmp_path / "out")
    assert result.code == 1 and result.stderr.startswith("hetc: error: ")
    assert len(result.stderr.splitlines()) == 1


# --- deep graphs -----------------------------------------------------------------------------

def _chain_matches(model: onnx.ModelProto, compiled) -> None:
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32)
        assert_close(_first(compiled.run({"x": x})), crash_models.chain_reference(model, x))


def test_chain_of_2000_ops():
    """2,000 elementwise ops in a line, batch symbolic (the API, so on its deep-stack thread)."""
    import hetc

    model = crash_models.chain(2000)
    _chain_matches(model, hetc.compile(model, target="cpu"))


_DEEP_NATIVE_RECURSION = """
import json, sys
sys.setrecursionlimit(10**7)
nested = []
for _ in range(200_000):
    nested = [nested]
from hetc.stack import deep
print(len(deep(lambda: json.dumps(nested))))
"""


def test_compiles_run_on_a_deep_native_stack():
    """``hetc.stack.deep``: 200,000 levels of native recursion (json's C encoder; over 8 MiB, a
    SIGSEGV on a default main thread: Keypoint R-CNN's legalization) in a subprocess, errors and
    context variables passed through, nesting runs inline."""
    import contextvars
    import subprocess
    import threading

    from hetc.stack import deep

    done = subprocess.run([sys.executable, "-c", _DEEP_NATIVE_RECURSION], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "400002", done.stderr[-2000:]
    var = contextvars.ContextVar("v", default=0)
    var.set(7)
    assert deep(lambda: (var.get(), threading.current_thread().name)) == (7, "hetc-compile")
    assert deep(lambda: deep(lambda: threading.current_thread().name)) == "hetc-compile"
    with pytest.raises(KeyError, match="boom"):
        deep(lambda: {}["boom"])


@pytest.mark.slow
def test_chain_of_5000_ops_through_the_cli(tmp_path):
    model = crash_models.chain(5000)
    _chain_matches(model, _compile_and_load(model, tmp_path))


# --- the models that found it ----------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("name,sizes", [
    ("mobilebert", [(1, 5), (3, 24)]),
    # the TorchScript export bakes Funnel's relative positions for the traced length (16):
    # onnxruntime itself runs no other seq, so only the batch varies
    ("funnel", [(1, 16), (4, 16)]),
])
def test_transformers_model_compiles_symbolic_and_matches(tmp_path, name, sizes):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    path = getattr(crash_models, name)(tmp_path / f"{name}.onnx")
    compiled = _compile_and_load(path, tmp_path)
    assert set(compiled.manifest.dims) == {"batch", "seq"}
    for batch, seq in sizes:
        inputs = crash_models.text_inputs(batch, seq)
        assert_close(_first(compiled.run(inputs)), ort_run(path, inputs)[0])
