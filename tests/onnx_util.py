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
