"""The CPU pass pipeline: graph passes, then tuned or default schedules, then weight packing.

``pre_schedule_stages`` is the module ``hetc tune`` extracts its tasks from; ``stages`` adds
the tuning database (when given), the rule-based default schedules (``schedules/``) for the
rest, and the compile-time layout transform of constant weights the schedules asked for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tvm import relax, tirx, topi

from ...options import CompileOptions
from ...passes.phases import (
    fusion_passes,
    inference_passes,
    layout_passes,
    legalize_passes,
    precision_passes,
    simplify_passes,
)
from ...passes.pipeline import Stage
from ..byoc import with_offloads
from . import grouped_conv, int8_pairs, softmax_rows
from .codegen import llvm_target
from .fold_packing import fold_packing_pass
from .int8 import int8_conv_pass
from .ragged_conv import ragged_conv_pass
from .schedules import default_schedule_pass, gemm, simd_lanes, split_weight_packing_pass
from .schedules.int8 import PMADDWD, VNNI, instruction
from .transpose_matmul import fuse_transpose_matmul_pass
from .winograd import winograd_pass


def _fast(fn):
    """Lower a float32 op to TOPI's vectorizable polynomial form instead of libm calls (``erff``
    in GELU took 90% of a BERT FFN kernel); other dtypes keep the default lowering."""

    def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        if str(call.args[0].ty.dtype) == "float32":
            return bb.call_te(fn, call.args[0], **({"axis": int(call.attrs.axis)} if call.attrs else {}))
        return call.op.get_attr("FLegalize")(bb, call)

    return legalize


def _fast_sigmoid(x):
    """``1 / (1 + exp(-x))`` with TOPI's polynomial exp: TVM's ``tir.sigmoid`` calls libm's
    ``expf`` per element, which LLVM does not vectorize; SiLU after a 1x1 conv (every
    EfficientNet/ReXNet/MobileNet block) took 2x the conv's own time (2-core Zen 5, AVX-512)."""
    return topi.divide(tirx.const(1.0, x.dtype), topi.add(topi.fast_exp(topi.negative(x)), tirx.const(1.0, x.dtype)))


def _fast_silu(x):
    return topi.multiply(x, _fast_sigmoid(x))


def _fast_gelu(x):
    """TVM's ``relax.nn.gelu`` lowering (ONNX Gelu, opset 20: dynamo exports) with the polynomial
    erf: with libm's ``erff`` a 3137x608 MLP matmul + GELU ran 4x its ReLU time (2-core Zen 5, AVX-512)."""
    half = tirx.const(0.5, x.dtype)
    return topi.multiply(x, topi.add(half, topi.multiply(topi.fast_erf(topi.multiply(x, tirx.const(0.5**0.5, x.dtype))),
                                                         half)))


def _fast_gelu_tanh(x):
    """``relax.nn.gelu_tanh`` (Gelu's ``approximate="tanh"``) with the polynomial tanh."""
    inner = topi.multiply(topi.multiply(x, tirx.const(math.sqrt(2.0 / math.pi), x.dtype)),
                          topi.add(tirx.const(1.0, x.dtype), topi.multiply(tirx.const(0.044715, x.dtype),
                                                                            topi.multiply(x, x))))
    return topi.multiply(topi.multiply(tirx.const(0.5, x.dtype), x), topi.add(tirx.const(1.0, x.dtype),
                                                                           topi.fast_tanh(inner)))


SOFTMAX_LANES = softmax_rows.LANES  # partial maxima and sums per row, for either length


