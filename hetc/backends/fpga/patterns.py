"""What the FPGA target can run: the Relax BYOC pattern table and the checks behind it.

Where it applies: on ``main`` after the CPU pipeline's inference, simplify and layout phases
(``layout_passes("NHWC")``: convs and pools NHWC, conv weights OHWI, Gemm weights folded to
``(n_in, n_out)``, ONNX Clip as ``maximum``/``minimum``, GlobalAveragePool as ``mean`` over
axes 1, 2, BatchNormalization outside a conv as subtract/divide/multiply/add) and before
legalization. ``partition(mod, limits)`` runs::

    FuseOpsByPattern(pattern_table(limits, isolated_movement(main)), annotate_codegen=False)
    MergeCompositeFunctions()   # one "Codegen": "hetc_fpga" function per connected region

(``annotate_codegen=True`` wraps every composite in its own codegen function, which
``MergeCompositeFunctions`` then leaves alone: one region per op.) Transposes and reshapes
with no FPGA computation next to them are left out: alone they only move data.

The table (``hetc_fpga.<name>``, earlier entries win; ``C`` a constant):

- conv2d(x, C) [+ add C] [+ relu | clip pair]: NHWC, OIHW-like weights, dilation 1, groups 1
  or depthwise (groups = C_in = F), kernel <= ``max_kernel``, the multiplier/weight budget;
- matmul(x, C) [+ add C] [+ relu]: dense on the last axis, weights 2-D, the budget;
- batch_norm / scale_shift / add / subtract / multiply / divide by a scalar or per-channel
  (last axis) constant -> one scale_shift; add / multiply of two activations of equal shape;
- clip pair ``minimum(maximum(x, lo), hi)`` (either order, lo <= hi), ``maximum``/``minimum``
  with a scalar constant (relu for ``maximum(x, 0)``), relu, leaky_relu, sigmoid, tanh;
- max_pool2d / avg_pool2d: NHWC, dilation 1, window <= ``max_kernel``, no ceil_mode partial
  windows; mean over axes (1, 2) of NHWC -> global_avg_pool2d;
- softmax / layer_norm over the last axis (gamma, beta constant); permute_dims keeping the
  batch axis first; reshape keeping the batch size.

Every op also needs: float32 tensors, static shapes, the batch axis first and unchanged, and
at least one non-constant input. An op whose shapes use a symbolic input dim (``--dim``) stays
on the CPU with the reason "symbolic dim seq (...)": the kernels are generated for one shape
(``FpgaOffload.report`` lists those ops under ``kept_on_cpu``).

Every decision comes from one place, ``check_view``, over an ``OpView`` (op name, tensor
shapes/dtypes, attrs and constant values where known). It serves three callers:

- the pattern checks (``FusionPattern.check``), from the matched Relax calls;
- ``supports(OpNode)``, the target registry's placement filter, from an ``OpNode`` of the
  imported module (NCHW, before the layout pass; no attrs, constants unknown). It applies
  the same rules to what the node shows (dtype, static shapes, batch axis, groups and kernel
  size from the weight shape, the multiplier/weight budget) and accepts what it cannot see;
  the pattern check may still keep such a node on the CPU;
- ``check_reason(call)`` / ``node_reason(node)``: "why this node stayed on the CPU".

Resource budget per MAC layer (``Limits``): the multipliers a layer needs are its MACs per
output row/pixel (``n_in * n_out`` for dense, ``KH * KW * C_in/groups * F`` for conv2d, ``KH *
KW * C`` depthwise) divided by the reuse factor (each multiplier used ``reuse`` times, II =
reuse). ``choose_reuse`` picks the smallest reuse that keeps the multipliers within
``max_multipliers``; beyond ``max_reuse`` the layer is rejected. Weights larger than
``max_weight_bytes`` (counted as float32) are rejected as well.

To add a pattern: add its Relax op's rules to ``_CHECKS`` (and ``_TENSOR_ARGS``), add the
pattern to ``pattern_table`` (longer fused patterns before their parts), and teach
``region.py`` to turn the op into ``layers.OPS`` layers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...graph import OpNode, TensorInfo, static_tensor, symbolic_dims

CODEGEN = "hetc_fpga"


@dataclass(frozen=True)
class Limits:
    """What one FPGA layer may use; a layer beyond them stays on the CPU."""

    max_multipliers: int = 4096  # multipliers (DSPs or LUT multipliers) one MAC layer may instantiate
    max_reuse: int = 1024  # largest reuse factor (initiation interval) tried to fit max_multipliers
    max_weight_bytes: int = 8 << 20  # a layer's weights, counted as float32 bytes
    max_kernel: int = 7  # conv/pool window size per axis


def choose_reuse(macs: int, limits: Limits) -> int | None:
    """The smallest reuse factor ``R`` with ``ceil(macs / R) <= limits.max_multipliers``, or
    None when even ``limits.max_reuse`` needs more multipliers."""
    reuse = max(1, math.ceil(macs / limits.max_multipliers))
    return reuse if reuse <= limits.max_reuse else None


@dataclass
class OpView:
    """What the checks see of one op call. ``None`` means unknown: a tensor without a static
    shape (or not a tensor), attrs of an ``OpNode``, constness of an ``OpNode``'s inputs."""

    op: str  # Relax op name, e.g. "relax.nn.conv2d"
    inputs: list[TensorInfo | None]  # the tensor arguments, in order
    output: TensorInfo | None
    attrs: dict[str, Any] | None = None
    consts: list[np.ndarray | None] | None = None  # per input: its value if a constant
    symbolic: tuple[str, ...] = ()  # the symbolic dims of its shapes (names)

    def const(self, i: int) -> np.ndarray | None:
        return None if self.consts is None else self.consts[i]

    def is_const(self, i: int) -> bool | None:
        return None if self.consts is None else self.consts[i] is not None


