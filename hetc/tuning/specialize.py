"""Symbolic kernels at representative sizes: what ``hetc tune`` measures for a model with
symbolic dims, and the key ``hetc compile --db`` finds the records of its kernels by.

A kernel of a dynamic model takes its dims through its buffers' shapes (``x: (batch, 64)``) or
as scalar parameters (a dim used as a value). ``workload(func, {"batch": 4})`` binds every
such dim to its representative size and simplifies: a static kernel that MetaSchedule can tile
and measure. Tuning (from the tasks of the symbolic module) and compiling (from its kernels)
derive the workload from the same symbolic kernel in the same way, so the records a tuning run
stores are found again, by structure, when the dynamic model is compiled.
"""

from __future__ import annotations

from collections.abc import Mapping

import tvm
from tvm import tirx
from tvm.s_tir.meta_schedule.tune_context import _normalize_mod
from tvm.tirx.analysis import undefined_vars


def param_shape(param) -> list | None:
    """A buffer parameter's shape; None for a scalar parameter."""
    try:
        return list(param.shape)
    except Exception:  # noqa: BLE001 -- a scalar parameter (TVM raises its own error types)
        return None


def symbolic_dims(func: tirx.PrimFunc) -> dict[str, tirx.Var]:
    """The symbolic dims ``func`` takes, by name: the variables of its buffers' shapes and its
    scalar parameters (empty for a static kernel)."""
    found: dict[str, tirx.Var] = {}
    for param in func.params:
        shape = param_shape(param)
        for var in [param] if shape is None else [v for d in shape for v in undefined_vars(d, [])]:
            found.setdefault(var.name, var)
    return found


def _size(var: tirx.Var, values: Mapping[str, int]) -> tirx.IntImm:
    return tirx.IntImm(var.ty.dtype, int(values[var.name]))  # a scalar Var's dtype is its type's


def specialize(func: tirx.PrimFunc, values: Mapping[str, int]) -> tirx.PrimFunc | None:
    """``func`` with every symbolic dim bound to ``values[name]``, simplified; None when it has
    no symbolic dim, takes one that ``values`` does not size (a run-time value such as Pad's
    pads), or one that no buffer has as a dim of its own (only inside ``batch * seq``)."""
    dims = symbolic_dims(func)
    if not dims or any(name not in values for name in dims):
        return None
    bound, param_map = set(), {}
    for param in func.params:
        shape = param_shape(param)
        if shape is None:
            param_map[param] = _size(param, values)
            bound.add(param.name)
        elif any(isinstance(d, tirx.Var) for d in shape):
            new = [_size(d, values) if isinstance(d, tirx.Var) else d for d in shape]
            bound.update(d.name for d in shape if isinstance(d, tirx.Var))
            param_map[param] = tirx.decl_buffer(new, param.dtype, name=param.name)
    if bound != set(dims):
        return None
    mod = tvm.IRModule({"main": func.specialize(param_map)})
    return tvm.tirx.transform.StmtSimplify()(mod)["main"]


def workload(func: tirx.PrimFunc, values: Mapping[str, int]) -> tvm.IRModule | None:
    """The tuning workload of a symbolic kernel at ``values`` (as MetaSchedule normalises a
    PrimFunc into a module); None where ``specialize`` gives none."""
    static = specialize(func, values)
    if static is None:
        return None
    return _normalize_mod(static.with_attr("global_symbol", "main"))


def describe(values: Mapping[str, int]) -> str:
    """``{"batch": 4, "seq": 128}`` -> ``"batch=4,seq=128"`` (the ``--plan-shape`` form)."""
    return ",".join(f"{name}={size}" for name, size in values.items())
