"""Weight-only int8 (``weights="int8"``, hetc/passes/weight_int8.py): the kernels compute exactly
``x @ (q * scale)`` with the compile-time quantization, on symbolic rows (the one-row branch and
the tiled rows) and in a decoder with its cache in place; bad options are one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx_util import make, tensor

import hetc
from hetc.errors import UsageError
from hetc.passes.weight_int8 import MIN_ELEMENTS, quantize, reference, row_bound


def _has_dot() -> bool:
    """Whether this CPU has an integer dot product (the int16 form's kernels)."""
    from hetc.backends.cpu.codegen import llvm_target
    from hetc.backends.cpu.schedules.int8 import instruction
    from hetc.options import CompileOptions

    return instruction(llvm_target(CompileOptions())) is not None


def _words(compiled) -> bool:
    """Whether the int8 matmuls run on int16 activations (CPUs with an integer dot product)."""
    rules = {rule for name, rule in compiled.report["kernels"].items() if "matmul_w8" in name}
    assert rules, compiled.report["kernels"]
    return bool(rules & {"int8-vnni", "int8-pmaddwd"})


def test_quantize_is_symmetric_per_output_channel():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(96, 40)).astype(np.float32)
    w[:, 3] = 0  # an all-zero column keeps a usable scale
    w[5, 7] = 40.0  # an outlier sets only its own column's scale
    q, scale = quantize(w)
    assert q.dtype == np.int8 and scale.shape == (40,) and np.abs(q).max() <= 127
    assert (np.abs(q * scale - w) <= scale / 2 + 1e-6).all()
    assert scale[3] == 1 and not q[:, 3].any()
    assert np.isclose(scale[7], 40 / 127) and np.abs(q).max(axis=0)[np.arange(40) != 3].min() == 127


