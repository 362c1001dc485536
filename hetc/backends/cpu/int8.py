"""Integer convs on raw 8-bit values, for the CPU's int8 kernels (``schedules/int8.py``).

QLinearConv and ConvInteger (and QDQ convs, which the frontend fuses into QLinearConv:
``frontends/onnx/qdq.py``) arrive as the spec writes them: an int32 conv of ``x - x_zero`` and
the weight widened to int32. After the layout passes that is, in NHWC,

    conv2d(astype(x: uint8, int32) - zx, W: int32 constant with int8 values, padding p)

which no int8 instruction can run. This pass rewrites it to

    conv2d(pad(x, p, value=zx): uint8, W: int8, padding 0, out int32) - zx * sum(W[k])

the same int32 result (the padding, zx, contributes (zx - zx) * w = 0 on both sides), a
uint8 x int8 contraction that ``vpdpbusd`` computes (on CPUs without VNNI, x is widened to
int16 once, in the padding pass, for ``vpmaddwd``; so are MatMulInteger's uint8 rows). A depthwise conv, which has no dot
product for ``vpdpbusd``, becomes one float32 kernel on the uint8 input instead, exact
(``_depthwise``). Only on CPUs with an int8 dot product (AVX512-VNNI, or AVX2's
``vpmaddwd``: ``schedules/int8.instruction``): elsewhere the int32 form stays (the int8 form
would run scalar).
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax, te
from tvm.relax.expr_functor import PyExprMutator, mutator

from ...passes.pipeline import rewrite_functions
from . import int8_pairs

_CONV = tvm.ir.Op.get("relax.nn.conv2d")
_SUBTRACT = tvm.ir.Op.get("relax.subtract")
_ASTYPE = tvm.ir.Op.get("relax.astype")
_PERMUTE = tvm.ir.Op.get("relax.permute_dims")
_MATMUL = tvm.ir.Op.get("relax.matmul")


def _const_int(expr) -> int | None:
    if isinstance(expr, tvm.ir.GenericConst):
        value = expr.value.numpy()
        if value.size == 1 and value.dtype.kind in "iu":
            return int(value.reshape(()))
    return None


@mutator
class _Int8Conv(PyExprMutator):  # pylint: disable=abstract-method
    def __init__(self, mod: tvm.IRModule, widen: bool) -> None:
        super().__init__(mod)
        self.count, self.widen = 0, widen

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
        if isinstance(call, relax.Call) and call.op.same_as(_MATMUL):
            return self._matmul(call)
        if not (isinstance(call, relax.Call) and call.op.same_as(_CONV)):
            return call
        attrs = call.attrs
        data, weight = call.args
        if (str(attrs.data_layout) != "NHWC" or str(attrs.kernel_layout) != "OHWI"
                or str(call.ty.dtype) != "int32" or not isinstance(weight, tvm.ir.GenericConst)):
            return call
        w = weight.value.numpy()
        if w.dtype != np.int32 or w.size == 0 or w.min() < -128 or w.max() > 127:
            return call
        groups = int(attrs.groups)
        depthwise = groups > 1 and w.shape[-1] == 1 and w.shape[0] == groups
        if groups != 1 and not depthwise:
            return call
        found = self._uint8_source(data)
        if found is None:
            return call
        x, zx = found
        if depthwise:
            return self._depthwise(call, x, zx, w)
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
        fix = None
        found = int8_pairs.excess(wq, 3) if self.widen else None  # unsafe pairs, once
        if found is not None and found[1].size:
            static = all(isinstance(d, tvm.tirx.IntImm) for d in x.ty.shape.values)
            if static and int8_pairs.conv_split(wq, [int(v) for v in attrs.strides], found):
                # vpmaddubsw on the uint8 input and the safe part, the rest added (``int8_pairs``)
                fix = int8_pairs.conv_correction(self.builder_, x, found, wq.shape[0], [int(v) for v in attrs.dilation],
                                                 [int(v) for v in call.ty.shape.values[1:3]])
                wq = int8_pairs.split(wq, 3, found)[0]
            else:  # vpmaddwd's int16 operand, widened once per element, not at each use
                x = self.builder_.emit(relax.op.astype(x, "int16"))
        conv = relax.op.nn.conv2d(x, relax.const(wq), strides=attrs.strides, padding=[0, 0, 0, 0],
                                  dilation=attrs.dilation, groups=1, data_layout="NHWC", kernel_layout="OHWI",
                                  out_layout="NHWC", out_dtype="int32")
        if fix is not None:
            conv = relax.op.add(self.builder_.emit(conv), fix)
        self.count += 1
        if zx == 0:
            return conv
        correction = (zx * w.astype(np.int64).reshape(w.shape[0], -1).sum(axis=1)).astype(np.int32)
        return relax.op.subtract(self.builder_.emit(conv), relax.const(correction))

    def _matmul(self, call: relax.Call) -> relax.Expr:
        """MatMulInteger's ``matmul(a: uint8, b: int8 constant) -> int32`` (``frontends/onnx/ops/
        quantize.matmul_integer``) on a CPU without VNNI.

        Where the int8 tile applies (K and N multiples of 4), ``b`` is split (``int8_pairs``):
        ``a @ b_s`` on ``vpmaddubsw``, plus the sparse correction ``a @ b_c`` where ``b`` has
        unsafe pairs. Elsewhere ``a`` is widened to int16 first, for ``vpmaddwd``: then each
        row's pair of inputs is one ``vpbroadcastd`` from memory, where a uint8 pair took four
        instructions at every use (a load, a move to a vector register, a zero extension, the
        broadcast) and the 4 x 3 tile spilled an accumulator."""
        a, b = call.args
        if (not self.widen or str(call.ty.dtype) != "int32" or str(a.ty.dtype) != "uint8"
                or str(b.ty.dtype) != "int8" or not isinstance(b, tvm.ir.GenericConst)):
            return call
        self.count += 1
        w = b.value.numpy()
        if w.ndim != 2 or w.shape[0] % 4 or w.shape[1] % 4:
            return relax.op.matmul(self.builder_.emit(relax.op.astype(a, "int16")), b, out_dtype="int32")
        found = int8_pairs.excess(w, 0)  # unsafe pairs, once
        product = relax.op.matmul(a, relax.const(int8_pairs.split(w, 0, found)[0]), out_dtype="int32")
        if not found[1].size:
            return product
        return relax.op.add(self.builder_.emit(product), int8_pairs.correction(self.builder_, a, found, w.shape[1]))

    def _depthwise(self, call: relax.Call, x: relax.Expr, zx: int, w: np.ndarray) -> relax.Expr:
        """A depthwise conv on ``x - zx`` computed in float32, exactly: no int8 dot product
        applies (each channel has its own window), and the float kernel (the sliding-window
        rule, as for float models) is the fast one. ``|x - zx| <= 255`` and ``|w| <= 128``,
        so every product and every partial sum of fewer than 2^24 / (255 * 128) = 514 taps
        is an integer float32 holds exactly; the conversion back to int32 is exact too.

        One TE kernel reads the uint8 input and subtracts the zero point in its (padded)
        loads: as separate Relax ops, TVM's FuseOps would put the cast to float32 into the
        producing conv's kernel, which would then write float32, four times the bytes."""
        attrs = call.attrs
        taps = math.prod(w.shape[1:])
        if taps * 255 * 128 >= 1 << 24 or len(x.ty.shape) != 4:
            return call
        pads = [int(p) for p in attrs.padding]
        top, left, bottom, right = pads * 2 if len(pads) == 2 else pads
        (sh, sw), (dh, dw) = [int(v) for v in attrs.strides], [int(v) for v in attrs.dilation]
        out_shape = call.ty.shape

        def compute(data, weight):
            n, h, wd, c = data.shape
            kh, kw = weight.shape[1], weight.shape[2]

            def padded(b, y, xx, ch):
                inside = tvm.tirx.all(y >= top, y < h + top, xx >= left, xx < wd + left)
                value = data[b, y - top, xx - left, ch].astype("float32") - np.float32(zx)
                return tvm.tirx.if_then_else(inside, value, np.float32(0))

            pad_temp = te.compute((n, h + top + bottom, wd + left + right, c), padded, name="pad_temp")
            ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
            return te.compute(
                tuple(out_shape),
                lambda b, y, xx, ch: te.sum(pad_temp[b, y * sh + ry * dh, xx * sw + rx * dw, ch]
                                            * weight[ch, ry, rx, 0], axis=[ry, rx]),
                name="depthwise_conv2d_nhwc")

        conv = self.builder_.emit_te(compute, x, relax.const(w.astype(np.float32)),
                                     primfunc_name_hint="depthwise_conv2d_u8")
        self.count += 1
        return relax.op.astype(conv, "int32")


def integer_kernels(options) -> bool:
    """Whether quantized convs run as integer kernels (``CompileOptions`` -> bool): a CPU-only
    build for a CPU with an int8 dot product (AVX512-VNNI, or AVX2). Elsewhere a QDQ conv
    stays a float32 conv between its roundings, which runs faster there than an int32 conv
    (``frontends/onnx/qdq.py``)."""
    from .codegen import llvm_target
    from .schedules.int8 import instruction

    return tuple(options.targets) == ("cpu",) and instruction(llvm_target(options)) is not None


def int8_conv_pass(widen: bool) -> tvm.transform.Pass:
    """Integer convs (NHWC) on uint8 activations and int8 weights, ready for ``vpdpbusd``; with
    ``widen`` (CPUs without VNNI: ``vpmaddwd``) on the activations widened to int16, and so are
    MatMulInteger's uint8 rows (``_matmul``)."""

    @tvm.transform.module_pass(opt_level=0, name="HetcInt8Conv")
    def rewrite(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_functions(_Int8Conv(mod, widen), mod)

    return rewrite
