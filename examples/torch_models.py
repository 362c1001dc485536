"""Real-world-shaped ONNX models exported from hand-written torch modules (no downloads).

Defines, in plain torch (no torchvision / transformers), randomly initialised but seeded:

* ``resnet18``     -- torchvision's ResNet-18 (BasicBlock, [2, 2, 2, 2], 1000 classes)
* ``resnet50``     -- torchvision's ResNet-50 (Bottleneck, [3, 4, 6, 3], 1000 classes)
* ``mobilenet_v2`` -- torchvision's MobileNetV2 (inverted residuals, ReLU6, width 1.0)
* ``bert_encoder`` -- a small post-LN BERT encoder (hidden 256, 4 heads, 4 layers, seq 64)

BatchNorm layers get non-trivial running statistics and affine parameters, and are kept
as ``BatchNormalization`` nodes in the ONNX graph (not fused into the convolutions by the
exporter), so that a compiler's own BN folding is exercised. Run as a script::

    python examples/torch_models.py OUT_DIR                 # all models
    python examples/torch_models.py OUT_DIR resnet18        # some of them

writes ``OUT_DIR/<name>.onnx`` (opset 17, static shapes, weights inline) and
``OUT_DIR/<name>_inputs.npz`` (arrays keyed by ONNX input name).
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - depends on the environment
    if __name__ == "__main__":
        raise SystemExit("examples/torch_models.py needs torch: pip install torch==2.13.0") from exc
    raise ImportError("examples/torch_models.py needs torch: pip install torch==2.13.0") from exc

OPSET = 17
IR_VERSION = 10  # onnxruntime refuses IR versions newer than it knows
SEED = 0

Inputs = dict[str, torch.Tensor]


def _randomize_norms(model: nn.Module) -> None:
    """Give every BatchNorm/LayerNorm non-trivial statistics and affine parameters."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm2d, nn.LayerNorm)):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout)]


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity (or 1x1 conv-BN) shortcut."""

    expansion = 1

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv_bn(cin, cout, 3, stride)
        self.conv2, self.bn2 = _conv_bn(cout, cout, 3)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (nn.Sequential(*_conv_bn(cin, cout, 1, stride))
                           if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (stride here, as torchvision v1.5), 1x1 expand x4, with a shortcut."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1, self.bn1 = _conv_bn(cin, width, 1)
        self.conv2, self.bn2 = _conv_bn(width, width, 3, stride)
        self.conv3, self.bn3 = _conv_bn(width, cout, 1)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (nn.Sequential(*_conv_bn(cin, cout, 1, stride))
                           if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class ResNet(nn.Module):
    """torchvision's ResNet layout: stem, four stages of blocks, pool, fc (``resnet18``:
    BasicBlock [2, 2, 2, 2]; ``resnet50``: Bottleneck [3, 4, 6, 3])."""

    def __init__(self, block: type[nn.Module] = BasicBlock, depths=(2, 2, 2, 2), num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, cin = [], 64
        for i, (width, depth) in enumerate(zip((64, 128, 256, 512), depths)):
            blocks = []
            for j in range(depth):
                blocks.append(block(cin, width, 2 if i > 0 and j == 0 else 1))
                cin = width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class InvertedResidual(nn.Module):
    """1x1 expand (ReLU6) -> 3x3 depthwise (ReLU6) -> 1x1 linear projection (+ residual)."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [*_conv_bn(cin, hidden, 1), nn.ReLU6(inplace=True)]
        layers += [*_conv_bn(hidden, hidden, 3, stride, groups=hidden), nn.ReLU6(inplace=True),
                   *_conv_bn(hidden, cout, 1)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision ``mobilenet_v2`` layout (width multiplier 1.0)."""

    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))  # t, c, n, s

    def __init__(self, num_classes: int = 1000, width: float = 1.0) -> None:
        super().__init__()
        cin, last = _make_divisible(32 * width), _make_divisible(1280 * max(1.0, width))
        features: list[nn.Module] = [nn.Sequential(*_conv_bn(3, cin, 3, 2), nn.ReLU6(inplace=True))]
        for t, c, n, s in self.SETTINGS:
            cout = _make_divisible(c * width)
            for i in range(n):
                features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(nn.Sequential(*_conv_bn(cin, last, 1), nn.ReLU6(inplace=True)))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.01)
                nn.init.normal_(m.bias, 0.0, 0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


class BertLayer(nn.Module):
    """Post-LN transformer layer: self-attention + residual/LN, GELU FFN + residual/LN."""

    def __init__(self, hidden: int, heads: int, intermediate: int, eps: float = 1e-12) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = nn.Linear(intermediate, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=eps)

    def _split(self, x: torch.Tensor) -> torch.Tensor:  # [B, S, H*D] -> [B, H, S, D]
        return x.view(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2)
        ctx = ctx.reshape(x.shape[0], x.shape[1], self.heads * self.head_dim)
        x = self.attn_norm(self.attn_out(ctx) + x)
        h = self.output(nn.functional.gelu(self.intermediate(x), approximate="none"))
        return self.out_norm(h + x)


class BertEncoder(nn.Module):
    """Word + position embeddings, LayerNorm, post-LN layers and a tanh pooler on [CLS]."""

    def __init__(self, vocab: int = 1000, hidden: int = 256, heads: int = 4, layers: int = 4,
                 intermediate: int = 1024, max_positions: int = 128) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.emb_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(hidden, heads, intermediate) for _ in range(layers))
        self.pooler = nn.Linear(hidden, hidden)
        self.register_buffer("position_ids", torch.arange(max_positions)[None], persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.bias, 0.0, 0.02)

    def forward(self, input_ids: torch.Tensor,
                attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        positions = self.position_ids[:, : input_ids.shape[1]]
        x = self.emb_norm(self.word_embeddings(input_ids) + self.position_embeddings(positions))
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        return x, torch.tanh(self.pooler(x[:, 0]))


class SmallCNN(nn.Module):
    """A small edge CNN (the FPGA examples' size): conv-BN-ReLU, a depthwise-separable block with
    a residual, max pooling, global average pooling and a linear classifier; 32x32 input."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(3, 16, 3), nn.ReLU())
        self.block = nn.Sequential(*_conv_bn(16, 16, 3, groups=16), nn.ReLU6(), *_conv_bn(16, 16, 1))
        self.down = nn.Sequential(nn.MaxPool2d(2), *_conv_bn(16, 32, 3, stride=2), nn.ReLU())
        self.fc = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.down(torch.relu(x + self.block(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def _image_model(cls: type[nn.Module], size: int = 224) -> Callable[[], tuple[nn.Module, Inputs]]:
    def build() -> tuple[nn.Module, Inputs]:
        torch.manual_seed(SEED)
        model = cls()
        _randomize_norms(model)
        gen = torch.Generator().manual_seed(SEED + 1)
        return model.eval(), {"input": torch.randn(1, 3, size, size, generator=gen)}
    build.__doc__ = f"Seeded {cls.__name__} in eval mode and a [1, 3, {size}, {size}] image."
    return build


def bert_encoder(seq_len: int = 64, vocab: int = 1000) -> tuple[nn.Module, Inputs]:
    """Seeded BertEncoder in eval mode, random token ids and a mask with 8 padded positions."""
    torch.manual_seed(SEED)
    model = BertEncoder(vocab=vocab)
    _randomize_norms(model)
    gen = torch.Generator().manual_seed(SEED + 1)
    input_ids = torch.randint(0, vocab, (1, seq_len), generator=gen, dtype=torch.int64)
    attention_mask = torch.ones(1, seq_len, dtype=torch.int64)
    attention_mask[:, -8:] = 0
    return model.eval(), {"input_ids": input_ids, "attention_mask": attention_mask}


class ResNet18(ResNet):
    """torchvision ``resnet18``."""


class ResNet50(ResNet):
    """torchvision ``resnet50``."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__(Bottleneck, (3, 4, 6, 3), num_classes)


MODELS: dict[str, Callable[[], tuple[nn.Module, Inputs]]] = {
    "resnet18": _image_model(ResNet18),
    "resnet50": _image_model(ResNet50),
    "mobilenet_v2": _image_model(MobileNetV2),
    "small_cnn": _image_model(SmallCNN, 32),
    "bert_encoder": bert_encoder,
}
"""name -> builder of (eval-mode model, example inputs in forward-argument order)."""
OUTPUT_NAMES: dict[str, list[str]] = {"resnet18": ["logits"], "resnet50": ["logits"], "mobilenet_v2": ["logits"],
                                      "small_cnn": ["logits"],
                                      "bert_encoder": ["last_hidden_state", "pooler_output"]}


def export(name: str, out_dir: Path, *, fold_batchnorm: bool = False, dynamic_batch: bool = False
           ) -> tuple[Path, Path]:
    """Export model ``name`` to ``out_dir/<name>.onnx`` plus ``out_dir/<name>_inputs.npz``.

    With ``fold_batchnorm`` the exporter fuses BatchNorm into the preceding Conv (torch's
    eval-mode peephole); by default BatchNormalization nodes are kept in the graph. With
    ``dynamic_batch`` axis 0 of every input and output is the symbolic dim ``batch``.
    """
    import numpy as np
    import onnx
    from onnx import helper

    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; choose from {sorted(MODELS)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model, inputs = MODELS[name]()
    onnx_path, npz_path = out_dir / f"{name}.onnx", out_dir / f"{name}_inputs.npz"
    mode = torch.onnx.TrainingMode.EVAL if fold_batchnorm else torch.onnx.TrainingMode.PRESERVE
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter is deprecated but works offline
        torch.onnx.export(model, tuple(inputs.values()), str(onnx_path), dynamo=False,
                          opset_version=OPSET, input_names=list(inputs),
                          output_names=OUTPUT_NAMES[name], training=mode,
                          do_constant_folding=True, external_data=False,
                          dynamic_axes={n: {0: "batch"} for n in [*inputs, *OUTPUT_NAMES[name]]}
                          if dynamic_batch else None)
    proto = onnx.load(str(onnx_path))
    proto.ir_version = min(proto.ir_version, IR_VERSION)
    proto.producer_name = "hetc-examples/torch"
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, str(onnx_path))
    np.savez(npz_path, **{v.name: inputs[v.name].numpy().astype(
        helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)) for v in proto.graph.input})
    return onnx_path, npz_path


def main(argv: list[str]) -> int:
    """``python examples/torch_models.py OUT_DIR [names...]``."""
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    names = argv[1:] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"unknown model(s) {unknown}; choose from {sorted(MODELS)}", file=sys.stderr)
        return 2
    for name in names:
        start = time.perf_counter()
        onnx_path, _ = export(name, Path(argv[0]))
        print(f"{name}: {onnx_path} ({time.perf_counter() - start:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
