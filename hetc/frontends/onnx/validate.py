"""Limits a model must respect before TVM sees it.

The ONNX checker accepts models that TVM then fails on with its own internal messages, or that
would need more memory than the machine has. The loader calls these checks in this order:

1. ``check_declared`` (before any tensor data is read): the IR version and opsets are ones
   hetc knows; every declared dim is 0..``MAX_DIM``; size-like attributes are in range; no
   tensor's declared size (dims x element size), nor all initializers together, exceed the
   machine's memory (``machine_memory``).
2. ``check_tensor_data`` (after external data is loaded): each tensor holds exactly as much
   data as its dims say.
3. ``check_outputs`` (after shape inference): the declared output dtypes and shapes agree with
   what the graph computes; ``check_inferred`` then applies 1.'s dim and memory limits to every
   tensor shape inference computed, and ``check_input_ranks`` checks the inputs the spec
   requires to be 1-D.

Each failure is one ``ModelLoadError`` naming the tensor, node or attribute.
"""

from __future__ import annotations

import math
import resource
from collections.abc import Iterable, Iterator

import numpy as np
import onnx
from onnx import helper

from ...errors import ModelLoadError
from ...options import MAX_DIM
from . import registry

# attributes whose ints are values, not sizes or axes: any int64 is meaningful there
# (Slice's starts/ends use INT64_MAX for "to the end" before opset 10)
_VALUE_ATTRS = {"value_int", "value_ints", "starts", "ends", "pool_int64s", "ngram_counts", "ngram_indexes",
                "classlabels_int64s", "keys_int64s", "values_int64s", "default_int64", "cats_int64s"}
_POSITIVE_ATTRS = {"strides", "dilations", "kernel_shape", "group"}  # must be >= 1
_PADS_MAY_BE_NEGATIVE = {"Pad"}  # Pad's pads attribute (opset < 11) crops where negative
# element types packed below one byte: bits per element
_PACKED_BITS = {onnx.TensorProto.INT4: 4, onnx.TensorProto.UINT4: 4, onnx.TensorProto.FLOAT4E2M1: 4,
                getattr(onnx.TensorProto, "INT2", -1): 2, getattr(onnx.TensorProto, "UINT2", -1): 2}
_KNOWN_TYPES = set(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}
_UNPACKED = {getattr(onnx.TensorProto, "FLOAT6E2M3", -1), getattr(onnx.TensorProto, "FLOAT6E3M2", -1)}


def machine_memory() -> int:
    """Bytes this process may use: the machine's memory, or the address-space limit if lower."""
    import psutil

    total = psutil.virtual_memory().total
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return min(total, soft) if soft != resource.RLIM_INFINITY else total


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:,.1f} GB"


def graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """The graph and every subgraph nested in node attributes (If, Loop, Scan)."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from graphs(g)


def tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor stored in the model: initializers, sparse ones' parts, attribute tensors."""
    for graph in graphs(model.graph):
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield sparse.values
            yield sparse.indices
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors


def node_label(node: onnx.NodeProto) -> str:
    return f"node '{node.name or '<unnamed>'}' ({node.op_type})"


def _element_bits(elem_type: int) -> int | None:
    """Bits one element takes in memory; None for an element type numpy has no type for."""
    if elem_type in _PACKED_BITS:
        return _PACKED_BITS[elem_type]
    try:
        return 8 * np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return None


def _check_dims(dims: Iterable[int], what: str, label: str) -> None:
    for i, size in enumerate(dims):
        if not 0 <= size <= MAX_DIM:
            raise ModelLoadError(f"{label}: {what} dim {i} is {size}; a dim must be 0..{MAX_DIM} "
                                 "(leave an unknown dim unset or give it a name)")


def _value_dims(value: onnx.ValueInfoProto) -> list[int | None] | None:
    """The dims of a tensor value info (None for an unknown or named dim), or None without a shape."""
    if value.type.WhichOneof("value") != "tensor_type" or not value.type.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim]


def _check_value_dims(values: Iterable[onnx.ValueInfoProto], kind: str, label: str) -> None:
    for value in values:
        if value.type.WhichOneof("value") == "tensor_type" and value.type.tensor_type.HasField("shape"):
            _check_dims((d.dim_value for d in value.type.tensor_type.shape.dim if d.HasField("dim_value")),
                        f"{kind} '{value.name}'", label)


def _check_size(name: str, dims: Iterable[int], elem_type: int, what: str, label: str, memory: int) -> int:
    """The bytes a tensor of ``dims`` takes (0 where its element type is unknown); a
    ModelLoadError if that exceeds ``memory``."""
    bits = _element_bits(elem_type)
    nbytes = math.prod(dims) * (bits or 0) // 8
    if nbytes > memory:
        raise ModelLoadError(f"{label}: {what} '{name}' needs {_gb(nbytes)}, more than this machine's memory "
                             f"({_gb(memory)})")
    return nbytes