def _linear(k: int, n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    w, b = rng.normal(size=(k, n)).astype(np.float32), rng.normal(size=n).astype(np.float32)
    model = make([helper.make_node("MatMul", ["x", "W"], ["y0"]), helper.make_node("Add", ["y0", "B"], ["y"])],
                 [tensor("x", ["batch", "seq", k])], [tensor("y", ["batch", "seq", n])], {"W": w, "B": b})
    return model, w, b


@pytest.mark.parametrize("seq", [1, 5, 37])
def test_int8_matmul_equals_the_dequantized_weights(seq):
    model, w, b = _linear(192, 80)
    assert w.size >= MIN_ELEMENTS
    compiled = hetc.compile(model, dims={"batch": (1, 4), "seq": (1, 64)}, weights="int8")
    assert any("matmul_w8" in k for k in compiled.report["kernels"])
    x = np.random.default_rng(seq).normal(size=(2, seq, 192)).astype(np.float32)
    y = compiled.run({"x": x})["y"]
    q, scale = quantize(w)
    assert _words(compiled) == _has_dot()
    if _words(compiled):  # activations rounded to int16 per row, exact int32 sums
        expected = reference(x, q, scale) + b
    else:
        expected = (x.astype(np.float64) @ q.astype(np.float64)) * scale + b
    np.testing.assert_allclose(y, expected, rtol=2e-5, atol=2e-5 * np.abs(expected).max())
    dequantized = (x.astype(np.float64) @ q.astype(np.float64)) * scale + b  # int16 rounding: within 1e-4
    np.testing.assert_allclose(y, dequantized, rtol=0, atol=1e-4 * np.abs(dequantized).max())
    exact = x @ w + b  # and it is int8: not the float32 weights' result
    assert np.abs(y - exact).max() > 1e-3 * np.abs(exact).max()
    assert np.abs(y - exact).max() < 0.05 * np.abs(exact).max()


@pytest.mark.parametrize("cpu", [None, "haswell"])
def test_int16_activations_never_overflow_and_drop_out_on_a_zero_row(cpu):
    """The int16 form (``vpdpwssd`` with AVX512-VNNI, ``vpmaddwd`` on AVX2 -- ``--cpu haswell``):
    the worst case for int32 sums (every activation at its row's peak, every weight at 127 of
    the same sign, K = 3072: bound 5504) stays exact, and a zero row gives zeros, not NaN."""
    k, n = 3072, 32
    assert row_bound(k) * 127 * k < 2**31 and (row_bound(k) + 1) * 127 * k >= 2**31
    w = np.full((k, n), 0.5, np.float32)
    w[:, 1] = -0.5
    model = make([helper.make_node("MatMul", ["x", "W"], ["y"])], [tensor("x", ["batch", "seq", k])],
                 [tensor("y", ["batch", "seq", n])], {"W": w})
    compiled = hetc.compile(model, dims={"batch": (1, 4), "seq": (1, 8)}, weights="int8", cpu=cpu)
    assert _words(compiled)
    x = np.full((2, 3, k), 2.0, np.float32)
    x[1, 2] = 0
    y = compiled.run({"x": x})["y"]
    np.testing.assert_allclose(y[0], np.where(np.arange(n) == 1, -k, k) * np.ones((3, 1)), rtol=1e-6)
    assert not y[1, 2].any() and np.isfinite(y).all()


@pytest.mark.parametrize("n", [75, 50257 % 1000])
def test_ragged_columns_are_padded_to_whole_panels(n):
    """No vector width divides the columns (GPT-2's LM head has 50257): the int16 form computes
    zero columns up to whole panels and returns the real ones, not a scalar kernel."""
    k = 96
    w = np.random.default_rng(n).normal(size=(k, n)).astype(np.float32)
    model = make([helper.make_node("MatMul", ["x", "W"], ["y"])], [tensor("x", ["batch", "seq", k])],
                 [tensor("y", ["batch", "seq", n])], {"W": w})
    if not _has_dot():
        pytest.skip("this CPU has no integer dot product: the float kernel")
    compiled = hetc.compile(model, dims={"batch": (1, 4), "seq": (1, 8)}, weights="int8")
    assert _words(compiled)
    x = np.random.default_rng(1).normal(size=(3, 2, k)).astype(np.float32)
    q, scale = quantize(w)
    y = compiled.run({"x": x})["y"]
    assert y.shape == (3, 2, n)
    np.testing.assert_allclose(y, reference(x, q, scale), rtol=2e-5, atol=2e-5 * np.abs(y).max())


@pytest.mark.parametrize("rows", [3, 20])
def test_static_rows_take_the_int16_form_only_when_few(rows):
    """A few static rows run the int16 form in tiles of several rows; more keep the float
    kernel, whose tiles reuse each converted weight vector across rows (``STATIC_ROWS``)."""
    from hetc.passes.weight_int8 import STATIC_ROWS

    k, n = 128, 96
    w = np.random.default_rng(rows).normal(size=(k, n)).astype(np.float32)
    model = make([helper.make_node("MatMul", ["x", "W"], ["y"])], [tensor("x", [rows, k])], [tensor("y", [rows, n])],
                 {"W": w})
    compiled = hetc.compile(model, weights="int8")
    x = np.random.default_rng(2).normal(size=(rows, k)).astype(np.float32)
    q, scale = quantize(w)
    words = _words(compiled)
    assert words == (rows <= STATIC_ROWS and _has_dot())
    expected = reference(x, q, scale) if words else (x.astype(np.float64) @ q.astype(np.float64)) * scale
    np.testing.assert_allclose(compiled.run({"x": x})["y"], expected, rtol=2e-5, atol=2e-5 * np.abs(expected).max())


def test_small_weights_stay_float32():
    model, w, b = _linear(32, 16)  # 512 elements < MIN_ELEMENTS
    compiled = hetc.compile(model, dims={"batch": (1, 2), "seq": (1, 8)}, weights="int8")
    assert not any("matmul_w8" in k for k in compiled.report["kernels"])
    x = np.ones((1, 3, 32), np.float32)
    np.testing.assert_allclose(compiled.run({"x": x})["y"], x @ w + b, rtol=1e-5, atol=1e-5)


@pytest.mark.torch
def test_an_int8_decoder_decodes_with_its_cache_in_place(tmp_path):
    pytest.importorskip("torch", reason="torch exports the model")
    import hf_models

    path = hf_models.export_llama(tmp_path / "llama.onnx", "llama-tiny")
    dims = {"batch": (1, 2), "seq": (1, 32), "past_seq": (0, 64), "total_seq": (1, 64)}
    fp32 = hetc.compile(path, dims=dims, kv_cache=64)
    int8 = hetc.compile(path, dims=dims, kv_cache=64, weights="int8")
    assert sum("matmul_w8" in k for k in int8.report["kernels"]) >= 4  # q/k/v/o, MLP, LM head
    prompt = np.random.default_rng(0).integers(0, 1000, (2, 6))
    a, b = hetc.session(fp32, 2).prefill(prompt), hetc.session(int8, 2).prefill(prompt)
    assert np.abs(a - b).max() < 0.1 * np.abs(a).max()
    assert hetc.generate(int8, prompt, 8).shape == (2, 14)


def test_bad_weight_options_are_one_line_errors():
    model, _, _ = _linear(64, 64)
    with pytest.raises(UsageError, match="invalid --weights 'int4'; choose int8"):
        hetc.compile(model, weights="int4")
    with pytest.raises(UsageError, match="--weights int8 is for the CPU target"):
        hetc.compile(model, target="cuda", weights="int8")
