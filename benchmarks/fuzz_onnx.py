"""A mutation fuzz campaign against ``hetc compile`` and ``hetc run``: seeded, resumable.

    python benchmarks/fuzz_onnx.py --count 10000 --out /work/fuzz/results.jsonl
    python benchmarks/fuzz_onnx.py --count 10000 --out /work/fuzz/results.jsonl   # resumes
    python benchmarks/fuzz_onnx.py --count 300 --kinds opset,dim_huge --fresh --out fresh.jsonl
    python benchmarks/fuzz_onnx.py --replay 1234 --out /work/fuzz/results.jsonl  # one mutant again

Mutant ``i`` of campaign ``--seed S`` is a pure function of (S, i): a mutation kind and a seed
model (a small valid model, ``SEEDS``) are drawn, the kind's function changes the model (its
proto, its file's bytes, its external data files or the CLI options), and the result is
compiled with ``hetc compile MODEL --target cpu -o OUT`` (plus the mutant's options). A
compiled mutant is run with ``hetc run OUT --inputs X.npz --outputs Y.npz`` on inputs made from
its manifest, and Y is compared with onnxruntime on the same model and inputs.

Every outcome must be one of (``OK_OUTCOMES``):

- ``ok``: compiled, ran, and matches onnxruntime (max abs error <= 1e-4 x max |reference|);
- ``error`` / ``run-error``: compile (or run) failed with exactly one stderr line starting
  ``hetc: error:``, a non-zero exit, no traceback, no TVM-internal text (``TVM_TEXT``), and
  nothing written (no artifact, no temporary directory, no outputs file);
- ``ort-refuses``: hetc compiled and ran a model onnxruntime refuses (reviewed by hand: counted
  apart, not a bug by itself);
- ``ort-differs``: hetc's outputs differ from onnxruntime's but equal the ONNX reference
  evaluator's (``onnx.reference``, the spec's own implementation): onnxruntime is wrong there;
- ``nan-differs``: where the inputs or onnxruntime's outputs hold NaN or infinity, hetc's
  outputs differ (TVM's max-based ops, Relu and MaxPool among them, treat NaN otherwise than
  onnxruntime, which differs from ``onnx.reference`` there too): a known difference, counted apart.

Anything else is a bug: ``traceback``, ``signal``, ``hang``, ``multi-line``, ``tvm-text``,
``not-hetc-error``, ``stdout-on-error``, ``partial-artifact``, ``noisy-success`` (exit 0 with stderr),
``manifest-wrong`` (the manifest's output shapes/dtypes differ from what the run returns) and
``mismatch`` (outputs differ from onnxruntime). Bug mutants are copied to ``OUT.bugs/<id>/``.

Each mutant runs in a persistent worker process (``--workers`` of them) that imports hetc once
and calls ``hetc.cli.main`` in-process, capturing file descriptors 1 and 2 as the real
command's would be; the worker has an RLIMIT_AS of ``--memory-mb`` and the parent kills and
restarts it when a mutant passes ``--timeout`` (``hang``) or it dies (``signal``). ``--fresh``
runs the real ``python -m hetc`` per call instead (the same limits), to check the two agree.

Adding a mutation kind: write ``def my_kind(case: Case, rng: random.Random) -> str | None``
that changes ``case`` (``case.model``, the proto; or ``case.data``, the file's bytes; or
``case.files``, extra files next to the model; or ``case.args``, the compile options) and
returns a short description of what it did, or None when it does not apply to this seed
(another seed is drawn); decorate it with ``@mutation`` (optionally ``needs_symbolic=True``).
The kind's name is the function's name; ``--kinds`` selects kinds by name.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

# TVM's internal wording, which must never reach a user
TVM_TEXT = re.compile(r"Check failed|InternalError|TVMError|\btvm[._]|\.(?:cc|h):\d+|\bR\.\w+\(|\bT\.\w+\(")
OK_OUTCOMES = ("ok", "error", "run-error", "ort-refuses", "ort-differs", "nan-differs")
TOLERANCE = 1e-4
IR_VERSION, OPSET = 10, 17

# --- seed models -------------------------------------------------------------------------------


@dataclass
class Seed:
    model: onnx.ModelProto
    arg_choices: list[list[str]] = field(default_factory=lambda: [[]])  # CLI options it compiles with
    symbolic: bool = False  # has symbolic input dims


def _model(nodes, inputs, outputs, inits=(), opset: int = OPSET) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "seed", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="fuzz")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def _vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _c(name: str, array) -> TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _node(op: str, inputs, outputs, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs, name=outputs[0] + "_node", **attrs)


def _seed_conv() -> Seed:
    rng = np.random.default_rng(1)
    w = rng.normal(0, 0.3, (4, 2, 3, 3)).astype(np.float32)
    nodes = [_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
             _node("Relu", ["c"], ["r"]),
             _node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             _node("Flatten", ["p"], ["y"], axis=1)]
    return Seed(_model(nodes, [_vi("x", TensorProto.FLOAT, [1, 2, 6, 6])], [_vi("y", TensorProto.FLOAT, [1, 36])],
                       [_c("w", w), _c("b", rng.normal(0, 0.1, 4).astype(np.float32))]))


def _seed_matmul_sym() -> Seed:
    rng = np.random.default_rng(2)
    nodes = [_node("MatMul", ["x", "w"], ["m"]), _node("Add", ["m", "b"], ["a"]),
             _node("Softmax", ["a"], ["y"], axis=-1)]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, ["n", 8])], [_vi("y", TensorProto.FLOAT, ["n", 4])],
                   [_c("w", rng.normal(0, 0.3, (8, 4)).astype(np.float32)), _c("b", np.ones(4, np.float32))])
    return Seed(model, [[], ["--dim", "n=1:8"], ["--input-shape", "x=3,8"], ["--dim", "n=2:2"]], True)


def _seed_gather() -> Seed:
    rng = np.random.default_rng(3)
    nodes = [_node("Gather", ["table", "ids"], ["e"], axis=0), _node("ReduceMean", ["e"], ["y"], axes=[1], keepdims=0)]
    return Seed(_model(nodes, [_vi("ids", TensorProto.INT64, [2, 3])], [_vi("y", TensorProto.FLOAT, [2, 5])],
                       [_c("table", rng.normal(0, 1, (6, 5)).astype(np.float32))], opset=13))


def _seed_shape_ops() -> Seed:
    nodes = [_node("Reshape", ["x", "shape"], ["r"]),
             _node("Concat", ["r", "extra"], ["c"], axis=0),
             _node("Expand", ["c", "big"], ["e"]),
             _node("Slice", ["e", "starts", "ends", "axes"], ["y"])]
    inits = [_c("shape", np.array([6, 4], np.int64)), _c("extra", np.ones((2, 4), np.float32)),
             _c("big", np.array([2, 8, 4], np.int64)), _c("starts", np.array([1], np.int64)),
             _c("ends", np.array([7], np.int64)), _c("axes", np.array([1], np.int64))]
    return Seed(_model(nodes, [_vi("x", TensorProto.FLOAT, [2, 3, 4])], [_vi("y", TensorProto.FLOAT, [2, 6, 4])],
                       inits))


def _seed_dynamic() -> Seed:
    """Shape arithmetic on symbolic dims: Shape/Gather/Concat/Reshape, ConstantOfShape, Range, Where."""
    nodes = [_node("Shape", ["x"], ["s"]),
             _node("Gather", ["s", "zero"], ["b"], axis=0),
             _node("Concat", ["b", "minus1"], ["newshape"], axis=0),
             _node("Reshape", ["x", "newshape"], ["flat"]),
             _node("ConstantOfShape", ["s"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))),
             _node("Greater", ["x", "ones"], ["mask"]),
             _node("Where", ["mask", "x", "ones"], ["w"]),
             _node("Gather", ["s", "one"], ["cols"], axis=0),
             _node("Range", ["zero_s", "cols", "one_s"], ["idx"]),
             _node("Cast", ["idx"], ["idxf"], to=TensorProto.FLOAT),
             _node("Add", ["w", "idxf"], ["y"])]
    inits = [_c("zero", np.array([0], np.int64)), _c("one", np.array(1, np.int64)),
             _c("minus1", np.array([-1], np.int64)), _c("zero_s", np.array(0, np.int64)),
             _c("one_s", np.array(1, np.int64))]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, ["batch", 5])],
                   [_vi("y", TensorProto.FLOAT, ["batch", 5]), _vi("flat", TensorProto.FLOAT, ["batch", 5])], inits)
    return Seed(model, [[], ["--dim", "batch=1:16"], ["--input-shape", "x=4,5"]], True)


def _seed_if() -> Seed:
    then = helper.make_graph([_node("Add", ["x", "x"], ["t"])], "then", [], [_vi("t", TensorProto.FLOAT, [2, 3])])
    other = helper.make_graph([_node("Mul", ["x", "x"], ["e"])], "else", [], [_vi("e", TensorProto.FLOAT, [2, 3])])
    nodes = [_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    return Seed(_model(nodes, [_vi("cond", TensorProto.BOOL, []), _vi("x", TensorProto.FLOAT, [2, 3])],
                       [_vi("y", TensorProto.FLOAT, [2, 3])]))


def _seed_examples(name: str) -> Callable[[], Seed]:
    def build() -> Seed:
        import models

        small = {"mlp": lambda: models.mlp(batch=2, dims=(8, 16, 4)),
                 "cnn": lambda: models.cnn(batch=1, channels=(2, 4), size=6, classes=3),
                 "transformer": lambda: models.transformer(batch=1, seq=4, hidden=8, heads=2, ffn=16)}
        return Seed(small[name]())
    return build


SEEDS: dict[str, Callable[[], Seed]] = {
    "mlp": _seed_examples("mlp"), "cnn": _seed_examples("cnn"), "transformer": _seed_examples("transformer"),
    "conv": _seed_conv, "matmul_sym": _seed_matmul_sym, "gather": _seed_gather, "shape_ops": _seed_shape_ops,
    "dynamic": _seed_dynamic, "if": _seed_if,
}


# --- mutants -----------------------------------------------------------------------------------


@dataclass
class Case:
    """A mutant being built: the proto, or the file's bytes once a byte-level kind set them,
    extra files beside the model (external data), the compile options, and what becomes of the
    inputs ``hetc run`` is given (``inputs``: writes them, from the good ones, to the path)."""

    seed: str
    model: onnx.ModelProto
    args: list[str]
    symbolic: bool
    data: bytes | None = None
    files: dict[str, bytes | int] = field(default_factory=dict)  # name -> bytes, or a sparse file's size
    inputs: Callable[[dict[str, np.ndarray], Path], None] | None = None

    def bytes(self) -> bytes:
        return self.data if self.data is not None else self.model.SerializeToString()


Mutation = Callable[[Case, random.Random], "str | None"]
MUTATIONS: dict[str, Mutation] = {}
NEEDS_SYMBOLIC: set[str] = set()


def mutation(fn: Mutation | None = None, *, needs_symbolic: bool = False):
    """Register a mutation kind under its function's name (see the module docstring)."""
    def register(f: Mutation) -> Mutation:
        MUTATIONS[f.__name__] = f
        if needs_symbolic:
            NEEDS_SYMBOLIC.add(f.__name__)
        return f
    return register(fn) if fn is not None else register