def _fast_softmax(x, axis: int = -1):
    """TOPI's ``fast_softmax`` (polynomial exp), with each row's max and sum taken as
    ``SOFTMAX_LANES`` partial results first (``part[.., l] = max_o x[.., o * 16 + l]``), a loop
    the row-reduction rule vectorizes (``schedules/reduction.py``), then reduced to one. The
    plain reductions stayed scalar chains: a 12 x 128 x 128 softmax took 0.43 ms against
    onnxruntime's 0.059 (2-core Intel Xeon, LLVM emeraldrapids). Only over a last axis of
    static length that the lanes divide into several steps; otherwise TOPI's form."""
    from tvm import te

    rank = len(x.shape)
    n = x.shape[-1]
    if axis % rank != rank - 1 or not isinstance(n, tirx.IntImm) or int(n) % SOFTMAX_LANES or int(n) <= SOFTMAX_LANES:
        return topi.nn.fast_softmax(x, axis)
    lanes, steps, rows = SOFTMAX_LANES, int(n) // SOFTMAX_LANES, x.shape[:-1]

    def partial(values, combine, name):
        o = te.reduce_axis((0, steps), "o")
        return te.compute((*rows, lanes), lambda *i: combine(values[(*i[:-1], o * lanes + i[-1])], axis=o), name=name)

    def whole(part, combine, name):
        lane = te.reduce_axis((0, lanes), "lane")
        return te.compute(rows, lambda *i: combine(part[(*i, lane)], axis=lane), name=name)

    top = whole(partial(x, te.max, "T_softmax_maxpart"), te.max, "T_softmax_maxelem")
    exp = topi.fast_exp(te.compute(x.shape, lambda *i: x(*i) - top(*i[:-1]), name="T_softmax_delta"))
    total = whole(partial(exp, te.sum, "T_softmax_exppart"), te.sum, "T_softmax_expsum")
    inverse = te.compute(rows, lambda *i: tirx.const(1.0, x.dtype) / total(*i), name="T_softmax_inverse")
    return te.compute(x.shape, lambda *i: exp(*i) * inverse(*i[:-1]), name="T_softmax_norm", attrs={"axis": rank - 1})


