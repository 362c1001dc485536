"""LSTM, GRU and RNN (opsets 7 and 14): input projections in one matmul, then a TIR time loop.

As cuDNN and MLAS do, ``X·W^T + Wb + Rb`` is computed for the whole sequence and both
directions in one matmul (a GEMM the CPU schedules tile and parallelise); the recurrence,
which carries only ``h·R^T`` and the gate math, is one hand-written kernel
(``rnn_kernel.py``) with a serial time loop, so symbolic sequence lengths and batches work.
Every option of the spec is handled: directions, ``sequence_lens``, initial states, both
layouts, ``clip``, peepholes, ``input_forget``, ``linear_before_reset``, all activations
with ``activation_alpha``/``activation_beta`` (consumed in order by the activations that take
them, onnxruntime's defaults otherwise), any subset of the outputs.
"""

from __future__ import annotations

from tvm import relax

from .. import rnn_kernel as rk
from ..registry import Attrs, ConvertContext, converter
from ..shapes import dims

_DEFAULT_ACTIVATIONS = {"lstm": ("Sigmoid", "Tanh", "Tanh"), "gru": ("Sigmoid", "Tanh"), "rnn": ("Tanh",)}
_INPUTS = {"lstm": ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"),
           "gru": ("X", "W", "R", "B", "sequence_lens", "initial_h"),
           "rnn": ("X", "W", "R", "B", "sequence_lens", "initial_h")}
_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}


def _activations(ctx: ConvertContext, attrs: Attrs, cell: str, num_dirs: int) -> tuple:
    per_dir = len(_DEFAULT_ACTIVATIONS[cell])
    names = attrs.get("activations")
    names = [n.decode() if isinstance(n, bytes) else n for n in names] if names else \
        list(_DEFAULT_ACTIVATIONS[cell]) * num_dirs
    if len(names) != per_dir * num_dirs:
        raise ctx.error(f"activations lists {len(names)} functions, {cell.upper()} with {num_dirs} "
                        f"direction(s) takes {per_dir * num_dirs}")
    alphas = list(attrs.get("activation_alpha") or [])
    betas = list(attrs.get("activation_beta") or [])
    acts = []
    for name in names:
        key = name.lower()
        if key not in rk.ACTIVATIONS:
            raise ctx.error(f"activation {name!r} is not supported")
        uses_a, uses_b, alpha, beta = rk.ACTIVATIONS[key]
        if uses_a and alphas:
            alpha = float(alphas.pop(0))
        if uses_b and betas:
            beta = float(betas.pop(0))
        acts.append(rk.Activation(key, alpha, beta))
    return tuple(tuple(acts[i * per_dir:(i + 1) * per_dir]) for i in range(num_dirs))


