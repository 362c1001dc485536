"""Run ONNX backend node tests (generated from the installed onnx package) through hetc."""

from __future__ import annotations

import functools
from pathlib import Path

from hetc import conformance


@functools.cache
def node_tests_root() -> Path:
    return conformance.generate()


def run_node_test(name: str) -> conformance.Result:
    return conformance.run_test(node_tests_root() / name, "hetc")
