"""A decoder's KV cache in place (``kv_cache=MAX_LEN``, hetc/passes/kv_cache.py, hetc.session):
GPT-2 (SDPA attention) and a Llama with grouped-query attention and RoPE (eager attention),
both exported by torch.onnx.export,
decode token for token as onnxruntime's loop does; rows of different lengths decode together as
each would alone; ``run`` keeps the exported signature; nothing copies the past."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hetc
from hetc.errors import InputError, UsageError

pytestmark = pytest.mark.torch

DIMS = {"batch": (1, 4), "seq": (1, 64), "past_seq": (0, 128), "total_seq": (1, 128)}
MAX_LEN = 128


def _export(tmp_path_factory, name: str) -> Path:
    pytest.importorskip("torch", reason="torch exports the model")
    pytest.importorskip("transformers", reason="transformers builds the model")
    import hf_models  # examples/, put on sys.path by conftest

    path = tmp_path_factory.mktemp(name) / f"{name}.onnx"
    if name == "llama":
        return hf_models.export_llama(path, "llama-tiny")
    # SDPA exported decomposed: keys scaled by a constant before Q @ K^T (optimum's exports)
    return hf_models.export_gpt2(path, "gpt2-tiny", position_ids=True, attention="sdpa")


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def decoder(request, tmp_path_factory):
    import onnxruntime as ort

    path = _export(tmp_path_factory, request.param)
    return hetc.compile(path, dims=DIMS, kv_cache=MAX_LEN), ort.InferenceSession(str(path)), path


def test_greedy_tokens_match_onnxruntime(decoder):
    compiled, session, _ = decoder
    prompt = np.random.default_rng(0).integers(0, 1000, (2, 6))
    ours = hetc.generate(compiled, prompt, 64)
    ref = hetc.generate(session, prompt, 64)
    np.testing.assert_array_equal(ours, ref)
    assert len(set(ours[:, 6:].ravel().tolist())) > 8  # not one repeated token: a real comparison


def test_greedy_tokens_match_onnxruntime_genai(decoder, tmp_path):
    """onnxruntime-genai, onnxruntime's own generation runtime, built by its model builder from
    the same checkpoint (its graph: GroupQueryAttention, RoPE and a cache shared in place, not
    the torch export hetc compiled): the same greedy tokens, two rows of 64."""
    _, _, path = decoder
    if path.stem != "llama":
        pytest.skip("onnxruntime-genai's model builder has no GPT-2")
    og = pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed")
    import hf_models

    compiled, _, _ = decoder
    prompt = np.random.default_rng(1).integers(0, 1000, (2, 6))
    theirs = hf_models.genai_generate(og.Model(str(hf_models.export_genai(tmp_path, "llama-tiny"))), prompt, 64)
    np.testing.assert_array_equal(hetc.generate(compiled, prompt, 64), theirs)


def test_attention_reads_the_buffers_in_place(decoder):
    """No concat of the cache and no copy of its prefix: the attention kernels read the buffers
    (``kv_scores``/``kv_mix``), the step writes its entries in place (``kv_write``), and ``main``
    returns the logits alone."""
    compiled, _, _ = decoder
    kernels = set(compiled.report["kernels"])
    assert any(k.startswith("kv_write") for k in kernels)
    assert any("kv_scores" in k for k in kernels) and any("kv_mix" in k for k in kernels)
    assert not [k for k in kernels if "kv_prefix" in k]
    dims = compiled.report["kernel_dims"]  # a concat of the cache would take the past length
    assert not [k for k in kernels if "concatenate" in k and "past_seq" in dims.get(k, {}).get("dims", [])]
    layout = compiled.manifest.kv_cache
    assert layout["max_len"] == MAX_LEN and layout["new_dim"] == "seq" and layout["past_dim"] == "past_seq"
    keys = [s for s in layout["slots"] if s["past"].endswith(".key")]
    assert all(s["shape"][s["axis"]] == MAX_LEN for s in layout["slots"] if s not in keys)
    # read only by Q @ K^T: stored [b, h, max_len / 64, d, 64], d the values' head size
    width = {s["shape"][3] for s in layout["slots"] if s not in keys}
    assert len(width) == 1
    assert all(s["transposed"] and s["axis"] == 2 and s["shape"][2:] == [-(-MAX_LEN // 64), *width, 64] for s in keys)
    assert not any(s["transposed"] for s in layout["slots"] if s["past"].endswith(".value"))


def test_run_keeps_the_exported_signature(decoder, tmp_path):
    compiled, session, _ = decoder
    rng = np.random.default_rng(1)
    past = {s.name: rng.standard_normal((2, s.shape[1], 5, s.shape[3])).astype(np.float32)
            for s in compiled.manifest.inputs if s.name.startswith("past_key_values.")}
    feeds = {"input_ids": rng.integers(0, 1000, (2, 3)), "attention_mask": np.ones((2, 8), np.int64),
             "position_ids": np.tile(np.arange(5, 8), (2, 1)), **past}
    ours = compiled.run(feeds)
    ref = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert list(ours) == list(ref)
    for name, want in ref.items():
        np.testing.assert_allclose(ours[name], want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    # the saved artifact, run by the runtime-only runner with the same signature
    out = compiled.save(tmp_path / "art")
    np.savez(tmp_path / "in.npz", **feeds)
    done = subprocess.run([sys.executable, "hetc/runtime/standalone.py", str(out), "--inputs", str(tmp_path / "in.npz"),
                           "--outputs", str(tmp_path / "out.npz")], check=False, capture_output=True, text=True,
                          cwd=Path(hetc.__file__).parents[1])
    assert done.returncode == 0, done.stderr
    saved = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(saved["present.1.value"], ref["present.1.value"], rtol=1e-4, atol=1e-5)
    assert json.loads((out / "manifest.json").read_text())["kv_cache"]["max_len"] == MAX_LEN


def test_rows_of_different_lengths_decode_as_alone(decoder):
    compiled, session, _ = decoder
    ids = np.random.default_rng(2).integers(0, 1000, (3, 7))
    mask = np.ones((3, 7), np.int64)
    mask[0, 4:] = 0
    mask[2, 1:] = 0  # a one-token prompt
    together = hetc.generate(compiled, ids, 24, attention_mask=mask)
    for row in range(3):
        n = int(mask[row].sum())
        alone = hetc.generate(session, ids[row:row + 1, :n], 24)
        np.testing.assert_array_equal(together[row, 7:], alone[0, n:])


def test_finished_rows_leave_the_batch(decoder):
    """``keep`` drops rows: the others go on exactly as a session of only them would, on the
    same buffers (no cache reallocated)."""
    compiled, _, _ = decoder
    prompt = np.random.default_rng(3).integers(0, 1000, (3, 5))
    three = hetc.session(compiled, 3)
    logits = three.prefill(prompt)
    pointers = [np.from_dlpack(b).ctypes.data for b in three.buffers]  # the memory, not the Python objects
    three.step(np.argmax(logits, -1))
    three.keep([2, 0])
    assert three.batch == 2 and three.lengths.tolist() == [6, 6]
    one = hetc.session(compiled, 2)
    logits_one = one.prefill(prompt[[2, 0]])
    one.step(np.argmax(logits_one, -1))
    tokens = np.array([7, 9])
    for _ in range(5):
        a, b = three.step(tokens), one.step(tokens)
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
        tokens = np.argmax(a, -1)
    assert [np.from_dlpack(b).ctypes.data for b in three.buffers] == pointers
    # generate with an end token: the finished row is padded with it, the others keep going
    eos = int(hetc.generate(compiled, prompt[:1], 3)[0, -1])
    out = hetc.generate(compiled, prompt, 6, eos_token_id=eos)
    assert out[0, 7] == eos and (out[0, 8:] == eos).all()


def test_step_logits_outlive_the_next_step(decoder):
    """A step's logits are a view of the VM's output, not a copy: later steps, and a batch
    that shrinks and grows back (``keep``, ``reset``), leave them as they were."""
    compiled, _, _ = decoder
    prompt = np.random.default_rng(4).integers(0, 1000, (2, 6))
    session = hetc.session(compiled, 2)
    first = session.prefill(prompt)
    kept = first.copy()
    second = session.step(np.argmax(first, -1))
    kept_second = second.copy()
    session.keep([1])
    session.step(np.array([5]))
    session.reset()
    again = session.prefill(prompt)
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(second, kept_second)
    np.testing.assert_array_equal(again, kept)  # all rows again after reset, the same buffers


def test_bad_inputs_are_one_line_errors(decoder):
    compiled, _, path = decoder
    with pytest.raises(UsageError, match="kv-cache.*>= 1"):
        hetc.compile(path, dims=DIMS, kv_cache=-3)
    with pytest.raises(UsageError, match="more positions than the model's dims allow"):
        hetc.compile(path, dims=DIMS, kv_cache=1000)
    session = hetc.session(compiled, 1)
    session.prefill(np.zeros((1, 64), np.int64))
    session.prefill(np.zeros((1, 64), np.int64))  # 128 positions: full
    with pytest.raises(InputError, match="129 positions do not fit the cache.*--kv-cache 128"):
        session.step(np.zeros(1, np.int64))
    assert session.lengths.tolist() == [128]  # the refused step changed nothing
    with pytest.raises(InputError, match="positions do not fit the cache"):
        hetc.generate(compiled, np.zeros((1, 120), np.int64), 20)
    with pytest.raises(InputError, match=r"\[1, seq\] integer array"):
        hetc.session(compiled, 1).prefill(np.zeros((2, 3), np.int64))
    with pytest.raises(UsageError, match="batch 9 is outside"):
        hetc.session(compiled, 9)
    feeds = {"input_ids": np.zeros((1, 1), np.int64), "attention_mask": np.ones((1, MAX_LEN + 1), np.int64),
             "position_ids": np.zeros((1, 1), np.int64),
             **{s.name: np.zeros((1, s.shape[1], MAX_LEN, s.shape[3]), np.float32)
                for s in compiled.manifest.inputs if s.name.startswith("past_key_values.")}}
    with pytest.raises(InputError, match="129"):  # the mask's range or the cache (same bound here)
        compiled.run(feeds)
    wrong = {**feeds, "attention_mask": np.ones((1, 3), np.int64)}
    first = next(n for n in wrong if n.startswith("past_key_values."))
    wrong[first] = np.zeros((1, 7, 2, 5), np.float32)  # a cache of the wrong shape
    with pytest.raises(InputError, match=first):
        compiled.run(wrong)


def test_a_model_without_a_cache_is_refused(tmp_path):
    pytest.importorskip("torch", reason="torch exports the model")
    import hf_models

    path = hf_models.export_bert(tmp_path / "bert.onnx", "bert-tiny")
    with pytest.raises(UsageError, match="no KV cache inputs"):
        hetc.compile(path, kv_cache=64)
    plain = hetc.compile(path)
    with pytest.raises(UsageError, match="compiled with its cache in place"):
        hetc.session(plain)


MERGED_DIMS = {"batch_size": (1, 4), "sequence_length": (1, 64), "past_sequence_length": (0, 128)}


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    """A Llama as optimum's merged decoder (``hf_models.export_merged_llama``): an If on
    ``use_cache_branch`` between the decoders without and with a past, inputs declared as the
    first's (``attention_mask [batch_size, sequence_length]``)."""
    pytest.importorskip("torch", reason="torch exports the model")
    pytest.importorskip("transformers", reason="transformers builds the model")
    import hf_models

    return hf_models.export_merged_llama(tmp_path_factory.mktemp("merged") / "merged.onnx")