HUGE = [2**31, 2**31 + 7, 2**32, 2**40, 2**62, 2**63 - 1]
HUGE_ATTR = [2**31, 2**40, 2**63 - 1, -(2**31) - 1, -(2**40), -(2**63)]


def _feeds(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in inits]


def _shaped(values) -> list[onnx.ValueInfoProto]:
    return [v for v in values if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")
            and len(v.type.tensor_type.shape.dim)]


def _pick_dim(case: Case, rng: random.Random, include_inits: bool = True):
    """A (description, setter) for one dim of an input, output or initializer."""
    choices = [("input", v) for v in _shaped(_feeds(case.model))] + [("output", v) for v in _shaped(case.model.graph.output)]
    inits = [t for t in case.model.graph.initializer if len(t.dims)] if include_inits else []
    if inits and rng.random() < 0.3:
        t = rng.choice(inits)
        i = rng.randrange(len(t.dims))

        def set_init(value: int) -> str:
            old, t.dims[i] = t.dims[i], value
            return f"initializer {t.name} dim {i}: {old} -> {value}"
        return set_init
    if not choices:
        return None
    kind, v = rng.choice(choices)
    dims = v.type.tensor_type.shape.dim
    i = rng.randrange(len(dims))

    def set_value(value: int) -> str:
        old = dims[i].dim_value if dims[i].HasField("dim_value") else dims[i].dim_param
        dims[i].dim_value = value
        return f"{kind} {v.name} dim {i}: {old} -> {value}"
    return set_value


@mutation
def none(case: Case, rng: random.Random) -> str | None:
    """The seed unchanged (a control: must compile and match onnxruntime)."""
    return "unchanged"


@mutation
def dim_wrong(case: Case, rng: random.Random) -> str | None:
    """A static dim of an input, output or initializer changed to another small value, or a rank changed."""
    values = _shaped([*_feeds(case.model), *case.model.graph.output])
    if values and rng.random() < 0.25:
        v = rng.choice(values)
        dims = v.type.tensor_type.shape.dim
        if rng.random() < 0.5:
            dims.add().dim_value = rng.choice([1, 2, 3])
            return f"{v.name}: rank +1"
        del dims[-1]
        return f"{v.name}: rank -1"
    setter = _pick_dim(case, rng)
    return setter(rng.choice([1, 2, 3, 5, 7, 9, 16, 64])) if setter else None


@mutation
def dim_negative(case: Case, rng: random.Random) -> str | None:
    """A dim set negative (-1, the old 'unknown' spelling some exporters write, or worse)."""
    setter = _pick_dim(case, rng)
    return setter(rng.choice([-1, -2, -7, -(2**31), -(2**63)])) if setter else None


@mutation
def dim_zero(case: Case, rng: random.Random) -> str | None:
    """A dim set to 0 (an empty tensor)."""
    setter = _pick_dim(case, rng)
    return setter(0) if setter else None


