"""Tiny helpers to build one-node and few-node ONNX models for tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

IR_VERSION = 10


def tensor(name: str, shape: Sequence[int | str] | None, dtype=np.float32) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)


def make(nodes, inputs, outputs, initializers: dict[str, np.ndarray] | None = None, opset: int = 17,
         name: str = "test") -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()]
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    return model


def conv_model(x_shape: Sequence[int], weight: np.ndarray, bias: np.ndarray | None = None, stride: int = 1,
               pads: Sequence[int] = (0, 0, 0, 0), dilation: int = 1, group: int = 1, residual: bool = False,
               relu: bool = False) -> onnx.ModelProto:
    """Conv (square kernel from ``weight``'s shape, ONNX pads order) [+ residual input r]
    [+ Relu], NCHW, with the output shape worked out."""
    n, _, h, w = x_shape
    k, kernel = weight.shape[0], weight.shape[2]
    oh = (h + pads[0] + pads[2] - dilation * (kernel - 1) - 1) // stride + 1
    ow = (w + pads[1] + pads[3] - dilation * (kernel - 1) - 1) // stride + 1
    inits = {"W": weight} if bias is None else {"W": weight, "B": bias}
    nodes = [helper.make_node("Conv", ["x", *inits], ["y"], kernel_shape=[kernel, kernel], strides=[stride] * 2,
                              pads=list(pads), dilations=[dilation] * 2, group=group)]
    inputs, out = [tensor("x", list(x_shape))], "y"
    if residual:
        nodes.append(helper.make_node("Add", ["y", "r"], ["yr"]))
        inputs.append(tensor("r", [n, k, oh, ow]))
        out = "yr"
    if relu:
        nodes.append(helper.make_node("Relu", [out], ["z"]))
        out = "z"
    return make(nodes, inputs, [tensor(out, [n, k, oh, ow])], inits)
