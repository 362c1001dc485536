"""Load and validate ONNX models.

Loading is strict and happens before any conversion: the file must parse, every op must
have a converter (all missing ones are reported at once), the ONNX checker and strict shape
inference must pass, external data may only come from inside the model's directory, and
and input dims not bound by ``input_shapes`` stay symbolic: named by their ONNX ``dim_param``
(the same name is the same dim across inputs), or ``<input>_<axis>`` where the model leaves a
dim unnamed, each with a range (``dims``, else ``DEFAULT_DIM_RANGE``).
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnx.inliner
from google.protobuf.message import DecodeError
from onnx import external_data_helper, helper, numpy_helper

from ...errors import ModelLoadError, ShapeError, UnsafePathError, UnsupportedOpError, UsageError, first_line
from ...options import MAX_DIM
from . import registry, validate
from .fold import fold_shape_computations
from .merged_decoder import cache_branch, declare_mask
from .qdq import fuse_qdq
from .validate import graphs as _graphs
from .validate import tensors as _tensors

ModelSource = str | os.PathLike | onnx.ModelProto
log = logging.getLogger(__name__)

# The range of a symbolic dim the user did not declare with --dim NAME=LO:HI (API: dims=).
DEFAULT_DIM_RANGE = (1, 65536)
_DIM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class TensorSpec:
    """A graph input or output: name, shape, numpy dtype name. A dim is an int (static), the
    name of a symbolic dim (``"batch"``; inputs, and outputs where ONNX infers it), or None (an
    output dim ONNX cannot express: data-dependent as in NonZero, or an expression of dims)."""

    name: str
    shape: tuple[int | str | None, ...]
    dtype: str

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: Mapping) -> TensorSpec:
        return cls(str(data["name"]), tuple(d if d is None or isinstance(d, str) else int(d)
                                            for d in data["shape"]), str(data["dtype"]))


@dataclass
class LoadedModel:
    """A validated model with input shapes bound or symbolic, and shapes inferred."""

    proto: onnx.ModelProto
    name: str  # file stem or graph name, for messages
    opset: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    dims: dict[str, tuple[int, int]] = field(default_factory=dict)  # symbolic dim -> (low, high)

    def require_static(self, what: str) -> None:
        """A UsageError unless every input dim is bound (for paths that need static shapes)."""
        if self.dims:
            inputs = ", ".join(f"{s.name}[{', '.join(str(d) for d in s.shape)}]" for s in self.inputs
                               if any(isinstance(d, str) for d in s.shape))
            raise UsageError(f"{what} needs static input shapes; bind the symbolic dims "
                             f"({', '.join(self.dims)}) of {inputs} with --input-shape NAME=D0,D1,...")


def _load_external_data(model: onnx.ModelProto, base_dir: Path | None, label: str) -> None:
    """Load external tensors in place, refusing any location outside ``base_dir``."""
    for tensor in _tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        try:
            info = external_data_helper.ExternalDataInfo(tensor)
        except (ValueError, TypeError) as err:  # a negative or non-integer offset or length
            raise ModelLoadError(f"{label}: tensor '{tensor.name}' has invalid external data fields: "
                                 f"{first_line(err)}") from err
        location = info.location
        if base_dir is None:
            raise ModelLoadError(
                f"{label}: tensor '{tensor.name}' has external data '{location}' but the model "
                "was given as a ModelProto without base_dir"
            )
        if not location or os.path.isabs(location) or Path(location).drive:
            raise UnsafePathError(
                f"{label}: tensor '{tensor.name}' external data location '{location}' must be "
                "a relative path inside the model's directory"
            )
        root = base_dir.resolve()
        target = (root / location).resolve()
        if not target.is_relative_to(root):
            raise UnsafePathError(
                f"{label}: tensor '{tensor.name}' external data location '{location}' escapes "
                f"the model's directory {root}"
            )
        if not target.is_file():
            raise ModelLoadError(f"{label}: external data file '{location}' of tensor "
                                 f"'{tensor.name}' not found in {root}")
        size = target.stat().st_size
        offset, length = int(info.offset or 0), info.length
        if offset > size or (length is not None and offset + int(length) > size):
            raise ModelLoadError(f"{label}: external data file '{location}' is truncated "
                                 f"(tensor '{tensor.name}' needs bytes {offset}..{offset + int(length or 0)}, "
                                 f"file has {size})")
        try:
            external_data_helper.load_external_data_for_tensor(tensor, str(root))
        except Exception as err:  # onnx raises several types here
            raise ModelLoadError(f"{label}: cannot read external data of '{tensor.name}': "
                                 f"{first_line(err)}") from err
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT


def _read(source: ModelSource, base_dir: Path | None) -> tuple[onnx.ModelProto, str, Path | None]:
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)
        return model, model.graph.name or "model", base_dir
    path = Path(source)
    if not path.exists():
        raise ModelLoadError(f"{path}: no such file")
    if not path.is_file():
        raise ModelLoadError(f"{path}: not a file")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ModelLoadError(f"{path}: cannot read: {err.strerror}") from err
    if not data:
        raise ModelLoadError(f"{path}: file is empty")
    try:
        model = onnx.ModelProto.FromString(data)
    except (DecodeError, RuntimeError, ValueError) as err:
        raise ModelLoadError(f"{path}: not a valid ONNX file (truncated or not protobuf)") from err
    if not model.HasField("graph") or not model.ir_version:
        raise ModelLoadError(f"{path}: not an ONNX model (no graph or IR version)")
    validate.check_text(model, str(path))
    return model, str(path), base_dir or path.parent


def model_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in registry.DEFAULT_DOMAINS:
            return int(entry.version)
    return 1


def op_histogram(model: onnx.ModelProto) -> Counter:
    """Op types (prefixed with their domain when not the default one), nested graphs included."""
    counts: Counter = Counter()
    for graph in _graphs(model.graph):
        for node in graph.node:
            domain = "" if node.domain in registry.DEFAULT_DOMAINS else f"{node.domain}::"
            counts[domain + node.op_type] += 1
    return counts


def check_supported(model: onnx.ModelProto, label: str) -> None:
    """Raise one UnsupportedOpError listing every op no converter handles."""
    from .importer import converter_source  # late: imports TVM

    opset = model_opset(model)
    # Histogram keys carry "domain::" for non-default domains, which no converter handles.
    missing = sorted(op for op in op_histogram(model) if "::" in op or converter_source(op, opset) is None)
    if missing:
        raise UnsupportedOpError(
            f"{label}: unsupported op(s) at opset {opset}: {', '.join(missing)} "
            "(see `hetc list ops`)", missing
        )


def _expand_functions(model: onnx.ModelProto, label: str) -> onnx.ModelProto:
    """Nodes of ops no converter handles replaced by their ONNX function bodies (functions.py)."""
    from .functions import expand_unsupported
    from .importer import converter_source  # late: imports TVM

    opset = model_opset(model)
    try:
        return expand_unsupported(model, lambda domain, op: domain in registry.DEFAULT_DOMAINS
                                  and converter_source(op, opset) is not None)
    except Exception as err:  # noqa: BLE001 - check_supported then names the op
        log.debug("%s: function expansion failed: %s", label, first_line(err))
        return model


def _dtype(value: onnx.ValueInfoProto, label: str) -> str:
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        raise ModelLoadError(f"{label}: input/output '{value.name}' is a {kind}; only tensors are supported")
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)).name
    except (KeyError, TypeError) as err:
        raise ModelLoadError(f"{label}: '{value.name}' has unsupported element type "
                             f"{value.type.tensor_type.elem_type}") from err


def graph_inputs(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """The inputs the caller feeds: graph inputs that are not initializers (IR < 4 lists both)."""
    inits = {t.name for t in model.graph.initializer}
    return {v.name: v for v in model.graph.input if v.name not in inits}


def _bind_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], label: str) -> None:
    """Fix the dims ``shapes`` gives; name every other unknown dim (in place)."""
    feeds = graph_inputs(model)
    unknown = sorted(set(shapes) - set(feeds))
    if unknown:
        raise UsageError(f"--input-shape names unknown input(s) {', '.join(unknown)}; "
                         f"the model's inputs are {', '.join(feeds)}")
    for name, value in feeds.items():
        tensor_type = value.type.tensor_type
        if name in shapes:
            wanted = [int(d) for d in shapes[name]]
            if any(d < 0 for d in wanted):
                raise UsageError(f"input '{name}': shape {wanted} must not have negative dims")
            if any(d > MAX_DIM for d in wanted):
                raise UsageError(f"input '{name}': shape {wanted} has a dim above {MAX_DIM}")
            if tensor_type.HasField("shape"):
                dims = tensor_type.shape.dim
                if len(dims) != len(wanted):
                    raise UsageError(f"input '{name}' has rank {len(dims)}, --input-shape gives "
                                     f"rank {len(wanted)} ({wanted})")
                for i, (dim, size) in enumerate(zip(dims, wanted)):
                    if dim.HasField("dim_value") and dim.dim_value != size:
                        raise UsageError(f"input '{name}' dim {i} is fixed to {dim.dim_value} in the "
                                         f"model, --input-shape gives {size}")
            tensor_type.ClearField("shape")
            for size in wanted:
                tensor_type.shape.dim.add().dim_value = size
            continue
        if not tensor_type.HasField("shape"):
            raise ShapeError(f"{label}: input '{name}' has unknown rank; bind it with "
                             f"--input-shape {name}=D0,D1,...")
        for i, dim in enumerate(tensor_type.shape.dim):
            if dim.HasField("dim_value"):
                continue
            if not dim.dim_param:
                dim.dim_param = re.sub(r"\W", "_", f"{name}_{i}")


def _plain_dim_names(model: onnx.ModelProto) -> dict[str, str]:
    """Rename dims named by an expression to plain names, everywhere in the graph (in place);
    returns {old name: new name}.

    ONNX dim names are opaque strings: optimum names a decoder's mask dim
    ``past_sequence_length + sequence_length``. onnxruntime only compares names, so hetc does
    the same: the name becomes ``past_sequence_length_sequence_length`` (a fresh one where that
    is taken), one symbol like any other, with the same name wherever it occurs. ``--dim`` takes
    either name.
    """
    graph = model.graph
    values = [*graph.input, *graph.output, *graph.value_info]
    dims = [d for v in values if v.type.HasField("tensor_type")
            for d in v.type.tensor_type.shape.dim if not d.HasField("dim_value") and d.dim_param]
    taken = {d.dim_param for d in dims}
    renamed: dict[str, str] = {}
    for dim in dims:
        old = dim.dim_param
        if _DIM_NAME.fullmatch(old):
            continue
        if old not in renamed:
            base = re.sub(r"\W+", "_", old).strip("_") or "dim"
            base = base if not base[0].isdigit() else f"d_{base}"
            new, k = base, 1
            while new in taken:
                new, k = f"{base}_{k}", k + 1
            renamed[old] = new
            taken.add(new)
        dim.dim_param = renamed[old]
    return renamed


def _symbolic_dims(model: onnx.ModelProto, ranges: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, int]]:
    """Each symbolic input dim's (low, high): declared, else ``DEFAULT_DIM_RANGE``."""
    names = {d.dim_param for v in graph_inputs(model).values() for d in v.type.tensor_type.shape.dim
             if not d.HasField("dim_value")}
    unknown = sorted(set(ranges) - names)
    if unknown:
        have = ", ".join(sorted(names)) or "none (every input dim is static)"
        raise UsageError(f"--dim names unknown dim(s) {', '.join(unknown)}; the model's symbolic dims: {have}")
    result = {n: tuple(int(v) for v in ranges.get(n, DEFAULT_DIM_RANGE)) for n in sorted(names)}
    for name, (low, high) in result.items():
        if not 0 <= low <= high <= MAX_DIM:
            raise UsageError(f"--dim {name}={low}:{high}: the range must have 0 <= low <= high <= {MAX_DIM}")
    return result


