"""OpGraph: a plain view of a Relax module for analysis, placement and cost models.

One ``OpNode`` per operator call in ``main`` with its input/output tensors, FLOPs, bytes and
the registered targets that support it. No TVM types leak out of this module's results.

FLOP counts come from ``_FLOPS``, keyed by Relax op name; ops absent from it count one FLOP
per output element, and ops in ``_NO_FLOPS`` (data movement) count zero. To refine an op,
add a function ``(inputs, outputs, attrs) -> int`` to ``_FLOPS``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: str

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize


@dataclass
class OpNode:
    id: int
    name: str  # the Relax variable the op is bound to
    op: str  # Relax op name, e.g. "relax.nn.conv2d"
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    preds: list[int]  # ids of the nodes producing this node's inputs
    flops: int
    supported_by: dict[str, bool] = field(default_factory=dict)
    weight_bytes: int = 0  # of the constants it reads (resident on its device)
    input_bytes: int = 0  # of the model inputs it reads
    output_bytes: int = 0  # of its results that are model outputs
    # the symbolic dims its tensors' shapes depend on (sorted names; () when all shapes are static):
    # ``inputs``/``outputs`` then hold the shapes at the representative sizes
    symbolic: tuple[str, ...] = ()

    @property
    def bytes_in(self) -> int:
        return sum(t.nbytes for t in self.inputs)

    @property
    def bytes_out(self) -> int:
        return sum(t.nbytes for t in self.outputs)


@dataclass
class OpGraph:
    nodes: list[OpNode]
    num_params: int  # elements in constants (weights)
    param_bytes: int

    @property
    def flops(self) -> int:
        return sum(n.flops for n in self.nodes)

    def histogram(self) -> Counter:
        return Counter(n.op for n in self.nodes)

    def unsupported(self, target: str) -> Counter:
        return Counter(n.op for n in self.nodes if not n.supported_by.get(target, False))


def _matmul(ins: Sequence[TensorInfo], outs: Sequence[TensorInfo], attrs) -> int:
    k = ins[0].shape[-1] if ins[0].shape else 1
    return 2 * outs[0].size * k


def _conv(ins: Sequence[TensorInfo], outs: Sequence[TensorInfo], attrs) -> int:
    weight = ins[1].shape  # O, I/groups, k... in any layout: product of all but O
    return 2 * outs[0].size * math.prod(weight) // max(weight[0], 1) if weight else 0


def _pool(ins: Sequence[TensorInfo], outs: Sequence[TensorInfo], attrs) -> int:
    window = [int(k) for k in getattr(attrs, "pool_size", [])]
    return outs[0].size * max(math.prod(window), 1)


def _reduce_inputs(ins: Sequence[TensorInfo], outs: Sequence[TensorInfo], attrs) -> int:
    return ins[0].size if ins else 0


_FLOPS: dict[str, Callable[[Sequence[TensorInfo], Sequence[TensorInfo], object], int]] = {
    "relax.matmul": _matmul,
    "relax.nn.conv1d": _conv,
    "relax.nn.conv2d": _conv,
    "relax.nn.conv3d": _conv,
    "relax.nn.conv2d_transpose": lambda i, o, a: 2 * i[0].size * math.prod(i[1].shape[1:]),
    "relax.nn.max_pool2d": _pool,
    "relax.nn.avg_pool2d": _pool,
    "relax.nn.adaptive_avg_pool2d": _reduce_inputs,
    "relax.sum": _reduce_inputs,
    "relax.mean": _reduce_inputs,
    "relax.max": _reduce_inputs,
    "relax.min": _reduce_inputs,
    "relax.nn.softmax": lambda i, o, a: 5 * o[0].size,
    "relax.nn.log_softmax": lambda i, o, a: 5 * o[0].size,
    "relax.nn.layer_norm": lambda i, o, a: 8 * o[0].size,
    "relax.nn.batch_norm": lambda i, o, a: 4 * o[0].size,
    "relax.nn.gelu": lambda i, o, a: 8 * o[0].size,
}

_NO_FLOPS = {
    "relax.reshape", "relax.permute_dims", "relax.flatten", "relax.squeeze", "relax.expand_dims",
    "relax.concat", "relax.split", "relax.strided_slice", "relax.take", "relax.broadcast_to",
    "relax.astype", "relax.zeros", "relax.ones", "relax.full", "relax.shape_of", "relax.tile",
}


def static_tensor(ty) -> TensorInfo | None:
    """A static TensorInfo of a Relax type, or None (not a tensor, or a symbolic/unknown shape)."""
    found = _shaped(ty)
    return found[0] if len(found) == 1 and _is_tensor(ty) else None


def _is_tensor(ty) -> bool:
    from tvm import relax

    return isinstance(ty, relax.TensorType)


def _shaped(ty, sizes=None) -> list[TensorInfo]:
    """The tensors of a Relax type with static shapes; ``sizes`` (a ``_Sizes``) evaluates
    symbolic dims at their representative sizes, else tensors with symbolic dims are left out."""
    from tvm import relax, tirx

    if isinstance(ty, relax.TensorType) and ty.shape is not None and hasattr(ty.shape, "values"):
        dims = [sizes(d) if sizes is not None else d for d in ty.shape.values]
        if all(isinstance(d, (int, tirx.IntImm)) for d in dims):
            return [TensorInfo(tuple(int(d) for d in dims), str(ty.dtype))]
        return []
    if isinstance(ty, relax.TupleType):
        return [t for f in ty.fields for t in _shaped(f, sizes)]
    return []


class _Sizes:
    """Evaluates a dim expression with each symbolic dim bound to its representative size."""

    def __init__(self, func, values: dict[str, int]) -> None:
        from tvm import relax, tirx
        from tvm.sym.analyzer import Analyzer

        self.analyzer = Analyzer()
        for var in relax.analysis.defined_symbolic_vars(func):
            if var.name in values:
                self.analyzer.bind(var, tirx.const(int(values[var.name]), "int64"))

    def __call__(self, dim):
        from tvm import tirx

        if isinstance(dim, (int, tirx.IntImm)):
            return int(dim)
        dim = self.analyzer.simplify(dim)
        return int(dim.value) if isinstance(dim, tirx.IntImm) else dim


def symbolic_dims(ty) -> set[str]:
    """The names of the symbolic dims in the shapes of a Relax type (tensors and tuples)."""
    from tvm import relax, tirx

    if isinstance(ty, relax.TensorType) and ty.shape is not None and hasattr(ty.shape, "values"):
        return {str(v.name) for d in ty.shape.values if not isinstance(d, (int, tirx.IntImm))
                for v in tirx.analysis.undefined_vars(d)}
    if isinstance(ty, relax.TupleType):
        return {n for f in ty.fields for n in symbolic_dims(f)}
    return set()


def node_flops(op: str, ins: Sequence[TensorInfo], outs: Sequence[TensorInfo], attrs=None) -> int:
    if op in _NO_FLOPS:
        return 0
    if op in _FLOPS:
        try:
            return int(_FLOPS[op](ins, outs, attrs))
        except (IndexError, TypeError, ValueError):
            pass
    return sum(t.size for t in outs)


def build_opgraph(mod, targets: Sequence = (), sizes: dict[str, int] | None = None) -> OpGraph:
    """Build the OpGraph of ``mod['main']`` (a high-level Relax module, before legalization).

    ``targets`` are ``hetc.targets.Target``s; each node records whether each supports it.
    ``sizes`` gives each symbolic dim (by name) the size its tensors are costed at; tensors
    with dims it does not give are left out of the node.
    """
    import tvm
    from tvm import relax

    func = mod["main"]
    at = _Sizes(func, sizes or {})

    def tensors(ty) -> list[TensorInfo]:  # at the representative sizes
        return _shaped(ty, at)

    producers: dict[object, list[int]] = {}  # relax Var -> producing node ids
    nodes: list[OpNode] = []
    params = param_bytes = 0
    seen_consts: set = set()  # Relax objects hash and compare by identity

    def preds_of(arg) -> list[int]:
        if isinstance(arg, relax.Var):
            return producers.get(arg, [])
        if isinstance(arg, relax.Tuple):
            return [p for f in arg.fields for p in preds_of(f)]
        return []

    model_inputs = set(func.params)
    for block in func.body.blocks:
        for binding in block.bindings:
            value, var = binding.value, binding.var
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                args = [a for a in value.args if isinstance(a, relax.Expr)]
                for arg in args:
                    if isinstance(arg, tvm.ir.GenericConst) and arg not in seen_consts:
                        seen_consts.add(arg)
                        info = tensors(arg.ty)
                        params += sum(t.size for t in info)
                        param_bytes += sum(t.nbytes for t in info)
                ins = [t for a in args for t in tensors(a.ty)]
                outs = tensors(var.ty)
                op = str(value.op.name)
                node = OpNode(len(nodes), var.name, op, ins, outs,
                              sorted({p for a in args for p in preds_of(a)}),
                              node_flops(op, ins, outs, value.attrs),
                              weight_bytes=sum(t.nbytes for a in args if isinstance(a, tvm.ir.GenericConst)
                                               for t in tensors(a.ty)),
                              input_bytes=sum(t.nbytes for a in args if a in model_inputs for t in tensors(a.ty)),
                              symbolic=tuple(sorted({n for a in [*args, var] for n in symbolic_dims(a.ty)})))
                node.supported_by = {t.name: bool(t.backend.supports(node)) for t in targets}
                nodes.append(node)
                producers[var] = [node.id]
            else:  # tuples, tuple projections, aliases: pass producers through
                producers[var] = preds_of(value.tuple_value if isinstance(value, relax.TupleGetItem) else value)
    result = func.body.body
    for field_ in (result.fields if isinstance(result, relax.Tuple) else [result]):
        for i in preds_of(field_):
            nodes[i].output_bytes += sum(t.nbytes for t in tensors(field_.ty))
    return OpGraph(nodes, params, param_bytes)