def _convert(cell: str, ctx: ConvertContext, inputs: list, attrs: Attrs):
    bb = ctx.bb
    named = dict(zip(_INPUTS[cell], list(inputs) + [None] * len(_INPUTS[cell])))
    if len(inputs) > len(_INPUTS[cell]):
        raise ctx.error(f"takes at most {len(_INPUTS[cell])} inputs, got {len(inputs)}")
    x, w, r = named["X"], named["W"], named["R"]
    direction = attrs.reject("direction", lambda v: v in _DIRECTIONS, "forward")
    layout = attrs.reject("layout", lambda v: v in (0, 1), 0)
    reverse = _DIRECTIONS[direction]
    num_dirs, gates = len(reverse), rk.GATES[cell]
    dtype = str(x.ty.dtype)
    if dtype not in ("float32", "float64"):
        raise ctx.error(f"input dtype {dtype} is not supported (float32, float64)")
    if x.ty.ndim != 3 or w.ty.ndim != 3 or r.ty.ndim != 3:
        raise ctx.error("X, W and R must be rank 3")
    w_dims, r_dims = dims(w), dims(r)
    if not all(isinstance(v, int) for v in w_dims + r_dims):
        raise ctx.error("W and R need static shapes")
    hidden = r_dims[2]
    size = attrs.get("hidden_size")
    if size is not None and int(size) != hidden:
        raise ctx.error(f"hidden_size={size} but R has {hidden} columns")
    gh = gates * hidden
    if w_dims[:2] != [num_dirs, gh] or r_dims != [num_dirs, gh, hidden]:
        raise ctx.error(f"W {w_dims} / R {r_dims} do not match direction={direction}, hidden size {hidden}")
    x_dims = dims(x)
    steps, batch = (x_dims[0], x_dims[1]) if layout == 0 else (x_dims[1], x_dims[0])
    if isinstance(x_dims[2], int) and w_dims[2] != x_dims[2]:
        raise ctx.error(f"X has {x_dims[2]} features, W expects {w_dims[2]}")
    clip = attrs.get("clip")
    input_forget = bool(attrs.get("input_forget", 0)) if cell == "lstm" else False
    lbr = bool(attrs.get("linear_before_reset", 0)) if cell == "gru" else False
    acts = _activations(ctx, attrs, cell, num_dirs)
    if named.get("P") is not None and dims(named["P"]) != [num_dirs, 3 * hidden]:
        raise ctx.error(f"P must have shape [{num_dirs}, {3 * hidden}]")

    # input projections of every step and direction: one matmul, plus the biases
    w_all = bb.normalize(relax.op.reshape(w, (num_dirs * gh, w_dims[2])))
    rows = relax.op.reshape(x, (x_dims[0] * x_dims[1], x_dims[2]))  # one 2-D GEMM over every step
    xw = relax.op.matmul(rows, relax.op.permute_dims(w_all, [1, 0]))
    bias = named["B"]
    rbh = None
    if bias is not None:
        if dims(bias) != [num_dirs, 2 * gh]:
            raise ctx.error(f"B must have shape [{num_dirs}, {2 * gh}]")
        wb = relax.op.strided_slice(bias, [1], [0], [gh])
        rb = relax.op.strided_slice(bias, [1], [gh], [2 * gh])
        if lbr:  # the h gate's Rb is multiplied by the reset gate: the kernel adds it
            rbh = bb.normalize(relax.op.strided_slice(bias, [1], [gh + 2 * hidden], [2 * gh]))
            rb = relax.op.concat([relax.op.strided_slice(bias, [1], [gh], [gh + 2 * hidden]),
                                  relax.op.zeros((num_dirs, hidden), dtype)], axis=1)
        xw = relax.op.add(xw, relax.op.reshape(relax.op.add(wb, rb), (num_dirs * gh,)))
    elif lbr:
        rbh = relax.op.zeros((num_dirs, hidden), dtype)
    xw = bb.normalize(relax.op.reshape(xw, (x_dims[0], x_dims[1], num_dirs * gh)))
    args = [xw, bb.normalize(rk.pack_r(r, hidden))]
    if rbh is not None:
        args.append(bb.normalize(rbh))
    for key in ("P", "initial_h", "initial_c"):
        value = named.get(key)
        if value is not None:
            same = str(value.ty.dtype) == dtype
            args.append(value if same else bb.normalize(relax.op.astype(value, dtype)))
    lens = named["sequence_lens"]
    if lens is not None:
        args.append(bb.normalize(relax.op.astype(lens, "int32")))

    rec = rk.Recurrence(cell, hidden, reverse, acts, None if clip is None else float(clip), input_forget, lbr,
                        named.get("P") is not None, layout, named["initial_h"] is not None,
                        named.get("initial_c") is not None, lens is not None, dtype)
    func = rk.build(rec)
    gv = bb.add_func(func, f"{cell}_recurrence")
    state = [num_dirs, batch, hidden] if layout == 0 else [batch, num_dirs, hidden]
    y_shape = [steps, num_dirs, batch, hidden] if layout == 0 else [batch, steps, num_dirs, hidden]
    outs = [relax.TensorType(y_shape, dtype)]
    outs += [relax.TensorType(state, dtype)] * (2 if cell == "lstm" else 1)
    call = bb.normalize(relax.call_tir(gv, args, outs))
    results = [bb.normalize(relax.TupleGetItem(call, i)) for i in range(len(outs))]
    wanted = max(1, min(ctx.num_outputs, len(results)))
    return results[0] if wanted == 1 else relax.Tuple(results[:wanted])


@converter("LSTM", since=7)
def lstm(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _convert("lstm", ctx, inputs, attrs)


@converter("GRU", since=7)
def gru(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _convert("gru", ctx, inputs, attrs)


@converter("RNN", since=7)
def rnn(ctx: ConvertContext, inputs: list, attrs: Attrs):
    return _convert("rnn", ctx, inputs, attrs)


for _op, _fn in (("LSTM", lstm), ("GRU", gru), ("RNN", rnn)):
    converter(_op, since=14)(_fn)  # 14 adds ``layout`` (read above); otherwise the same