def _fix_single_value_dims(model: onnx.ModelProto, ranges: dict[str, tuple[int, int]]) -> None:
    """A dim declared with one value (``--dim seq=1:1``) is static: set it in every input that
    has it and drop it from ``ranges`` (in place). The code is then specialised for that size
    while the other dims stay symbolic: a decoder's one-token step (``seq`` 1) with any past
    length (``past_seq`` symbolic) gets matmuls of static shape."""
    fixed = {name: low for name, (low, high) in ranges.items() if low == high}
    for value in [*graph_inputs(model).values(), *model.graph.output]:
        for dim in value.type.tensor_type.shape.dim:
            if not dim.HasField("dim_value") and dim.dim_param in fixed:
                dim.dim_value = fixed[dim.dim_param]  # clears dim_param (a oneof)
    for name in fixed:
        del ranges[name]


def _input_spec(value: onnx.ValueInfoProto, label: str) -> TensorSpec:
    dims = value.type.tensor_type.shape.dim
    return TensorSpec(value.name, tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims),
                      _dtype(value, label))


def _output_spec(value: onnx.ValueInfoProto, label: str, known: Mapping[str, object]) -> TensorSpec:
    """An output's spec; a dim named after a symbolic input dim keeps its name, any other
    unknown dim (data-dependent, or an expression) is None."""
    if not value.type.tensor_type.HasField("shape"):
        raise ShapeError(f"{label}: the rank of output '{value.name}' could not be inferred")
    shape = value.type.tensor_type.shape.dim
    return TensorSpec(value.name, tuple(int(d.dim_value) if d.HasField("dim_value")
                                        else d.dim_param if d.dim_param in known else None
                                        for d in shape), _dtype(value, label))


