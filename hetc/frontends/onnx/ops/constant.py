"""Constant.

TVM's converter reads only the ``value`` attribute (``value_float``, ``value_ints``, ... fail
with "no value in Constant") and silently turns string constants into a zero int64 tensor;
this one implements every value attribute of opset 12+ and rejects strings.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper
from tvm import relax

from .... import narrow
from ..registry import Attrs, ConvertContext, converter

# attribute -> how its parsed value becomes an array (TVM's parser gives protos/tuples/scalars)
_VALUE_ATTRS = {
    "value": lambda v: numpy_helper.to_array(v),
    "value_float": lambda v: np.array(v, np.float32),
    "value_floats": lambda v: np.array(v, np.float32),
    "value_int": lambda v: np.array(v, np.int64),
    "value_ints": lambda v: np.array(v, np.int64),
}
_STRING_ATTRS = ("value_string", "value_strings")


@converter("Constant", since=1)
def constant(ctx: ConvertContext, inputs: list, attrs: Attrs):
    present = {name: attrs.get(name) for name in (*_VALUE_ATTRS, *_STRING_ATTRS)}
    present = {k: v for k, v in present.items() if v is not None}
    if len(present) != 1:
        raise ctx.error(f"expected exactly one value attribute, got {sorted(present) or 'none'}")
    (name, value), = present.items()
    if name in _STRING_ATTRS or (isinstance(value, onnx.TensorProto)
                                 and value.data_type == onnx.TensorProto.STRING):
        raise ctx.error(f"string constants ({name}) are not supported")
    array = narrow.to_raw(np.asarray(_VALUE_ATTRS[name](value)))  # sub-byte types as their bytes
    return relax.const(array, array.dtype.name)
