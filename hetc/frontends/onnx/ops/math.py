"""Elementwise math: Pow, Clip, HardSigmoid, HardSwish.

ONNX's Pow lets base and exponent differ in type (T, T1) and returns the base's type; TVM's
converter requires one dtype, and TVM's power takes floats only. A float base takes the
exponent cast to its type; an integer base is raised in float64 and truncated back.

Clip and the hard activations are ``maximum``/``minimum`` pairs, not TVM's ``relax.op.clip``:
layout conversion has no rule for ``clip`` and kept it in NCHW between NHWC convs, a
transpose on each side fused into every hardswish (MobileNetV3's 20 HardSwish and 8
HardSigmoid nodes: 2.4 of SSDlite320's 14 ms in kernels, 2-core Zen 5,
AVX-512).
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from ..registry import Attrs, ConvertContext, converter


@converter("Pow", since=7)
def power(ctx: ConvertContext, inputs: list, attrs: Attrs):
    base, exponent = inputs
    base_dtype, exp_dtype = str(base.ty.dtype), str(exponent.ty.dtype)
    if base_dtype.startswith(("float", "bfloat")):
        return relax.op.power(base, exponent if exp_dtype == base_dtype else relax.op.astype(exponent, base_dtype))
    # TVM's power is float-only: integer bases go through float64 (exact up to 2**53).
    wide = relax.op.power(relax.op.astype(base, "float64"), relax.op.astype(exponent, "float64"))
    return relax.op.astype(wide, base_dtype)


@converter("Clip", since=6)
def clip_attrs(ctx: ConvertContext, inputs: list, attrs: Attrs):
    """Clip-6: bounds are attributes (float inputs only)."""
    (x,) = inputs[:1]
    dtype = str(x.ty.dtype)
    low = relax.const(np.array(attrs.get("min", float(np.finfo(np.float32).min)), dtype))
    high = relax.const(np.array(attrs.get("max", float(np.finfo(np.float32).max)), dtype))
    return relax.op.minimum(relax.op.maximum(x, low), high)


@converter("Clip", since=11)
def clip(ctx: ConvertContext, inputs: list, attrs: Attrs):
    """Clip-11+: optional bound inputs, emitted as maximum/minimum (not TVM's opaque call_tir)
    so that layout conversion and fusion see through it (ReLU6 between NHWC convs)."""
    x, low, high = (list(inputs) + [None, None])[:3]
    if low is not None:
        x = relax.op.maximum(x, low)
    if high is not None:
        x = relax.op.minimum(x, high)
    return x


def _hard_sigmoid(x, alpha: float, beta: float):
    dtype = str(x.ty.dtype)
    line = relax.op.add(relax.op.multiply(x, relax.const(alpha, dtype)), relax.const(beta, dtype))
    return relax.op.minimum(relax.op.maximum(line, relax.const(0.0, dtype)), relax.const(1.0, dtype))


@converter("HardSigmoid", since=1)
def hard_sigmoid(ctx: ConvertContext, inputs: list, attrs: Attrs):
    """max(0, min(1, alpha * x + beta))."""
    return _hard_sigmoid(inputs[0], float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5)))


@converter("HardSwish", since=14)
def hard_swish(ctx: ConvertContext, inputs: list, attrs: Attrs):
    """x * max(0, min(1, x / 6 + 1 / 2))."""
    return relax.op.multiply(inputs[0], _hard_sigmoid(inputs[0], 1.0 / 6.0, 0.5))
