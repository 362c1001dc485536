"""The int8 rule: uint8 x int8 -> int32 contractions (quantized matmuls and convs) with VNNI.

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
i32>``), and its accumulator must live in global memory; ``VNNI_LOCAL`` below is the same
instruction on a register tile.
"""

from __future__ import annotations

import math

import tvm
from tvm import tirx
from tvm.s_tir import Schedule, TensorIntrin
from tvm.script import tirx as T
from tvm.target import Target

from .common import (
    PREPROC,
    Rule,
    inline_chain,
    is_constant,
    one_reduction,
    plain_index,
    schedule_spatial,
    uses,
)

ROWS = (8, 7, 6, 5, 4, 3, 2, 1)  # register-tile rows, the largest that divides the rows
REGISTERS = 28  # accumulators a tile may use (of AVX-512's 32 registers)


def _intrinsic(lanes: int) -> tuple:
    """(description, implementation) of one ``vpdpbusd`` on ``lanes`` int32 accumulators
    (16: zmm, 8: ymm, 4: xmm; the narrower forms need AVX512-VL, which every AVX512-VNNI CPU
    has): ``c[i] += sum_k a[k] * b[i, k]`` for k < 4, ``a`` broadcast to every lane."""

    @T.prim_func(s_tir=True)
    def desc(a: T.Buffer((4,), "uint8", offset_factor=1), b: T.Buffer((lanes, 4), "int8", offset_factor=1),
             c: T.Buffer((lanes,), "int32", offset_factor=1, scope="local")) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:4], b[0:lanes, 0:4])
            T.writes(c[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        c[vi] = c[vi] + T.cast(a[vk], "int32") * T.cast(b[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def impl(a: T.Buffer((4,), "uint8", offset_factor=1), b: T.Buffer((lanes, 4), "int8", offset_factor=1),
             c: T.Buffer((lanes,), "int32", offset_factor=1, scope="local")) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:4], b[0:lanes, 0:4])
            T.writes(c[0:lanes])
            four = T.reinterpret(a.vload([0], "uint8x4"), dtype="int32")
            c[T.ramp(T.int32(0), 1, lanes)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id(f"llvm.x86.avx512.vpdpbusd.{32 * lanes}"),
                c.vload([0], dtype=f"int32x{lanes}"), T.reinterpret(T.broadcast(four, lanes), dtype=f"int8x{4 * lanes}"),
                b.vload([0, 0], dtype=f"int8x{4 * lanes}"), dtype=f"int32x{lanes}")

    return desc, impl


VNNI_LOCAL = {lanes: f"hetc_dot_{lanes}x4_u8i8i32_vnni_local" for lanes in (16, 8, 4)}
for _lanes, _name in VNNI_LOCAL.items():
    TensorIntrin.register(_name, *_intrinsic(_lanes), override=True)


def has_vnni(target: Target) -> bool:
    return bool(tvm.target.codegen.target_has_features("avx512vnni", target))


def apply(func: tirx.PrimFunc, target: Target, lanes: int) -> Schedule | None:
    del lanes
    if not has_vnni(target) or not {"uint8", "int8"} <= {str(getattr(p, "dtype", "")) for p in func.params}:
        return None  # (checked on the parameters: printing every kernel cost ~3 ms each)
    found = one_reduction(func)
    if found is None:
        return None
    sch, infos, main = found
    if not _schedule(sch, infos, main):
        return None
    return sch


def _operands(sch: Schedule, block, spatial, reduce):
    """(A's read index, W's read index, position of j in W, position of k in W), or None."""
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
        if str(src.dtype) == "uint8" and not any(uses(e, j) for e in indices) and plain_index(indices, k) == len(indices) - 1:
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


def _schedule(sch: Schedule, infos, main) -> bool:
    spatial = [it for it in main.iters if it.kind == "S"]
    reduce = [it for it in main.iters if it.kind == "R"]
    if not spatial or not reduce or [it.kind for it in main.iters] != ["S"] * len(spatial) + ["R"] * len(reduce):
        return False
    if not all(isinstance(it.dom, int) for it in main.iters):
        return False
    j, k = spatial[-1], reduce[-1]
    lanes = next((n for n in VNNI_LOCAL if j.dom % n == 0), None)
    if lanes is None or k.dom % 4:
        return False
    found = _operands(sch, main.block_rv, spatial, reduce)
    if found is None:
        return False
    _, w_idx, pj, pk = found
    rows_axes = spatial[:-1]  # none for one row (a classifier at batch 1, whose unit axes normalize away)
    jb = _panels(j.dom, lanes)
    rows = next(r for r in ROWS if r * jb <= REGISTERS and (not rows_axes or rows_axes[-1].dom % r == 0))
    if rows < 4 and math.prod(it.dom for it in rows_axes) % 8 == 0 and len(rows_axes) > 1:
        rows = 0  # the innermost row axis is too short for a tile: fuse the rows first
    # Producers: plain copies are inlined, the (conditional) padding stays a separate pass.
    for producer in reversed(infos[:infos.index(main)]):
        if "if_then_else" in sch.get(producer.block_rv).body.script():
            schedule_spatial(sch, producer.block_rv, 16)
        else:
            sch.compute_inline(producer.block_rv)

    preproc = sch.cache_read(main.block_rv, w_idx, "global")
    sch.annotate(preproc, PREPROC, True)
    sch.transform_layout(main.block_rv, ("read", w_idx), _packed(pj, pk, lanes))

    loops = dict(zip([it.var for it in main.iters], sch.get_loops(main.block_rv)[-len(main.iters):]))
    jo, jbl, jl = sch.split(loops[j.var], [None, jb, lanes])
    ko, k4 = sch.split(loops[k.var], [None, 4])
    if not rows_axes:
        outer, ri = [], None
    elif rows:
        xo, ri = sch.split(loops[rows_axes[-1].var], [None, rows])
        outer = [loops[it.var] for it in rows_axes[:-1]] + [xo]
    else:
        fused = sch.fuse(*[loops[it.var] for it in rows_axes])
        total = math.prod(it.dom for it in rows_axes)
        rows = next(r for r in ROWS if total % r == 0 and r * jb <= REGISTERS)
        mo, ri = sch.split(fused, [None, rows])
        outer = [mo]
    others = [loops[it.var] for it in reduce[:-1]]
    sch.reorder(*outer, jo, *others, ko, *([ri] if ri is not None else []), jbl, jl, k4)
    tile = sch.fuse(*outer, jo) if outer else jo
    acc = sch.cache_write(main.block_rv, 0, "local")
    epilogue = inline_chain(sch, acc, infos, main)
    sch.reverse_compute_at(epilogue, tile, preserve_unit_loops=True)
    sch.parallel(tile)
    sch.decompose_reduction(main.block_rv, others[0] if others else ko)
    sch.tensorize(jl, VNNI_LOCAL[lanes])
    if ri is not None:
        sch.unroll(ri)
    sch.unroll(jbl)
    return True


def _panels(columns: int, lanes: int) -> int:
    """Vectors of ``lanes`` per column panel of a tile: two zmm where they divide the columns,
    else one; narrower vectors (columns not a multiple of 16, e.g. MobileNetV2's 24) up to 32
    columns, so that 24 is one panel of 3 ymm."""
    if lanes == 16:
        return 2 if columns % 32 == 0 else 1
    return next(b for b in (4, 3, 2, 1) if (columns // lanes) % b == 0 and b * lanes <= 32)


def _packed(pj: int, pk: int, lanes: int):
    """``[.., j, .., k] -> [j / lanes, .., k / 4, j % lanes, k % 4]`` (the other axes in order)."""

    def index_map(*axes):
        rest = [a for n, a in enumerate(axes) if n not in (pj, pk)]
        return (axes[pj] // lanes, *rest, axes[pk] // 4, axes[pj] % lanes, axes[pk] % 4)

    return index_map


RULE = Rule("int8-vnni", "uint8 x int8 -> int32 contractions on AVX512-VNNI (vpdpbusd register tile)", apply)
