"""A numpy interpreter of a ``Region``: the reference the HLS C-simulation is compared with.

``run(region, inputs, fixed=False)`` computes every layer's output in float64 (ideal
arithmetic, weights as given); ``fixed=True`` follows the layer types and the arithmetic
contract of ``layers.py`` exactly, so its results can be compared bit for bit with the C++
kernels. With ``fixed=True``:

- Region inputs are converted to ``region.input_types``; every layer's output to its
  ``result`` type (``fixed.quantize``: ``ap_fixed`` rounding/overflow, or float32).
- dense / conv2d: weights converted to ``weight``, bias to ``bias``; ``acc = accum(bias)``,
  then for every product, in order, ``acc += accum(x * w)``; ``out = result(acc)``. The
  product of two fixed-point values is exact (as ``ap_fixed``'s ``*``); with ``AP_WRAP``
  accumulators wrapping after every add equals wrapping the exact total, so that case is one
  integer matmul; ``AP_SAT`` saturates after each add and is emulated add by add. The order
  is: dense, inputs ``i`` ascending; conv2d, the window in ``(kh, kw, c)`` row-major order
  (depthwise: ``(kh, kw)``); padding contributes zero products. All-float MAC layers compute
  in float32 step by step (``float acc; acc += x * w``). A layer mixing float and fixed types
  computes each product in double, then converts as above (not guaranteed to match C++).
- Layers with a fixed-point result compute in double from their exact inputs and round once
  to ``result``: exact for relu, clip, max pools, add, multiply (widths <= 26 bits), and
  IEEE double arithmetic for ``x * alpha`` (leaky_relu), ``x * scale + shift``
  (scale_shift) and ``sum / count`` (average pools; the sum itself is exact).
- Layers with a float result do float32 C++ arithmetic in the same steps: ``x * alpha``,
  ``x * scale + shift`` (two roundings), window sums in ``(kh, kw)`` / ``(h, w)`` order then
  ``/ count``.
- sigmoid, tanh, softmax, layer_norm compute in float32 exactly as the C++ kernels
  (``hls/``) do with ``<cmath>``: ``x`` converted to float (through double), every operation
  rounded to float, ``expf`` / ``tanhf`` from the C library (called through ctypes, so the
  results are the C-simulation's on the same machine; numpy's float32 functions if no libm
  is found), then converted to ``result``:

  - sigmoid ``1.0f / (1.0f + expf(-x))``; tanh ``tanhf(x)``;
  - softmax over the last axis: ``m = max(x)``; ``e = expf(x - m)``; ``s = e[0] + e[1] + ...``
    in order; ``y = e / s``;
  - layer_norm over the last axis (gamma/beta converted to ``weight``/``bias``, then float):
    ``mean = (x[0] + x[1] + ...) / n``; ``sq = (x[0]-mean)^2 + ...``;
    ``inv = 1.0f / sqrtf(sq / n + eps)``; ``y = (x - mean) * inv * gamma + beta``.
- transpose / reshape move data only (their result type should be their input's).

To add a layer kind: write ``_op(layer, args, in_types, fixed) -> array`` (args with the batch
axis, float64) and register it in ``_OPS``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .fixed import frac_bits, quantize, requantize, to_units
from .layers import FLOAT, Layer, NumType, Region

F32 = np.float32


def run(region: Region, inputs: Sequence[np.ndarray], fixed: bool = False) -> dict[str, np.ndarray]:
    """Every layer's output (float64, with the batch axis) for ``inputs`` (one array per region
    input, with the batch axis first; any batch size)."""
    if len(inputs) != len(region.inputs):
        raise ValueError(f"region {region.name} takes {len(region.inputs)} inputs, got {len(inputs)}")
    values: dict[str, np.ndarray] = {}
    types: dict[str, NumType] = {}
    for (name, shape), t, x in zip(region.inputs, region.input_types, inputs):
        x = np.asarray(x, dtype=np.float64)
        if x.shape[1:] != tuple(shape):
            raise ValueError(f"region input {name}: expected (batch, {', '.join(map(str, shape))}), "
                             f"got {x.shape}")
        values[name], types[name] = (quantize(x, t) if fixed else x), t
    outputs = {}
    batch = next(iter(values.values())).shape[0] if values else 1
    for layer in region.layers:
        args = [values[i] for i in layer.inputs]
        y = _OPS[layer.op](layer, args, [types[i] for i in layer.inputs], fixed)
        if fixed and layer.op not in _SELF_QUANTIZED:
            y = quantize(y, layer.result)
        if y.shape != (batch, *layer.shape):
            raise AssertionError(f"layer {layer.name}: computed {y.shape}, declared {layer.shape}")
        values[layer.name] = outputs[layer.name] = y
        types[layer.name] = layer.result
    return outputs


def ranges(region: Region, calibration_inputs: Sequence[np.ndarray]) -> dict[str, float]:
    """max |value| of every region input and layer output over a float run on the inputs."""
    out = {name: float(np.max(np.abs(x))) if np.size(x) else 0.0
           for (name, _), x in zip(region.inputs, calibration_inputs)}
    out.update({name: float(np.max(np.abs(y))) if y.size else 0.0
                for name, y in run(region, calibration_inputs, fixed=False).items()})
    return out


# -- helpers ------------------------------------------------------------------------------------


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(F32)


def _seq_sum_f32(x: np.ndarray, axis: int) -> np.ndarray:
    """Sum along ``axis`` in float32, one element after the other (as a C++ loop does)."""
    x = np.moveaxis(_f32(x), axis, 0)
    acc = np.zeros(x.shape[1:], dtype=F32)
    for part in x:
        acc = acc + part
    return acc


def _float_result(layer: Layer, fixed: bool) -> bool:
    """Compute in float32 steps (a float result in fixed mode) rather than exactly/double."""
    return fixed and layer.result.is_float


def _windows(x: np.ndarray, kernel, strides, pads, fill: float) -> np.ndarray:
    """(B, H, W, C) -> (B, OH, OW, KH, KW, C) windows over the padded input."""
    top, left, bottom, right = pads
    kh, kw = kernel
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=fill)
    oh = (xp.shape[1] - kh) // strides[0] + 1
    ow = (xp.shape[2] - kw) // strides[1] + 1
    win = sliding_window_view(xp, (kh, kw), axis=(1, 2))[:, ::strides[0], ::strides[1]][:, :oh, :ow]
    return win.transpose(0, 1, 2, 4, 5, 3)


# -- multiply-accumulate layers ---------------------------------------------------------------


def _mac(layer: Layer, xs: np.ndarray, w: np.ndarray, in_t: NumType, fixed: bool) -> np.ndarray:
    """out[m, f] = bias[f] + sum_k xs[m, k, f or 0] * w[k, f], with the layer's arithmetic.

    ``xs``: (M, K, 1) (the same inputs for every output) or (M, K, F) (depthwise).
    """
    bias = np.asarray(layer.weights["bias"], dtype=np.float64).reshape(-1)
    w = np.asarray(w, dtype=np.float64)
    if not fixed:
        return (np.einsum("mk,kf->mf", xs[:, :, 0], w) if xs.shape[2] == 1
                else np.einsum("mkf,kf->mf", xs, w)) + bias
    wt, bt, at = layer.weight or FLOAT, layer.bias or FLOAT, layer.accum or FLOAT
    w, bias = quantize(w, wt), quantize(bias, bt)
    m, k, f = xs.shape[0], xs.shape[1], w.shape[1]
    types = (in_t, wt, bt, at)
    if all(t.is_float for t in types):
        x32, w32 = _f32(xs), _f32(w)
        acc = np.broadcast_to(_f32(bias), (m, f)).copy()
        for i in range(k):
            acc = acc + x32[:, i, :] * w32[i]
        return quantize(acc.astype(np.float64), layer.result)
    if any(t.is_float for t in types):  # mixed: products in double, converted one by one
        acc = np.broadcast_to(quantize(bias, at), (m, f)).copy()
        for i in range(k):
            acc = quantize(acc + quantize(xs[:, i, :] * w[i], at), at)
        return quantize(acc, layer.result)
    if in_t.width + wt.width > 64:
        raise NotImplementedError(f"layer {layer.name}: products of {in_t.width}+{wt.width} bits "
                                  "exceed the int64 emulation")
    xk, wk = to_units(xs, in_t), to_units(w, wt)  # exact: the values are of those types
    fp, fa = frac_bits(in_t) + frac_bits(wt), frac_bits(at)
    acc = np.broadcast_to(requantize(to_units(bias, bt), frac_bits(bt), at), (m, f)).copy()
    if at.overflow == "AP_WRAP" and fa >= fp:  # products convert by a left shift: one matmul
        if fa - fp < 64:  # (else every product is 0 modulo 2**64)
            wk = wk << (fa - fp)
            acc += xk[:, :, 0] @ wk if xs.shape[2] == 1 else (xk * wk).sum(axis=1)  # modulo 2**64
        acc = requantize(acc, fa, at)
    elif at.overflow == "AP_WRAP":
        for i in range(k):
            acc += requantize(xk[:, i, :] * wk[i], fp, at)
        acc = requantize(acc, fa, at)
    else:  # AP_SAT: saturate after every add
        for i in range(k):
            acc = requantize(acc + requantize(xk[:, i, :] * wk[i], fp, at), fa, at)
    return quantize(np.ldexp(acc.astype(np.float64), -fa), layer.result)


def _dense(layer: Layer, args, in_types, fixed):
    (x,) = args
    w = layer.weights["weight"]
    rows = x.reshape(-1, x.shape[-1], 1)
    return _mac(layer, rows, w, in_types[0], fixed).reshape(*x.shape[:-1], w.shape[1])


def _conv2d(layer: Layer, args, in_types, fixed):
    (x,) = args
    w = np.asarray(layer.weights["weight"])  # (KH, KW, C / groups, F)
    kh, kw, cg, f = w.shape
    c, groups = x.shape[-1], int(layer.attrs.get("groups", 1))
    win = _windows(x, (kh, kw), layer.attrs["strides"], layer.attrs["pads"], 0.0)
    b, oh, ow = win.shape[:3]
    if groups == 1:
        out = _mac(layer, win.reshape(b * oh * ow, kh * kw * c, 1), w.reshape(-1, f), in_types[0], fixed)
    elif groups == c == f and cg == 1:
        out = _mac(layer, win.reshape(b * oh * ow, kh * kw, c), w.reshape(kh * kw, c), in_types[0], fixed)
    else:
        raise NotImplementedError(f"layer {layer.name}: groups={groups} (only 1 or depthwise)")
    return out.reshape(b, oh, ow, f)


# -- the other layers ----------------------------------------------------------------------------


def _pool(layer: Layer, args, in_types, fixed, kind: str):
    (x,) = args
    a = layer.attrs
    pads = a.get("pads", (0, 0, 0, 0))
    if kind == "max":
        return _windows(x, a["kernel"], a["strides"], pads, -np.inf).max(axis=(3, 4))
    win = _windows(x, a["kernel"], a["strides"], pads, 0.0)
    kh, kw = a["kernel"]
    if a.get("count_include_pad", False):
        count = np.full(win.shape[1:3], kh * kw, dtype=np.float64)
    else:
        ones = _windows(np.ones((1, *x.shape[1:3], 1)), a["kernel"], a["strides"], pads, 0.0)
        count = ones.sum(axis=(3, 4))[0, :, :, 0]
    count = count[None, :, :, None]
    if _float_result(layer, fixed):
        s = _seq_sum_f32(win.reshape(*win.shape[:3], kh * kw, win.shape[-1]), axis=3)
        return (s / _f32(count)).astype(np.float64)
    return win.sum(axis=(3, 4)) / count


def _global_avg_pool2d(layer: Layer, args, in_types, fixed):
    (x,) = args
    b, h, w, c = x.shape
    if _float_result(layer, fixed):
        return (_seq_sum_f32(x.reshape(b, h * w, c), axis=1) / F32(h * w)).astype(np.float64)
    return x.sum(axis=(1, 2)) / (h * w)


def _unary(exact: Callable, in_f32: Callable | None = None):
    """A layer computing ``exact`` (float64) or, for a float result in fixed mode, ``in_f32``."""

    def op(layer: Layer, args, in_types, fixed):
        (x,) = args
        if in_f32 is not None and _float_result(layer, fixed):
            return in_f32(layer, _f32(x)).astype(np.float64)
        return exact(layer, x)

    return op


def _binary(fn: Callable):
    def op(layer: Layer, args, in_types, fixed):
        a, b = args
        if _float_result(layer, fixed):
            return fn(_f32(a), _f32(b)).astype(np.float64)
        return fn(a, b)

    return op


def _scale_shift(layer: Layer, args, in_types, fixed):
    (x,) = args
    scale = np.asarray(layer.weights["scale"], dtype=np.float64).reshape(-1)
    shift = np.asarray(layer.weights["shift"], dtype=np.float64).reshape(-1)
    if not fixed:
        return x * scale + shift
    scale, shift = quantize(scale, layer.weight or FLOAT), quantize(shift, layer.bias or FLOAT)
    if layer.result.is_float:
        return (_f32(x) * _f32(scale) + _f32(shift)).astype(np.float64)
    return x * scale + shift


@functools.cache
def _libm_f32(name: str) -> Callable[[np.ndarray], np.ndarray]:
    """The C library's float function ``name`` (``expf``, ``tanhf``) over a float32 array."""
    path = ctypes.util.find_library("m")
    fn = getattr(ctypes.CDLL(path), name, None) if path else None
    if fn is None:  # not bit-exact with the C++ kernels, but close
        return {"expf": np.exp, "tanhf": np.tanh}[name]
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    each = np.frompyfunc(fn, 1, 1)
    return lambda x: np.asarray(each(np.asarray(x, dtype=F32)), dtype=F32)


