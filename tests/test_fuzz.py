"""Bad models found by the fuzz campaign (benchmarks/fuzz_onnx.py, docs/robustness.md): each is
refused with one exact ``hetc: error:`` line; and a fixed-seed slice of the campaign (slow)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys

import numpy as np
import onnx
import psutil
import pytest
from conftest import ROOT, run_cli, save
from onnx import TensorProto, helper
from onnx_util import make, tensor

from hetc.errors import last_line, plain

MEMORY_GB = f"{psutil.virtual_memory().total / 1e9:,.1f} GB"


def _error(result) -> str:
    """The one stderr line of a failed command (asserting the error contract)."""
    assert result.code != 0, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def _compile(tmp_path, model: onnx.ModelProto | bytes, *args: str) -> tuple[str, str]:
    """(the error line of `hetc compile` on ``model``, the model's path); nothing may be written."""
    path = tmp_path / "m.onnx"
    if isinstance(model, bytes):
        path.write_bytes(model)
    else:
        save(model, path)
    line = _error(run_cli("compile", path, "--target", "cpu", "-o", tmp_path / "out", *args))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]  # no artifact, no temp dir
    return line, str(path)


def _matmul(out_shape, out_dtype=np.float32, x_shape=(1, 4)) -> onnx.ModelProto:
    return make([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [tensor("x", x_shape)],
                [tensor("y", out_shape, out_dtype)], {"w": np.ones((4, 10), np.float32)})


def _relu(x_shape, opset: int = 17) -> onnx.ModelProto:
    return make([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", x_shape)], [tensor("y", x_shape)],
                opset=opset)


def test_opset_newer_than_the_converters_know_is_refused(tmp_path):
    line, path = _compile(tmp_path, _relu([1, 4], opset=99))
    newest = onnx.defs.onnx_opset_version()
    assert line == (f"hetc: error: {path}: the model imports opset 99 of the ONNX domain; hetc's converters know "
                    f"opsets 1 to {newest} (export it at opset {newest} or older)")


def test_ir_version_newer_than_onnx_knows_is_refused(tmp_path):
    model = _relu([1, 4])
    model.ir_version = 99
    line, path = _compile(tmp_path, model)
    assert line == (f"hetc: error: {path}: IR version 99 is newer than hetc supports (newest {onnx.IR_VERSION}); "
                    f"export the model with IR version {onnx.IR_VERSION} or older")


@pytest.mark.parametrize(("out_shape", "dtype", "x_shape", "problem"), [
    ([1, 7], np.float32, [1, 4], "declares shape [1, 7], the graph computes [1, 10]"),
    ([1, 10, 1], np.float32, [1, 4], "declares shape [1, 10, 1], the graph computes [1, 10]"),
    ([1, 10], np.int32, [1, 4], "declares dtype INT32, the graph computes FLOAT"),
    (["n", 7], np.float32, ["n", 4], "declares shape [n, 7], the graph computes [n, 10]"),
])
def test_declared_output_that_disagrees_with_the_graph_is_refused(tmp_path, out_shape, dtype, x_shape, problem):
    line, path = _compile(tmp_path, _matmul(out_shape, dtype, x_shape))
    assert line == f"hetc: error: {path}: output 'y' {problem}; fix the output's declared type in the model"


def test_declared_output_dim_name_for_a_static_dim_is_fine(tmp_path):
    result = run_cli("compile", save(_matmul([1, "k"]), tmp_path / "m.onnx"), "-o", tmp_path / "out")
    assert result.code == 0 and result.stderr == "", result.stderr


def test_converted_output_that_disagrees_with_the_spec_is_refused(tmp_path):
    """If's branches declare [2, 3] while the input is [2, 0]: ONNX's inference keeps the branch's
    declaration, the converted graph computes [2, 0]; no artifact with a wrong manifest."""
    branch = {k: helper.make_graph([helper.make_node(op, ["x", "x"], [k])], k, [], [tensor(k, [2, 3])])
              for k, op in (("t", "Add"), ("e", "Mul"))}
    model = make([helper.make_node("If", ["c"], ["y"], then_branch=branch["t"], else_branch=branch["e"])],
                 [tensor("c", [], np.bool_), tensor("x", [2, 0])], [tensor("y", [2, 3])])
    line, path = _compile(tmp_path, model)
    assert line == (f"hetc: error: {path}: output 'y' is computed with shape [2, 0], the model says [2, 3]; "
                    "hetc does not write an artifact that describes its outputs wrongly")


@pytest.mark.parametrize("dim", [2**31, 2**63 - 1])
def test_huge_input_dim_is_refused(tmp_path, dim):
    line, path = _compile(tmp_path, _relu([dim, 4]))
    assert line == (f"hetc: error: {path}: input 'x' dim 0 is {dim}; a dim must be 0..2147483647 "
                    "(leave an unknown dim unset or give it a name)")


def test_negative_initializer_dim_is_refused(tmp_path):
    model = _matmul([1, 10])
    model.graph.initializer[0].dims[0] = -4
    line, path = _compile(tmp_path, model)
    assert line == (f"hetc: error: {path}: tensor 'w' dim 0 is -4; a dim must be 0..2147483647 "
                    "(leave an unknown dim unset or give it a name)")


@pytest.mark.parametrize(("attr", "value", "problem"), [
    ("pads", [2**40] * 4, f"pads={[2**40] * 4} is out of range (at most 2147483647 in magnitude)"),
    ("strides", [2**40] * 2, f"strides={[2**40] * 2} is out of range (at most 2147483647 in magnitude)"),
    ("group", 2**40, f"group={2**40} is out of range (at most 2147483647 in magnitude)"),
    ("dilations", [0, 1], "dilations=[0, 1] must be >= 1"),
    ("pads", [-1, 0, 0, 0], "pads=[-1, 0, 0, 0] must be >= 0"),
])
def test_attribute_out_of_range_is_refused_before_tvm(tmp_path, attr, value, problem):
    attrs = {"kernel_shape": [3, 3], attr: value}
    model = make([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)], [tensor("x", [1, 2, 8, 8])],
                 [tensor("y", ["a", "b", "c", "d"])], {"w": np.ones((4, 2, 3, 3), np.float32)})
    line, path = _compile(tmp_path, model)
    assert line == f"hetc: error: {path}: node 'conv' (Conv): attribute {problem}"


def test_giant_declared_initializer_is_refused_before_reading_it(tmp_path):
    model = _matmul([1, 10])
    w = model.graph.initializer[0]
    w.ClearField("raw_data")
    del w.dims[:]
    w.dims.extend([2**20, 2**20])
    line, path = _compile(tmp_path, model)
    assert line == f"hetc: error: {path}: tensor 'w' needs 4,398.0 GB, more than this machine's memory ({MEMORY_GB})"


def test_giant_intermediate_tensor_is_refused(tmp_path):
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"], name="fill"),
             helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    model = make(nodes, [tensor("x", [1, 1])], [tensor("y", ["a", "b"])], {"s": np.array([2**20, 2**20], np.int64)})
    line, path = _compile(tmp_path, model)
    assert line == (f"hetc: error: {path}: node 'fill' (ConstantOfShape): output 'c' needs 4,398.0 GB, more than "
                    f"this machine's memory ({MEMORY_GB})")


def test_tensor_data_shorter_than_its_dims_is_refused(tmp_path):
    model = _matmul([1, 10])
    model.graph.initializer[0].raw_data = model.graph.initializer[0].raw_data[:-3]
    line, path = _compile(tmp_path, model)
    assert line == (f"hetc: error: {path}: tensor 'w' holds 157 bytes of data, its dims [4, 10] and element type "
                    "call for 160")


def test_unknown_tensor_element_type_is_refused(tmp_path):
    model = _matmul([1, 10])
    model.graph.initializer[0].data_type = 999
    line, path = _compile(tmp_path, model)
    assert line == f"hetc: error: {path}: tensor 'w' has unknown element type 999"


def test_negative_external_data_offset_is_refused(tmp_path):
    model = _matmul([1, 10])
    w = model.graph.initializer[0]
    (tmp_path / "w.bin").write_bytes(w.raw_data)
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "-8")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    path = save(model, tmp_path / "m.onnx")
    line = _error(run_cli("compile", path, "-o", tmp_path / "out"))
    assert line == (f"hetc: error: {path}: tensor 'w' has invalid external data fields: External data offset "
                    "must be non-negative, got -8 for tensor 'w'")


