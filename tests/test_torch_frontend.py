"""The PyTorch frontend (hetc/frontends/torch): torch.export -> Relax -> hetc's pipeline, checked
against eager torch (max abs error <= 1e-4 x max |eager|); dims from torch.export.Dim with their
ranges; one-line errors; torch stays optional."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, assert_close, run_cli

torch = pytest.importorskip("torch", reason="the torch frontend needs torch (pip install 'hetc[torch]')")

import hetc
from hetc.errors import ModelLoadError, ShapeError, UnsupportedOpError, UsageError
from hetc.frontends.torch import loader, registry

pytestmark = pytest.mark.torch


class Block(torch.nn.Module):
    """Linear -> GELU -> LayerNorm, plus amax over the features (a converter of hetc's own)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x):
        y = self.norm(torch.nn.functional.gelu(self.fc(x)))
        return y, torch.amax(y, dim=-1, keepdim=True)


def _eager(model, *args) -> list[np.ndarray]:
    with torch.no_grad():
        out = model(*args)
    return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]


def test_module_compiles_with_a_named_dim_and_matches_eager(tmp_path):
    model = Block().eval()
    compiled = hetc.compile(model, (torch.randn(2, 8),), target="cpu", dynamic_shapes=({0: "batch"},),
                            dims={"batch": (1, 16)})
    assert compiled.manifest.dims == {"batch": [1, 16]}
    assert [s.shape for s in compiled.manifest.inputs] == [("batch", 8)]
    assert compiled.report["frontend"] == "torch" and "aten.amax.default" in compiled.report["torch_ops"]
    loaded = hetc.load(compiled.save(tmp_path / "artifact"))
    for batch in (3, 16):  # one artifact, two sizes
        x = torch.randn(batch, 8)
        for runner in (compiled, loaded):
            got = runner.run({"x": x.numpy()})
            for name, ref in zip(runner.output_names, _eager(model, x)):
                assert_close(got[name], ref)
    with pytest.raises(hetc.HetcError, match="batch"):
        loaded.run({"x": np.zeros((17, 8), np.float32)})  # outside the declared range


class _NegativeIndex(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cols", torch.tensor([-1, 0, -3]))
        self.register_buffer("rows", torch.tensor([-1, 0]))

    def forward(self, x):
        return x[:, self.cols] * 2, x[self.rows]  # static axis, then the symbolic batch axis


def test_negative_tensor_indices_count_from_the_end():
    """hetc's index.Tensor converter: TVM's read outside the tensor for negative indices (Falcon)."""
    model = _NegativeIndex().eval()
    compiled = hetc.compile(model, (torch.randn(4, 5),), dynamic_shapes=({0: "batch"},))
    x = torch.randn(6, 5)
    got = compiled.run({"x": x.numpy()})
    for name, ref in zip(compiled.output_names, _eager(model, x)):
        np.testing.assert_array_equal(got[name], ref)


def test_export_dims_keep_their_names_and_ranges():
    seq = torch.export.Dim("seq", min=2, max=32)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4)).eval()
    program = torch.export.export(model, (torch.randn(3, 5, 4),), dynamic_shapes=({1: seq},))
    loaded = loader.load_program(program)
    assert loaded.dims == {"seq": (2, 32)}
    assert loaded.inputs[0].shape == (3, "seq", 4) and loaded.outputs[0].shape == (3, "seq", 4)
    unnamed = loader.load_program(torch.export.export(model, (torch.randn(3, 5, 4),),
                                                      dynamic_shapes=({0: torch.export.Dim.AUTO},)))
    assert list(unnamed.dims) == [f"{unnamed.inputs[0].name}_0"]  # no name of its own: <input>_<axis>
    with pytest.raises(UsageError, match="outside the range"):
        loader.load_program(program, dims={"seq": (1, 64)})


def test_pt2_file_compiles_from_the_cli(tmp_path):
    model = Block().eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    path = tmp_path / "block.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(2, 8),), dynamic_shapes=({0: batch},)), path)
    result = run_cli("compile", path, "--target", "cpu", "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    assert "symbolic dims: x_0 1..8" in result.stdout  # a .pt2 keeps a Dim's range, not its name
    x = torch.randn(5, 8)
    got = hetc.load(tmp_path / "out").run({"x": x.numpy()})
    for name, ref in zip(["output_0", "output_1"], _eager(model, x)):
        assert_close(got[name], ref)


class _Mutates(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count.add_(1)
        return x + self.count


@pytest.mark.parametrize("case, error, match", [
    ("training", UsageError, "training mode"),
    ("no inputs", UsageError, "example_inputs"),
    ("specialized", ShapeError, "specialized it to be a constant"),
    ("mutation", ModelLoadError, "in place"),
    ("unsupported", UnsupportedOpError, "aten.erfinv.default"),
    ("bad pt2", ModelLoadError, "not a valid .pt2"),
])
def test_bad_input_is_one_line(case, error, match, tmp_path):
    linear = torch.nn.Linear(4, 4)
    calls = {
        "training": lambda: loader.load_program(linear.train(), (torch.randn(2, 4),)),
        "no inputs": lambda: hetc.compile(linear.eval(), target="cpu"),
        # batch 1: torch specializes the dim the caller marked dynamic
        "specialized": lambda: loader.load_program(linear.eval(), (torch.randn(1, 4),), ({0: "batch"},)),
        "mutation": lambda: loader.load_program(_Mutates().eval(), (torch.randn(2, 1),)),
        "unsupported": lambda: loader.load_program(_Erfinv().eval(), (torch.rand(2, 4),)),
        "bad pt2": lambda: loader.load_program(_write(tmp_path / "x.pt2", b"not a zip")),
    }
    with pytest.raises(error, match=match) as info:
        calls[case]()
    assert "\n" not in str(info.value)


class _Erfinv(torch.nn.Module):
    def forward(self, x):
        return torch.special.erfinv(x * 0.5)


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_registry_is_keyed_by_op_overloads():
    table = registry.registered()
    assert torch.ops.aten.amax.default in table and torch.ops.aten.amin.default in table
    with pytest.raises(TypeError, match="op overload"):
        registry.converter("amax.default")
    with pytest.raises(ValueError, match="already has a converter"):
        registry.converter(torch.ops.aten.amax.default)(lambda importer, node: None)


def test_hetc_imports_and_compiles_onnx_without_torch(examples, tmp_path):
    """torch is an optional extra: with it unimportable, `import hetc` works and so does the ONNX path."""
    code = f"""
import sys
sys.modules["torch"] = None  # `import torch` raises ImportError
import hetc, numpy as np
assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
model = hetc.compile({str(examples / 'mlp.onnx')!r}, "cpu")
print("ok", sorted(model.input_names))
try:
    hetc.compile({str(tmp_path / 'm.pt2')!r}, "cpu")
except hetc.HetcError as err:
    print("error:", err)
"""
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout and "pip install 'hetc[torch]'" in proc.stdout


def test_import_hetc_does_not_import_torch():
    proc = subprocess.run([sys.executable, "-c", "import sys, hetc; print('torch' in sys.modules)"],
                          check=False, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "False", proc.stderr
