"""LSTM, GRU, RNN (opsets 7, 14): one-node models and torch exports against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from onnx import helper
from onnx_util import make, tensor

import hetc
from hetc.errors import ConversionError

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
OUTPUTS = {"LSTM": ("Y", "Y_h", "Y_c"), "GRU": ("Y", "Y_h"), "RNN": ("Y", "Y_h")}


def _model(op, steps=5, batch=3, inp=4, hidden=8, direction="forward", layout=0, lens=False, init=False,
           peephole=False, bias=True, outputs=None, opset=14, scale=0.4, seed=0, **attrs):
    """One ``op`` node: X, sequence_lens, initial_h/_c are graph inputs (``steps``/``batch`` may be
    names: symbolic), W, R, B, P initializers; ``outputs`` the wanted output names ('' skips)."""
    dirs, g = 2 if direction == "bidirectional" else 1, GATES[op]
    rng = np.random.default_rng(seed)
    inits = {"W": rng.normal(0, scale, (dirs, g * hidden, inp)),
             "R": rng.normal(0, scale, (dirs, g * hidden, hidden))}
    if bias:
        inits["B"] = rng.normal(0, scale, (dirs, 2 * g * hidden))
    if peephole:
        inits["P"] = rng.normal(0, scale, (dirs, 3 * hidden))
    inits = {k: v.astype(np.float32) for k, v in inits.items()}
    seq_batch = [steps, batch] if layout == 0 else [batch, steps]
    state = [dirs, batch, hidden] if layout == 0 else [batch, dirs, hidden]
    inputs = [tensor("X", [*seq_batch, inp])]
    names = ["X", "W", "R", "B" if bias else ""]
    if lens:
        inputs.append(tensor("sequence_lens", [batch], np.int32))
    names.append("sequence_lens" if lens else "")
    for key in ("initial_h", "initial_c")[: 2 if op == "LSTM" else 1]:
        if init:
            inputs.append(tensor(key, state))
        names.append(key if init else "")
    if op == "LSTM":
        names.append("P" if peephole else "")
    while names[-1] == "":
        names.pop()
    outputs = OUTPUTS[op] if outputs is None else outputs
    y_shape = [steps, dirs, batch, hidden] if layout == 0 else [batch, steps, dirs, hidden]
    if opset >= 14:
        attrs["layout"] = layout
    node = helper.make_node(op, names, list(outputs), name="rnn", hidden_size=hidden, direction=direction,
                            **attrs)
    outs = [tensor(o, y_shape if o == "Y" else state) for o in outputs if o]
    return make([node], inputs, outs, inits, opset=opset)


def _feeds(model, sizes: dict, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        shape = [d.dim_value or sizes[d.dim_param] for d in value.type.tensor_type.shape.dim]
        if value.name == "sequence_lens":
            steps = sizes.get("steps", sizes.get("T"))
            lens = rng.integers(1, steps + 1, shape)
            lens[0] = steps
            feeds[value.name] = lens.astype(np.int32)
        else:
            feeds[value.name] = rng.normal(0, 1, shape).astype(np.float32)
    return feeds


def _check(model, feeds, compiled=None, rel=1e-4):
    compiled = compiled or hetc.compile(model)
    got = list(compiled.run(feeds).values())
    ref = ort_run(model, feeds)
    assert len(got) == len(ref)
    for a, r in zip(got, ref, strict=True):
        assert_close(a, r, rel)


def _run(op, sizes=None, **kw):
    sizes = sizes or {}
    model = _model(op, **kw)
    _check(model, _feeds(model, {"steps": kw.get("steps", 5), **sizes}))


OPS = ["LSTM", "GRU", "RNN"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_directions(op, direction):
    _run(op, direction=direction)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_sequence_lens_and_initial_states(op, direction):
    _run(op, steps=6, batch=4, direction=direction, lens=True, init=True)


@pytest.mark.parametrize("op", OPS)
def test_layout_1(op):
    """onnxruntime has no layout 1: against its layout-0 run with the axes swapped."""
    kw = {"direction": "bidirectional", "lens": True, "init": True, "steps": 5, "batch": 3}
    model = _model(op, layout=1, **kw)
    feeds = _feeds(model, {"steps": 5})
    got = list(hetc.compile(model).run(feeds).values())
    swap = {k: v if k == "sequence_lens" else np.swapaxes(v, 0, 1) for k, v in feeds.items()}
    ref = ort_run(_model(op, layout=0, **kw), swap)
    assert_close(got[0], np.transpose(ref[0], (2, 0, 1, 3)))
    for a, r in zip(got[1:], ref[1:], strict=True):
        assert_close(a, np.swapaxes(r, 0, 1))


@pytest.mark.parametrize("opset", [7, 22])
def test_opsets(opset):
    _run("GRU", opset=opset, direction="bidirectional", init=True)


def test_lstm_peephole_input_forget_clip():
    _run("LSTM", direction="bidirectional", peephole=True, init=True, input_forget=1, clip=0.7, scale=1.0)


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_linear_before_reset_clip(lbr):
    _run("GRU", direction="bidirectional", init=True, lens=True, linear_before_reset=lbr, clip=0.9, scale=1.0)


def test_no_bias_with_lbr():
    _run("GRU", bias=False, linear_before_reset=1, init=True)


@pytest.mark.parametrize("name,alpha,beta", [
    ("Relu", None, None), ("Tanh", None, None), ("Sigmoid", None, None), ("Affine", 0.6, 0.2),
    ("LeakyRelu", 0.3, None), ("ThresholdedRelu", 0.2, None), ("ScaledTanh", 1.3, 0.7),
    ("HardSigmoid", 0.3, 0.4), ("Elu", 0.8, None), ("Softsign", None, None), ("Softplus", None, None),
])
def test_activations(name, alpha, beta):
    """Each activation as f of an RNN and g of a GRU (alpha/beta consumed in order)."""
    extra = {}
    if alpha is not None:
        extra["activation_alpha"] = [alpha] + ([alpha / 2] if alpha is not None else [])
    if beta is not None:
        extra["activation_beta"] = [beta, beta / 2]
    _run("RNN", direction="bidirectional", activations=[name, name], scale=0.3, **extra)
    gru_extra = {k: v[:1] for k, v in extra.items()}
    _run("GRU", activations=["Sigmoid", name], scale=0.3, **gru_extra)


def test_lstm_mixed_activations_per_direction():
    _run("LSTM", direction="bidirectional", activations=["HardSigmoid", "LeakyRelu", "ScaledTanh",
                                                         "Sigmoid", "Tanh", "Softsign"],
         activation_alpha=[0.25, 0.1, 0.9], activation_beta=[0.45, 1.1], init=True, scale=0.3)


@pytest.mark.parametrize("op,outputs", [("LSTM", ("", "Y_h")), ("LSTM", ("", "", "Y_c")), ("LSTM", ("Y",)),
                                        ("GRU", ("", "Y_h")), ("RNN", ("Y",))])
def test_output_subsets(op, outputs):
    _run(op, outputs=outputs, direction="reverse", lens=True)


@pytest.mark.parametrize("op", OPS)
def test_symbolic_sequence_and_batch(op):
    """Compiled once with symbolic seq and batch, run at two lengths and batches."""
    model = _model(op, steps="T", batch="N", direction="bidirectional", lens=True, init=True)
    compiled = hetc.compile(model)
    for sizes in ({"T": 3, "N": 2}, {"T": 9, "N": 5}):
        _check(model, _feeds(model, sizes), compiled)


def test_unsupported_forms_raise_conversion_error():
    model = _model("RNN", activations=["Gelu"])
    with pytest.raises(ConversionError, match="activation 'Gelu' is not supported"):
        hetc.compile(model)
    model = _model("RNN", direction="bidirectional", activations=["Tanh"])
    with pytest.raises(ConversionError, match="activations lists 1 functions"):
        hetc.compile(model)


def _torch_export(module, inp, tmp_path):
    import torch

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = module

        def forward(self, x):
            out = self.rnn(x)
            return out[0], out[1] if not isinstance(out[1], tuple) else out[1][0]

    path = tmp_path / "rnn.onnx"
    torch.onnx.export(Wrap().eval(), (torch.zeros(5, 2, inp),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y", "h"],
                      dynamic_axes={"x": {0: "seq", 1: "batch"}, "y": {0: "seq", 1: "batch"},
                                    "h": {1: "batch"}})
    return path


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_torch_export(kind, tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    module = cls(8, 16, num_layers=2, bidirectional=True)
    path = _torch_export(module, 8, tmp_path)
    compiled = hetc.compile(path)
    rng = np.random.default_rng(0)
    for steps, batch in ((4, 3), (11, 1)):
        feeds = {"x": rng.normal(0, 1, (steps, batch, 8)).astype(np.float32)}
        got = list(compiled.run(feeds).values())
        for a, r in zip(got, ort_run(path, feeds), strict=True):
            assert_close(a, r, 1e-4)
