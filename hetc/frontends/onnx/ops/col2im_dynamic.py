"""Col2Im with ``image_shape`` or ``block_shape`` given at run time.

``misc.col2im`` computes every column's output position at conversion time. With run-time
shapes the graph computes them with the same arithmetic: a block offset ``f`` and a column
``l`` unravel over ``block_shape`` and the sliding-block grid; the output position is
``col * stride - pad_begin + offset * dilation`` per axis, and positions outside the image go to
a discarded slot. The channel count ``C = C*K / prod(block_shape)``, ``prod(block_shape)``, the
image dims and their product become fresh symbolic dims; the scatter-add is the same.
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from .. import runtime_values as rv
from ..shapes import static_dims


def _i64(value) -> relax.Expr:
    return relax.const(np.asarray(value, np.int64), "int64")


def col2im_runtime(ctx, x: relax.Expr, image_e: relax.Expr, block_e: relax.Expr, dilations: list[int],
                   pads: list[int], strides: list[int]) -> relax.Expr:
    bb = ctx.bb
    n, ck, length = static_dims(x)
    nd = len(dilations)

    def vec(e) -> relax.Expr:
        return bb.normalize(relax.op.astype(relax.op.reshape(e, [nd]), "int64"))

    image, block = vec(image_e), vec(block_e)
    img = [bb.normalize(relax.op.take(image, _i64(i), axis=0)) for i in range(nd)]
    blk = [bb.normalize(relax.op.take(block, _i64(i), axis=0)) for i in range(nd)]

    def product(values) -> relax.Expr:
        out = _i64(1)
        for v in values:
            out = relax.op.multiply(out, v)
        return bb.normalize(out)

    k = product(blk)
    p = product(img)
    c = relax.op.floor_divide(_i64(ck), k)
    sizes = bb.normalize(relax.op.concat([image] + [relax.op.reshape(v, [1]) for v in (c, k, p)], axis=0))
    values = rv.shape_vars(bb, sizes, "col2im")
    image_vars, (c_var, k_var, p_var) = values[:nd], values[nd:]

    # block offsets [K] and sliding-block columns [L], unravelled per axis
    f = bb.normalize(relax.op.arange(0, k_var, 1, "int64"))
    cols = _i64(np.arange(length))
    n_blocks = [bb.normalize(relax.op.add(relax.op.floor_divide(
        relax.op.subtract(relax.op.subtract(relax.op.add(img[i], _i64(pads[i] + pads[i + nd])),
                                            relax.op.multiply(_i64(dilations[i]), relax.op.subtract(blk[i], _i64(1)))),
                          _i64(1)), _i64(strides[i])), _i64(1))) for i in range(nd)]
    flat = None
    inside = None
    for i in range(nd):
        off = relax.op.floor_mod(relax.op.floor_divide(f, product(blk[i + 1:])), blk[i])
        col = relax.op.floor_mod(relax.op.floor_divide(cols, product(n_blocks[i + 1:])), n_blocks[i])
        pos = relax.op.add(relax.op.reshape(relax.op.subtract(relax.op.multiply(col, _i64(strides[i])),
                                                                _i64(pads[i])), [1, length]),
                           relax.op.reshape(relax.op.multiply(off, _i64(dilations[i])), relax.ShapeExpr([k_var, 1])))
        pos = bb.normalize(pos)  # [K, L]
        ok = relax.op.logical_and(relax.op.greater_equal(pos, _i64(0)), relax.op.less(pos, img[i]))
        inside = ok if inside is None else relax.op.logical_and(inside, ok)
        clipped = relax.op.minimum(relax.op.maximum(pos, _i64(0)), relax.op.subtract(img[i], _i64(1)))
        term = relax.op.multiply(clipped, product(img[i + 1:]))
        flat = term if flat is None else relax.op.add(flat, term)
    flat = bb.normalize(relax.op.where(inside, flat, p))
    total = k_var * length
    index = bb.normalize(relax.op.broadcast_to(relax.op.reshape(flat, relax.ShapeExpr([1, 1, total])),
                                               relax.ShapeExpr([n, c_var, total])))
    data = bb.normalize(relax.op.reshape(x, relax.ShapeExpr([n, c_var, total])))
    zeros = relax.op.zeros(relax.ShapeExpr([n, c_var, p_var + 1]), str(x.ty.dtype))
    out = bb.normalize(relax.op.scatter_elements(zeros, index, data, axis=2, reduction="add"))
    out = bb.normalize(relax.op.strided_slice(out, [2], [0], [p_var], assume_inbound=True))
    return relax.op.reshape(out, relax.ShapeExpr([n, c_var, *image_vars]))
