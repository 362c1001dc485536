"""Reductions TVM's translator does not convert: ``amax``/``amin`` (what ``torch.max(x, dim)``
values and ``nn.AdaptiveMaxPool`` to one element decompose to)."""

from __future__ import annotations

import torch
from tvm import relax

from ..registry import converter


def _reduce(importer, node, op) -> relax.Expr:
    x = importer.env[node.args[0]]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", [])
    keepdim = bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False))
    axes = [int(d) for d in ([dim] if isinstance(dim, int) else dim)] or None  # [] reduces every dim
    return importer.block_builder.emit(op(x, axes, keepdim))


@converter(torch.ops.aten.amax.default)
def amax(importer, node) -> relax.Expr:
    """``amax(x, dim=[], keepdim=False)``: the largest element over ``dim`` (all dims when empty)."""
    return _reduce(importer, node, relax.op.max)


@converter(torch.ops.aten.amin.default)
def amin(importer, node) -> relax.Expr:
    """``amin(x, dim=[], keepdim=False)``: the smallest element over ``dim`` (all dims when empty)."""
    return _reduce(importer, node, relax.op.min)
