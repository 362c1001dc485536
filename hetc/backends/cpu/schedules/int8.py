"""The int8 rules: uint8 x int8 -> int32 contractions (quantized matmuls and convs), exact.

Takes one reduction block ``C[.., i, j] += int32(A[.., k]) * int32(W[.., j, .., k])`` where A
is uint8 (activations), W an int8 compile-time constant (weights), C int32, the innermost
reduction axis k contiguous in A and a multiple of 4, j a multiple of 4; on a CPU with
AVX512-VNNI. ``vpdpbusd`` multiplies 4 uint8 by 4 int8 and adds the 4 products to an int32
lane, 16 lanes at a time: 64 multiply-adds per instruction, 4x a float32 FMA's 16. The
schedule is the contraction rule's register tile with that instruction as its step:

    parallel for (row tiles, column panels):
      acc[rows][jb][L] = 0                        # int32 registers
      for the other reduction axes (kh, kw), k_o:
        for r in rows, b in jb (unrolled):
          acc[r][b] = vpdpbusd(acc[r][b], broadcast(A[r, 4 k_o : 4 k_o + 4]), W'[j_o, b, .., k_o][L][4])
      epilogue (zero-point correction, requantize) on the tile

L is 16 lanes (zmm) where they divide j, else 8 (ymm) or 4 (xmm): MobileNetV2's 24-channel
projections run as panels of 3 ymm instead of falling back to an int32 kernel. W is re-laid
out at compile time to ``[j / L, .., k / 4, j % L, k % 4]`` (a PREPROC block, as the
contraction rule packs its weights), so each step's Lx4 weight block is one load. The sum
of 4 products of uint8 and int8 fits an int32: the result is exact.

TVM 0.27's own ``dot_16x4_vnni`` intrinsic (``tvm.s_tir.tensor_intrin.x86``) no longer
verifies against its LLVM (the intrinsic takes ``<64 x i8>`` operands now, not ``<16 x
i32>``), and its accumulator must live in global memory; ``VNNI`` below is the same
instruction on a register tile.

Without VNNI (AVX2: every x86 CPU before Ice Lake / Zen 4) the same tile steps with
``vpmaddwd`` on operands widened to int16 (``PMADDWD``, rule ``int8-pmaddwd``): 2 products per
lane per step instead of 4, never saturating, so the result is the exact integer one too. Where
the weight's pairs cannot saturate (``backends/cpu/int8_pairs.py``: weights split at compile
time, marked on the kernel as ``SAFE_PAIRS``), it steps with ``vpmaddubsw`` + ``vpmaddwd`` by
ones on the uint8 input (``PMADDUBSW``, rule ``int8-pmaddubsw``): 4 products per lane per step,
onnxruntime's AVX2 step, exact there.

The weight-only int8 matmuls (``passes/weight_int8.py``) arrive as one kernel of float32 rows:
a row pass (each row's peak, the row rounded to int16), the int32 contraction on the int16
rows, then a pass scaling the sums by the row's step and the column's scale. There the step is
``vpdpwssd`` on AVX512-VNNI (two int16 x int8-widened products per lane, added in the same
instruction) or ``vpmaddwd`` (above), and ``stage_rows`` computes the rows each tile
needs inside it, in a local buffer, so that the tile's loop is the only reader. With symbolic
rows (``batch * seq``), each task is a column panel of a one-row tile and its rows a serial loop
inside it: the panel streams from memory, prefetched (``prefetch.py``), once for the first
row and from cache for the others; its ``jb`` vectors are packed adjacent at each step
(``_packed``), one contiguous stream.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.s_tir import Schedule, TensorIntrin
from tvm.script import tirx as T
from tvm.target import Target

from . import prefetch
from .common import (
    PREPROC,
    Rule,
    inline_chain,
    is_constant,
    normalized,
    on_fresh_stack,
    plain_index,
    schedule_spatial,
    uses,
    vectorize_tail,
)

ROWS = (8, 7, 6, 5, 4, 3, 2, 1)  # register-tile rows, the largest that divides the rows
SAFE_PAIRS = "hetc.int8_safe_pairs"  # PrimFunc attribute: see ``pairs_safe_params``


def _intrinsic(lanes: int) -> tuple:
    """(description, implementation) of one ``vpdpbusd`` on ``lanes`` int32 accumulators
    (16: zmm, 8: ymm, 4: xmm; the narrower forms need AVX512-VL, which every AVX512-VNNI CPU
    has): ``c[i] += sum_k a[k] * b[i, k]`` for k < 4, ``a`` broadcast to every lane."""

    def impl_body(a, b, c):
        four = T.reinterpret(a.vload([0], "uint8x4"), dtype="int32")
        return T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id(f"llvm.x86.avx512.vpdpbusd.{32 * lanes}"),
            c.vload([0], dtype=f"int32x{lanes}"), T.reinterpret(T.broadcast(four, lanes), dtype=f"int8x{4 * lanes}"),
            b.vload([0, 0], dtype=f"int8x{4 * lanes}"), dtype=f"int32x{lanes}")

    return _dot(lanes, 4, impl_body)


# pmaddwd by register width: lanes of int32 -> LLVM intrinsic (two int16 products per lane)
_PMADDWD = {16: "llvm.x86.avx512.pmaddw.d.512", 8: "llvm.x86.avx2.pmadd.wd", 4: "llvm.x86.sse2.pmadd.wd"}


def _widened(lanes: int, a_dtype: str, a_scope: str = "global") -> tuple:
    """(description, implementation) of ``c[i] += a[0] * b[i, 0] + a[1] * b[i, 1]`` on CPUs
    without VNNI: both operands widened to int16 (uint8 zero-extended -- or already int16 in
    memory, a conv's input widened once by ``backends/cpu/int8.py``: then the pair is one
    ``vpbroadcastd`` -- and int8 sign-extended: the weights in the same load, ``vpmovsxbw``),
    then ``vpmaddwd`` multiplies the int16 pairs and adds each pair into an int32 lane, added
    to the accumulators. No sum ever saturates: a product is at most 255 * 128 in magnitude and
    a pair's sum fits int32 -- unlike ``vpmaddubsw``, whose int16 pair sums saturate
    (onnxruntime's AVX2 u8 x s8 kernels)."""

    def impl_body(a, b, c):
        if a_dtype == "int16":
            pair = T.reinterpret(a.vload([0], "int16x2"), dtype="int32")
        else:
            pair = T.reinterpret(T.cast(a.vload([0], "uint8x2"), "int16x2"), dtype="int32")
        return c.vload([0], dtype=f"int32x{lanes}") + T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id(_PMADDWD[lanes]),
            T.reinterpret(T.broadcast(pair, lanes), dtype=f"int16x{2 * lanes}"),
            T.cast(b.vload([0, 0], dtype=f"int8x{2 * lanes}"), f"int16x{2 * lanes}"), dtype=f"int32x{lanes}")

    return _dot(lanes, 2, impl_body, a_dtype, a_scope)


