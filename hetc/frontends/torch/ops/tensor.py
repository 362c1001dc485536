"""Tensor manipulation where TVM's translator departs from torch: ``cat``."""

from __future__ import annotations

import torch
from tvm import relax

from ..registry import converter


def _legacy_empty(node) -> bool:
    """A 1-D tensor of no elements, which ``torch.cat`` skips whatever the other inputs' rank
    (transformers' ``DynamicCache`` starts each layer's keys and values as ``torch.tensor([])``)."""
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(value, torch.Tensor) and value.dim() == 1 and value.shape[0] == 0


@converter(torch.ops.aten.cat.default)
def cat(importer, node) -> relax.Expr:
    """``cat(tensors, dim=0)``: TVM's concat needs one rank, so torch's legacy empty inputs go first."""
    tensors = list(node.args[0])
    dim = int(node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0))
    kept = [t for t in tensors if not _legacy_empty(t)] or tensors[:1]
    if len(kept) == 1:
        return importer.env[kept[0]]
    rank = kept[0].meta["val"].dim()
    return importer.block_builder.emit(relax.op.concat([importer.env[t] for t in kept], axis=dim % rank))


@converter(torch.ops.aten.index.Tensor)
def index(importer, node) -> relax.Expr:
    """``x[..., idx, ...]`` (``index.Tensor``): torch counts a negative index from the end; TVM's
    converter hands it to ``take`` as it is, which then reads outside the tensor (Falcon's
    ``fused_qkv[..., -2, :]`` gave garbage, not an error). Each integer index is wrapped into
    range first (``idx + size`` where negative), then TVM's converter does the rest."""
    shape = node.args[0].meta["val"].shape
    saved = {}
    for axis, idx in enumerate(node.args[1]):
        if idx is None or idx.meta["val"].dtype in (torch.bool, torch.uint8):
            continue
        value = importer.env[idx]
        dtype = str(value.ty.dtype)
        size = shape[axis].node.maybe_as_int() if isinstance(shape[axis], torch.SymInt) else int(shape[axis])
        if size is None:  # a symbolic dim: its size from the data's shape at run time, as a [1] tensor
            dim = importer.shape_of(importer.env[node.args[0]])[axis]
            extent = relax.op.astype(relax.op.shape_to_tensor(relax.ShapeExpr([dim])), dtype)
        else:
            extent = relax.const(size, dtype)
        wrapped = relax.op.where(relax.op.less(value, relax.const(0, dtype)), relax.op.add(value, extent), value)
        saved[idx] = value
        importer.env[idx] = importer.block_builder.emit(wrapped)
    try:
        return importer._index_tensor(node)  # TVM's converter, on the wrapped indices
    finally:
        importer.env.update(saved)
