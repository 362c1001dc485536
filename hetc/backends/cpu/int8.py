"""Integer convs on raw 8-bit values, for the CPU's int8 kernels (``schedules/int8.py``).

QLinearConv and ConvInteger (and QDQ convs, which the frontend fuses into QLinearConv:
``frontends/onnx/qdq.py``) arrive as the spec writes them: an int32 conv of ``x - x_zero`` and
the weight widened to int32. After the layout passes that is, in NHWC,

    conv2d(astype(x: uint8, int32) - zx, W: int32 constant with int8 values, padding p)

which no int8 instruction can run. This pass rewrites it to

    conv2d(pad(x, p, value=zx): uint8, W: int8, padding 0, out int32) - zx * sum(W[k])

the same int32 result (the padding, zx, contributes (zx - zx) * w = 0 on both sides), a
uint8 x int8 contraction that ``vpdpbusd`` computes. Only on CPUs with AVX512-VNNI: elsewhere
the int32 form stays (the int8 form would run scalar).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ...passes.pipeline import rewrite_functions

_CONV = tvm.ir.Op.get("relax.nn.conv2d")
_SUBTRACT = tvm.ir.Op.get("relax.subtract")
_ASTYPE = tvm.ir.Op.get("relax.astype")
_PERMUTE = tvm.ir.Op.get("relax.permute_dims")


def _const_int(expr) -> int | None:
    if isinstance(expr, tvm.ir.GenericConst):
        value = expr.value.numpy()
        if value.size == 1 and value.dtype.kind in "iu":
            return int(value.reshape(()))
    return None


@mutator
class _Int8Conv(PyExprMutator):  # pylint: disable=abstract-method
    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.count = 0

    def _value(self, expr):
        """The call ``expr`` (a variable) is bound to, else ``expr``."""
        if isinstance(expr, relax.Var):
            bound = self.lookup_binding(expr)
            if bound is not None:
                return bound
        return expr

    def _uint8_source(self, data) -> tuple[relax.Expr, int] | None:
        """``(x, zx)`` when ``data`` is ``[permute_dims](astype(x: uint8, int32) [- zx])`` (x
        permuted the same way: ConvertLayout's transpose into NHWC, where it stopped)."""
        value = self._value(data)
        axes = None
        if isinstance(value, relax.Call) and value.op.same_as(_PERMUTE):
            axes = value.attrs.axes
            value = self._value(value.args[0])
        zx = 0
        if isinstance(value, relax.Call) and value.op.same_as(_SUBTRACT):
            zx = _const_int(value.args[1])
            if zx is None:
                return None
            value = self._value(value.args[0])
        if (isinstance(value, relax.Call) and value.op.same_as(_ASTYPE)
                and str(value.args[0].ty.dtype) == "uint8" and 0 <= zx <= 255):
            x = value.args[0]
            return (x if axes is None else self.builder_.emit(relax.op.permute_dims(x, axes))), zx
        return None

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        if not (isinstance(call, relax.Call) and call.op.same_as(_CONV)):
            return call
        attrs = call.attrs
        data, weight = call.args
        if (str(attrs.data_layout) != "NHWC" or str(attrs.kernel_layout) != "OHWI" or int(attrs.groups) != 1
                or str(call.ty.dtype) != "int32" or not isinstance(weight, tvm.ir.GenericConst)):
            return call
        w = weight.value.numpy()
        if w.dtype != np.int32 or w.size == 0 or w.min() < -128 or w.max() > 127:
            return call
        found = self._uint8_source(data)
        if found is None:
            return call
        x, zx = found
        pads = [int(p) for p in attrs.padding]
        if len(pads) == 2:
            pads = pads * 2
        top, left, bottom, right = pads
        # Channels to a multiple of 4 (vpdpbusd's step; an RGB stem has 3): zero weights, so the
        # padded channel's values (zx) add nothing and the correction below is unchanged.
        extra = -w.shape[-1] % 4
        if any(pads) or extra:
            x = self.builder_.emit(relax.op.nn.pad(x, [0, 0, top, bottom, left, right, 0, extra], pad_value=float(zx)))
        wq = np.pad(w, [(0, 0)] * 3 + [(0, extra)]).astype(np.int8)
        conv = relax.op.nn.conv2d(x, relax.const(wq), strides=attrs.strides, padding=[0, 0, 0, 0],
                                  dilation=attrs.dilation, groups=1, data_layout="NHWC", kernel_layout="OHWI",
                                  out_layout="NHWC", out_dtype="int32")
        self.count += 1
        if zx == 0:
            return conv
        correction = (zx * w.astype(np.int64).reshape(w.shape[0], -1).sum(axis=1)).astype(np.int32)
        return relax.op.subtract(self.builder_.emit(conv), relax.const(correction))


def integer_kernels(options) -> bool:
    """Whether quantized convs run as integer kernels (``CompileOptions`` -> bool): a CPU-only
    build for a CPU with AVX512-VNNI. Elsewhere a QDQ conv stays a float32 conv between its
    roundings, which runs faster there than an int32 conv (``frontends/onnx/qdq.py``)."""
    from .codegen import llvm_target
    from .schedules.int8 import has_vnni

    return tuple(options.targets) == ("cpu",) and has_vnni(llvm_target(options))


@tvm.transform.module_pass(opt_level=0, name="HetcInt8Conv")
def int8_conv_pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Integer convs (NHWC) on uint8 activations and int8 weights, ready for ``vpdpbusd``."""
    return rewrite_functions(_Int8Conv(mod), mod)
