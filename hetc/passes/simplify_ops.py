"""Rewrites of single Relax ops that exporters write and that would cost a copy.

- ``concat((x,))`` -> ``x``: torch's GPT-2 export concatenates each layer's past key with
  nothing (``Concat(past_key_values.i.key)``) before concatenating it with the new key; left
  alone, that is one more copy of the whole cache per layer and step.
- ``power(x, 2 | 3 | 4)`` (a float constant exponent) -> ``x * x [* x [* x]]``: the tanh GELU
  of GPT-2 and BERT exports (``Pow(x, 3)``) otherwise calls libm's ``powf`` per element, which
  LLVM does not vectorize (the GELU kernel took 5.4 ms of a 16-token GPT-2 prompt on a Zen 3,
  AVX2). The product differs from ``powf`` by at most an ulp or two.

- ``conv2d(pad(x, zeros on the spatial axes))`` -> ``conv2d(x)`` with the pads added to its
  padding: TensorFlow-style "same" padding as transformers' MobileNetV1/EfficientNet write it
  (an explicit ``Pad`` before each strided conv). Left alone, the pad is a copy of the
  activation, and TVM's ConvertLayout has no rule for ``pad``: it put a transpose on each side
  of every one (2 ms of MobileNetV1's 5.5 ms). The pad stays for any other consumer.

To add a rewrite, add a case to ``_Simplifier.visit_call_`` that returns the replacement (or
falls through to the call unchanged) and say here what exports it for.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .pipeline import rewrite_functions

_CONCAT = tvm.ir.Op.get("relax.concat")
_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")
_PAD = tvm.ir.Op.get("relax.nn.pad")
_POWER = tvm.ir.Op.get("relax.power")
SMALL_POWERS = (2, 3, 4)


def _small_power(expr) -> int | None:
    """The exponent when ``expr`` is a float scalar constant equal to 2, 3 or 4."""
    if not isinstance(expr, tvm.ir.GenericConst):
        return None
    array = expr.value.numpy()
    if array.size != 1 or array.dtype.kind != "f":
        return None
    value = float(array.reshape(()))
    return int(value) if value in SMALL_POWERS else None


@mutator
class _Simplifier(PyExprMutator):  # pylint: disable=abstract-method
    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        if not isinstance(call, relax.Call):
            return call
        if call.op.same_as(_CONCAT):
            parts = call.args[0]
            if isinstance(parts, relax.Tuple) and len(parts.fields) == 1:
                return parts.fields[0]
        if call.op.same_as(_CONV2D):
            folded = self._fold_pad(call)
            if folded is not None:
                return folded
        if call.op.same_as(_POWER):
            x, exponent = call.args
            power = _small_power(exponent)
            out, base = call.ty, x.ty
            if (power and isinstance(out, relax.TensorType) and isinstance(base, relax.TensorType)
                    and out.dtype == base.dtype and out.ndim == base.ndim):
                square = self.builder_.emit(relax.op.multiply(x, x))
                if power == 2:
                    return square
                return relax.op.multiply(square, square if power == 4 else x)
        return call

    def _fold_pad(self, conv: relax.Call) -> relax.Call | None:
        """``conv`` reading a zero pad of only its spatial axes, with the pad in its padding."""
        data = conv.args[0]
        pad = self.lookup_binding(data) if isinstance(data, relax.Var) else None
        if not (isinstance(pad, relax.Call) and pad.op.same_as(_PAD)) or str(pad.attrs.pad_mode) != "constant" \
                or float(pad.attrs.pad_value) != 0.0:
            return None
        attrs = conv.attrs
        layout = str(attrs.data_layout)
        if sorted(layout) != sorted("NCHW"):
            return None
        widths = [int(w) for w in pad.attrs.pad_width]
        h, w = layout.index("H"), layout.index("W")
        if any(widths[2 * a] or widths[2 * a + 1] for a in range(4) if a not in (h, w)) or min(widths) < 0:
            return None
        top, left, bottom, right = (int(p) for p in attrs.padding)
        padding = [top + widths[2 * h], left + widths[2 * w], bottom + widths[2 * h + 1], right + widths[2 * w + 1]]
        return relax.op.nn.conv2d(pad.args[0], conv.args[1], attrs.strides, padding, attrs.dilation, attrs.groups,
                                  layout, str(attrs.kernel_layout), str(attrs.out_layout),
                                  None if attrs.out_dtype is None else str(attrs.out_dtype))


@tvm.transform.module_pass(opt_level=0, name="HetcSimplifyOps")
def simplify_ops_pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    return rewrite_functions(_Simplifier(mod), mod)