def _sigmoid(layer: Layer, args, in_types, fixed):
    (x,) = args
    if not fixed:
        with np.errstate(over="ignore"):
            return 1.0 / (1.0 + np.exp(-x))
    return (F32(1) / (F32(1) + _libm_f32("expf")(-_f32(x)))).astype(np.float64)


def _tanh(layer: Layer, args, in_types, fixed):
    (x,) = args
    return _libm_f32("tanhf")(_f32(x)).astype(np.float64) if fixed else np.tanh(x)


def _softmax(layer: Layer, args, in_types, fixed):
    (x,) = args
    if not fixed:
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    x = _f32(x)
    e = _libm_f32("expf")(x - x.max(axis=-1, keepdims=True))
    return (e / _seq_sum_f32(e, axis=-1)[..., None]).astype(np.float64)


def _layer_norm(layer: Layer, args, in_types, fixed):
    (x,) = args
    gamma = np.asarray(layer.weights["gamma"], dtype=np.float64).reshape(-1)
    beta = np.asarray(layer.weights["beta"], dtype=np.float64).reshape(-1)
    eps = float(layer.attrs.get("epsilon", 1e-5))
    if not fixed:
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * gamma + beta
    g, b = _f32(quantize(gamma, layer.weight or FLOAT)), _f32(quantize(beta, layer.bias or FLOAT))
    x = _f32(x)
    n = F32(x.shape[-1])
    mean = (_seq_sum_f32(x, axis=-1) / n)[..., None]
    d = x - mean
    inv = F32(1) / np.sqrt(_seq_sum_f32(d * d, axis=-1) / n + F32(eps))
    return (d * inv[..., None] * g + b).astype(np.float64)


