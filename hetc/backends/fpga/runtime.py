"""FPGA regions at run time: C-simulation inside the host's library.

There is no FPGA here. Each region's HLS C++ is compiled by g++ (``codegen.generate``) into
the host CPU's library, where the VM calls it like any kernel: the part's runner runs the
whole model, FPGA regions included, bit-exact to what the HLS design computes. The manifest
(``offloads``), ``hetc run`` and the report label every such region "c-simulation". Running
the exported kernel on a real card is the generated project's ``host/`` program (XRT).
"""

from __future__ import annotations

from ...errors import UsageError

EXECUTION = "c-simulation"


def host_only(*_args, **_kwargs):
    """The FPGA has no part of its own to build, export, load or run: its regions are in the
    host's library (``Backend.offload``)."""
    raise UsageError("the fpga target runs regions of a model inside the host CPU's library; "
                     "compile with --target fpga,cpu")
