"""STFT with ``frame_step`` or ``frame_length`` given at run time.

``misc.stft`` gathers frames with indices computed at conversion time. Here the graph computes
them: frame ``f`` starts at ``f * frame_step``, the frame count ``1 + (length - frame_length) //
frame_step`` is a symbolic dim, and so is a run-time ``frame_length``. A DFT of run-time length
builds its cos/sin matrices in the graph (``angle = 2 pi ((j k) mod n) / n`` in float64, as
``misc._dft_last`` does in numpy). Values out of range stop the run with a clear error
(``runtime_values.checked``): ``frame_step < 1``, ``frame_length`` outside ``1..length``, or a
``frame_length`` other than the window's length.
"""

from __future__ import annotations

import numpy as np
from tvm import relax, tirx

from .. import runtime_values as rv
from ..registry import ConvertContext
from ..shapes import dims, static_dims


def _i64(value) -> relax.Expr:
    return relax.const(np.asarray(value, np.int64), "int64")


def _scalar(ctx: ConvertContext, value: relax.Expr, low: int, high: int | None, name: str,
            also: str = "") -> tirx.Var:
    """A run-time integer scalar, checked to lie in ``low..high`` (no upper bound: None), as a
    fresh symbolic var."""
    bb = ctx.bb
    value = bb.normalize(relax.op.astype(relax.op.reshape(value, [1]), "int64"))
    ok = relax.op.greater_equal(value, _i64(low))
    if high is not None:
        ok = relax.op.logical_and(ok, relax.op.less_equal(value, _i64(high)))
    wanted = f"at least {low}" if high is None else str(low) if low == high else f"in {low}..{high}"
    value = rv.checked(bb, value, bb.normalize(ok), f"{ctx.label}: {name} must be {wanted}{also}")
    return rv.scalar_var(bb, value, name)


def stft_frames(ctx: ConvertContext, signal: relax.Expr, step: int | relax.Expr, window: relax.Expr | None,
                frame_length: int | relax.Expr | None) -> tuple[relax.Expr, int | tirx.Var]:
    """The windowed frames ``[batch, frames, frame_length, 1 or 2]`` and the frame length (an int,
    or a symbolic var when it is known only at run time). ``step`` and ``frame_length`` are ints
    or run-time scalars; ``frame_length`` None takes the window's or the signal's length."""
    bb = ctx.bb
    batch, length, parts = static_dims(signal)
    if window is not None:  # the window's length decides; a given frame_length must equal it
        size = static_dims(window)[0]
        if isinstance(frame_length, int) and frame_length != size:
            raise ctx.error(f"window must have shape [{frame_length}], got [{size}]")
        if frame_length is not None and not isinstance(frame_length, int):
            _scalar(ctx, frame_length, size, size, "frame_length", " (the window's length)")
        frame_length = size
    elif frame_length is None:
        frame_length = length
    elif not isinstance(frame_length, int):
        frame_length = _scalar(ctx, frame_length, 1, length, "frame_length", " (the signal's length)")
    if isinstance(frame_length, int) and not 0 < frame_length <= length:
        raise ctx.error(f"frame_length {frame_length} is invalid for a signal of length {length}")
    if not isinstance(step, int):
        step = _scalar(ctx, step, 1, None, "frame_step")
    elif step <= 0:
        raise ctx.error(f"frame_step must be positive, got {step}")
    frames = tirx.floordiv(length - frame_length, step) + 1
    step_t = _i64(step) if isinstance(step, int) else relax.op.shape_to_tensor(relax.ShapeExpr([step]))
    starts = relax.op.multiply(relax.op.arange(0, frames, 1, "int64"), step_t)
    offsets = relax.op.reshape(relax.op.arange(0, frame_length, 1, "int64"),
                               relax.ShapeExpr([1, frame_length]))
    index = bb.normalize(relax.op.add(relax.op.reshape(starts, relax.ShapeExpr([frames, 1])), offsets))
    index = bb.normalize(relax.op.reshape(index, relax.ShapeExpr([frames * frame_length])))
    framed = bb.normalize(relax.op.take(signal, index, axis=1))
    framed = bb.normalize(relax.op.reshape(framed, relax.ShapeExpr([batch, frames, frame_length, parts])))
    if window is not None:
        framed = bb.normalize(relax.op.multiply(framed, relax.op.reshape(window, [1, 1, frame_length, 1])))
    return framed, frame_length


def dft_runtime_length(ctx: ConvertContext, x: relax.Expr, n: tirx.Var, onesided: bool) -> relax.Expr:
    """The forward DFT of ``x`` ``[..., n, 1 or 2]`` along its ``n`` axis (``n`` known at run
    time): ``[..., n_out, 2]``, ``n_out = n // 2 + 1`` if ``onesided`` else ``n``."""
    bb = ctx.bb
    dtype = str(x.ty.dtype)
    rank = x.ty.ndim
    parts = dims(x)[-1]  # 1 (real) or 2 (complex), static
    if parts == 2 and onesided:
        raise ctx.error("onesided with a complex input is not supported")
    cdtype = "float32" if dtype in ("float16", "bfloat16") else dtype
    if cdtype != dtype:
        x = bb.normalize(relax.op.astype(x, cdtype))
    n_out = tirx.floordiv(n, 2) + 1 if onesided else n
    n_t = relax.op.shape_to_tensor(relax.ShapeExpr([n]))
    j = relax.op.reshape(relax.op.arange(0, n, 1, "int64"), relax.ShapeExpr([n, 1]))
    k = relax.op.reshape(relax.op.arange(0, n_out, 1, "int64"), relax.ShapeExpr([1, n_out]))
    jk = bb.normalize(relax.op.floor_mod(relax.op.multiply(j, k), n_t))  # exact before scaling
    angle = relax.op.multiply(relax.op.astype(jk, "float64"), relax.const(2 * np.pi, "float64"))
    angle = relax.op.divide(angle, relax.op.astype(n_t, "float64"))
    angle = bb.normalize(angle)
    cos_m = bb.normalize(relax.op.astype(relax.op.cos(angle), cdtype))
    sin_m = bb.normalize(relax.op.astype(relax.op.sin(angle), cdtype))

    def part(i: int) -> relax.Expr:
        return bb.normalize(relax.op.squeeze(relax.op.strided_slice(x, [rank - 1], [i], [i + 1]), [rank - 1]))

    re = part(0)
    # (re + i im)(cos - i sin) = (re cos + im sin) + i (im cos - re sin)
    real = relax.op.matmul(re, cos_m)
    imag = relax.op.negative(relax.op.matmul(re, sin_m))
    if parts == 2:
        im = part(1)
        real = relax.op.add(real, relax.op.matmul(im, sin_m))
        imag = relax.op.add(imag, relax.op.matmul(im, cos_m))
    y = relax.op.stack([bb.normalize(real), bb.normalize(imag)], axis=rank - 1)
    return relax.op.astype(y, dtype) if cdtype != dtype else y
