"""What CANN's ONNX parser (ATC / ``aclgrphParseONNXFromMem``) accepts: versioned data, and the
check that applies it to the ONNX nodes hetc writes for a region.

The op list is CANN's ONNX parser list as ONNX Runtime's CANN execution provider records it
(``SupportONNXModel`` in onnxruntime/core/providers/cann/cann_graph.cc, ORT 1.24, built against
CANN 8.0): ~130 ONNX op types, default domain, opset >= 8. hetc writes every region in one
opset (``spec.OPSET`` = 13), so an op is usable when its entry's opset range holds 13.

Each entry may narrow the dtypes of the op's first input (CANN's AI Core kernels are float16 /
float32 for arithmetic; index and logic ops take integers or bool) and constrain attributes,
from CANN 8.0's ONNX operator specification (``Attr`` rules: e.g. MaxPool without dilation or
column-major indices, Conv/pooling over 2-D images only). ``check`` applies the table to a list
of ``NodeProto`` with the dtypes of their inputs and names the first thing outside it.

To support another op: add its ``OnnxOp`` here (op type, opset range, dtypes, attribute rules)
and a writer for the Relax op that produces it in ``onnx_writer.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .spec import CANN_VERSION, OPSET

FLOAT = frozenset({"float16", "float32"})
INTEGER = frozenset({"int32", "int64"})
ANY = frozenset({"float16", "float32", "int8", "uint8", "int32", "int64", "bool"})


@dataclass(frozen=True)
class Attr:
    """A rule on one attribute: ``ok(value)`` must hold (the value as ``onnx.helper`` gives it,
    or ``default`` when the node omits it); ``why`` says what is outside the table."""

    name: str
    ok: Callable[[object], bool]
    why: str
    default: object = None


@dataclass(frozen=True)
class OnnxOp:
    op_type: str
    opsets: tuple[int, int] = (8, 18)  # the ONNX opset versions the parser takes the op in
    dtypes: frozenset[str] = FLOAT  # of the first input
    attrs: tuple[Attr, ...] = field(default=())


def _ones(v) -> bool:
    return v is None or all(int(d) == 1 for d in v)


_SPATIAL_2D = Attr("kernel_shape", lambda v: v is None or len(v) == 2, "only 2-D windows (NCHW images)")
_NO_DILATION = Attr("dilations", _ones, "dilations other than 1")
_NOTSET = Attr("auto_pad", lambda v: v in (None, b"NOTSET", "NOTSET"), "auto_pad (hetc writes explicit pads)")

# CANN 8.0, ONNX default domain. Ops hetc writes are listed with their constraints; the rest of
# the parser's list is kept as plain entries so the table reads as the whole list.
_TABLE = [
    OnnxOp("Abs"), OnnxOp("Acos"), OnnxOp("Acosh"), OnnxOp("Add", dtypes=FLOAT | INTEGER), OnnxOp("And", dtypes={"bool"}),
    OnnxOp("ArgMax"), OnnxOp("ArgMin"), OnnxOp("Asin"), OnnxOp("Asinh"), OnnxOp("Atan"), OnnxOp("Atanh"),
    OnnxOp("AveragePool", attrs=(_SPATIAL_2D, _NOTSET)),
    OnnxOp("BatchNormalization"), OnnxOp("BitShift", dtypes=INTEGER), OnnxOp("Cast", dtypes=ANY), OnnxOp("Ceil"),
    OnnxOp("Celu", opsets=(12, 18)), OnnxOp("Clip"), OnnxOp("Compress"), OnnxOp("Concat", dtypes=ANY),
    OnnxOp("Constant", dtypes=ANY), OnnxOp("ConstantOfShape", opsets=(9, 18), dtypes=INTEGER),
    OnnxOp("Conv", attrs=(_SPATIAL_2D, _NOTSET)), OnnxOp("ConvTranspose", attrs=(_SPATIAL_2D, _NOTSET)),
    OnnxOp("Cos"), OnnxOp("Cosh"), OnnxOp("CumSum", opsets=(11, 18)), OnnxOp("DepthToSpace"), OnnxOp("Det", opsets=(11, 18)),
    OnnxOp("Div", dtypes=FLOAT | INTEGER), OnnxOp("Dropout"), OnnxOp("Elu"), OnnxOp("Equal", dtypes=ANY), OnnxOp("Erf"),
    OnnxOp("Exp"), OnnxOp("Expand", dtypes=ANY), OnnxOp("EyeLike"), OnnxOp("Flatten", dtypes=ANY), OnnxOp("Floor"),
    OnnxOp("Gather", dtypes=ANY), OnnxOp("GatherElements", opsets=(11, 18), dtypes=ANY),
    OnnxOp("GatherND", opsets=(11, 18), dtypes=ANY), OnnxOp("Gemm"), OnnxOp("GlobalAveragePool"), OnnxOp("GlobalLpPool"),
    OnnxOp("GlobalMaxPool"), OnnxOp("Greater", dtypes=FLOAT | INTEGER), OnnxOp("GreaterOrEqual", opsets=(12, 18), dtypes=FLOAT | INTEGER),
    OnnxOp("Hardmax"), OnnxOp("HardSigmoid"), OnnxOp("HardSwish", opsets=(14, 18)), OnnxOp("Identity", dtypes=ANY),
    OnnxOp("InstanceNormalization"), OnnxOp("LeakyRelu"), OnnxOp("Less", dtypes=FLOAT | INTEGER),
    OnnxOp("LessOrEqual", opsets=(12, 18), dtypes=FLOAT | INTEGER), OnnxOp("Log"), OnnxOp("LogSoftmax"),
    OnnxOp("LpNormalization"), OnnxOp("LpPool"), OnnxOp("LRN"), OnnxOp("LSTM"), OnnxOp("MatMul"),
    OnnxOp("Max", dtypes=FLOAT | INTEGER),
    OnnxOp("MaxPool", attrs=(_SPATIAL_2D, _NOTSET, _NO_DILATION,
                             Attr("storage_order", lambda v: v in (None, 0), "column-major indices (storage_order 1)"))),
    OnnxOp("MaxRoiPool"), OnnxOp("MaxUnpool"), OnnxOp("Mean"), OnnxOp("MeanVarianceNormalization"),
    OnnxOp("Min", dtypes=FLOAT | INTEGER), OnnxOp("Mod", opsets=(10, 18), dtypes=FLOAT | INTEGER),
    OnnxOp("Mul", dtypes=FLOAT | INTEGER), OnnxOp("Multinomial"), OnnxOp("Neg", dtypes=FLOAT | INTEGER),
    OnnxOp("NonMaxSuppression", opsets=(10, 18)), OnnxOp("NonZero", opsets=(9, 18), dtypes=ANY), OnnxOp("Not", dtypes={"bool"}),
    OnnxOp("OneHot", opsets=(9, 18), dtypes=INTEGER), OnnxOp("Or", dtypes={"bool"}), OnnxOp("Pad"), OnnxOp("Pow"),
    OnnxOp("PRelu"), OnnxOp("RandomNormalLike"), OnnxOp("RandomUniform"), OnnxOp("RandomUniformLike"),
    OnnxOp("Range", opsets=(11, 18), dtypes=FLOAT | INTEGER), OnnxOp("Reciprocal"), OnnxOp("ReduceL1"), OnnxOp("ReduceL2"),
    OnnxOp("ReduceLogSum"), OnnxOp("ReduceLogSumExp"), OnnxOp("ReduceMax", dtypes=FLOAT | INTEGER), OnnxOp("ReduceMean"),
    OnnxOp("ReduceMin", dtypes=FLOAT | INTEGER), OnnxOp("ReduceProd"), OnnxOp("ReduceSum", dtypes=FLOAT | INTEGER),
    OnnxOp("ReduceSumSquare"), OnnxOp("Relu"),
    OnnxOp("Reshape", dtypes=ANY, attrs=(Attr("allowzero", lambda v: v in (None, 0), "allowzero 1"),)),
    OnnxOp("Resize", opsets=(10, 18)), OnnxOp("ReverseSequence", opsets=(10, 18)), OnnxOp("RoiAlign", opsets=(10, 18)),
    OnnxOp("Round", opsets=(11, 18)), OnnxOp("Scatter", opsets=(9, 10)), OnnxOp("ScatterElements", opsets=(11, 18), dtypes=ANY),
    OnnxOp("ScatterND", opsets=(11, 18), dtypes=ANY), OnnxOp("Selu"), OnnxOp("Shape", dtypes=ANY), OnnxOp("Shrink", opsets=(9, 18)),
    OnnxOp("Sigmoid"), OnnxOp("Sign", opsets=(9, 18)), OnnxOp("Sin"), OnnxOp("Sinh", opsets=(9, 18)), OnnxOp("Size", dtypes=ANY),
    OnnxOp("Slice", dtypes=ANY), OnnxOp("Softmax"), OnnxOp("SoftmaxCrossEntropyLoss", opsets=(12, 18)), OnnxOp("Softplus"),
    OnnxOp("Softsign"), OnnxOp("SpaceToDepth"), OnnxOp("Split", dtypes=ANY), OnnxOp("Sqrt"),
    OnnxOp("Squeeze", dtypes=ANY), OnnxOp("Sub", dtypes=FLOAT | INTEGER), OnnxOp("Sum"), OnnxOp("Tanh"),
    OnnxOp("TfIdfVectorizer", opsets=(9, 18)), OnnxOp("ThresholdedRelu", opsets=(10, 18)), OnnxOp("Tile", dtypes=ANY),
    OnnxOp("TopK"), OnnxOp("Transpose", dtypes=ANY), OnnxOp("Unsqueeze", dtypes=ANY), OnnxOp("Where", dtypes={"bool"}),
    OnnxOp("Xor", dtypes={"bool"}),
]
TABLE: dict[str, OnnxOp] = {op.op_type: op for op in _TABLE}
VERSION = CANN_VERSION


def check(nodes: Sequence, dtypes: dict[str, str], opset: int = OPSET) -> str | None:
    """The first reason CANN's parser would refuse ``nodes`` (``onnx.NodeProto``s; ``dtypes``:
    value name -> numpy dtype name of every input they read), or None."""
    from onnx import helper

    for node in nodes:
        entry = TABLE.get(node.op_type)
        if entry is None:
            return f"ONNX {node.op_type} is not in CANN {VERSION}'s ONNX op list"
        low, high = entry.opsets
        if not low <= opset <= high:
            return f"ONNX {node.op_type} is supported by CANN {VERSION} in opsets {low}-{high}, not {opset}"
        dtype = dtypes.get(node.input[0]) if node.input else None
        if dtype is not None and dtype not in entry.dtypes:
            return f"ONNX {node.op_type} on {dtype} (CANN {VERSION} takes {', '.join(sorted(entry.dtypes))})"
        given = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        for rule in entry.attrs:
            if not rule.ok(given.get(rule.name, rule.default)):
                return f"ONNX {node.op_type} with {rule.why} is outside CANN {VERSION}'s operator spec"
    return None
