"""Regression gate on the ONNX backend node tests (see benchmarks/onnx_conformance.py).

The default run checks a fixed sample, one test per op, in this process. The full suite
(marked `conformance`, run by CI) must keep every test recorded as passing in
tests/conformance_baseline.json, so the pass count never drops below the recorded one. Both
compile every graph input as a run-time input: no input is frozen to its value, so a test whose
shape-deciding input (axes, pads, a shape) arrives at run time must pass as such.
Refresh the record with: python benchmarks/onnx_conformance.py --write-baseline tests/conformance_baseline.json
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnx
import pytest

from hetc import conformance

ROOT = Path(__file__).resolve().parents[1]
BASELINE = json.loads((ROOT / "tests" / "conformance_baseline.json").read_text())
needs_same_onnx = pytest.mark.skipif(onnx.__version__ != BASELINE["onnx"],
                                     reason=f"baseline recorded with onnx {BASELINE['onnx']}")


@pytest.fixture(scope="module")
def tests_root() -> Path:
    return conformance.generate()


@needs_same_onnx
@pytest.mark.parametrize("name", BASELINE["sample"])
def test_node_sample(tests_root, name):
    result = conformance.run_test(tests_root / name, retry_frozen=False)
    assert result.outcome == conformance.PASS, f"{result.outcome}: {result.error}"


@needs_same_onnx
@pytest.mark.slow
@pytest.mark.conformance
def test_full_suite_keeps_every_recorded_pass(tests_root):
    results = conformance.run_suite(conformance.list_tests(tests_root), "hetc", os.cpu_count() or 1,
                                    timeout=300, retry_frozen=False)
    by_name = {r.test: r for r in results}
    lost = [f"{t} ({by_name[t].outcome}: {by_name[t].error})" for t in BASELINE["passing"]
            if by_name[t].outcome != conformance.PASS]
    passes = sum(r.outcome == conformance.PASS for r in results)
    print(f"ONNX node tests: {passes} of {len(results)} pass (recorded: {BASELINE['passes']})")
    assert not lost, f"{len(lost)} recorded passes now fail: {lost[:20]}"
    assert passes >= BASELINE["passes"]


def test_node_test_cache_is_keyed_by_ml_dtypes(monkeypatch, tmp_path):
    # A cache written under ml_dtypes 0.7.0 held zeros for sub-byte casts' expected outputs and
    # failed a CI run under the pinned 0.6: the directory must change with either version.
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setenv("HETC_CACHE", str(tmp_path))
    here = conformance.node_tests_dir()
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "0.0.test" if name == "ml_dtypes" else real(name))
    other = conformance.node_tests_dir()
    assert here.parent == other.parent == tmp_path and here != other
    assert onnx.__version__ in other.name and "0.0.test" in other.name
