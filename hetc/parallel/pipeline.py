"""Pipeline-parallel splitting of an ONNX graph into stage models.

The graph's nodes (ONNX lists them in topological order) are cut into ``pp`` contiguous
stages. A cut after node i carries the tensors *live* there: produced by a node up to i (or a
model input), needed by a later node or a model output; weights are not live, each stage has
its own. Stages are chosen by dynamic programming to minimise the largest stage's FLOPs plus
the time to send what crosses its cut (``link_bytes_per_flop`` converts bytes to FLOP-time),
and each becomes its own ONNX model (``onnx.utils.Extractor``), compiled like any model. The
runtime sends the live tensors from stage to stage (``runtime.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import shape_inference
from onnx.utils import Extractor

from ..errors import UsageError


@dataclass
class Stage:
    model: onnx.ModelProto
    inputs: list[str]  # what its model takes (a subset of what it receives)
    outputs: list[str]  # what its model returns
    receive: list[dict]  # live tensors arriving from the previous stage: name, shape, dtype
    send: list[dict]  # live tensors it passes on (the last stage: the model outputs)
    flops: int


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


def split(model: onnx.ModelProto, pp: int, link_bytes_per_flop: float = 0.0) -> list[Stage]:
    """``model`` cut into ``pp`` stage models (see the module docstring)."""
    model = shape_inference.infer_shapes(model)
    graph = model.graph
    shapes = _shapes(model)
    for init in graph.initializer:
        shapes.setdefault(init.name, (tuple(init.dims), onnx.helper.tensor_dtype_to_np_dtype(init.data_type).name))
    nodes = list(graph.node)
    if pp < 2:
        raise UsageError(f"--pp must be at least 2, got {pp}")
    if len(nodes) < pp:
        raise UsageError(f"--pp {pp}: the model has only {len(nodes)} op(s)")
    weights = {i.name for i in graph.initializer} | {n.output[0] for n in nodes if n.op_type == "Constant"}
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

    def live_after(i: int) -> list[str]:
        return [n for n, at in produced_at.items() if at <= i and (last_use.get(n, -1) > i or n in outputs)]

    missing = [n for i in range(len(nodes) - 1) for n in live_after(i) if n not in shapes]
    if missing:
        raise UsageError(f"--pp needs static shapes; unknown shape for '{missing[0]}'")
    cost = [_flops(n, shapes) for n in nodes]
    live_bytes = [sum(int(np.prod(shapes[n][0])) * np.dtype(shapes[n][1]).itemsize for n in live_after(i))
                  for i in range(len(nodes))]
    cuts = _best_cuts(cost, [b * link_bytes_per_flop for b in live_bytes], pp)

    stages, bounds = [], [-1, *cuts, len(nodes) - 1]
    for k in range(pp):
        lo, hi = bounds[k] + 1, bounds[k + 1]
        receive = inputs if k == 0 else live_after(lo - 1)
        send = outputs if k == pp - 1 else live_after(hi)
        used = {n for node in nodes[lo:hi + 1] for n in node.input if n and n not in weights}
        made = {n for node in nodes[lo:hi + 1] for n in node.output}
        stage_inputs = [n for n in receive if n in used]
        stage_outputs = [n for n in send if n in made]
        if not stage_outputs:
            raise UsageError(f"--pp {pp}: stage {k} would compute nothing that is used later")
        sub = Extractor(model).extract_model(stage_inputs, stage_outputs)
        spec = lambda n: {"name": n, "shape": list(shapes[n][0]), "dtype": shapes[n][1]}
        stages.append(Stage(sub, stage_inputs, stage_outputs, [spec(n) for n in receive],
                            [spec(n) for n in send], sum(cost[lo:hi + 1])))
    return stages


def _best_cuts(cost: list[int], cut_cost: list[float], pp: int) -> list[int]:
    """Cut positions (after node i) minimising max over stages of (its cost + its outgoing cut's cost)."""
    n = len(cost)
    prefix = np.concatenate([[0], np.cumsum(cost)])
    inf = float("inf")
    # best[k][j]: the smallest bottleneck of nodes 0..j in k+1 stages, the last ending at j
    best = [[inf] * n for _ in range(pp)]
    back = [[-1] * n for _ in range(pp)]
    for j in range(n):
        best[0][j] = prefix[j + 1] + (cut_cost[j] if j < n - 1 else 0.0)
    for k in range(1, pp):
        for j in range(k, n):
            out = cut_cost[j] if j < n - 1 else 0.0
            for i in range(k - 1, j):
                value = max(best[k - 1][i], prefix[j + 1] - prefix[i + 1] + out)
                if value < best[k][j]:
                    best[k][j], back[k][j] = value, i
    cuts, j = [], n - 1
    for k in range(pp - 1, 0, -1):
        j = back[k][j]
        cuts.append(j)
    return cuts[::-1]
