"""hetc's ONNX converters, one op family per module.

Importing this package registers them. Add a new family module here explicitly (no
discovery magic), and see ``hetc.frontends.onnx.registry`` for how to write a converter.
"""

from . import attention, constant, loss, math, normalization, rotary  # noqa: F401
