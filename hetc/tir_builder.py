"""Helpers for hand-written TIR kernels built with TVM's IRBuilder (``T.prim_func()`` in a
``with IRBuilder() as ib`` block): the ONNX RNN recurrence (``frontends/onnx/rnn_kernel.py``)
and the in-place KV cache kernels (``passes/kv_cache.py``)."""

from __future__ import annotations

from tvm.script.ir_builder import tirx as T


def param(name: str, shape, dtype: str):
    """A buffer parameter. ``layout=None`` as TE's buffers: the default layout would capture the
    shape's vars, which passes that copy the function (fresh vars) leave stale."""
    return T.match_buffer(T.arg(name, T.handle()), shape, dtype, layout=None)


def finished(ib):
    """The built PrimFunc without a global symbol: its name is the GlobalVar's
    (``BlockBuilder.add_func``)."""
    func = ib.get()
    return func.without_attr("global_symbol") if func.attrs and "global_symbol" in func.attrs else func
