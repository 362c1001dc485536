"""torch.compile(model, backend="hetc"): graphs compiled by hetc and checked against eager torch
(max abs error <= 1e-4 x max |eager|), one artifact across batch sizes with dynamic=True, the
disk cache across processes, DLPack without copies, eager fallbacks with one warning.

The slow tests are the acceptance: ResNet-50, BERT-base and GPT-2 with its KV cache at two batch
sizes with no recompilation, and the transformers zoo (examples/torch_zoo.py)."""

from __future__ import annotations

import importlib
import logging
import subprocess
import sys
import warnings

import pytest
from conftest import ROOT

torch = pytest.importorskip("torch", reason="the torch backend needs torch (pip install 'hetc[torch]')")

importlib.import_module("torch._dynamo")  # loaded before hetc: `import hetc` registers the backend

import hetc
from hetc.frontends.torch import dynamo
from hetc.frontends.torch.fallback import HetcFallbackWarning
from hetc.frontends.torch.tensors import to_tvm

sys.path.insert(0, str(ROOT / "examples"))
import torch_zoo

pytestmark = pytest.mark.torch


def assert_close(actual: torch.Tensor, expected: torch.Tensor, rel: float = 1e-4) -> None:
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    scale = max(float(expected.abs().max()), 1e-30) if expected.numel() else 1.0
    err = float((actual.double() - expected.double()).abs().max()) if expected.numel() else 0.0
    assert err <= rel * scale, f"max abs error {err:.3e} > {rel} x {scale:.3e}"


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(x.mean(dim=(2, 3)))


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _compiles(caplog) -> int:
    """How many graphs the backend was handed (compiled, or loaded from the disk cache)."""
    return sum(("compiled for" in r.getMessage() or "loaded from the cache" in r.getMessage())
               for r in caplog.records if r.name == dynamo.__name__)


def test_backend_is_registered_by_name():
    assert "hetc" in torch._dynamo.list_backends()
    assert torch._dynamo.backends.registry.lookup_backend("hetc") is dynamo.hetc_backend


_SECOND_START = """
import logging, sys, torch
sys.path.insert(0, {tests!r})
from test_torch_backend import SmallCNN
logging.basicConfig(level=logging.INFO, format="%(message)s")
model = SmallCNN().eval()
with torch.no_grad():
    x = torch.randn(2, 3, 8, 8)
    y = torch.compile(model, backend="hetc", dynamic=True, options={{"cache": {cache!r}}})(x)
    print("max error", float((y - model(x)).abs().max()))
"""


