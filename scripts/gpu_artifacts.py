#!/usr/bin/env python3
"""Compile the GPU check's artifacts here (no GPU needed) and pack them small enough to carry.

    python scripts/gpu_artifacts.py OUT [--models resnet50-b1,...] [--target cuda] [--arch sm_90]

Models (``MODELS``): ResNet-50 batch 1 and 8, BERT-base batch 1 x seq 128 (static) and with
symbolic ``batch``/``seq``, the GPT-2 124M decoder step with its KV cache, and a
``--target cpu,cuda`` split of ResNet-50 placed by the solver; ``*-tiny`` variants for tests.

Random weights are too big to carry (ResNet-50 100 MB, BERT-base 440 MB, GPT-2 500 MB; a
device call carries 64 MiB), so they are made twice from a seed, bit for bit: here before the
ONNX export, and on the GPU machine for torch. ``seed_parameters`` draws every parameter from a
counter-based hash (splitmix64 in numpy integer arithmetic, then one float32 multiply: the same
bits on any machine). After compiling, every constant tensor in the artifact's libraries whose
bytes equal a parameter (or its transpose) is zeroed and listed in ``weights.json`` (file,
offset, parameter, transform); ``restore`` writes them back from the regenerated parameters and
the manifest's sha256 proves the library is byte-identical again. What stays (kernels, fatbins,
folded constants) is packed into ``OUT/artifacts.tar.xz`` with ``OUT/index.json`` (per model:
inputs, the torch model to build, the solver's predicted costs).

``benchmarks/gpu_check.py`` imports this file on the GPU machine (torch, numpy, onnx only are
needed there for ``build_torch``/``restore``; compiling needs hetc).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import shutil
import struct
import sys
import tarfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OPSET, IR_VERSION = 17, 10
TENSOR_MAGIC = 0xDD5E40F096B4A13F  # TVM's serialized-tensor header (runtime/tensor.h)
MIN_EXTERNAL = 4096  # constants smaller than this stay in the library
WEIGHTS = "weights.json"


# ---------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Spec:
    """One artifact: the torch model ``family``/``config``, how it is compiled, its inputs."""

    name: str
    family: str  # resnet | bert | gpt2
    config: str  # key into CONFIGS[family]
    target: str = "cuda"
    input_shapes: dict = field(default_factory=dict)  # static binding
    dims: dict = field(default_factory=dict)  # symbolic ranges
    run_shapes: dict = field(default_factory=dict)  # shapes the check runs (symbolic builds)
    pasts: tuple = ()  # GPT-2: past lengths the decode step is checked and timed at
    seed: int = 0


RESNET_CONFIGS = {"resnet50": {"layers": (3, 4, 6, 3), "width": 64, "classes": 1000, "image": 224},
                  "resnet-tiny": {"layers": (1, 1), "width": 8, "classes": 10, "image": 32}}
BERT_CONFIGS = {"bert-base": {},
                "bert-tiny": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                              "intermediate_size": 256, "vocab_size": 1000}}
GPT2_CONFIGS = {"gpt2-124m": {"n_positions": 1024},
                "gpt2-tiny": {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 1000, "n_positions": 128}}
CONFIGS = {"resnet": RESNET_CONFIGS, "bert": BERT_CONFIGS, "gpt2": GPT2_CONFIGS}
GPT2_PASTS = (32, 480)  # decode steps timed at these past lengths


def _resnet(name: str, batch: int, target: str = "cuda", **kw) -> Spec:
    config = "resnet-tiny" if "tiny" in name else "resnet50"
    image = RESNET_CONFIGS[config]["image"]
    return Spec(name, "resnet", config, target,
                input_shapes={"image": [batch, 3, image, image]}, **kw)


def _bert(name: str, config: str, symbolic: bool, seq: int) -> Spec:
    if symbolic:
        return Spec(name, "bert", config, dims={"batch": [1, 8], "seq": [1, seq]},
                    run_shapes={"input_ids": [1, seq], "attention_mask": [1, seq]})
    return Spec(name, "bert", config, input_shapes={"input_ids": [1, seq], "attention_mask": [1, seq]})


def _gpt2(name: str, config: str, positions: int, pasts: tuple) -> Spec:
    return Spec(name, "gpt2", config, pasts=pasts, dims={"batch": [1, 1], "seq": [1, positions], "past_seq": [0, positions - 1],
                                            "total_seq": [1, positions]})


MODELS = {s.name: s for s in [
    _resnet("resnet50-b1", 1), _resnet("resnet50-b8", 8),
    _bert("bert-base-s128", "bert-base", False, 128), _bert("bert-base-sym", "bert-base", True, 128),
    _gpt2("gpt2-124m", "gpt2-124m", 512, GPT2_PASTS),
    _resnet("resnet50-split", 1, "cpu,cuda"),
    # small ones for tests (tests/test_gpu_check.py)
    _resnet("resnet-tiny-b2", 2), _bert("bert-tiny-s16", "bert-tiny", False, 16),
    _bert("bert-tiny-sym", "bert-tiny", True, 16), _gpt2("gpt2-tiny", "gpt2-tiny", 64, (8, 32)),
    _resnet("resnet-tiny-split", 2, "cpu,cuda"),
]}
DEFAULT_MODELS = ["resnet50-b1", "resnet50-b8", "bert-base-s128", "bert-base-sym", "gpt2-124m", "resnet50-split"]


def _hide_broken_torchvision() -> None:
    """transformers imports torchvision when it is installed; a torchvision built for another
    torch fails at import (``operator torchvision::nms does not exist``) and takes every model
    class with it. None of these models needs it, so a broken one is hidden."""
    if "torchvision" in sys.modules:
        return
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - RuntimeError from its operator registrations
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        sys.modules["torchvision"] = None


def build_torch(family: str, config: str):
    """The torch module (eval mode, float32) of a model family; weights are not yet seeded."""
    _classes_needed()
    if family != "resnet":
        _hide_broken_torchvision()
    if family == "resnet":
        return ResNet(**RESNET_CONFIGS[config]).eval()
    if family == "bert":
        from transformers import BertConfig, BertModel

        return BertWrapper(BertModel(BertConfig(**BERT_CONFIGS[config], attn_implementation="eager"),
                                     add_pooling_layer=True)).eval()
    if family == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        return GPT2Wrapper(GPT2LMHeadModel(GPT2Config(**GPT2_CONFIGS[config], attn_implementation="eager"))).eval()
    raise ValueError(f"unknown model family {family!r}")


def _torch_classes():
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        """ResNet v1.5 bottleneck with BatchNorm folded into the convolutions (inference form)."""

        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4
            self.conv1 = nn.Conv2d(cin, width, 1)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1)
            self.conv3 = nn.Conv2d(width, cout, 1)
            self.down = nn.Conv2d(cin, cout, 1, stride) if stride != 1 or cin != cout else None

        def forward(self, x):
            y = torch.relu(self.conv1(x))
            y = torch.relu(self.conv2(y))
            y = self.conv3(y)
            return torch.relu(y + (self.down(x) if self.down is not None else x))

    class ResNet(nn.Module):
        """ResNet-50's graph (torchvision's resnet50 with each BatchNorm folded into its conv)."""

        def __init__(self, layers, width: int, classes: int, image: int) -> None:
            super().__init__()
            self.stem = nn.Conv2d(3, width, 7, 2, 3)
            blocks, cin = [], width
            for i, count in enumerate(layers):
                w = width * 2 ** i
                for j in range(count):
                    blocks.append(Bottleneck(cin, w, 2 if j == 0 and i > 0 else 1))
                    cin = w * 4
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(cin, classes)

        def forward(self, image):
            x = torch.max_pool2d(torch.relu(self.stem(image)), 3, 2, 1)
            x = self.blocks(x)
            return self.fc(torch.flatten(torch.mean(x, dim=(2, 3), keepdim=True), 1))

    class BertWrapper(nn.Module):  # transformers 5 takes these by keyword only
        def __init__(self, bert) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    class GPT2Wrapper(nn.Module):
        """Flat cache tensors in and out (``past_key_values.{i}.key``/``.value`` -> ``present.*``)."""

        def __init__(self, model) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, *past):
            from transformers import DynamicCache

            cache = DynamicCache(list(zip(past[0::2], past[1::2])), config=self.model.config)
            # transformers 5.24 names the argument and output ``cache``, 5.17 (the GPU machine's)
            # ``past_key_values``; its forward takes **kwargs, so a wrong name is ignored silently
            name = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True, **{name: cache})
            cache = getattr(out, name)
            return (out.logits, *[t for layer in cache.layers for t in (layer.keys, layer.values)])

    return ResNet, BertWrapper, GPT2Wrapper


ResNet = BertWrapper = GPT2Wrapper = None  # torch classes, defined on first use (torch imported late)


def _classes_needed() -> None:
    global ResNet, BertWrapper, GPT2Wrapper
    if ResNet is None:
        ResNet, BertWrapper, GPT2Wrapper = _torch_classes()


# ---------------------------------------------------------------------------------------
# seeded weights (bit-identical everywhere)
# ---------------------------------------------------------------------------------------

def _fnv1a(text: str) -> int:
    h = 0xCBF29CE484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def uniform(seed: int, name: str, count: int) -> np.ndarray:
    """``count`` float32 in [-1, 1) from splitmix64 of (seed, name, index): integer arithmetic
    and one exact scaling, so every machine gets the same bits."""
    key = np.uint64((_fnv1a(name) ^ (seed * 0x9E3779B97F4A7C15)) & 0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):
        z = np.arange(count, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + key
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    top = (z >> np.uint64(40)).astype(np.float32)  # 24 bits: exact in float32
    return top * np.float32(2.0 ** -23) - np.float32(1.0)


def _scale(family: str, name: str, shape: tuple) -> tuple[float, float]:
    """(offset, half-width) of a parameter's uniform distribution."""
    if name.endswith("bias"):
        return 0.0, 0.02
    if "LayerNorm" in name or ".ln_" in name or name.startswith("ln_") or ".ln_f" in name:
        return 1.0, 0.1
    if family == "resnet":
        fan_in = int(np.prod(shape[1:]))
        gain = 0.3 if name.endswith("conv3.weight") else 1.0  # keep the residual sums tame
        return 0.0, gain * float(np.sqrt(6.0 / fan_in))
    return 0.0, 0.02 * float(np.sqrt(3.0))  # std 0.02, transformers' initializer range


