"""Recurrent sequence ops of opset 27: LinearAttention, CausalConvWithState.

Neither is in TVM 0.27. Both follow ``onnx.reference`` (the spec's reference algorithm):

- ``CausalConvWithState``: the input is left-padded with ``past_state`` (zeros without it),
  convolved depthwise (``relax.nn.conv1d`` with ``groups = channels``, valid padding), plus
  the optional bias and fused SiLU (``activation`` ``silu``/``swish``); ``present_state`` is
  the last ``k - 1`` positions of the padded input. float16/bfloat16 are computed in float32.
- ``LinearAttention``: the recurrence is unrolled over the (static) sequence length, in
  float32 (as the reference), for every ``update_rule`` (``linear``, ``gated``, ``delta``,
  ``gated_delta``), GQA/MQA (each KV head's state read by ``q_num_heads / kv_num_heads``
  query heads), per-head or per-key-dim ``decay``, per-head or shared ``beta``, ``scale``
  (0 means ``1/sqrt(d_k)``) and ``past_state``. ``chunk_size`` is a tuning hint.
"""

from __future__ import annotations

import math

from tvm import relax

from ..registry import Attrs, ConvertContext, converter
from ..shapes import static_dims as _dims

_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
_UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")




def _opt(inputs: list, i: int):
    return inputs[i] if len(inputs) > i else None


def _silu(x: relax.Expr) -> relax.Expr:
    return relax.op.multiply(x, relax.op.sigmoid(x))


@converter("CausalConvWithState", since=27)
def causal_conv_with_state(ctx: ConvertContext, inputs: list, attrs: Attrs):
    bb = ctx.bb
    x, weight = inputs[0], inputs[1]
    bias, past = _opt(inputs, 2), _opt(inputs, 3)
    activation = attrs.reject("activation", lambda v: v in ("none", "silu", "swish"), "none")
    dtype = str(x.ty.dtype)
    if dtype not in _FLOAT_DTYPES:
        raise ctx.error(f"input has dtype {dtype}; CausalConvWithState takes float types")
    if x.ty.ndim != 3 or weight.ty.ndim != 3:
        raise ctx.error(f"input and weight must be rank 3, got ranks {x.ty.ndim}, {weight.ty.ndim}")
    batch, channels, length = _dims(x)
    w_channels, w_one, k = _dims(weight)
    if w_channels != channels or w_one != 1 or k < 1:
        raise ctx.error(f"weight must have shape ({channels}, 1, k), got {_dims(weight)}")
    if past is not None and _dims(past) != [batch, channels, k - 1]:
        raise ctx.error(f"past_state must have shape ({batch}, {channels}, {k - 1}), got {_dims(past)}")
    if bias is not None and _dims(bias) != [channels]:
        raise ctx.error(f"bias must have shape ({channels},), got {_dims(bias)}")

    if k == 1:
        padded = x
    else:
        pad = past if past is not None else relax.op.zeros(relax.ShapeExpr([batch, channels, k - 1]), dtype)
        padded = bb.normalize(relax.op.concat([pad, x], axis=2))
    cdtype = "float32" if dtype in ("float16", "bfloat16") else dtype

    def cast(e):
        return bb.normalize(relax.op.astype(e, cdtype)) if cdtype != dtype else e

    y = relax.op.nn.conv1d(cast(padded), cast(weight), strides=1, padding=0, dilation=1,
                           groups=channels)
    if bias is not None:
        y = relax.op.add(y, relax.op.reshape(cast(bias), (1, channels, 1)))
    if cdtype != dtype:  # the reference rounds the convolution to the input type first
        y = relax.op.astype(bb.normalize(y), dtype)
    if activation in ("silu", "swish"):
        y = _silu(cast(bb.normalize(y)))
        if cdtype != dtype:
            y = relax.op.astype(y, dtype)
    if ctx.num_outputs <= 1:
        return y
    total = length + k - 1
    present = relax.op.strided_slice(padded, [2], [total - (k - 1)], [total])
    return relax.Tuple([y, present])


