"""Reproducible exports of models that failed with symbolic dims (issue 31): transformers 5.24
and torchvision architectures with random weights and small configs (2 layers, hidden 64,
4 heads, vocab 1000), exported as users do -- ``torch.onnx.export(dynamo=False, opset 17)``
with ``dynamic_axes`` for batch (and sequence), as ``benchmarks/model_zoo.py`` exports them.

    python tests/symbolic_models.py OUT_DIR [name ...]    # export, compile, compare; prints errors

Each ``Case`` builds the torch module for an example input and makes inputs at any batch and
sequence length (``feed``), so one compiled artifact is checked at two sizes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from zoo import wrap as _wrap  # the zoo's keyword-calling wrapper

OPSET = 17
IR_VERSION = 10  # onnxruntime refuses IR versions newer than it knows
TEXT = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
SIZES = ((2, 16), (3, 9))  # (batch, sequence) of the two checked runs; the first is exported
SMALL_LM = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 128}


@dataclass(frozen=True)
class Case:
    name: str
    library: str  # "transformers" or "torchvision"
    module: Callable[[], object]  # -> torch module taking the inputs positionally (in feed's order)
    feed: Callable[[int, int], dict[str, np.ndarray]]  # (batch, seq) -> inputs
    dynamic: dict[str, dict[int, str]]


CASES: dict[str, Case] = {}


def case(name: str, library: str, dynamic: dict[str, dict[int, str]], feed: Callable[[int, int], dict]):
    def register(fn):
        CASES[name] = Case(name, library, fn, feed, dynamic)
        return fn
    return register


def _text_feed(batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 100 + seq)
    mask = np.ones((batch, seq), np.int64)
    mask[-1, seq - 3:] = 0  # padding in the last row
    return {"input_ids": rng.integers(0, 1000, (batch, seq)).astype(np.int64), "attention_mask": mask}


def _lm(model_cls, config, experts: str | None = None, **fixed):
    """A causal LM on ``input_ids`` and ``attention_mask``; ``experts``: the MoE experts'
    implementation ("eager": a loop over the experts hit, selecting each one's tokens with
    NonZero -- the exportable one; the default "grouped_mm" uses torch.histc, which the
    TorchScript exporter does not take)."""
    import torch

    torch.manual_seed(0)
    model = model_cls(config).eval()
    if experts:
        model.set_experts_implementation(experts)
    return _wrap(model, ["input_ids", "attention_mask"], (), use_cache=False, **fixed)


@case("gptj", "transformers", TEXT, _text_feed)
def _gptj():
    from transformers import GPTJConfig, GPTJForCausalLM
    return _lm(GPTJForCausalLM, GPTJConfig(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, vocab_size=1000,
                                           n_positions=128))


@case("mixtral", "transformers", TEXT, _text_feed)
def _mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM
    return _lm(MixtralForCausalLM, MixtralConfig(**SMALL_LM, num_local_experts=4, num_experts_per_tok=2),
               experts="eager")


@case("qwen2-moe", "transformers", TEXT, _text_feed)
def _qwen2_moe():
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM
    return _lm(Qwen2MoeForCausalLM, Qwen2MoeConfig(**SMALL_LM, moe_intermediate_size=32,
                                                   shared_expert_intermediate_size=64, num_experts=4,
                                                   num_experts_per_tok=2), experts="eager")


def _image_feed(size: int, noise: int = 0):
    """Images of ``size`` at any batch (the sequence length is unused); ``noise``: also a
    (batch, noise) uniform input (ViTMAE's patch shuffle, fixed so outputs are comparable)."""
    def feed(batch: int, seq: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(batch)
        out = {"pixel_values": rng.standard_normal((batch, 3, size, size)).astype(np.float32)}
        if noise:
            out["noise"] = rng.random((batch, noise)).astype(np.float32)
        return out
    return feed


VIT = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
       "image_size": 64, "patch_size": 16}


@case("vitmae", "transformers", {"pixel_values": {0: "batch"}, "noise": {0: "batch"}}, _image_feed(64, 16))
def _vitmae():
    import torch
    from transformers import ViTMAEConfig, ViTMAEModel

    torch.manual_seed(0)
    config = ViTMAEConfig(**VIT, mask_ratio=0.75)
    return _wrap(ViTMAEModel(config).eval(), ["pixel_values", "noise"], ("last_hidden_state", "ids_restore"))


@case("dpt", "transformers", {"pixel_values": {0: "batch"}}, _image_feed(64))
def _dpt():
    import torch
    from transformers import DPTConfig, DPTForDepthEstimation

    torch.manual_seed(0)
    config = DPTConfig(**{**VIT, "num_hidden_layers": 4}, backbone_out_indices=[0, 1, 2, 3],
                       neck_hidden_sizes=[16, 32, 64, 64], fusion_hidden_size=32,
                       head_hidden_size=16)
    return _wrap(DPTForDepthEstimation(config).eval(), ["pixel_values"])


def _raft_feed(batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch)
    return {f"image{i}": rng.uniform(-1, 1, (batch, 3, 128, 128)).astype(np.float32) for i in (1, 2)}


@case("raft-small", "torchvision", {"image1": {0: "batch"}, "image2": {0: "batch"}}, _raft_feed)
def _raft_small():
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.optical_flow.raft_small(weights=None).eval()

    class Final(torch.nn.Module):  # the last flow prediction (eval-mode RAFT returns every update)
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, image1, image2):
            return self.model(image1, image2, num_flow_updates=3)[-1]

    return Final().eval()


