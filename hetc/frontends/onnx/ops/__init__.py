"""hetc's ONNX converters, one op family per module.

Importing this package registers them. Add a new family module here explicitly (no
discovery magic), and see ``hetc.frontends.onnx.registry`` for how to write a converter.
"""

from . import (  # noqa: F401
    affine_grid,
    attention,
    cast,
    constant,
    control_flow,
    conv,
    cumsum,
    detection,
    expand,
    loss,
    math,
    misc,
    normalization,
    quantize,
    range,
    reduce,
    reshape,
    resize,
    reverse_sequence,
    rnn,
    rotary,
    sequence,
    slice,
    split,
    squeeze,
    tensor,
    tile,
    topk,
    trilu,
)
