"""The AMX rule: uint8 x int8 -> int32 contractions on Intel's tile unit (Sapphire Rapids on).

The same blocks as the VNNI rule (``int8.py``: ``C[.., i, j] += int32(A[.., i, k]) *
int32(W[.., j, .., k])``, A uint8, W an int8 constant), where the CPU has AMX-INT8 and the
shapes fill tiles: j a multiple of 16, k of 64, and A's rows along the innermost row axis a
fixed number of rows apart (matmuls, convs of any stride: a tile load takes a row stride), that
axis divisible by a tile height from 16 down to 4. One ``tdpbusd`` multiplies a tile of R x 64 uint8 (R <= 16 rows
of A) by 64 x 16 int8 (W) into R x 16 int32: 1,024 products, 16 times a 512-bit ``vpdpbusd``.
The schedule keeps up to 2 x 2 accumulator tiles in the tile registers for a whole reduction:

    parallel for (row tiles of TR*R rows, column panels of TC*16):
      ldtilecfg; tilezero tmm0-3                           # init (once per tile)
      for the other reduction axes (kh, kw), k_o:          # update, 64 k per step
        tileloadd tmm4-5 <- A[rows, 64 k]; tileloadd tmm6-7 <- W'[panel, 16 k/4, 16, 4]
        tdpbusd tmm[2 r + c] += tmm[4 + r] . tmm[6 + c]
      tilestored tmm0-3 -> an int32 tile in memory; epilogue (zero points, requantize)

W is packed as for VNNI (``[j / 16, .., k / 4, j % 16, k % 4]``): 16 consecutive k/4 rows of
one 16-column panel are one B tile, rows 64 bytes apart. The accumulator buffer the schedule
names (``C_local``) is a stand-in for the tile registers: the init, update and store
intrinsics below state what they compute on it for tensorize, and their implementations keep
it in tmm0-3 (physical tile registers: LLVM's legacy AMX intrinsics take them as immediates
and allocate no others, so the values stay there across the loop). The store intrinsic's
description is a copy of the tile into a buffer the epilogue reads.

Linux hands out AMX's tile state only to processes that ask (``arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)``); without it the first tile instruction raises SIGILL. Every library hetc
writes asks when it is loaded (``pool.cc``), and ``request_permission`` asks for a process that
runs such code from a module it built itself.
"""

from __future__ import annotations

import ctypes
import functools
import math
import platform
import re
from collections.abc import Iterable

import tvm
from tvm import tirx
from tvm.s_tir import Schedule, TensorIntrin
from tvm.script import tirx as T
from tvm.target import Target

from .common import PREPROC, Rule, inline_chain, on_fresh_stack, one_reduction, uses
from .int8 import operands, stage_producers

ROWS = range(16, 3, -1)  # tile rows: the largest that divides the innermost row axis, at least 4
A_TILES, B_TILES = (4, 5), (6, 7)  # tile registers of the operands; 0-3 accumulate
# A shorter reduction (a 1x1 conv over 64 channels: one tdpbusd per tile) stays on VNNI: the
# tile's configuration, zeroing and store outweigh one step. ResNet-50 int8's 56x56 64-channel
# 1x1 convs ran 1.2-1.6x slower on AMX than on VNNI, its 3x3 convs 0.47-0.66x (2-core Intel
# Xeon, LLVM emeraldrapids, per kernel in one process).
MIN_REDUCTION = 128


def has_amx(target: Target) -> bool:
    return all(tvm.target.codegen.target_has_features(f, target) for f in ("amx-tile", "amx-int8"))