# pmaddubsw by register width: lanes of int32 -> LLVM intrinsic (uint8 x int8 pairs summed to int16)
_PMADDUBSW = {16: "llvm.x86.avx512.pmaddubs.w.512", 8: "llvm.x86.avx2.pmadd.ub.sw", 4: "llvm.x86.ssse3.pmadd.ub.sw.128"}


def _saturating(lanes: int) -> tuple:
    """(description, implementation) of ``c[i] += sum_k a[k] * b[i, k]`` for k < 4 without
    VNNI, as onnxruntime's AVX2 kernels step: ``vpmaddubsw`` multiplies the uint8 quad
    (broadcast) by each lane's 4 int8 weights and adds each pair of products into an int16
    (saturating), ``vpmaddwd`` by ones adds the two int16 into the int32 lane. 32 products per
    two multiplies where ``vpmaddwd`` alone does 16 (1.53x its rate on a Zen 3: ``benchmarks/
    int8_avx2_kernels.py``). Exact only where no weight pair can leave int16
    (``int8_pairs.safe``): the rule takes it only for weights marked so."""

    def impl_body(a, b, c):
        four = T.reinterpret(a.vload([0], "uint8x4"), dtype="int32")
        pairs = T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id(_PMADDUBSW[lanes]),
            T.reinterpret(T.broadcast(four, lanes), dtype=f"uint8x{4 * lanes}"),
            b.vload([0, 0], dtype=f"int8x{4 * lanes}"), dtype=f"int16x{2 * lanes}")
        return c.vload([0], dtype=f"int32x{lanes}") + T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id(_PMADDWD[lanes]), pairs, T.broadcast(T.int16(1), 2 * lanes),
            dtype=f"int32x{lanes}")

    return _dot(lanes, 4, impl_body)


