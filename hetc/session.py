"""Decoding with the KV cache in place: the low-level loop under ``hetc.generate``.

    model = hetc.compile("decoder.onnx", kv_cache=1024, dims={...})     # buffers of 1024 positions
    session = hetc.session(model, batch=4)
    logits = session.prefill(prompts, lengths=[5, 9, 3, 7])   # [4, vocab]: each row's next token
    logits = session.step(next_tokens)                        # [4, vocab]; one token per row
    session.keep([0, 2])                                      # rows 1 and 3 finished: drop them
    session.reset()                                           # empty again, same buffers

The model is a decoder compiled with ``kv_cache=MAX_LEN`` (``hetc/passes/kv_cache.py``): each
past/present pair of the export is one buffer of ``MAX_LEN`` positions that the compiled step
writes in place; nothing copies the past between steps. Every row has its own length
(``lengths``): a step writes row r's token at position ``lengths[r]`` and masks the row's
attention to its own ``lengths[r] + 1`` positions, so rows of different lengths decode together
and each gets the tokens it would get alone. That needs the export's ``position_ids`` input (each
row's positions are its own); a model without one (positions follow the shared past length)
decodes rows of equal length only. ``keep(rows)`` drops finished rows: the kept rows' cache
moves to the front of the buffers (one copy of those rows), and later steps run on fewer rows.

A prompt is taken in chunks of at most the step dim's upper bound (``--dim seq=1:N``).
Step inputs the session fills: ``input_ids``, ``attention_mask``, ``position_ids``; a model
with others is refused.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .callable_module import make_callable
from .errors import InputError, UsageError
from .passes.kv_cache import CacheLayout
from .runtime.standalone import shape_problem
from .runtime.vm import to_numpy

KNOWN_INPUTS = ("input_ids", "attention_mask", "position_ids")


class Session:
    """One decoding batch over a model compiled with ``kv_cache`` (module docstring)."""

    def __init__(self, model, batch: int = 1) -> None:
        if not getattr(model, "manifest", None) or not model.manifest.kv_cache:
            raise UsageError("a session needs a decoder compiled with its cache in place: "
                             "hetc.compile(model, kv_cache=MAX_LEN) (hetc compile --kv-cache MAX_LEN)")
        layout = CacheLayout.from_json(model.manifest.kv_cache)
        unknown = [n for n in layout.step_inputs if n not in KNOWN_INPUTS]
        if unknown or "input_ids" not in layout.step_inputs:
            raise UsageError(f"a session fills the inputs {', '.join(KNOWN_INPUTS)}; this decoder takes "
                             f"{', '.join(layout.step_inputs)}")
        self.layout = layout
        self.specs = {s.name: s.to_json() for s in model.manifest.inputs}
        self.dims = model.manifest.dims
        batch_dim = layout.slots[0].shape[0]
        low, high = self.dims.get(batch_dim, (batch, batch)) if isinstance(batch_dim, str) else (batch_dim,) * 2
        if not isinstance(batch, int) or batch < 1 or not low <= batch <= high:
            raise UsageError(f"batch {batch} is outside the decoder's batch range {low}..{high}")
        self.max_step = self.dims.get(layout.new_dim, (1, layout.max_len))[1]
        self.max_past = self.dims.get(layout.past_dim, (0, layout.max_len))[1]
        self.runner = model._runners[0]
        self.main, self.device = self.runner.function()
        import tvm

        self.tvm = tvm
        self.buffers = []
        for slot in layout.slots:  # zeros: masked positions must hold finite values (0 * NaN is NaN)
            shape = [batch if axis == 0 else d for axis, d in enumerate(slot.shape)]
            self.buffers.append(tvm.runtime.tensor(np.zeros(shape, slot.dtype), self.device))
        self.capacity = batch
        self.lengths = np.zeros(batch, np.int64)
        self._view_batch, self._view_list = batch, self.buffers

    @property
    def batch(self) -> int:
        return len(self.lengths)

    @property
    def max_len(self) -> int:
        return self.layout.max_len

    def reset(self) -> None:
        """Every row empty again, the batch as created (the buffers are reused, not cleared:
        positions past a row's length are never attended)."""
        self.lengths = np.zeros(self.capacity, np.int64)

    def prefill(self, input_ids: np.ndarray, lengths: Sequence[int] | None = None) -> np.ndarray:
        """Append each row's prompt, ``input_ids[r, :lengths[r]]`` (right-padded; default: all of
        it), and return each row's next-token logits ``[batch, vocab]``. Every row must have
        the same length before (0 after ``reset``)."""
        ids = np.asarray(input_ids)
        if ids.ndim != 2 or ids.dtype.kind not in "iu" or ids.shape[0] != self.batch or ids.shape[1] < 1:
            raise InputError(f"input_ids must be a [{self.batch}, seq] integer array (seq >= 1), got shape "
                             f"{list(ids.shape)} dtype {ids.dtype.name}")
        count = np.full(self.batch, ids.shape[1], np.int64) if lengths is None else np.asarray(lengths, np.int64)
        if count.shape != (self.batch,) or (count < 1).any() or (count > ids.shape[1]).any():
            raise InputError(f"lengths must be {self.batch} counts in 1..{ids.shape[1]}, got {count.tolist()}")
        if (self.lengths != self.lengths[0]).any():
            raise UsageError(f"prefill appends to rows of equal length; these have {self.lengths.tolist()} "
                             "(reset() first, or step() one token at a time)")
        start = int(self.lengths[0])
        self._check_room(start + ids.shape[1])
        ids = ids.astype(np.int64)
        out = None
        for begin in range(0, ids.shape[1], self.max_step):
            end = min(begin + self.max_step, ids.shape[1])
            past = start + begin
            # earlier columns: each row's real tokens; this chunk's: all (causal inside it, and
            # a row's padding is attended only by its own padding)
            mask = np.ones((self.batch, past + end - begin), np.int64)
            mask[:, start:past] = np.arange(begin)[None, :] < count[:, None]
            positions = np.broadcast_to(np.arange(past, past + end - begin), (self.batch, end - begin))
            logits = self._call(ids[:, begin:end], mask, positions, np.full(self.batch, past, np.int64), past)
            if out is None:
                out = np.empty((self.batch, logits.shape[-1]), logits.dtype)
            rows = (count - 1 >= begin) & (count - 1 < end)
            out[rows] = logits[rows, count[rows] - 1 - begin]
        self.lengths = self.lengths + count
        return out

    def step(self, tokens: np.ndarray) -> np.ndarray:
        """Append one token per row (``tokens [batch]``) and return the next-token logits
        ``[batch, vocab]``."""
        ids = np.asarray(tokens)
        if ids.shape not in ((self.batch,), (self.batch, 1)) or ids.dtype.kind not in "iu":
            raise InputError(f"step takes one integer token per row ([{self.batch}]), got shape {list(ids.shape)} "
                             f"dtype {ids.dtype.name}")
        ids = ids.reshape(self.batch, 1).astype(np.int64)
        if "position_ids" not in self.layout.step_inputs and (self.lengths != self.lengths[0]).any():
            raise UsageError(f"rows of different lengths ({self.lengths.tolist()}) decode together only when the "
                             "model takes position_ids (export it with them); this one follows the shared past length")
        past = int(self.lengths.max())
        self._check_room(past + 1)
        mask = (np.arange(past + 1)[None, :] <= self.lengths[:, None]).astype(np.int64)
        logits = self._call(ids, mask, self.lengths[:, None], self.lengths, past)
        self.lengths = self.lengths + 1
        return logits[:, -1]

    def keep(self, rows: Sequence[int]) -> None:
        """Go on with only ``rows`` (indices into the current batch, in their new order): their
        cache moves to the front of the buffers."""
        rows = np.asarray(rows, np.int64)
        if rows.ndim != 1 or len(rows) < 1 or len(set(rows.tolist())) != len(rows) or (rows < 0).any() \
                or (rows >= self.batch).any():
            raise UsageError(f"keep takes distinct row indices in 0..{self.batch - 1}, at least one; got {rows.tolist()}")
        if np.array_equal(rows, np.arange(self.batch)):
            return
        for buffer in self.buffers:
            array = np.from_dlpack(buffer)
            array[:len(rows)] = array[rows]  # fancy indexing copies first: rows may overlap their targets
        self.lengths = self.lengths[rows]

    def _check_room(self, total: int) -> None:
        if total > self.max_len:
            raise InputError(f"{total} positions do not fit the cache: the model was compiled with "
                             f"--kv-cache {self.max_len}")
        if total - 1 > self.max_past:
            raise InputError(f"a past of {total - 1} positions is beyond the decoder's '{self.layout.past_dim}' range "
                             f"(up to {self.max_past})")

    def _call(self, ids, mask, positions, pos, past: int) -> np.ndarray:
        feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
        names = self.layout.step_inputs
        problem = shape_problem([self.specs[n] for n in names], [feeds[n].shape for n in names], self.dims)
        if problem:
            raise InputError(problem)
        # The step's small inputs go through the runner's staging buffers (a copy into memory
        # kept per input; ``tvm.runtime.tensor`` allocates and copies through TVM, 30 us each),
        # the logits come back as a view: a step of a 12-layer GPT-2 64 wide went from 1.36 to
        # 0.98 ms (2-core Intel Xeon, LLVM emeraldrapids; docs/decoding.md).
        views = self._views()
        runner, first = self.runner, len(names)
        args = [runner.tensor(i, np.ascontiguousarray(feeds[n], np.int64)) for i, n in enumerate(names)]
        pos = runner.tensor(first + len(views), np.ascontiguousarray(pos, np.int64))
        return to_numpy(runner.invoke(self.main, [*args, *views, pos, self.tvm.runtime.ShapeTuple([past])]))

    def _views(self) -> list:
        """The cache buffers' first ``batch`` rows (all of them until ``keep`` drops rows): made
        once per batch size (8.6 us a view on the Intel Xeon above, 24 views a GPT-2 step)."""
        batch = self.batch
        if self._view_batch != batch:
            self._view_list = [b if batch == self.capacity else b._create_view((batch, *b.shape[1:]))
                               for b in self.buffers]
            self._view_batch = batch
        return self._view_list


def session(model, batch: int = 1) -> Session:
    """A ``Session`` of ``batch`` rows over ``model`` (compiled with ``kv_cache``)."""
    return Session(model, batch)


make_callable(__name__, session)  # hetc.session(model, batch): hetc/callable_module.py
