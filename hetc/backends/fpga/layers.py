"""The FPGA backend's layer description: what an FPGA region of the model becomes.

BYOC partitioning (``patterns.py``) hands over Relax composite functions; ``region.py`` turns
each merged region into a ``Region`` of ``Layer`` s. Everything downstream reads only these
plain objects: the HLS emitter (``emit.py``), the numpy emulation (``emulate.py``, float and
bit-exact fixed point), precision selection (``precision.py``) and the estimates
(``estimates.py``). No TVM types appear here.

Conventions
-----------
- One sample at a time: shapes exclude the batch axis; the region's wrapper loops over it.
- Tensors are channels-last (HWC for images, (rows, features) for dense) and travel between
  layers as ``hls::stream`` s of scalars in row-major order, so a reshape is free.
- Weights are float32 numpy arrays in the layouts below; the emitter quantizes them to the
  layer's types. Conv weights are ``(KH, KW, C_in // groups, F)``, dense ``(n_in, n_out)``.
- Arithmetic of the multiply-accumulate layers (dense, conv2d), which hls4ml shares, so the
  two agree bit for bit on equal types: ``acc = accum_t(bias)``; for every product
  ``acc += accum_t(x * w)``; ``out = result_t(acc)``. Other layers compute in full precision
  (float for softmax/layernorm/sigmoid/tanh) and cast the result to ``result_t``.

To add a layer kind: add it to ``OPS`` with its attrs and weights, then implement it in the
HLS library (``hls/``), the emitter, ``emulate.py`` and ``estimates.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# op -> (attrs, weights). Unary elementwise ops take one input of any shape.
OPS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "dense": ((), ("weight", "bias")),  # (..., n_in) -> (..., n_out), applied to every row
    # (H, W, C) -> (OH, OW, F); strides (sh, sw), pads (top, left, bottom, right), groups 1 or C (depthwise)
    "conv2d": (("strides", "pads", "groups"), ("weight", "bias")),
    "max_pool2d": (("kernel", "strides", "pads"), ()),  # padding never wins the max
    "avg_pool2d": (("kernel", "strides", "pads", "count_include_pad"), ()),
    "global_avg_pool2d": ((), ()),  # (H, W, C) -> (C,)
    "relu": ((), ()),
    "clip": (("min", "max"), ()),
    "leaky_relu": (("alpha",), ()),
    "sigmoid": ((), ()),
    "tanh": ((), ()),
    "add": ((), ()),  # two inputs of the output's shape
    "multiply": ((), ()),
    "scale_shift": ((), ("scale", "shift")),  # x * scale + shift per channel (a folded batch norm)
    "softmax": ((), ()),  # over the last axis
    "layer_norm": (("epsilon",), ("gamma", "beta")),  # over the last axis
    "transpose": (("perm",), ()),
    "reshape": ((), ()),  # free: same stream, new shape
}


@dataclass(frozen=True)
class NumType:
    """A C++ number type: ``ap_fixed<width, integer, rounding, overflow>`` (``ap_ufixed`` when
    unsigned), or ``float`` (width 0)."""

    width: int = 0
    integer: int = 0
    signed: bool = True
    rounding: str = "AP_TRN"  # AP_TRN (floor) | AP_RND (round half up) | AP_RND_CONV (half even)
    overflow: str = "AP_WRAP"  # AP_WRAP (modulo) | AP_SAT (clamp)

    @property
    def is_float(self) -> bool:
        return self.width == 0

    def cpp(self) -> str:
        if self.is_float:
            return "float"
        name = "ap_fixed" if self.signed else "ap_ufixed"
        if (self.rounding, self.overflow) == ("AP_TRN", "AP_WRAP"):
            return f"{name}<{self.width},{self.integer}>"
        return f"{name}<{self.width},{self.integer},{self.rounding},{self.overflow}>"

    def __str__(self) -> str:
        return self.cpp()

    @classmethod
    def parse(cls, text: str) -> NumType:
        """``"float"``, ``"ap_fixed<16,6>"``, ``"ap_ufixed<8,0,AP_RND,AP_SAT>"`` -> NumType (ValueError otherwise)."""
        text = text.replace(" ", "")
        if text == "float":
            return FLOAT
        m = re.fullmatch(r"(ap_fixed|ap_ufixed)<(\d+),(-?\d+)(?:,(AP_TRN|AP_RND|AP_RND_CONV))?(?:,(AP_WRAP|AP_SAT))?>", text)
        if not m or not 1 <= int(m.group(2)) <= 64:
            raise ValueError(f"not a number type: {text!r} (expected float or ap_fixed<W,I[,rounding[,overflow]]>, "
                             "W in 1..64)")
        return cls(int(m.group(2)), int(m.group(3)), m.group(1) == "ap_fixed", m.group(4) or "AP_TRN",
                   m.group(5) or "AP_WRAP")


FLOAT = NumType()


@dataclass
class Layer:
    name: str  # a C identifier, unique in its region
    op: str  # a key of OPS
    inputs: list[str]  # region input names or earlier layers' names
    shape: tuple[int, ...]  # output shape (no batch axis)
    attrs: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    result: NumType = FLOAT  # result_t; a layer's input type is its producer's result type
    weight: NumType | None = None  # weight_t (dense, conv2d, scale_shift, layer_norm)
    bias: NumType | None = None  # bias_t
    accum: NumType | None = None  # accum_t (dense, conv2d)
    reuse: int = 1  # multipliers time-shared this many times (dense, conv2d): II = reuse
    source: str = ""  # the model node(s) it came from, for reports


@dataclass
class Region:
    name: str  # a C identifier: the symbol of the region's top function
    inputs: list[tuple[str, tuple[int, ...]]]  # (name, shape without batch)
    input_types: list[NumType]
    outputs: list[str]  # layer names whose results leave the region, in order
    layers: list[Layer]  # topologically ordered
    batch: int = 1

    def layer(self, name: str) -> Layer:
        return next(layer for layer in self.layers if layer.name == name)


def c_identifier(text: str, taken: set[str] | None = None, prefix: str = "n") -> str:
    """A safe, unique C identifier for an untrusted name (ONNX node names can be anything).

    Characters outside ``[A-Za-z0-9_]`` become ``_``; a leading digit, a C/C++ keyword or a
    reserved form (``_X``, ``__``) gets ``prefix_``; length is capped; ``taken`` (updated)
    makes it unique with a numeric suffix.
    """
    name = re.sub(r"[^A-Za-z0-9_]", "_", text)[:48] or prefix
    name = re.sub(r"__+", "_", name)
    if name[0].isdigit() or name[0] == "_" or name in _CPP_KEYWORDS:
        name = f"{prefix}_{name.lstrip('_')}"
    if taken is not None:
        base, k = name, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
    return name


_CPP_KEYWORDS = frozenset((
    "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case",
    "catch", "char", "char16_t", "char32_t", "class", "compl", "const", "constexpr", "const_cast",
    "continue", "decltype", "default", "delete", "do", "double", "dynamic_cast", "else", "enum",
    "explicit", "export", "extern", "false", "float", "for", "friend", "goto", "if", "inline", "int",
    "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq", "nullptr", "operator", "or",
    "or_eq", "private", "protected", "public", "register", "reinterpret_cast", "return", "short",
    "signed", "sizeof", "static", "static_assert", "static_cast", "struct", "switch", "template",
    "this", "thread_local", "throw", "true", "try", "typedef", "typeid", "typename", "union",
    "unsigned", "using", "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq", "main",
))