def seed_parameters(model, family: str, seed: int = 0) -> dict:
    """Overwrite every parameter of ``model`` with seeded values; returns {name: numpy array}."""
    import torch

    arrays = {}
    with torch.no_grad():
        for name, param in model.named_parameters():
            offset, width = _scale(family, name, tuple(param.shape))
            values = uniform(seed, name, param.numel()) * np.float32(width) + np.float32(offset)
            values = values.reshape(tuple(param.shape))
            param.copy_(torch.from_numpy(values))
            arrays[name] = values
    return arrays


def make_inputs(spec: Spec, vocab: int, seed: int = 1, past: int = 0) -> dict:
    """The inputs the check feeds (numpy), from a seed."""
    rng = np.random.default_rng(seed)
    if spec.family == "resnet":
        return {"image": rng.standard_normal(spec.input_shapes["image"]).astype(np.float32)}
    if spec.family == "bert":
        batch, seq = (spec.input_shapes or spec.run_shapes)["input_ids"]
        mask = np.ones((batch, seq), np.int64)
        mask[:, seq - seq // 4:] = 0  # padded tail: the mask path is exercised
        return {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64), "attention_mask": mask}
    cfg = GPT2_CONFIGS[spec.config]
    from transformers import GPT2Config

    gcfg = GPT2Config(**cfg)
    heads, head_dim = gcfg.n_head, gcfg.n_embd // gcfg.n_head
    feeds = {"input_ids": rng.integers(0, vocab, (1, 1)).astype(np.int64),
             "attention_mask": np.ones((1, past + 1), np.int64)}
    for i in range(gcfg.n_layer):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{i}.{kv}"] = rng.standard_normal((1, heads, past, head_dim)).astype(np.float32)
    return feeds


