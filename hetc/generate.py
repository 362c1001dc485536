"""Greedy autoregressive decoding with a KV cache, on a compiled model or an onnxruntime session.

    model = hetc.compile("gpt2.onnx", dims={"batch": (1, 8), "seq": (1, 1024),
                                            "past_seq": (0, 1024), "total_seq": (1, 1024)})
    tokens = hetc.generate(model, prompt_ids, max_new_tokens=32)     # [batch, prompt + 32]
    same = hetc.generate(ort.InferenceSession("gpt2.onnx"), prompt_ids, max_new_tokens=32)

The model is one decoder step with its cache as inputs and outputs, as exporters write it
(``examples/hf_models.py`` ``export_gpt2``, optimum's ``decoder_model_merged``): inputs
``input_ids [batch, seq]``, optionally ``attention_mask [batch, past_seq + seq]``, and
``past_key_values.{i}.key`` / ``.value``; outputs ``logits`` first and ``present.{i}.key`` /
``.value`` (the past with this step's entries appended). The prompt is the step with an empty
past (``past_seq`` = 0), so one compiled artifact serves prefill and every decoding step.
Optimum's inputs ``position_ids`` and (merged decoder) ``use_cache_branch`` are fed when the
model has them: positions from the mask, the cache branch once the past is not empty.

The loop is a ``Runner``: ``start(batch)`` gives the empty cache, ``step(ids, mask, cache)``
returns ``(logits, cache)``, ``max_step_tokens`` is the most tokens one step takes (None: no
limit); a longer prompt is fed in chunks of that many. A model compiled for one-token steps
(``dims={"seq": (1, 1), ...}``: static one-row matmuls) thus also takes the
prompt, one token per step. ``CompiledRunner`` keeps the cache in TVM tensors between steps
(``resident=True``) instead of copying it to numpy and back; ``OrtRunner`` runs the same loop
on an onnxruntime session, for reference.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from .callable_module import make_callable
from .errors import InputError, UsageError
from .runtime.standalone import shape_problem

PAST_PREFIX, PRESENT_PREFIX = "past_key_values.", "present."


def cache_names(inputs: Sequence[str], outputs: Sequence[str]) -> tuple[list[str], list[str]]:
    """The cache inputs and, in the same order, the outputs that feed them at the next step:
    ``past_key_values.X`` is fed by ``present.X``."""
    past = [n for n in inputs if n.startswith(PAST_PREFIX)]
    if not past:
        raise UsageError(f"the model has no KV cache inputs (named '{PAST_PREFIX}*'); its inputs are "
                         f"{', '.join(inputs)}")
    present = [PRESENT_PREFIX + n[len(PAST_PREFIX):] for n in past]
    missing = [n for n in present if n not in outputs]
    if missing:
        raise UsageError(f"the model has no output(s) {', '.join(missing)} to feed its cache inputs back")
    return past, present


def _empty_cache(specs: Sequence[tuple[str, Sequence, str]], batch: int) -> list[np.ndarray]:
    """Zero-length past tensors: dim 0 is the batch, every other symbolic dim (the past length) 0."""
    return [np.zeros([batch if axis == 0 else (d if isinstance(d, int) else 0)
                      for axis, d in enumerate(shape)], dtype) for _, shape, dtype in specs]


def _extra_feeds(names, input_ids: np.ndarray, attention_mask: np.ndarray) -> dict:
    """The inputs optimum's exports add: ``position_ids`` (counted over the mask as transformers
    counts them, 1 at padding) and the merged decoder's ``use_cache_branch`` (false while the
    past is empty)."""
    feeds = {}
    past = attention_mask.shape[1] - input_ids.shape[1]
    if "position_ids" in names:
        positions = np.cumsum(attention_mask, axis=1) - 1
        positions[attention_mask == 0] = 1
        feeds["position_ids"] = positions[:, past:]
    if "use_cache_branch" in names:
        feeds["use_cache_branch"] = np.array([past > 0])
    return feeds


class CompiledRunner:
    """Decoding steps on a ``hetc.CompiledModel``. With ``resident`` (the default) the cache
    stays in the VM's tensors from one step to the next; without it every step copies the
    whole cache to numpy and back (what ``model.run`` does), to measure that copy."""

    def __init__(self, model, resident: bool = True) -> None:
        names = model.input_names
        self.model, self.resident = model, resident
        self.past, self.present = cache_names(names, model.output_names)
        self.has_mask = "attention_mask" in names
        self.specs = [s.to_json() for s in model.manifest.inputs]
        self.order = names
        self.outputs = model.output_names
        runner = model._runners[0] if len(model._runners) == 1 else None
        if resident and not hasattr(runner, "call_tensors"):
            self.resident = False  # not a single Relax VM (a parallel artifact): plain run()
        self.runner = runner
        seq = next((s.shape[1] for s in model.manifest.inputs
                    if s.name == "input_ids" and len(s.shape) == 2), None)
        self.max_step_tokens = seq if isinstance(seq, int) else model.manifest.dims.get(seq, (1, None))[1]

    def start(self, batch: int) -> list:
        by_name = {s.name: s for s in self.model.manifest.inputs}
        return _empty_cache([(n, by_name[n].shape, by_name[n].dtype) for n in self.past], batch)

    def step(self, input_ids: np.ndarray, attention_mask: np.ndarray | None, cache: list):
        feeds = {"input_ids": input_ids, **dict(zip(self.past, cache)),
                 **_extra_feeds(self.order, input_ids, attention_mask)}
        if self.has_mask:
            feeds["attention_mask"] = attention_mask
        if not self.resident:
            out = self.model.run(feeds)
            return out[self.outputs[0]], [out[n] for n in self.present]
        shapes = [tuple(feeds[n].shape) for n in self.order]
        problem = shape_problem(self.specs, shapes, self.model.manifest.dims)
        if problem:
            raise InputError(problem)
        out = dict(zip(self.outputs, self.runner.call_tensors([feeds[n] for n in self.order])))
        return out[self.outputs[0]].numpy(), [out[n] for n in self.present]


class OrtRunner:
    """The same steps on an ``onnxruntime.InferenceSession`` (numpy in and out)."""

    def __init__(self, session) -> None:
        self.session = session
        self.inputs = {i.name: i for i in session.get_inputs()}
        self.outputs = [o.name for o in session.get_outputs()]
        self.past, self.present = cache_names(list(self.inputs), self.outputs)
        self.has_mask = "attention_mask" in self.inputs
        seq = self.inputs["input_ids"].shape[1] if "input_ids" in self.inputs else None
        self.max_step_tokens = seq if isinstance(seq, int) else None

    def start(self, batch: int) -> list:
        types = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64"}
        return _empty_cache([(n, self.inputs[n].shape, types[self.inputs[n].type]) for n in self.past], batch)

    def step(self, input_ids, attention_mask, cache):
        feeds = {"input_ids": input_ids, **dict(zip(self.past, cache)),
                 **_extra_feeds(self.inputs, input_ids, attention_mask)}
        if self.has_mask:
            feeds["attention_mask"] = attention_mask
        out = dict(zip(self.outputs, self.session.run(None, feeds)))
        return out[self.outputs[0]], [out[n] for n in self.present]


def runner(model, resident: bool = True):
    """The Runner for ``model``: a CompiledModel, an onnxruntime session, or a Runner already."""
    if hasattr(model, "step") and hasattr(model, "start"):
        return model
    if hasattr(model, "get_inputs") and hasattr(model, "run"):
        return OrtRunner(model)
    if hasattr(model, "manifest"):
        return CompiledRunner(model, resident)
    raise UsageError(f"generate() takes a hetc CompiledModel or an onnxruntime InferenceSession, "
                     f"not {type(model).__name__}")


def generate(model, input_ids: np.ndarray, max_new_tokens: int, *, attention_mask: np.ndarray | None = None,
             eos_token_id: int | None = None, step_seconds: list | None = None) -> np.ndarray:
    """Greedy decoding: the prompt ``input_ids [batch, seq]`` in one step from an empty past (or
    in chunks of the runner's ``max_step_tokens``), then one token per step, each step's
    presents fed back as the next one's past. Returns the prompt followed by the new tokens,
    ``[batch, seq + n]`` (n <= ``max_new_tokens``; fewer when every row has produced
    ``eos_token_id``; rows that finished earlier are padded with it).

    ``model``: a ``hetc.CompiledModel``, an ``onnxruntime.InferenceSession`` or a Runner (see the
    module doc). ``attention_mask [batch, seq]`` marks the prompt's real tokens (default: all);
    new tokens are attended. ``step_seconds``, if a list, gets each step's wall time (the first
    is the prompt). On a model compiled with ``kv_cache`` the loop is a ``hetc.session``: the
    cache stays in place, each row decodes at its own length as it would alone (the mask's real
    tokens are its prompt), and rows that produced ``eos_token_id`` leave the batch."""
    ids = np.asarray(input_ids)
    if ids.ndim != 2 or ids.dtype.kind not in "iu" or ids.shape[0] < 1 or ids.shape[1] < 1:
        raise InputError(f"input_ids must be a non-empty [batch, seq] integer array, got shape "
                         f"{list(ids.shape)} dtype {ids.dtype.name}")
    if max_new_tokens < 0:
        raise UsageError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    ids = ids.astype(np.int64)
    mask = np.ones(ids.shape, np.int64) if attention_mask is None else np.asarray(attention_mask, np.int64)
    if mask.shape != ids.shape:
        raise InputError(f"attention_mask has shape {list(mask.shape)}, input_ids {list(ids.shape)}: "
                         "they must match")
    if getattr(getattr(model, "manifest", None), "kv_cache", None):
        return _generate_in_place(model, ids, mask, max_new_tokens, eos_token_id, step_seconds)
    run = runner(model)
    batch, prompt = ids.shape
    chunk = getattr(run, "max_step_tokens", None) or prompt
    cache = run.start(batch)
    tokens, step_ids = [ids], ids
    done = np.zeros(batch, bool)
    for i in range(max_new_tokens):
        start = time.perf_counter()
        if i == 0:  # the prompt, in chunks of at most max_step_tokens
            for begin in range(0, prompt, chunk):
                end = min(begin + chunk, prompt)
                logits, cache = run.step(ids[:, begin:end], mask[:, :end], cache)
        else:
            logits, cache = run.step(step_ids, mask, cache)
        if step_seconds is not None:
            step_seconds.append(time.perf_counter() - start)
        nxt = np.argmax(logits[:, -1], axis=-1).astype(np.int64)
        if eos_token_id is not None:
            nxt = np.where(done, eos_token_id, nxt)
            done |= nxt == eos_token_id
        tokens.append(nxt[:, None])
        step_ids = nxt[:, None]
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
        if eos_token_id is not None and done.all():
            break
    return np.concatenate(tokens, axis=1)


def _generate_in_place(model, ids: np.ndarray, mask: np.ndarray, max_new_tokens: int, eos_token_id: int | None,
                       step_seconds: list | None) -> np.ndarray:
    """``generate`` on a model compiled with ``kv_cache``: a ``hetc.session`` over the rows' real
    tokens (``mask``), each row decoded at its own length (as it would be alone); rows that
    produce ``eos_token_id`` leave the batch."""
    from .session import Session

    batch = ids.shape[0]
    real = [row[keep != 0] for row, keep in zip(ids, mask)]
    lengths = np.array([len(r) for r in real], np.int64)
    if (lengths == 0).any():
        raise InputError(f"row(s) {np.flatnonzero(lengths == 0).tolist()} of attention_mask mark no prompt token")
    session = Session(model, batch)
    if (lengths != lengths[0]).any() and "position_ids" not in session.layout.step_inputs:
        raise UsageError("prompts of different lengths decode together only when the model takes position_ids "
                         f"(lengths {lengths.tolist()}); export it with position_ids, or give equal-length prompts")
    if max_new_tokens == 0:
        return ids
    padded = np.zeros((batch, int(lengths.max())), np.int64)
    for r, tokens in enumerate(real):
        padded[r, :len(tokens)] = tokens
    new = np.full((batch, max_new_tokens), 0 if eos_token_id is None else eos_token_id, np.int64)
    active = np.arange(batch)
    start = time.perf_counter()
    logits = session.prefill(padded, lengths)
    steps = 0
    for i in range(max_new_tokens):
        if step_seconds is not None:
            step_seconds.append(time.perf_counter() - start)
        nxt = np.argmax(logits, axis=-1).astype(np.int64)
        new[active, i] = nxt
        steps = i + 1
        if eos_token_id is not None:
            going = nxt != eos_token_id
            if not going.any():
                break
            if not going.all():
                session.keep(np.flatnonzero(going))
                active, nxt = active[going], nxt[going]
        if steps == max_new_tokens:
            break
        start = time.perf_counter()
        logits = session.step(nxt)
    return np.concatenate([ids, new[:, :steps]], axis=1)


make_callable(__name__, generate)  # hetc.generate(model, ids, n): hetc/callable_module.py
