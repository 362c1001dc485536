"""Attention (ONNX default domain, opsets 23, 24 and 25), decomposed into Relax ops.

TVM's ``Attention`` converter is the ``com.microsoft`` op of that name, so hetc converts the
ONNX op itself, following the spec and ``onnx.reference.ops.op_attention``:

- 3D ``Q/K/V`` (``q_num_heads``/``kv_num_heads``) or 4D inputs, different head sizes for V,
  GQA/MQA (KV heads repeated so query head ``h`` uses KV head ``h // (q_heads / kv_heads)``);
- ``scale`` (``Q`` and ``K`` are each multiplied by ``sqrt(scale)``), ``softcap``,
  ``softmax_precision``;
- the additive bias: ``attn_mask`` (bool or float, any broadcastable rank, last dim padded to
  the total sequence length with ``False``/``-inf``), ``is_causal`` (bottom-right aligned:
  query ``i`` attends key ``j`` iff ``j <= i + offset``), ``left_window_size`` /
  ``right_window_size`` (opset 25) and the ``nonpad_kv_seqlen`` padding mask (opset 24);
  ``offset`` is the past length, ``nonpad_kv_seqlen - q_len`` per batch, or 0;
- a query row whose bias is ``-inf`` everywhere gives zeros (not NaN) in ``Y`` and in the
  mode-3 ``qk_matmul_output``;
- ``past_key``/``past_value`` concatenated into ``present_key``/``present_value``;
- ``qk_matmul_output`` at the stage ``qk_matmul_output_mode`` names (0: ``Q K^T``, 1: after
  softcap, 2: plus bias, 3: softmax probabilities), in the input dtype. Mode 0 is the raw
  product even with ``softcap``, as the spec, the ONNX function body and onnxruntime have it
  (``onnx.reference`` 1.23 returns the softcapped value there).

float16/bfloat16 inputs are computed in float32 and the outputs cast back (fp16 accumulation
misses onnx's expected outputs by ~2 ulp); ``softmax_precision`` still sets the softmax's
dtype. ``nn.softmax`` is guarded rather than replaced: TVM's ``max`` reduction starts from the
lowest finite value, so a fully masked row is detected by counting keys whose bias is not
``-inf``.
"""

from __future__ import annotations

import math

import numpy as np
from tvm import relax

from ..registry import Attrs, ConvertContext, converter
from ..shapes import static_dims as _dims

_SOFTMAX_DTYPES = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}
_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")




def _scalar(value: float, dtype: str) -> relax.Expr:
    if dtype == "bfloat16":  # relax.const has no bfloat16 numpy type: cast a float32 scalar
        return relax.op.astype(relax.const(value, "float32"), dtype)
    return relax.const(value, dtype)