def gpt2_names(layers: int) -> tuple[list[str], list[str]]:
    past = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    return past, [n.replace("past_key_values", "present") for n in past]


def vocab_of(model) -> int:
    config = getattr(getattr(model, "bert", None) or getattr(model, "model", None), "config", None)
    return int(config.vocab_size) if config is not None else 0


# ---------------------------------------------------------------------------------------
# export and compile (here)
# ---------------------------------------------------------------------------------------

def export_onnx(spec: Spec, model, path: Path) -> None:
    import onnx
    import torch

    if spec.family == "resnet":
        shape = spec.input_shapes["image"]
        args, names, outs, dynamic = (torch.zeros(shape),), ["image"], ["logits"], None
    elif spec.family == "bert":
        ids = torch.zeros(2, 16, dtype=torch.int64)
        args, names = (ids, torch.ones(2, 16, dtype=torch.int64)), ["input_ids", "attention_mask"]
        outs = ["last_hidden_state", "pooler_output"]
        dims = {0: "batch", 1: "seq"}
        dynamic = {"input_ids": dims, "attention_mask": dims, "last_hidden_state": dims, "pooler_output": {0: "batch"}}
    else:
        cfg = model.model.config
        past_names, present_names = gpt2_names(cfg.n_layer)
        heads, head_dim = cfg.n_head, cfg.n_embd // cfg.n_head
        args = (torch.zeros(1, 3, dtype=torch.int64), torch.ones(1, 8, dtype=torch.int64),
                *[torch.zeros(1, heads, 5, head_dim) for _ in past_names])
        names, outs = ["input_ids", "attention_mask", *past_names], ["logits", *present_names]
        dynamic = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total_seq"},
                   "logits": {0: "batch", 1: "seq"}, **{n: {0: "batch", 2: "past_seq"} for n in past_names},
                   **{n: {0: "batch", 2: "total_seq"} for n in present_names}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter is deprecated but works offline
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET, input_names=names,
                          output_names=outs, dynamic_axes=dynamic)
    proto = onnx.load(str(path))
    proto.ir_version = min(proto.ir_version, IR_VERSION)
    onnx.save(proto, str(path))


