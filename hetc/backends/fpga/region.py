"""Relax BYOC functions -> ``Region`` s (``layers.py``), and why the rest stayed on the CPU.

``region_from_function`` takes one function the partitioning made (``patterns.partition``):
attrs ``"Codegen": "hetc_fpga"`` (and ``global_symbol`` once ``RunCodegen`` hands it to
``relax.ext.hetc_fpga``), whose body binds local functions with a ``"Composite"`` attr and
calls them; weights are constants bound inside the composites. Each Relax op inside becomes a
layer, except what folds into its producer within the same composite:

- ``add``/``subtract``/``multiply``/``divide`` by a per-channel constant -> a ``scale_shift``;
  one after conv2d/dense (add/subtract) -> that layer's bias, one after a ``scale_shift`` ->
  folded into its scale and shift (a decomposed batch norm becomes one ``scale_shift``);
- ``maximum``/``minimum`` with a constant -> ``clip`` (``min``/``max`` = +-FLT_MAX for the open
  side), ``maximum(x, 0)`` -> ``relu``; a pair in one composite -> one ``clip``;
- ``add``/``multiply`` of two activations -> ``add``/``multiply``;
- ``mean`` over H, W -> ``global_avg_pool2d`` (+ a free ``reshape`` when ``keepdims``);
- ``permute_dims`` that only moves size-1 axes -> a free ``reshape``.

Weights are converted to the layouts of ``layers.py``: conv weights from the op's
``kernel_layout`` (OHWI after the NHWC layout pass; OIHW, HWIO... all work) to (KH, KW, C/groups, F).

To support a new Relax op: add its rules and pattern in ``patterns.py``, then a case in
``_Builder.convert``.
"""

from __future__ import annotations

import numpy as np

from ...errors import CompileError
from .layers import FLOAT, Layer, Region, c_identifier
from .patterns import (
    Limits,
    check_reason,
    choose_reuse,
    conv_geometry,
    isolated_movement,
    pads4,
    tensor_info,
    view_of_call,
)

FLT_MAX = float(np.finfo(np.float32).max)


def _func_attr(func, key: str):
    attrs = func.attrs
    return None if attrs is None or key not in attrs else attrs[key]


def _const(expr) -> np.ndarray | None:
    import tvm

    return expr.value.numpy() if isinstance(expr, tvm.ir.GenericConst) else None


