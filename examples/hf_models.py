"""Transformers models with symbolic dims, exported to ONNX with random weights (no downloads).

    python examples/hf_models.py OUT_DIR [bert-base|bert-tiny]

writes ``OUT_DIR/<name>.onnx``: a ``transformers`` BertModel built from a config (seeded random
weights), exported by ``torch.onnx.export`` (TorchScript exporter, opset 17) with inputs
``input_ids`` and ``attention_mask`` of shape ``[batch, seq]`` and outputs
``last_hidden_state [batch, seq, hidden]`` and ``pooler_output [batch, hidden]``: the graph
computes its shapes at run time (``Shape -> Gather -> Concat``, masks from ``Range``), as
exported models do.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

OPSET = 17
IR_VERSION = 10  # onnxruntime refuses IR versions newer than it knows

# name -> BertConfig arguments
BERT_CONFIGS = {
    "bert-base": {},  # 12 layers, hidden 768, 12 heads, seq up to 512
    "bert-tiny": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 256,
                  "vocab_size": 1000},
}


def export_bert(path: Path, config: str | dict = "bert-tiny", seed: int = 0) -> Path:
    """Export a random-weight BertModel with symbolic ``batch`` and ``seq`` to ``path``."""
    import onnx
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    args = BERT_CONFIGS[config] if isinstance(config, str) else config
    model = BertModel(BertConfig(**args)).eval()

    class Wrapper(torch.nn.Module):  # transformers 5 takes these by keyword only
        def __init__(self, bert) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    ids = torch.randint(0, model.config.vocab_size, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    dims = {0: "batch", 1: "seq"}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter is deprecated but works offline
        torch.onnx.export(Wrapper(model), (ids, mask), str(path), dynamo=False, opset_version=OPSET,
                          input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state", "pooler_output"],
                          dynamic_axes={"input_ids": dims, "attention_mask": dims,
                                        "last_hidden_state": dims, "pooler_output": {0: "batch"}})
    proto = onnx.load(str(path))
    proto.ir_version = min(proto.ir_version, IR_VERSION)
    onnx.save(proto, str(path))
    return path


def bert_inputs(batch: int, seq: int, vocab: int = 1000, seed: int = 0) -> dict:
    """Token ids and a padding mask (the last quarter of each row but the first is padding)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[1:, seq - seq // 4:] = 0
    return {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64), "attention_mask": mask}


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    out = Path(argv[0])
    for name in argv[1:] or ["bert-tiny"]:
        print(export_bert(out / f"{name}.onnx", name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
