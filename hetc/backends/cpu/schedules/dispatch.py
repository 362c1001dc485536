"""Schedules of one kernel in one function, chosen at run time by conditions on its dims.

A contraction over symbolic rows (``batch * seq``) is scheduled for many rows: a register
tile of several rows along ``seq``, the rows padded to whole tiles. At one row (a decoding
step) that is several times the multiply-adds, plus a pad and an unpad pass, around a weight
that is streamed from memory either way; at one row per sequence of a batch, a padded tile
per sequence. ``with_dispatches(general, [(special, cond), ...])`` builds

    root:
        weight packing (the general schedule's; run at compile time)
        if cond1: the first special schedule's loops (reading the same packed weight)
        elif ...: the next one's
        else:     the general schedule's loops

so that every path shares one packed copy of each weight. The schedules must pack their
weights alike (the same panel width): the special schedules' packing blocks are dropped and
their reads go to the general schedule's packed buffers, matched in order. (Kernels without
packed weights, such as attention's ``scores @ V``, just get the branches.)

TVM 0.27's Python API has no TIR substitution (no ``stmt_functor``), so the special branches'
packed buffers are renamed in the printed function, which is then parsed back: the printer
gives every distinct buffer a distinct name, so the rename touches exactly those buffers.
A parsed-back function has symbols (``batch``, ``seq``) of its own, so all branches are
combined in one go. Returns None when anything does not match; the caller then keeps the
general schedule.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import tvm
from tvm import tirx
from tvm.s_tir import SBlock, SBlockRealize

from .common import MAX_SCRIPT, PREPROC

log = logging.getLogger(__name__)

_WRITES = re.compile(r"T\.writes\((\w+)\[")


def with_dispatches(general: tirx.PrimFunc, specials: list[tuple[tirx.PrimFunc, object]],
                    edit: Callable[[str], str] = str) -> tirx.PrimFunc | None:
    """``general`` and several special schedules, the first whose condition holds taken
    (``if c1: s1 elif c2: s2 ... else: general``), all sharing the general schedule's packed
    weights; None if they cannot be combined. ``edit`` rewrites the printed combination
    before it is parsed back (one print and parse for both)."""
    try:
        return _combine(general, specials, edit)
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


def _combine(general: tirx.PrimFunc, specials: list[tuple[tirx.PrimFunc, object]],
             edit: Callable[[str], str]) -> tirx.PrimFunc | None:
    if not specials or not all(isinstance(f.body, SBlockRealize) for f in [general] + [f for f, _ in specials]):
        return None
    root_g, stmts_g = _top(general.body)
    packs_g, rest_g, names_g = _packing(stmts_g)
    packed_g = {b.name: b for b in root_g.alloc_buffers if b.name in names_g}
    allocs = list(root_g.alloc_buffers)
    branch = _seq(rest_g)
    roots = []
    for special, cond in reversed(specials):
        root_s, stmts_s = _top(special.body)
        _, rest_s, names_s = _packing(stmts_s)
        if len(names_g) != len(names_s) or not rest_s or not rest_g:
            return None
        packed_s = {b.name: b for b in root_s.alloc_buffers if b.name in names_s}
        for name_s, name_g in zip(names_s, names_g):  # the same packed layout, or no sharing
            bs, bg = packed_s.get(name_s), packed_g.get(name_g)
            if bs is None or bg is None or bs.dtype != bg.dtype or [int(d) for d in bs.shape] != [int(d) for d in bg.shape]:
                return None
        branch = tirx.IfThenElse(cond, _seq(rest_s), branch)
        roots.insert(0, (root_s, names_s))
    for root_s, _ in roots:
        allocs += list(root_s.alloc_buffers)
    root = SBlock([], [], [], "root", _seq([*packs_g, branch]), alloc_buffers=allocs)
    combined = general.with_body(SBlockRealize([], True, root))

    text = combined.script()
    if len(text) > MAX_SCRIPT:
        return None
    lines = text.split("\n")
    alloc_lines = [i for i, line in enumerate(lines) if "T.sblock_alloc_buffer(" in line]
    if len(alloc_lines) != len(allocs):
        return None
    printed = [lines[i].split("=", 1)[0].strip() for i in alloc_lines]
    general_index = {b.name: k for k, b in enumerate(root_g.alloc_buffers)}
    drop = set()
    renames = []
    offset = len(root_g.alloc_buffers)
    for root_s, names_s in roots:
        for k, buffer in enumerate(root_s.alloc_buffers):
            if buffer.name in names_s:
                renames.append((printed[offset + k], printed[general_index[names_g[names_s.index(buffer.name)]]]))
                drop.add(alloc_lines[offset + k])
        offset += len(root_s.alloc_buffers)
    for old, new in renames:
        lines = [re.sub(rf"\b{re.escape(old)}\b", new, line) for line in lines]
    text = "\n".join(line for i, line in enumerate(lines) if i not in drop)
    return tvm.script.from_source(edit(text))
