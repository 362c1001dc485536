"""Placement: which device runs each op, and applying that to the module.

``problem``/``milp``/``chain``/``heuristic``/``solve`` are the numeric core of the placement
solver (arrays in, ``Result`` out; no TVM); ``cost`` turns an op graph and device specs into
such a problem, ``plan`` solves it for a model (``hetc plan``) and ``view`` draws the result.
``apply`` turns an assignment of OpGraph nodes to devices ("cpu:0", "cpu:1", "cuda:0") into a
module whose ops run on Relax VDevices, with the transfers between them, built as one VM
executable. The names below are ``apply``'s, imported on first use (it loads TVM; the solver
core does not need it).
"""

_APPLY = ("Placement", "build", "constant_bytes", "default_assignment", "library_target", "placed_nodes",
          "read_placement", "resolve_placement", "split_stages", "tag_nodes", "transfers")
__all__ = list(_APPLY)


def __getattr__(name: str):
    if name in _APPLY:
        from . import apply

        return getattr(apply, name)
    raise AttributeError(f"module 'hetc.placement' has no attribute {name!r}")
