"""Expand to a shape given as a ShapeExpr (the value of shape arithmetic on symbolic dims), a
constant or a tensor known only at run time.

TVM's converter compares the target with the input's shape as Python lists of PrimExprs
(``target_shape == data_shape``), which raises when a dim is a symbolic expression or
when the two lists mix ``IntImm`` and ``int`` (an exported BERT built for batch 1 fails so).
This one broadcasts per ONNX (numpy rules) with dims compared by TVM's arithmetic analyzer,
for constant shapes too (TVM's reads ``dim.value`` of every input dim, which fails on a symbolic
one: ViTMAE's ``Expand(indices[batch, k, 1], [1, 1, 1])``), and for shapes given at run time,
whose elements become symbolic dims (TVM's takes them as the output's dims, wrong where an
element is 1 and the input's dim is not).
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx
from tvm.sym.analyzer import Analyzer

from .. import runtime_values as rv
from ..registry import Attrs, ConvertContext, converter


def _same(a, b) -> bool:
    return Analyzer().can_prove_equal(a, b)


def _is_one(dim) -> bool:
    return isinstance(dim, (int, tirx.IntImm)) and int(dim) == 1


@converter("Expand", since=8)
def expand(ctx: ConvertContext, inputs: list, attrs: Attrs):
    data, shape = inputs
    if isinstance(shape, tvm.ir.GenericConst) and shape.value.numpy().ndim == 1:
        target = [tirx.IntImm("int64", int(v)) for v in shape.value.numpy()]
    elif isinstance(shape, relax.ShapeExpr):
        target = list(shape.values)
    elif rv.is_runtime(shape) and shape.ty.ndim == 1 and hasattr(data.ty.shape, "values"):
        target = rv.shape_vars(ctx.bb, shape, "expand_dim")  # one var per element, bound by the VM
    else:
        return NotImplemented
    runtime = [] if isinstance(shape, (relax.ShapeExpr, tvm.ir.GenericConst)) else list(target)
    data_shape = list(data.ty.shape)
    rank = max(len(data_shape), len(target))
    data_shape = [tirx.IntImm("int64", 1)] * (rank - len(data_shape)) + data_shape
    target = [tirx.IntImm("int64", 1)] * (rank - len(target)) + target
    out = []
    for i, (d, t) in enumerate(zip(data_shape, target)):
        if _is_one(t) or _same(d, t) or (isinstance(t, tirx.IntImm) and int(t) == -1):  # -1: keep (as TVM)
            out.append(d)
        elif _is_one(d):
            out.append(t)
        elif isinstance(d, tirx.IntImm) and isinstance(t, tirx.IntImm):
            raise ctx.error(f"cannot broadcast input dim {i} of size {int(d)} to {int(t)}")
        elif any(t.same_as(v) for v in runtime):  # a run-time 1 keeps the input's dim: the larger one
            out.append(d if isinstance(d, tirx.IntImm) else tirx.max(d, t))
        else:
            out.append(t)  # symbolic: broadcast_to checks it at run time
    if len(out) == len(data.ty.shape) and all(_same(a, b) for a, b in zip(out, data.ty.shape)):
        return data
    return ctx.bb.normalize(relax.op.broadcast_to(data, relax.ShapeExpr(out)))