_INFERENCE_ERRORS = (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError, ValueError)
# "(op_type:Conv, node name: c1): [ShapeInferenceError] Attribute kernel_shape has incorrect size"
_NODE_ERROR = re.compile(r"\(op_type:(\w+)(?:, node name: ([^)]*))?\): \[\w+\] (.*)")


def _inference_problem(err: BaseException) -> str:
    """ONNX's shape inference error in hetc's words: ``node 'c1' (Conv): <what ONNX says>``."""
    text = first_line(err)
    found = _NODE_ERROR.search(text)
    if found:
        op, node, what = found.groups()
        return f"node '{node or '<unnamed>'}' ({op}): {what.strip()}"
    return text.replace("[ShapeInferenceError] ", "").replace("[TypeInferenceError] ", "")


def _infer(model: onnx.ModelProto, label: str) -> onnx.ModelProto:
    """Strict shape inference. An error in a node's own inference makes the model invalid (as
    onnxruntime, which refuses to load it); where ONNX's inference of an op's function body or
    subgraph fails (its inference is incomplete there, the model may well be valid), fall back
    to the lenient mode and let conversion decide."""
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except _INFERENCE_ERRORS as strict:
        if str(strict).count("Inference error(s)") < 2:  # not nested in a function body or subgraph
            raise ModelLoadError(f"{label}: invalid ONNX model: {_inference_problem(strict)}") from strict
        try:
            lenient = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=False,
                                                        data_prop=True)
        except _INFERENCE_ERRORS as err:
            raise ShapeError(f"{label}: shape inference failed: {_inference_problem(err)}") from err
        log.debug("%s: strict shape inference failed (%s); using lenient inference", label,
                  first_line(strict))
        return lenient


