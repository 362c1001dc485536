"""Autoregressive decoding: a GPT-2 with its KV cache as inputs/outputs, compiled once with
symbolic ``batch``, ``seq``, ``past_seq``, ``total_seq``, runs the prompt (empty past) and every
decoding step, and ``hetc.generate`` gives the tokens onnxruntime's loop gives."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close

import hetc
from hetc.errors import InputError, UsageError

pytestmark = pytest.mark.torch

DIMS = {"batch": (1, 4), "seq": (1, 128), "past_seq": (0, 128), "total_seq": (1, 128)}


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    pytest.importorskip("torch", reason="torch exports the model")
    pytest.importorskip("transformers", reason="transformers builds the model")
    import hf_models  # examples/, put on sys.path by conftest
    import onnxruntime as ort

    path = hf_models.export_gpt2(tmp_path_factory.mktemp("gpt2") / "gpt2.onnx", "gpt2-tiny")
    return hetc.compile(path, dims=DIMS), ort.InferenceSession(str(path)), path


def test_greedy_tokens_match_onnxruntime(gpt2):
    compiled, session, _ = gpt2
    prompt = np.random.default_rng(0).integers(0, 1000, (2, 6))
    ours = hetc.generate(compiled, prompt, 20)
    ref = hetc.generate(session, prompt, 20)
    assert ours.shape == (2, 26)
    np.testing.assert_array_equal(ours[:, :6], prompt)
    np.testing.assert_array_equal(ours, ref)
    assert len(set(ours[:, 6:].ravel().tolist())) > 3  # not one repeated token: a real comparison
    from hetc.generate import CompiledRunner

    np.testing.assert_array_equal(hetc.generate(CompiledRunner(compiled, resident=False), prompt, 20), ref)


@pytest.mark.parametrize(("batch", "past", "seq"), [(1, 0, 5), (2, 9, 1), (1, 100, 3)])
def test_one_artifact_runs_prompt_and_steps_at_any_past_length(gpt2, batch, past, seq):
    compiled, session, _ = gpt2
    rng = np.random.default_rng(past)
    feeds = {"input_ids": rng.integers(0, 1000, (batch, seq)),
             "attention_mask": np.ones((batch, past + seq), np.int64)}
    for name in compiled.input_names[2:]:
        feeds[name] = rng.normal(size=(batch, 2, past, 32)).astype(np.float32)
    got = compiled.run(feeds)
    for name, ref in zip(compiled.output_names, session.run(None, feeds)):
        assert got[name].shape == ref.shape
        assert_close(got[name], ref)
    assert got["present.1.value"].shape == (batch, 2, past + seq, 32)


def test_one_token_build_takes_the_prompt_token_by_token(gpt2):
    """``seq`` (and ``batch``) declared with one value are static: the weight matmuls get static
    shapes (the CPU's contraction schedules), ``past_seq`` stays symbolic, and ``generate``
    feeds the prompt one token per step."""
    _, session, path = gpt2
    compiled = hetc.compile(path, dims={**DIMS, "batch": (1, 1), "seq": (1, 1)})
    assert compiled.manifest.inputs[0].shape == (1, 1) and compiled.manifest.outputs[0].shape == (1, 1, 1000)
    assert set(compiled.manifest.dims) == {"past_seq", "total_seq"}
    prompt = np.random.default_rng(2).integers(0, 1000, (1, 7))
    np.testing.assert_array_equal(hetc.generate(compiled, prompt, 12), hetc.generate(session, prompt, 12))


def test_padded_prompt_rows_decode_like_onnxruntime(gpt2):
    compiled, session, _ = gpt2
    prompt = np.random.default_rng(1).integers(0, 1000, (2, 5))
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    np.testing.assert_array_equal(hetc.generate(compiled, prompt, 6, attention_mask=mask),
                                  hetc.generate(session, prompt, 6, attention_mask=mask))


def test_eos_stops_generation(gpt2):
    compiled, _, _ = gpt2
    prompt = np.random.default_rng(0).integers(0, 1000, (1, 6))
    first = hetc.generate(compiled, prompt, 3)
    stopped = hetc.generate(compiled, prompt, 10, eos_token_id=int(first[0, 7]))
    np.testing.assert_array_equal(stopped, first[:, :8])


@pytest.mark.parametrize(("call", "error", "fragment"), [
    (lambda m: hetc.generate(m, np.zeros(4, np.int64), 2), InputError, "[batch, seq] integer array"),
    (lambda m: hetc.generate(m, np.zeros((1, 100), np.int64), 40), InputError,
     "dim 1 ('total_seq') is 129, outside its range 1..128"),
    (lambda m: hetc.generate(m, np.zeros((1, 3), np.int64), 2, attention_mask=np.ones((1, 4))), InputError,
     "attention_mask has shape [1, 4]"),
    (lambda m: hetc.generate(object(), np.zeros((1, 3), np.int64), 2), UsageError,
     "CompiledModel or an onnxruntime"),
])
def test_bad_inputs_are_one_line_errors(gpt2, call, error, fragment):
    with pytest.raises(error) as info:
        call(gpt2[0])
    assert fragment in str(info.value) and "\n" not in str(info.value)
