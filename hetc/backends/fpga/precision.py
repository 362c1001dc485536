"""Number types for a Region: all float, fixed point from calibration ranges, or given types.

``choose(region, mode, calibration, width, accum_width, overrides)`` returns a copy of the
region (layers, attrs and weights dicts copied, weight arrays shared) with every type set:

- ``mode="float"``: every type ``float``.
- ``mode="fixed"``: ``ap_fixed<width, I>`` with ``I`` from the largest ``|value|`` a float run
  (``emulate.ranges``) sees over the calibration inputs (``int_bits_for``: the sign bit plus
  the bits of the integer part):

  - region inputs and layer results: ``I = int_bits_for(max) + 1`` - one headroom bit for
    data beyond the calibration set. Results use ``AP_TRN, AP_WRAP`` (the cheapest, hls4ml's
    default); inputs are converted once, at the region's boundary, with ``AP_RND_CONV,
    AP_SAT``;
  - weights and biases (also scale/shift, gamma/beta): ``I = int_bits_for(max |w|)`` of the
    array itself, ``AP_RND_CONV, AP_SAT`` (constants: rounding and saturation cost nothing);
  - accumulators of dense/conv2d: ``ap_fixed<accum_width, I_result + ACCUM_GUARD>``. With
    ``AP_WRAP`` only the final sum must fit (intermediate wraps cancel); the guard bits keep
    partial sums in range for ``AP_SAT`` accumulators set through ``overrides``;
  - softmax, sigmoid and tanh results: ``I = int_bits_for(1.0)`` (2: their known range);
  - pass-through layers (relu, clip, max_pool2d, reshape, transpose) keep their input's type:
    their values are a subset of it and the stream stays as it is.

  Without calibration data inputs and results get ``ap_fixed<width, DEFAULT_INT_BITS>``
  (``ap_fixed<16,6>`` at width 16: range +-32, step 2**-10); weights still use their own range.
- ``mode`` a ``NumType`` or its text (``"ap_fixed<16,6>"``): that type for inputs, results,
  weights and biases, accumulators ``ap_fixed<accum_width, I + ACCUM_GUARD>`` with the type's
  modes (a float type is ``mode="float"``).

``overrides`` (``NumType`` or text) set single types by name: ``"<layer>"`` its result,
``"<layer>.weight"`` / ``".bias"`` / ``".accum"`` those, ``"<region input>"`` an input; the
layers after an overridden one see its new type (pass-through layers inherit it, an
accumulator follows its overridden result unless overridden itself).

``error_report`` measures the chosen types against float; ``load_calibration`` reads the
``.npz`` a user gives (model input name -> samples).
"""

from __future__ import annotations

import dataclasses
import os
import zipfile
from collections.abc import Mapping, Sequence

import numpy as np

from ...errors import UsageError, last_line
from . import emulate
from .fixed import int_bits_for
from .layers import FLOAT, NumType, Region

DEFAULT_INT_BITS = 6  # integer bits of activations without calibration data
ACCUM_GUARD = 2  # accumulator integer bits beyond the result's
BOUNDED = {"softmax": 1.0, "sigmoid": 1.0, "tanh": 1.0}  # known output ranges, calibration or not
PASS_THROUGH = frozenset({"relu", "clip", "max_pool2d", "reshape", "transpose"})
_WEIGHT_ROLE = {"dense": ("weight", "bias"), "conv2d": ("weight", "bias"), "scale_shift": ("scale", "shift"),
                "layer_norm": ("gamma", "beta")}
_MAC = frozenset({"dense", "conv2d"})


def _as_type(value: NumType | str, what: str) -> NumType:
    if isinstance(value, NumType):
        return value
    try:
        return NumType.parse(str(value))
    except ValueError as err:
        raise UsageError(f"{what}: {err}") from None


def _fixed(width: int, integer: int, rounding: str = "AP_TRN", overflow: str = "AP_WRAP") -> NumType:
    return NumType(width, integer, True, rounding, overflow)


def _weight_type(array: np.ndarray, width: int) -> NumType:
    peak = float(np.max(np.abs(array))) if np.size(array) else 0.0
    return _fixed(width, int_bits_for(peak), "AP_RND_CONV", "AP_SAT")


