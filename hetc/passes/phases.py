"""Phase functions: each returns a plain list of named stages.

A backend's pipeline is the concatenation of the phases it wants, in order (see
``hetc/backends/cpu/pipeline.py``). To add a pass, add a Stage to the phase it belongs to,
or a new phase function that backends opt into. Target-specific phases live in the
backend's own ``pipeline.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import tvm
from tvm import relax

from ..errors import last_line
from .pipeline import Stage, call_rewrite_pass, rewrite_functions

log = logging.getLogger(__name__)


def _keep_tags(make_pass):
    from ..placement.apply import keep_tags  # placement.apply imports this module

    return keep_tags(make_pass)


def inference_passes() -> list[Stage]:
    return [
        Stage("fold_batchnorm", "fold BatchNorm that follows a conv2d into its weights",
              lambda: _keep_tags(relax.transform.FoldBatchnormToConv2D)),
        Stage("decompose_inference", "decompose the remaining BatchNorm ops into elementwise arithmetic",
              relax.transform.DecomposeOpsForInference),
    ]


def simplify_passes(keep_grouped: Callable[[relax.Call], bool] | None = None, conv3d: bool = True) -> list[Stage]:
    """Graph simplifications before the layout passes. Grouped convs are split into one conv per
    group except where ``keep_grouped(call)`` (a target's own grouped kernel takes them);
    ``conv3d``: conv3ds as conv2ds here, in NCDHW (False: left to ``layout_passes``, NDHWC)."""
    from .conv1d import conv1d_as_conv2d_pass
    from .conv3d import conv3d_as_conv2d_pass
    from .conv_transpose import conv_transpose_as_matmul_pass
    from .dead_taps import dead_taps_pass
    from .fold_numpy import fold_constants_pass, fold_numpy_pass
    from .grouped_conv import split_grouped_conv_pass
    from .legalize_dynamic import legalize_dynamic_pass
    from .simplify_ops import simplify_ops_pass

    return [
        Stage("legalize_dynamic",
              "lower ops whose output shape is computed at run time (before FoldConstant)",
              lambda: legalize_dynamic_pass),
        Stage("simplify_ops", "drop one-input concats; small integer powers as products; zero pads into convs",
              lambda: simplify_ops_pass),
        Stage("conv1d_as_conv2d", "conv1d as conv2d over a height of one (hetc schedules conv2d)",
              lambda: conv1d_as_conv2d_pass),
        *([Stage("conv3d_as_conv2d", "conv3d as one conv2d over depth-stacked channels (hetc schedules conv2d)",
                 lambda: conv3d_as_conv2d_pass)] if conv3d else []),
        Stage("drop_dead_taps", "drop conv taps that read only padding (dilated convs on small maps)",
              lambda: dead_taps_pass),
        Stage("split_grouped_conv", "a grouped conv2d as one conv2d per group, concatenated",
              lambda: split_grouped_conv_pass(keep_grouped)),
        Stage("conv_transpose_as_matmul", "a strided transposed conv as a matmul, an overlap-add and a depth-to-space",
              lambda: conv_transpose_as_matmul_pass),
        Stage("fold_numpy", "evaluate cheap ops on constants with numpy (FoldConstant builds each)",
              lambda: fold_numpy_pass),
        Stage("fold_constants", "evaluate subgraphs whose inputs are all constants (where one is left)",
              lambda: fold_constants_pass),
        Stage("canonicalize", "remove trivial bindings and aliases", relax.transform.CanonicalizeBindings),
        Stage("cse", "eliminate common subexpressions", relax.transform.EliminateCommonSubexpr),
        Stage("dce", "drop unused bindings and functions", relax.transform.DeadCodeElimination),
    ]


def layout_passes(layout: str | None) -> list[Stage]:
    """Convert conv layouts (each target picks its default; ``None`` or "NCHW" keeps ONNX's NCHW)."""
    from .conv3d import conv3d_as_conv2d_pass
    from .fold_numpy import fold_constants_pass, fold_numpy_pass

    if layout in (None, "NCHW"):
        return []
    # conv2d is named; ConvertLayout carries the layout through pools and elementwise ops. A
    # conv2d_transpose after a conv would follow it to NHWC, which TVM cannot lower (only
    # NCHW/IOHW: DPT's reassemble stage failed in code generation); it keeps NCHW.
    desired = {"NHWC": {"relax.nn.conv2d": ["NHWC", "OHWI"], "relax.nn.conv3d": ["NDHWC", "ODHWI"],
                        "relax.nn.conv2d_transpose": ["NCHW", "IOHW"]}}[layout]
    return [
        Stage("stack_as_concat", "stack as expand_dims + concat (ConvertLayout's stack rule fails)",
              lambda: call_rewrite_pass("HetcStackAsConcat", "relax.stack", _stack_as_concat)),
        Stage("convert_layout", f"convert conv/pool layouts to {layout}",
              lambda: _convert_conv_layout(desired)),
        Stage("conv3d_as_conv2d_channels_last", "conv3d (NDHWC) as one conv2d, with views of the activations",
              lambda: conv3d_as_conv2d_pass),
        Stage("fold_layout_numpy", "fold the weight transposes the layout change added (numpy)",
              lambda: fold_numpy_pass),
        Stage("fold_layout_constants", "fold what is left of them",
              lambda: fold_constants_pass),
    ]


def _stack_as_concat(call: relax.Call) -> relax.Expr | None:
    """``stack(xs, axis)`` as ``concat([expand_dims(x, axis) for x in xs], axis)``: TVM 0.27's
    ConvertLayout gives stack's output a layout of its inputs' rank ("Invalid SLayout: can't
    find S in source layout ABC"), so a model with one stack after a conv kept every conv in
    NCHW (torchvision's detectors stack box coordinates)."""
    fields = call.args[0].ty.fields if isinstance(call.args[0].ty, relax.TupleType) else None
    if not fields:
        return None
    axis = int(call.attrs.axis) if call.attrs.axis is not None else 0
    items = (call.args[0].fields if isinstance(call.args[0], relax.Tuple)
             else [relax.TupleGetItem(call.args[0], k) for k in range(len(fields))])
    return relax.op.concat([relax.op.expand_dims(x, [axis]) for x in items], axis)


def _convert_conv_layout(desired: dict) -> tvm.transform.Pass:
    """ConvertLayout for modules with a conv2d; a module it cannot convert (an op whose layout
    it cannot infer next to a converted one) keeps its layout rather than failing the build."""

    @tvm.transform.module_pass(opt_level=0, name="HetcConvertConvLayout")
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        if not _convs_to_convert(mod, desired):
            return mod  # none, or all in the layout already (conv1d's rewrite makes them NHWC)
        try:
            converted = relax.transform.ConvertLayout(desired)(mod)
        except (RuntimeError, ValueError, IndexError) as err:  # TVM's check failures (Keypoint R-CNN: IndexError)
            log.warning("layout conversion skipped: %s", last_line(err))
            return mod
        # TVM 0.27 can leave a function using a variable it no longer binds (a conv2d between
        # two reshapes, as conv1d becomes: wav2vec2's feature extractor): keep the layout
        unbound = [gv.name_hint for gv, f in converted.functions.items()
                   if isinstance(f, relax.Function) and relax.analysis.free_vars(f)]
        if unbound:
            log.warning("layout conversion skipped: it left %s using unbound variables", ", ".join(unbound))
            return mod
        return converted

    return apply


def _convs_to_convert(mod: tvm.IRModule, desired: dict) -> int:
    """The conv2d and conv3d calls not yet in their ``desired`` layout."""
    wanted = {tvm.ir.Op.get(op): desired[op][0] for op in ("relax.nn.conv2d", "relax.nn.conv3d")}
    count = [0]

    def visit(expr) -> None:
        if isinstance(expr, relax.Call) and any(expr.op.same_as(op) and str(expr.attrs.data_layout) != layout
                                                for op, layout in wanted.items()):
            count[0] += 1

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return count[0]


def vectorizable_rint() -> None:
    """Let ``VectorizeLoop`` vectorize ``tirx.nearbyint`` (``_round_half_even``; also the
    sub-byte quantizers of ``frontends/onnx/ops/quantize.py``). Called at import: an attribute
    of TVM's op registry, for the whole process."""
    op = tvm.ir.Op.get("tirx.nearbyint")
    if not op.get_attr("TVectorizable"):
        op.set_attr("TVectorizable", True)


vectorizable_rint()


def _round_half_even(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """``relax.round`` as ``tir.nearbyint``: half to even on every target, as ONNX's Round and
    QuantizeLinear require (TVM lowers it to ``tir.round``, half away from zero on CUDA).

    TVM 0.27 registers ``tirx.nearbyint`` without ``TVectorizable`` (``round``, ``floor`` and
    ``exp`` have it), so ``VectorizeLoop`` turned every vectorized loop that rounds back into a
    scalar one: each requantization of an int8 kernel, each QuantizeLinear. ``vectorizable_rint``
    (above, at import) sets it; LLVM lowers the vector form to ``vroundps``/``vrndscaleps``."""
    from tvm import te, tirx

    x = call.args[0]
    if str(x.ty.dtype) not in ("float16", "bfloat16", "float32", "float64"):
        return x  # an integer is its own rounding
    return bb.call_te(lambda t: te.compute(t.shape, lambda *i: tirx.nearbyint(t(*i)), "rint"), x)


def _extreme(kind: str):
    """``relax.max``/``relax.min`` of a float tensor reduced from -inf/+inf: TVM's starts from
    the lowest/highest finite value, so a row of -inf (a fully masked attention row) gave
    -3.4e38 instead of -inf. Other dtypes keep TVM's lowering, and so does a whole tensor reduced
    to one value: the full-reduction rule (``schedules/full_reduction.py``) needs ``rfactor``,
    which only knows TVM's reducers (registering one from Python corrupts the heap at exit), so
    a tensor of nothing but -inf still gives the lowest float there."""
    from tvm import te, tirx

    default = tvm.ir.Op.get(f"relax.{kind}").get_attr("FLegalize")
    pick = tirx.max if kind == "max" else tirx.min
    start = float("-inf") if kind == "max" else float("inf")

    def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        x = call.args[0]
        rank = x.ty.ndim
        if str(x.ty.dtype) not in ("float16", "bfloat16", "float32", "float64") or rank <= 0:
            return default(bb, call)
        axes = sorted({int(a) % rank for a in call.attrs.axis}) if call.attrs.axis is not None else list(range(rank))
        kept = [x.ty.shape[a] for a in range(rank) if a not in axes]
        if all(isinstance(d, tvm.tirx.IntImm) and int(d) == 1 for d in kept):
            return default(bb, call)
        keep = bool(call.attrs.keepdims)
        reducer = te.comm_reducer(lambda a, b: pick(a, b), lambda dt: tirx.const(start, dt), name=f"{kind}_inf")

        def fn(t: te.Tensor) -> te.Tensor:
            out = [1 if a in axes else t.shape[a] for a in range(rank)] if keep else \
                [t.shape[a] for a in range(rank) if a not in axes]
            ks = {a: te.reduce_axis((0, t.shape[a]), name=f"k{a}") for a in axes}

            def body(*idx):
                it = iter(idx) if not keep else None
                full = [ks[a] if a in ks else (idx[a] if keep else next(it)) for a in range(rank)]
                return reducer(t(*full), axis=list(ks.values()))

            return te.compute(out, body, name=f"T_{kind}")

        return bb.call_te(fn, x, primfunc_name_hint=kind)

    return legalize


def _symbolic_reshape_as_view(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """A reshape between shapes with symbolic dims stays ``R.reshape``, which the VM runs as a
    view (no copy). Lowered to a kernel, its indices divide by the symbolic dims per element
    (``(i * (samples // 5 - 1) + j) // (samples // 5 - 1) % batch``), which TVM's pattern
    analysis calls opaque, so it is never fused either: wav2vec2's TorchScript export (symbolic
    batch and length) ran 12 such copies, a third of its time. Static reshapes are lowered
    as before (fused into their neighbours, their index arithmetic by constants)."""
    default = tvm.ir.Op.get("relax.reshape").get_attr("FLegalize")
    shapes = [call.args[0].ty, call.ty]
    if all(isinstance(getattr(t, "shape", None), relax.ShapeExpr) for t in shapes) and all(
            isinstance(d, tvm.tirx.IntImm) for t in shapes for d in t.shape.values):
        return default(bb, call)
    return call


ROUNDING = {"relax.round": _round_half_even, "relax.max": _extreme("max"), "relax.min": _extreme("min"),
            "relax.reshape": _symbolic_reshape_as_view}


def legalize_passes(custom: dict | None = None) -> list[Stage]:
    """Lower ops to TIR; ``custom`` maps op names to a target's own lowering (``bb, call -> expr``),
    on top of ``ROUNDING``."""
    table = {**ROUNDING, **(custom or {})}
    return [
        Stage("legalize", "lower Relax ops to TIR PrimFuncs (call_tir)",
              lambda: relax.transform.LegalizeOps(customize_legalize_map=table)),
        Stage("annotate_patterns", "classify PrimFuncs for fusion", relax.transform.AnnotateTIROpPattern),
        Stage("isolate_scalar_kernels", "keep kernels that take a dim as a scalar argument out of fusion",
              lambda: isolate_scalar_kernels),
        Stage("fold_constants_tir", "evaluate call_tirs on constants (weight transforms)",
              relax.transform.FoldConstant),
    ]


_OPAQUE = 8  # relax.OpPatternKind.kOpaque


@tvm.transform.module_pass(opt_level=0, name="HetcIsolateScalarKernels")
def isolate_scalar_kernels(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Mark opaque (never fused) the PrimFuncs with a scalar parameter that no buffer's shape
    mentions: a symbolic dim used as a value, as in ``arange(past_seq, past_seq + 1)`` or
    ``shape_to_tensor(past_seq)`` (GPT-2's positions ``arange(seq) + past_seq`` with a KV
    cache). FuseOps passes such a dim to the fused function as a ``R.Prim`` parameter, and
    TVM 0.27's FuseTIR then fails in ``RenewDefs`` (``VarRemapGet(source) == nullptr``).
    These kernels are a few integers each; running them unfused costs one call."""
    updates = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        buffers = [p for p in func.params if isinstance(p.ty, tvm.tirx.buffer.BufferType)]
        in_shapes = {v for buf in buffers for dim in buf.shape for v in tvm.tirx.analysis.undefined_vars(dim)}
        scalars = [p for p in func.params if not isinstance(p.ty, tvm.tirx.buffer.BufferType)]
        if any(p not in in_shapes for p in scalars):
            updates[gv] = func.with_attr("op_pattern", _OPAQUE)
    return tvm.IRModule({**dict(mod.functions.items()), **updates}, attrs=mod.attrs) if updates else mod


def fusion_passes() -> list[Stage]:
    from .shape_binding import split_at_runtime_shapes_pass

    return [
        Stage("split_at_runtime_shapes", "split dataflow blocks at each match_cast binding dims at run time",
              lambda: split_at_runtime_shapes_pass),
        Stage("fuse_ops", "group injective/reduction ops into their producers and consumers",
              relax.transform.FuseOps),
        Stage("fuse_tir", "merge each group into one PrimFunc", relax.transform.FuseTIR),
        Stage("dce_final", "drop PrimFuncs no longer called",
              lambda: tvm.transform.Sequential([relax.transform.DeadCodeElimination()])),
    ]


def precision_passes() -> list[Stage]:
    return [Stage("accumulate_float32", "float16/bfloat16 convs and matmuls accumulate in float32",
                  lambda: accumulate_float32_pass)]


# Ops whose ``out_dtype`` attribute is their accumulator's type.
_CONTRACTIONS = {"relax.matmul", "relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d",
                 "relax.nn.conv1d_transpose", "relax.nn.conv2d_transpose", "relax.nn.conv3d_transpose"}


def _narrow_contraction(value) -> str | None:
    """The dtype of a float16/bfloat16 conv or matmul call, else None."""
    if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name in _CONTRACTIONS
            and isinstance(value.ty, relax.TensorType)):
        return None
    dtype = str(value.ty.dtype)
    return dtype if dtype in ("float16", "bfloat16") else None


@relax.expr_functor.mutator
class _AccumulateFloat32(relax.PyExprMutator):
    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = self.visit_expr(binding.value)
        emit = self.builder_.emit if isinstance(binding.var, relax.DataflowVar) else self.builder_.emit_output
        dtype = _narrow_contraction(value)
        if dtype is None:
            self.set_var_remap(binding.var, emit(value, binding.var.name))
            return
        info = type(value.attrs).__tvm_ffi_type_info__
        fields = {f.name: getattr(value.attrs, f.name) for f in info.fields} | {"out_dtype": "float32"}
        # The wide op keeps the binding's name (a placement tag), so the rounding that follows
        # is an added binding and runs on the op's device; fusion makes it the kernel's epilogue.
        wide = self.builder_.emit(relax.Call(value.op, value.args, tvm.ir.make_node(info.type_key, **fields)),
                                  binding.var.name)
        self.set_var_remap(binding.var, emit(relax.op.astype(wide, dtype), "rounded"))


@tvm.transform.module_pass(opt_level=0, name="HetcAccumulateFloat32")
def accumulate_float32_pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Half-precision convs and matmuls accumulate in float32 and round once, as onnxruntime's
    CPU kernels do (x86 has no half-precision arithmetic, so the wide accumulator is free; a
    half-precision one lost 3 ulps on a 3-tap causal conv). Modules without one are returned
    as they are, not rebuilt."""
    funcs = {gvar: func for gvar, func in mod.functions.items()
             if isinstance(func, relax.Function) and "Codegen" not in (func.attrs or {})}
    narrow = []
    for func in funcs.values():
        relax.analysis.post_order_visit(func, lambda e: narrow.append(e) if _narrow_contraction(e) else None)
    if not narrow:
        return mod
    return rewrite_functions(_AccumulateFloat32(mod), mod, funcs)
