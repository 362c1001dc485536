"""A Dynamo FX graph as an ``ExportedProgram`` whose only inputs are the user's tensors.

Dynamo hands a backend a ``GraphModule`` whose placeholders are of three kinds: the user's
tensors, the module's state (parameters, buffers, float attributes Dynamo lifted to 0-d
tensors), and the symbolic sizes (``s77``) of dynamic dims. hetc compiles for inference, so
the module's state is frozen into the program as constants (what folding and weight packing
need; inductor's ``freezing`` does the same) and each symbolic size is read from the
tensor dim it came from. The result is exported with ``torch.export`` (``Dim.AUTO`` on every
dim Dynamo made symbolic) and goes through the frontend like any other program.

``GraphLayout`` says, for each placeholder, where its value comes from at a call: the user
tensors are passed on, the rest is checked (frozen state must not have changed) or implied.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from ...errors import ModelLoadError, first_line
from .loader import user_placeholders


@dataclass
class GraphLayout:
    """Which of the graph's placeholders the compiled program takes, and how the rest is known."""

    inputs: list[int]  # placeholder index of each program input, in order
    frozen: list[int]  # placeholder indices of the module state baked in as constants
    sizes: dict[int, tuple[int, int]] = field(default_factory=dict)  # SymInt placeholder -> (input, axis)
    dynamic: dict[int, list[int]] = field(default_factory=dict)  # program input -> its symbolic axes


def _symbolic(size) -> bool:
    """A size that is a symbol (not a SymInt that Dynamo's guards pinned to one value)."""
    return isinstance(size, torch.SymInt) and not size.node.expr.is_number


def _is_state(node: torch.fx.Node) -> bool:
    """A parameter, buffer or attribute of the compiled module, or a global (``math.pi`` in
    transformers' GELU, lifted to a 0-d tensor): not a value the caller passes."""
    tensor_dict = node.meta.get("tensor_dict") or {}
    if tensor_dict.get("_dynamo_static_input_type") is not None:
        return True
    source = getattr(node.meta.get("grapharg"), "source", None)
    name = getattr(source, "name", "")
    name = name() if callable(name) else name  # a method in older torch, a property in newer
    return isinstance(name, str) and name.startswith(("L['self']", "G["))


def layout_of(gm: torch.fx.GraphModule, example_inputs: list) -> GraphLayout:
    """Classify ``gm``'s placeholders (see the module docstring); ``ModelLoadError`` for a graph
    hetc cannot take (a non-tensor input, a symbolic size no input dim carries)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    inputs, frozen, symints = [], [], []
    for i, (node, value) in enumerate(zip(placeholders, example_inputs)):
        if isinstance(value, (torch.SymInt, int)):
            symints.append(i)
        elif not isinstance(value, torch.Tensor):
            raise ModelLoadError(f"graph input '{node.name}' is a {type(value).__name__}, not a tensor")
        elif _is_state(node):
            frozen.append(i)
        else:
            inputs.append(i)
    layout = GraphLayout(inputs, frozen)
    for k, i in enumerate(inputs):
        shape = placeholders[i].meta["example_value"].shape
        layout.dynamic[k] = [axis for axis, d in enumerate(shape) if _symbolic(d)]
    for i in symints:
        value = placeholders[i].meta.get("example_value", example_inputs[i])
        expr = str(value.node.expr) if isinstance(value, torch.SymInt) else None
        found = next(((k, axis) for k, p in enumerate(inputs)
                      for axis, d in enumerate(placeholders[p].meta["example_value"].shape)
                      if _symbolic(d) and str(d.node.expr) == expr), None)
        if found is None:
            raise ModelLoadError(f"graph input '{placeholders[i].name}' is a symbolic int no input dim carries "
                                 "(an int argument of the model): hetc takes tensors")
        layout.sizes[i] = found
    return layout


def _is_item(node: torch.fx.Node) -> bool:
    return (node.op == "call_method" and node.target == "item") or (
        node.op == "call_function" and node.target in (torch.ops.aten.item.default, torch.Tensor.item))


def prepare_graph(gm: torch.fx.GraphModule, layout: GraphLayout, example_inputs: list) -> torch.fx.GraphModule:
    """A copy of ``gm`` where each ``.item()`` of a frozen 0-d tensor is its value (Dynamo lifts
    a module's float attributes, BatchNorm's ``eps``, Hardtanh's bounds, to 0-d tensor inputs
    read with ``.item()``, which torch.export could only treat as data-dependent) and each
    ``Tensor.view`` a ``reshape``."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    for node in graph.nodes:
        # a view eager torch allows on its strides can fail on the ones the decomposition's retrace
        # gives (GPT-2's Conv1D: "Cannot view a tensor with shape ... and strides ..."): where a view
        # is valid, reshape is the same view
        if node.op == "call_method" and node.target == "view":
            node.target = "reshape"
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for i in layout.frozen:
        value = example_inputs[i]
        if value.dim() != 0:
            continue
        scalar = value.item()
        for use in [u for u in placeholders[i].users if _is_item(u)]:
            def inline(arg, use=use, scalar=scalar):
                return scalar if arg is use else arg

            for user in list(use.users):
                user.args = torch.fx.node.map_arg(user.args, inline)
                user.kwargs = torch.fx.node.map_arg(user.kwargs, inline)
            graph.erase_node(use)
    return torch.fx.GraphModule(gm, graph)