def predicted_costs(onnx_path: Path, spec: Spec) -> dict:
    """The placement solver's view: its predicted latency on the GPU alone and, for a split,
    on cpu+cuda with the transfers it assumes (seconds, bytes)."""
    import hetc

    # a symbolic build is predicted at the shapes the check runs (the solver costs bound shapes)
    shapes = spec.input_shapes or spec.run_shapes or None
    dims = None if spec.run_shapes else spec.dims or None
    out = {}
    for targets in (["cuda"], ["cpu", "cuda"]) if spec.target == "cpu,cuda" else (["cuda"],):
        try:
            plan = hetc.plan(str(onnx_path), targets, input_shapes=shapes, dims=dims)
        except Exception as err:  # noqa: BLE001 - the check still runs without predictions
            out["+".join(targets)] = {"error": str(err).splitlines()[-1][:300]}
            continue
        j = plan.to_json()
        entry = {k: j.get(k) for k in ("solver", "predicted_seconds", "transfer_seconds", "transfer_bytes")}
        entry["devices"] = [{k: d.get(k) for k in ("name", "spec", "ops", "busy_seconds")} for d in j["devices"]]
        t = plan.result.breakdown.transfers
        names = [d.name for d in plan.devices]
        entry["transfers"] = [{"bytes": int(b), "seconds": float(sec), "from": names[f], "to": names[d]}
                              for b, sec, f, d in zip(t.nbytes, t.seconds, t.from_device, t.to_device)]
        out["+".join(targets)] = entry
    from hetc.devices import get_spec

    link = get_spec("nvidia-h100").host_link
    out["host_link"] = dict(link) if isinstance(link, dict) else vars(link)
    return out


TUNED = "-tuned"  # suffix of an artifact compiled with a tuning database (``--tuned``)


