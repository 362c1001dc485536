"""Two schedules of one kernel in one function, chosen at run time by a condition on its dims.

A contraction over symbolic rows (``batch * seq``) is scheduled for many rows: a register
tile of several rows, the rows padded to whole tiles. At one row (a decoding step) that is
several times the multiply-adds, plus a pad and an unpad pass, around a weight that is
streamed from memory either way. ``with_dispatch(general, special, cond)`` builds

    root:
        weight packing (the general schedule's; run at compile time)
        if cond: the special schedule's loops (reading the same packed weight)
        else:    the general schedule's loops

so that both paths share one packed copy of each weight. The two schedules must pack their
weights alike (the same panel width): the special schedule's packing blocks are dropped and
its reads go to the general schedule's packed buffers, matched in order. (Kernels without
packed weights, such as attention's ``scores @ V``, just get the two branches.)

TVM 0.27's Python API has no TIR substitution (no ``stmt_functor``), so the special branch's
packed buffers are renamed in the printed function, which is then parsed back: the printer
gives every distinct buffer a distinct name, so the rename touches exactly those buffers.
Returns None when anything does not match; the caller then keeps the general schedule.
"""

from __future__ import annotations

import logging
import re

import tvm
from tvm import tirx
from tvm.s_tir import SBlock, SBlockRealize

from .common import PREPROC

log = logging.getLogger(__name__)

_WRITES = re.compile(r"T\.writes\((\w+)\[")


def with_dispatch(general: tirx.PrimFunc, special: tirx.PrimFunc, cond) -> tirx.PrimFunc | None:
    """``general`` and ``special`` (schedules of the same function) under ``if cond``, sharing
    the general schedule's packed weights; None if they cannot be combined."""
    try:
        return _combine(general, special, cond)
    except Exception as err:  # noqa: BLE001 -- TVM's printer/parser raise several kinds
        log.debug("no run-time dispatch for %s: %s", (general.attrs or {}).get("global_symbol"), err)
        return None


def _top(realize) -> tuple[SBlock, list]:
    block = realize.block
    body = block.body
    return block, list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]


def _packing(stmts: list) -> tuple[list, list, list[str]]:
    """(the weight packing statements, the rest, the buffers they write, in order)."""
    packs, rest, names = [], [], []
    for st in stmts:
        text = st.script()
        if PREPROC in text:
            packs.append(st)
            names += _WRITES.findall(text)
        else:
            rest.append(st)
    return packs, rest, names


def _seq(stmts: list):
    return tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0]


def _combine(general: tirx.PrimFunc, special: tirx.PrimFunc, cond) -> tirx.PrimFunc | None:
    if not isinstance(general.body, SBlockRealize) or not isinstance(special.body, SBlockRealize):
        return None
    root_g, stmts_g = _top(general.body)
    root_s, stmts_s = _top(special.body)
    packs_g, rest_g, names_g = _packing(stmts_g)
    _, rest_s, names_s = _packing(stmts_s)
    if len(names_g) != len(names_s) or not rest_s or not rest_g:
        return None
    packed_s = {b.name: b for b in root_s.alloc_buffers if b.name in names_s}
    packed_g = {b.name: b for b in root_g.alloc_buffers if b.name in names_g}
    for name_s, name_g in zip(names_s, names_g):  # the same packed layout, or no sharing
        bs, bg = packed_s.get(name_s), packed_g.get(name_g)
        if bs is None or bg is None or bs.dtype != bg.dtype or [int(d) for d in bs.shape] != [int(d) for d in bg.shape]:
            return None
    allocs = list(root_g.alloc_buffers) + list(root_s.alloc_buffers)
    branch = tirx.IfThenElse(cond, _seq(rest_s), _seq(rest_g))
    root = SBlock([], [], [], "root", _seq([*packs_g, branch]), alloc_buffers=allocs)
    combined = general.with_body(SBlockRealize([], True, root))

    lines = combined.script().split("\n")
    alloc_lines = [i for i, line in enumerate(lines) if "T.sblock_alloc_buffer(" in line]
    if len(alloc_lines) != len(allocs):
        return None
    printed = [lines[i].split("=", 1)[0].strip() for i in alloc_lines]
    offset = len(root_g.alloc_buffers)
    drop = set()
    general_index = {b.name: k for k, b in enumerate(root_g.alloc_buffers)}
    for k, buffer in enumerate(root_s.alloc_buffers):
        if buffer.name in names_s:
            old = printed[offset + k]
            new = printed[general_index[names_g[names_s.index(buffer.name)]]]
            drop.add(alloc_lines[offset + k])
            lines = [re.sub(rf"\b{re.escape(old)}\b", new, line) for line in lines]
    text = "\n".join(line for i, line in enumerate(lines) if i not in drop)
    return tvm.script.from_source(text)
