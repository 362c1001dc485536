"""Model zoo: real architectures from transformers (and torchvision where it imports), with
random weights from their libraries' constructors, exported by torch.onnx.export, compiled by
hetc for the CPU and compared with onnxruntime.

    python benchmarks/model_zoo.py [--archs a,b] [--exporters torchscript,dynamo] [--repeat N]
                                   [--json out.json] [--timeout S] [--keep DIR]
    python benchmarks/model_zoo.py --list

Per (architecture, exporter): export (TorchScript exporter at opset 17 with the batch and
sequence dims symbolic, as ``dynamic_axes`` users write; dynamo exporter at the newest opset
torch supports, static shapes), then in a child process (a crash or hang of one model cannot
stop the sweep; ``--timeout``): hetc.compile for the CPU, onnxruntime for the reference,
max rel err = max |hetc - ort| / max |ort| over the outputs, and the latency of both taken
alternately (medians of ``--repeat``; ``hetc.benchmark.compare_with_onnxruntime``). A failure
is recorded with its one-line reason and the sweep goes on. Prints a table and writes JSON.

Architectures are entries of ``ZOO`` (name -> ``Arch``): to add one, write a function that
returns ``(torch module, {input name: example tensor})`` and decorate it with
``@arch("name", "library")``; the module's outputs (a tensor or a tuple) are the model's.
Models are small configurations (2 layers, narrow) of the real code, so the sweep fits a
2-core machine; the graph structure -- what a compiler must handle -- is the library's own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCHSCRIPT_OPSET = 17
IR_VERSION = 10  # onnxruntime refuses IR versions newer than it knows
TOLERANCE = 1e-4


@dataclass(frozen=True)
class Arch:
    name: str
    library: str  # "transformers" or "torchvision"
    build: Callable[[], tuple]  # -> (torch module, {input name: tensor}); outputs = module's
    dynamic: dict[str, dict[int, str]] | None = None  # input name -> {axis: dim name}; None: batch only


ZOO: dict[str, Arch] = {}


def arch(name: str, library: str, dynamic: dict[str, dict[int, str]] | None = None):
    """Register an architecture builder under ``name`` (see the module docstring)."""
    def register(fn):
        ZOO[name] = Arch(name, library, fn, dynamic)
        return fn
    return register


# ---------------------------------------------------------------------------------------------
# transformers

SEQ = 16
TEXT = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
IDS_ONLY = {"input_ids": {0: "batch", 1: "seq"}}


def _wrap(model, names: list[str], keys: tuple[str, ...] = (), **fixed):
    """A module taking ``names`` positionally, calling ``model`` by keyword (transformers 5
    takes inputs by keyword), returning the output fields ``keys`` (default: the first)."""
    import torch

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args):
            out = self.model(**dict(zip(names, args)), **fixed)
            if not keys:
                return out[0]
            return tuple(getattr(out, k) for k in keys)

    return Wrapper().eval()


def _text(model_cls, config, mask: bool = True, keys: tuple[str, ...] = (), vocab: int | None = None, **fixed):
    import torch

    torch.manual_seed(0)
    model = model_cls(config).eval()
    vocab = vocab or config.vocab_size
    inputs = {"input_ids": torch.randint(0, vocab, (2, SEQ))}
    if mask:
        m = torch.ones(2, SEQ, dtype=torch.int64)
        m[1, SEQ - 4:] = 0  # padding in the second row
        inputs["attention_mask"] = m
    return _wrap(model, list(inputs), keys, **fixed), inputs


def _image(model_cls, config, size: int = 64, channels: int = 3, name: str = "pixel_values", keys=()):
    import torch

    torch.manual_seed(0)
    model = model_cls(config).eval()
    inputs = {name: torch.randn(1, channels, size, size)}
    return _wrap(model, [name], keys), inputs


SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
         "vocab_size": 1000, "max_position_embeddings": 128}


@arch("bert", "transformers", TEXT)
def _bert():
    from transformers import BertConfig, BertModel
    return _text(BertModel, BertConfig(**SMALL), keys=("last_hidden_state", "pooler_output"))


@arch("roberta", "transformers", TEXT)
def _roberta():
    from transformers import RobertaConfig, RobertaModel
    return _text(RobertaModel, RobertaConfig(**SMALL))


@arch("xlm-roberta", "transformers", TEXT)
def _xlm_roberta():
    from transformers import XLMRobertaConfig, XLMRobertaModel
    return _text(XLMRobertaModel, XLMRobertaConfig(**SMALL))


@arch("distilbert", "transformers", TEXT)
def _distilbert():
    from transformers import DistilBertConfig, DistilBertModel
    return _text(DistilBertModel, DistilBertConfig(dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                                   vocab_size=1000, max_position_embeddings=128))


@arch("albert", "transformers", TEXT)
def _albert():
    from transformers import AlbertConfig, AlbertModel
    return _text(AlbertModel, AlbertConfig(**SMALL, embedding_size=32))


@arch("electra", "transformers", TEXT)
def _electra():
    from transformers import ElectraConfig, ElectraModel
    return _text(ElectraModel, ElectraConfig(**SMALL, embedding_size=32))


@arch("deberta-v2", "transformers", TEXT)
def _deberta():
    from transformers import DebertaV2Config, DebertaV2Model
    return _text(DebertaV2Model, DebertaV2Config(**SMALL))


@arch("mpnet", "transformers", TEXT)
def _mpnet():
    from transformers import MPNetConfig, MPNetModel
    return _text(MPNetModel, MPNetConfig(**SMALL))


@arch("gpt2", "transformers", TEXT)
def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    return _text(GPT2LMHeadModel, GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128),
                 use_cache=False)


@arch("gpt-neox", "transformers", TEXT)
def _gpt_neox():
    from transformers import GPTNeoXConfig, GPTNeoXModel
    return _text(GPTNeoXModel, GPTNeoXConfig(**SMALL), use_cache=False)


@arch("opt", "transformers", TEXT)
def _opt():
    from transformers import OPTConfig, OPTModel
    return _text(OPTModel, OPTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128,
                                     vocab_size=1000, max_position_embeddings=128, word_embed_proj_dim=64),
                 use_cache=False)


LLAMA_LIKE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 128}


@arch("llama", "transformers", TEXT)
def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    return _text(LlamaForCausalLM, LlamaConfig(**LLAMA_LIKE), use_cache=False)


@arch("mistral", "transformers", TEXT)
def _mistral():
    from transformers import MistralConfig, MistralModel
    return _text(MistralModel, MistralConfig(**LLAMA_LIKE, sliding_window=8), use_cache=False)


@arch("qwen2", "transformers", TEXT)
def _qwen2():
    from transformers import Qwen2Config, Qwen2Model
    return _text(Qwen2Model, Qwen2Config(**LLAMA_LIKE), use_cache=False)


@arch("phi", "transformers", TEXT)
def _phi():
    from transformers import PhiConfig, PhiModel
    return _text(PhiModel, PhiConfig(**SMALL), use_cache=False)


@arch("gemma", "transformers", TEXT)
def _gemma():
    from transformers import GemmaConfig, GemmaModel
    return _text(GemmaModel, GemmaConfig(**LLAMA_LIKE, head_dim=16), use_cache=False)


@arch("bloom", "transformers", TEXT)
def _bloom():
    from transformers import BloomConfig, BloomModel
    return _text(BloomModel, BloomConfig(hidden_size=64, n_layer=2, n_head=4, vocab_size=1000), use_cache=False)


@arch("falcon", "transformers", TEXT)
def _falcon():
    from transformers import FalconConfig, FalconModel
    return _text(FalconModel, FalconConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                           vocab_size=1000), use_cache=False)


@arch("t5-encoder", "transformers", TEXT)
def _t5():
    from transformers import T5Config, T5EncoderModel
    return _text(T5EncoderModel, T5Config(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                                          vocab_size=1000))


@arch("bart-encoder", "transformers", TEXT)
def _bart():
    from transformers import BartConfig, BartModel
    config = BartConfig(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=1000,
                        max_position_embeddings=128)
    return _text(lambda c: BartModel(c).get_encoder(), config)


@arch("clip-text", "transformers", TEXT)
def _clip_text():
    from transformers import CLIPTextConfig, CLIPTextModel
    return _text(CLIPTextModel, CLIPTextConfig(**SMALL), keys=("last_hidden_state", "pooler_output"))


@arch("clip-vision", "transformers")
def _clip_vision():
    from transformers import CLIPVisionConfig, CLIPVisionModel
    return _image(CLIPVisionModel, CLIPVisionConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                    intermediate_size=128, image_size=64, patch_size=16))


VIT = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
       "image_size": 64, "patch_size": 16}


@arch("vit", "transformers")
def _vit():
    from transformers import ViTConfig, ViTModel
    return _image(ViTModel, ViTConfig(**VIT))


@arch("deit", "transformers")
def _deit():
    from transformers import DeiTConfig, DeiTModel
    return _image(DeiTModel, DeiTConfig(**VIT))


@arch("beit", "transformers")
def _beit():
    from transformers import BeitConfig, BeitModel
    return _image(BeitModel, BeitConfig(**VIT, use_relative_position_bias=True))


@arch("dinov2", "transformers")
def _dinov2():
    from transformers import Dinov2Config, Dinov2Model
    return _image(Dinov2Model, Dinov2Config(**{k: v for k, v in VIT.items() if k != "intermediate_size"},
                                            mlp_ratio=2))


@arch("swin", "transformers")
def _swin():
    from transformers import SwinConfig, SwinModel
    return _image(SwinModel, SwinConfig(image_size=64, patch_size=4, embed_dim=32, depths=[2, 2],
                                        num_heads=[2, 4], window_size=4))


@arch("convnext", "transformers")
def _convnext():
    from transformers import ConvNextConfig, ConvNextModel
    return _image(ConvNextModel, ConvNextConfig(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1]))


@arch("convnextv2", "transformers")
def _convnextv2():
    from transformers import ConvNextV2Config, ConvNextV2Model
    return _image(ConvNextV2Model, ConvNextV2Config(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1]))


@arch("resnet", "transformers")
def _resnet():
    from transformers import ResNetConfig, ResNetModel
    return _image(ResNetModel, ResNetConfig(), size=96)


@arch("regnet", "transformers")
def _regnet():
    from transformers import RegNetConfig, RegNetModel
    return _image(RegNetModel, RegNetConfig(), size=96)


@arch("mobilenet-v1", "transformers")
def _mobilenet_v1():
    from transformers import MobileNetV1Config, MobileNetV1Model
    return _image(MobileNetV1Model, MobileNetV1Config(image_size=96), size=96)


@arch("mobilenet-v2", "transformers")
def _mobilenet_v2():
    from transformers import MobileNetV2Config, MobileNetV2Model
    return _image(MobileNetV2Model, MobileNetV2Config(image_size=96), size=96)


@arch("efficientnet", "transformers")
def _efficientnet():
    from transformers import EfficientNetConfig, EfficientNetModel
    return _image(EfficientNetModel, EfficientNetConfig(image_size=96), size=96)


@arch("mobilevit", "transformers")
def _mobilevit():
    from transformers import MobileViTConfig, MobileViTModel
    return _image(MobileViTModel, MobileViTConfig(image_size=64), size=64)


@arch("levit", "transformers")
def _levit():
    from transformers import LevitConfig, LevitModel
    return _image(LevitModel, LevitConfig(image_size=64), size=64)


@arch("poolformer", "transformers")
def _poolformer():
    from transformers import PoolFormerConfig, PoolFormerModel
    return _image(PoolFormerModel, PoolFormerConfig(depths=[1, 1, 1, 1]), size=64)


@arch("segformer", "transformers")
def _segformer():
    from transformers import SegformerConfig, SegformerForSemanticSegmentation
    return _image(SegformerForSemanticSegmentation, SegformerConfig(depths=[1, 1, 1, 1], num_labels=4), size=64)


@arch("whisper-encoder", "transformers")
def _whisper():
    import torch
    from transformers import WhisperConfig, WhisperModel

    torch.manual_seed(0)
    config = WhisperConfig(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                           num_mel_bins=80, max_source_positions=32, vocab_size=1000, pad_token_id=0,
                           bos_token_id=0, eos_token_id=0, decoder_start_token_id=0)
    encoder = WhisperModel(config).get_encoder().eval()
    inputs = {"input_features": torch.randn(1, 80, 64)}
    return _wrap(encoder, ["input_features"]), inputs


@arch("wav2vec2", "transformers", {"input_values": {0: "batch", 1: "samples"}})
def _wav2vec2():
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    torch.manual_seed(0)
    config = Wav2Vec2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                            conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
    model = Wav2Vec2Model(config).eval()
    return _wrap(model, ["input_values"]), {"input_values": torch.randn(1, 1600)}


# ---------------------------------------------------------------------------------------------
# torchvision (its wheels need a CUDA build of torch: `pip install torch==2.14.1 torchvision==0.29.1`)

def _tv(name: str, size: int = 96, **kwargs):
    def build():
        import torch
        import torchvision

        torch.manual_seed(0)
        model = torchvision.models.get_model(name, weights=None, **kwargs).eval()
        with torch.no_grad():  # non-trivial BatchNorm statistics, as a trained model has
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.running_mean.normal_(0.0, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
        return model, {"x": torch.randn(1, 3, size, size)}
    return build


for _name, _size, _kw in [
    ("resnet18", 96, {}), ("resnext50_32x4d", 96, {}), ("wide_resnet50_2", 96, {}), ("mobilenet_v2", 96, {}),
    ("mobilenet_v3_small", 96, {}), ("efficientnet_b0", 96, {}), ("regnet_y_400mf", 96, {}),
    ("convnext_tiny", 96, {}), ("densenet121", 96, {}), ("inception_v3", 128, {"aux_logits": False,
                                                                                 "init_weights": False}),
    ("googlenet", 96, {"aux_logits": False, "init_weights": False}), ("shufflenet_v2_x1_0", 96, {}),
    ("squeezenet1_1", 96, {}), ("mnasnet1_0", 96, {}), ("vgg11", 224, {}), ("alexnet", 224, {}),
    ("vit_b_16", 64, {"image_size": 64}), ("swin_t", 64, {}), ("maxvit_t", 224, {}),
    ("deeplabv3_mobilenet_v3_large", 96, {"weights_backbone": None, "aux_loss": False}),
    ("fcn_resnet50", 64, {"weights_backbone": None, "aux_loss": False}),
]:
    ZOO[f"tv-{_name}"] = Arch(f"tv-{_name}", "torchvision", _tv(_name, _size, **_kw))


# ---------------------------------------------------------------------------------------------
# export, compile, compare

def newest_opset() -> int:
    from torch.onnx import _constants
    return int(_constants.ONNX_MAX_OPSET)


def export(entry: Arch, exporter: str, path: Path) -> dict:
    """Export ``entry`` to ``path``; returns {"opset", "ops", "inputs" (npz path)}."""
    import numpy as np
    import onnx
    import torch

    module, inputs = entry.build()
    names = list(inputs)
    args = tuple(inputs.values())
    with torch.no_grad():
        reference = module(*args)
    outputs = [f"output_{i}" for i in range(len(reference) if isinstance(reference, tuple) else 1)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            opset = TORCHSCRIPT_OPSET
            dynamic = entry.dynamic or {n: {0: "batch"} for n in names}
            torch.onnx.export(module, args, str(path), dynamo=False, opset_version=opset, input_names=names,
                              output_names=outputs, dynamic_axes={k: v for k, v in dynamic.items() if k in names})
        else:
            opset = newest_opset()
            program = torch.onnx.export(module, args, dynamo=True, opset_version=opset, input_names=names,
                                        output_names=outputs, verbose=False)
            program.save(str(path))
    proto = onnx.load(str(path))
    if proto.ir_version > IR_VERSION:
        proto.ir_version = IR_VERSION
        onnx.save(proto, str(path))
    np.savez(path.with_suffix(".npz"), **{n: t.numpy() for n, t in inputs.items()})
    return {"opset": opset, "ops": len(proto.graph.node), "op_types": len({n.op_type for n in proto.graph.node})}


def _one_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    text = lines[0] if lines else type(err).__name__
    return f"{type(err).__name__}: {text}"[:300]


def measure(model: Path, repeat: int) -> dict:
    """In this process: hetc.compile, onnxruntime reference, error and alternating latency."""
    import numpy as np

    import hetc
    from hetc.benchmark import compare_with_onnxruntime, ort_session

    inputs = dict(np.load(model.with_suffix(".npz")))
    session = ort_session(model)
    expected = session.run(None, inputs)
    start = time.perf_counter()
    compiled = hetc.compile(model, "cpu")
    compile_s = time.perf_counter() - start
    got = compiled.run(inputs)
    got = list(got.values()) if isinstance(got, dict) else list(got)
    err = 0.0
    for a, e in zip(got, expected):
        if a.shape != e.shape:
            raise AssertionError(f"output shape {a.shape}, onnxruntime {e.shape}")
        scale = max(float(np.max(np.abs(e))), 1e-30) if e.size else 1.0
        diff = float(np.max(np.abs(a.astype(np.float64) - e))) if e.size else 0.0
        err = max(err, diff / scale)
    timing = compare_with_onnxruntime(model, compiled, inputs, repeat=repeat, session=session)
    return {"compile_s": compile_s, "max_rel_err": err, "hetc_ms": timing["results"]["hetc"]["median_ms"],
            "ort_ms": timing["results"]["onnxruntime"]["median_ms"], "x_ort": timing["hetc_over_ort"]}


def _child(args) -> int:
    entry = ZOO[args.child]
    path = Path(args.model)
    row: dict = {}
    try:
        row.update(export(entry, args.exporter, path))
    except Exception as err:  # noqa: BLE001 - any exporter failure is recorded as the row's reason
        row["status"], row["reason"] = "export-failed", _one_line(err)
        print(json.dumps(row))
        return 0
    try:
        import onnxruntime as ort

        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001
        row["status"], row["reason"] = "ort-failed", _one_line(err)
        print(json.dumps(row))
        return 0
    try:
        row.update(measure(path, args.repeat))
        row["status"] = "pass" if row["max_rel_err"] <= TOLERANCE else "mismatch"
    except Exception as err:  # noqa: BLE001
        row["status"], row["reason"] = "hetc-failed", _one_line(err)
    print(json.dumps(row))
    return 0


def run_one(name: str, exporter: str, workdir: Path, repeat: int, timeout: float) -> dict:
    """One (architecture, exporter) in a child process; a crash or timeout becomes the row."""
    model = workdir / f"{name}-{exporter}.onnx"
    cmd = [sys.executable, __file__, "--child", name, "--exporter", exporter, "--model", str(model),
           "--repeat", str(repeat)]
    row = {"arch": name, "library": ZOO[name].library, "exporter": exporter}
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        return {**row, "status": "timeout", "reason": f"no result in {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or [f"exit {proc.returncode}"]
        return {**row, "status": "crashed", "reason": tail[0][:300]}
    return {**row, **json.loads(lines[-1]), "wall_s": time.perf_counter() - start}


def available() -> dict[str, str]:
    """Library -> why it cannot be used ("" when it can)."""
    out = {}
    for lib in ("transformers", "torchvision"):
        try:
            __import__(lib)
            out[lib] = ""
        except Exception as err:  # noqa: BLE001 - torchvision fails with RuntimeError next to a CPU torch
            out[lib] = _one_line(err)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archs", default="", help="comma-separated names (default: all); --list shows them")
    parser.add_argument("--exporters", default="torchscript,dynamo")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", default="model_zoo.json")
    parser.add_argument("--keep", default="", help="keep the exported models in this directory")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--exporter", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)
    if args.list:
        for entry in ZOO.values():
            print(f"{entry.name:32s} {entry.library}")
        return 0
    names = [n for n in args.archs.split(",") if n] or list(ZOO)
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        parser.error(f"unknown architecture(s) {', '.join(unknown)}; see --list")
    libs = available()
    exporters = [e for e in args.exporters.split(",") if e]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.keep or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for name in names:
            for exporter in exporters:
                if libs[ZOO[name].library]:
                    row = {"arch": name, "library": ZOO[name].library, "exporter": exporter,
                           "status": "skipped", "reason": f"{ZOO[name].library}: {libs[ZOO[name].library]}"}
                else:
                    row = run_one(name, exporter, workdir, args.repeat, args.timeout)
                rows.append(row)
                _print_row(row)
                Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary(rows)}, indent=1))
    _print_table(rows)
    return 0


def summary(rows: list[dict]) -> dict:
    tried = [r for r in rows if r["status"] not in ("skipped", "export-failed", "ort-failed")]
    passed = [r for r in tried if r["status"] == "pass"]
    archs = {r["arch"] for r in tried}
    arch_pass = {r["arch"] for r in passed}
    return {"rows": len(rows), "tried": len(tried), "passed": len(passed), "architectures": len(archs),
            "architectures_passing_every_export": len({a for a in arch_pass
                                                       if all(r["status"] == "pass" for r in tried if r["arch"] == a)})}


def _fmt(row: dict) -> list[str]:
    def num(key, spec):
        return format(row[key], spec) if key in row else ""
    return [row["arch"], row["exporter"], str(row.get("opset", "")), str(row.get("ops", "")), num("compile_s", ".1f"),
            num("max_rel_err", ".1e"), num("x_ort", ".2f"), row["status"], row.get("reason", "")]


HEADER = ["architecture", "exporter", "opset", "ops", "compile s", "max rel err", "x ORT", "status", "reason"]


def _print_row(row: dict) -> None:
    print(" | ".join(_fmt(row)), flush=True)


def _print_table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="hetc model zoo (CPU) vs onnxruntime")
    for h in HEADER:
        table.add_column(h, overflow="fold")
    for row in rows:
        table.add_row(*(escape(cell) for cell in _fmt(row)))
    Console(width=200).print(table)
    print(json.dumps(summary(rows)))


if __name__ == "__main__":
    sys.exit(main())
