"""Software prefetch of a packed weight streamed from memory by a contraction over few rows.

A decoding step reads every weight once: a matmul over a few rows (the batch of sequences)
streams its packed panels from memory. With one row of float32 weights the loop issues its
loads fast enough for the hardware prefetchers to keep up; with a register tile of several rows
each weight vector is used rows-many times, the loads are spread out, and the stream slowed
down: 2048x2048 weights read at 11.5 GB/s by a one-row loop ran at 8.0 GB/s with four rows (one
core, C with intrinsics, 2-core Intel Xeon, LLVM ``emeraldrapids``, AVX-512). Prefetching each
panel row ``AHEAD_BYTES`` ahead brought four rows to 10.3 GB/s. int8 weights (``--weights
int8``) are spread out even at one row: a step converts each vector to float before its
multiply-add, and reads a quarter of the bytes per step; 96 chained 768 x 2048 int8 matmuls at
one row read 12.2 GB/s without prefetches and 18.4 with them (2 cores, same CPU).

On AMD's Zen 4 the same prefetches made things slower, not faster: its hardware prefetchers
kept up with a tile of several rows, and the extra loads got in the way (2-core AMD EPYC, LLVM
znver4, AVX-512):

- twelve 768 x 3072 float32 matmuls at batch 4: 3.0-3.4 ms without prefetches, 3.8-4.4 ms
  with them (1 KB or 16 KB ahead instead of 4 KB: no better);
- a GPT-2 decoding step at batch 4: 19-20 ms without, 23-25 ms with;
- int8 weights, 48 such matmuls: 3.8 ms without against 4.4 ms with at one row, 6.2 against
  7.2 ms at four rows.

Prefetching one-row float32 tiles as well was tried there: the twelve matmuls took 3.1-3.4 ms
against 3.6-3.9 ms, but a whole Llama 134M step at batch 1 took 13.8-15.6 ms against 12.0-15.3
ms without, so it was not kept. Prefetches are injected only where ``pays(target)``: not on a
Zen core. Only Zen 4 was measured; Zen 3 and Zen 5 are assumed to behave like it.

The contraction rule and the int8 rule (one-row tiles of weight-only int8 matmuls, in
``vpdpwssd``/``vpmaddwd`` steps) mark the loops (``mark``): the parallel loop over column panels
and the reduction loop, the latter with the packed buffer, the reduction steps to look ahead
and the index of each cache line's first element within a step's row (the trailing axes of a
``[panel, k, ..]`` buffer). ``inject`` (or ``inject_text``, on a function
being printed anyway) then adds one ``llvm.prefetch`` per cache line at the top of the
reduction loop's body, for the row ``ahead`` steps on in the same panel (that of the panel loop
above it: each branch of a dispatch has its own). The call would keep LLVM from holding a
workspace-allocated accumulator tile in registers across it; ``passes/stack_locals.py`` puts
the tiles on the stack. TVM 0.27's Python API has no TIR mutator, so this is done on the
printed function, which is parsed back (as ``dispatch.py`` does); a function without the marks
is returned as it is.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import tvm
from tvm import tirx
from tvm.s_tir import Schedule

from .common import MAX_SCRIPT

log = logging.getLogger(__name__)

# A packed weight at least this large is taken to come from memory (beyond a core's L2).
MIN_BYTES = 1 << 20
# How far ahead of the row being read to prefetch (4-8 KB was best in the experiment above).
AHEAD_BYTES = 4096
LINE_BYTES = 64
PANEL = "hetc.prefetch_panel"
STREAM = "hetc.prefetch_stream"

_PANEL_LOOP = re.compile(r"for (\w+) in T\.parallel\([^\n]*\"" + re.escape(PANEL) + r"\"")
_STREAM_LOOP = re.compile(r"^(\s*)for (\w+) in T\.serial\([^\n]*\"" + re.escape(STREAM) + r"\": \"(\w+):(\d+):([\d,;]+)\"")


def mark(sch: Schedule, panel_loop, reduce_loop, packed: tirx.Buffer, row_elements: int) -> bool:
    """Mark a contraction whose parallel loop ``panel_loop`` runs over the column panels of the
    packed weight ``packed`` (``[panel, k, ..]``: the panel, the reduction step, then one step's
    ``row_elements`` elements, contiguous) and whose reduction loop ``reduce_loop`` steps
    through its rows. False (nothing marked) where the panel loop is not itself the parallel
    loop or the weight is not float32 or int8."""
    if len(packed.shape) < 3 or str(packed.dtype) not in ("float32", "int8"):
        return False
    try:
        if sch.get(panel_loop).kind != tirx.ForKind.PARALLEL:
            return False
    except (tvm.error.TVMError, ValueError):  # fused into another loop: no longer a loop of its own
        return False
    itemsize = tvm.runtime.DataType(str(packed.dtype)).bits // 8
    row_bytes = row_elements * itemsize
    ahead = max(1, AHEAD_BYTES // row_bytes)
    inner = [int(n) for n in packed.shape[2:]]
    lines = []  # the index of each cache line's first element within a step's row
    for offset in range(0, max(row_elements, 1), max(1, LINE_BYTES // itemsize)):
        index = []
        for extent in reversed(inner):
            index.append(offset % extent)
            offset //= extent
        lines.append(",".join(map(str, reversed(index))))
    sch.annotate(panel_loop, PANEL, 1)
    sch.annotate(reduce_loop, STREAM, f"{packed.name}:{ahead}:{';'.join(lines)}")
    return True


def pays(target: tvm.target.Target) -> bool:
    """Whether prefetches pay on ``target``'s CPU: not on AMD's Zen cores (module docstring)."""
    return not str(target.attrs.get("mcpu", "")).startswith("znver")


def editor(target: tvm.target.Target) -> Callable[[str], str]:
    """The edit of a printed function for ``target``: ``inject_text`` where prefetches pay
    (``pays``), else the text as it is."""
    return inject_text if pays(target) else str


def inject(func: tirx.PrimFunc, target: tvm.target.Target) -> tirx.PrimFunc:
    """``func`` with the prefetches its marks ask for (``func`` itself when it has none, when
    they do not pay on ``target`` (``pays``), when the printed form is not what
    ``inject_text`` expects, or when it prints longer than ``MAX_SCRIPT``)."""
    if not pays(target):
        return func
    text = func.script()
    edited = inject_text(text)
    if edited == text or len(edited) > MAX_SCRIPT:
        return func
    try:
        return tvm.script.from_source(edited)
    except Exception as err:  # noqa: BLE001 -- the parser raises several kinds
        log.debug("no prefetch for %s: %s", (func.attrs or {}).get("global_symbol"), err)
        return func


def inject_text(text: str) -> str:
    """The printed function ``text`` with the prefetches its marks ask for, as text (``text``
    itself when it has none, or is not what this expects)."""
    if STREAM not in text:
        return text
    out, panel = [], None
    for line in text.split("\n"):
        out.append(line)
        opened = _PANEL_LOOP.search(line)
        if opened:
            panel = opened.group(1)  # the panel loop of the streams below it (each branch has its own)
        found = _STREAM_LOOP.match(line)
        if not found:
            continue
        indent, k, buffer, ahead, lines = found.groups()
        if panel is None or f"{buffer}[" not in text:
            return text
        out += [f'{indent}    T.evaluate(T.call_llvm_intrin("void", "llvm.prefetch.p0", T.address_of('
                f'{buffer}[{panel}, {k} + {ahead}, {", ".join(line.split(","))}]), 0, 3, 1))'
                for line in lines.split(";")]
    return "\n".join(out)