def test_a_merged_decoder_decodes_on_its_cache_branch(merged):
    """Compiled with the cache in place, the merged decoder runs its branch with the past on every
    call (a prompt is a step over an empty past), reads the buffers in place, and decodes as
    onnxruntime's loop over the merged model, which takes the other branch for the prompt."""
    import onnxruntime as ort

    compiled = hetc.compile(merged, dims=MERGED_DIMS, kv_cache=MAX_LEN)
    assert compiled.manifest.kv_cache["step_inputs"] == ["input_ids", "attention_mask", "position_ids"]
    assert {"kv_write", "kv_scores", "kv_mix"} <= {k.rstrip("0123456789_") for k in compiled.report["kernels"]}
    prompt = np.random.default_rng(2).integers(0, 1000, (2, 6))
    ours = hetc.generate(compiled, prompt, 64)
    np.testing.assert_array_equal(ours, hetc.generate(ort.InferenceSession(str(merged)), prompt, 64))
    assert len(set(ours[:, 6:].ravel().tolist())) > 8


def test_a_merged_decoder_compiles_whole_with_its_mask_declared(merged):
    """Without the cache in place both branches stay (the flag picks one per call); the mask,
    declared as long as the token ids, is taken as long as the presents, so the steps after the
    prompt are accepted and decode as onnxruntime does."""
    import onnxruntime as ort

    compiled = hetc.compile(merged, dims=MERGED_DIMS)
    mask = next(spec for spec in compiled.manifest.inputs if spec.name == "attention_mask")
    assert "past_sequence_length" in str(mask.shape[1])
    prompt = np.random.default_rng(3).integers(0, 1000, (2, 5))
    np.testing.assert_array_equal(hetc.generate(compiled, prompt, 16),
                                  hetc.generate(ort.InferenceSession(str(merged)), prompt, 16))