def _check_attributes(node: onnx.NodeProto, label: str) -> None:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.INT:
            values = [attr.i]
        elif attr.type == onnx.AttributeProto.INTS:
            values = list(attr.ints)
        else:
            continue
        if attr.name in _VALUE_ATTRS:
            continue
        shown = values[0] if attr.type == onnx.AttributeProto.INT else values
        if any(abs(v) > MAX_DIM for v in values):
            raise ModelLoadError(f"{label}: {node_label(node)}: attribute {attr.name}={shown} is out of range "
                                 f"(at most {MAX_DIM} in magnitude)")
        if attr.name in _POSITIVE_ATTRS and any(v < 1 for v in values):
            raise ModelLoadError(f"{label}: {node_label(node)}: attribute {attr.name}={shown} must be >= 1")
        if attr.name == "pads" and node.op_type not in _PADS_MAY_BE_NEGATIVE and any(v < 0 for v in values):
            raise ModelLoadError(f"{label}: {node_label(node)}: attribute pads={shown} must be >= 0")


def check_text(message, label: str) -> None:
    """Every string field of a proto is UTF-8 text (protobuf hands invalid UTF-8 over as bytes)."""
    for fd, value in message.ListFields():
        if fd.type == fd.TYPE_STRING:
            if any(not isinstance(v, str) for v in (value if fd.is_repeated else [value])):
                raise ModelLoadError(f"{label}: not a valid ONNX file (field '{fd.name}' of a "
                                     f"{message.DESCRIPTOR.name} is not UTF-8 text)")
        elif fd.type == fd.TYPE_MESSAGE:
            for item in value if fd.is_repeated else [value]:
                check_text(item, label)


def check_declared(model: onnx.ModelProto, label: str) -> None:
    """Versions, declared dims, attribute ranges and declared tensor sizes (before reading data)."""
    names = [v.name for v in model.graph.output]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ModelLoadError(f"{label}: graph output(s) {', '.join(twice)} listed more than once")
    newest_ir, newest_opset = onnx.IR_VERSION, onnx.defs.onnx_opset_version()
    if model.ir_version > newest_ir:
        raise ModelLoadError(f"{label}: IR version {model.ir_version} is newer than hetc supports (newest "
                             f"{newest_ir}); export the model with IR version {newest_ir} or older")
    for entry in model.opset_import:
        if entry.domain in registry.DEFAULT_DOMAINS and not 1 <= entry.version <= newest_opset:
            raise ModelLoadError(f"{label}: the model imports opset {entry.version} of the ONNX domain; hetc's "
                                 f"converters know opsets 1 to {newest_opset} (export it at opset {newest_opset} "
                                 "or older)")
    memory = machine_memory()
    total = 0
    for graph in graphs(model.graph):
        for kind, values in (("input", graph.input), ("output", graph.output), ("value_info", graph.value_info)):
            _check_value_dims(values, kind, label)
        for node in graph.node:
            _check_attributes(node, label)
    for tensor in tensors(model):
        if tensor.data_type not in _KNOWN_TYPES:
            raise ModelLoadError(f"{label}: tensor '{tensor.name}' has unknown element type {tensor.data_type}")
        _check_dims(tensor.dims, f"tensor '{tensor.name}'", label)
        total += _check_size(tensor.name, tensor.dims, tensor.data_type, "tensor", label, memory)
    if total > memory:
        raise ModelLoadError(f"{label}: the model's tensors need {_gb(total)} together, more than this machine's "
                             f"memory ({_gb(memory)})")


def _stored(tensor: onnx.TensorProto) -> tuple[str, int] | None:
    """Where a tensor's data is and how many units (bytes of raw_data, or entries of its typed
    field) it holds; None when it holds none."""
    if tensor.HasField("raw_data"):
        return "raw_data", len(tensor.raw_data)
    for name in ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data"):
        count = len(getattr(tensor, name))
        if count:
            return name, count
    return None


def check_tensor_data(model: onnx.ModelProto, label: str) -> None:
    """Each tensor (external data already loaded) holds exactly the data its dims call for."""
    for tensor in tensors(model):
        if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.data_type in _UNPACKED:
            continue
        stored = _stored(tensor)
        count = math.prod(tensor.dims)
        if stored is None:
            if count:
                raise ModelLoadError(f"{label}: tensor '{tensor.name}' holds no data; its dims "
                                     f"{list(tensor.dims)} call for {count} element(s)")
            continue
        field, have = stored
        bits = _element_bits(tensor.data_type)
        if bits is None or tensor.data_type == onnx.TensorProto.STRING:
            if tensor.data_type == onnx.TensorProto.STRING and field == "string_data" and have != count:
                raise ModelLoadError(f"{label}: tensor '{tensor.name}' holds {have} strings, its dims "
                                     f"{list(tensor.dims)} call for {count}")
            continue  # the checker judges unknown element types and raw strings
        if field == "raw_data":
            want = math.ceil(count * bits / 8)
        elif tensor.data_type in _PACKED_BITS:
            want = math.ceil(count * bits / 8)  # one entry per byte of packed elements
        elif tensor.data_type in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128):
            want = 2 * count
        else:
            want = count
        if have != want:
            unit = "bytes" if field == "raw_data" else f"{field} entries"
            raise ModelLoadError(f"{label}: tensor '{tensor.name}' holds {have} {unit} of data, its dims "
                                 f"{list(tensor.dims)} and element type call for {want}")


