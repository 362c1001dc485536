"""MelWeightMatrix with its scalar inputs given at run time.

``misc.mel_weight_matrix`` computes the matrix in numpy when every input is a constant. Here
the graph computes it with the reference's arithmetic, dtype for dtype: ``log1p`` of the
edge frequencies in their own float type, the mel grid in float64, Python's float floor
division for the spectrogram bin of each mel edge, then the triangles as masks. The output
``[dft_length // 2 + 1, num_mel_bins]`` has fresh symbolic dims. Non-positive ``num_mel_bins``,
``dft_length`` or ``sample_rate``, or mel edges outside the spectrogram, stop the run with a
clear error (``runtime_values.checked``).
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from .. import runtime_values as rv
from ..registry import ConvertContext

op = relax.op


def _f64(value) -> relax.Expr:
    return relax.const(np.float64(value), "float64")


def _i64(value) -> relax.Expr:
    return relax.const(np.asarray(value, np.int64), "int64")


def _mel(bb, hertz: relax.Expr) -> relax.Expr:
    """``2595 * log1p(hertz / 700) / log(10)`` as numpy evaluates it: float64 at the end only."""
    hertz = bb.normalize(hertz)
    dtype = str(hertz.ty.dtype)
    ratio = bb.normalize(op.divide(hertz, relax.const(np.array(700, dtype), dtype)))
    log1p = op.astype(op.log(op.add(op.astype(ratio, "float64"), _f64(1))), dtype)  # exact 1 + x
    scaled = op.multiply(relax.const(np.array(2595, dtype), dtype), log1p)
    return bb.normalize(op.divide(op.astype(scaled, "float64"), _f64(np.log(10))))


def _expm1(bb, y: relax.Expr) -> relax.Expr:
    """``exp(y) - 1`` without the cancellation near 0 (Kahan: ``(u - 1) y / log u``)."""
    u = bb.normalize(op.exp(y))
    um1 = bb.normalize(op.subtract(u, _f64(1)))
    exact = op.divide(op.multiply(um1, y), op.log(u))
    return op.where(op.equal(u, _f64(1)), y, op.where(op.equal(um1, _f64(-1)), _f64(-1), exact))


def _floor_divide(bb, a: relax.Expr, b: relax.Expr) -> relax.Expr:
    """Python's (and numpy's) float ``a // b`` for ``b > 0``: from ``fmod``, not ``floor(a / b)``."""
    mod = bb.normalize(op.mod(a, b))
    div = op.divide(op.subtract(a, mod), b)
    div = bb.normalize(op.where(op.less(mod, _f64(0)), op.subtract(div, _f64(1)), div))
    floor = bb.normalize(op.floor(div))
    return op.where(op.greater(op.subtract(div, floor), _f64(0.5)), op.add(floor, _f64(1)), floor)


def mel_runtime(ctx: ConvertContext, inputs: list, dtype: str) -> relax.Expr:
    bb = ctx.bb
    ints = [bb.normalize(op.astype(op.reshape(e, [1]), "int64")) for e in inputs[:3]]
    positive = op.greater(op.concat(ints, axis=0), _i64(0))
    mel_bins, dft_length, sample_rate = ints
    sizes = op.concat([op.add(op.floor_divide(dft_length, _i64(2)), _i64(1)), mel_bins], axis=0)
    sizes = rv.checked(bb, bb.normalize(sizes), bb.normalize(positive),
                       f"{ctx.label}: num_mel_bins, dft_length and sample_rate must be positive")
    n_spec, n_mel = rv.shape_vars(bb, sizes, "mel")

    low = _mel(bb, op.reshape(inputs[3], [1]))
    high = _mel(bb, op.reshape(inputs[4], [1]))
    count = bb.normalize(op.astype(op.add(mel_bins, _i64(2)), "float64"))
    step = op.divide(op.subtract(high, low), count)
    edges = op.add(op.multiply(op.arange(0, n_mel + 2, 1, "float64"), step), low)
    edges = op.divide(bb.normalize(edges), _f64(2595))
    hertz = op.multiply(_f64(700), _expm1(bb, bb.normalize(op.multiply(edges, _f64(np.log(10))))))
    scaled = op.multiply(op.astype(op.add(dft_length, _i64(1)), "float64"), bb.normalize(hertz))
    bins = _floor_divide(bb, bb.normalize(scaled), bb.normalize(op.astype(sample_rate, "float64")))
    bins = bb.normalize(op.astype(bins, "int64"))  # [n_mel + 2]

    def edge(i: int) -> relax.Expr:
        part = op.strided_slice(bins, [0], [i], [n_mel + i], assume_inbound=True)
        return bb.normalize(op.reshape(part, relax.ShapeExpr([1, n_mel])))

    lo, center, hi = edge(0), edge(1), edge(2)
    inside = op.logical_and(op.logical_and(op.greater_equal(lo, _i64(0)), op.less_equal(lo, center)),
                            op.logical_and(op.less_equal(center, hi),
                                           op.less_equal(hi, op.shape_to_tensor(relax.ShapeExpr([n_spec])))))
    lo = rv.checked(bb, lo, bb.normalize(inside),
                    f"{ctx.label}: the mel bands must lie within the dft_length // 2 + 1 spectrogram bins "
                    "(check lower_edge_hertz/upper_edge_hertz against sample_rate)")
    j = bb.normalize(op.reshape(op.arange(0, n_spec, 1, "int64"), relax.ShapeExpr([n_spec, 1])))

    def ratio(num: relax.Expr, den: relax.Expr) -> relax.Expr:
        den = op.maximum(den, _i64(1))  # where it is 0 the ratio is not used
        return op.divide(op.astype(num, "float64"), op.astype(den, "float64"))

    rising = op.logical_and(op.logical_and(op.greater_equal(j, lo), op.less_equal(j, center)),
                            op.greater(center, lo))
    peak = op.logical_and(op.equal(center, lo), op.equal(j, center))
    falling = op.logical_and(op.logical_and(op.greater_equal(j, center), op.less(j, hi)),
                             op.greater(hi, center))
    out = op.where(peak, _f64(1), _f64(0))
    out = op.where(rising, ratio(op.subtract(j, lo), op.subtract(center, lo)), bb.normalize(out))
    out = op.where(falling, ratio(op.subtract(hi, j), op.subtract(hi, center)), bb.normalize(out))
    out = bb.normalize(out)
    if dtype == "bfloat16":
        out = bb.normalize(op.astype(out, "float32"))
    return op.astype(out, dtype)