class _Builder:
    def __init__(self, region_name: str, limits: Limits) -> None:
        self.region = region_name
        self.limits = limits
        self.taken: set[str] = set()
        self.layers: list[Layer] = []

    def error(self, message: str) -> CompileError:
        return CompileError(f"FPGA region {self.region}: {message}")

    def add(self, op: str, inputs: list[str], shape, source: str, **fields) -> Layer:
        layer = Layer(c_identifier(f"{op}_{len(self.layers)}", self.taken), op, inputs, tuple(int(d) for d in shape),
                      source=source, **fields)
        self.layers.append(layer)
        return layer

    # -- composites ---------------------------------------------------------------------------

    def composite(self, func, args: list[str]) -> str:
        """Convert one composite function called with region values ``args``; returns the name
        of the layer holding its result."""
        from tvm import relax

        label = str(_func_attr(func, "Composite") or "composite")
        env = dict(zip(func.params, args))
        made: dict[str, Layer] = {}  # layers of this composite, by name (folding targets)
        for block in func.body.blocks:
            for binding in block.bindings:
                value, var = binding.value, binding.var
                if isinstance(value, relax.Var):
                    env[var] = env[value]
                elif isinstance(value, relax.Call) and hasattr(value.op, "name"):
                    layer = self.convert(value, env, made, f"{var.name} ({label})")
                    made[layer.name] = layer
                    env[var] = layer.name
                else:
                    raise self.error(f"unexpected binding {type(value).__name__} in composite {label}")
        return env[func.body.body]

    def convert(self, call, env: dict, made: dict[str, Layer], source: str) -> Layer:
        """One Relax op call -> a new layer, or the producer it folded into."""
        reason = check_reason(call, self.limits)
        if reason is not None:
            raise self.error(f"{source}: {reason}")
        op = str(call.op.name)
        view = view_of_call(call)
        a = view.attrs or {}
        out = view.output.shape
        consts = [_const(x) for x in call.args]
        data = [env[x] for x in call.args if x in env]
        producer = made.get(data[0]) if data else None

        def new(kind: str, **fields) -> Layer:
            return self.add(kind, data, out[1:], source, **fields)

        if op == "relax.nn.conv2d":
            g = conv_geometry(view)
            layout = a["kernel_layout"]
            weight = np.transpose(consts[1], [layout.index(c) for c in "HWIO"]).astype(np.float32)
            return new("conv2d", attrs={"strides": tuple(int(s) for s in a["strides"]),
                                        "pads": pads4(a["padding"]), "groups": int(g["groups"])},
                       weights={"weight": weight, "bias": np.zeros(g["F"], np.float32)},
                       reuse=self.reuse(weight.size, source))
        if op == "relax.matmul":
            w = consts[1].astype(np.float32)
            return new("dense", weights={"weight": w, "bias": np.zeros(w.shape[1], np.float32)},
                       reuse=self.reuse(w.size, source))
        if op in _AFFINE:
            const = next((c for c in consts if c is not None), None)
            if const is None:
                return new("add" if op == "relax.add" else "multiply")
            channels = out[-1]
            c = np.broadcast_to(const.reshape(-1).astype(np.float64), (channels,))
            scale, shift = _AFFINE[op](c)
            if producer is not None and producer.op == "scale_shift":  # x * s0 + t0, then this
                w = producer.weights
                w["scale"] = (w["scale"] * scale).astype(np.float32)
                w["shift"] = (w["shift"] * scale + shift).astype(np.float32)
                return producer
            if producer is not None and producer.op in ("conv2d", "dense") and op in ("relax.add", "relax.subtract"):
                producer.weights["bias"] = (producer.weights["bias"] + shift).astype(np.float32)
                return producer
            return new("scale_shift", weights={"scale": scale.astype(np.float32), "shift": shift.astype(np.float32)})
        if op in ("relax.maximum", "relax.minimum"):
            bound = float(next(c for c in consts if c is not None).reshape(()))
            side = "min" if op == "relax.maximum" else "max"
            if producer is not None and producer.op == "clip" and abs(producer.attrs[side]) == FLT_MAX:
                producer.attrs[side] = bound  # the second half of a clip pair
                return producer
            if side == "max" and producer is not None and producer.op == "relu":  # maximum(x, 0) first
                producer.op, producer.attrs = "clip", {"min": 0.0, "max": bound}
                self.rename(producer, f"clip_{self.layers.index(producer)}", env, made)
                return producer
            if side == "min" and bound == 0.0:
                return new("relu")
            return new("clip", attrs={"min": -FLT_MAX, "max": FLT_MAX, side: bound})
        if op in _SIMPLE:
            return new(_SIMPLE[op])
        if op == "relax.nn.leakyrelu":
            return new("leaky_relu", attrs={"alpha": float(a["alpha"])})
        if op in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d"):
            attrs = {"kernel": tuple(int(k) for k in a["pool_size"]), "strides": tuple(int(s) for s in a["strides"]),
                     "pads": pads4(a["padding"])}
            if op == "relax.nn.avg_pool2d":
                attrs["count_include_pad"] = bool(a["count_include_pad"])
            return new(op.rsplit(".", 1)[-1], attrs=attrs)
        if op == "relax.mean":
            pool = self.add("global_avg_pool2d", data, (out[-1],), source)
            if len(out) == 2:
                return pool
            return self.add("reshape", [pool.name], out[1:], source)
        if op == "relax.nn.layer_norm":
            c = out[-1]
            gamma = consts[1].reshape(-1) if a.get("scale", True) else np.ones(c)
            beta = consts[2].reshape(-1) if a.get("center", True) else np.zeros(c)
            return new("layer_norm", attrs={"epsilon": float(a["epsilon"])},
                       weights={"gamma": gamma.astype(np.float32), "beta": beta.astype(np.float32)})
        if op == "relax.permute_dims":
            x = view.inputs[0].shape
            axes = list(range(len(x)))[::-1] if a.get("axes") is None else [int(v) % len(x) for v in a["axes"]]
            moved = [ax for ax in axes if x[ax] != 1]
            if moved == sorted(moved):  # stream order unchanged
                return new("reshape")
            return new("transpose", attrs={"perm": tuple(ax - 1 for ax in axes[1:])})
        if op == "relax.reshape":
            return new("reshape")
        raise self.error(f"{source}: no conversion for {op}")

    def rename(self, layer: Layer, name: str, env: dict, made: dict[str, Layer]) -> None:
        """Rename a layer of the current composite (no later layer refers to it yet)."""
        old, layer.name = layer.name, c_identifier(name, self.taken)
        made[layer.name] = made.pop(old)
        for key, value in env.items():
            if value == old:
                env[key] = layer.name

    def reuse(self, macs: int, source: str) -> int:
        reuse = choose_reuse(macs, self.limits)
        if reuse is None:
            raise self.error(f"{source}: {macs} multipliers exceed the limits")
        return reuse


