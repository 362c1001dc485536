"""Winograd convolution for the CPU: 3x3 stride-1 conv2d as transforms around a batched GEMM.

F(m x m, 3 x 3) computes an m x m output tile from an (m + 2) x (m + 2) input tile with
``alpha**2`` multiplies per input/output channel pair instead of ``9 m**2`` (alpha = m + 2):
2.25x fewer for F(2x2, 3x3), 4x fewer for F(4x4, 3x3). A conv2d (NHWC, OHWI weight) becomes

    V = winograd_input(x)       [alpha^2, tiles, C]   V[e] = B^T d B for every input tile d
    M = matmul(V, U)            [alpha^2, tiles, K]   U = G g G^T, folded at compile time
    y = winograd_output(M)      [N, H, W, K]          y = A^T M A, cropped; bias/relu fuse here

The GEMM is an ordinary batched matmul by a constant: the contraction rule schedules it with
its register-blocked micro-kernel and packed weight (``schedules/gemm.py``). The transforms are
explicit sums with the matrices' non-zero coefficients folded in: each output position is a
``Select`` on the position, which the ``winograd`` schedule rule (``schedules/winograd.py``)
unrolls so that the selects fold away.

Which convs take this path is a cost rule (``choose``): the multiplies saved against the
transforms' extra memory traffic, per conv. ``CompileOptions.winograd`` overrides it ("off", or
a tile size for every eligible conv). Each decision is recorded on the module
(``DECISIONS_ATTR``) and printed in the compile report.

Numerics: the transforms reassociate the sums. Measured against a float64 reference on random
tiles, the largest error relative to the tile's largest output is 5.4e-7 for F(2x2, 3x3) and
4.5e-6 for F(4x4, 3x3) with the points 0, +-1, +-2 (Lavin and Gray); F(6x6, 3x3) is not used
(6.7e-6 per conv with +-1/2 as well, and 44 of 64 input-transform coefficients non-zero).
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import asdict, dataclass

import numpy as np
import tvm
from tvm import relax, te, tirx, topi
from tvm.relax.expr_functor import PyExprMutator, mutator

from ...passes.pipeline import rewrite_functions

log = logging.getLogger(__name__)

INPUT_BLOCK = "winograd_input"
OUTPUT_BLOCK = "winograd_output"
DECISIONS_ATTR = "hetc.winograd"
TILES = (2, 4)
_POINTS = {2: (0.0, 1.0, -1.0), 4: (0.0, 1.0, -1.0, 2.0, -2.0)}  # plus the point at infinity
_CONV = tvm.ir.Op.get("relax.nn.conv2d")
_OP_PATTERN_OPAQUE = 8  # relax.OpPatternKind: kOpaque (never fused)
_OP_PATTERN_OUT_EWISE = 4  # kOutEWiseFusable: elementwise consumers fuse into it


@functools.cache
def transform_matrices(m: int, r: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A^T, G, B^T)`` of F(m, r) (float64): Cook-Toom with the points ``_POINTS[m]`` and
    infinity; ``B^T`` is solved from the identity ``sum_j A^T[i,j] G[j,k] B^T[j,t] = [t == i+k]``."""
    alpha = m + r - 1
    points = _POINTS[m]
    at, g = np.zeros((m, alpha)), np.zeros((alpha, r))
    for j, a in enumerate(points):
        at[:, j] = [a ** i for i in range(m)]
        g[j] = [a ** k / math.prod(a - b for b in points if b != a) for k in range(r)]
    at[m - 1, alpha - 1] = g[alpha - 1, r - 1] = 1.0
    system = np.array([at[i] * g[:, k] for i in range(m) for k in range(r)])
    bt = np.zeros((alpha, alpha))
    for t in range(alpha):
        rhs = np.array([float(t == i + k) for i in range(m) for k in range(r)])
        bt[:, t] = np.linalg.lstsq(system, rhs, rcond=None)[0]
    bt = np.round(bt, 12)  # the exact values are small dyadic rationals; drop the solver's noise
    return at, g, bt