def test_a_cache_write_nothing_reads_is_refused(merged, monkeypatch):
    """Relax drops a call whose result nothing reads; a cache write the attention does not read
    (it reads another concat of the same past) would leave the buffers stale. Without the twin
    concats found, the build refuses instead of decoding on an empty cache."""
    from hetc.passes import kv_cache

    monkeypatch.setattr(kv_cache, "_twins", lambda *args: [])
    with pytest.raises(UsageError, match="nothing reads 'present.0.key' after its entries are written"):
        hetc.compile(merged, dims=MERGED_DIMS, kv_cache=MAX_LEN)


def test_an_if_on_a_flag_whose_branches_read_the_same_inputs_is_refused(tmp_path):
    """Which branch has the past is told by what each reads; branches that read the same inputs
    are refused with the If named."""
    import onnx
    from onnx import TensorProto, helper

    def branch(op: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["x"], ["y_" + op])], op, [],
                                 [helper.make_tensor_value_info("y_" + op, TensorProto.FLOAT, [2])])

    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], name="pick", then_branch=branch("Relu"), else_branch=branch("Neg"))],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
              helper.make_tensor_value_info("flag", TensorProto.BOOL, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "if.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(UsageError, match="neither branch of If 'pick' on 'flag'"):
        hetc.compile(path, kv_cache=16)


def test_the_command_line_compiles_with_the_cache_in_place(decoder, tmp_path):
    from click.testing import CliRunner

    from hetc.cli import cli

    _, _, path = decoder
    result = CliRunner().invoke(cli, ["compile", str(path), "-o", str(tmp_path / "out"), "--kv-cache", "64",
                                      "--dim", "batch=1:2", "--dim", "seq=1:32", "--dim", "past_seq=0:64",
                                      "--dim", "total_seq=1:64"])
    assert result.exit_code == 0, result.output
    assert "KV cache in place" in result.output
    loaded = hetc.load(tmp_path / "out")
    prompt = np.random.default_rng(5).integers(0, 1000, (1, 4))
    np.testing.assert_array_equal(hetc.generate(loaded, prompt, 8), hetc.generate(decoder[1], prompt, 8))
    bad = CliRunner().invoke(cli, ["compile", str(path), "-o", str(tmp_path / "bad"), "--kv-cache", "0"])
    assert bad.exit_code != 0 and not (tmp_path / "bad").exists()


def test_a_past_beyond_the_buffers_is_refused_before_the_call():
    """The exported-signature adapter checks the past and the step's entries against
    ``max_len`` before anything is written (the write kernel does not bound-check)."""
    import tvm

    from hetc.runtime.standalone import cache_call

    kv = {"max_len": 8, "step_inputs": ["input_ids"], "new_dim": "seq", "past_dim": "past_seq",
          "slots": [{"past": "past.0", "present": "present.0", "shape": ["batch", 2, 8, 4], "axis": 2,
                     "dtype": "float32", "transposed": False}]}
    specs = [{"name": "input_ids", "shape": ["batch", "seq"]}, {"name": "past.0", "shape": ["batch", 2, "past_seq", 4]}]
    called = []
    with pytest.raises(InputError, match="past \\(6\\) and this step's 3 entries need 9 cache positions.*--kv-cache 8"):
        cache_call(lambda *a: called.append(a), kv, specs, [np.zeros((1, 3), np.int64), np.zeros((1, 2, 6, 4), np.float32)],
                   tvm, tvm.cpu(), np, InputError)
    assert not called


def test_multi_query_attention_reads_its_one_head(tmp_path):
    """Falcon's one key/value head, which the exported matmul broadcasts over the query heads
    (no repeat in the graph): every head reads head 0 of the buffer."""
    pytest.importorskip("torch", reason="torch exports the model")
    import hf_models
    import onnxruntime as ort
    import torch
    from transformers import FalconConfig, FalconForCausalLM

    torch.manual_seed(0)
    config = FalconConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=1000,
                          initializer_range=0.2, attn_implementation="eager")
    assert config.multi_query
    path = hf_models.export_decoder(tmp_path / "falcon.onnx", FalconForCausalLM(config).eval(), True)
    compiled = hetc.compile(path, dims=DIMS, kv_cache=MAX_LEN)
    assert compiled.manifest.kv_cache["slots"][0]["shape"][1] == 1
    kernels = set(compiled.report["kernels"])  # read in place, not through a prefix copy
    assert any("kv_scores" in k for k in kernels) and not any("kv_prefix" in k for k in kernels)
    prompt = np.random.default_rng(4).integers(0, 1000, (2, 5))
    ours = hetc.generate(compiled, prompt, 24)
    np.testing.assert_array_equal(ours, hetc.generate(ort.InferenceSession(str(path)), prompt, 24))
    assert len(set(ours[:, 5:].ravel().tolist())) > 4