def test_dynamic_batch_one_artifact_no_recompile_cached_for_the_next_process(fresh_dynamo, caplog, tmp_path):
    caplog.set_level(logging.INFO, logger=dynamo.__name__)
    model = SmallCNN().eval()
    compiled = torch.compile(model, backend="hetc", dynamic=True, options={"cache": str(tmp_path)})
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", HetcFallbackWarning)  # hetc runs it, never eager
        for batch in (2, 5):
            x = torch.randn(batch, 3, 8, 8)
            assert_close(compiled(x), model(x))
    assert _compiles(caplog) == 1  # the second batch size reused the artifact
    # a second process start loads the artifact from the disk cache instead of compiling
    run = subprocess.run([sys.executable, "-c", _SECOND_START.format(tests=str(ROOT / "tests"), cache=str(tmp_path))],
                         check=False, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "loaded from the cache" in run.stderr and "compiled for cpu" not in run.stderr
    assert float(run.stdout.split("max error")[1]) < 1e-4
    # the weights are frozen into the artifact: changed in place, the graph runs eagerly, with one warning
    with torch.no_grad():
        model.fc.bias.add_(1.0)
        x = torch.randn(3, 3, 8, 8)
        with pytest.warns(HetcFallbackWarning, match="changed since"):
            assert_close(compiled(x), model(x))


def test_graph_that_needs_gradients_runs_eagerly_with_one_warning(fresh_dynamo):
    model = SmallCNN().eval()
    compiled = torch.compile(model, backend="hetc")
    x = torch.randn(2, 3, 8, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        out = compiled(x)
        out2 = compiled(x)
    fallbacks = [w for w in caught if issubclass(w.category, HetcFallbackWarning)]
    assert len(fallbacks) == 1 and "gradients" in str(fallbacks[0].message)
    out.sum().backward()  # eager autograd works through it
    assert model.conv.weight.grad is not None
    assert_close(out2.detach(), model(x).detach())


class _WithUnsupported(torch.nn.Module):
    def forward(self, x):
        return torch.special.erfinv(torch.tanh(x)) + 1


def test_graph_hetc_cannot_compile_runs_eagerly_with_its_reason(fresh_dynamo):
    compiled = torch.compile(_WithUnsupported(), backend="hetc", options={"cache": False})
    x = torch.randn(4, 4)
    with torch.no_grad(), pytest.warns(HetcFallbackWarning, match=r"runs eagerly: .*aten\.erfinv\.default"):
        assert_close(compiled(x), _WithUnsupported()(x))


class _Breaks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x):
        x = torch.relu(self.a(x))
        torch._dynamo.graph_break()  # code Dynamo does not trace: two graphs
        return self.b(x)


def test_graph_breaks_give_one_artifact_per_graph(fresh_dynamo, caplog):
    caplog.set_level(logging.INFO, logger=dynamo.__name__)
    model = _Breaks().eval()
    compiled = torch.compile(model, backend="hetc", options={"cache": False})
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", HetcFallbackWarning)
        x = torch.randn(3, 8)
        assert_close(compiled(x), model(x))
    assert _compiles(caplog) == 2


def test_dlpack_passes_tensors_without_copies():
    x = torch.randn(64, 64)
    assert torch.from_dlpack(to_tvm(x)).data_ptr() == x.data_ptr()  # the same memory
    view = x.t()  # not contiguous: a contiguous copy
    assert torch.equal(torch.from_dlpack(to_tvm(view)), view)
    assert torch.from_dlpack(to_tvm(view)).data_ptr() != x.data_ptr()


def test_unknown_option_is_refused():
    with pytest.raises(hetc.HetcError, match="unknown hetc backend option"):
        dynamo.BackendOptions.parse({"targte": "cpu"})


# -- acceptance (slow) ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.heavy) if n == "resnet50" else n
                                  for n in torch_zoo.ACCEPTANCE])  # ResNet-50 with a symbolic batch: 6 minutes
def test_acceptance_models_batch_sizes_no_recompile(name, fresh_dynamo, caplog, tmp_path):
    caplog.set_level(logging.INFO, logger=dynamo.__name__)
    case = torch_zoo.ACCEPTANCE[name]()
    compiled = torch.compile(case.model, backend="hetc", dynamic=True, options={"cache": str(tmp_path)})
    compiles = []
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", HetcFallbackWarning)
        for batch in (2, 3, 4):
            args = case.inputs(batch)
            for got, ref in zip(torch_zoo.outputs(compiled(*args)), torch_zoo.outputs(case.model(*args)), strict=True):
                assert_close(got, ref)
            compiles.append(_compiles(caplog))
    assert compiles == [1, 1, 1]  # one artifact for every batch size: no recompilation


@pytest.mark.slow
@pytest.mark.heavy
def test_zoo_through_the_backend(fresh_dynamo):
    """Every zoo architecture matches eager through the backend; a graph hetc does not take
    falls back with a one-line reason (never a crash); at least 30 run entirely through hetc."""
    through_hetc, reasons = [], {}
    for name, build in torch_zoo.ZOO.items():
        torch._dynamo.reset()
        case = build()
        args = case.inputs(2)
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", HetcFallbackWarning)
            got = torch_zoo.outputs(torch.compile(case.model, backend="hetc", options={"cache": False})(*args))
            ref = torch_zoo.outputs(case.model(*args))
        for a, b in zip(got, ref, strict=True):
            assert_close(a, b)
        assert any(float(b.abs().max()) > 0 for b in ref), f"{name}: every output is zero, nothing compared"
        fallbacks = [str(w.message) for w in caught if issubclass(w.category, HetcFallbackWarning)]
        assert all("\n" not in m for m in fallbacks)
        if fallbacks:
            reasons[name] = fallbacks
        else:
            through_hetc.append(name)
    assert len(through_hetc) >= 30, reasons