def weight_transform(weight: np.ndarray, m: int) -> np.ndarray:
    """OHWI 3x3 weight -> ``U [alpha^2, C, K]`` (``U[e] = G g G^T``), in float64 then cast."""
    _, g, _ = transform_matrices(m)
    u = np.einsum("ah,khwc,bw->abck", g, weight.astype(np.float64), g)
    alpha = m + 2
    return u.reshape(alpha * alpha, weight.shape[3], weight.shape[0]).astype(weight.dtype)


def _weighted_sum(terms: list[tuple[float, tirx.PrimExpr]]) -> tirx.PrimExpr:
    """``sum(c * x)`` with the +-1 coefficients as adds and subtracts."""
    expr = None
    for coef, value in terms:
        if coef == 1.0:
            term, sign = value, 1
        elif coef == -1.0:
            term, sign = value, -1
        else:
            term, sign = value * tirx.const(abs(coef), value.dtype), 1 if coef > 0 else -1
        if expr is None:
            expr = term if sign > 0 else -term
        else:
            expr = expr + term if sign > 0 else expr - term
    return expr if expr is not None else tirx.const(0.0, "float32")


def _select(position: tirx.PrimExpr, branches: list[tirx.PrimExpr]) -> tirx.PrimExpr:
    """``branches[position]`` as a chain of selects (folded once ``position`` is a constant)."""
    expr = branches[-1]
    for k in range(len(branches) - 2, -1, -1):
        expr = tirx.if_then_else(position == k, branches[k], expr)
    return expr