def _attention(ctx: ConvertContext, inputs: list, attrs: Attrs, version: int):
    bb = ctx.bb
    inputs = list(inputs) + [None] * (7 - len(inputs))
    q, k, v, mask, past_key, past_value = inputs[:6]
    nonpad = inputs[6] if version >= 24 else None
    if q is None or k is None or v is None:
        raise ctx.error("inputs Q, K and V are required")

    is_causal = bool(attrs.reject("is_causal", lambda x: x in (0, 1), 0))
    q_heads_attr = attrs.get("q_num_heads")
    kv_heads_attr = attrs.get("kv_num_heads")
    mode = attrs.reject("qk_matmul_output_mode", lambda x: x in (0, 1, 2, 3), 0)
    scale = attrs.get("scale")
    softcap = float(attrs.reject("softcap", lambda x: x >= 0, 0.0))
    precision = attrs.reject("softmax_precision", lambda x: x is None or x in _SOFTMAX_DTYPES)
    if version >= 25:
        left = int(attrs.reject("left_window_size", lambda x: x >= -1, -1))
        right = int(attrs.reject("right_window_size", lambda x: x >= -1, -1))
    else:
        left = right = -1

    dtype = str(q.ty.dtype)
    if dtype not in _FLOAT_DTYPES:
        raise ctx.error(f"input Q has dtype {dtype}; Attention takes float16/bfloat16/float32/float64")
    vdtype = str(v.ty.dtype)  # V may have another float type (T2); Y has Q's
    for name, value, want in (("K", k, dtype), ("V", v, vdtype), ("past_key", past_key, dtype),
                              ("past_value", past_value, vdtype)):
        if value is not None and str(value.ty.dtype) != want:
            raise ctx.error(f"input {name} has dtype {value.ty.dtype}, expected {want}")
    if vdtype not in _FLOAT_DTYPES:
        raise ctx.error(f"input V has dtype {vdtype}; Attention takes float16/bfloat16/float32/float64")
    if (past_key is None) != (past_value is None):
        raise ctx.error("inputs past_key and past_value must be given together")
    if nonpad is not None and past_key is not None:
        raise ctx.error("input nonpad_kv_seqlen cannot be combined with past_key/past_value")

    # float16/bfloat16 are computed in float32 (like numpy's fp16 matmul accumulation) and
    # the outputs cast back: fp16 accumulation over the head/sequence dims loses ~2 ulp.
    cdtype = "float32" if dtype in ("float16", "bfloat16") else dtype
    if cdtype != dtype:
        q, k, past_key = (None if x is None else bb.normalize(relax.op.astype(x, cdtype))
                          for x in (q, k, past_key))
    if cdtype != vdtype:
        v, past_value = (None if x is None else bb.normalize(relax.op.astype(x, cdtype))
                         for x in (v, past_value))
    rank = q.ty.ndim
    if not (rank == k.ty.ndim == v.ty.ndim) or rank not in (3, 4):
        raise ctx.error(f"inputs Q, K, V must all be 3D or all 4D, got ranks {q.ty.ndim}, "
                        f"{k.ty.ndim}, {v.ty.ndim}")
    batch = _dims(q)[0]
    if rank == 3:
        if q_heads_attr is None or kv_heads_attr is None:
            raise ctx.error("3D inputs need attributes q_num_heads and kv_num_heads")
        q_heads, kv_heads = int(q_heads_attr), int(kv_heads_attr)

        def split_heads(x: relax.Expr, heads: int, name: str, attr: str) -> relax.Expr:
            b, seq, hidden = _dims(x)
            if heads <= 0 or hidden % heads:
                raise ctx.error(f"input {name} hidden size {hidden} is not divisible by {attr}={heads}")
            x = relax.op.reshape(x, (b, seq, heads, hidden // heads))
            return bb.normalize(relax.op.permute_dims(x, [0, 2, 1, 3]))

        q = split_heads(q, q_heads, "Q", "q_num_heads")
        k = split_heads(k, kv_heads, "K", "kv_num_heads")
        v = split_heads(v, kv_heads, "V", "kv_num_heads")
    else:
        if version >= 25 and (q_heads_attr is not None or kv_heads_attr is not None):
            raise ctx.error("attributes q_num_heads/kv_num_heads must not be given with 4D inputs")
        q_heads, kv_heads = _dims(q)[1], _dims(k)[1]
        for attr, given, actual in (("q_num_heads", q_heads_attr, q_heads),
                                    ("kv_num_heads", kv_heads_attr, kv_heads)):
            if given is not None and int(given) != actual:
                raise ctx.error(f"attribute {attr}={given} does not match the 4D input's {actual} heads")
    if _dims(v)[1] != kv_heads:
        raise ctx.error(f"inputs K and V have different head counts ({kv_heads} and {_dims(v)[1]})")
    if q_heads % kv_heads:
        raise ctx.error(f"q_num_heads {q_heads} is not a multiple of kv_num_heads {kv_heads}")

    head_size = _dims(q)[3]
    scale = 1.0 / math.sqrt(head_size) if scale is None else float(scale)
    if scale < 0:
        raise ctx.error(f"attribute scale={scale} is negative (Q and K are scaled by sqrt(scale))")
    sqrt_scale = _scalar(math.sqrt(scale), cdtype)

    past_len = 0
    if past_key is not None:
        past_len = _dims(past_key)[2]
        k = bb.normalize(relax.op.concat([past_key, k], axis=2))
        v = bb.normalize(relax.op.concat([past_value, v], axis=2))
    present_key, present_value = k, v
    q_len, kv_len = _dims(q)[2], _dims(k)[2]

    bias = _bias(ctx, mask, nonpad, cdtype, batch, q_len, kv_len, past_len, is_causal,
                 left, right)

    if q_heads != kv_heads:  # GQA / MQA: head h uses KV head h // group
        group = q_heads // kv_heads
        k = bb.normalize(relax.op.repeat(k, group, axis=1))
        v = bb.normalize(relax.op.repeat(v, group, axis=1))
    qs = relax.op.multiply(q, sqrt_scale)
    ks = relax.op.permute_dims(relax.op.multiply(k, sqrt_scale), [0, 1, 3, 2])
    qk = bb.normalize(relax.op.matmul(qs, ks))
    raw_qk = qk
    if softcap > 0:
        cap = _scalar(softcap, cdtype)
        qk = bb.normalize(relax.op.multiply(relax.op.tanh(relax.op.divide(qk, cap)), cap))
    capped_qk = qk
    if bias is not None:
        qk = bb.normalize(relax.op.add(qk, bias))

    soft_dtype = _SOFTMAX_DTYPES[precision] if precision is not None else cdtype
    logits = relax.op.astype(qk, soft_dtype) if soft_dtype != cdtype else qk
    probs = bb.normalize(relax.op.nn.softmax(logits, axis=-1))
    if bias is not None:
        # Rows with no attendable key (bias -inf everywhere) give 0, not exp(-inf + inf) = NaN.
        # (TVM's max starts from the lowest finite value, so max(bias) == -inf never holds:
        # count the keys whose bias is not -inf instead.)
        open_key = relax.op.astype(relax.op.not_equal(bias, _scalar(-math.inf, cdtype)), "int32")
        masked_row = relax.op.equal(relax.op.max(open_key, axis=-1, keepdims=True),
                                    relax.const(0, "int32"))
        probs = bb.normalize(relax.op.where(masked_row, _scalar(0.0, soft_dtype), probs))
    if soft_dtype != cdtype:
        probs = bb.normalize(relax.op.astype(probs, cdtype))

    y = relax.op.matmul(probs, v)
    if rank == 3:
        y = relax.op.permute_dims(y, [0, 2, 1, 3])
        y = relax.op.reshape(y, (batch, q_len, q_heads * _dims(v)[3]))
    if cdtype != dtype:
        y = relax.op.astype(y, dtype)
    if ctx.num_outputs <= 1:
        return y
    qk_out = {0: raw_qk, 1: capped_qk, 2: qk, 3: probs}[mode]
    if cdtype != dtype:
        qk_out, present_key = relax.op.astype(qk_out, dtype), relax.op.astype(present_key, dtype)
    if cdtype != vdtype:
        present_value = relax.op.astype(present_value, vdtype)
    return relax.Tuple([y, present_key, present_value, qk_out][: ctx.num_outputs])


def _bias(ctx, mask, nonpad, cdtype, batch, q_len, kv_len, past_len, is_causal, left, right):
    """The additive attention bias (broadcastable to (B, H, q, kv)), or None when there is none.

    Bool constraints (bool mask, causal, window, padding) are ANDed into one ``allowed`` tensor,
    turned into ``0 / -inf``, and added to a float mask.
    """
    bb = ctx.bb
    allowed = None  # bool, broadcastable to (B, H, q, kv)
    float_mask = None

    def conj(a, b):
        return b if a is None else bb.normalize(relax.op.logical_and(a, b))

    if mask is not None:
        mdims = _dims(mask)
        if mask.ty.ndim < 1 or mask.ty.ndim > 4:
            raise ctx.error(f"input attn_mask has rank {mask.ty.ndim}; it must be 1D to 4D")
        if mdims[-1] > kv_len:
            raise ctx.error(f"input attn_mask's last dim {mdims[-1]} exceeds the total sequence "
                            f"length {kv_len}")
        is_bool = str(mask.ty.dtype) == "bool"
        if not is_bool and str(mask.ty.dtype) != cdtype:  # a numeric mask is added as is
            mask = bb.normalize(relax.op.astype(mask, cdtype))
        if mdims[-1] < kv_len:  # pad the kv dim with False / -inf
            pad_shape = mdims[:-1] + [kv_len - mdims[-1]]
            if is_bool:
                pad = relax.const(np.zeros(pad_shape, dtype=bool), "bool")
            else:
                pad = relax.const(np.full(pad_shape, -np.inf, cdtype), cdtype)
            mask = bb.normalize(relax.op.concat([mask, pad], axis=-1))
        if is_bool:
            allowed = mask
        else:
            float_mask = mask

    windowed = left >= 0 or right >= 0
    if is_causal or windowed:
        i_idx = np.arange(q_len, dtype=np.int64).reshape(q_len, 1)
        j_idx = np.arange(kv_len, dtype=np.int64).reshape(1, kv_len)
        if nonpad is None:  # static offset: a (q, kv) constant
            diff = i_idx + past_len - j_idx  # query position minus key position
            ok = np.ones((q_len, kv_len), dtype=bool)
            if is_causal:
                ok &= diff >= 0
            if left >= 0:
                ok &= diff <= left
            if right >= 0:
                ok &= -diff <= right
            allowed = conj(allowed, relax.const(ok, "bool"))
        else:  # external cache: offset[b] = nonpad_kv_seqlen[b] - q_len
            offset = relax.op.subtract(relax.op.astype(nonpad, "int64"), relax.const(q_len, "int64"))
            offset = relax.op.reshape(offset, (batch, 1, 1))
            diff = bb.normalize(relax.op.subtract(relax.op.add(relax.const(i_idx, "int64"), offset),
                                                  relax.const(j_idx, "int64")))  # (B, q, kv)
            ok = None
            if is_causal:
                ok = conj(ok, relax.op.greater_equal(diff, relax.const(0, "int64")))
            if left >= 0:
                ok = conj(ok, relax.op.less_equal(diff, relax.const(left, "int64")))
            if right >= 0:
                ok = conj(ok, relax.op.greater_equal(diff, relax.const(-right, "int64")))
            allowed = conj(allowed, relax.op.reshape(ok, (batch, 1, q_len, kv_len)))

    if nonpad is not None:
        if _dims(nonpad) != [batch]:
            raise ctx.error(f"input nonpad_kv_seqlen has shape {_dims(nonpad)}, expected [{batch}]")
        lengths = relax.op.reshape(relax.op.astype(nonpad, "int64"), (batch, 1))
        valid = relax.op.less(relax.const(np.arange(kv_len, dtype=np.int64).reshape(1, kv_len), "int64"), lengths)
        allowed = conj(allowed, relax.op.reshape(valid, (batch, 1, 1, kv_len)))

    bias = None
    if allowed is not None:
        bias = relax.op.where(allowed, _scalar(0.0, cdtype), _scalar(-math.inf, cdtype))
    if float_mask is not None:
        bias = float_mask if bias is None else relax.op.add(float_mask, bias)
    return None if bias is None else bb.normalize(bias)


@converter("Attention", since=23)
def attention_23(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _attention(ctx, inputs, attrs, 23)


@converter("Attention", since=24)
def attention_24(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _attention(ctx, inputs, attrs, 24)


@converter("Attention", since=25)
def attention_25(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _attention(ctx, inputs, attrs, 25)