# -- building views ------------------------------------------------------------------------------


def _py(value):
    """Relax attr values as plain Python (Arrays -> lists, IntImm/FloatImm -> numbers)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "value") and not hasattr(value, "__len__"):
        return value.value
    try:
        return [_py(v) for v in value]
    except TypeError:
        return str(value)


_ATTR_NAMES = ("strides", "padding", "dilation", "groups", "data_layout", "kernel_layout", "out_layout",
               "out_dtype", "pool_size", "ceil_mode", "count_include_pad", "layout", "axis", "axes",
               "keepdims", "alpha", "epsilon", "center", "scale")


tensor_info = static_tensor  # the name the FPGA modules use

def view_of_call(call) -> OpView:
    """The OpView of a Relax call to an operator (tensor arguments only: a reshape's target
    shape is not one)."""
    import tvm
    from tvm import relax

    args = [a for a in call.args if not isinstance(a, relax.ShapeExpr)]
    attrs = {}
    if call.attrs is not None:
        attrs = {n: _py(getattr(call.attrs, n)) for n in _ATTR_NAMES if hasattr(call.attrs, n)}
    consts = [a.value.numpy() if isinstance(a, tvm.ir.GenericConst) else None for a in args]
    symbolic = tuple(sorted({n for a in [*args, call] for n in symbolic_dims(getattr(a, "ty", None))}))
    return OpView(str(call.op.name), [tensor_info(a.ty) for a in args], tensor_info(call.ty), attrs, consts,
                  symbolic)


def view_of_node(node: OpNode) -> OpView:
    return OpView(node.op, list(node.inputs), node.outputs[0] if len(node.outputs) == 1 else None,
                  symbolic=node.symbolic)


def symbolic_reason(names) -> str:
    """Why an op with symbolic dims stays on the CPU."""
    return (f"symbolic dim{'s' if len(names) > 1 else ''} {', '.join(names)} "
            "(FPGA kernels are generated for static shapes)")


# -- the rules -----------------------------------------------------------------------------------

_SHORT = {"relax.nn.leakyrelu": "leaky_relu"}
Check = Callable[[OpView, Limits], "str | None"]


def _weight_budget(kind: str, macs: int, n_weights: int, limits: Limits) -> str | None:
    if choose_reuse(macs, limits) is None:
        return (f"{kind} needs {macs} multipliers per output, more than {limits.max_multipliers} "
                f"even when reused {limits.max_reuse} times")
    if n_weights * 4 > limits.max_weight_bytes:
        return f"{kind} weights take {n_weights * 4} bytes, more than {limits.max_weight_bytes}"
    return None


def conv_geometry(v: OpView) -> dict[str, int] | str:
    """C_in, F, KH, KW, I (= C_in / groups), groups of a conv2d view, or a rejection reason."""
    a = v.attrs
    data_layout = a.get("data_layout", "NCHW") if a is not None else "NCHW"  # OpNode: import form
    kernel_layout = a.get("kernel_layout", "OIHW") if a is not None else "OIHW"
    if sorted(kernel_layout) != sorted("OIHW") or sorted(data_layout) != sorted("NCHW"):
        return f"conv2d layouts {data_layout}/{kernel_layout} are not plain 2-D layouts"
    x, w = v.inputs[0].shape, v.inputs[1].shape
    if len(x) != 4 or len(w) != 4:
        return "conv2d is not 2-D"
    dims = {ax: w[kernel_layout.index(ax)] for ax in "OIHW"}
    c_in = x[data_layout.index("C")]
    groups = int(a["groups"]) if a is not None and "groups" in a else c_in // max(dims["I"], 1)
    return {"C": c_in, "F": dims["O"], "KH": dims["H"], "KW": dims["W"], "I": dims["I"], "groups": groups}


def _conv2d(v: OpView, limits: Limits) -> str | None:
    a = v.attrs
    if a is not None:
        if a.get("data_layout") != "NHWC" or a.get("out_layout", "NHWC") not in ("NHWC", "", None):
            return (f"conv2d data layout {a.get('data_layout')} (FPGA kernels take NHWC; the layout "
                    "pass did not convert it)")
        if any(int(d) != 1 for d in a.get("dilation", [1, 1])):
            return f"conv2d dilation {a['dilation']} (FPGA kernels take dilation 1)"
        if a.get("out_dtype") not in (None, "", "float32"):
            return f"conv2d out_dtype {a['out_dtype']}"
    if v.is_const(1) is False:
        return "conv2d weights are not constant"
    g = conv_geometry(v)
    if isinstance(g, str):
        return g
    depthwise = g["groups"] == g["C"] == g["F"] and g["I"] == 1
    if g["groups"] != 1 and not depthwise:
        return (f"conv2d groups={g['groups']} with {g['C']} input and {g['F']} output channels "
                "(FPGA kernels take groups 1 or depthwise, groups = channels)")
    if max(g["KH"], g["KW"]) > limits.max_kernel:
        return f"conv2d kernel {g['KH']}x{g['KW']} is larger than {limits.max_kernel}x{limits.max_kernel}"
    macs = g["KH"] * g["KW"] * (g["C"] if depthwise else g["I"] * g["F"])
    return _weight_budget("conv2d", macs, math.prod(v.inputs[1].shape), limits)


def _matmul(v: OpView, limits: Limits) -> str | None:
    if v.is_const(1) is False or v.is_const(0):
        return "matmul without a constant right-hand operand (weights): two activations"
    x, w = v.inputs[0].shape, v.inputs[1].shape
    if len(w) != 2 or len(x) < 2:
        return f"matmul of ranks {len(x)} and {len(w)} (FPGA dense takes (batch, ..., n_in) x (n_in, n_out))"
    if v.attrs is not None and v.attrs.get("out_dtype") not in (None, "", "float32"):
        return f"matmul out_dtype {v.attrs['out_dtype']}"
    return _weight_budget("dense", w[0] * w[1], w[0] * w[1], limits)


def per_channel(shape: tuple[int, ...], out: tuple[int, ...], nchw: bool = False) -> bool:
    """A constant of ``shape`` broadcast over ``out`` varies along the last axis only (or, with
    ``nchw``, along axis 1 of an image: the import form that the layout pass makes NHWC)."""
    if nchw and len(out) == 4 and len(shape) == 4 and shape[0] == shape[2] == shape[3] == 1:
        return True
    return len(shape) <= len(out) and all(d == 1 for d in shape[:-1]) and (
        not shape or shape[-1] in (1, out[-1]))


def _binary(v: OpView, limits: Limits) -> str | None:
    out = v.output.shape
    kinds = [v.is_const(i) for i in range(2)]
    shapes = [t.shape for t in v.inputs]
    if kinds == [False, False] or (kinds == [None, None] and shapes[0] == shapes[1] == out):
        if shapes[0] == shapes[1] == out:
            return None
        return f"{_name(v.op)} broadcasts {shapes[0]} with {shapes[1]} (FPGA kernels take equal shapes)"
    data = 1 if kinds[0] or (kinds[0] is None and shapes[1] == out) else 0
    if shapes[data] != out:
        return f"{_name(v.op)} broadcasts its activation {shapes[data]} to {out}"
    if not per_channel(shapes[1 - data], out, nchw=v.attrs is None):
        return (f"{_name(v.op)} with a constant of shape {shapes[1 - data]}: FPGA kernels take a scalar "
                "or per-channel (last axis) constant")
    return None


def _affine(v: OpView, limits: Limits) -> str | None:
    """subtract/divide: only by a constant (second operand), folded into a scale_shift."""
    if v.is_const(0) or v.is_const(1) is False or (v.consts is None and v.inputs[0].shape != v.output.shape):
        return f"{_name(v.op)} of two activations or of a constant by an activation (no FPGA kernel)"
    const = v.const(1)
    if v.op == "relax.divide" and const is not None and not np.all(const):
        return "divide by a constant holding zeros"
    return _binary(v, limits)


def _clamp(v: OpView, limits: Limits) -> str | None:
    const = 1 if v.is_const(1) or (v.consts is None and math.prod(v.inputs[1].shape) == 1) else 0
    if v.is_const(const) is False or math.prod(v.inputs[const].shape) != 1:
        return f"{_name(v.op)} of two activations (FPGA kernels clamp to constant bounds only)"
    return None


def _pool(v: OpView, limits: Limits) -> str | None:
    a = v.attrs
    if a is None:
        return None
    if a.get("layout") != "NHWC" or a.get("out_layout", "NHWC") not in ("NHWC", "", None):
        return f"{_name(v.op)} layout {a.get('layout')} (FPGA kernels take NHWC)"
    if any(int(d) != 1 for d in a.get("dilation", [1, 1])):
        return f"{_name(v.op)} dilation {a['dilation']}"
    kh, kw = (int(k) for k in a["pool_size"])
    if max(kh, kw) > limits.max_kernel:
        return f"{_name(v.op)} window {kh}x{kw} is larger than {limits.max_kernel}x{limits.max_kernel}"
    top, left, bottom, right = pads4(a.get("padding", [0]))
    _, h, w, _ = v.inputs[0].shape
    sh, sw = (int(s) for s in a["strides"])
    floor_shape = ((h + top + bottom - kh) // sh + 1, (w + left + right - kw) // sw + 1)
    if tuple(v.output.shape[1:3]) != floor_shape:
        return f"{_name(v.op)} with ceil_mode adds a partial window (FPGA kernels round down)"
    return None


def _mean(v: OpView, limits: Limits) -> str | None:
    x, out = v.inputs[0].shape, v.output.shape
    if len(x) != 4:
        return "mean over a tensor that is not an image (FPGA takes the global average pool only)"
    if v.attrs is not None:
        axes = sorted(int(a) % 4 for a in v.attrs.get("axis") or range(4))
        return None if axes == [1, 2] else f"mean over axes {axes} (FPGA takes axes 1, 2 of NHWC: global pool)"
    pooled = [(x[0], 1, 1, x[3]), (x[0], x[3]), (x[0], x[1], 1, 1), (x[0], x[1])]  # NHWC or NCHW
    return None if tuple(out) in pooled else f"mean {x} -> {out} is not a global average pool"


def _last_axis(name: str):
    def check(v: OpView, limits: Limits) -> str | None:
        if v.attrs is None:
            return None
        axes = v.attrs.get(name)
        axes = [axes] if isinstance(axes, int) else list(axes or [])
        rank = len(v.inputs[0].shape)
        if [int(a) % rank for a in axes] != [rank - 1]:
            return f"{_name(v.op)} over axes {axes} (FPGA kernels take the last axis)"
        return None

    return check


def _layer_norm(v: OpView, limits: Limits) -> str | None:
    if v.is_const(1) is False or v.is_const(2) is False:
        return "layer_norm gamma/beta are not constant"
    return _last_axis("axes")(v, limits)


def _permute(v: OpView, limits: Limits) -> str | None:
    if v.attrs is None:
        return None
    axes = v.attrs.get("axes")
    rank = len(v.inputs[0].shape)
    axes = list(range(rank))[::-1] if axes is None else [int(a) % rank for a in axes]
    return None if not axes or axes[0] == 0 else f"permute_dims {axes} moves the batch axis"


def _none(v: OpView, limits: Limits) -> str | None:
    return None


_CHECKS: dict[str, Check] = {
    "relax.nn.conv2d": _conv2d,
    "relax.matmul": _matmul,
    "relax.add": _binary,
    "relax.multiply": _binary,
    "relax.subtract": _affine,
    "relax.divide": _affine,
    "relax.maximum": _clamp,
    "relax.minimum": _clamp,
    "relax.nn.relu": _none,
    "relax.nn.leakyrelu": _none,
    "relax.sigmoid": _none,
    "relax.tanh": _none,
    "relax.nn.max_pool2d": _pool,
    "relax.nn.avg_pool2d": _pool,
    "relax.mean": _mean,
    "relax.nn.softmax": _last_axis("axis"),
    "relax.nn.layer_norm": _layer_norm,
    "relax.permute_dims": _permute,
    "relax.reshape": _none,
}
# Tensor arguments per op (a reshape's target shape is not a tensor); the others take one.
_TENSOR_ARGS = {"relax.nn.conv2d": 2, "relax.matmul": 2, "relax.add": 2, "relax.multiply": 2,
                "relax.subtract": 2, "relax.divide": 2, "relax.maximum": 2, "relax.minimum": 2, "relax.nn.layer_norm": 3}
SUPPORTED_OPS = frozenset(_CHECKS)


def _name(op: str) -> str:
    return _SHORT.get(op, op.rsplit(".", 1)[-1])


def pads4(padding) -> tuple[int, int, int, int]:
    """Relax 2-D padding (1, 2 or 4 values) as (top, left, bottom, right)."""
    p = [int(x) for x in padding]
    if len(p) == 1:
        p *= 4
    elif len(p) == 2:
        p = p * 2
    return tuple(p)  # type: ignore[return-value]


def check_view(v: OpView, limits: Limits | None = None) -> str | None:
    """Why the FPGA cannot run this op (a short sentence), or None when it can."""
    limits = limits or Limits()
    check = _CHECKS.get(v.op)
    if check is None:
        return f"no FPGA kernel for {v.op}"
    if v.symbolic:
        return symbolic_reason(v.symbolic)
    expected = _TENSOR_ARGS.get(v.op, 1)
    if len(v.inputs) != expected or v.output is None or any(t is None for t in v.inputs):
        return "dynamic (symbolic or data-dependent) shape"
    dtypes = sorted({t.dtype for t in [*v.inputs, v.output]} - {"float32"})
    if dtypes:
        return f"dtype {', '.join(dtypes)} (FPGA kernels take float32 models)"
    if v.consts is not None and all(c is not None for c in v.consts):
        return "all inputs are constants (computed on the CPU)"
    data = next((i for i in range(expected) if not v.is_const(i)), 0)
    x, out = v.inputs[data].shape, v.output.shape
    if not x or not out or x[0] != out[0]:
        return f"{_name(v.op)} {x} -> {out} does not keep the batch axis first"
    return check(v, limits)


def check_reason(call, limits: Limits | None = None) -> str | None:
    """``check_view`` of a Relax call (``None``: the FPGA can run it)."""
    return check_view(view_of_call(call), limits)


def node_reason(node: OpNode, limits: Limits | None = None) -> str | None:
    """``check_view`` of an OpNode (what the import-time graph shows; see the module doc)."""
    return check_view(view_of_node(node), limits)


def supports(node: OpNode) -> bool:
    """The target registry's filter: can the FPGA run ``node`` (default ``Limits``)?"""
    return node_reason(node) is None