def test_name_that_is_not_utf8_is_refused(tmp_path):
    data = _relu([1, 4]).SerializeToString().replace(b"Relu", b"R\xffl\xfe")
    line, path = _compile(tmp_path, data)
    assert line == (f"hetc: error: {path}: not a valid ONNX file (field 'op_type' of a NodeProto is not "
                    "UTF-8 text)")


def test_graph_output_listed_twice_is_refused(tmp_path):
    model = _relu([1, 4])
    model.graph.output.append(model.graph.output[0])
    line, path = _compile(tmp_path, model)
    assert line == f"hetc: error: {path}: graph output(s) y listed more than once"


def test_node_that_fails_onnx_shape_inference_is_refused(tmp_path):
    model = make([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[3, 3, 3])],
                 [tensor("x", [1, 2, 8, 8])], [tensor("y", [1, 4, 6, 6])], {"w": np.ones((4, 2, 3, 3), np.float32)})
    line, path = _compile(tmp_path, model)
    assert line == (f"hetc: error: {path}: invalid ONNX model: node 'conv' (Conv): Attribute kernel_shape has "
                    "incorrect size")


@pytest.mark.parametrize(("option", "message"), [
    ("--dim=n=1:2147483648", ("invalid --dim 'n=1:2147483648'; expected NAME=LOW:HIGH with 0 <= LOW <= HIGH <= "
                             "2147483647 (e.g. batch=1:64)")),
    ("--input-shape=x=4294967296,4", ("invalid --input-shape 'x=4294967296,4'; expected NAME=D0,D1,... with dims "
                                     "0..2147483647")),
])
def test_dynamic_shape_options_beyond_the_dim_limit_are_refused(tmp_path, option, message):
    path = save(_relu(["n", 4]), tmp_path / "m.onnx")
    assert _error(run_cli("compile", path, "-o", tmp_path / "out", option)) == f"hetc: error: {message}"


