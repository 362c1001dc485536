"""The GPU check's CPU-side parts (issue 33): seeded weights, stripping and restoring them in a
library, the pack, the runtime bundle's --runtime-lib, and the whole check with the CPU standing
in for the GPU (``--fake``). The GPU steps themselves run only on a lent device (docs/cuda.md)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "scripts")]
import gpu_check as check  # (loads scripts/gpu_artifacts.py as ``gpu_artifacts``)
import runtime_bundle as bundle

g = check.artifacts_mod


def test_uniform_is_pinned_bit_for_bit():
    """The GPU machine regenerates the weights: the generator's bits must never change."""
    values = g.uniform(0, "blocks.0.conv1.weight", 100_000)
    assert values.dtype == np.float32 and values.min() >= -1 and values.max() < 1
    assert abs(float(values.mean())) < 0.01 and abs(float(values.std()) - 3 ** -0.5) < 0.01
    assert hashlib.sha256(values.tobytes()).hexdigest()[:16] == "807ff51628f0430f"
    assert not np.array_equal(values, g.uniform(1, "blocks.0.conv1.weight", 100_000))
    assert not np.array_equal(values, g.uniform(0, "blocks.0.conv2.weight", 100_000))


def test_seed_parameters_is_deterministic():
    model = g.build_torch("resnet", "resnet-tiny")
    first = g.seed_parameters(model, "resnet", 0)
    second = g.seed_parameters(g.build_torch("resnet", "resnet-tiny"), "resnet", 0)
    assert first.keys() == second.keys() and all(np.array_equal(first[k], second[k]) for k in first)
    assert all(np.array_equal(p.detach().numpy(), first[n]) for n, p in model.named_parameters())


@pytest.mark.parametrize("how", ["identity", "perm:0,2,3,1", "perm:2,3,1,0", "block:4", "block:8"])
def test_transforms_are_layouts(how):
    w = np.arange(8 * 3 * 2 * 2, dtype=np.float32).reshape(8, 3, 2, 2)
    blob = np.frombuffer(g.transform(w, how), np.float32)
    assert sorted(blob.tolist()) == sorted(w.ravel().tolist())  # a permutation of the values
    if how == "block:4":  # [O/4, H, W, I, 4]
        packed = blob.reshape(2, 2, 2, 3, 4)
        assert packed[1, 0, 1, 2, 3] == w[4 + 3, 2, 0, 1]
    assert how in g._transforms(w)


def _fake_artifact(tmp: Path, params: dict, how: dict) -> Path:
    """An artifact dir whose 'library' holds TVM-serialized tensors (TVM's own writer)."""
    import tvm

    art = tmp / "art"
    (art / "cuda").mkdir(parents=True)
    tensors = {n: tvm.runtime.tensor(np.frombuffer(g.transform(params[n], how[n]), np.float32).reshape(-1))
               for n in params}
    small = tvm.runtime.tensor(np.ones(16, np.float32))  # below MIN_EXTERNAL: stays
    folded = tvm.runtime.tensor(np.full(2048, 3.0, np.float32))  # no parameter: stays
    lib = b"\x7fELF header" + bytes(tvm.runtime.save_param_dict({**tensors, "small": small, "folded": folded}))
    (art / "cuda" / "model.so").write_bytes(lib)
    files = {"cuda/model.so": hashlib.sha256(lib).hexdigest()}
    (art / "manifest.json").write_text(json.dumps({"files": files}))
    return art


def test_strip_and_restore_roundtrip(tmp_path):
    params = {"fc.weight": g.uniform(0, "fc.weight", 64 * 32).reshape(64, 32),
              "conv.weight": g.uniform(0, "conv.weight", 32 * 8 * 3 * 3).reshape(32, 8, 3, 3)}
    art = _fake_artifact(tmp_path, params, {"fc.weight": "transpose", "conv.weight": "block:16"})
    original = (art / "cuda" / "model.so").read_bytes()
    record = g.strip_weights(art, params)
    assert {(e["param"], e["transform"]) for e in record["entries"]} == {("fc.weight", "transpose"),
                                                                         ("conv.weight", "block:16")}
    assert record["stripped_bytes"] == 64 * 32 * 4 + 32 * 8 * 9 * 4 and record["kept_bytes"] == 2048 * 4
    stripped = (art / "cuda" / "model.so").read_bytes()
    assert stripped != original and len(stripped) == len(original)
    for e in record["entries"]:
        assert stripped[e["offset"]:e["offset"] + e["bytes"]] == bytes(e["bytes"])
    assert g.restore(art, params) == record["stripped_bytes"]
    assert (art / "cuda" / "model.so").read_bytes() == original