def _transpose(layer: Layer, args, in_types, fixed):
    (x,) = args
    return np.transpose(x, (0, *[int(p) + 1 for p in layer.attrs["perm"]]))


def _reshape(layer: Layer, args, in_types, fixed):
    (x,) = args
    return x.reshape(x.shape[0], *layer.shape)


def _leaky(layer: Layer, x):
    return np.where(x > 0, x, x * float(F32(layer.attrs["alpha"])))


_OPS: dict[str, Callable] = {
    "dense": _dense,
    "conv2d": _conv2d,
    "max_pool2d": lambda layer, args, t, fixed: _pool(layer, args, t, fixed, "max"),
    "avg_pool2d": lambda layer, args, t, fixed: _pool(layer, args, t, fixed, "avg"),
    "global_avg_pool2d": _global_avg_pool2d,
    "relu": _unary(lambda layer, x: np.maximum(x, 0.0)),
    "clip": _unary(lambda layer, x: np.clip(x, float(layer.attrs["min"]), float(layer.attrs["max"]))),
    "leaky_relu": _unary(_leaky, lambda layer, x: np.where(x > 0, x, x * F32(layer.attrs["alpha"]))),
    "sigmoid": _sigmoid,
    "tanh": _tanh,
    "add": _binary(np.add),
    "multiply": _binary(np.multiply),
    "scale_shift": _scale_shift,
    "softmax": _softmax,
    "layer_norm": _layer_norm,
    "transpose": _transpose,
    "reshape": _reshape,
}
_SELF_QUANTIZED = frozenset({"dense", "conv2d"})  # _mac converts to result itself