@mutation
def dim_huge(case: Case, rng: random.Random) -> str | None:
    """A dim beyond int32 (2**31 .. 2**63-1), on inputs, outputs, initializers or value_info."""
    if rng.random() < 0.2 and case.model.graph.node:
        node = rng.choice(case.model.graph.node)
        name = node.output[0]
        case.model.graph.value_info.append(_vi(name, TensorProto.FLOAT, [rng.choice(HUGE), 2]))
        return f"value_info {name}: huge dim"
    setter = _pick_dim(case, rng)
    return setter(rng.choice(HUGE)) if setter else None


@mutation
def init_dims(case: Case, rng: random.Random) -> str | None:
    """An initializer's dims rearranged (same element count, or not): data and use disagree."""
    inits = [t for t in case.model.graph.initializer if len(t.dims)]
    if not inits:
        return None
    t = rng.choice(inits)
    old = list(t.dims)
    how = rng.randrange(4)
    if how == 0:
        new = old[::-1]
    elif how == 1:
        new = [*old, 1]
    elif how == 2:
        new = [math.prod(old)]
    else:
        new = [*old[:-1], old[-1] + rng.choice([-1, 1])]
    del t.dims[:]
    t.dims.extend(new)
    return f"initializer {t.name}: dims {old} -> {new}"


def _int_attrs(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, onnx.AttributeProto]]:
    return [(n, a) for n in model.graph.node for a in n.attribute
            if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)]


@mutation
def attr_type(case: Case, rng: random.Random) -> str | None:
    """An attribute's type changed (int <-> float <-> string <-> ints), or its type tag lies."""
    pairs = [(n, a) for n in case.model.graph.node for a in n.attribute
             if a.type != onnx.AttributeProto.GRAPH]
    if not pairs:
        return None
    node, attr = rng.choice(pairs)
    name = attr.name
    how = rng.randrange(5)
    node.attribute.remove(attr)
    if how == 0:
        new = helper.make_attribute(name, 1.5)
    elif how == 1:
        new = helper.make_attribute(name, "seven")
    elif how == 2:
        new = helper.make_attribute(name, [1, 2, 3])
    elif how == 3:
        new = helper.make_attribute(name, 3)
    else:  # the tag says INT, the value is a float
        new = onnx.AttributeProto(name=name, type=onnx.AttributeProto.INT, f=2.5)
    node.attribute.append(new)
    return f"{node.name}.{name}: type -> {onnx.AttributeProto.AttributeType.Name(new.type)} ({how})"


@mutation
def attr_value(case: Case, rng: random.Random) -> str | None:
    """An int attribute set huge (2**40, 2**63-1), negative, zero or past the rank; or an axis
    attribute added where there was none."""
    pairs = _int_attrs(case.model)
    value = rng.choice([*HUGE_ATTR, -1, 0, 5, 17, -9])
    if not pairs or rng.random() < 0.15:
        node = rng.choice(case.model.graph.node)
        node.attribute.append(helper.make_attribute(rng.choice(["axis", "group", "keepdims"]), value))
        return f"{node.name}: added {node.attribute[-1].name}={value}"
    node, attr = rng.choice(pairs)
    if attr.type == onnx.AttributeProto.INT:
        attr.i = value
    else:
        values = list(attr.ints) or [0]
        values[rng.randrange(len(values))] = value
        del attr.ints[:]
        attr.ints.extend(values)
    return f"{node.name}.{attr.name} = {value}"


@mutation
def name_dangling(case: Case, rng: random.Random) -> str | None:
    """A node input, or a graph output, names a value nothing produces."""
    if rng.random() < 0.2:
        case.model.graph.output[0].name = "nowhere"
        return "graph output renamed to nowhere"
    node = rng.choice(case.model.graph.node)
    if not node.input:
        return None
    i = rng.randrange(len(node.input))
    node.input[i] = "missing_value"
    return f"{node.name} input {i} -> missing_value"


@mutation
def name_duplicate(case: Case, rng: random.Random) -> str | None:
    """Two producers of one name: duplicated graph outputs, inputs or initializers, or two nodes
    writing the same output."""
    graph = case.model.graph
    how = rng.randrange(4)
    if how == 0:
        graph.output.append(graph.output[0])
        return "graph output duplicated"
    if how == 1 and _feeds(case.model):
        graph.input.append(_feeds(case.model)[0])
        return "graph input duplicated"
    if how == 2 and graph.initializer:
        graph.initializer.append(rng.choice(graph.initializer))
        return "initializer duplicated"
    if len(graph.node) < 2:
        return None
    a, b = rng.sample(range(len(graph.node)), 2)
    graph.node[a].output[0] = graph.node[b].output[0]
    return f"{graph.node[a].name} writes {graph.node[b].output[0]} too"


@mutation
def cycle(case: Case, rng: random.Random) -> str | None:
    """A node reads its own output, or a later node's output (a cycle or a wrong order)."""
    nodes = case.model.graph.node
    i = rng.randrange(len(nodes))
    if not nodes[i].input:
        return None
    j = rng.randrange(i, len(nodes))
    nodes[i].input[0] = nodes[j].output[0]
    return f"{nodes[i].name} input 0 <- {nodes[j].name} output"


@mutation
def opset(case: Case, rng: random.Random) -> str | None:
    """The default-domain opset set to 0, 1, 5, 99, 2**31..., removed, duplicated, or a node moved
    to an unknown domain."""
    imports = case.model.opset_import
    how = rng.randrange(5)
    if how == 0:
        value = rng.choice([0, 1, 5, 6, 29, 99, 2**31, -1])
        for entry in imports:
            if entry.domain == "":
                entry.version = value
        return f"opset {value}"
    if how == 1:
        kept = [e for e in imports if e.domain != ""]
        del imports[:]
        imports.extend(kept)
        return "no default-domain opset"
    if how == 2:
        imports.append(helper.make_opsetid("", rng.choice([11, 99])))
        return "default domain imported twice"
    if how == 3:
        imports.append(helper.make_opsetid("ai.onnx", 99))
        return "ai.onnx opset 99 beside ''"
    node = rng.choice(case.model.graph.node)
    node.domain = rng.choice(["com.example", "com.microsoft", "ai.onnx.ml"])
    if rng.random() < 0.5:
        imports.append(helper.make_opsetid(node.domain, 1))
    return f"{node.name} domain {node.domain}"


@mutation
def ir_version(case: Case, rng: random.Random) -> str | None:
    """The IR version set to 0, 1, 2, 3, 12, 13, 14, 15, 99 or 2**40."""
    value = rng.choice([0, 1, 2, 3, 12, 13, 14, 15, 99, 2**40])
    case.model.ir_version = value
    return f"ir_version {value}"