def compile_spec(spec: Spec, work: Path, arch: str, cpu: str, database: Path | None = None) -> tuple[list[Path], dict, list[dict]]:
    """Seed, export and compile one model (with ``database``: also as ``NAME-tuned``, its best
    schedules applied); returns (artifact dirs, parameters, info per artifact)."""
    import hetc

    model = build_torch(spec.family, spec.config)
    params = seed_parameters(model, spec.family, spec.seed)
    onnx_path = work / f"{spec.name}.onnx"
    export_onnx(spec, model, onnx_path)
    predicted = predicted_costs(onnx_path, spec)
    arts, infos = [], []
    for db in (None, database) if database is not None else (None,):
        start = time.perf_counter()
        compiled = hetc.compile(str(onnx_path), spec.target.split(","), input_shapes=spec.input_shapes or None,
                                dims=spec.dims or None, arch=[arch], cpu=cpu, database=db)
        seconds = time.perf_counter() - start
        art = work / (spec.name + (TUNED if db else ""))
        compiled.save(str(art))
        info = {"compile_s": round(seconds, 1), "predicted": predicted, "onnx_bytes": onnx_path.stat().st_size}
        if db is not None:
            info.update(tuned_from=spec.name, database=db.name,
                        tuned_kernels=compiled.report["tuning"]["tuned"])
        arts.append(art)
        infos.append(info)
    return arts, params, infos


# ---------------------------------------------------------------------------------------
# constants in a library: find, strip, restore
# ---------------------------------------------------------------------------------------

def find_tensors(data: bytes, min_bytes: int = MIN_EXTERNAL) -> list[tuple[int, int, tuple, str]]:
    """Serialized TVM tensors in ``data``: (offset of their bytes, nbytes, shape, dtype) for
    each header that parses (magic, reserved, device, ndim, dtype, shape, byte size)."""
    found, start = [], 0
    magic = struct.pack("<Q", TENSOR_MAGIC)
    codes = {0: "int", 1: "uint", 2: "float", 4: "bfloat"}
    while (at := data.find(magic, start)) >= 0:
        start = at + 8
        pos = at + 16 + 8  # magic, reserved, DLDevice (2 x int32)
        if pos + 8 > len(data):
            continue
        (ndim,) = struct.unpack_from("<i", data, pos)
        code, bits, lanes = struct.unpack_from("<BBH", data, pos + 4)
        if not 0 <= ndim <= 8 or code not in codes or bits not in (8, 16, 32, 64) or lanes != 1:
            continue
        shape = struct.unpack_from(f"<{ndim}q", data, pos + 8)
        (nbytes,) = struct.unpack_from("<q", data, pos + 8 + 8 * ndim)
        begin = pos + 16 + 8 * ndim
        if nbytes != int(np.prod(shape, dtype=np.int64)) * bits // 8 or begin + nbytes > len(data):
            continue
        if nbytes >= min_bytes:
            found.append((begin, nbytes, tuple(shape), f"{codes[code]}{bits}"))
        start = begin + nbytes
    return found


def _transforms(array: np.ndarray) -> list[str]:
    """How hetc may have laid a parameter out in a library: as is, transposed (2-D), or a
    convolution weight OIHW as OHWI / HWIO, or packed in output-channel blocks of ``ob``
    (``block:ob``: [O/ob, H, W, I, ob], the CPU's conv packing)."""
    if array.ndim == 2:
        return ["identity", "transpose"]
    if array.ndim == 4:
        out = array.shape[0]
        return ["identity", "perm:0,2,3,1", "perm:2,3,1,0",
                *[f"block:{ob}" for ob in (4, 8, 16, 32, 64) if out % ob == 0 and ob < out], f"block:{out}"]
    return ["identity"]


