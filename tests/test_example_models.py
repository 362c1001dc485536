"""The realistic example models of examples/models.py: architecture, onnxruntime, hetc."""

from __future__ import annotations

from collections import Counter

import models as example_models
import numpy as np
import onnx
import pytest
from conftest import assert_close, ort_run
from onnx import TensorProto

import hetc

# name -> (builder, expected output shapes, parameter count of the torchvision / HF model,
#          op counts); slow ones are marked.
FULL_SIZE = {
    "resnet18": (example_models.resnet18, [(1, 1000)], 11_689_512, {"Conv": 20, "BatchNormalization": 20}),
    "resnet50": (example_models.resnet50, [(1, 1000)], 25_557_032, {"Conv": 53, "BatchNormalization": 53}),
    "mobilenet_v2": (example_models.mobilenet_v2, [(1, 1000)], 3_504_872,
                     {"Conv": 52, "BatchNormalization": 52, "Clip": 35, "Add": 10}),
    "bert_tiny": (example_models.bert_tiny, [(1, 128, 128), (1, 128)], 4_385_920,
                  {"LayerNormalization": 5, "Softmax": 2, "Erf": 2}),
    "bert_base": (example_models.bert_base, [(1, 128, 768), (1, 768)], 109_482_240,
                  {"LayerNormalization": 25, "Softmax": 12, "Erf": 12}),
}
SLOW_FULL_SIZE = {"bert_base"}  # ~440 MB: about 10 s to build, check and run


def _params(model: onnx.ModelProto) -> int:
    """Trainable parameters: float tensors other than BN running statistics and scalars."""
    return sum(int(np.prod(t.dims)) for t in model.graph.initializer
               if t.data_type == TensorProto.FLOAT and t.dims
               and not t.name.endswith(("running_mean", "running_var")))


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_FULL_SIZE else n
                                  for n in FULL_SIZE])
def test_full_size_model_is_valid_and_runs_in_onnxruntime(name):
    build, shapes, params, ops = FULL_SIZE[name]
    model = build()
    onnx.checker.check_model(model)
    assert model.opset_import[0].version == 17 and model.ir_version == example_models.IR_VERSION
    assert _params(model) == params
    histogram = Counter(node.op_type for node in model.graph.node)
    assert {op: histogram[op] for op in ops} == ops
    outputs = ort_run(model, example_models.sample_inputs(model))
    assert [o.shape for o in outputs] == shapes
    for out in outputs:
        assert out.dtype == np.float32 and np.isfinite(out).all()
        assert np.std(out) > 1e-3  # not all equal
        assert np.max(np.abs(out)) < 100  # activations stayed O(1) through the network


def test_cnn_batch_norm_statistics_are_realistic():
    model = example_models.resnet18(size=64)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    variances = [v for name, v in inits.items() if name.endswith("running_var")]
    assert len(variances) == 20 and all((v > 0).all() for v in variances)
    assert inits["conv1.weight"].shape == (64, 3, 7, 7)
    convs = {n.output[0] for n in model.graph.node if n.op_type == "Conv"}
    assert all(n.input[0] in convs for n in model.graph.node if n.op_type == "BatchNormalization")


def test_mobilenet_v2_uses_depthwise_convs_and_relu6_as_clip():
    model = example_models.mobilenet_v2(size=32)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    groups = [next((a.i for a in n.attribute if a.name == "group"), 1) for n in model.graph.node if n.op_type == "Conv"]
    assert sum(g > 1 for g in groups) == 17
    clips = [n for n in model.graph.node if n.op_type == "Clip"]
    assert all(len(n.input) == 3 and inits[n.input[1]] == 0 and inits[n.input[2]] == 6 for n in clips)


def test_bert_sample_inputs_are_valid_ids_and_padded_masks():
    model = example_models.bert(1, 32, 2, 64, seq=16, batch=3, vocab=50)
    inputs = example_models.sample_inputs(model)
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    assert ids.dtype == mask.dtype == np.int64 and ids.shape == mask.shape == (3, 16)
    assert ids.min() >= 0 and ids.max() < 50 and len(np.unique(ids)) > 10
    for row in mask:
        valid = int(row.sum())
        assert 1 <= valid < 16 and (row[:valid] == 1).all() and (row[valid:] == 0).all()
    outputs = ort_run(model, inputs)
    unpadded = ort_run(model, {**inputs, "attention_mask": np.ones_like(mask)})
    assert not np.allclose(outputs[0], unpadded[0])


def test_bert_graph_is_shaped_like_a_torch_export():
    model = example_models.bert(2, 64, 4, 128, seq=8)
    histogram = Counter(node.op_type for node in model.graph.node)
    assert histogram["MatMul"] == 2 * (4 + 2 + 2) + 1  # q, k, v, out; scores, context; ffn up/down; pooler
    assert histogram["Transpose"] == 2 * 4 and histogram["Reshape"] == 2 * 4
    assert histogram["Gather"] == 4 and histogram["Erf"] == 2 and histogram["Unsqueeze"] == 1
    perms = {tuple(n.attribute[0].ints) for n in model.graph.node if n.op_type == "Transpose"}
    assert perms == {(0, 2, 1, 3), (0, 2, 3, 1)}
    with pytest.raises(ValueError, match="multiple"):
        example_models.bert(1, 30, 4, 64)


SMALL = {  # quick variants for comparing hetc with onnxruntime
    "bert_tiny": lambda: example_models.bert_tiny(),
    "bert_small_batch2": lambda: example_models.bert(2, 64, 4, 128, seq=16, batch=2, vocab=100),
    "resnet18_32px": lambda: example_models.resnet18(size=32),
    "mobilenet_v2_32px": lambda: example_models.mobilenet_v2(size=32),
    "resnet50_32px": lambda: example_models.resnet50(size=32),
}
SLOW_SMALL = {"resnet18_32px", "mobilenet_v2_32px", "resnet50_32px"}  # 20-60 s of hetc compile each


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_SMALL else n
                                  for n in SMALL])
def test_hetc_matches_onnxruntime(name):
    model = SMALL[name]()
    inputs = example_models.sample_inputs(model)
    compiled = hetc.compile(model, target="cpu")
    outputs = compiled.run(inputs)
    assert compiled.report["graph"]["flops"] > 0
    for actual, expected in zip(outputs.values(), ort_run(model, inputs), strict=True):
        assert_close(actual, expected)


def test_script_writes_named_models_and_rejects_unknown(tmp_path, capsys):
    assert example_models.main([str(tmp_path), "bert_tiny", "mlp"]) == 0
    inputs = dict(np.load(tmp_path / "bert_tiny_inputs.npz"))
    assert sorted(inputs) == ["attention_mask", "input_ids"]
    onnx.checker.check_model(str(tmp_path / "bert_tiny.onnx"))
    assert (tmp_path / "mlp.onnx").is_file()
    assert example_models.main([str(tmp_path), "resnet1000"]) == 2
    assert "resnet50" in capsys.readouterr().err