def test_tvm_internal_wording_is_turned_into_plain_text():
    assert plain("Check failed: groups > 0 (0 vs. 0) : The number of groups is 0") == "The number of groups is 0"
    assert plain("Check failed: (small.has_value()) is false: Literal value 7 exceeds range of int32") == \
        "Literal value 7 exceeds range of int32"
    assert plain("InternalError: Check failed: (x) is false") == "an internal consistency check of TVM failed"
    assert plain("old shape is R.shape([1, 4]), with product T.int64(4)") == "old shape is [1, 4], with product 4"
    assert plain("Cannot cast <class 'tvm.ir.expr.GenericConst'> to list") == "Cannot cast GenericConst to list"
    vm_error = RuntimeError("CodeGenVM cannot emit this Relax operator directly. Run the appropriate lowering "
                            "pass.\nOffending call:\nR.add(x, alloc19)")
    assert last_line(vm_error) == ("the operator add could not be lowered to code: its input shapes are not known "
                                   "to be compatible at compile time (bind the symbolic dims with --input-shape)")


def test_failed_conversion_prints_no_tvm_warning_later(tmp_path):
    """TVM's "BlockBuilder destroyed with remaining blocks" used to follow the error line when
    the interpreter freed the failed importer; its check's condition text is gone too."""
    model = make([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[3, 3], group=2)],
                 [tensor("x", [1, 2, 8, 8])], [tensor("y", ["a", "b", "c", "d"])],
                 {"w": np.ones((4, 2, 3, 3), np.float32)})
    line, _ = _compile(tmp_path, model)
    assert line == ("hetc: error: node 'conv' (Conv): The channel size of the data should equal to the product of "
                    "input channel size of the weight and the number of groups. However, the data channel size is "
                    "2 while the weight input channel size and number of groups are 2 and 2")