def _merge_declared(declared: onnx.ValueInfoProto, computed: onnx.ValueInfoProto) -> None:
    """Complete a computed output type with what the model declares where inference left it
    unknown (a dim's value or name, or the whole type), in place."""
    have, given = computed.type.tensor_type, declared.type.tensor_type
    if computed.type.WhichOneof("value") is None or not have.elem_type:
        computed.type.CopyFrom(declared.type)
        return
    if declared.type.WhichOneof("value") != "tensor_type" or not given.HasField("shape"):
        return
    if not have.HasField("shape"):
        have.shape.CopyFrom(given.shape)
        return
    for dim, declared_dim in zip(have.shape.dim, given.shape.dim):
        # "unk__N": a name ONNX's inference made up for a dim it could not express
        if not dim.HasField("dim_value") and (not dim.dim_param or dim.dim_param.startswith("unk__")):
            dim.CopyFrom(declared_dim)


_ASIDE_BYTES = 4096  # initializers larger than this (weights, never shape operands) carry no data to the checks


def _weightless(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose initializers over ``_ASIDE_BYTES`` (weights) are typed graph
    inputs instead. ONNX's checker and shape inference
    serialize the model they are given and parse it back: for BERT-base's 440 MB, 3.3 of a 4.1 s
    load (2-core Intel Xeon, LLVM ``emeraldrapids``); neither needs a weight's values (their sizes are checked by
    ``validate.check_tensor_data``; shape inference reads only small operands: shapes, axes)."""
    light = onnx.ModelProto()
    _copy_fields(model, light, skip="graph")
    _copy_fields(model.graph, light.graph, skip="initializer")
    inputs = {v.name for v in model.graph.input}
    for tensor in model.graph.initializer:
        if tensor.ByteSize() <= _ASIDE_BYTES:
            light.graph.initializer.add().CopyFrom(tensor)
        elif tensor.name not in inputs:
            light.graph.input.append(helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    return light


def _copy_fields(src, dst, skip: str) -> None:
    """Every field ``src`` sets but ``skip`` copied into ``dst`` (protobuf messages of a type)."""
    for descriptor, value in src.ListFields():
        name = descriptor.name
        if name == skip:
            continue
        if hasattr(value, "extend"):  # repeated
            getattr(dst, name).extend(value)
        elif hasattr(value, "CopyFrom"):
            getattr(dst, name).CopyFrom(value)
        else:
            setattr(dst, name, value)


def _with_weights(inferred: onnx.ModelProto, model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with what shape inference on its ``_weightless`` copy computed: the types of
    its outputs and values, and its nodes (those with subgraphs carry theirs)."""
    for name in ("node", "value_info", "output"):
        values = getattr(model.graph, name)
        del values[:]
        values.extend(getattr(inferred.graph, name))
    return model


