"""Placement: which device runs each op, and applying that to the module.

``apply`` turns an assignment of OpGraph nodes to devices ("cpu:0", "cpu:1", "cuda:0") into a
module whose ops run on Relax VDevices, with the transfers between them, built as one VM
executable. The solver that chooses assignments from costs (DESIGN.md) will produce the same
``{node name: device}`` mapping; it is not built yet.
"""

from .apply import (
    Placement,
    build,
    constant_bytes,
    default_assignment,
    library_target,
    placed_nodes,
    read_placement,
    resolve_placement,
    split_stages,
    tag_nodes,
    transfers,
)

__all__ = ["Placement", "build", "constant_bytes", "default_assignment", "library_target", "placed_nodes",
           "read_placement", "resolve_placement", "split_stages", "tag_nodes", "transfers"]