# -- the pattern table ---------------------------------------------------------------------------


def _calls(ctx) -> list:
    from tvm import relax

    return [e for e in ctx.matched_bindings.values() if isinstance(e, relax.Call)]


def _scalar(expr) -> float | None:
    import tvm

    if isinstance(expr, tvm.ir.GenericConst):
        value = expr.value.numpy()
        if value.size == 1:
            return float(value.reshape(()))
    return None


def _structure_ok(name: str, calls: list) -> bool:
    """Checks across the ops of a fused pattern (each op passed ``check_reason`` already)."""
    ops = {str(c.op.name): c for c in calls}
    if "clip" in name:  # minimum(maximum(x, lo), hi) or maximum(minimum(x, hi), lo): lo <= hi
        lo, hi = _scalar(ops["relax.maximum"].args[1]), _scalar(ops["relax.minimum"].args[1])
        return lo is not None and hi is not None and lo <= hi
    return True


MOVEMENT = frozenset({"relax.permute_dims", "relax.reshape"})  # data movement, no arithmetic


def isolated_movement(func, limits: Limits | None = None, allowed: set[int] | None = None) -> set:
    """The transposes and reshapes of ``func`` the FPGA could run but that touch no FPGA
    computation (that a placement gave it: ``allowed``): alone they would make a region that
    only moves data to the FPGA and back."""
    from ..byoc import isolated_movement as isolated

    return isolated(func, lambda call: check_reason(call, limits) is None, MOVEMENT, allowed)