def test_one_d_inputs_of_another_rank_are_refused(tmp_path):
    model = make([helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", kernel_shape=[3, 3])],
                 [tensor("x", [1, 2, 8, 8])], [tensor("y", [1, 4, 6, 6])],
                 {"w": np.ones((4, 2, 3, 3), np.float32), "b": np.ones((4, 1), np.float32)})
    line, path = _compile(tmp_path, model)
    assert line == (f"hetc: error: {path}: node 'conv' (Conv): input 2 ('b') has rank 2; the op takes a 1-D "
                    "tensor there")


def test_symbolic_dim_a_matmul_fixes_gets_that_size(tmp_path):
    """x[n, d] @ w[8, 4]: only d = 8 works. Before, d = 4 ran and read past x's rows."""
    model = make([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [tensor("x", ["n", "d"])],
                 [tensor("y", ["n", 4])], {"w": np.ones((8, 4), np.float32)})
    path = save(model, tmp_path / "m.onnx")
    line = _error(run_cli("compile", path, "-o", tmp_path / "bad", "--dim", "d=0:4"))
    assert line == (f"hetc: error: {path}: symbolic dim 'd' must be 8 (an op reduces or convolves it against a "
                    "static size 8), but its range is 0..4")
    assert run_cli("compile", path, "-o", tmp_path / "out").code == 0
    np.savez(tmp_path / "x.npz", x=np.ones((3, 4), np.float32))
    line = _error(run_cli("run", tmp_path / "out", "--inputs", tmp_path / "x.npz"))
    assert line == ("hetc: error: input 'x' dim 1 ('d') is 4, outside its range 8..8 (compile with --dim "
                    "d=LOW:HIGH to change it)")


def test_run_whose_symbolic_dim_breaks_a_fixed_size_is_one_line(tmp_path):
    """x[n, 8] @ w + b[4, 1]: the broadcast fixes n to 4 (a match_cast); n = 3 used to end in
    TVM's RuntimeError traceback."""
    model = make([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
                 [tensor("x", ["n", 8])], [tensor("y", ["n", 4])],
                 {"w": np.ones((8, 4), np.float32), "b": np.ones((4, 1), np.float32)})
    assert run_cli("compile", save(model, tmp_path / "m.onnx"), "-o", tmp_path / "out").code == 0
    np.savez(tmp_path / "x.npz", x=np.ones((3, 8), np.float32))
    line = _error(run_cli("run", tmp_path / "out", "--inputs", tmp_path / "x.npz"))
    assert line == ("hetc: error: the inputs do not fit the model: a dim the model computes as 4 is 3 with these "
                    "inputs (a symbolic input dim is used where the model fixes its size)")


def test_declared_output_dim_that_inference_cannot_check_is_checked_at_run_time(tmp_path):
    """x[batch, d] + Range(0, d) declared as [batch, 5]: ONNX cannot tell the dim (Range), the
    manifest takes the declared 5, so the run checks it instead of returning [1, 4]."""
    model = _fuzz_module().SEEDS["dynamic"]().model
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "d"
    path = save(model, tmp_path / "m.onnx")
    assert run_cli("compile", path, "-o", tmp_path / "out", "--dim", "d=1:8").code == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["outputs"][0]["shape"] == ["batch", 5]
    np.savez(tmp_path / "x.npz", x=np.ones((1, 4), np.float32))
    line = _error(run_cli("run", tmp_path / "out", "--inputs", tmp_path / "x.npz"))
    assert line == ("hetc: error: the inputs do not fit the model: a dim the model computes as 5 is 4 with these "
                    "inputs (a symbolic input dim is used where the model fixes its size)")


def test_inputs_file_that_is_not_a_zip_or_claims_terabytes_is_refused(tmp_path, examples):
    fuzz_onnx = _fuzz_module()
    out = tmp_path / "mlp"
    assert run_cli("compile", examples / "mlp.onnx", "-o", out).code == 0
    (tmp_path / "a.npz").write_bytes(b"PK\x03\x04 not really a zip")
    (tmp_path / "b.npz").write_bytes(fuzz_onnx._huge_npz("x"))
    line = _error(run_cli("run", out, "--inputs", tmp_path / "a.npz"))
    assert line == f"hetc: error: {tmp_path / 'a.npz'}: not a .npz archive of arrays (write one with numpy.savez)"
    line = _error(run_cli("run", out, "--inputs", tmp_path / "b.npz"))
    assert line.startswith(f"hetc: error: {tmp_path / 'b.npz'}: an array in it is larger than the memory ("), line


def _fuzz_module():
    if "fuzz_onnx" in sys.modules:
        return sys.modules["fuzz_onnx"]
    spec = importlib.util.spec_from_file_location("fuzz_onnx", ROOT / "benchmarks" / "fuzz_onnx.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_onnx"] = module
    spec.loader.exec_module(module)
    return module


def test_every_seed_model_is_valid_and_every_kind_applies():
    fuzz = _fuzz_module()
    seeds = {name: build() for name, build in fuzz.SEEDS.items()}
    for index in range(len(fuzz.MUTATIONS) * 3):
        _kind, case, detail = fuzz.make_case(0, index, [sorted(fuzz.MUTATIONS)[index % len(fuzz.MUTATIONS)]], seeds)
        assert detail and case.bytes()
    first = fuzz.make_case(7, 42, sorted(fuzz.MUTATIONS), seeds)
    again = fuzz.make_case(7, 42, sorted(fuzz.MUTATIONS), seeds)
    assert first[0] == again[0] and first[1].bytes() == again[1].bytes()  # reproducible from (seed, id)


@pytest.mark.slow
def test_fuzz_slice_has_no_bugs(tmp_path):
    """300 mutants of campaign seed 0 (every kind), in one worker: no traceback, signal, hang,
    multi-line or TVM-internal message, partial artifact or wrong result."""
    fuzz = _fuzz_module()
    args = argparse.Namespace(seed=0, count=300, start=0, ids="", out=str(tmp_path / "r.jsonl"), kinds="",
                              timeout=120.0, memory_mb=4096, workers=1, fresh=False, progress=100)
    summary = fuzz.run_campaign(args)
    assert summary["mutants"] == 300
    assert len(summary["per_kind"]) == len(fuzz.MUTATIONS)
    assert summary["bugs"] == 0, summary["bug_ids"]
