"""ReverseSequence (hetc/frontends/onnx/ops/reverse_sequence.py) against the ONNX reference."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_util import make, tensor

import hetc
from hetc.errors import HetcError


@pytest.mark.parametrize("batch_axis, time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis, time_axis):
    x = np.arange(5 * 4 * 3, dtype=np.float32).reshape(5, 4, 3) if time_axis == 0 else \
        np.arange(4 * 5 * 3, dtype=np.float32).reshape(4, 5, 3)
    lens = np.array([5, 1, 3, 0], np.int64)  # whole, one (no change), part, none
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=batch_axis, time_axis=time_axis)
    model = make([node], [tensor("x", list(x.shape)), tensor("lens", [4], np.int64)],
                 [tensor("y", list(x.shape))], opset=10)
    got = hetc.compile(model).run({"x": x, "lens": lens})["y"]
    want = ReferenceEvaluator(model).run(None, {"x": x, "lens": lens})[0]
    np.testing.assert_array_equal(got, want)


def test_reverse_sequence_axes_error():
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=2, time_axis=0)
    model = make([node], [tensor("x", [2, 2, 2]), tensor("lens", [2], np.int64)], [tensor("y", [2, 2, 2])], opset=10)
    with pytest.raises(HetcError, match="batch_axis"):
        hetc.compile(model)