@dataclass(frozen=True)
class Geometry:
    """One conv2d's shapes, as the transforms see them."""

    n: int
    h: int
    w: int
    c: int
    k: int
    pads: tuple[int, int, int, int]  # top, left, bottom, right

    @property
    def out_h(self) -> int:
        return self.h + self.pads[0] + self.pads[2] - 2

    @property
    def out_w(self) -> int:
        return self.w + self.pads[1] + self.pads[3] - 2

    def tiles(self, m: int) -> tuple[int, int]:
        return -(-self.out_h // m), -(-self.out_w // m)


def input_transform(x: te.Tensor, geo: Geometry, m: int) -> te.Tensor:
    """``V [alpha^2, N * tiles_h * tiles_w, C]``: ``B^T d B`` of every (zero-padded) input tile."""
    _, _, bt = transform_matrices(m)
    alpha = m + 2
    th, tw = geo.tiles(m)
    top, left = geo.pads[0], geo.pads[1]
    padded = topi.nn.pad(x, [0, top, left, 0], [0, th * m + 2 - geo.h - top, tw * m + 2 - geo.w - left, 0],
                         name="winograd_pad")

    def body(e, p, c):
        n, rest = p // (th * tw), p % (th * tw)
        y0, x0 = rest // tw * m, rest % tw * m
        branches = []
        for eps in range(alpha):
            for nu in range(alpha):
                terms = [(bt[eps, a] * bt[nu, b], padded[n, y0 + a, x0 + b, c])
                         for a in range(alpha) for b in range(alpha) if bt[eps, a] and bt[nu, b]]
                branches.append(_weighted_sum(terms))
        return _select(e, branches)

    return te.compute((alpha * alpha, geo.n * th * tw, geo.c), body, name=f"{INPUT_BLOCK}_f{m}")


def output_transform(mm: te.Tensor, geo: Geometry, m: int) -> te.Tensor:
    """``y [N, H_out, W_out, K]``: ``A^T M A`` of every tile, cropped to the output."""
    at, _, _ = transform_matrices(m)
    alpha = m + 2
    th, tw = geo.tiles(m)

    def body(n, y, x, k):
        p = (n * th + y // m) * tw + x // m
        branches = []
        for i in range(m):
            for j in range(m):
                terms = [(at[i, a] * at[j, b], mm[a * alpha + b, p, k])
                         for a in range(alpha) for b in range(alpha) if at[i, a] and at[j, b]]
                branches.append(_weighted_sum(terms))
        return _select((y % m) * m + x % m, branches)

    return te.compute((geo.n, geo.out_h, geo.out_w, geo.k), body, name=f"{OUTPUT_BLOCK}_f{m}")


@dataclass(frozen=True)
class Decision:
    """What the cost rule chose for one conv, for the report."""

    shape: str  # "N x H x W x C -> K"
    method: str  # "winograd F(4x4,3x3)", "winograd F(2x2,3x3)" or "direct"
    reason: str

    def to_json(self) -> dict:
        return asdict(self)


# The cost rule's units are FMAs of the register-blocked micro-kernel at full speed. Calibrated
# on ResNet-18's 3x3 convs on a 2-core Zen 5 (docs/cpu.md, "Winograd"): a float moved through a
# transform (V or M, written once and read once) costs about ELEMENT_FMA of them, a weight byte
# streamed into the GEMM WEIGHT_BYTE_FMA (the GEMM is bound by its weight when it has few rows:
# F(4x4,3x3) on 7x7x512 reads 4x the direct conv's weight bytes and ran 1.16x slower than it).
ELEMENT_FMA = 6.0
WEIGHT_BYTE_FMA = 3.0
# Winograd must predict at least this speed-up over the direct conv to be chosen.
MIN_GAIN = 1.2


def _gemm_cost(rows: int, positions: int, geo: Geometry) -> float:
    """A GEMM of ``positions`` x [rows, C] x [C, K] with a constant [C, K] weight per position:
    its multiply-adds, or streaming its weight, whichever takes longer."""
    return max(positions * rows * geo.c * geo.k, positions * geo.c * geo.k * 4 * WEIGHT_BYTE_FMA)


def estimate(geo: Geometry, m: int) -> float:
    """Predicted cost of F(m x m, 3x3), in micro-kernel FMAs (see ``direct_cost``)."""
    alpha = m + 2
    th, tw = geo.tiles(m)
    tiles = geo.n * th * tw
    # The explicit sums: every non-zero coefficient pair is a multiply-add per tile and channel.
    at, _, bt = transform_matrices(m)
    in_terms = np.count_nonzero(bt) ** 2
    out_terms = np.count_nonzero(at) ** 2
    moved = alpha * alpha * tiles * (geo.c + geo.k) * 2
    return (_gemm_cost(tiles, alpha * alpha, geo) + tiles * (in_terms * geo.c + out_terms * geo.k)
            + ELEMENT_FMA * moved)


def direct_cost(geo: Geometry) -> float:
    """Predicted cost of the direct conv: 9 GEMMs of [N*H*W, C] x [C, K] in one."""
    return _gemm_cost(geo.n * geo.out_h * geo.out_w, 9, geo)


def choose(geo: Geometry, mode: str) -> tuple[int | None, str]:
    """``(m, reason)``: the tile size Winograd runs with for this conv (None: direct)."""
    if mode == "off":
        return None, "winograd off (--winograd off)"
    if mode in ("2", "4"):
        return int(mode), f"--winograd {mode}"
    direct = direct_cost(geo)
    best = min(TILES, key=lambda m: estimate(geo, m))
    gain = direct / estimate(geo, best)
    if gain < MIN_GAIN:
        return None, f"predicted {gain:.2f}x of direct (< {MIN_GAIN})"
    return best, f"predicted {gain:.2f}x fewer FMA-equivalents than direct"


def _static_ints(values) -> list[int] | None:
    out = []
    for v in values:
        if not isinstance(v, (tirx.IntImm, int)):
            return None
        out.append(int(v))
    return out


def eligible(call: relax.Call) -> tuple[Geometry, np.ndarray] | None:
    """The geometry and weight of a conv2d Winograd can compute, else None: NHWC data, a
    constant OHWI 3x3 float32 weight, stride 1, dilation 1, one group, static shapes."""
    attrs = call.attrs
    if (str(attrs.data_layout) != "NHWC" or str(attrs.kernel_layout) != "OHWI"
            or str(attrs.out_layout) != "NHWC" or int(attrs.groups) != 1
            or [int(s) for s in attrs.strides] != [1, 1] or [int(d) for d in attrs.dilation] != [1, 1]):
        return None
    x, weight = call.args
    if not isinstance(weight, tvm.ir.GenericConst) or not isinstance(x.ty, relax.TensorType):
        return None
    if str(x.ty.dtype) != "float32" or str(call.ty.dtype) != "float32" or x.ty.shape is None:
        return None
    shape = _static_ints(x.ty.shape.values)
    w = weight.value.numpy()
    if shape is None or len(shape) != 4 or w.shape[1:3] != (3, 3) or w.dtype != np.float32:
        return None
    pads = [int(p) for p in attrs.padding]
    if len(pads) == 2:
        pads = pads * 2
    geo = Geometry(shape[0], shape[1], shape[2], shape[3], w.shape[0], tuple(pads))
    if geo.out_h < 1 or geo.out_w < 1 or w.shape[3] != geo.c:
        return None
    return geo, w


@mutator
class _Winograd(PyExprMutator):  # pylint: disable=abstract-method
    def __init__(self, mod: tvm.IRModule, mode: str) -> None:
        super().__init__(mod)
        self.mode = mode
        self.decisions: list[Decision] = []

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        if not (isinstance(call, relax.Call) and call.op.same_as(_CONV)):
            return call
        found = eligible(call)
        if found is None:
            return call
        geo, weight = found
        m, reason = choose(geo, self.mode)
        shape = f"{geo.n}x{geo.h}x{geo.w}x{geo.c} -> {geo.k}"
        self.decisions.append(Decision(shape, f"winograd F({m}x{m},3x3)" if m else "direct", reason))
        if m is None:
            return call
        bb = self.builder_
        func, shape = _transform_func(INPUT_BLOCK, geo, m)
        v = bb.emit(relax.call_tir(bb.add_func(func, INPUT_BLOCK), [call.args[0]],
                                   relax.TensorType(shape, "float32")))
        mm = bb.emit(relax.op.matmul(v, relax.const(weight_transform(weight, m))))
        func, shape = _transform_func(OUTPUT_BLOCK, geo, m)
        # bound to the conv's variable (an alias binding would stop FuseOps)
        return relax.call_tir(bb.add_func(func, OUTPUT_BLOCK), [mm], relax.TensorType(shape, "float32"))


@functools.lru_cache(maxsize=64)  # bounded: a process may compile many models (torch.compile)
def _transform_func(block: str, geo: Geometry, m: int) -> tuple[tirx.PrimFunc, tuple[int, ...]]:
    """The PrimFunc of one transform of F(``m``) for convs of ``geo`` and its output shape, made
    once per process (a transform is a large expression: 50 ms to build on a 2-core Intel Xeon,
    LLVM ``emeraldrapids``; ResNet-50's 13 Winograd convs have 4 geometries; ``add_func`` gives
    identical functions one global).

    Each carries its fusion pattern (AnnotateTIROpPattern keeps one that is set): the input
    transform fuses with nothing (inlined into its producer's kernel it would recompute that
    kernel per tile), the output transform takes the elementwise epilogue (bias, residual add,
    relu) like a conv does."""
    if block == INPUT_BLOCK:
        src = te.placeholder((geo.n, geo.h, geo.w, geo.c), "float32", "x")
        out, pattern = input_transform(src, geo, m), _OP_PATTERN_OPAQUE
    else:
        th, tw = geo.tiles(m)
        src = te.placeholder(((m + 2) ** 2, geo.n * th * tw, geo.k), "float32", "m")
        out, pattern = output_transform(src, geo, m), _OP_PATTERN_OUT_EWISE
    func = te.create_prim_func([src, out], "int64").without_attr("global_symbol")
    return func.with_attr("op_pattern", pattern), tuple(int(d) for d in out.shape)


def decisions(mod: tvm.IRModule) -> list[dict]:
    """The cost rule's decision for every eligible conv of ``mod`` (the compile report's "winograd")."""
    found = (mod.attrs or {}).get(DECISIONS_ATTR) if mod.attrs is not None else None
    return [{k: str(v) for k, v in d.items()} for d in found] if found is not None else []


def winograd_pass(mode: str = "auto") -> tvm.transform.Pass:
    """Rewrite the eligible 3x3 convs the cost rule picks (``mode``: ``CompileOptions.winograd``)."""

    @tvm.transform.module_pass(opt_level=0, name="HetcWinograd")
    def apply(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        rewriter = _Winograd(mod, mode)
        out = rewrite_functions(rewriter, mod)
        if rewriter.decisions:
            for d in rewriter.decisions:
                log.info("conv %s: %s (%s)", d.shape, d.method, d.reason)
            out = out.with_attr(DECISIONS_ATTR, [d.to_json() for d in rewriter.decisions])
        return out

    return apply
