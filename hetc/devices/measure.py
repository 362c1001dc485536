"""Measure this machine's CPU as a device spec: ``python -m hetc.devices.measure NAME [-o FILE]``.

- ``peak_flops["float32"]``: the median rate of a 4096 x 4096 float32 matmul with numpy's BLAS
  (all the cores this process may use): the practical peak hetc's CPU kernels are held to.
- ``memory_bandwidth``: the median rate of copying a 256 MiB array (bytes read + written).
- ``launch_overhead``: the median time of calling a compiled one-element TVM kernel, the fixed
  cost of one kernel call in the VM.
- ``memory_bytes``: physical memory (psutil).

CPU timings drift with load: measure on a quiet machine. The spec's ``source`` names the
machine and the date; ``hetc/devices/dev-cpu.json`` is one such measurement.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def _median_seconds(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, repeat: int = 5) -> dict:
    import psutil

    n = 4096
    a, b = (np.random.default_rng(k).standard_normal((n, n)).astype(np.float32) for k in range(2))
    gemm = 2 * n**3 / _median_seconds(lambda: a @ b, repeat)
    src = np.ones(64 << 20, np.float32)
    dst = np.empty_like(src)
    bandwidth = 2 * src.nbytes / _median_seconds(lambda: np.copyto(dst, src), repeat)
    launch = _launch_overhead()
    cores = psutil.cpu_count(logical=False) or 1
    return {
        "name": name,
        "description": f"{_cpu_model()} ({cores} cores) measured by hetc",
        "target": "cpu",
        "arch": "llvm",
        "source": f"measured on {platform.node()} {datetime.date.today()} by hetc.devices.measure "
                  f"(numpy {n}x{n} float32 matmul, 256 MiB copy, one-element TVM kernel call; medians of {repeat})",
        "peak_flops": {"float32": round(gemm, -6)},
        "memory_bytes": float(psutil.virtual_memory().total),
        "memory_bandwidth": round(bandwidth, -6),
        "host_link": {"name": "host memory", "bandwidth": round(bandwidth / 2, -6), "latency": 0.0},
        "launch_overhead": launch,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _launch_overhead() -> float:
    import tvm
    from tvm import te

    x = te.placeholder((1,), "float32", name="x")
    y = te.compute((1,), lambda i: x[i] + 1.0, name="y")
    func = tvm.compile(te.create_prim_func([x, y]), target="llvm")
    xa, ya = tvm.runtime.tensor(np.zeros(1, np.float32)), tvm.runtime.tensor(np.zeros(1, np.float32))
    calls = 10000

    def run() -> None:
        for _ in range(calls):
            func(xa, ya)

    return float(f"{_median_seconds(run, 5) / calls:.3g}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="the spec's name (and file name)")
    parser.add_argument("-o", "--output", type=Path, help="write the JSON spec here (default: stdout)")
    args = parser.parse_args(argv)
    text = json.dumps(measure(args.name), indent=2) + "\n"
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