def _softmax(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """A row of symbolic length: ``softmax_rows.py``'s kernel; else ``_fast_softmax``."""
    return softmax_rows.legalize(bb, call) if softmax_rows.takes(call) else _fast(_fast_softmax)(bb, call)


FAST_MATH = {"relax.erf": _fast(topi.fast_erf), "relax.exp": _fast(topi.fast_exp),
             "relax.tanh": _fast(topi.fast_tanh), "relax.nn.softmax": _softmax,
             "relax.sigmoid": _fast(_fast_sigmoid), "relax.nn.silu": _fast(_fast_silu),
             "relax.nn.gelu": _fast(_fast_gelu), "relax.nn.gelu_tanh": _fast(_fast_gelu_tanh)}


def weight_passes(options: CompileOptions) -> list[Stage]:
    """``--weights int8``: constant matmul weights as int8 with per-channel scales (``passes/weight_int8.py``)."""
    if options.weights != "int8":
        return []
    from ...passes.weight_int8 import weight_int8_pass

    words = instruction(llvm_target(options)) is not None
    return [Stage("weight_int8", "constant matmul weights stored as int8, dequantized in the matmul",
                  lambda: weight_int8_pass(words))]


def transpose_matmul_passes() -> list[Stage]:
    """``x @ permute_dims(k)`` (swapping the last two axes) as one kernel that reads ``k`` in
    place: attention's ``Q @ K^T`` against a KV cache, which would otherwise be transposed,
    whole, every step. The contraction rule copies each column panel of ``k`` with j last inside
    the kernel (``schedules/gemm.py``).
    Transposed constants are folded before this runs, so weights still get packed. Only where
    the transpose has no other reader (``transpose_matmul.py``)."""
    return [Stage("fuse_transpose_matmul", "x @ transpose(k) as one kernel reading k in place",
                  lambda: fuse_transpose_matmul_pass)]


def winograd_passes(options: CompileOptions) -> list[Stage]:
    """Convs with a ragged channel count padded (``ragged_conv.py``); 3x3 stride-1 convs as
    Winograd transforms around a batched GEMM, where the cost rule
    (or ``--winograd``) picks it (``winograd.py``); integer convs in the form the int8 kernels
    take, on CPUs with an int8 dot product (``int8.py``). Both after the layout passes (NHWC convs)."""
    stages = [Stage("ragged_conv", "convs whose output channels no vector width divides, padded to one",
                    lambda: ragged_conv_pass(simd_lanes(llvm_target(options)), gemm)),
              Stage("winograd", "3x3 stride-1 convs as Winograd F(m x m, 3x3) where it pays",
                    lambda: winograd_pass(options.winograd))]
    kind = instruction(llvm_target(options))
    if kind is not None:
        stages.append(Stage("int8_conv", "integer convs on raw uint8/int8 values, for the int8 kernels",
                            lambda: int8_conv_pass(widen=kind is not VNNI)))
    return stages


def tuning_database_passes(options: CompileOptions) -> list[Stage]:
    """Replace the kernels a tuning database has records for (``hetc compile --db``)."""
    if options.database is None:
        return []
    from ...tuning.database import apply_database_pass

    return [Stage("apply_tuning_database", "use the best tuned schedule for every task the database has",
                  lambda: apply_database_pass(options.database, llvm_target(options)))]


def schedule_passes(options: CompileOptions) -> list[Stage]:
    """Default schedules for every kernel still unscheduled, then compile-time weight packing."""
    return [
        Stage("default_schedules", "rule-based CPU schedules: tiled, vectorized, parallel",
              lambda: default_schedule_pass(llvm_target(options))),
        Stage("split_weight_packing", "move the weight layout transforms out of the kernels",
              split_weight_packing_pass),
        Stage("fold_packing_numpy", "pack the constant weights at compile time, with numpy", lambda: fold_packing_pass),
        Stage("fold_weight_packing", "pack the weights numpy did not (FoldConstant)", relax.transform.FoldConstant),
        Stage("dce_packing", "drop the packing functions", relax.transform.DeadCodeElimination),
    ]


def pre_schedule_stages(options: CompileOptions, offloads: Sequence = ()) -> list[Stage]:
    """Everything before scheduling: the module the tuner extracts its tasks from.

    ``offloads``: external targets' ``Offload`` builds (BYOC), whose stages cut their regions
    out of the module. Those with ``layout = "model"`` (Ascend: ONNX's NCHW) run before the
    layout passes, the others (FPGA) after them (NHWC convs); all before legalization.
    """
    layout = options.layout or "NHWC"
    return with_offloads(
        inference_passes()
        + simplify_passes(keep_grouped=grouped_conv.takes_whole, conv3d=layout != "NHWC")  # NDHWC: layout_passes
        + layout_passes(layout)
        + precision_passes()
        + weight_passes(options)
        + winograd_passes(options)
        + transpose_matmul_passes()
        + legalize_passes({**FAST_MATH, "relax.nn.conv2d": grouped_conv.legalization(simd_lanes(llvm_target(options)))})
        + fusion_passes()
        + [Stage("mark_constant_params", "tell each kernel which of its inputs are constants (packable)",
                 relax.transform.AttachAttrLayoutFreeBuffers)]
        + safe_pairs_passes(options),
        offloads)


def safe_pairs_passes(options: CompileOptions) -> list[Stage]:
    """On CPUs whose int8 step is ``vpmaddwd`` (AVX2 without VNNI), mark the int8 weights that
    ``vpmaddubsw`` computes exactly (``int8_pairs``); elsewhere no rule reads the marks."""
    kind = instruction(llvm_target(options))
    if kind is None or kind.name != PMADDWD.name:
        return []
    return [Stage("mark_safe_pairs", "tell each int8 kernel which weights vpmaddubsw computes exactly",
                  int8_pairs.mark_pass)]


def stages(options: CompileOptions, offloads: Sequence = ()) -> list[Stage]:
    """The CPU pipeline, in order (``offloads``: see ``pre_schedule_stages``)."""
    return pre_schedule_stages(options, offloads) + tuning_database_passes(options) + schedule_passes(options)