def test_restore_refuses_other_weights(tmp_path):
    params = {"fc.weight": g.uniform(0, "fc.weight", 64 * 32).reshape(64, 32)}
    art = _fake_artifact(tmp_path, params, {"fc.weight": "identity"})
    g.strip_weights(art, params)
    with pytest.raises(g.RestoreError, match="not bit-identical"):
        g.restore(art, {"fc.weight": g.uniform(1, "fc.weight", 64 * 32).reshape(64, 32)})
    with pytest.raises(g.RestoreError, match="parameter fc.weight is not in the torch model"):
        g.restore(art, {})


def test_pack_unpack(tmp_path):
    params = {"fc.weight": g.uniform(0, "fc.weight", 256 * 256).reshape(256, 256)}
    art = _fake_artifact(tmp_path, params, {"fc.weight": "identity"})
    g.strip_weights(art, params)
    packed = g.pack(tmp_path, [art])
    assert packed.stat().st_size < 20_000  # the 256 KiB of weights are zeros now
    (back,) = g.unpack(tmp_path, tmp_path / "unpacked")
    g.restore(back, params)


def test_rel_error_and_compare():
    ref = np.array([1.0, -2.0, 4.0], np.float32)
    assert check.rel_error(ref, ref) == 0
    assert check.rel_error(ref + np.float32(0.004), ref) == pytest.approx(1e-3, rel=1e-3)
    assert check.rel_error(ref[:2], ref) == float("inf")
    out = check.compare(None, {"y": ref * (1 + 2e-3)}, [ref], ["y"])
    assert not out["ok"] and out["max_rel_error"] == pytest.approx(2e-3, rel=1e-3)
    assert check.compare(None, {"y": ref}, [ref], ["y"])["ok"]


def test_transfer_check_against_link_model():
    rows = check.transfer_check(check.FakeDevice(), {"host_link": {"bandwidth": 64e9, "latency": 5e-6}},
                                [4096, 2**20, 0], repeat=3)
    assert [r["bytes"] for r in rows] == [4096, 2**20]
    assert rows[1]["predicted_ms"] == pytest.approx((5e-6 + 2**20 / 64e9) * 1e3)
    assert all(r["h2d_ms"] > 0 for r in rows)


def _report(models: list[dict]) -> dict:
    return {"device": {"name": "GPU"}, "models": models}


def test_calibration_from_measurements():
    """The spec's ``measured`` block: geomean of measured / predicted, the link fitted to copies."""
    copies = [{"bytes": 4000, "h2d_ms": 0.04}, {"bytes": 16 * 2**20, "h2d_ms": 1.44}]
    cal = check.calibration(_report([{"measured_over_predicted": 2.0}, {"measured_over_predicted": 8.0},
                                     {"transfers_measured": copies}]))
    assert cal["kernel_time_scale"] == 4.0 and cal["kernel_time_models"] == 2
    assert cal["host_link"]["latency"] == pytest.approx(4e-5)
    assert cal["host_link"]["bandwidth"] == pytest.approx(16 * 2**20 / 1.4e-3, rel=1e-2)
    assert "host_link" not in check.calibration(_report([{"measured_over_predicted": 2.0}]))


def test_merge_keeps_what_a_later_try_skipped():
    first = _report([{"model": "a", "ok": True, "cases": [{"hetc_ms": 1.0, "torch_compile_default_ms": 3.0}]},
                     {"model": "b", "error": "AttributeError", "ok": False}])
    second = _report([{"model": "a", "ok": True, "cases": [{"hetc_ms": 1.5, "torch_compile_default_ms": None}]},
                      {"model": "b", "ok": True, "cases": [{"hetc_ms": 2.0}]}])
    merged = check.merge([first, second])
    a, b = merged["models"]
    assert a["cases"] == [{"hetc_ms": 1.5, "torch_compile_default_ms": 3.0}] and b["ok"] and merged["runs"] == 2
    assert check.merge([second, first])["models"][1]["ok"]  # an error never replaces a result