@converter("LinearAttention", since=27)
def linear_attention(ctx: ConvertContext, inputs: list, attrs: Attrs):
    bb = ctx.bb
    query, key, value = inputs[0], inputs[1], inputs[2]
    past, decay, beta = _opt(inputs, 3), _opt(inputs, 4), _opt(inputs, 5)
    attrs.get("chunk_size", 64)  # tuning hint: no effect on the result
    rule = attrs.reject("update_rule", lambda v: v in _UPDATE_RULES, "gated_delta")
    q_heads = int(attrs.get("q_num_heads", 0))
    kv_heads = int(attrs.get("kv_num_heads", 0))
    scale = float(attrs.get("scale", 0.0))
    if q_heads <= 0 or kv_heads <= 0 or q_heads % kv_heads:
        raise ctx.error(f"q_num_heads={q_heads} must be a positive multiple of "
                        f"kv_num_heads={kv_heads}")
    gating = rule in ("gated", "gated_delta")
    delta = rule in ("delta", "gated_delta")
    if gating != (decay is not None):
        raise ctx.error(f"update_rule '{rule}' {'requires' if gating else 'forbids'} input decay")
    if delta != (beta is not None):
        raise ctx.error(f"update_rule '{rule}' {'requires' if delta else 'forbids'} input beta")
    dtype = str(query.ty.dtype)
    if dtype not in _FLOAT_DTYPES:
        raise ctx.error(f"input query has dtype {dtype}; LinearAttention takes float types")
    for name, t in (("query", query), ("key", key), ("value", value), ("decay", decay), ("beta", beta)):
        if t is not None and t.ty.ndim != 3:
            raise ctx.error(f"input {name} must be rank 3 (B, T, H*D), got rank {t.ty.ndim}")
    b, t, qhd = _dims(query)
    if t == 0:
        raise ctx.error("an empty sequence (T = 0) is not supported")
    khd, vhd = _dims(key)[2], _dims(value)[2]
    if qhd % q_heads or khd % kv_heads or vhd % kv_heads:
        raise ctx.error(f"last dims {qhd}, {khd}, {vhd} of query, key, value are not divisible by "
                        f"q_num_heads={q_heads} / kv_num_heads={kv_heads}")
    d_k, d_v, group = qhd // q_heads, vhd // kv_heads, q_heads // kv_heads
    if khd // kv_heads != d_k:
        raise ctx.error(f"key head size {khd // kv_heads} differs from query head size {d_k}")
    state_dtype = str(past.ty.dtype) if past is not None else dtype
    if past is not None and _dims(past) != [b, kv_heads, d_k, d_v]:
        raise ctx.error(f"past_state must have shape ({b}, {kv_heads}, {d_k}, {d_v}), got {_dims(past)}")
    f32 = "float32"

    def heads4(x: relax.Expr, heads: int) -> relax.Expr:
        """(B, T, H*D) -> (B, H, T, D) in float32."""
        d, src = _dims(x)[2] // heads, str(x.ty.dtype)
        x = relax.op.permute_dims(relax.op.reshape(x, (b, t, heads, d)), [0, 2, 1, 3])
        return bb.normalize(relax.op.astype(x, f32) if src != f32 else x)

    q4, k4, v4 = heads4(query, q_heads), heads4(key, kv_heads), heads4(value, kv_heads)
    if decay is not None:
        last = _dims(decay)[2]
        if last not in (kv_heads, kv_heads * d_k):
            raise ctx.error(f"decay last dim {last} must be kv_num_heads ({kv_heads}) or "
                            f"kv_num_heads*d_k ({kv_heads * d_k})")
        decay4 = heads4(decay, kv_heads)  # (B, H_kv, T, 1 or d_k)
        gate4 = bb.normalize(relax.op.exp(decay4))
    if beta is not None:
        last = _dims(beta)[2]
        if last not in (kv_heads, 1):
            raise ctx.error(f"beta last dim {last} must be kv_num_heads ({kv_heads}) or 1")
        beta4 = heads4(beta, last)  # (B, H_kv or 1, T, 1)

    def step(x4: relax.Expr, i: int) -> relax.Expr:
        """(B, H, T, D) -> (B, H, D) at time i."""
        return bb.normalize(relax.op.squeeze(relax.op.strided_slice(x4, [2], [i], [i + 1]), [2]))

    if past is not None:
        state = bb.normalize(relax.op.astype(past, f32))
    else:
        state = relax.op.zeros(relax.ShapeExpr([b, kv_heads, d_k, d_v]), f32)
    scale_val = scale if scale != 0.0 else 1.0 / math.sqrt(d_k)
    outputs = []
    for i in range(t):
        k_t, v_t = step(k4, i), step(v4, i)  # (B, H_kv, d_k), (B, H_kv, d_v)
        if gating:  # state *= exp(g_t) over d_v
            state = relax.op.multiply(state, relax.op.expand_dims(step(gate4, i), [3]))
        state = bb.normalize(state)
        if delta:  # v_t <- beta_t * (v_t - S^T k_t)
            retrieved = relax.op.squeeze(
                relax.op.matmul(relax.op.expand_dims(k_t, [2]), state), [2])  # (B, H, d_v)
            v_t = relax.op.multiply(step(beta4, i), relax.op.subtract(v_t, retrieved))
        outer = relax.op.multiply(relax.op.expand_dims(k_t, [3]), relax.op.expand_dims(v_t, [2]))
        state = bb.normalize(relax.op.add(state, outer))
        read = state
        if group > 1:  # (B, H_kv, d_k, d_v) -> (B, H_q, d_k, d_v), KV head h // group
            read = relax.op.repeat(state, group, axis=1)
        q_t = relax.op.expand_dims(step(q4, i), [2])  # (B, H_q, 1, d_k)
        outputs.append(bb.normalize(relax.op.matmul(q_t, read)))  # (B, H_q, 1, d_v)
    out = relax.op.concat(outputs, axis=2) if len(outputs) > 1 else outputs[0]
    out = relax.op.multiply(out, relax.const(scale_val, f32))
    out = relax.op.reshape(relax.op.permute_dims(out, [0, 2, 1, 3]), (b, t, q_heads * d_v))
    if dtype != f32:
        out = relax.op.astype(out, dtype)
    if ctx.num_outputs <= 1:
        return out
    present = relax.op.astype(state, state_dtype) if state_dtype != f32 else state
    return relax.Tuple([out, present])