def pattern_table(limits: Limits | None = None, exclude: set | frozenset = frozenset(),
                  allowed: set[int] | None = None, ids: dict | None = None) -> list:
    """``FusionPattern``s for ``FuseOpsByPattern``, highest priority first, named
    ``hetc_fpga.<kind>``. Each check runs ``check_reason`` on every matched op, refuses
    matches whose intermediate values are used outside them, and checks the structure.
    Calls in ``exclude`` (the very Relax objects, e.g. from ``isolated_movement``) and ops a
    placement put elsewhere (``allowed``: the op graph ids it gave the FPGA) are refused."""
    from tvm.relax.backend.utils import has_leaking_intermediate_variables
    from tvm.relax.dpl import is_const, is_op, wildcard
    from tvm.relax.transform import FusionPattern

    from ..byoc import placed_here

    limits = limits or Limits()

    def check_for(name: str):
        def check(ctx) -> bool:
            calls = _calls(ctx)
            if not placed_here(ctx, allowed, ids or {}) or any(c in exclude or check_reason(c, limits) is not None for c in calls):
                return False
            if len(calls) > 1 and has_leaking_intermediate_variables(ctx):
                return False
            return _structure_ok(name, calls)

        return check

    def clip(x):
        return is_op("relax.minimum")(is_op("relax.maximum")(x, is_const()), is_const())

    def clip_swapped(x):
        return is_op("relax.maximum")(is_op("relax.minimum")(x, is_const()), is_const())

    conv = is_op("relax.nn.conv2d")(wildcard(), is_const())
    conv_bias = is_op("relax.add")(conv, is_const())
    dense = is_op("relax.matmul")(wildcard(), is_const())
    dense_bias = is_op("relax.add")(dense, is_const())
    x = wildcard()
    table = [
        ("conv2d_bias_relu", is_op("relax.nn.relu")(conv_bias)),
        ("conv2d_bias_clip", clip(conv_bias)),
        ("conv2d_bias", conv_bias),
        ("conv2d", conv),
        ("dense_bias_relu", is_op("relax.nn.relu")(dense_bias)),
        ("dense_bias", dense_bias),
        ("dense", dense),
        ("batch_norm", is_op("relax.add")(is_op("relax.multiply")(is_op("relax.divide")(
            is_op("relax.subtract")(x, is_const()), is_const()), is_const()), is_const())),  # decomposed
        ("scale_shift", is_op("relax.add")(is_op("relax.multiply")(x, is_const()), is_const())),
        ("clip", clip(x)),
        ("clip_swapped", clip_swapped(x)),
        ("relu", is_op("relax.nn.relu")(x)),
        ("clamp_low", is_op("relax.maximum")(x, is_const())),  # relu when the bound is 0
        ("clamp_high", is_op("relax.minimum")(x, is_const())),
        ("leaky_relu", is_op("relax.nn.leakyrelu")(x)),
        ("sigmoid", is_op("relax.sigmoid")(x)),
        ("tanh", is_op("relax.tanh")(x)),
        ("max_pool2d", is_op("relax.nn.max_pool2d")(x)),
        ("avg_pool2d", is_op("relax.nn.avg_pool2d")(x)),
        ("global_avg_pool2d", is_op("relax.mean")(x)),
        ("add", is_op("relax.add")(wildcard(), wildcard())),
        ("multiply", is_op("relax.multiply")(wildcard(), wildcard())),
        ("subtract", is_op("relax.subtract")(x, is_const())),
        ("divide", is_op("relax.divide")(x, is_const())),
        ("softmax", is_op("relax.nn.softmax")(x)),
        ("layer_norm", is_op("relax.nn.layer_norm")(x, is_const(), is_const())),
        ("transpose", is_op("relax.permute_dims")(x)),
        ("reshape", is_op("relax.reshape")(x, wildcard())),
    ]
    return [FusionPattern(f"{CODEGEN}.{name}", pattern, {}, check_for(name)) for name, pattern in table]


def partition(mod, limits: Limits | None = None, allowed: set[int] | None = None):
    """``FuseOpsByPattern`` with this table, then ``MergeCompositeFunctions``: the FPGA regions
    become functions with ``"Codegen": "hetc_fpga"`` called from ``main``. Transposes and
    reshapes with no FPGA computation next to them stay on the CPU."""
    from tvm import relax

    from ..byoc import merge_composites, op_graph_ids

    table = pattern_table(limits, isolated_movement(mod["main"], limits, allowed), allowed,
                          op_graph_ids(mod["main"]))
    mod = relax.transform.FuseOpsByPattern(table, annotate_codegen=False)(mod)
    return merge_composites(mod)
