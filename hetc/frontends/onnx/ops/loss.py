"""Loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opsets 12 and 13).

TVM has no converter for either. Both are decomposed into simple Relax ops following the
spec (and ``onnx.reference``):

- input ``(N, C)`` or ``(N, C, d1, ..., dk)``, target ``(N)`` / ``(N, d1, ..., dk)`` of an int
  dtype, optional ``weight`` ``(C,)``;
- ``loss[n, d...] = -input[n, target[n, d...], d...] * w[n, d...]`` where
  ``w = weight[target]`` (1 without weights) and ``w = 0`` where ``target == ignore_index``
  (any int, negative or >= C included: such targets are never used to index);
- ``reduction``: ``none`` (shape of target), ``sum``, ``mean``: ``sum(loss) / sum(w)`` when
  there are weights or an ``ignore_index``, ``mean(loss)`` otherwise;
- SoftmaxCrossEntropyLoss applies ``log_softmax`` over axis 1 first and can return it as the
  second output ``log_prob``.

Opsets 12 and 13 differ only in the types they allow (13 adds bfloat16 and int32/64 input
types for NLL); the semantics are the same. float16 (and bfloat16) reductions accumulate in
float32 and are cast back, like numpy's ``mean``.
"""

from __future__ import annotations

from tvm import relax

from ..registry import Attrs, ConvertContext, converter
from ..shapes import static_dims as _dims

_REDUCTIONS = ("none", "sum", "mean")
_LOW_PRECISION = ("float16", "bfloat16")




def _nll(ctx: ConvertContext, x: relax.Expr, inputs: list, attrs: Attrs) -> relax.Expr:
    """NegativeLogLikelihoodLoss of ``x`` (log-probabilities) with the node's target/weight."""
    bb = ctx.bb
    target = inputs[1]
    weight = inputs[2] if len(inputs) > 2 else None
    reduction = attrs.reject("reduction", lambda v: v in _REDUCTIONS, "mean")
    ignore_index = attrs.get("ignore_index", None)

    if x.ty.ndim < 2:
        raise ctx.error(f"input must have rank >= 2 (N, C, ...), got rank {x.ty.ndim}")
    x_dims, t_dims = _dims(x), _dims(target)
    if t_dims != [x_dims[0], *x_dims[2:]]:
        raise ctx.error(f"target shape {t_dims} does not match input shape {x_dims}")
    if not str(target.ty.dtype).startswith(("int", "uint")):
        raise ctx.error(f"target must be an integer tensor, got {target.ty.dtype}")
    num_classes = x_dims[1]
    dtype = str(x.ty.dtype)
    tdtype = str(target.ty.dtype)

    # Indices that are always in range: ignored targets (which may be negative or >= C) are
    # clipped, and whatever is gathered there is masked out below.
    valid = None
    if ignore_index is not None:
        valid = bb.normalize(relax.op.not_equal(target, relax.const(int(ignore_index), tdtype)))
    index = bb.normalize(relax.op.clip(target, 0, num_classes - 1))

    picked = relax.op.gather_elements(x, relax.op.expand_dims(index, 1), axis=1)
    loss = relax.op.negative(relax.op.squeeze(picked, [1]))

    w = None  # per-element weight, None means all ones
    if weight is not None:
        w = relax.op.take(weight, index, axis=0)
        if valid is not None:
            w = relax.op.where(valid, w, relax.const(0, dtype))
    elif valid is not None:
        w = relax.op.astype(valid, dtype)
    if w is not None:
        w = bb.normalize(w)
        loss = relax.op.multiply(loss, w)
    if valid is not None:  # 0, not 0 * inf, where the target is ignored
        loss = relax.op.where(valid, loss, relax.const(0, dtype))
    loss = bb.normalize(loss)

    if reduction == "none":
        return loss
    acc = "float32" if dtype in _LOW_PRECISION else dtype

    def total(e: relax.Expr) -> relax.Expr:
        e = relax.op.astype(e, acc) if acc != dtype else e
        return relax.op.sum(e)

    if reduction == "sum":
        out = total(loss)
    elif w is not None:
        out = relax.op.divide(total(loss), total(w))
    else:
        e = relax.op.astype(loss, acc) if acc != dtype else loss
        out = relax.op.mean(e)
    return relax.op.astype(out, dtype) if acc != dtype else out


@converter("NegativeLogLikelihoodLoss", since=12)
def negative_log_likelihood_loss(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _nll(ctx, inputs[0], inputs, attrs)


@converter("NegativeLogLikelihoodLoss", since=13)
def negative_log_likelihood_loss_13(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _nll(ctx, inputs[0], inputs, attrs)


@converter("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(ctx: ConvertContext, inputs: list, attrs: Attrs):
    x = inputs[0]
    if x.ty.ndim < 2:
        raise ctx.error(f"scores must have rank >= 2 (N, C, ...), got rank {x.ty.ndim}")
    dtype = str(x.ty.dtype)
    # log_softmax over the class axis; low-precision inputs are computed in float32.
    xs = relax.op.astype(x, "float32") if dtype in _LOW_PRECISION else x
    log_prob = relax.op.nn.log_softmax(xs, axis=1)
    if dtype in _LOW_PRECISION:
        log_prob = relax.op.astype(log_prob, dtype)
    log_prob = ctx.bb.normalize(log_prob)
    loss = _nll(ctx, log_prob, inputs, attrs)
    if ctx.num_outputs <= 1:
        return loss
    return relax.Tuple([loss, log_prob])


@converter("SoftmaxCrossEntropyLoss", since=13)
def softmax_cross_entropy_loss_13(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return softmax_cross_entropy_loss(ctx, inputs, attrs)