@functools.cache
def request_permission() -> bool:
    """Ask Linux for AMX's tile state in this process (once); True if granted or not needed
    (not x86-64 Linux). Libraries hetc writes ask for themselves when loaded (``pool.cc``)."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return True
    sys_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata = 158, 0x1023, 18
    return ctypes.CDLL(None, use_errno=True).syscall(sys_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0


def _call(name: str, *args):
    return T.call_llvm_intrin("void", f"llvm.x86.{name}", *args)


def _config(cfg, rows: int) -> None:
    """Emit (inside a TVMScript function being parsed) the stores of the 64-byte tile
    configuration, palette 1: accumulators and A tiles ``rows`` x 64 bytes, B tiles 16 x 64;
    then ``ldtilecfg``."""
    data = [0] * 64
    data[0] = 1
    for t in range(8):
        data[16 + 2 * t] = 64
        data[48 + t] = 16 if t in B_TILES else rows
    for i, byte in enumerate(data):
        T.buffer_store(cfg, T.uint8(byte), [i])
    T.evaluate(_call("ldtilecfg", cfg.access_ptr("w")))


_registered: set[str] = set()  # the init intrinsic's name of each registered triple
_NAME = re.compile(r"hetc_amx_(?:init|update|store)_(\d+)x(\d+)x(\d+)_s(\d+)")


def register_traced(traces: Iterable[str]) -> None:
    """Register the AMX intrinsics that schedule traces (a tuning database's records, as JSON
    text) name, so that replaying them can tensorize: this module registers each on first use,
    and a process that only applies a database has scheduled nothing."""
    for text in traces:
        for rows, tr, tc, stride in set(_NAME.findall(text)):
            _intrinsics(int(rows), int(tr), int(tc), int(stride))


def _intrinsics(rows: int, tr: int, tc: int, stride: int) -> tuple[str, str, str]:
    """Names of the (init, update, store) tensor intrinsics for ``tr`` x ``tc`` accumulator tiles
    of ``rows`` x 16 (``tr`` * ``rows`` rows of A, ``stride`` rows of A apart, ``tc`` panels of
    W), registered on first use (built on a fresh stack: ``common.on_fresh_stack``)."""
    names = tuple(f"hetc_amx_{part}_{rows}x{tr}x{tc}_s{stride}" for part in ("init", "update", "store"))
    if names[0] not in _registered:
        parts = on_fresh_stack(lambda: (_init(rows, tr, tc), _update(rows, tr, tc, stride), _store(rows, tr, tc)))
        for name, (desc, impl) in zip(names, parts):
            TensorIntrin.register(name, desc, impl, override=True)
        _registered.add(names[0])
    return names


def _registers(tr: int, tc: int) -> list[tuple[int, int, int]]:
    """(row tile, column tile, accumulator register) of each accumulator tile."""
    return [(r, c, r * tc + c) for r in range(tr) for c in range(tc)]


def _init(rows: int, tr: int, tc: int):
    """``c = 0`` on the accumulator tiles: the tile configuration loaded, then ``tilezero``."""
    m, n = rows * tr, 16 * tc

    def emit():
        cfg = T.alloc_buffer((64,), "uint8", scope="local")
        _config(cfg, rows)
        for _, _, reg in _registers(tr, tc):
            T.evaluate(_call("tilezero", T.uint8(reg)))

    @T.prim_func(s_tir=True)
    def desc(c: T.Buffer((m, n), "int32", offset_factor=1, scope="local")) -> None:
        with T.sblock("root"):
            T.reads()
            T.writes(c[0:m, 0:n])
            for i, j in T.grid(m, n):
                with T.sblock("init"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    c[vi, vj] = 0

    @T.prim_func(s_tir=True)
    def impl(c: T.Buffer((m, n), "int32", offset_factor=1, scope="local")) -> None:
        with T.sblock("root"):
            T.reads()
            T.writes(c[0:m, 0:n])
            emit()

    return desc, impl


def _update(rows: int, tr: int, tc: int, stride: int):
    """``c[i, j] += a[stride * i, k] * b[j / 16, k / 4, j % 16, k % 4]`` for k < 64 (``stride``: a
    strided conv's rows of A): each A row tile and W panel loaded once, ``tdpbusd`` into every
    accumulator tile."""
    m, n = rows * tr, 16 * tc
    span = (m - 1) * stride + 1  # rows of A the tile reads from

    def emit(a, b, sa, sb):
        for r in range(tr):
            T.evaluate(_call("tileloadd64", T.uint8(A_TILES[r]), a.access_ptr("r", offset=r * rows * stride * sa),
                             T.int64(stride) * T.int64(sa)))
        for c in range(tc):
            T.evaluate(_call("tileloadd64", T.uint8(B_TILES[c]), b.access_ptr("r", offset=c * sb), T.int64(64)))
        for r, c, reg in _registers(tr, tc):
            T.evaluate(_call("tdpbusd", T.uint8(reg), T.uint8(A_TILES[r]), T.uint8(B_TILES[c])))

    @T.prim_func(s_tir=True)
    def desc(a: T.Buffer((span, 64), "uint8", offset_factor=1), b: T.Buffer((tc, 16, 16, 4), "int8", offset_factor=1),
             c: T.Buffer((m, n), "int32", offset_factor=1, scope="local")) -> None:
        with T.sblock("root"):
            T.reads(c[0:m, 0:n], a[0:span, 0:64], b[0:tc, 0:16, 0:16, 0:4])
            T.writes(c[0:m, 0:n])
            for i, j, k in T.grid(m, n, 64):
                with T.sblock("update"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    c[vi, vj] = c[vi, vj] + T.cast(a[vi * stride, vk], "int32") * T.cast(
                        b[vj // 16, vk // 4, vj % 16, vk % 4], "int32")

    @T.prim_func(s_tir=True)
    def impl(a_h: T.handle, b_h: T.handle, c_h: T.handle) -> None:
        sa = T.int32()
        sb = T.int32()
        a = T.match_buffer(a_h, (span, 64), "uint8", offset_factor=1, strides=[sa, 1])
        b = T.match_buffer(b_h, (tc, 16, 16, 4), "int8", offset_factor=1, strides=[sb, 64, 4, 1])
        c = T.match_buffer(c_h, (m, n), "int32", offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(c[0:m, 0:n], a[0:span, 0:64], b[0:tc, 0:16, 0:16, 0:4])
            T.writes(c[0:m, 0:n])
            emit(a, b, sa, sb)

    return desc, impl


def _store(rows: int, tr: int, tc: int):
    """``d = c``: the accumulator tiles stored (``tilestored64``) into the int32 tile ``d`` that
    the epilogue reads, then the tile state released."""
    m, n = rows * tr, 16 * tc

    def emit(d, sd):
        for r, c, reg in _registers(tr, tc):
            T.evaluate(_call("tilestored64", T.uint8(reg), d.access_ptr("w", offset=r * rows * sd + 16 * c),
                             T.int64(4) * T.int64(sd)))
        T.evaluate(_call("tilerelease"))

    @T.prim_func(s_tir=True)
    def desc(c: T.Buffer((m, n), "int32", offset_factor=1, scope="local"),
             d: T.Buffer((m, n), "int32", offset_factor=1, scope="local")) -> None:
        with T.sblock("root"):
            T.reads(c[0:m, 0:n])
            T.writes(d[0:m, 0:n])
            for i, j in T.grid(m, n):
                with T.sblock("store"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    d[vi, vj] = c[vi, vj]

    @T.prim_func(s_tir=True)
    def impl(c_h: T.handle, d_h: T.handle) -> None:
        sd = T.int32()
        c = T.match_buffer(c_h, (m, n), "int32", offset_factor=1, scope="local")
        d = T.match_buffer(d_h, (m, n), "int32", offset_factor=1, scope="local", strides=[sd, 1])
        with T.sblock("root"):
            T.reads(c[0:m, 0:n])
            T.writes(d[0:m, 0:n])
            emit(d, sd)

    return desc, impl


def _packed(pj: int, pk: int):
    """``[.., j, .., k] -> [.., j / 16, k / 4, j % 16, k % 4]`` (the other axes, a conv's kh and
    kw, first: a tile's two panels are then the leading dim of the region it reads)."""

    def index_map(*axes):
        rest = [a for n, a in enumerate(axes) if n not in (pj, pk)]
        return (*rest, axes[pj] // 16, axes[pk] // 4, axes[pj] % 16, axes[pk] % 4)

    return index_map


def apply(func: tirx.PrimFunc, target: Target, lanes: int) -> Schedule | None:
    del lanes
    if not has_amx(target) or not {"int8", "uint8"} <= {str(getattr(p, "dtype", "")) for p in func.params}:
        return None
    request_permission()  # this process may run what it builds (a cross-compile's is refused: harmless)
    found = one_reduction(func)
    if found is None:
        return None
    sch, infos, main = found
    return sch if _schedule(sch, infos, main) else None


def _row_stride(sch: Schedule, block, a_idx: int, row) -> int | None:
    """How many rows of A apart the block's rows along ``row`` read (``w + kw``: 1, ``2 w + kw``
    or ``2 w``: 2), or None when A's index is of another form."""
    indices = [r.min for r in sch.get(block).reads[a_idx].region]
    using = [e for e in indices if uses(e, row.var)]
    if len(using) != 1:
        return None
    index = using[0]
    if isinstance(index, tirx.Add):
        terms = [t for t in (index.a, index.b) if uses(t, row.var)]
        if len(terms) != 1:
            return None
        index = terms[0]
    if isinstance(index, tirx.Var):
        return 1 if index.same_as(row.var) else None
    if isinstance(index, tirx.Mul):
        for var, factor in ((index.a, index.b), (index.b, index.a)):
            if isinstance(var, tirx.Var) and var.same_as(row.var) and isinstance(factor, tirx.IntImm):
                return int(factor) if int(factor) > 0 else None
    return None


def _schedule(sch: Schedule, infos, main) -> bool:
    spatial = [it for it in main.iters if it.kind == "S"]
    reduce = [it for it in main.iters if it.kind == "R"]
    if len(spatial) < 2 or not reduce or [it.kind for it in main.iters] != ["S"] * len(spatial) + ["R"] * len(reduce):
        return False
    if not all(isinstance(it.dom, int) for it in main.iters):
        return False
    j, k, row = spatial[-1], reduce[-1], spatial[-2]
    if j.dom % 16 or k.dom % 64 or math.prod(it.dom for it in reduce) < MIN_REDUCTION:
        return False
    found = operands(sch, main.block_rv, spatial, reduce, {"uint8"})
    if found is None:
        return False
    a_idx, w_idx, pj, pk = found
    rows = next((r for r in ROWS if row.dom % r == 0), None)
    stride = _row_stride(sch, main.block_rv, a_idx, row)
    if rows is None or stride is None:
        return False
    tr = 2 if (row.dom // rows) % 2 == 0 else 1
    tc = 2 if (j.dom // 16) % 2 == 0 else 1
    init, update, store = _intrinsics(rows, tr, tc, stride)
    stage_producers(sch, infos, main)

    preproc = sch.cache_read(main.block_rv, w_idx, "global")
    sch.annotate(preproc, PREPROC, True)
    sch.transform_layout(main.block_rv, ("read", w_idx), _packed(pj, pk))

    loops = dict(zip([it.var for it in main.iters], sch.get_loops(main.block_rv)[-len(main.iters):]))
    jo, ji = sch.split(loops[j.var], [None, 16 * tc])
    ko, ki = sch.split(loops[k.var], [None, 64])
    xo, xi = sch.split(loops[row.var], [None, rows * tr])
    outer = [loops[it.var] for it in spatial[:-2]] + [xo]
    others = [loops[it.var] for it in reduce[:-1]]
    sch.reorder(*outer, jo, *others, ko, xi, ji, ki)
    tile = sch.fuse(*outer, jo)
    acc = sch.cache_write(main.block_rv, 0, "local")
    epilogue = inline_chain(sch, acc, infos, main)
    sch.reverse_compute_at(epilogue, tile, preserve_unit_loops=True)
    local = sch.get(main.block_rv).writes[0].source
    read = next((n for n, r in enumerate(sch.get(epilogue).reads) if r.source.same_as(local)), None)
    if read is None:
        return False
    tiles = sch.cache_read(epilogue, read, "local")
    sch.parallel(tile)
    zero = sch.decompose_reduction(main.block_rv, others[0] if others else ko)
    sch.tensorize(xi, update)
    sch.tensorize(sch.get_loops(zero)[-2], init)
    sch.tensorize(sch.get_loops(tiles)[-2], store)
    return True


RULE = Rule("int8-amx", "uint8 x int8 -> int32 contractions on AMX-INT8 (tdpbusd on 2 x 2 tile registers)", apply)