class _Frozen(torch.nn.Module):
    """``gm`` with its module state as buffers and its sizes read from the tensors."""

    def __init__(self, gm: torch.fx.GraphModule, layout: GraphLayout, example_inputs: list) -> None:
        super().__init__()
        self.gm, self.layout = gm, layout
        for i in layout.frozen:
            self.register_buffer(f"state_{i}", example_inputs[i].detach().to("cpu"), persistent=True)
        self.count = len(example_inputs)

    def forward(self, *tensors):
        args = [None] * self.count
        for k, i in enumerate(self.layout.inputs):
            args[i] = tensors[k]
        for i in self.layout.frozen:
            args[i] = getattr(self, f"state_{i}")
        for i, (k, axis) in self.layout.sizes.items():
            args[i] = tensors[k].size(axis)
        return self.gm(*args)


def export_graph(gm: torch.fx.GraphModule, example_inputs: list, layout: GraphLayout):
    """``gm`` as an ``ExportedProgram`` over the user tensors (on the CPU: hetc compiles for any
    target from it), its symbolic dims kept symbolic (``ModelLoadError`` where torch.export
    specializes one Dynamo kept dynamic), except those that feed float arithmetic on sizes,
    which hetc cannot convert: they are specialized to the example's size (``layout.dynamic``
    says which stay symbolic); a call with another size there is refused by the artifact's
    shape check and runs eagerly, with a warning (``tensors.CompiledGraph``)."""
    module = _Frozen(prepare_graph(gm, layout, example_inputs), layout, example_inputs).eval()
    args = tuple(example_inputs[i].detach().to("cpu") for i in layout.inputs)
    program = _export(module, args, layout)
    scalar = _scalar_arithmetic_dims(program)
    if scalar:  # sizes in float arithmetic (1 / sqrt(head_dim)): a specialization hetc can convert
        for k, axes in scalar.items():
            layout.dynamic[k] = [a for a in layout.dynamic[k] if a not in axes]
        program = _export(module, args, layout)
    _check_dynamic(program, layout)
    return program


def _scalar_arithmetic_dims(program) -> dict[int, set[int]]:
    """The symbolic input dims (input -> axes) that Python arithmetic on sizes reads where TVM's
    translator has no converter for it: GPT-2 scales attention by ``value.size(-1) ** 0.5``,
    a ``_sym_sqrt`` of the head dim when Dynamo made every dim symbolic."""
    from .importer import convert_table

    table, symbols = convert_table(), set()
    for node in program.graph.nodes:
        if node.op != "call_function" or isinstance(node.target, torch._ops.OpOverload) or \
                getattr(node.target, "__name__", None) in table:
            continue
        for value in [node.meta.get("val"), *(a.meta.get("val") for a in node.all_input_nodes)]:
            if isinstance(value, (torch.SymInt, torch.SymFloat)):
                symbols |= {str(s) for s in value.node.expr.free_symbols}
    found: dict[int, set[int]] = {}
    for k, node in enumerate(user_placeholders(program)):
        for axis, size in enumerate(node.meta["val"].shape):
            if _symbolic(size) and str(size.node.expr) in symbols:
                found.setdefault(k, set()).add(axis)
    return found


def _export(module: torch.nn.Module, args: tuple, layout: GraphLayout):
    dynamic = tuple({axis: torch.export.Dim.AUTO for axis in layout.dynamic[k]} or None
                    for k in range(len(args)))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.export.export(module, args, dynamic_shapes=(dynamic,), strict=False)  # forward(*tensors)
    except Exception as err:  # torch raises many types; the first line says what failed
        raise ModelLoadError(f"torch.export of the graph failed: {first_line(err)}") from err
    return program


def _check_dynamic(program, layout: GraphLayout) -> None:
    for k, node in enumerate(user_placeholders(program)):
        shape = node.meta["val"].shape
        static = [axis for axis in layout.dynamic[k] if not _symbolic(shape[axis])]
        if static:
            raise ModelLoadError(f"torch.export specialized dim(s) {static} of input {k}, which Dynamo keeps dynamic")