@mutation
def tensor_damage(case: Case, rng: random.Random) -> str | None:
    """An initializer's data damaged: raw_data cut or padded, its element type changed, both
    raw and typed data, typed data of the wrong count, or marked external without a location."""
    inits = [t for t in case.model.graph.initializer if t.HasField("raw_data") or t.float_data or t.int64_data]
    if not inits:
        return None
    t = rng.choice(inits)
    how = rng.randrange(7)
    if how == 0 and t.HasField("raw_data"):
        t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data) + 1)]
        return f"{t.name}: raw_data cut to {len(t.raw_data)}"
    if how == 1 and t.HasField("raw_data"):
        t.raw_data = t.raw_data + b"\x01" * rng.choice([1, 3, 4, 64])
        return f"{t.name}: raw_data padded to {len(t.raw_data)}"
    if how == 2:
        t.data_type = rng.choice([TensorProto.INT64, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.STRING,
                                  TensorProto.BOOL, TensorProto.INT4, TensorProto.UNDEFINED, 999])
        return f"{t.name}: data_type -> {t.data_type}"
    if how == 3:
        t.float_data.extend([1.0, 2.0])
        return f"{t.name}: float_data beside raw_data"
    if how == 4:
        n = math.prod(t.dims)
        t.ClearField("raw_data")
        del t.float_data[:]
        del t.int64_data[:]
        if t.data_type == TensorProto.INT64:
            t.int64_data.extend(range(max(n - 1, 0)))
        else:
            t.float_data.extend([0.5] * (n + 1))
        return f"{t.name}: typed data of the wrong count"
    if how == 5:
        t.data_location = TensorProto.EXTERNAL
        return f"{t.name}: external without location"
    t.ClearField("raw_data")
    del t.float_data[:]
    del t.int64_data[:]
    return f"{t.name}: no data"


def _externalize(case: Case, rng: random.Random) -> tuple[TensorProto, bytes] | None:
    inits = [t for t in case.model.graph.initializer if t.HasField("raw_data") and len(t.raw_data) >= 8]
    if not inits:
        return None
    t = rng.choice(inits)
    data = t.raw_data
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    return t, data


def _set_external(t: TensorProto, **entries) -> None:
    del t.external_data[:]
    for k, v in entries.items():
        entry = t.external_data.add()
        entry.key, entry.value = k, str(v)


