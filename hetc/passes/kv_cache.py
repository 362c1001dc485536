"""An exported decoder's KV cache as preallocated buffers updated in place.

Exporters write one decoding step with its cache as inputs and outputs: ``past_key_values.X``
in, ``present.X = Concat(past, new)`` out, so every step copies the whole past into a new
present. ``inplace_cache`` rewrites ``main`` so that each cache is one buffer of ``max_len``
positions along the sequence axis, written where the step's entries go and read by the
attention only up to the valid length:

    main(input_ids, attention_mask, [position_ids, ...],            # the step's own inputs
         cache.0 [batch, heads, max_len, head_dim], ...,             # one buffer per past input
         cache_pos [batch] int64,                                    # where each row writes
         past: R.Shape([past_seq])) -> logits                        # the valid prefix read

``present.X = Concat(past, new)`` becomes ``kv_write`` (a hand-written kernel, called in place:
``new`` stored at ``cache_pos[b] + t`` of row b). Attention's matmuls on the present (``Q @ K^T``
through ``permute_dims``, a constant scale, GQA's head repeat or the matmul's broadcast of one
key/value head; ``P @ V``) become kernels reading the written buffer up to the valid length
``past_seq + seq``: ``kv_scores`` / ``kv_mix``. A key cache only ``Q @ K^T`` reads is then
stored transposed in blocks of 64 positions (``[b, kv, max_len / 64, d, 64]``, found by a first
rewrite: ``_scores_only``), and scored by a hand-written kernel that streams the blocks
(``_scores_kernel``). Any other reader
of a present gets ``kv_prefix``, a copy of the valid prefix (correct, not free); a past input
read other than by its concat gets a ``kv_prefix`` of ``past_seq`` positions. Rows may write at
different positions (``cache_pos``): rows of different lengths decode together, each attending
its own prefix through ``attention_mask`` (``hetc.session``).

A present whose value is not such a concat, a cache whose sequence axis is not the one the
past's symbolic length is on, or names that do not pair, raise ``UsageError`` naming them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..errors import UsageError
from ..tir_builder import finished, param

POS_INPUT, PAST_INPUT = "cache_pos", "past"


@dataclass(frozen=True)
class CacheSlot:
    """One cache buffer: the ONNX past input and present output it stands for, the buffer's
    shape with ``max_len`` on ``axis`` (``"batch"``-like names stay symbolic), and its dtype.
    ``transposed``: the buffer holds the exported ``[b, h, past, d]`` with its last two axes
    swapped, in blocks of ``SCORE_TILE`` positions, ``[b, h, max_len / T, d, T]`` (``axis`` 2;
    keys only read by ``Q @ K^T``: each tile of scores then streams one contiguous block). A
    4-d transposed shape, ``[b, h, d, max_len]``, is an artifact built before the blocks."""

    past: str
    present: str
    shape: tuple
    axis: int
    dtype: str
    transposed: bool = False

    def to_json(self) -> dict:
        return {"past": self.past, "present": self.present, "shape": list(self.shape), "axis": self.axis,
                "dtype": self.dtype, "transposed": self.transposed}

    @classmethod
    def from_json(cls, data: dict) -> CacheSlot:
        return cls(str(data["past"]), str(data["present"]), tuple(data["shape"]), int(data["axis"]),
                   str(data["dtype"]), bool(data.get("transposed", False)))


@dataclass(frozen=True)
class CacheLayout:
    """What the in-place ``main`` takes: the step inputs (ONNX names, in order), then the cache
    buffers, ``cache_pos`` and the ``past`` shape. ``past_dim``: the past length's symbolic name;
    ``new_dim``: the step's entry count's (a step input's dim: present length = past + new)."""

    max_len: int
    step_inputs: tuple[str, ...]
    slots: tuple[CacheSlot, ...]
    past_dim: str
    new_dim: str

    def to_json(self) -> dict:
        return {"max_len": self.max_len, "step_inputs": list(self.step_inputs),
                "slots": [s.to_json() for s in self.slots], "past_dim": self.past_dim, "new_dim": self.new_dim}

    @classmethod
    def from_json(cls, data: dict) -> CacheLayout:
        return cls(int(data["max_len"]), tuple(data["step_inputs"]),
                   tuple(CacheSlot.from_json(s) for s in data["slots"]), str(data["past_dim"]), str(data["new_dim"]))


def _write_kernel(shape, axis: int, dtype: str, transposed: bool = False) -> tirx.PrimFunc:
    """``cache[b, .., pos[b] + t, ..] = new[b, .., t, ..]`` for every row b and step entry t; the
    cache is the output (called in place). Parallel over the rows and the axes before ``axis``.
    ``transposed`` (keys in blocks of ``SCORE_TILE`` positions, ``[b, h, max_len / T, d, T]``):
    ``cache[b, h, p // T, e, p % T] = new[b, h, t, e]`` at ``p = pos[b] + t``."""
    n_b, n_t = tirx.Var("batch", "int64"), tirx.Var("seq", "int64")
    if transposed:
        return _write_transposed(shape, dtype, n_b, n_t)
    dims = [int(d) for d in shape[1:]]
    outer = dims[:axis - 1]  # static dims between the batch and the sequence axis
    inner = dims[axis:]  # static dims after it
    with IRBuilder() as ib, T.prim_func():
        # opaque (op_pattern 8): fusion leaves the in-place write on its own
        T.func_attr({"tir.noalias": True, "tir.is_scheduled": True, "hetc.schedule_rule": "kv_write",
                     "op_pattern": 8})
        cache = param("cache", (n_b, *dims), dtype)
        new = param("new", (n_b, *outer, n_t, *inner), dtype)
        pos = param("pos", (n_b,), "int64")
        rows = 1
        for d in outer:
            rows *= d
        with T.parallel(0, n_b * rows) as r:
            b = r // rows
            rest, lead = r % rows, []
            for d in reversed(outer):
                lead.insert(0, rest % d)
                rest = rest // d
            with T.serial(0, n_t) as t:
                size = 1
                for d in inner:
                    size *= d
                with T.serial(0, size) as e:
                    tail, rest = [], e
                    for d in reversed(inner):
                        tail.insert(0, rest % d)
                        rest = rest // d
                    T.buffer_store(cache, new[(b, *lead, t, *tail)], [b, *lead, pos[b] + t, *tail])
    return finished(ib)


def _write_transposed(shape, dtype: str, n_b, n_t) -> tirx.PrimFunc:
    heads, blocks, width, tile = (int(d) for d in shape[1:])
    with IRBuilder() as ib, T.prim_func():
        T.func_attr({"tir.noalias": True, "tir.is_scheduled": True, "hetc.schedule_rule": "kv_write",
                     "op_pattern": 8})
        cache = param("cache", (n_b, heads, blocks, width, tile), dtype)
        new = param("new", (n_b, heads, n_t, width), dtype)
        pos = param("pos", (n_b,), "int64")
        with T.parallel(0, n_b * heads) as r:
            b, h = r // heads, r % heads
            with T.serial(0, n_t) as t, T.serial(0, width) as e:
                at = pos[b] + t
                T.buffer_store(cache, new[b, h, t, e], [b, h, at // tile, e, at % tile])
    return finished(ib)


SCORE_TILE = 64  # scores per vector tile: 4 AVX-512 / 8 AVX2 registers of float32 accumulators
SCORE_QUERIES = 4  # queries sharing each loaded row of keys (a prompt's): 16 AVX-512 accumulators


def _scores_kernel(kv_shape, heads: int, dtype: str) -> tirx.PrimFunc:
    """``out[b, h, q, k] = sum_e x[b, h, q, e] * keys[b, h // g, k // T, e, k % T]`` for k below
    the valid length (``out``'s last dim), over keys stored transposed in blocks of ``T =
    SCORE_TILE`` positions, ``[b, kv, max_len / T, d, T]``: for each tile of T positions, one
    broadcast of ``x[e]`` times a contiguous row of the block per e, into vector accumulators;
    parallel over rows and heads. The contraction rule would pack the keys into panels first: a
    copy of the whole valid cache every step.

    Each tile's keys are one contiguous 16 KB block (at 64 wide). Stored ``[b, kv, d, max_len]``,
    a tile read 64 runs of 256 bytes, ``max_len`` floats apart: 64 interleaved streams from
    memory. The scores of 12 layers' keys at batch 4 and past 1,984 (98 MB) took 5.7-6.0 ms
    that way and 2.9-3.8 ms in blocks (2-core AMD EPYC, LLVM znver4, AVX-512).

    A step scores one query; a prompt scores many, ``SCORE_QUERIES`` at a time: each row of
    keys loaded once for all of them, the tile's keys kept in L1 across the prompt's queries.
    One query at a time, each multiply-add loaded its keys from L2: Llama 134M's 1,024-token
    prompt spent 400 ms of 1.8 s in this kernel (48 GFLOP/s), then 110-125 ms (2-core Intel
    Xeon, LLVM emeraldrapids, AVX-512)."""
    kv, blocks, width, tile = (int(d) for d in kv_shape)
    group = heads // kv
    n_b, n_s, n_k = (tirx.Var(name, "int64") for name in ("batch", "seq", "total"))
    zero = tirx.const(0, dtype)
    with IRBuilder() as ib, T.prim_func():
        T.func_attr({"tir.noalias": True, "tir.is_scheduled": True, "hetc.schedule_rule": "kv_scores",
                     "op_pattern": 8})
        x = param("x", (n_b, heads, n_s, width), dtype)
        keys = param("keys", (n_b, kv, blocks, width, tile), dtype)
        out = param("out", (n_b, heads, n_s, n_k), dtype)
        full = n_k // tile
        grouped = n_s // SCORE_QUERIES * SCORE_QUERIES
        with T.parallel(0, n_b * heads) as r:
            b, h = r // heads, r % heads
            src = h // group if group > 1 else h
            # one buffer of accumulators per query: TVM allocates 1 KB or more on the heap,
            # where LLVM cannot keep it in registers (it stored them at every multiply-add);
            # the last tile's lanes go out through a copy, for the same reason (an index known
            # only at run time)
            acc = [T.decl_buffer((tile,), dtype, scope="global", layout=None) for _ in range(SCORE_QUERIES)]
            lanes = T.decl_buffer((tile,), dtype, scope="global", layout=None)

            def scores(first, count: int, block, store) -> None:
                """Scores of queries ``first .. first + count`` at the positions of ``block``,
                into ``acc``, then ``store(query, row)`` for each."""
                for c in range(count):
                    with T.vectorized(0, tile) as lane:
                        T.buffer_store(acc[c], zero, [lane])
                with T.serial(0, width) as e:
                    for c in range(count):
                        with T.vectorized(0, tile) as lane:
                            T.buffer_store(acc[c], acc[c][lane] + x[b, h, first + c, e] * keys[b, src, block, e, lane],
                                           [lane])
                for c in range(count):
                    store(first + c, c)

            def whole(block):
                def store(q, c):
                    with T.vectorized(0, tile) as lane:
                        T.buffer_store(out, acc[c][lane], [b, h, q, block * tile + lane])
                return store

            # the block holding the valid length: only its valid lanes are stored (the others read
            # buffer slots beyond the length)
            def last(q, c):
                with T.vectorized(0, tile) as lane:
                    T.buffer_store(lanes, acc[c][lane], [lane])
                with T.serial(0, n_k - full * tile) as k:
                    T.buffer_store(out, lanes[k], [b, h, q, full * tile + k])

            def queries(block, store) -> None:
                with T.serial(0, n_s // SCORE_QUERIES) as g:
                    scores(g * SCORE_QUERIES, SCORE_QUERIES, block, store)
                with T.serial(0, n_s - grouped) as q:
                    scores(grouped + q, 1, block, store)

            with T.serial(0, full) as t:
                queries(t, whole(t))
            with T.serial(0, T.min(n_k - full * tile, 1)):
                queries(full, last)
    return finished(ib)


def _prefix(bb: relax.BlockBuilder, buffer: relax.Expr, axis: int, length, transposed: bool = False) -> relax.Expr:
    """Positions ``[0, length)`` of ``buffer`` along ``axis``, as an injective kernel (``call_te``)
    that fusion can fold into what reads it; of a ``transposed`` buffer, in the exported layout."""
    from tvm import te

    def compute(x):
        shape = list(x.shape)
        if transposed:
            b, h, _, d, tile = shape
            return te.compute((b, h, length, d), lambda i, j, k, e: x[i, j, k // tile, e, k % tile],
                              name="kv_prefix")
        shape[axis] = length
        return te.compute(shape, lambda *i: x(*i), name="kv_prefix")

    return bb.emit(bb.call_te(compute, buffer, primfunc_name_hint="kv_prefix"))


def _resolve(bindings: dict, expr: relax.Expr) -> relax.Expr:
    """``expr`` through one-input concats (identity copies torch's exporter writes)."""
    while isinstance(expr, relax.Var) and expr in bindings:
        value = bindings[expr]
        if (isinstance(value, relax.Call) and value.op == _op("relax.concat")
                and isinstance(value.args[0], relax.Tuple) and len(value.args[0].fields) == 1):
            expr = value.args[0].fields[0]
        else:
            break
    return expr


def inplace_cache(mod: tvm.IRModule, pairs: list[tuple[str, str]], step_inputs: list[str],
                  outputs: list[str], max_len: int) -> tuple[tvm.IRModule, CacheLayout]:
    """``mod`` with ``main`` in the in-place form (module docstring) and its ``CacheLayout``.
    ``pairs``: (past input, present output) names; ``step_inputs``: the other inputs;
    ``outputs``: every output name, in ``main``'s order (the first, logits, is kept)."""
    func = mod["main"]
    params = {p.name: p for p in func.params}

    def input_var(name: str) -> relax.Var:  # the importer's parameter names: dots as underscores
        return params[name] if name in params else params[name.replace(".", "_")]

    bindings = {b.var: b.value for block in func.body.blocks for b in block.bindings}
    fields = bindings.get(func.body.body, func.body.body)
    if not isinstance(fields, relax.Tuple) or len(fields.fields) != len(outputs):
        raise UsageError("cannot keep the cache in place: the decoder's outputs are not one tuple of logits "
                         "and presents")
    by_output = dict(zip(outputs, fields.fields))
    concat = _op("relax.concat")
    slots, concats, past_dim = [], [], None
    for past, present in pairs:
        old = input_var(past)
        value = bindings.get(by_output[present])
        if not (isinstance(value, relax.Call) and value.op == concat and isinstance(value.args[0], relax.Tuple)
                and len(value.args[0].fields) == 2 and _resolve(bindings, value.args[0].fields[0]).same_as(old)):
            raise UsageError(f"cannot keep the cache in place: output '{present}' is not Concat('{past}', new)")
        shape = list(old.ty.shape.values)
        axis = int(value.attrs.axis) % len(shape)
        length = shape[axis]
        if not isinstance(length, tirx.Var) or axis == 0 or any(
                not isinstance(d, tirx.IntImm) for i, d in enumerate(shape) if i not in (0, axis)):
            raise UsageError(f"cannot keep the cache in place: '{past}' {shape} is not [batch, ..., past, ...] with "
                             f"only the batch and the past length (axis {axis}) symbolic")
        if past_dim is not None and not length.same_as(past_dim):
            raise UsageError(f"cannot keep the cache in place: '{past}' has past length {length}, the others "
                             f"{past_dim}")
        past_dim = length
        slots.append(CacheSlot(past, present, tuple(max_len if i == axis else str(d.name) if isinstance(d, tirx.Var)
                                                    else int(d) for i, d in enumerate(shape)), axis, str(old.ty.dtype)))
        concats.append((by_output[present], value.args[0].fields[1]))
    step_params = [input_var(n) for n in step_inputs]
    new_dim = _new_dim(concats[0][0], slots[0], past_dim, step_params)
    concats = [(present, new, _twins(bindings, present, new)) for present, new in concats]
    args = (mod, func, slots, concats, [input_var(s.past) for s in slots], step_params, bindings, past_dim)
    out = _rewrite(*args)
    keys = _scores_only(out, len(slots))  # caches only Q @ K^T reads: kept transposed
    if keys:
        blocks = -(-max_len // SCORE_TILE)
        slots = [CacheSlot(s.past, s.present, (*s.shape[:2], blocks, s.shape[3], SCORE_TILE), 2, s.dtype, True)
                 if i in keys else s for i, s in enumerate(slots)]
        out = _rewrite(*args[:2], slots, *args[3:])
    return out, CacheLayout(max_len, tuple(step_inputs), tuple(slots), str(past_dim), new_dim)


def _rewrite(mod, func, slots, concats, pasts, step_params, bindings, past_dim) -> tvm.IRModule:
    """``mod`` with ``main`` rewritten for the buffers ``slots`` (see ``inplace_cache``)."""
    batch = pasts[0].ty.shape.values[0]
    buffers = [relax.Var(f"cache_{i}", relax.TensorType([batch, *[tirx.IntImm("int64", d) for d in s.shape[1:]]],
                                                         s.dtype)) for i, s in enumerate(slots)]
    rewrite = {var: (buffer, new, slot) for (present, new, twins), buffer, slot in zip(concats, buffers, slots)
               for var in (present, *twins)}
    pos = relax.Var(POS_INPUT, relax.TensorType([batch], "int64"))
    past_shape = relax.Var(PAST_INPUT, relax.ShapeType([past_dim]))
    new_params = [*step_params, *buffers, pos, past_shape]
    views = {past: (buffer, slot) for past, buffer, slot in zip(pasts, buffers, slots)}
    mutator = _InPlace(mod, rewrite, views, bindings, func.body.body, pos, past_dim)
    body = mutator.visit_expr(func.body)
    if isinstance(func.body.body, relax.Tuple):  # returned as a tuple expression, not a bound var
        body = mutator.builder_.normalize(relax.SeqExpr(body.blocks, body.body.fields[0]))  # (an If folded)
    new = relax.Function(new_params, body, None, func.is_pure, func.attrs).with_attr("num_input", len(new_params))
    out = mutator.builder_.get()
    out["main"] = new
    out = relax.transform.Normalize()(out)
    out = relax.transform.DeadCodeElimination()(out)
    _check_written(out, slots)
    return out


def _check_written(mod: tvm.IRModule, slots) -> None:
    """Every buffer is written in place by ``main``: a write nothing reads is dead code to Relax
    (its calls are pure), and a step that dropped it would decode on a stale cache."""
    written = set()
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and value.op == _op("relax.call_tir_inplace"):
                written |= {a.name for a in value.args[1].fields if isinstance(a, relax.Var)}
    for i, slot in enumerate(slots):
        if f"cache_{i}" not in written:
            raise UsageError(f"cannot keep the cache in place: nothing reads '{slot.present}' after its entries "
                             "are written (the attention reads another copy of the cache)")


def _twins(bindings: dict, present: relax.Var, new: relax.Expr) -> list[relax.Var]:
    """Other bindings of the same ``Concat(past, new)`` as ``present`` (an If's branch converted
    alone, optimum's merged decoder: the attention reads one concat, the output is another)."""
    value = bindings[present]
    past = _resolve(bindings, value.args[0].fields[0])
    return [var for var, other in bindings.items() if not var.same_as(present) and isinstance(other, relax.Call)
            and other.op == value.op and isinstance(other.args[0], relax.Tuple) and len(other.args[0].fields) == 2
            and int(other.attrs.axis) == int(value.attrs.axis) and other.args[0].fields[1].same_as(new)
            and _resolve(bindings, other.args[0].fields[0]).same_as(past)]


def _scores_only(mod: tvm.IRModule, count: int) -> set[int]:
    """The cache slots whose written buffer only ``kv_scores`` kernels read in ``mod``'s main."""
    readers: dict[int, set[str]] = {i: set() for i in range(count)}
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(value, relax.Call):
                continue
            callee = value.args[0].name_hint if value.args and isinstance(value.args[0], relax.GlobalVar) else ""
            operands = value.args[1].fields if value.args and isinstance(value.args[0], relax.GlobalVar) \
                and len(value.args) > 1 and isinstance(value.args[1], relax.Tuple) else value.args
            for arg in operands:
                name = arg.name if isinstance(arg, relax.Var) else ""
                if name.startswith("cache_") and name.endswith("_written"):
                    readers[int(name[len("cache_"):-len("_written")])].add(callee.rstrip("0123456789"))
    return {i for i, names in readers.items() if names == {"kv_scores"}}


def _new_dim(present: relax.Var, slot: CacheSlot, past_dim, step_params: list) -> str:
    """The name of the step's entry count: the present's length is ``past + new``, with ``new`` a
    symbolic dim of a step input (what a caller sizes the write by before the call)."""
    from tvm.sym.analyzer import Analyzer

    new = Analyzer().simplify(present.ty.shape.values[slot.axis] - past_dim)
    named = {str(d) for p in step_params if p.ty.shape is not None for d in p.ty.shape.values
             if isinstance(d, tirx.Var)}
    if not isinstance(new, tirx.Var) or str(new) not in named:
        raise UsageError(f"cannot keep the cache in place: output '{slot.present}' grows by {new}, not by a dim of "
                         "the step's inputs")
    return str(new)


@relax.expr_functor.mutator
class _InPlace(relax.PyExprMutator):
    """Rewrites ``main``'s bindings: each present concat -> ``kv_write`` in place + ``kv_prefix``;
    the identity concats of a past input dropped; the result -> logits alone; a past input read
    elsewhere -> a prefix of its buffer (emitted where first read)."""

    def __init__(self, mod, rewrite, views, bindings, result, pos, past_dim) -> None:
        super().__init__(mod)
        self.rewrite, self.views, self.bindings, self.result = rewrite, views, bindings, result
        self.pos, self.past_dim = pos, past_dim
        self.kernels: dict = {}
        self.view_vars: dict = {}
        self.written: dict = {}  # present var -> (its written buffer, axis, valid length)
        self.done: dict = {}  # buffer -> the same, once written

    def _kernel(self, buffer: relax.Var, slot: CacheSlot):
        shape = [int(d) if isinstance(d, tirx.IntImm) else d for d in buffer.ty.shape.values]
        key = (tuple(shape[1:]), slot.axis, slot.dtype, slot.transposed)
        if key not in self.kernels:
            self.kernels[key] = self.builder_.add_func(_write_kernel(shape, slot.axis, slot.dtype, slot.transposed),
                                                       "kv_write")
        return self.kernels[key]

    def visit_var_(self, var: relax.Var) -> relax.Expr:
        root = _resolve(self.bindings, var)
        if root in self.views:  # a past input read besides its concat: the valid prefix of its buffer
            if root not in self.view_vars:
                buffer, slot = self.views[root]
                self.view_vars[root] = _prefix(self.builder_, buffer, slot.axis, self.past_dim, slot.transposed)
            return self.view_vars[root]
        return super().visit_var_(var)

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        var, value = binding.var, binding.value
        if var in self.rewrite and self.rewrite[var][0] in self.done:  # a twin of a written concat
            self.written[var] = self.done[self.rewrite[var][0]]
            written, slot, total = self.written[var]
            self.set_var_remap(var, _prefix(self.builder_, written, slot.axis, total, slot.transposed))
        elif var in self.rewrite:
            buffer, new, slot = self.rewrite[var]
            written = self.builder_.emit(relax.call_tir_inplace(
                self._kernel(buffer, slot), [buffer, self.visit_expr(new), self.pos], [0], buffer.ty),
                f"{buffer.name}_written")
            total = var.ty.shape.values[2 if slot.transposed else slot.axis]
            self.written[var] = self.done[buffer] = (written, slot, total)
            self.set_var_remap(var, _prefix(self.builder_, written, slot.axis, total, slot.transposed))
        elif var.same_as(self.result):
            self.set_var_remap(var, self.builder_.emit_output(self.visit_expr(value.fields[0]), "logits"))
        elif _resolve(self.bindings, var) in self.views:
            return  # an identity concat of a past input: only its present concat reads it
        elif (found := self._attention(value)) is not None and found[1][1].transposed:
            x, (buffer, slot, total), _, group, scale = found
            x = self._scaled(self.visit_expr(x), scale)
            key = ("scores", tuple(int(d) for d in buffer.ty.shape.values[1:]), int(x.ty.shape.values[1]), slot.dtype)
            if key not in self.kernels:
                self.kernels[key] = self.builder_.add_func(_scores_kernel(*key[1:]), "kv_scores")
            shape = [*x.ty.shape.values[:3], total]
            self.set_var_remap(var, self.builder_.emit(relax.call_tir(
                self.kernels[key], [x, buffer], relax.TensorType(shape, slot.dtype)), var.name))
        elif found is not None:
            x, (buffer, _, total), transposed, group, scale = found  # a buffer in the exported layout
            self.set_var_remap(var, self.builder_.emit(self.builder_.call_te(
                _attention_matmul, self._scaled(self.visit_expr(x), scale), buffer, total, transposed, group,
                primfunc_name_hint="kv_scores" if transposed else "kv_mix"), var.name))
        else:
            super().visit_var_binding_(binding)

    def _scaled(self, x: relax.Expr, scale) -> relax.Expr:
        """``x`` times the keys' scalar ``scale`` (None: ``x``): ``x @ (k * c) == (x * c) @ k``."""
        return x if scale is None else self.builder_.emit(relax.op.multiply(x, scale))

    def _attention(self, value):
        """For ``matmul(x, present)`` or ``matmul(x, permute_dims(present))`` (the last two axes
        swapped), either through GQA's head repeat (``_repeat``) and either with the keys scaled
        by a scalar constant (SDPA's decomposition scales both sides by the root of the scale):
        (x, the present's written buffer, transposed, group, scale or None); else None. Only 4-d
        caches with the sequence on axis 2."""
        if not (isinstance(value, relax.Call) and value.op == _op("relax.matmul")):
            return None
        x, other = value.args
        transposed, scale = False, None
        for _ in range(2):  # permute_dims and a scalar multiply, in either order
            bound = self.bindings.get(other)
            if not isinstance(bound, relax.Call):
                break
            if not transposed and bound.op == _op("relax.permute_dims") and bound.attrs.axes is not None \
                    and [int(a) for a in bound.attrs.axes] == [0, 1, 3, 2]:
                transposed, other = True, bound.args[0]
            elif scale is None and bound.op == _op("relax.multiply") and _scalar(bound.args[1]) is not None:
                scale, other = bound.args[1], bound.args[0]
            else:
                break
        other, group = _repeat(self.bindings, other)
        found = self.written.get(other)
        if found is None or len(x.ty.shape.values) != 4 or str(x.ty.dtype) != str(other.ty.dtype) or not (
                found[1].axis == 2 or found[1].transposed) or (found[1].transposed and not transposed):
            return None
        heads, kv = x.ty.shape.values[1], other.ty.shape.values[1]
        if not (isinstance(heads, tirx.IntImm) and isinstance(kv, tirx.IntImm)):
            return None
        if group == 1 and int(kv) == 1 and int(heads) > 1:
            group = int(heads)  # multi-query attention: matmul broadcasts the one key/value head
        if int(kv) * group != int(heads):
            return None
        return x, found, transposed, group, scale


def _scalar(expr) -> float | None:
    """The value of a one-element float constant, else None."""
    if isinstance(expr, tvm.ir.Constant) and int(np.prod(expr.value.shape)) == 1 and \
            str(expr.value.dtype).startswith("float"):
        return float(expr.value.numpy().reshape(-1)[0])
    return None


def _op(name: str):
    return tvm.ir.Op.get(name)


def _repeat(bindings: dict, expr: relax.Expr) -> tuple[relax.Expr, int]:
    """(source, group) for GQA's key/value head repeat, ``reshape(broadcast_to(expand_dims(src,
    2), [b, kv, g, n, d]), [b, kv * g, n, d])`` (transformers' ``repeat_kv``): head j reads head
    ``j // g`` of the source. Anything else: (expr, 1)."""
    reshape = bindings.get(expr)
    if not (isinstance(reshape, relax.Call) and reshape.op == _op("relax.reshape")):
        return expr, 1
    wide = bindings.get(reshape.args[0])
    if not (isinstance(wide, relax.Call) and wide.op == _op("relax.broadcast_to")):
        return expr, 1
    inserted = bindings.get(wide.args[0])
    if not (isinstance(inserted, relax.Call) and inserted.op == _op("relax.expand_dims")
            and [int(a) for a in inserted.attrs.axis] == [2]):
        return expr, 1
    src = inserted.args[0]
    five = wide.ty.shape.values if wide.ty.shape is not None else None
    out = reshape.ty.shape.values if reshape.ty.shape is not None else None
    if five is None or out is None or len(five) != 5 or len(out) != 4 or not isinstance(five[2], tirx.IntImm):
        return expr, 1
    group = int(five[2])
    heads = src.ty.shape.values[1]
    if not (isinstance(heads, tirx.IntImm) and isinstance(out[1], tirx.IntImm) and int(out[1]) == int(heads) * group):
        return expr, 1
    return src, group


def _attention_matmul(x, buffer, total, transposed: bool, group: int):
    """Attention's matmul against the valid ``total`` positions of a cache ``buffer [b, kv, max_len,
    d]`` read in place: scores ``x [b, h, s, d] @ buffer^T -> [b, h, s, total]`` (``transposed``) or
    the mix ``x [b, h, s, total] @ buffer -> [b, h, s, d]``; head j reads head ``j // group``.
    (A buffer stored transposed is scored by ``_scores_kernel`` instead.)"""
    from tvm import te

    b, h, s = x.shape[0], x.shape[1], x.shape[2]

    def head(j):
        return j if group == 1 else j // group

    if transposed:
        d = te.reduce_axis((0, x.shape[3]), "d")
        return te.compute((b, h, s, total),
                          lambda i, j, q, k: te.sum(x[i, j, q, d] * buffer[i, head(j), k, d], axis=d), name="kv_scores")
    k = te.reduce_axis((0, total), "k")
    return te.compute((b, h, s, buffer.shape[3]),
                      lambda i, j, q, e: te.sum(x[i, j, q, k] * buffer[i, head(j), k, e], axis=k), name="kv_mix")
