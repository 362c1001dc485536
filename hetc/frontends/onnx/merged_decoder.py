"""Merged decoders: the branch that reads the cache (``kv_cache`` builds), the mask declared.

optimum exports a decoder as one "merged" model: its whole graph is an ``If`` on a boolean input
(``use_cache_branch``) between the decoder without a past (the prompt) and the decoder with one
(every later step). A build that keeps the cache in place (``hetc/passes/kv_cache.py``) runs
every call on the cache: a prompt is a step over an empty past. So the loader freezes the
condition (``cache_branch``, ``loader.freeze_inputs``) to the branch that reads the past inputs;
the importer then converts that branch alone (a constant condition), and the in-place rewrite
finds its ``Concat(past, new)``.

The merged model declares its inputs as the no-past decoder does: ``attention_mask`` as
``[batch, sequence_length]``, while with a past it covers the past and the step (onnxruntime
does not check dim names; hetc does, and refused every step after the prompt). In any merged
decoder (``declare_mask``, every build) a mask declared as long as the token ids is re-declared
as the presents' length (``past_sequence_length + sequence_length``), as optimum's
decoder-with-past declares it: the prompt's branch runs with an empty past, where the two agree.
"""

from __future__ import annotations

import numpy as np
import onnx

from ...errors import UsageError
from .ops.control_flow import outer_names

MASK = "attention_mask"


def _flags(model: onnx.ModelProto, label: str) -> dict[str, bool]:
    """{boolean input: the value that takes the branch with the past} for each input that only
    chooses between a branch without and a branch with the model's other inputs (the one that
    reads more of them); {} for a model without such an ``If``."""
    graph = model.graph
    inputs = {v.name: v for v in graph.input}
    users: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                for name in outer_names(attr.g):
                    users.setdefault(name, []).append(node)
    flags: dict[str, bool] = {}
    for name, value in inputs.items():
        nodes = users.get(name, [])
        if (value.type.tensor_type.elem_type != onnx.TensorProto.BOOL or not nodes
                or any(node.op_type != "If" or list(node.input) != [name] for node in nodes)):
            continue
        choice = set()
        for node in nodes:
            branches = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
            reads = [set(outer_names(branches[b])) & set(inputs) for b in ("then_branch", "else_branch")]
            if reads[0] > reads[1]:
                choice.add(True)
            elif reads[1] > reads[0]:
                choice.add(False)
            else:
                raise UsageError(f"{label}: cannot keep the cache in place: neither branch of If '{node.name}' "
                                 f"on '{name}' reads inputs the other does not (which one has the past?)")
        if len(choice) != 1:
            raise UsageError(f"{label}: cannot keep the cache in place: the Ifs on '{name}' take the past in "
                             "different branches")
        flags[name] = choice.pop()
    return flags


def cache_branch(model: onnx.ModelProto, label: str) -> dict[str, np.ndarray]:
    """The values that freeze each flag of a merged decoder (``_flags``) to its branch with the
    past, for ``loader.freeze_inputs``; {} for a model without one. Call ``declare_mask`` first:
    a frozen flag is no longer an input to find the decoder by."""
    declared = {v.name: v.type.tensor_type.shape.dim for v in model.graph.input}
    return {name: np.full([d.dim_value or 1 for d in declared[name]], value, bool)
            for name, value in _flags(model, label).items()}


def declare_mask(model: onnx.ModelProto) -> bool:
    """In a merged decoder, re-declare (in place) a mask declared as long as the token ids as the
    presents' length (module docstring). Whether it was. Ambiguous flags are left to
    ``cache_branch``, which only a build with the cache in place needs; every build calls this."""
    try:
        flags = _flags(model, "")
    except UsageError:
        return False
    return bool(flags) and _mask_covers_the_present(model.graph)


def _mask_covers_the_present(graph: onnx.GraphProto) -> bool:
    """Re-declare ``attention_mask``'s length as a present output's cache length where it is
    declared as the step's (the token ids' length). Whether it was."""
    declared = {v.name: v.type.tensor_type.shape.dim for v in [*graph.input, *graph.output]}
    mask, ids = declared.get(MASK), declared.get("input_ids")
    if mask is None or ids is None or len(mask) != 2 or len(ids) != 2 or not mask[1].dim_param \
            or mask[1].dim_param != ids[1].dim_param:
        return False
    step = mask[1].dim_param
    for out in graph.output:
        for d in out.type.tensor_type.shape.dim:
            terms = [t.strip() for t in d.dim_param.split("+")]
            if len(terms) == 2 and step in terms:
                mask[1].dim_param = d.dim_param  # e.g. 'past_sequence_length + sequence_length'
                return True
    return False