def _same_dims(declared: onnx.ValueInfoProto, computed: onnx.ValueInfoProto) -> str | None:
    """Where a declared output disagrees with the computed one, in words; None if it does not."""
    d_type, c_type = declared.type.tensor_type, computed.type.tensor_type
    if d_type.elem_type and c_type.elem_type and d_type.elem_type != c_type.elem_type:
        return (f"declares dtype {helper.tensor_dtype_to_string(d_type.elem_type).removeprefix('TensorProto.')}, "
                f"the graph computes {helper.tensor_dtype_to_string(c_type.elem_type).removeprefix('TensorProto.')}")
    if not d_type.HasField("shape") or not c_type.HasField("shape"):
        return None

    def show(dims) -> str:
        return "[" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                               for d in dims) + "]"

    d_dims, c_dims = d_type.shape.dim, c_type.shape.dim
    if len(d_dims) != len(c_dims) or any(
            a.HasField("dim_value") and b.HasField("dim_value") and a.dim_value != b.dim_value
            for a, b in zip(d_dims, c_dims)):
        return f"declares shape {show(d_dims)}, the graph computes {show(c_dims)}"
    return None


def check_outputs(declared: Iterable[onnx.ValueInfoProto], computed: onnx.GraphProto, label: str) -> None:
    """Each declared graph output agrees with what shape inference computed for it (a dim the
    model names and the graph fixes is fine; static dims, ranks and dtypes must match)."""
    inferred = {v.name: v for v in computed.output}
    for value in declared:
        other = inferred.get(value.name)
        if other is None or other.type.WhichOneof("value") != "tensor_type" \
                or value.type.WhichOneof("value") != "tensor_type":
            continue
        problem = _same_dims(value, other)
        if problem:
            raise ModelLoadError(f"{label}: output '{value.name}' {problem}; fix the output's declared type "
                                 "in the model")


def check_inferred(model: onnx.ModelProto, label: str) -> None:
    """Every tensor shape inference computed (intermediates included) has dims 0..MAX_DIM and
    fits in memory."""
    memory = machine_memory()
    producer = {out: node for node in model.graph.node for out in node.output}
    for value in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        dims = _value_dims(value)
        if dims is None:
            continue
        node = producer.get(value.name)
        what = f"tensor '{value.name}'" + (f" (output of {node_label(node)})" if node is not None else "")
        for i, size in enumerate(dims):
            if size is not None and not 0 <= size <= MAX_DIM:
                raise ModelLoadError(f"{label}: {what} would have dim {i} of {size}; a dim must be 0..{MAX_DIM}")
        if None not in dims:
            _check_size(value.name, dims, value.type.tensor_type.elem_type,
                        "tensor" if node is None else f"{node_label(node)}: output", label, memory)


# inputs the spec requires to be 1-D (as onnxruntime does): op -> their indices
_VECTOR_INPUTS = {"Conv": (2,), "ConvTranspose": (2,), "Slice": (1, 2, 3, 4), "Reshape": (1,), "Expand": (1,),
                  "Tile": (1,), "ConstantOfShape": (0,), "Squeeze": (1,), "Unsqueeze": (1,)}


def check_input_ranks(model: onnx.ModelProto, label: str) -> None:
    """Inputs the spec requires to be 1-D (Conv's bias, Slice's starts and ends, Reshape's
    shape, ...) are, where inference knows their rank."""
    ranks = {t.name: len(t.dims) for t in model.graph.initializer}
    for value in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        if value.type.WhichOneof("value") == "tensor_type" and value.type.tensor_type.HasField("shape"):
            ranks[value.name] = len(value.type.tensor_type.shape.dim)
    for node in model.graph.node:
        if node.domain not in registry.DEFAULT_DOMAINS:
            continue
        for index in _VECTOR_INPUTS.get(node.op_type, ()):
            name = node.input[index] if index < len(node.input) else ""
            if name and ranks.get(name, 1) != 1:
                raise ModelLoadError(f"{label}: {node_label(node)}: input {index} ('{name}') has rank {ranks[name]}; "
                                     "the op takes a 1-D tensor there")