# ---------------------------------------------------------------------------------------------

def import_torchvision() -> None:
    """Import torchvision first, if installed: PyPI's wheel is built against CUDA torch, and with
    this project's CPU torch a plain import fails (so does every transformers model class, which
    imports it); ``detection_models.import_torchvision`` stands Python ops in for its C++ ones."""
    import importlib.util

    if importlib.util.find_spec("torchvision") is None:
        return
    try:
        from detection_models import import_torchvision as shim
    except ImportError:
        import torchvision  # noqa: F401
    else:
        shim()


def export(name: str, path: Path) -> Path:
    """Export ``CASES[name]`` (TorchScript exporter, opset 17, its dims symbolic) to ``path``."""
    import warnings

    import onnx
    import torch

    import_torchvision()
    entry = CASES[name]
    module = entry.module()
    inputs = {k: torch.from_numpy(v) for k, v in entry.feed(*SIZES[0]).items()}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        reference = module(*inputs.values())
        count = len(reference) if isinstance(reference, tuple) else 1
        torch.onnx.export(module, tuple(inputs.values()), str(path), dynamo=False, opset_version=OPSET,
                          input_names=list(inputs), output_names=[f"output_{i}" for i in range(count)],
                          dynamic_axes=entry.dynamic)
    proto = onnx.load(str(path))
    if proto.ir_version > IR_VERSION:
        proto.ir_version = IR_VERSION
        onnx.save(proto, str(path))
    return path


def errors(name: str, path: Path, compiled=None) -> list[float]:
    """max |hetc - ort| / max |ort| over the outputs, at each of ``SIZES``, for the model at
    ``path`` (compiled for the CPU unless ``compiled`` is given)."""
    import onnxruntime as ort

    import hetc

    compiled = compiled or hetc.compile(path, "cpu")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    result = []
    for batch, seq in SIZES:
        inputs = CASES[name].feed(batch, seq)
        expected = session.run(None, inputs)
        got = compiled.run(inputs)
        got = list(got.values()) if isinstance(got, dict) else list(got)
        err = 0.0
        for a, e in zip(got, expected, strict=True):
            if a.shape != e.shape:
                raise AssertionError(f"{name} at {(batch, seq)}: output shape {a.shape}, "
                                     f"onnxruntime {e.shape}")
            scale = max(float(np.max(np.abs(e))), 1e-30) if e.size else 1.0
            diff = float(np.max(np.abs(a.astype(np.float64) - e))) if e.size else 0.0
            err = max(err, diff / scale)
        result.append(err)
    return result


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for n in sys.argv[2:] or list(CASES):
        try:
            model = export(n, out / f"{n}.onnx")
            print(n, "max rel err at", SIZES, errors(n, model), flush=True)
        except Exception as err:  # noqa: BLE001 - a script: report and go on
            print(n, "FAILED", f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:400],
                  flush=True)