def transform(array: np.ndarray, how: str) -> bytes:
    """The bytes of ``array`` laid out as ``how`` (``_transforms``)."""
    if how == "identity":
        return np.ascontiguousarray(array).tobytes()
    if how == "transpose":
        return np.ascontiguousarray(array.T).tobytes()
    kind, _, arg = how.partition(":")
    if kind == "perm":
        return np.ascontiguousarray(array.transpose([int(x) for x in arg.split(",")])).tobytes()
    if kind == "block":
        ob = int(arg)
        o, i, h, w = array.shape
        return np.ascontiguousarray(array.reshape(o // ob, ob, i, h, w).transpose(0, 3, 4, 2, 1)).tobytes()
    raise ValueError(f"unknown transform {how!r}")


def _match(blob: bytes, params: dict, by_size: dict) -> tuple[str, str] | None:
    """(parameter, transform) whose bytes equal ``blob``, among parameters of its size."""
    for name in by_size.get(len(blob), []):
        array = params[name]
        for how in _transforms(array):
            if transform(array, how) == blob:
                return name, how
    return None


def strip_weights(artifact: Path, params: dict) -> dict:
    """Zero every library constant that is a parameter (or its transpose) and list it in
    ``artifact/weights.json``; returns that record (with the bytes kept and stripped)."""
    manifest = json.loads((artifact / "manifest.json").read_text())
    by_size: dict[int, list[str]] = {}
    for name, array in params.items():
        by_size.setdefault(array.nbytes, []).append(name)
    record = {"entries": [], "kept_bytes": 0, "stripped_bytes": 0, "kept": []}
    for rel in sorted(manifest["files"]):
        if not rel.endswith(".so"):
            continue
        path = artifact / rel
        data = bytearray(path.read_bytes())
        for offset, nbytes, shape, dtype in find_tensors(bytes(data)):
            blob = bytes(data[offset:offset + nbytes])
            hit = _match(blob, params, by_size)
            if hit is None:
                record["kept_bytes"] += nbytes
                record["kept"].append({"file": rel, "shape": list(shape), "dtype": dtype, "bytes": nbytes})
                continue
            record["entries"].append({"file": rel, "offset": offset, "bytes": nbytes, "param": hit[0],
                                      "transform": hit[1]})
            record["stripped_bytes"] += nbytes
            data[offset:offset + nbytes] = bytes(nbytes)
        path.write_bytes(bytes(data))
    (artifact / WEIGHTS).write_text(json.dumps(record, indent=1) + "\n")
    return record


class RestoreError(Exception):
    """One-line failure message."""


def restore(artifact: Path, params: dict) -> int:
    """Write the stripped parameters back into ``artifact``'s libraries and check every file's
    sha256 against the manifest; returns the bytes restored."""
    record = json.loads((artifact / WEIGHTS).read_text())
    by_file: dict[str, list] = {}
    for entry in record["entries"]:
        by_file.setdefault(entry["file"], []).append(entry)
    total = 0
    for rel, entries in by_file.items():
        path = artifact / rel
        data = bytearray(path.read_bytes())
        for e in entries:
            if e["param"] not in params:
                raise RestoreError(f"{artifact.name}: parameter {e['param']} is not in the torch model "
                                   "(a different transformers version names it otherwise?)")
            blob = transform(params[e["param"]], e["transform"])
            if len(blob) != e["bytes"]:
                raise RestoreError(f"{artifact.name}: parameter {e['param']} has {len(blob)} bytes, the "
                                   f"library expects {e['bytes']}")
            data[e["offset"]:e["offset"] + e["bytes"]] = blob
            total += len(blob)
        path.chmod(0o644)
        path.write_bytes(bytes(data))
    manifest = json.loads((artifact / "manifest.json").read_text())
    for rel, digest in manifest["files"].items():
        if hashlib.sha256((artifact / rel).read_bytes()).hexdigest() != digest:
            raise RestoreError(f"{artifact.name}: {rel} differs from the compiled file after restoring the "
                               "weights (the regenerated parameters are not bit-identical)")
    return total


# ---------------------------------------------------------------------------------------
# packing
# ---------------------------------------------------------------------------------------

def pack(out: Path, artifacts: list[Path]) -> Path:
    """``out/artifacts.tar.xz`` of the stripped artifacts (zeroed weights compress away)."""
    target = out / "artifacts.tar.xz"
    with tarfile.open(target, "w:xz", preset=6) as tar:
        for art in artifacts:
            tar.add(art, arcname=art.name)
    return target


def unpack(out: Path, dest: Path) -> list[Path]:
    with tarfile.open(out / "artifacts.tar.xz", "r:xz") as tar:
        tar.extractall(dest, filter="data")
        names = sorted({Path(m.name).parts[0] for m in tar.getmembers()})
    return [dest / n for n in names]


# tuning candidates measured on the device (``--candidates``): per model (schedules per task, cost
# share covered); what one device run times in about a minute on an H100
CANDIDATE_SETTINGS = {"bert-base-s128": (128, 0.95), "resnet50-b8": (32, 0.80), "bert-tiny-s16": (2, 1.0),
                      "resnet-tiny-b2": (2, 1.0)}


def export_candidate_packs(out: Path, names: list[str], arch: str, target: str | None = None) -> list[Path]:
    """``out/NAME.tar.xz`` per model: its tuning candidates (``hetc.tuning.offline``) for
    ``hetc/runtime/measure.py`` on the device; then ``--import-measurements`` and ``--tuned``."""
    from hetc.tuning.offline import export_candidates

    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    packs = []
    for name in names:
        spec = MODELS[name]
        per_task, cover = CANDIDATE_SETTINGS.get(name, (64, 0.9))
        model = build_torch(spec.family, spec.config)
        seed_parameters(model, spec.family, spec.seed)
        onnx_path = work / f"{name}.onnx"
        export_onnx(spec, model, onnx_path)
        print(f"{name}: {per_task} candidates per task, {cover:.0%} of the cost ...", flush=True)
        summary = export_candidates(onnx_path, work / name, target or spec.target, per_task=per_task, cover=cover,
                                    input_shapes=spec.input_shapes or None, dims=spec.dims or None, arch=[arch],
                                    log=lambda line: print(line, flush=True))
        pack_path = out / f"{name}.tar.xz"
        with tarfile.open(pack_path, "w:xz", preset=6) as tar:
            tar.add(work / name, arcname=name)
        packs.append(pack_path)
        print(f"  {summary.candidates} candidates, {summary.tasks} of {summary.tasks_total} tasks, "
              f"{summary.seconds:.0f} s -> {pack_path} ({pack_path.stat().st_size / 2**20:.1f} MiB)", flush=True)
    shutil.rmtree(work)
    return packs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Compile and pack the GPU check's artifacts.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help=f"comma list of {sorted(MODELS)}")
    parser.add_argument("--target", default=None, help="override every model's target (tests: cpu)")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--cpu", default="haswell", help="LLVM CPU of CPU parts (the GPU host's CPU is unknown)")
    parser.add_argument("--max-mib", type=float, default=48, help="refuse a pack larger than this")
    parser.add_argument("--keep", action="store_true", help="keep the unstripped artifacts and ONNX files")
    parser.add_argument("--tuned", type=Path, default=None, metavar="DIR",
                        help="tuning databases DIR/MODEL (hetc tune, or --import-measurements): each such model "
                             "is also compiled with its database, as MODEL-tuned")
    parser.add_argument("--candidates", action="store_true",
                        help="instead of artifacts: OUT/MODEL.tar.xz of tuning candidates to measure on the device")
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"error: unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 1
    out = args.out.absolute()
    if args.candidates:
        export_candidate_packs(out, names, args.arch, args.target)
        return 0
    work = out / "work"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    index = {"arch": args.arch, "models": {}}
    arts = []
    for name in names:
        spec = MODELS[name]
        if args.target:
            spec = Spec(**{**spec.__dict__, "target": args.target})
        database = args.tuned / name if args.tuned is not None and (args.tuned / name).is_dir() else None
        print(f"{name}: compiling for {spec.target}{' (and tuned)' if database else ''} ...", flush=True)
        built, params, infos = compile_spec(spec, work, args.arch, args.cpu, database)
        for art, info in zip(built, infos):
            if args.keep:
                shutil.copytree(art, work / f"{art.name}.full")
            record = strip_weights(art, params)
            info.update(spec=spec.__dict__, stripped_bytes=record["stripped_bytes"], kept_bytes=record["kept_bytes"],
                        artifact_bytes=sum(p.stat().st_size for p in art.rglob("*") if p.is_file()))
            index["models"][art.name] = info
            arts.append(art)
            print(f"  {art.name}: {info['compile_s']} s; weights stripped {record['stripped_bytes'] / 2**20:.1f} MiB, "
                  f"constants kept {record['kept_bytes'] / 2**20:.2f} MiB", flush=True)
    packed = pack(out, arts)
    size = packed.stat().st_size
    index["packed_bytes"] = size
    (out / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    if not args.keep:
        shutil.rmtree(work)
    print(f"{packed}: {size / 2**20:.1f} MiB for {len(arts)} artifacts")
    if size > args.max_mib * 2**20:
        print(f"error: {packed} is {size / 2**20:.1f} MiB, over --max-mib {args.max_mib:g}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