def choose(region: Region, mode: str | NumType = "fixed",
           calibration: Sequence[np.ndarray] | Mapping[str, float] | None = None, width: int = 16,
           accum_width: int = 32, overrides: Mapping[str, NumType | str] | None = None) -> Region:
    """A copy of ``region`` with types set (see the module doc). ``calibration`` is one array per
    region input (samples along axis 0) or ranges already measured (name -> max |value|)."""
    if not 1 <= width <= accum_width <= 64:
        raise UsageError(f"fixed-point widths must satisfy 1 <= width ({width}) <= accum_width ({accum_width}) <= 64")
    glob = None
    if mode not in ("float", "fixed"):
        try:
            glob = mode if isinstance(mode, NumType) else NumType.parse(str(mode))
        except ValueError:
            raise UsageError(f"unknown precision mode {mode!r}; use float, fixed or a number type such as "
                             "ap_fixed<16,6>") from None
        if glob.is_float:
            mode, glob = "float", None
    peaks: Mapping[str, float] = {}
    if mode == "fixed" and calibration is not None:
        peaks = calibration if isinstance(calibration, Mapping) else emulate.ranges(region, list(calibration))

    def activation(name: str, op: str = "") -> NumType:
        if mode == "float":
            return FLOAT
        if glob is not None:
            return glob
        if op in BOUNDED:
            return _fixed(width, int_bits_for(BOUNDED[op]))
        return _fixed(width, int_bits_for(peaks[name]) + 1 if name in peaks else DEFAULT_INT_BITS)

    over = _overrides(region, overrides or {})
    input_types = []
    types: dict[str, NumType] = {}
    for name, _ in region.inputs:
        t = activation(name)
        if mode == "fixed" and glob is None:
            t = dataclasses.replace(t, rounding="AP_RND_CONV", overflow="AP_SAT")
        types[name] = over.get((name, "result"), t)
        input_types.append(types[name])
    layers = []
    for layer in region.layers:
        new = dataclasses.replace(layer, attrs=dict(layer.attrs), weights=dict(layer.weights), weight=None,
                                  bias=None, accum=None)
        if layer.op in PASS_THROUGH:
            new.result = types[layer.inputs[0]]
        else:
            new.result = activation(layer.name, layer.op)
        new.result = over.get((layer.name, "result"), new.result)
        if layer.op in _WEIGHT_ROLE:
            w, b = _WEIGHT_ROLE[layer.op]
            if mode == "float":
                new.weight = new.bias = FLOAT
            elif glob is not None:
                new.weight = new.bias = glob
            else:
                new.weight = _weight_type(layer.weights[w], width)
                new.bias = _weight_type(layer.weights[b], width)
        if layer.op in _MAC:
            r = new.result
            new.accum = FLOAT if r.is_float else NumType(accum_width, r.integer + ACCUM_GUARD, r.signed,
                                                         r.rounding, r.overflow)
        for role in ("weight", "bias", "accum"):
            if (layer.name, role) in over:
                setattr(new, role, over[layer.name, role])
        types[layer.name] = new.result
        layers.append(new)
    return dataclasses.replace(region, input_types=input_types, layers=layers)


def _overrides(region: Region, overrides: Mapping[str, NumType | str]) -> dict[tuple[str, str], NumType]:
    """``{"name[.role]": type}`` -> ``{(name, role): NumType}``, validated against the region."""
    inputs = {name for name, _ in region.inputs}
    layers = {layer.name: layer for layer in region.layers}
    out = {}
    for key, value in overrides.items():
        t = _as_type(value, f"precision override {key}")
        name, _, role = key.partition(".")
        if name in inputs and not role:
            out[name, "result"] = t
        elif name in layers and role in ("", "weight", "bias", "accum"):
            layer = layers[name]
            if (role == "accum" and layer.op not in _MAC) or (role in ("weight", "bias")
                                                              and layer.op not in _WEIGHT_ROLE):
                raise UsageError(f"precision override {key}: layer {name} ({layer.op}) has no {role} type")
            out[name, role or "result"] = t
        else:
            raise UsageError(f"precision override {key}: no such region input or layer "
                             f"(layers: {', '.join(layers)})")
    return out


def error_report(region_fixed: Region, region_float: Region,
                 inputs: Sequence[np.ndarray]) -> dict[str, dict]:
    """Measured error of the emulated typed region against float, per layer: its result type,
    the max absolute error and the max error relative to the layer's largest |float value|."""
    fixed = emulate.run(region_fixed, inputs, fixed=True)
    ref = emulate.run(region_float, inputs, fixed=False)
    report = {}
    for layer in region_fixed.layers:
        a, b = fixed[layer.name], ref[layer.name]
        err = float(np.max(np.abs(a - b))) if a.size else 0.0
        peak = float(np.max(np.abs(b))) if b.size else 0.0
        report[layer.name] = {"type": str(layer.result), "max_abs_err": err,
                              "max_rel_err": err / peak if peak > 0 else (0.0 if err == 0 else float("inf"))}
    return report


def load_calibration(path: str | os.PathLike, input_specs: Sequence) -> dict[str, np.ndarray]:
    """The calibration samples of an ``.npz`` (model input name -> array with the samples along
    axis 0 and the input's other dims), checked against ``input_specs`` (objects with ``name``,
    ``shape``, ``dtype``, e.g. the frontend's ``TensorSpec``). Raises UsageError, one line."""
    label = f"calibration file {os.fspath(path)}"
    if not os.path.isfile(path):
        raise UsageError(f"{label}: not found")
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise UsageError(f"{label}: not a numpy .npz archive ({last_line(err)})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise UsageError(f"{label}: holds a single array; save the inputs by name with numpy.savez")
    try:
        with archive:
            arrays = {k: archive[k] for k in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise UsageError(f"{label}: damaged .npz archive ({last_line(err)})") from None
    out = {}
    for spec in input_specs:
        if spec.name not in arrays:
            raise UsageError(f"{label}: no array for input '{spec.name}' (has: {', '.join(arrays) or 'none'})")
        array = arrays[spec.name]
        if str(array.dtype) != str(spec.dtype):
            raise UsageError(f"{label}: input '{spec.name}' is {array.dtype}, the model takes {spec.dtype}")
        want = tuple(spec.shape)
        if array.ndim != len(want) or array.ndim == 0 or array.shape[0] < 1 or any(
                d is not None and a != d for a, d in zip(array.shape[1:], want[1:])):
            raise UsageError(f"{label}: input '{spec.name}' has shape {tuple(array.shape)}, the model takes "
                             f"{want} (any number of samples along axis 0)")
        out[spec.name] = array
    return out