@mutation
def external_data(case: Case, rng: random.Random) -> str | None:
    """An initializer moved to an external file, then: the file missing, truncated, empty, a
    directory; the location escaping the model's directory or absolute; an offset or length
    beyond the file's end; a huge sparse file; or intact (must work)."""
    picked = _externalize(case, rng)
    if picked is None:
        return None
    t, data = picked
    how = rng.randrange(10)
    if how == 0:
        _set_external(t, location="weights.bin")
        case.files["weights.bin"] = data
        return f"{t.name}: external, intact"
    if how == 1:
        _set_external(t, location="absent.bin")
        return f"{t.name}: file missing"
    if how == 2:
        _set_external(t, location=rng.choice(["../escape.bin", "sub/../../escape.bin", "/etc/hostname",
                                              "/dev/zero", "a/../../../etc/passwd"]))
        return f"{t.name}: location {t.external_data[0].value}"
    if how == 3:
        _set_external(t, location="weights.bin")
        case.files["weights.bin"] = data[:rng.randrange(len(data))]
        return f"{t.name}: file truncated"
    if how == 4:
        _set_external(t, location="weights.bin", offset=rng.choice([len(data) + 1, 4096, 2**40, -8]))
        case.files["weights.bin"] = data
        return f"{t.name}: offset {t.external_data[0].value}"
    if how == 5:
        _set_external(t, location="weights.bin", length=rng.choice([len(data) + 4, 2**40, 0, -1, len(data) // 2]))
        case.files["weights.bin"] = data
        return f"{t.name}: length {t.external_data[0].value}"
    if how == 6:
        _set_external(t, location="weights.bin")
        case.files["weights.bin"] = b""
        return f"{t.name}: empty file"
    if how == 7:
        _set_external(t, location="sub")
        case.files["sub/placeholder"] = b""
        return f"{t.name}: location is a directory"
    if how == 8:  # dims claim TBs, the file is sparse and as big
        del t.dims[:]
        t.dims.extend([2**20, 2**20])
        _set_external(t, location="huge.bin")
        case.files["huge.bin"] = 2**42
        return f"{t.name}: 4 TB sparse file"
    _set_external(t, location="weights.bin", offset=3)
    case.files["weights.bin"] = b"xyz" + data
    return f"{t.name}: offset 3 (valid)"


@mutation
def giant_size(case: Case, rng: random.Random) -> str | None:
    """Declared sizes of terabytes: an initializer's dims (without its data), or an op that makes
    a giant tensor from small inputs (ConstantOfShape, Expand, Tile, Range, Reshape) fed to an
    extra output."""
    graph = case.model.graph
    how = rng.randrange(6)
    if how == 0 and graph.initializer:
        t = rng.choice(list(graph.initializer))
        del t.dims[:]
        t.dims.extend(rng.choice([[2**20, 2**20], [2**31 - 1, 2**31 - 1], [65536, 65536, 64]]))
        return f"{t.name}: dims claim TBs"
    big = rng.choice([[2**20, 2**20], [65536, 65536, 16], [2**31 - 1, 2**31 - 1], [100000, 100000]])
    graph.initializer.append(_c("giant_shape", np.array(big, np.int64)))
    if how <= 1:
        graph.node.append(_node("ConstantOfShape", ["giant_shape"], ["giant"]))
    elif how == 2:
        graph.initializer.append(_c("giant_src", np.ones(1, np.float32)))
        graph.node.append(_node("Expand", ["giant_src", "giant_shape"], ["giant"]))
    elif how == 3:
        graph.initializer.append(_c("giant_src", np.ones([1] * len(big), np.float32)))
        graph.node.append(_node("Tile", ["giant_src", "giant_shape"], ["giant"]))
    elif how == 4:
        graph.initializer.extend([_c("r0", np.array(0, np.int64)), _c("r1", np.array(big[0] * big[1], np.int64)),
                                  _c("rd", np.array(rng.choice([1, 0]), np.int64))])
        graph.node.append(_node("Range", ["r0", "r1", "rd"], ["giant"]))
    else:
        graph.initializer.append(_c("giant_src", np.ones(4, np.float32)))
        graph.initializer.append(_c("giant_rs", np.array([big[0] * big[1], -1], np.int64)))
        graph.node.append(_node("Reshape", ["giant_src", "giant_rs"], ["giant"]))
    rank = 1 if how == 4 else 2 if how == 5 else len(big)
    elem = TensorProto.INT64 if how == 4 else TensorProto.FLOAT
    graph.output.append(_vi("giant", elem, [f"g{i}" for i in range(rank)]))
    return f"{graph.node[-1].op_type} of {big}"


@mutation
def output_decl(case: Case, rng: random.Random) -> str | None:
    """A declared output's dtype, a static dim, the rank, or a name for a static dim changed
    (the last is fine), or its type removed."""
    out = rng.choice(list(case.model.graph.output))
    tt = out.type.tensor_type
    how = rng.randrange(5)
    if how == 0:
        tt.elem_type = rng.choice([TensorProto.INT32, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT64])
        return f"{out.name}: dtype -> {tt.elem_type}"
    dims = [d for d in tt.shape.dim]
    if how == 1 and dims:
        d = rng.choice(dims)
        d.dim_value = (d.dim_value or 1) + rng.choice([1, 3, -1 if (d.dim_value or 1) > 1 else 2])
        return f"{out.name}: a dim -> {d.dim_value}"
    if how == 2:
        tt.shape.dim.add().dim_value = 1
        return f"{out.name}: rank +1"
    if how == 3 and dims:
        rng.choice(dims).dim_param = "declared_name"
        return f"{out.name}: a dim named"
    out.ClearField("type")
    return f"{out.name}: no type"


@mutation
def node_edit(case: Case, rng: random.Random) -> str | None:
    """A node's op type changed (to another op or an unknown one), a node removed or duplicated,
    or an input added or dropped."""
    nodes = case.model.graph.node
    i = rng.randrange(len(nodes))
    how = rng.randrange(5)
    if how == 0:
        old = nodes[i].op_type
        nodes[i].op_type = rng.choice(["Relu", "Softmax", "Frobnicate", "Identity", "Conv", "Add", "Sqrt",
                                       "ReduceSum", "Transpose", "NonZero", "Unique", "Loop"])
        return f"{nodes[i].name}: {old} -> {nodes[i].op_type}"
    if how == 1:
        del nodes[i]
        return f"node {i} removed"
    if how == 2:
        nodes.insert(i, nodes[i])
        return f"node {i} duplicated"
    if how == 3:
        nodes[i].input.append(rng.choice([*nodes[i].input, ""]) if nodes[i].input else "")
        return f"{nodes[i].name}: extra input"
    if not nodes[i].input:
        return None
    del nodes[i].input[-1]
    return f"{nodes[i].name}: last input dropped"


@mutation
def dim_symbolic(case: Case, rng: random.Random) -> str | None:
    """Static input dims made symbolic (a plain name, a name shared with another dim, an
    expression, an empty name), sometimes with a --dim range or --input-shape for them."""
    feeds = _shaped(_feeds(case.model))
    if not feeds:
        return None
    v = rng.choice(feeds)
    dims = v.type.tensor_type.shape.dim
    i = rng.randrange(len(dims))
    name = rng.choice(["d", "batch", "n", "a b", "2n", "", "n+1", "x_0"])
    if name:
        dims[i].dim_param = name
    else:
        dims[i].Clear()
    how = rng.randrange(4)
    if how == 1 and name and re.fullmatch(r"\w+", name) and not name[0].isdigit():
        case.args = ["--dim", f"{name}={rng.choice(['1:8', '0:4', '3:3', '1:65536', '5:2', '1:2147483648'])}"]
    elif how == 2:
        shape = [d.dim_value if d.HasField("dim_value") else rng.choice([1, 2, 3]) for d in dims]
        case.args = ["--input-shape", f"{v.name}={','.join(map(str, shape))}"]
    return f"{v.name} dim {i} -> {name!r} {' '.join(case.args)}"


@mutation(needs_symbolic=True)
def cli_dims(case: Case, rng: random.Random) -> str | None:
    """The dynamic-shape options of a model with symbolic dims: --dim ranges huge, empty,
    inverted or for unknown names; --input-shape of the wrong rank, huge, negative or for an
    unknown input; --plan-shape; both for one dim."""
    feeds = _feeds(case.model)
    names = sorted({d.dim_param for v in feeds for d in v.type.tensor_type.shape.dim if d.dim_param})
    v = rng.choice(feeds)
    rank = len(v.type.tensor_type.shape.dim)
    name = rng.choice(names)
    options = [
        ["--dim", f"{name}=1:{rng.choice([2**31 - 1, 2**31, 2**40, 2**63])}"],
        ["--dim", f"{name}=0:0"], ["--dim", f"{name}=0:3"], ["--dim", f"{name}=9:2"], ["--dim", f"{name}=-1:4"],
        ["--dim", f"{name}=1:8", "--dim", f"{name}=2:4"], ["--dim", "nosuch=1:4"], ["--dim", f"{name}=a:b"],
        ["--dim", f"{name}=1:{2**31 - 1}"], ["--dim", f"{name}=65536:65536"],
        ["--input-shape", f"{v.name}={','.join(['2'] * (rank + 1))}"],
        ["--input-shape", f"{v.name}={','.join([str(rng.choice(HUGE))] * rank)}"],
        ["--input-shape", f"{v.name}={','.join(['-1'] * rank)}"],
        ["--input-shape", f"{v.name}={','.join(['0'] * rank)}"],
        ["--input-shape", f"nosuch={','.join(['2'] * rank)}"],
        ["--input-shape", f"{v.name}=2,x"],
        ["--input-shape", f"{v.name}={','.join(['3'] * rank)}", "--dim", f"{name}=1:4"],
        ["--dim", f"{name}=1:8", "--plan-shape", f"{name}={rng.choice([4, 2**40, 0])}"],
    ]
    case.args = rng.choice(options)
    return " ".join(case.args)


@mutation
def bytes_truncate(case: Case, rng: random.Random) -> str | None:
    """The file cut short at a random byte."""
    data = case.bytes()
    case.data = data[:rng.randrange(len(data))]
    return f"truncated to {len(case.data)} of {len(data)} bytes"


@mutation
def bytes_flip(case: Case, rng: random.Random) -> str | None:
    """1 to 16 random bits of the file flipped."""
    data = bytearray(case.bytes())
    flips = rng.randint(1, 16)
    for _ in range(flips):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    case.data = bytes(data)
    return f"{flips} bits flipped"


@mutation
def bytes_splice(case: Case, rng: random.Random) -> str | None:
    """A chunk of the file replaced with random bytes, another chunk of itself, or deleted."""
    data = case.bytes()
    a = rng.randrange(len(data))
    b = min(len(data), a + rng.randint(1, 256))
    how = rng.randrange(3)
    chunk = (bytes(rng.randrange(256) for _ in range(b - a)) if how == 0
             else data[(c := rng.randrange(len(data))):c + b - a] if how == 1 else b"")
    case.data = data[:a] + chunk + data[b:]
    return f"bytes {a}..{b} {['randomised', 'copied over', 'deleted'][how]}"


def _huge_npz(name: str) -> bytes:
    """An .npz whose one array's header claims 2**40 float32 elements (the data is 16 bytes)."""
    import io
    import zipfile

    header = {"descr": "<f4", "fortran_order": False, "shape": (2**40,)}
    body = io.BytesIO()
    np.lib.format.write_array_header_1_0(body, header)
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr(f"{name}.npy", body.getvalue() + bytes(16))
    return archive.getvalue()


@mutation
def run_inputs(case: Case, rng: random.Random) -> str | None:
    """The seed compiled as is, then run on damaged inputs: a wrong dtype, rank or dim, a
    symbolic dim past its range, an input missing or unknown, NaN and infinity (valid), an empty
    dim, a file that is not an .npz, empty, or whose array header claims 4 TB."""
    how = rng.randrange(10)
    text = ["dtype float64/int32", "rank +1", "dim 0 -> 100000", "first input missing", "unknown input zzz",
            "NaN and inf values", "dim 0 -> 0", "not an npz", "empty file", "array header claims 4 TB"][how]

    def damage(inputs: dict[str, np.ndarray], path: Path) -> None:
        name = next(iter(inputs))
        x = inputs[name]
        if how == 0:
            inputs[name] = x.astype(np.float64 if x.dtype.kind != "f" or x.dtype == np.float32 else np.float32)
        elif how == 1:
            inputs[name] = x[None]
        elif how == 2:
            inputs[name] = np.resize(x, (100000, *x.shape[1:])) if x.ndim else x
        elif how == 3:
            del inputs[name]
        elif how == 4:
            inputs["zzz"] = x
        elif how == 5 and x.dtype.kind == "f" and x.size >= 2:
            x.flat[0], x.flat[1] = np.nan, np.inf
        elif how == 6 and x.ndim:
            inputs[name] = x[:0]
        if how == 7:
            path.write_bytes(b"PK\x03\x04 not really a zip")
        elif how == 8:
            path.write_bytes(b"")
        elif how == 9:
            path.write_bytes(_huge_npz(name))
        else:
            _savez(inputs, path)

    case.inputs = damage
    return text


def make_case(campaign_seed: int, index: int, kinds: list[str], seeds: dict[str, Seed]) -> tuple[str, Case, str]:
    """Mutant ``index`` of the campaign: (kind, case, description); the same for the same arguments."""
    rng = random.Random(f"{campaign_seed}:{index}")
    kind = rng.choice(kinds)
    names = [n for n in seeds if kind not in NEEDS_SYMBOLIC or seeds[n].symbolic]
    for _ in range(20):
        name = rng.choice(names)
        seed = seeds[name]
        model = onnx.ModelProto()
        model.CopyFrom(seed.model)
        case = Case(name, model, list(rng.choice(seed.arg_choices)), seed.symbolic)
        detail = MUTATIONS[kind](case, rng)
        if detail is not None:
            return kind, case, detail
    raise RuntimeError(f"mutation {kind} applies to no seed model")


def write_case(case: Case, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "model.onnx"
    path.write_bytes(case.bytes())
    for name, content in case.files.items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, int):  # a sparse file of that size
            with open(target, "wb") as f:
                f.truncate(content)
        else:
            target.write_bytes(content)
    return path


# --- running ------------------------------------------------------------------------------------


@dataclass
class Call:
    code: int | None  # exit code; None: killed (signal) or timed out
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    signal: int | None = None
    hang: bool = False
    extra: dict = field(default_factory=dict)  # the worker's whole answer


def _limit_memory(memory_mb: int) -> None:
    limit = memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def worker_main(memory_mb: int) -> None:
    """The persistent worker: one JSON job per stdin line, one JSON result per line on the
    original stdout; fds 1 and 2 are redirected to files around each job."""
    _limit_memory(memory_mb)
    os.setpgrp()
    protocol = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    import onnxruntime  # noqa: F401

    import hetc.cli  # noqa: F401  (imports TVM once)

    protocol.write(json.dumps({"ready": True}) + "\n")
    protocol.flush()
    for line in sys.stdin:
        job = json.loads(line)
        start = time.perf_counter()
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            sys.stdout.flush()
            sys.stderr.flush()
            saved = os.dup(1), os.dup(2)
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            try:
                result = _run_job(job)
            finally:
                gc.collect()  # objects freed now write here, as they would when a command exits
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])
            out.seek(0)
            err.seek(0)
            result.update(stdout=out.read().decode(errors="replace"), stderr=err.read().decode(errors="replace"),
                          seconds=time.perf_counter() - start)
        protocol.write(json.dumps(result) + "\n")
        protocol.flush()


def _run_job(job: dict) -> dict:
    if job["op"] == "reference":
        return reference(Path(job["model"]), Path(job["inputs"]), Path(job["outputs"]), job.get("evaluator", False))
    from hetc.cli import main

    try:
        code = main(job["argv"])  # what `hetc ARGV` runs (hetc/__main__.py: sys.exit(main()))
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # noqa: BLE001 -- what Python does with an uncaught exception
        traceback.print_exc()
        code = 1
    return {"code": code}


def reference(model: Path, inputs: Path, outputs: Path, evaluator: bool = False) -> dict:
    """onnxruntime's outputs for ``model`` on ``inputs`` (``evaluator``: the ONNX reference
    evaluator's, the spec's arbiter where hetc and onnxruntime differ), saved to ``outputs``."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    try:
        with np.load(inputs) as data:
            feeds = {k: data[k] for k in data.files}
        if evaluator:
            proto = onnx.load(str(model))
            names = [o.name for o in proto.graph.output]
            values = ReferenceEvaluator(proto).run(None, feeds)
        else:
            session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
            names = [o.name for o in session.get_outputs()]
            values = session.run(names, feeds)
        np.savez(outputs, **{f"o{i}": np.asarray(v) for i, v in enumerate(values)})
        return {"code": 0, "names": names}
    except Exception as err:  # noqa: BLE001 -- onnxruntime's own exception types
        return {"code": 1, "error": str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__}


class Worker:
    """A persistent worker process, restarted after a hang, a death or ``recycle`` jobs."""

    def __init__(self, memory_mb: int, recycle: int = 300):
        self.memory_mb, self.recycle = memory_mb, recycle
        self.proc: subprocess.Popen | None = None
        self.jobs = 0
        self.restarts = 0

    def _start(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", "--memory-mb", str(self.memory_mb)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env=env, cwd=tempfile.gettempdir())
        ready = self._read(120)
        if ready is None or not ready.get("ready"):
            raise RuntimeError("fuzz worker did not start")
        self.jobs = 0

    def _read(self, timeout: float) -> dict | None:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
            self.proc = None

    def call(self, job: dict, timeout: float) -> Call:
        if self.proc is None or self.jobs >= self.recycle:
            self.stop()
            self._start()
        self.jobs += 1
        start = time.perf_counter()
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        result = self._read(timeout)
        if result is not None:
            return Call(result.get("code"), result.get("stdout", ""), result.get("stderr", ""),
                        time.perf_counter() - start, extra=result)
        hang = self.proc.poll() is None
        self.stop() if hang else self.proc.wait()
        code = self.proc.returncode if self.proc is not None else None
        self.proc = None
        self.restarts += 1
        return Call(None, seconds=time.perf_counter() - start, hang=hang,
                    signal=-code if code is not None and code < 0 else None)


def fresh_call(argv: list[str], timeout: float, memory_mb: int) -> Call:
    """``python -m hetc ARGV`` in a new process with the same limits as a worker."""
    start = time.perf_counter()
    limit = memory_mb * 2**20
    boot = (f"import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit})); "
            "sys.argv = ['hetc', *sys.argv[1:]]; runpy.run_module('hetc', run_name='__main__', alter_sys=True)")
    proc = subprocess.Popen([sys.executable, "-c", boot, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return Call(None, seconds=time.perf_counter() - start, hang=True)
    code = proc.returncode
    return Call(code if code >= 0 else None, out, err, time.perf_counter() - start,
                signal=-code if code < 0 else None)


def judge(call: Call, leftovers: list[str]) -> str:
    """The outcome of one failed-or-not CLI call: "ok" (exit 0, nothing on stderr), "error"
    (the contract for bad input) or the bug's name."""
    if call.hang:
        return "hang"
    if call.signal is not None or call.code is None:
        return "signal"
    if "Traceback (most recent call last)" in call.stderr + call.stdout:
        return "traceback"
    if call.code == 0:
        return "noisy-success" if call.stderr.strip() else "ok"
    lines = [ln for ln in call.stderr.splitlines() if ln.strip()]
    if len(lines) != 1:
        return "multi-line"
    if not lines[0].startswith("hetc: error: "):
        return "not-hetc-error"
    if TVM_TEXT.search(lines[0]):
        return "tvm-text"
    if call.stdout.strip():
        return "stdout-on-error"
    if leftovers:
        return "partial-artifact"
    return "error"


def _inputs_for(manifest: dict, rng: np.random.Generator, seed: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Inputs matching the manifest: each symbolic dim at the size the seed model had at that
    place, clamped into its range (a mutant is about bad input, not about degenerate sizes), or at
    its range's low end (at least 1 if the range allows); floats normal, integers 0 or 1 (valid indices), booleans random."""
    ranges = manifest.get("dims", {})
    had = {(v.name, i): d.dim_value for v in _feeds(seed) for i, d in enumerate(v.type.tensor_type.shape.dim)
           if d.HasField("dim_value")}
    sizes: dict[str, int] = {}
    for spec in manifest["inputs"]:
        for i, d in enumerate(spec["shape"]):
            if isinstance(d, str) and d in ranges and d not in sizes and (spec["name"], i) in had:
                sizes[d] = min(max(had[(spec["name"], i)], ranges[d][0]), ranges[d][1])
    for name, (low, high) in ranges.items():
        sizes.setdefault(name, min(max(low, 1), high))
    out = {}
    for spec in manifest["inputs"]:
        shape = [d if isinstance(d, int) else sizes.get(d, 1) for d in spec["shape"]]
        dtype = np.dtype(spec["dtype"])
        if dtype.kind == "f":
            out[spec["name"]] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            out[spec["name"]] = rng.random(shape) < 0.5
        else:
            out[spec["name"]] = rng.integers(0, 2, shape).astype(dtype)
    return out


def _savez(arrays: dict[str, np.ndarray], path: Path) -> None:
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def _compare(got: dict[str, np.ndarray], want: list[np.ndarray]) -> str | None:
    """Why hetc's outputs differ from the reference's, or None."""
    if len(got) != len(want):
        return f"{len(got)} outputs, the reference {len(want)}"
    for (name, value), ref in zip(got.items(), want):
        if value.shape != ref.shape or value.dtype != ref.dtype:
            return f"{name}: {value.dtype}{list(value.shape)}, the reference {ref.dtype}{list(ref.shape)}"
        if not value.size:
            continue
        if value.dtype.kind not in "fc":
            if not np.array_equal(value, ref):
                return f"{name}: values differ"
            continue
        finite = np.isfinite(ref) & np.isfinite(value)
        scale = float(np.max(np.abs(ref[finite]))) if finite.any() else 0.0
        err = float(np.max(np.abs(value[finite].astype(np.float64) - ref[finite]))) if finite.any() else 0.0
        if err > TOLERANCE * max(scale, 1e-30) and err > 1e-6:
            return f"{name}: max abs error {err:.3e} (max |ref| {scale:.3e})"
        if not np.array_equal(value[~finite], ref[~finite], equal_nan=True):
            return f"{name}: NaN or infinity where the reference has none, or the reverse"
    return None


def _manifest_problem(got: dict[str, np.ndarray], manifest: dict) -> str | None:
    for spec in manifest["outputs"]:
        value = got.get(spec["name"])
        if value is None:
            return f"output {spec['name']} missing"
        if spec["dtype"] != value.dtype.name or len(spec["shape"]) != value.ndim or any(
                isinstance(d, int) and d != s for d, s in zip(spec["shape"], value.shape)):
            return f"{spec['name']}: manifest {spec['dtype']}{spec['shape']}, run {value.dtype}{list(value.shape)}"
    return None


class Runner:
    """Runs mutants and judges them; ``fresh`` runs the real CLI per call."""

    def __init__(self, timeout: float, memory_mb: int, fresh: bool):
        self.timeout, self.memory_mb, self.fresh = timeout, memory_mb, fresh
        self.worker = Worker(memory_mb)

    def cli(self, argv: list[str]) -> Call:
        if self.fresh:
            return fresh_call(argv, self.timeout, self.memory_mb)
        return self.worker.call({"op": "cli", "argv": argv}, self.timeout)

    def run(self, case: Case, directory: Path, index: int, seed_model: onnx.ModelProto) -> dict:
        model = write_case(case, directory)
        out = directory / "out"
        before = sorted(p.name for p in directory.iterdir())
        compiled = self.cli(["compile", str(model), "--target", "cpu", "-o", str(out), *case.args])
        after = sorted(p.name for p in directory.iterdir())
        outcome = judge(compiled, [n for n in after if n not in before] if compiled.code != 0 else [])
        record = {"phase": "compile", "code": compiled.code, "seconds": round(compiled.seconds, 3),
                  "stderr": compiled.stderr[-600:]}
        if compiled.signal is not None:
            record["signal"] = compiled.signal
        if outcome != "ok":
            return {**record, "outcome": outcome}
        try:
            manifest = json.loads((out / "manifest.json").read_text())
        except (OSError, ValueError) as err:
            return {**record, "outcome": "partial-artifact", "detail": f"manifest unreadable: {err}"}
        inputs = _inputs_for(manifest, np.random.default_rng(index), seed_model)
        (case.inputs or _savez)(inputs, directory / "inputs.npz")
        got_path, ref_path = directory / "got.npz", directory / "ref.npz"
        ran = self.cli(["run", str(out), "--inputs", str(directory / "inputs.npz"), "--outputs", str(got_path)])
        outcome = judge(ran, [got_path.name] if ran.code != 0 and got_path.exists() else [])
        record.update(phase="run", code=ran.code, seconds=round(record["seconds"] + ran.seconds, 3),
                      stderr=ran.stderr[-600:])
        if ran.signal is not None:
            record["signal"] = ran.signal
        if outcome != "ok":
            return {**record, "outcome": "run-error" if outcome == "error" else outcome}
        with np.load(got_path) as data:
            got = {k: data[k] for k in data.files}
        problem = _manifest_problem(got, manifest)
        if problem:
            return {**record, "outcome": "manifest-wrong", "detail": problem}
        ref = self.worker.call({"op": "reference", "model": str(model), "inputs": str(directory / "inputs.npz"),
                                "outputs": str(ref_path)}, self.timeout)
        if ref.code != 0:
            return {**record, "outcome": "ort-refuses", "detail": ref.extra.get("error", "onnxruntime died")}
        with np.load(ref_path) as data:
            want = [data[f"o{i}"] for i in range(len(data.files))]
        problem = _compare(got, want)
        if problem is None:
            return {**record, "outcome": "ok"}
        if any(a.dtype.kind in "fc" and not np.isfinite(a).all() for a in [*inputs.values(), *want]):
            return {**record, "outcome": "nan-differs", "detail": problem}
        # hetc and onnxruntime differ: the ONNX reference evaluator says which follows the spec
        spec = self.worker.call({"op": "reference", "model": str(model), "inputs": str(directory / "inputs.npz"),
                                 "outputs": str(ref_path), "evaluator": True}, self.timeout)
        if spec.code == 0:
            with np.load(ref_path) as data:
                if _compare(got, [data[f"o{i}"] for i in range(len(data.files))]) is None:
                    return {**record, "outcome": "ort-differs", "detail": f"{problem}; hetc equals onnx.reference"}
        return {**record, "outcome": "mismatch", "detail": problem}

    def close(self) -> None:
        self.worker.stop()


# --- the campaign ---------------------------------------------------------------------------


def _done_ids(path: Path) -> set[int]:
    if not path.exists():
        return set()
    done = set()
    for line in path.read_text().splitlines():
        try:
            done.add(int(json.loads(line)["id"]))
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by an interrupted run: that mutant runs again
    return done


def summarize(path: Path) -> dict:
    counts: dict[str, Counter] = defaultdict(Counter)
    bugs, seconds = [], []
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        counts[r["kind"]][r["outcome"]] += 1
        seconds.append(r.get("total_seconds", r.get("seconds", 0.0)))
        if r["outcome"] not in OK_OUTCOMES:
            bugs.append(r["id"])
    total = Counter()
    for c in counts.values():
        total.update(c)
    return {"results": str(path), "mutants": sum(total.values()), "outcomes": dict(total),
            "bugs": len(bugs), "bug_ids": sorted(bugs)[:200],
            "mean_seconds_per_mutant": round(sum(seconds) / max(len(seconds), 1), 3),
            "per_kind": {k: dict(v) for k, v in sorted(counts.items())}}


def print_table(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    outcomes = [o for o in (*OK_OUTCOMES, *sorted(set(summary["outcomes"]) - set(OK_OUTCOMES)))
                if o in summary["outcomes"]]
    table = Table(title=f"{summary['mutants']} mutants, {summary['bugs']} bugs", title_justify="left")
    table.add_column("kind")
    for o in outcomes:
        table.add_column(o, justify="right")
    table.add_column("total", justify="right")
    for kind, c in summary["per_kind"].items():
        table.add_row(kind, *[str(c.get(o, "")) for o in outcomes], str(sum(c.values())))
    table.add_row("all", *[str(summary["outcomes"].get(o, "")) for o in outcomes], str(summary["mutants"]))
    Console(width=200).print(table)


def _source_version() -> str:
    """The hetc commit the campaign ran (``+dirty`` with uncommitted changes), or "unknown"."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "hetc"], capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def run_campaign(args) -> dict:
    kinds = sorted(MUTATIONS) if not args.kinds else args.kinds.split(",")
    unknown = [k for k in kinds if k not in MUTATIONS]
    if unknown:
        raise SystemExit(f"unknown kind(s) {', '.join(unknown)}; known: {', '.join(sorted(MUTATIONS))}")
    seeds = {name: build() for name, build in SEEDS.items()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    bugs_dir = out.with_suffix(".bugs")
    done = _done_ids(out)
    ids = [int(i) for i in args.ids.split(",")] if args.ids else range(args.start, args.start + args.count)
    todo = [i for i in ids if i not in done]
    print(f"{len(todo)} mutants to run ({len(done)} already in {out}), kinds: {', '.join(kinds)}", flush=True)
    lock = threading.Lock()
    runners: list[Runner] = []
    local = threading.local()
    work = Path(tempfile.mkdtemp(prefix="hetc-fuzz-"))
    start = time.perf_counter()
    finished = [0]

    def one(index: int) -> None:
        if not hasattr(local, "runner"):
            local.runner = Runner(args.timeout, args.memory_mb, args.fresh)
            with lock:
                runners.append(local.runner)
        kind, case, detail = make_case(args.seed, index, kinds, seeds)
        directory = work / str(index)
        t0 = time.perf_counter()
        try:
            result = local.runner.run(case, directory, index, seeds[case.seed].model)
        except Exception as err:  # noqa: BLE001 -- the harness's own failure: recorded, not fatal
            result = {"outcome": "harness-error", "detail": f"{type(err).__name__}: {err}"}
        record = {"id": index, "kind": kind, "seed": case.seed, "mutation": detail, "args": case.args,
                  **result, "total_seconds": round(time.perf_counter() - t0, 3)}
        if record["outcome"] not in OK_OUTCOMES:
            shutil.copytree(directory, bugs_dir / f"{index}-{kind}", dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("*.so", "huge.bin"))
        shutil.rmtree(directory, ignore_errors=True)
        with lock:
            with open(out, "a") as f:
                f.write(json.dumps(record) + "\n")
            finished[0] += 1
            if record["outcome"] not in OK_OUTCOMES or finished[0] % args.progress == 0:
                rate = (time.perf_counter() - start) / finished[0]
                print(f"[{finished[0]}/{len(todo)} {rate:.2f} s/mutant] {index} {kind} {record['outcome']}"
                      + (f": {record.get('detail') or record.get('stderr', '')[-300:]}"
                         if record["outcome"] not in OK_OUTCOMES else ""), flush=True)

    try:
        with ThreadPoolExecutor(max_workers=args.workers) as pool:
            list(pool.map(one, todo))
    finally:
        for r in runners:
            r.close()
        shutil.rmtree(work, ignore_errors=True)
    summary = summarize(out)
    summary.update(seed=args.seed, kinds=kinds, wall_seconds_this_run=round(time.perf_counter() - start, 1),
                   source=_source_version(),
                   mode="fresh" if args.fresh else "worker", memory_mb=args.memory_mb, timeout=args.timeout,
                   worker_restarts=sum(r.worker.restarts for r in runners))
    Path(str(out) + ".summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print_table(summary)
    return summary


def replay(args) -> None:
    """Write mutant ``--replay`` into ``--replay-dir`` and print its commands."""
    kinds = sorted(MUTATIONS) if not args.kinds else args.kinds.split(",")
    seeds = {name: build() for name, build in SEEDS.items()}
    kind, case, detail = make_case(args.seed, args.replay, kinds, seeds)
    directory = Path(args.replay_dir or f"fuzz-replay-{args.replay}")
    model = write_case(case, directory)
    print(f"mutant {args.replay}: {kind} on {case.seed}: {detail}")
    print(f"hetc compile {model} --target cpu -o {directory / 'out'} {' '.join(case.args)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="campaign seed: mutant i is a function of (seed, i)")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--start", type=int, default=0, help="first mutant id")
    parser.add_argument("--ids", default="", help="comma-separated mutant ids to run (instead of --start/--count)")
    parser.add_argument("--out", default="fuzz-results.jsonl", help="results, one JSON line per mutant (resumed)")
    parser.add_argument("--kinds", default="", help=f"comma-separated kinds (default all: {', '.join(sorted(MUTATIONS))})")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one hetc call may take")
    parser.add_argument("--memory-mb", type=int, default=4096, help="RLIMIT_AS of the hetc processes")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--fresh", action="store_true", help="run `python -m hetc` per call, not a worker")
    parser.add_argument("--progress", type=int, default=100, help="print a line every N mutants")
    parser.add_argument("--replay", type=int, default=None, help="write mutant ID and print its commands")
    parser.add_argument("--replay-dir", default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(args.memory_mb)
        return 0
    if args.replay is not None:
        replay(args)
        return 0
    summary = run_campaign(args)
    return 1 if summary["bugs"] else 0


if __name__ == "__main__":
    sys.exit(main())
