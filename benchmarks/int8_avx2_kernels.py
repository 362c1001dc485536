"""The int8 inner loops of an AVX2 CPU without VNNI, exact and saturating, side by side.

    python benchmarks/int8_avx2_kernels.py [--rounds 5] [--json int8_avx2_kernels.json]

Two register tiles of the same shape (4 rows x 3 vectors of 8 int32 lanes, a K of 768 in L1,
what hetc picks for BERT-base's matmuls), compiled by g++ -O3 for this machine's CPU and timed
in one process, alternating, round by round:

- **hetc's exact step** (``schedules/int8.py``, ``PMADDWD``): rows widened to int16, a pair
  broadcast per row, weights sign-extended from int8 (``vpmovsxbw``), ``vpmaddwd``, ``vpaddd``:
  16 products per multiply, never saturating.
- **onnxruntime's AVX2 step** (MLAS's u8 x s8 kernel): four uint8 per broadcast,
  ``vpmaddubsw`` (32 products, pairs summed in int16: they saturate above 32,767), then
  ``vpmaddwd`` by ones and ``vpaddd``.

Then, for the example int8 models (``examples/models.py``: onnxruntime's static QDQ, per
channel), how many weight pairs could overflow ``vpmaddubsw``'s int16 pair sum with some
uint8 input (both weights of a pair of one sign and ``255 * (|w0| + |w1|) > 32767``), and how
many layers have none: the condition under which the saturating step would be exact. Prints
tables and writes JSON with the CPU (LLVM's mcpu and the SIMD flags).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hetc.benchmark import cpu_features

_SOURCE = r"""
#include <immintrin.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
enum { ROWS = 4, PANELS = 3, K = 768, CALLS = 20000 };

// hetc: int16 row pairs broadcast, int8 weights sign-extended, vpmaddwd + vpaddd
__attribute__((noinline)) void exact(const int16_t* a, const int8_t* w, int32_t* c) {
  __m256i acc[ROWS][PANELS];
  for (int r = 0; r < ROWS; ++r) for (int p = 0; p < PANELS; ++p) acc[r][p] = _mm256_setzero_si256();
  for (int k = 0; k < K / 2; ++k) {
    __m256i v[PANELS];
    for (int p = 0; p < PANELS; ++p) v[p] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(w + (k * PANELS + p) * 16)));
    for (int r = 0; r < ROWS; ++r) {
      int32_t pair; std::memcpy(&pair, a + r * K + 2 * k, 4);
      __m256i x = _mm256_set1_epi32(pair);
      for (int p = 0; p < PANELS; ++p) acc[r][p] = _mm256_add_epi32(acc[r][p], _mm256_madd_epi16(x, v[p]));
    }
  }
  for (int r = 0; r < ROWS; ++r) for (int p = 0; p < PANELS; ++p) _mm256_storeu_si256((__m256i*)(c + (r * PANELS + p) * 8), acc[r][p]);
}