def test_gpt2_wrapper_follows_the_cache_argument_name():
    """transformers 5.24 calls the cache ``cache``, 5.17 (the GPU machine's) ``past_key_values``;
    both forwards take **kwargs, so the wrapper must pick the name from the signature."""
    import torch

    real = g.build_torch("gpt2", "gpt2-tiny")
    g.seed_parameters(real, "gpt2", 0)

    class Older(torch.nn.Module):  # the 5.17 signature around the installed model
        def __init__(self) -> None:
            super().__init__()
            self.inner, self.config = real.model, real.model.config

        def forward(self, input_ids=None, attention_mask=None, past_key_values=None, use_cache=None, **kwargs):
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, use_cache=use_cache,
                             **{real_name: past_key_values})
            out.past_key_values = getattr(out, real_name)
            return out

    import inspect

    real_name = "cache" if "cache" in inspect.signature(real.model.forward).parameters else "past_key_values"
    feeds = g.make_inputs(g.MODELS["gpt2-tiny"], g.vocab_of(real), past=8)
    args = [torch.from_numpy(v) for v in feeds.values()]
    with torch.inference_mode():
        want = real(*args)
        got = type(real)(Older()).eval()(*args)
    assert len(got) == len(want) == 5 and tuple(got[1].shape) == (1, 2, 9, 32)  # past 8 + 1 new token
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_bundle_runtime_lib(tmp_path):
    with pytest.raises(bundle.BundleError, match="no libtvm_runtime.so, libtvm_runtime_cuda.so"):
        bundle.replace_runtime(tmp_path, tmp_path)
    lib_dir, site = tmp_path / "lib", tmp_path / "site"
    (site / "tvm" / "lib").mkdir(parents=True)
    lib_dir.mkdir()
    for name in bundle.RUNTIME_LIBS:
        (lib_dir / name).write_bytes(b"built " + name.encode())
    assert bundle.replace_runtime(site, lib_dir) == {n: len(b"built " + n.encode()) for n in bundle.RUNTIME_LIBS}
    assert (site / "tvm" / "lib" / "libtvm_runtime_cuda.so").read_bytes() == b"built libtvm_runtime_cuda.so"


def test_model_table_covers_the_issue():
    names = set(g.DEFAULT_MODELS)
    assert {"resnet50-b1", "resnet50-b8", "bert-base-s128", "bert-base-sym", "gpt2-124m", "resnet50-split"} == names
    assert g.MODELS["resnet50-split"].target == "cpu,cuda"
    assert g.MODELS["gpt2-124m"].pasts == (32, 480)
    assert g.MODELS["bert-base-sym"].dims and not g.MODELS["bert-base-sym"].input_shapes


@pytest.mark.slow
def test_fake_device_end_to_end(tmp_path):
    """Compile tiny models for the CPU, strip and pack them, then run the whole check with the
    CPU standing in for the GPU: weights restored, outputs within 1e-3 of torch, JSON and table."""
    pack = tmp_path / "pack"
    assert g.main([str(pack), "--models", "resnet-tiny-b2,bert-tiny-s16,gpt2-tiny", "--target", "cpu"]) == 0
    index = json.loads((pack / "index.json").read_text())
    assert index["models"]["resnet-tiny-b2"]["stripped_bytes"] > 0
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--fake", "--pack", str(pack),
                           "--out", str(out), "--repeat", "3", "--warmup", "1"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((out / "gpu_check.json").read_text())
    assert [m["model"] for m in report["models"]] == ["resnet-tiny-b2", "bert-tiny-s16", "gpt2-tiny"]
    for m in report["models"]:
        assert m["ok"] and m["weights_restored_bytes"] > 0
        assert all(c["max_rel_error"] <= 1e-3 and c["hetc_ms"] > 0 and c["torch_eager_ms"] > 0 for c in m["cases"])
    assert [c["case"] for c in report["models"][2]["cases"]] == ["past 8", "past 32"]
    assert report["models"][0]["predicted_cuda_ms"] > 0
    assert "| resnet-tiny-b2 |" in (out / "gpu_check.md").read_text()


def test_tuned_builds_share_their_base_models_torch_compile():
    """``X-tuned`` (X compiled with a tuning database) is the same torch model: torch.compile runs
    once, for X, and the tuned row shows X's figures, labelled as taken from X."""
    names = ["resnet50-b8", "resnet50-b8-tuned", "bert-base-s128-tuned", "gpt2-124m"]
    order = check.compile_order(names, ("default",))
    assert order == [("resnet50-b8", "default"), ("bert-base-s128-tuned", "default"), ("gpt2-124m", "default")]
    results = {"resnet50-b8": {"model": "resnet50-b8", "cases": [{"hetc_ms": 7.0, "torch_compile_default_ms": 5.0}]},
               "resnet50-b8-tuned": {"model": "resnet50-b8-tuned", "cases": [{"hetc_ms": 4.0}]}}
    check.share_compiled(results)
    tuned = results["resnet50-b8-tuned"]["cases"][0]
    assert tuned == {"hetc_ms": 4.0, "torch_compile_default_ms": 5.0, "torch_compile_from": "resnet50-b8"}
    assert "torch_compile_from" not in results["resnet50-b8"]["cases"][0]