@pytest.mark.parametrize("length", [40, 200])
def test_the_scores_kernel_reads_only_the_valid_prefix(length):
    """``kv_scores`` against numpy at every shape of its last tile (no full tile, a partial one
    after full ones, none), over keys stored transposed in blocks of ``SCORE_TILE`` positions,
    GQA (4 heads on 2), 2 rows, one query (a step) and a prompt's (groups of ``SCORE_QUERIES``
    and the rest); the buffer slots past the valid length hold NaN, which must never reach a
    score."""
    import tvm

    from hetc.backends.cpu.codegen import llvm_target
    from hetc.options import CompileOptions
    from hetc.passes.kv_cache import SCORE_QUERIES, SCORE_TILE, _scores_kernel

    heads, kv, width = 4, 2, 8
    blocks = -(-length // SCORE_TILE)
    func = _scores_kernel((kv, blocks, width, SCORE_TILE), heads, "float32").with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": func}),
                      target=llvm_target(CompileOptions()))
    rng = np.random.default_rng(length)
    for n_k in sorted({1, 37, SCORE_TILE, SCORE_TILE + 5, 2 * SCORE_TILE, length - 1, length} - {0}):
        if n_k > length:
            continue
        for queries in (1, SCORE_QUERIES - 1, 2 * SCORE_QUERIES + 1):
            x = rng.standard_normal((2, heads, queries, width)).astype(np.float32)
            keys = rng.standard_normal((2, kv, width, blocks * SCORE_TILE)).astype(np.float32)
            keys[..., n_k:] = np.nan
            stored = np.ascontiguousarray(keys.reshape(2, kv, width, blocks, SCORE_TILE).swapaxes(2, 3))
            out = tvm.runtime.tensor(np.zeros((2, heads, queries, n_k), np.float32))
            lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(stored), out)
            expected = np.einsum("bhqe,bhek->bhqk", x, np.repeat(keys[..., :n_k], heads // kv, axis=1))
            np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5,
                                       err_msg=f"n_k={n_k}, {queries} queries")