// onnxruntime (MLAS): uint8 quads broadcast, vpmaddubsw (saturating int16 pairs) + vpmaddwd(1) + vpaddd
__attribute__((noinline)) void saturating(const uint8_t* a, const int8_t* w, int32_t* c) {
  __m256i acc[ROWS][PANELS]; const __m256i ones = _mm256_set1_epi16(1);
  for (int r = 0; r < ROWS; ++r) for (int p = 0; p < PANELS; ++p) acc[r][p] = _mm256_setzero_si256();
  for (int k = 0; k < K / 4; ++k) {
    __m256i v[PANELS];
    for (int p = 0; p < PANELS; ++p) v[p] = _mm256_loadu_si256((const __m256i*)(w + (k * PANELS + p) * 32));
    for (int r = 0; r < ROWS; ++r) {
      int32_t quad; std::memcpy(&quad, a + r * K + 4 * k, 4);
      __m256i x = _mm256_set1_epi32(quad);
      for (int p = 0; p < PANELS; ++p)
        acc[r][p] = _mm256_add_epi32(acc[r][p], _mm256_madd_epi16(_mm256_maddubs_epi16(x, v[p]), ones));
    }
  }
  for (int r = 0; r < ROWS; ++r) for (int p = 0; p < PANELS; ++p) _mm256_storeu_si256((__m256i*)(c + (r * PANELS + p) * 8), acc[r][p]);
}

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  static int16_t a16[ROWS * K]; static uint8_t a8[ROWS * K]; static int8_t w[K * PANELS * 8]; static int32_t c[2][ROWS * PANELS * 8];
  for (int i = 0; i < ROWS * K; ++i) { a16[i] = i % 100; a8[i] = i % 100; }
  for (int i = 0; i < K * PANELS * 8; ++i) w[i] = (i * 7) % 100 - 50;
  double macs = double(CALLS) * ROWS * PANELS * 8 * K;
  for (int round = 0; round < rounds; ++round) {
    for (int kind = 0; kind < 2; ++kind) {
      double best = 1e30;
      for (int rep = 0; rep < 5; ++rep) {
        auto t = std::chrono::steady_clock::now();
        for (int i = 0; i < CALLS; ++i) { if (kind) saturating(a8, w, c[1]); else exact(a16, w, c[0]); asm volatile("" ::: "memory"); }
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
        if (s < best) best = s;
      }
      std::printf("%s %d %.3f\n", kind ? "saturating" : "exact", round, macs / best / 1e9);
    }
  }
}
"""


def run_kernels(rounds: int) -> dict:
    """Compile and run the two loops; GMAC/s per core of each, per round (best of 5 timings)."""
    with tempfile.TemporaryDirectory() as tmp:
        source, binary = Path(tmp) / "kernels.cc", Path(tmp) / "kernels"
        source.write_text(_SOURCE)
        subprocess.run([os.environ.get("CXX", "g++"), "-O3", "-march=native", str(source), "-o", str(binary)],
                       check=True, capture_output=True, text=True)
        out = subprocess.run([str(binary), str(rounds)], check=True, capture_output=True, text=True).stdout
    rates: dict[str, list[float]] = {"exact": [], "saturating": []}
    for line in out.splitlines():
        match = re.match(r"(exact|saturating) \d+ ([0-9.]+)", line)
        if match:
            rates[match.group(1)].append(float(match.group(2)))
    return rates


def overflow_pairs(names: list[str]) -> list[dict]:
    """Per example int8 model: weight pairs (adjacent input channels, per output channel and tap)
    whose ``vpmaddubsw`` sum can leave int16 for some uint8 input, and layers without any."""
    import onnx
    from onnx import numpy_helper

    from examples import models as examples

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path = examples.write(name, Path(tmp))
            path = path[0] if isinstance(path, tuple) else path
            model = onnx.load(path)
            inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
            pairs = unsafe = layers = clean = 0
            for node in model.graph.node:
                w = inits.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
                if w is None or w.dtype != np.int8 or w.ndim != 4 or w.shape[1] % 2:
                    continue
                per_tap = np.moveaxis(w, 1, -1).reshape(w.shape[0], -1, w.shape[1] // 2, 2).astype(np.int32)
                bad = (np.clip(per_tap, 0, None).sum(-1) * 255 > 32767) | (np.clip(per_tap, None, 0).sum(-1) * 255 < -32768)
                pairs, unsafe, layers, clean = pairs + bad.size, unsafe + int(bad.sum()), layers + 1, clean + (not bad.any())
            rows.append({"model": name, "pairs": pairs, "unsafe_pairs": unsafe, "layers": layers, "layers_without": clean})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", default="resnet50_int8,mobilenet_v2_int8")
    parser.add_argument("--json", type=Path, default=Path("int8_avx2_kernels.json"))
    args = parser.parse_args()
    machine = cpu_features()
    if "avx2" not in machine["cpuinfo_simd"]:
        sys.exit("error: this CPU has no AVX2")
    rates = run_kernels(args.rounds)
    console = Console()
    table = Table(title=f"int8 4x3 register tile, K 768 in L1, one core ({machine['llvm_mcpu']}: "
                        f"{', '.join(machine['cpuinfo_simd'])}); GMAC/s, {args.rounds} rounds")
    for column in ("step", "median", "min", "max", "x exact"):
        table.add_column(column, justify="left" if column == "step" else "right")
    exact = statistics.median(rates["exact"])
    for kind, label in (("exact", "vpmovsxbw, vpmaddwd, vpaddd (hetc, exact)"),
                        ("saturating", "vpmaddubsw, vpmaddwd by 1, vpaddd (onnxruntime, saturates)")):
        values = rates[kind]
        table.add_row(label, f"{statistics.median(values):.1f}", f"{min(values):.1f}", f"{max(values):.1f}",
                      f"{statistics.median(values) / exact:.2f}")
    console.print(table)
    pairs = overflow_pairs([m for m in args.models.split(",") if m])
    table = Table(title="weight pairs that can saturate vpmaddubsw (255 * same-sign |w0| + |w1| > 32767)")
    for column in ("model", "pairs", "can saturate", "layers", "layers with none"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for row in pairs:
        table.add_row(row["model"], str(row["pairs"]), f"{row['unsafe_pairs']} ({100 * row['unsafe_pairs'] / row['pairs']:.2f}%)",
                      str(row["layers"]), str(row["layers_without"]))
    console.print(table)
    args.json.write_text(json.dumps({"machine": machine, "gmacs_per_core": rates, "pairs": pairs}, indent=1))
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
