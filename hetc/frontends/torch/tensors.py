"""Calling a compiled model with torch tensors, without copies: DLPack both ways.

An input tensor is handed to TVM as it is when it is contiguous and 64-byte aligned (what
TVM's kernels assume; torch's CPU allocator gives 64), else as a contiguous copy. An output
is TVM's tensor seen by torch (``torch.from_dlpack``), which keeps it alive. CPU and CUDA
tensors alike: the VM runs on the device the tensors are on.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import tvm
import tvm_ffi

from ...errors import HetcError
from .fallback import warn_fallback
from .graph_program import GraphLayout

ALIGN = 64  # bytes; TVM's kernels assume it of every buffer


def to_tvm(tensor: torch.Tensor) -> tvm.runtime.Tensor:
    """``tensor`` as a TVM tensor over the same memory where it can be, else over a contiguous copy."""
    tensor = tensor.detach()
    if tensor.numel() == 0:
        return tvm.runtime.empty(tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."),
                                 tvm.device(tensor.device.type, tensor.device.index or 0))
    if not tensor.is_contiguous() or tensor.data_ptr() % ALIGN:
        tensor = tensor.clone(memory_format=torch.contiguous_format)
    return tvm_ffi.from_dlpack(tensor, require_alignment=ALIGN)


class CompiledGraph:
    """What Dynamo calls instead of a graph: its user tensors through hetc's artifact (``model``),
    the outputs as torch tensors in the graph's output container. The frozen module state is
    checked at each call (torch's version counters: one integer per tensor): if the module was
    changed in place since compiling, the call runs eagerly, with one warning."""

    def __init__(self, model, layout: GraphLayout, gm: torch.fx.GraphModule, example_inputs: Sequence) -> None:
        self.model = model  # a CompiledModel
        self.runner = model._runners[0]  # one part: the VM runner (hetc/runtime/vm.py)
        self.inputs = list(layout.inputs)
        self.frozen = list(layout.frozen)
        # a 0-d tensor is a float attribute Dynamo lifted (a new tensor each call): its value counts
        self.scalars = {i: example_inputs[i].item() for i in self.frozen if example_inputs[i].dim() == 0}
        self.tensors = [i for i in self.frozen if i not in self.scalars]
        self.versions = [example_inputs[i]._version for i in self.tensors]
        self.pointers = [example_inputs[i].data_ptr() for i in self.tensors]
        self.gm = gm
        returned = gm.graph.output_node().args[0]
        self.container = type(returned) if isinstance(returned, (tuple, list)) else None  # None: one tensor
        self.stale = False

    def __call__(self, *args):
        if self.stale or not self._state_unchanged(args):
            return self._eager(args)
        try:
            outputs = self.runner.call_tensors([to_tvm(args[i]) for i in self.inputs])
        except HetcError as err:  # a size outside the artifact's range, ...: torch's own answer
            warn_fallback(f"hetc: this call runs eagerly: {err}")
            return self.gm(*args)
        result = [torch.from_dlpack(out) for out in outputs]
        return result[0] if self.container is None else self.container(result)

    def _state_unchanged(self, args) -> bool:
        return all(args[i]._version == v and args[i].data_ptr() == p
                   for i, v, p in zip(self.tensors, self.versions, self.pointers)) and all(
            args[i].item() == value for i, value in self.scalars.items())

    def _eager(self, args):
        if not self.stale:
            warn_fallback("hetc: the module's parameters or buffers changed since this graph was compiled; it runs "
                          "eagerly from now on (torch._dynamo.reset() recompiles)", stacklevel=4)
            self.stale = True
        return self.gm(*args)
