"""Decoders as users export them, decoded by hetc with the cache in place, against onnxruntime.

    python benchmarks/decode_exports.py [--python optimum=/path/to/python] [--only a,b]
                                        [--new 32] [--json decode_exports.json]

Exports: optimum's ``main_export`` (task ``text-generation-with-past``: GPT-2, Llama, Mistral,
Qwen2, Phi-3, Gemma, OPT, GPT-NeoX, Falcon; the small random-weight configs of
``benchmarks/zoo/optimum_zoo.py``, exported by the Python given for ``optimum``: optimum-onnx
pins an older transformers, see benchmarks/model_zoo.py) and ``torch.onnx.export`` of GPT-2 and
Llama (``examples/hf_models.py``, this Python). Each is compiled with ``kv_cache`` (its dims
read off the graph: batch 1..4, step 1..64, past 0..128) and then:

- ``tokens``: ``hetc.generate`` of ``--new`` greedy tokens after a 2 x 6 prompt, against the
  same loop on onnxruntime (numpy cache in and out): identical or not;
- ``rows``: a batch of 7-, 4- and 2-token prompts decoded together by hetc against each row
  decoded alone by onnxruntime (models with ``position_ids``; the others decode rows of equal
  length only);
- a failure's first line (export, compile or run) is the row's reason.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

OPTIMUM = ["opt-gpt2", "opt-llama", "opt-mistral", "opt-qwen2", "opt-phi3", "opt-gemma", "opt-opt", "opt-gpt-neox",
           "opt-falcon"]
TORCH = ["torch-gpt2", "torch-llama"]
MAX_LEN = 128


def export(name: str, path: Path, python: str | None) -> None:
    if name in TORCH:
        import hf_models

        if name == "torch-gpt2":
            hf_models.export_gpt2(path, "gpt2-tiny", position_ids=True)
        else:
            hf_models.export_llama(path, "llama-tiny")
        return
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([python or sys.executable, str(ROOT / "benchmarks" / "model_zoo.py"), "--export-child", name,
                           "--exporter", "optimum", "--model", str(path)], capture_output=True, text=True, timeout=900,
                          check=False, env=env)
    lines = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines or lines[-1].get("status") == "export-failed":
        reason = lines[-1].get("reason") if lines else (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"export failed: {reason}")


def dims_of(path: Path) -> tuple[dict, int]:
    """Ranges for the graph's symbolic input dims, and its vocabulary size."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    ranges: dict[str, tuple[int, int]] = {}
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim
        for axis, d in enumerate(dims):
            if not d.dim_param:
                continue
            if axis == 0:
                ranges[d.dim_param] = (1, 4)
            elif value.name == "input_ids" or value.name == "position_ids":
                ranges[d.dim_param] = (1, 64)
            elif value.name.startswith("past_key_values."):
                ranges[d.dim_param] = (0, MAX_LEN)
            else:
                ranges.setdefault(d.dim_param, (1, MAX_LEN + 64))
    logits = next(o for o in proto.graph.output if o.name == "logits")
    return ranges, logits.type.tensor_type.shape.dim[-1].dim_value


def check(path: Path, new: int) -> dict:
    import onnxruntime as ort

    import hetc

    ranges, vocab = dims_of(path)
    compiled = hetc.compile(path, dims=ranges, kv_cache=MAX_LEN)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    prompt = np.random.default_rng(0).integers(3, vocab, (2, 6))
    ours, ref = hetc.generate(compiled, prompt, new), hetc.generate(session, prompt, new)
    row = {"tokens": bool(np.array_equal(ours, ref)), "distinct": len(set(ours[:, 6:].ravel().tolist())),
           "transposed_keys": sum(s["transposed"] for s in compiled.manifest.kv_cache["slots"]),
           "slots": len(compiled.manifest.kv_cache["slots"])}
    if "position_ids" in compiled.manifest.kv_cache["step_inputs"]:
        ids = np.random.default_rng(1).integers(3, vocab, (3, 7))
        mask = np.ones((3, 7), np.int64)
        mask[1, 4:] = 0
        mask[2, 2:] = 0
        together = hetc.generate(compiled, ids, new, attention_mask=mask)
        row["rows"] = all(np.array_equal(together[r, 7:], hetc.generate(session, ids[r:r + 1, :int(mask[r].sum())],
                                                                         new)[0, int(mask[r].sum()):])
                          for r in range(3))
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", default=[], metavar="optimum=PATH",
                        help="the Python that has optimum-onnx (default: this one)")
    parser.add_argument("--only", help="comma-separated names: " + ", ".join(OPTIMUM + TORCH))
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--json", type=Path, default=Path("decode_exports.json"))
    args = parser.parse_args()
    pythons = dict(spec.split("=", 1) for spec in args.python)
    names = args.only.split(",") if args.only else OPTIMUM + TORCH
    console = Console(width=None if sys.stdout.isatty() else 130)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            console.print(f"{name} ...")
            path = Path(tmp) / f"{name}.onnx"
            try:
                export(name, path, pythons.get("optimum"))
                rows[name] = {"status": "pass", **check(path, args.new)}
                if not rows[name]["tokens"] or rows[name].get("rows") is False:
                    rows[name]["status"] = "mismatch"
            except Exception as err:  # noqa: BLE001 - each failure is its row's reason
                lines = [ln for ln in str(err).splitlines() if ln.strip()] or [type(err).__name__]
                rows[name] = {"status": "failed", "reason": lines[-1][:200]}
    table = Table(title=f"exported decoders, kv_cache={MAX_LEN}, {args.new} greedy tokens vs onnxruntime")
    for col in ("model", "status", "tokens", "rows alone", "caches (keys transposed)", "reason"):
        table.add_column(col)
    for name, row in rows.items():
        table.add_row(name, row["status"], str(row.get("tokens", "")), str(row.get("rows", "-")),
                      f"{row['slots']} ({row['transposed_keys']})" if "slots" in row else "", row.get("reason", ""))
    console.print(table)
    args.json.write_text(json.dumps(rows, indent=2) + "\n")
    console.print(f"wrote {args.json}")
    return 0 if all(r["status"] == "pass" for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