def _infer_shapes(model: onnx.ModelProto, label: str) -> onnx.ModelProto:
    """Shape inference from the inputs alone: declared output types and intermediate
    ``value_info`` are hints a wrong model gets wrong, so they are set aside, the outputs checked
    against what the graph computes (``validate.check_outputs``), then filled in where inference
    could not tell."""
    declared = [onnx.ValueInfoProto.FromString(v.SerializeToString()) for v in model.graph.output]
    for value in model.graph.output:
        value.ClearField("type")
    del model.graph.value_info[:]
    inferred = _with_weights(_infer(_weightless(model), label), model)
    validate.check_outputs(declared, inferred.graph, label)
    for value, given in zip(inferred.graph.output, declared):
        _merge_declared(given, value)
    validate.check_inferred(inferred, label)
    validate.check_input_ranks(inferred, label)
    return inferred


def read_model(source: ModelSource, base_dir: str | os.PathLike | None = None) -> tuple[onnx.ModelProto, str]:
    """Parse a model (path or proto), inline local functions, load external data safely."""
    model, label, root = _read(source, Path(base_dir) if base_dir is not None else None)
    if model.functions:
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as err:
            raise ModelLoadError(f"{label}: cannot inline the model's local functions: {first_line(err)}") from err
    validate.check_declared(model, label)  # before any tensor data is read
    _load_external_data(model, root, label)
    validate.check_tensor_data(model, label)
    return model, label