# y = x op c as (scale, shift) of a scale_shift
_AFFINE = {
    "relax.add": lambda c: (np.ones_like(c), c),
    "relax.subtract": lambda c: (np.ones_like(c), -c),
    "relax.multiply": lambda c: (c, np.zeros_like(c)),
    "relax.divide": lambda c: (1.0 / c, np.zeros_like(c)),
}
_SIMPLE = {"relax.nn.relu": "relu", "relax.sigmoid": "sigmoid", "relax.tanh": "tanh",
           "relax.nn.softmax": "softmax"}


def region_from_function(func, name: str, limits: Limits | None = None) -> Region:
    """The Region of a merged BYOC function (see the module doc); raises CompileError when the
    function holds something the FPGA layers cannot express."""
    from tvm import relax

    build = _Builder(c_identifier(name), limits or Limits())
    env: dict = {}
    inputs, batch = [], set()
    for param in func.params:
        info = tensor_info(param.ty)
        if info is None or not info.shape:
            raise build.error(f"input {param.name} is not a tensor with a static shape and a batch axis")
        input_name = c_identifier(param.name, build.taken, prefix="in")
        inputs.append((input_name, info.shape[1:]))
        env[param] = input_name
        batch.add(info.shape[0])
    local: dict = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            value, var = binding.value, binding.var
            if isinstance(value, relax.Function):
                local[var] = value
            elif isinstance(value, relax.Call) and (value.op in local or isinstance(value.op, relax.Function)):
                env[var] = build.composite(local.get(value.op, value.op), [env[a] for a in value.args])
            elif isinstance(value, relax.Var):
                env[var] = env[value]
            elif isinstance(value, relax.Tuple):
                env[var] = [env[f] for f in value.fields]
            elif isinstance(value, relax.TupleGetItem):
                env[var] = env[value.tuple_value][value.index]
            else:
                raise build.error(f"unexpected binding {type(value).__name__}")
    result = func.body.body
    fields = list(result.fields) if isinstance(result, relax.Tuple) else [result]
    outputs = []
    for field in fields:
        value = env[field]
        for out in value if isinstance(value, list) else [value]:
            if out not in {layer.name for layer in build.layers}:
                raise build.error(f"output {out} is a region input passed through")
            outputs.append(out)
    for out_ty in [f.ty for f in fields]:
        info = tensor_info(out_ty)
        if info is not None and info.shape:
            batch.add(info.shape[0])
    if len(batch) > 1:
        raise build.error(f"inputs and outputs disagree on the batch size: {sorted(batch)}")
    return Region(build.region, inputs, [FLOAT] * len(inputs), outputs, build.layers,
                  batch=batch.pop() if batch else 1)


def fpga_functions(mod) -> dict[str, object]:
    """The module's functions made for the FPGA (``"Codegen": "hetc_fpga"``), by name."""
    from ..byoc import codegen_functions
    from .patterns import CODEGEN

    return codegen_functions(mod, CODEGEN)


def unsupported_reasons(mod, limits: Limits | None = None) -> dict[str, str]:
    """For every op call left in ``main`` after partitioning: its variable's name -> why it
    stayed on the CPU (with the ``limits`` the partitioning used). Relax names may repeat
    (placement's ``tag_nodes`` makes them unique); a repeated one gets ``#2``, ``#3``..."""
    import tvm
    from tvm import relax

    reasons = {}
    isolated = isolated_movement(mod["main"], limits)
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                reason = check_reason(value, limits)
                if reason is None and value in isolated:
                    reason = "moves data only, next to no FPGA computation"
                key, k = binding.var.name, 1
                while key in reasons:
                    key, k = f"{binding.var.name}#{k + 1}", k + 1
                reasons[key] = reason or "not matched by an FPGA pattern"
    return reasons