def _words(lanes: int) -> tuple:
    """(description, implementation) of one ``vpdpwssd`` (AVX512-VNNI): ``c[i] += a[0] * b[i, 0]
    + a[1] * b[i, 1]``, ``a`` an int16 pair broadcast to every lane, ``b`` int8 sign-extended to
    int16 in the load (``vpmovsxbw``); the int16 products are added to the int32 lanes in the
    same instruction (``vpmaddwd`` and ``vpaddd`` in one)."""

    def impl_body(a, b, c):
        pair = T.reinterpret(a.vload([0], "int16x2"), dtype="int32")
        return T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id(f"llvm.x86.avx512.vpdpwssd.{32 * lanes}"),
            c.vload([0], dtype=f"int32x{lanes}"), T.reinterpret(T.broadcast(pair, lanes), dtype=f"int16x{2 * lanes}"),
            T.cast(b.vload([0, 0], dtype=f"int8x{2 * lanes}"), f"int16x{2 * lanes}"), dtype=f"int32x{lanes}")

    return _dot(lanes, 2, impl_body, "int16", "local")


def _dot(lanes: int, step: int, impl_body, a_dtype: str = "uint8", a_scope: str = "global") -> tuple:
    """(description, implementation) of ``c[i] += sum_k a[k] * b[i, k]`` for k < ``step``, ``c``
    ``lanes`` int32 accumulators in registers, with ``impl_body(a, b, c)`` the new ``c``."""

    @T.prim_func(s_tir=True)
    def desc(a: T.Buffer((step,), a_dtype, offset_factor=1, scope=a_scope), b: T.Buffer((lanes, step), "int8", offset_factor=1),
             c: T.Buffer((lanes,), "int32", offset_factor=1, scope="local")) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:step], b[0:lanes, 0:step])
            T.writes(c[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, step):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        c[vi] = c[vi] + T.cast(a[vk], "int32") * T.cast(b[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def impl(a: T.Buffer((step,), a_dtype, offset_factor=1, scope=a_scope), b: T.Buffer((lanes, step), "int8", offset_factor=1),
             c: T.Buffer((lanes,), "int32", offset_factor=1, scope="local")) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:step], b[0:lanes, 0:step])
            T.writes(c[0:lanes])
            c[T.ramp(T.int32(0), 1, lanes)] = impl_body(a, b, c)

    return desc, impl


@dataclass(frozen=True)
class Instruction:
    """One int8 dot-product step: ``intrinsics[lanes, A's dtype]`` (registered tensor
    intrinsics, widest first) each add ``step`` products per int32 lane; a register tile has
    ``registers`` accumulators."""

    name: str
    step: int
    registers: int
    intrinsics: dict


VNNI = Instruction("vnni", 4, 28, {(lanes, "uint8"): f"hetc_dot_{lanes}x4_u8i8i32_vnni_local"
                                   for lanes in (16, 8, 4)})
# int16 activations rounded in the kernel, in a tile's local buffer ("int16-row": the row pass
# of a weight-only int8 matmul, ``passes/weight_int8.py``), on AVX512-VNNI
ROW = "int16-row"
VNNI_WORDS = Instruction(VNNI.name, 2, 28, {(lanes, ROW): f"hetc_dot_{lanes}x2_i16i8i32_vnni_local"
                                            for lanes in (16, 8, 4)})
# AVX2 has 16 ymm registers: 12 accumulators, the rest for the weights and the broadcast input
PMADDWD = Instruction("pmaddwd", 2, 12, {(lanes, a): f"hetc_dot_{lanes}x2_{a.replace('-', '')}i8i32_pmaddwd_local"
                                         for lanes in (16, 8, 4) for a in ("int16", "uint8", ROW)})
# without AVX512-BW, no 16-lane (zmm) vpmaddwd
PMADDWD_AVX2 = Instruction(PMADDWD.name, PMADDWD.step, PMADDWD.registers,
                           {k: v for k, v in PMADDWD.intrinsics.items() if k[0] != 16})
# uint8 quads, for weights whose pairs cannot saturate (``int8_pairs``): a 3 x 3 tile, 9
# accumulators + 3 weights + the broadcast + the int16 products + vpmaddwd's ones = 15 ymm (4 x 3
# spilled two accumulators at every step: BERT-base's 768 x 3072 matmul 2.49 -> 2.21 ms, LLVM znver3: AVX2)
PMADDUBSW = Instruction("pmaddubsw", 4, 9, {(lanes, "uint8"): f"hetc_dot_{lanes}x4_u8i8i32_pmaddubsw_local"
                                             for lanes in (16, 8, 4)})
PMADDUBSW_AVX2 = Instruction(PMADDUBSW.name, PMADDUBSW.step, PMADDUBSW.registers,
                             {k: v for k, v in PMADDUBSW.intrinsics.items() if k[0] != 16})


def _makers() -> dict:
    """Intrinsic name -> a function returning its (description, implementation)."""
    makers = {name: functools.partial(_intrinsic, lanes) for (lanes, _), name in VNNI.intrinsics.items()}
    makers |= {name: functools.partial(_words, lanes) for (lanes, _), name in VNNI_WORDS.intrinsics.items()}
    makers |= {name: functools.partial(_widened, lanes, "int16", "local") if a_dtype == ROW
               else functools.partial(_widened, lanes, a_dtype) for (lanes, a_dtype), name in PMADDWD.intrinsics.items()}
    makers |= {name: functools.partial(_saturating, lanes) for (lanes, _), name in PMADDUBSW.intrinsics.items()}
    return makers


_registered: set[str] = set()


def register(*names: str) -> None:
    """Register the tensor intrinsics named (keys of ``Instruction.intrinsics``' values) that
    this process has not: on first use, each alone, on a thread of its own
    (``common.on_fresh_stack``). Not at import: TVMScript's ``T.prim_func`` calls
    ``inspect.stack()``, which under an import chain cost about 7 s for all 15 (2-core Intel
    Xeon, LLVM ``emeraldrapids``: AVX-512)."""
    todo = [name for name in dict.fromkeys(names) if name not in _registered]
    if not todo:
        return
    makers = _makers()
    built = on_fresh_stack(lambda: [makers[name]() for name in todo])
    for name, (desc, impl) in zip(todo, built):
        TensorIntrin.register(name, desc, impl, override=True)
    _registered.update(todo)


def register_traced(traces: list[str]) -> None:
    """Register the intrinsics above that schedule traces (JSON text) name."""
    register(*[name for name in _makers() if any(name in text for text in traces)])


def has_vnni(target: Target) -> bool:
    return bool(tvm.target.codegen.target_has_features("avx512vnni", target))


def instruction(target: Target) -> Instruction | None:
    """The int8 dot product ``target``'s CPU has: VNNI, else pmaddwd on AVX2 (zmm with
    AVX512-BW), else None (the int32 kernels)."""
    if has_vnni(target):
        return VNNI
    if tvm.target.codegen.target_has_features("avx2", target):
        return PMADDWD if tvm.target.codegen.target_has_features("avx512bw", target) else PMADDWD_AVX2
    return None


def _apply(func: tirx.PrimFunc, target: Target, kind: Instruction, lanes: int) -> Schedule | None:
    dtypes = {str(getattr(p, "dtype", "")) for p in func.params}
    a_dtypes = {a for _, a in kind.intrinsics}
    if ROW in a_dtypes:
        a_dtypes.add("float32")  # rounded to int16 in the kernel (``stage_rows``)
    if "int8" not in dtypes or not dtypes & a_dtypes:
        return None  # (checked on the parameters: printing every kernel cost ~3 ms each)
    sch, infos = normalized(func)
    reductions = [b for b in infos or [] if b.is_reduction()]
    if not reductions:
        return None
    # the int32 contraction; around it, at most the row passes of a weight-only int8 matmul
    main = next((b for b in reversed(reductions) if str(sch.get(b.block_rv).writes[0].source.dtype) == "int32"), None)
    if main is None:
        return None
    if not _schedule(sch, infos, main, kind, lanes):
        return None
    return sch


def apply(func: tirx.PrimFunc, target: Target, lanes: int) -> Schedule | None:
    if not has_vnni(target):
        return None
    sch = _apply(func, target, VNNI, lanes)
    return sch if sch is not None else _apply(func, target, VNNI_WORDS, lanes)


def apply_widened(func: tirx.PrimFunc, target: Target, lanes: int) -> Schedule | None:
    kind = instruction(target)
    return _apply(func, target, kind, lanes) if kind is not None and kind.name == PMADDWD.name else None


def apply_pairs(func: tirx.PrimFunc, target: Target, lanes: int) -> Schedule | None:
    """Without VNNI, ``vpmaddubsw`` where the weights' pairs cannot saturate (marked by
    ``int8_pairs.mark_pass``; the others take ``apply_widened``'s ``vpmaddwd``)."""
    kind = instruction(target)
    if kind is None or kind.name != PMADDWD.name or not pairs_safe_params(func):
        return None
    return _apply(func, target, PMADDUBSW if kind is PMADDWD else PMADDUBSW_AVX2, lanes)


def pairs_safe_params(func: tirx.PrimFunc) -> dict[int, set[int]]:
    """Parameter position -> the axes along which every adjacent pair of its (constant int8)
    values is exact under ``vpmaddubsw`` at every call site (``int8_pairs.mark_pass``)."""
    marked = func.attrs.get(SAFE_PAIRS) if func.attrs else None
    return {int(pos): {int(a) for a in axes} for pos, axes in marked.items()} if marked else {}


def operands(sch: Schedule, block, spatial, reduce, a_dtypes):
    """(A's read index, W's read index, position of j in W, position of k in W), or None; A's
    element type one of ``a_dtypes``."""
    stmt = sch.get(block)
    if len(stmt.reads) != 3 and len(stmt.reads) != 2:
        return None
    body = stmt.body
    if not (isinstance(body, tirx.BufferStore) and str(body.buffer.dtype) == "int32"):
        return None
    j, k = spatial[-1].var, reduce[-1].var
    a_idx = w_idx = None
    for idx, read in enumerate(stmt.reads):
        src = read.source
        if src.same_as(stmt.writes[0].source):
            continue
        indices = [r.min for r in read.region]
        if str(src.dtype) in a_dtypes and not any(uses(e, j) for e in indices) and plain_index(indices, k) == len(indices) - 1:
            a_idx = idx
        elif str(src.dtype) == "int8" and is_constant(sch, src):
            w_idx = idx
    if a_idx is None or w_idx is None:
        return None
    w_indices = [r.min for r in stmt.reads[w_idx].region]
    pj, pk = plain_index(w_indices, j), plain_index(w_indices, k)
    if pj is None or pk is None:
        return None
    return a_idx, w_idx, pj, pk


def _schedule(sch: Schedule, infos, main, kind: Instruction, float_lanes: int) -> bool:
    """Schedule ``main`` with ``kind``'s register tile; ``float_lanes``: the float32 SIMD width
    (the vector passes around a weight-only int8 contraction)."""
    spatial = [it for it in main.iters if it.kind == "S"]
    reduce = [it for it in main.iters if it.kind == "R"]
    if not spatial or not reduce or [it.kind for it in main.iters] != ["S"] * len(spatial) + ["R"] * len(reduce):
        return False
    rows_axes = spatial[:-1]  # none for one row (a classifier at batch 1, whose unit axes normalize away)
    # Symbolic rows (batch x seq into a weight-only int8 matmul): a one-row tile, below
    if not all(isinstance(it.dom, int) for it in [spatial[-1], *reduce]):
        return False
    symbolic = not all(isinstance(it.dom, int) for it in rows_axes)
    row_pass = any(b.is_reduction() for b in infos[:infos.index(main)])
    if symbolic and not row_pass:
        return False
    j, k = spatial[-1], reduce[-1]
    lanes = next((n for n, _ in kind.intrinsics if j.dom % n == 0), None)
    if lanes is None or k.dom % kind.step:
        return False
    found = operands(sch, main.block_rv, spatial, reduce, {a.replace(ROW, "int16") for _, a in kind.intrinsics})
    if found is None:
        return False
    a_idx, w_idx, pj, pk = found
    a_dtype = str(sch.get(main.block_rv).reads[a_idx].source.dtype)
    if kind.name == PMADDUBSW.name and not _safe_along(sch, sch.get(main.block_rv).reads[w_idx], pk):
        return False
    def tile_rows(panels: int) -> int:
        return next(r for r in ROWS if r * panels <= kind.registers and (not rows_axes or rows_axes[-1].dom % r == 0))

    if symbolic:
        jb, rows = _row_panels(j.dom, lanes), 1
    else:
        jb = _panels(j.dom, lanes, kind.registers)
        rows = tile_rows(jb)
        if jb > 1 and tile_rows(1) > rows * jb:  # 7 rows x 1 vector, not 1 x 2 (AVX2 at 7x7: 1.7x faster)
            jb, rows = 1, tile_rows(1)
        if rows < 4 and math.prod(it.dom for it in rows_axes) % 8 == 0 and len(rows_axes) > 1:
            rows = 0  # the innermost row axis is too short for a tile: fuse the rows first
    if row_pass:
        if a_dtype != "int16" or (lanes, ROW) not in kind.intrinsics:
            return False
        a_dtype = ROW
    else:
        if (lanes, a_dtype) not in kind.intrinsics:
            return False
        stage_producers(sch, infos, main)

    preproc = sch.cache_read(main.block_rv, w_idx, "global")
    sch.annotate(preproc, PREPROC, True)
    sch.transform_layout(main.block_rv, ("read", w_idx), _packed(pj, pk, lanes, kind.step, jb if row_pass else 1))
    packed = sch.get(main.block_rv).reads[w_idx].source

    loops = dict(zip([it.var for it in main.iters], sch.get_loops(main.block_rv)[-len(main.iters):]))
    jo, jbl, jl = sch.split(loops[j.var], [None, jb, lanes])
    ko, k4 = sch.split(loops[k.var], [None, kind.step])
    others = [loops[it.var] for it in reduce[:-1]]
    if symbolic:
        # Each task a column panel, its rows a serial loop inside it: the panel streams from
        # memory once, for the first row, and from cache for the others.
        ri = None
        row = sch.fuse(*[loops[it.var] for it in rows_axes]) if len(rows_axes) > 1 else loops[rows_axes[0].var]
        sch.reorder(jo, row, *others, ko, jbl, jl, k4)
        tile = row
    else:
        if not rows_axes:
            outer, ri = [], None
        elif rows:
            xo, ri = sch.split(loops[rows_axes[-1].var], [None, rows])
            outer = [loops[it.var] for it in rows_axes[:-1]] + [xo]
        else:
            fused = sch.fuse(*[loops[it.var] for it in rows_axes])
            total = math.prod(it.dom for it in rows_axes)
            rows = next(r for r in ROWS if total % r == 0 and r * jb <= kind.registers)
            mo, ri = sch.split(fused, [None, rows])
            outer = [mo]
        sch.reorder(*outer, jo, *others, ko, *([ri] if ri is not None else []), jbl, jl, k4)
        tile = sch.fuse(*outer, jo) if outer else jo
    acc = sch.cache_write(main.block_rv, 0, "local")
    if row_pass:
        sch.reverse_compute_at(acc, tile, preserve_unit_loops=True)
        stage_rows(sch, infos, main, tile, float_lanes)
        epilogue = None
    else:
        epilogue = inline_chain(sch, acc, infos, main)
        sch.reverse_compute_at(epilogue, tile, preserve_unit_loops=True)
        # The requantization (int32 -> float32 -> round -> clamp -> uint8) in vectors of the
        # tile's lanes. Left to LLVM, it was vectorized across the tile's rows, each byte stored
        # by its own vpextrb: a 64 -> 256 1x1 QLinearConv at 56x56 took 1.36 -> 0.82 ms (median,
        # one alternating loop, 2-core AMD EPYC, LLVM znver3: AVX2).
        vectorize_tail(sch, epilogue, lanes)
    sch.parallel(jo if symbolic else tile)
    sch.decompose_reduction(main.block_rv, others[0] if others else ko)
    register(kind.intrinsics[lanes, a_dtype])
    sch.tensorize(jl, kind.intrinsics[lanes, a_dtype])
    if ri is not None:
        sch.unroll(ri)
    sch.unroll(jbl)
    if symbolic and not others:
        prefetch.mark(sch, jo, ko, packed, jb * lanes * kind.step)
    return True


def _safe_along(sch: Schedule, read, pk: int) -> bool:
    """Whether the weight ``read`` (a parameter of the function, not packed yet) is marked
    saturation-free along its axis ``pk``, which ``k`` indexes plainly (``operands``): the
    step's quads are ``k = 4i .. 4i + 3``, so its pairs are the axis' ``(2i, 2i + 1)``."""
    pos = next((n for n, p in enumerate(sch.mod["main"].params) if p.same_as(read.source)), None)
    return pos is not None and pk in pairs_safe_params(sch.mod["main"]).get(pos, ())


def stage_rows(sch: Schedule, infos, main, loop, lanes: int) -> None:
    """The passes around a weight-only int8 contraction (``passes/weight_int8._quantized_matmul``):
    the row pass (each row's peak in 16 lanes, then across them; the row rounded to int16) at
    ``loop``, the tile's, into local buffers (each task rounds the rows it reads: a few
    hundred vector instructions against a panel of thousands of weights); after the tile loop,
    the peaks again and the scaling of the int32 sums, the latter as an injective kernel. The
    lanes and the rounding are vectorized."""
    before, after = infos[:infos.index(main)], infos[infos.index(main) + 1:]
    for producer in reversed(before):
        sch.compute_at(producer.block_rv, loop, preserve_unit_loops=True)
        sch.set_scope(producer.block_rv, 0, "local")
    spatial_after = [b.block_rv for b in after if not b.is_reduction()]
    for block in spatial_after[:-1]:
        sch.compute_inline(block)
    if spatial_after:
        schedule_spatial(sch, spatial_after[-1], lanes)
    for producer in before + [b for b in after if b.is_reduction()]:
        block = producer.block_rv
        loops = sch.get_loops(block)
        extents = [sch.get(loop).extent for loop in loops]
        if producer.is_reduction():
            spatial = [it for it in producer.iters if it.kind == "S"]
            if len(loops) < 2 or not isinstance(spatial[-1].dom, int) or spatial[-1].dom < 2:
                continue  # the peak across the lanes: 16 steps, scalar
            lane, step = loops[-2], loops[-1]
            sch.reorder(step, lane)
            sch.vectorize(lane)
        elif isinstance(extents[-1], tirx.IntImm) and int(extents[-1]) % 16 == 0:
            _, inner = sch.split(loops[-1], [None, 16])
            sch.vectorize(inner)


def stage_producers(sch: Schedule, infos, main) -> None:
    """The blocks before ``main``: plain copies inlined; the (conditional) padding and the
    widening of the input to int16 (each element once, not at every use) stay separate passes."""
    for producer in reversed(infos[:infos.index(main)]):
        stmt = sch.get(producer.block_rv)
        if "if_then_else" in stmt.body.script() or any(str(w.source.dtype) == "int16" for w in stmt.writes):
            schedule_spatial(sch, producer.block_rv, 16)
        else:
            sch.compute_inline(producer.block_rv)


def _panels(columns: int, lanes: int, registers: int) -> int:
    """Vectors of ``lanes`` per column panel of a tile: two zmm where they divide the columns,
    else one; narrower vectors (columns not a multiple of 16, e.g. MobileNetV2's 24) up to 32
    columns, so that 24 is one panel of 3 ymm (on AVX2, 16 ymm registers: at most 3 vectors,
    so that a tile keeps 4 rows)."""
    if lanes == 16:
        return 2 if columns % 32 == 0 else 1
    most = 4 if registers > 16 else 3
    return next(b for b in (4, 3, 2, 1) if (columns // lanes) % b == 0 and b * lanes <= 32 and b <= most)


def _row_panels(columns: int, lanes: int) -> int:
    """Vectors per column panel of a one-row tile (symbolic rows): four where they divide the
    columns (four independent accumulators), else the most that do."""
    return next(b for b in (4, 2, 1) if (columns // lanes) % b == 0)


def _packed(pj: int, pk: int, lanes: int, step: int, panels: int):
    """``[.., j, .., k] -> [j / (panels lanes), .., k / step, j % (panels lanes) / lanes, j % lanes, k % step]``
    (the other axes in order): a tile's ``panels`` vectors at one reduction step are adjacent,
    so that it streams one contiguous run of its weights (the one-row tiles of a weight-only
    int8 matmul, prefetched); with ``panels`` 1, ``[j / lanes, .., k / step, j % lanes, k % step]``."""
    width = panels * lanes

    def index_map(*axes):
        rest = [a for n, a in enumerate(axes) if n not in (pj, pk)]
        if panels == 1:
            return (axes[pj] // lanes, *rest, axes[pk] // step, axes[pj] % lanes, axes[pk] % step)
        return (axes[pj] // width, *rest, axes[pk] // step, axes[pj] % width // lanes, axes[pj] % lanes, axes[pk] % step)

    return index_map


def finish(func: tirx.PrimFunc, scheduled: tirx.PrimFunc, target: Target, lanes: int) -> tirx.PrimFunc | None:
    """The scheduled function with the weight prefetches its schedule marked (``prefetch.py``:
    a one-row tile streaming its panel, where they pay on ``target``); None where it has none."""
    del func, lanes
    fetched = prefetch.inject(scheduled, target)
    return None if fetched is scheduled else fetched


RULE = Rule("int8-vnni", "uint8 (int16) x int8 -> int32 contractions on AVX512-VNNI (vpdpbusd, vpdpwssd register "
            "tile)", apply, finish=finish)
PAIRS_RULE = Rule("int8-pmaddubsw", "uint8 x int8 -> int32 contractions without VNNI on weights whose pairs cannot "
                  "saturate, exact (vpmaddubsw register tile)", apply_pairs, finish=finish)
WIDENED_RULE = Rule("int8-pmaddwd", "uint8 (int16) x int8 -> int32 contractions without VNNI, exact (int16 "
                    "vpmaddwd register tile)", apply_widened, finish=finish)
