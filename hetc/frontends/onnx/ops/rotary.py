"""Rotary positional embeddings: RotaryEmbedding (opset 23).

TVM 0.27 has no converter for it. This one implements the spec's reference algorithm:
4D input ``(batch, num_heads, seq, head_size)`` or 3D input ``(batch, seq, hidden)`` with the
``num_heads`` attribute, optional ``position_ids`` (``(batch, seq)`` indices into caches of
shape ``(max_position, rotary_dim / 2)``; without them the caches are
``(batch, seq, rotary_dim / 2)``), ``interleaved`` and partial rotation through
``rotary_embedding_dim``. It works in the input's layout (no transposes): the caches are
broadcast over the heads axis.
"""

from __future__ import annotations

from tvm import relax

from ..registry import Attrs, ConvertContext, converter
from ..shapes import static_dims as _dims


def _slice(x: relax.Expr, axis: int, begin: int, end: int, stride: int = 1) -> relax.Expr:
    return relax.op.strided_slice(x, [axis], [begin], [end], [stride])


@converter("RotaryEmbedding", since=23)
def rotary_embedding(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x, cos, sin = inputs[0], inputs[1], inputs[2]
    position_ids = inputs[3] if len(inputs) > 3 else None
    interleaved = attrs.reject("interleaved", lambda v: v in (0, 1), 0)
    rotary_dim = int(attrs.reject("rotary_embedding_dim", lambda v: v >= 0, 0))
    num_heads = attrs.get("num_heads", None)
    bb = ctx.bb
    shape = _dims(x)
    if len(shape) == 4:  # (batch, heads, seq, head_size): caches broadcast on axis 1
        head_size, heads_axis, work = shape[3], 1, x
        if num_heads is not None and int(num_heads) != shape[1]:
            raise ctx.error(f"num_heads={num_heads} does not match the input's {shape[1]} heads")
    elif len(shape) == 3:  # (batch, seq, hidden) -> (batch, seq, heads, head_size)
        if not num_heads:
            raise ctx.error("a 3D input needs the num_heads attribute")
        num_heads = int(num_heads)
        if num_heads <= 0 or shape[2] % num_heads:
            raise ctx.error(f"hidden size {shape[2]} is not divisible by num_heads={num_heads}")
        head_size, heads_axis = shape[2] // num_heads, 2
        work = bb.normalize(relax.op.reshape(x, [shape[0], shape[1], num_heads, head_size]))
    else:
        raise ctx.error(f"input must be 3D or 4D, got rank {len(shape)}")

    rotary_dim = rotary_dim or head_size
    if rotary_dim > head_size or rotary_dim % 2:
        raise ctx.error(f"rotary_embedding_dim={rotary_dim} must be even and at most the head "
                        f"size {head_size}")
    half = rotary_dim // 2
    if position_ids is not None:  # (batch, seq) positions -> (batch, seq, half) caches
        cos = relax.op.take(cos, position_ids, axis=0)
        sin = relax.op.take(sin, position_ids, axis=0)
    cos, sin = bb.normalize(cos), bb.normalize(sin)
    for name, cache in (("cos_cache", cos), ("sin_cache", sin)):
        if cache.ty.ndim != 3 or _dims(cache)[-1] != half:
            raise ctx.error(f"{name} must give (batch, seq, {half}) values, got "
                            f"{_dims(cache)}")
    cos = bb.normalize(relax.op.expand_dims(cos, heads_axis))
    sin = bb.normalize(relax.op.expand_dims(sin, heads_axis))

    last = 3  # head_size is the last axis of the 4D working tensor in both layouts
    if interleaved:
        x1 = bb.normalize(_slice(work, last, 0, rotary_dim, 2))
        x2 = bb.normalize(_slice(work, last, 1, rotary_dim, 2))
    else:
        x1 = bb.normalize(_slice(work, last, 0, half))
        x2 = bb.normalize(_slice(work, last, half, rotary_dim))
    real = relax.op.subtract(relax.op.multiply(cos, x1), relax.op.multiply(sin, x2))
    imag = relax.op.add(relax.op.multiply(sin, x1), relax.op.multiply(cos, x2))
    if interleaved:  # real/imag alternate: stack on a new last axis, then merge it
        pairs = bb.normalize(relax.op.stack([real, imag], axis=4))
        rotated = relax.op.reshape(pairs, _dims(pairs)[:3] + [rotary_dim])
    else:
        rotated = relax.op.concat([real, imag], axis=last)
    if rotary_dim < head_size:
        rotated = relax.op.concat([rotated, _slice(work, last, rotary_dim, head_size)], axis=last)
    if len(shape) == 3:
        rotated = relax.op.reshape(bb.normalize(rotated), shape)
    return rotated
