"""Pipeline-parallel splitting of an ONNX graph into stage models.

The graph's nodes (ONNX lists them in topological order) are cut into ``pp`` contiguous
stages. A cut after node i carries the tensors *live* there: produced by a node up to i (or a
model input), needed by a later node or a model output; weights are not live, each stage has
its own. The cut is the planner's stage DP (``stages.partition``, the same one ``hetc parallel
plan`` uses): each node's time is its FLOPs, each cut's the bytes live there converted to
FLOP-time (``link_bytes_per_flop``), and the slowest stage is made as fast as it can be. Each
stage becomes its own ONNX model (``onnx.utils.Extractor``), compiled like any model. The
runtime sends the live tensors from stage to stage (``runtime.py``).

Micro-batches (``micro_batches = m``): the model is first rewritten for a batch of B/m
(``rebatch``), so a step streams m micro-batches through the stages and stage k works on
micro-batch j while stage k + 1 works on j - 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference
from onnx.utils import Extractor

from ..errors import UsageError
from ..frontends.onnx.fold import NONDETERMINISTIC
from .stages import Infeasible, StageProblem, partition


@dataclass
class Stage:
    model: onnx.ModelProto
    inputs: list[str]  # what its model takes (a subset of what it receives)
    outputs: list[str]  # what its model returns
    receive: list[dict]  # live tensors arriving from the previous stage: name, shape, dtype
    send: list[dict]  # live tensors it passes on (the last stage: the model outputs)
    flops: int
    weight_bytes: int

    @property
    def send_bytes(self) -> int:
        """Bytes of the live tensors it passes on, per micro-batch."""
        return sum(_nbytes((spec["shape"], spec["dtype"])) for spec in self.send)


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[tuple[int, ...], str]]:
    out = {}
    for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        t = vi.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            out[vi.name] = (tuple(d.dim_value for d in t.shape.dim),
                            onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name)
    return out


def _flops(node: onnx.NodeProto, shapes: dict) -> int:
    out = shapes.get(node.output[0]) if node.output else None
    size = int(np.prod(out[0])) if out else 0
    if node.op_type in ("MatMul", "Gemm") and node.input[0] in shapes:
        a = shapes[node.input[0]][0]
        k = a[-1] if not (node.op_type == "Gemm" and any(x.name == "transA" and x.i for x in node.attribute)) else a[0]
        return 2 * size * k
    if node.op_type == "Conv" and len(node.input) > 1 and node.input[1] in shapes:
        w = shapes[node.input[1]][0]
        return 2 * size * int(np.prod(w[1:]))
    return size


def _nbytes(spec: tuple[tuple[int, ...], str]) -> int:
    return int(np.prod(spec[0])) * np.dtype(spec[1]).itemsize


def _weights(graph: onnx.GraphProto) -> set[str]:
    """The values every stage computes for itself, never sent: initializers and what nodes
    make from them alone (``Constant``, and the ``Identity`` of a shared initializer that the
    TorchScript exporter writes for each tied or deduplicated weight)."""
    weights = {i.name for i in graph.initializer}
    for n in graph.node:
        if n.op_type not in NONDETERMINISTIC and all(x in weights for x in n.input if x):
            weights.update(o for o in n.output if o)
    return weights


def _open(nodes, weights: set) -> set[str]:
    """Values inside a linear-layer block: made from a matmul by a weight (a column-parallel
    candidate) without passing another one (the row-parallel matmul that closes the block)."""
    opened: set = set()
    for node in nodes:
        by_weight = node.op_type in ("MatMul", "Gemm") and len(node.input) > 1 and node.input[1] in weights
        if by_weight:
            if node.input[0] not in opened:
                opened.update(node.output)
        elif any(x in opened for x in node.input if x):
            opened.update(node.output)
    return opened


def rebatch(model: onnx.ModelProto, micro_batches: int) -> onnx.ModelProto:
    """``model`` for a batch ``micro_batches`` times smaller: every model input and output has
    the batch B first; a Reshape whose constant target starts with B (and whose input does)
    copies the new batch instead (``0``). Every tensor whose first dimension was B must then
    have B / micro_batches there and the rest unchanged, or this raises ``UsageError``."""
    model = shape_inference.infer_shapes(model)
    graph = model.graph
    weights = _weights(graph)
    shapes = _shapes(model)
    ends = [v.name for v in graph.input if v.name not in weights] + [v.name for v in graph.output]
    batches = {shapes[n][0][0] if n in shapes and shapes[n][0] else None for n in ends}
    if len(batches) != 1 or None in batches:
        raise UsageError(f"--micro-batches {micro_batches}: the model's inputs and outputs must all have one "
                         "static batch dimension first")
    batch = batches.pop()
    if batch % micro_batches:
        raise UsageError(f"--micro-batches {micro_batches} does not divide the batch of {batch}")
    micro = batch // micro_batches
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.value_info[:]
    for value in list(out.graph.input) + list(out.graph.output):
        if value.name not in weights:
            value.type.tensor_type.shape.dim[0].dim_value = micro
    constants = {i.name: numpy_helper.to_array(i) for i in out.graph.initializer}
    constants |= {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in out.graph.node
                  if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"}
    for node in out.graph.node:
        target = constants.get(node.input[1]) if node.op_type == "Reshape" else None
        data = shapes.get(node.input[0]) if target is not None else None
        allowzero = any(a.name == "allowzero" and a.i for a in node.attribute)
        if target is None or allowzero or not target.size or target[0] != batch or not data or data[0][0] != batch:
            continue
        name = f"{node.input[1]}__microbatch"
        if name not in constants:
            constants[name] = np.concatenate([[0], target[1:]]).astype(target.dtype)
            out.graph.initializer.append(numpy_helper.from_array(constants[name], name))
        node.input[1] = name
    try:
        out = shape_inference.infer_shapes(out, strict_mode=True)
    except shape_inference.InferenceError as err:  # a shape the new batch contradicts
        raise UsageError(f"--micro-batches {micro_batches}: the model does not take a batch of {micro}: "
                         f"{str(err).splitlines()[0]}") from None
    after = _shapes(out)
    for name, (shape, _dtype) in shapes.items():
        if name in weights or name not in after:
            continue
        want = (micro, *shape[1:]) if shape and shape[0] == batch else shape
        if after[name][0] != want:
            raise UsageError(f"--micro-batches {micro_batches}: '{name}' would have shape {list(after[name][0])}, "
                             f"not {list(want)} (its batch is fixed by the model)")
    return out


def split(model: onnx.ModelProto, pp: int, link_bytes_per_flop: float = 0.0, micro_batches: int = 1,
          static_shapes=None, whole_blocks: bool = False) -> list[Stage]:
    """``model`` cut into ``pp`` stage models, each for a batch ``micro_batches`` times smaller
    (see the module docstring). ``static_shapes(model) -> {name: (shape, dtype)}``, if given,
    types the values ONNX's shape inference leaves unknown (exporters' shape arithmetic).
    ``whole_blocks`` (tensor parallel within the stages): no cut inside a linear-layer block
    (``_open``), where a stage would get half a Megatron pair, while any other cut exists."""
    if pp < 2:
        raise UsageError(f"--pp must be at least 2, got {pp}")
    model = rebatch(model, micro_batches) if micro_batches > 1 else shape_inference.infer_shapes(model)
    graph = model.graph
    shapes = _shapes(model)
    for init in graph.initializer:
        shapes.setdefault(init.name, (tuple(init.dims), onnx.helper.tensor_dtype_to_np_dtype(init.data_type).name))
    nodes = list(graph.node)
    if len(nodes) < pp:
        raise UsageError(f"--pp {pp}: the model has only {len(nodes)} op(s)")
    weights = _weights(graph)
    inputs = [i.name for i in graph.input if i.name not in weights]
    outputs = [o.name for o in graph.output]
    last_use: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for name in node.input:
            if name and name not in weights:
                last_use[name] = i
    produced_at = {name: -1 for name in inputs}
    for i, node in enumerate(nodes):
        for name in node.output:
            produced_at[name] = i

    # a tensor is live after node i for produced_at <= i < end: read by a later node, or a model output
    n = len(nodes)
    live = {t: (at, n if t in outputs else last_use.get(t, -1)) for t, at in produced_at.items()}
    live = {t: span for t, span in live.items() if span[1] > span[0]}

    def live_after(i: int) -> list[str]:
        return [t for t, (at, end) in live.items() if at <= i < end]

    missing = [t for t, (at, end) in live.items() if max(at, 0) < min(end, n - 1) and t not in shapes]
    if missing and static_shapes is not None:
        found = static_shapes(model)
        for name in {o for node in nodes for o in node.output} - set(shapes):
            if name in found:
                shape, dtype = found[name]
                shapes[name] = (tuple(shape), dtype)
                graph.value_info.append(onnx.helper.make_tensor_value_info(
                    name, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), list(shape)))
        missing = [t for t in missing if t not in shapes]
    if missing:
        raise UsageError(f"--pp needs static shapes; unknown shape for '{missing[0]}'")
    delta = np.zeros(n + 1)
    for t, (at, end) in live.items():
        if t in shapes:  # all but, perhaps, model outputs live only after the last node
            delta[max(at, 0)] += _nbytes(shapes[t])
            delta[end] -= _nbytes(shapes[t])
    live_bytes = np.cumsum(delta)[:n]
    send = live_bytes * link_bytes_per_flop
    if whole_blocks:
        opened = _open(nodes, weights)
        inside = np.zeros(n + 1)
        for t, (at, end) in live.items():
            if t in opened:
                inside[max(at, 0)] += 1
                inside[end] -= 1
        inside = np.cumsum(inside)[:n] > 0
        if not inside[:-1].all():
            send = np.where(inside, np.inf, send)
    cost = np.array([_flops(node, shapes) for node in nodes], dtype=np.float64)
    node_weights = np.array([sum(_nbytes(shapes[t]) for t in node.input if t in weights and t in shapes)
                             for node in nodes], dtype=np.float64)
    outputs_bytes = np.array([sum(_nbytes(shapes[t]) for t in node.output if t in shapes) for node in nodes],
                             dtype=np.float64)
    problem = StageProblem(times=cost, send=send, state_bytes=node_weights,
                           activation_bytes=outputs_bytes, in_flight=np.ones(pp), limit=np.inf,
                           names=tuple(node.name or node.op_type for node in nodes))
    try:
        bounds = partition(problem).bounds
    except Infeasible as err:
        raise UsageError(f"--pp {pp}: {err}") from None

    stages, extractor = [], Extractor(model)
    for k in range(pp):
        lo, hi = bounds[k], bounds[k + 1] - 1
        receive = inputs if k == 0 else live_after(lo - 1)
        send = outputs if k == pp - 1 else live_after(hi)
        used = {t for node in nodes[lo:hi + 1] for t in node.input if t and t not in weights}
        made = {t for node in nodes[lo:hi + 1] for t in node.output}
        stage_inputs = [t for t in receive if t in used]
        stage_outputs = [t for t in send if t in made]
        if not stage_outputs:
            raise UsageError(f"--pp {pp}: stage {k} would compute nothing that is used later")
        held = {x for node in nodes[lo:hi + 1] for x in node.input if x in weights and x in shapes}
        spec = lambda t: {"name": t, "shape": list(shapes[t][0]), "dtype": shapes[t][1]}
        stages.append(Stage(extractor.extract_model(stage_inputs, stage_outputs), stage_inputs, stage_outputs,
                            [spec(t) for t in receive], [spec(t) for t in send], int(cost[lo:hi + 1].sum()),
                            sum(_nbytes(shapes[w]) for w in held)))
    return stages