def freeze_inputs(model: onnx.ModelProto, values: Mapping[str, np.ndarray], label: str) -> None:
    """Turn graph inputs into initializers holding ``values`` (in place).

    For inputs that fix output shapes (axes, pads, target shapes, k of TopK, ...): a static-shape
    compiler needs their values, as exporters normally store them. The compiled model no
    longer takes these inputs.
    """
    feeds = graph_inputs(model)
    unknown = sorted(set(values) - set(feeds))
    if unknown:
        raise UsageError(f"constant input(s) {', '.join(unknown)} are not inputs of the model; "
                         f"its inputs are {', '.join(feeds)}")
    for name, value in values.items():
        array = np.asarray(value)
        dtype = _dtype(feeds[name], label)
        if array.dtype.name != dtype:
            raise UsageError(f"constant input '{name}' has dtype {array.dtype.name}, the model "
                             f"declares {dtype}")
        dims = feeds[name].type.tensor_type.shape.dim
        if feeds[name].type.tensor_type.HasField("shape") and (
                len(dims) != array.ndim or any(d.HasField("dim_value") and d.dim_value != s
                                               for d, s in zip(dims, array.shape))):
            raise UsageError(f"constant input '{name}' has shape {list(array.shape)}, which the "
                             "model's declared shape does not admit")
        model.graph.initializer.append(numpy_helper.from_array(array, name))
    kept = [v for v in model.graph.input if v.name not in values]
    del model.graph.input[:]
    model.graph.input.extend(kept)


def load_model(source: ModelSource, input_shapes: Mapping[str, Sequence[int]] | None = None,
               base_dir: str | os.PathLike | None = None,
               constant_inputs: Mapping[str, np.ndarray] | None = None,
               dims: Mapping[str, Sequence[int]] | None = None, fuse_qdq_convs: bool = False,
               decoder_cache: bool = False) -> LoadedModel:
    """Read, validate and shape-bind a model from a path or a ``ModelProto``; inputs named in
    ``constant_inputs`` become constants with those values; ``dims`` gives symbolic dims their
    (low, high) range; ``fuse_qdq_convs``: QDQ convs become QLinearConv (``qdq.py``; for
    targets with int8 kernels); ``decoder_cache``: a merged decoder takes its branch with the
    past (``merged_decoder.py``; for builds with the cache in place; every build gets its mask
    declared as long as the presents)."""
    model, label = read_model(source, base_dir)
    if constant_inputs:
        freeze_inputs(model, constant_inputs, label)
    declare_mask(model)
    if decoder_cache:
        freeze_inputs(model, cache_branch(model, label), label)
    model = _expand_functions(model, label)
    check_supported(model, label)
    try:
        onnx.checker.check_model(_weightless(model))
    except (onnx.checker.ValidationError, ValueError) as err:
        raise ModelLoadError(f"{label}: invalid ONNX model: {first_line(err)}") from err
    renamed = _plain_dim_names(model)
    _bind_shapes(model, input_shapes or {}, label)
    ranges = _symbolic_dims(model, {renamed.get(k, k): v for k, v in (dims or {}).items()})
    _fix_single_value_dims(model, ranges)
    model = _infer_shapes(model, label)
    fold_shape_computations(model, model_opset(model))
    if fuse_qdq_convs:
        fuse_qdq(model)
    inputs = [_input_spec(v, label) for v in graph_inputs(model).values()]
    outputs = [_output_spec(v, label, ranges) for v in model.graph.output]
    return LoadedModel(model, label, model_opset(model), inputs, outputs, ranges)
