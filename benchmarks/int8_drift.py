"""What int8 weights change in a decoder's output: hetc ``--weights int8`` against hetc float32.

    python benchmarks/int8_drift.py [--models trained,llama-134m,gpt2-124m] [--tokens 256]
                                    [--train-steps 800] [--json int8_drift.json]

Per model, both builds with the cache in place (``kv_cache``), then:

- **teacher-forced**: both builds are fed the same ``--tokens`` tokens after a prompt, one per
  step (the trained model: the source text that follows its prompt; the random ones: the
  float32 build's greedy tokens), and at every step the int8 build's top-1 is compared with
  float32's (``top1_agreement``) and the largest |logit difference| is taken, also relative to
  the largest |logit| (``max_logit_diff``, ``max_rel``);
- **free-running**: the int8 build decodes on its own; how many tokens stay identical to the
  float32 build's before the first difference (``identical_prefix``).

Models: ``trained`` is ``examples/hf_models.py`` ``train_byte_gpt2`` (a 4-layer GPT-2 trained
here on bytes of the standard library's source for ``--train-steps`` steps, then exported; its
prompt is a line of that source); the others are random-weight configs (their near-uniform
logits make top-1 a coin toss between close candidates: the drift figures that matter there
are the logit differences).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import decode

import hetc
from hetc.benchmark import cpu_features


def build(name: str, work: Path, steps: int, tokens: int) -> tuple[Path, np.ndarray, np.ndarray | None, int]:
    """(onnx path, prompt [1, n], the text to feed after it or None, max positions) for a model
    name; the trained model is fed the source that follows its prompt (a function definition of
    the last standard library file it saw), the others their float32 build's own tokens."""
    import hf_models

    path = work / f"{name}.onnx"
    if name == "trained":
        model, text = hf_models.train_byte_gpt2(steps)
        hf_models.export_decoder(path, model, True)
        start = text.rindex(b"\ndef ") + 1
        window = np.array(list(text[start:start + 32 + tokens]), np.int64)
        return path, window[None, :32], window[32:], 512
    vocab, positions = decode.positions_of(name)  # a GPT2_CONFIGS or LLAMA_CONFIGS name, exported as decode.py does
    decode.export(name, path)
    return path, np.random.default_rng(0).integers(0, vocab, (1, 16)), None, positions


def drift(fp32, int8, prompt: np.ndarray, tokens: int, text: np.ndarray | None = None) -> dict:
    """Teacher-forced agreement over ``text`` (default: the float32 build's greedy tokens) and
    the int8 build's free-running identical prefix (module docstring)."""
    greedy = hetc.generate(fp32, prompt, tokens)[0]
    reference = greedy if text is None else np.concatenate([prompt[0], text[:tokens]])
    a, b = hetc.session(fp32, 1), hetc.session(int8, 1)
    la, lb = a.prefill(prompt), b.prefill(prompt)
    agree, diffs, scale = [], [], []
    for i in range(tokens):
        agree.append(int(np.argmax(la)) == int(np.argmax(lb)))
        diffs.append(float(np.abs(la - lb).max()))
        scale.append(float(np.abs(la).max()))
        if i + 1 < tokens:
            token = reference[prompt.shape[1] + i:prompt.shape[1] + i + 1]
            la, lb = a.step(token), b.step(token)
    own = hetc.generate(int8, prompt, tokens)[0]
    differ = np.flatnonzero(own[prompt.shape[1]:] != greedy[prompt.shape[1]:])
    return {"top1_agreement": float(np.mean(agree)), "max_logit_diff": max(diffs),
            "max_rel": max(d / s for d, s in zip(diffs, scale)), "median_logit_diff": float(np.median(diffs)),
            "identical_prefix": int(differ[0]) if len(differ) else tokens, "tokens": tokens}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="trained,llama-134m,gpt2-124m")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--train-steps", type=int, default=800)
    parser.add_argument("--json", type=Path, default=Path("int8_drift.json"))
    args = parser.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 130)
    result = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
              "cpu": cpu_features(), "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            console.print(f"{name} ...")
            start = time.perf_counter()
            path, prompt, text, positions = build(name, Path(tmp), args.train_steps, args.tokens)
            max_len = min(positions, prompt.shape[1] + args.tokens + 1)
            dims = {"batch": (1, 1), "seq": (1, 64), "past_seq": (0, max_len), "total_seq": (1, max_len)}
            fp32 = hetc.compile(path, dims=dims, kv_cache=max_len)
            int8 = hetc.compile(path, dims=dims, kv_cache=max_len, weights="int8")
            tokens = min(args.tokens, max_len - prompt.shape[1] - 1)
            result["models"][name] = {**drift(fp32, int8, prompt, tokens, text), "seconds": time.perf_counter() - start,
                                      "fed": "the source text" if text is not None else "float32's greedy tokens"}
    table = Table(title=f"int8 weights vs float32 (hetc, per-channel scales), {result['cpu']['cpu_model']} "
                        f"(LLVM {result['cpu']['llvm_mcpu']})")
    for col in ("model", "tokens", "top-1 agreement", "max |dlogit|", "max rel", "median |dlogit|", "same prefix"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for name, row in result["models"].items():
        table.add_row(name, str(row["tokens"]), f"{100 * row['top1_agreement']:.1f}%", f"{row['max_logit_diff']:.4f}",
                      f"{100 * row['max_rel']:.2f}%", f"{row['median_logit_diff']:.4f}", str(row["identical_prefix"]))
    console.print(table)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
