"""Analytical latency and resource estimates of a Region (no synthesis: labelled ``estimate``).

Model, per layer (tensors stream as one scalar per cycle, ``layers.py``):

- ``interval``: cycles between two samples entering the layer; at least the scalars it reads
  and writes per sample, and for MAC layers ``rows or pixels x reuse`` (II = reuse per output
  row/pixel). ``depth``: cycles from its first input to its first output (what it must buffer
  before computing, plus the pipeline's latency).
- dense: multipliers ``ceil(n_in * n_out / reuse)``; depth ``n_in + reuse + MUL_LATENCY +
  adder tree (ceil(log2 n_in) levels, ADD_LATENCY each)``.
- conv2d: multipliers ``ceil(KH*KW*C/groups*F / reuse)``; line buffers hold ``KH - 1`` rows
  (``W x C`` values each) and the first window must fill: depth ``((KH-1)*W + KW) * C + reuse +
  latencies``. Pools the same without multipliers; the global pool and transpose see all of
  a sample first; softmax / layer_norm a whole row (``2 n`` cycles: a statistics pass and an
  output pass).
- DSP48E2 (UG579: a 27x18 signed multiplier): a ``a x b``-bit fixed multiply takes
  ``ceil(a/27) * ceil(b/18)`` DSPs (operands sorted so ``a >= b``), none when both are at most
  ``LUT_MULT_BITS`` (Vitis HLS maps narrow products to LUTs); a float MAC ``FMUL_DSP +
  FADD_DSP`` = 5 (PG060, Floating-Point Operator on UltraScale+, full-DSP multiplier 3,
  adder 2); float functions ``FUNC_DSP`` (exp ~7 DSP plus adders; division and square root
  in LUTs). Fixed-point adders are LUTs and not counted.
- BRAM_18K (UG573): an array of ``depth x width`` bits takes the cheapest of the 18K aspect
  ratios (16K x 1 ... 512 x 36), i.e. at least ``ceil(bits / 18432)``; arrays of at most
  ``LUTRAM_BITS`` go to LUTRAM (reported as ``lutram_bits``). MAC weights are split into one
  bank per multiplier, ``reuse`` words deep (reuse 1: constants in the logic, no memory).
  Line buffers: ``KH - 1`` arrays of ``W`` words of ``C x bits``. Transposes hold two
  samples (ping-pong). Stream FIFOs are shallow (SRLs) except on a skip connection: the input
  arriving early buffers ``min(elements, arrival difference)`` values.
- Region, with DATAFLOW (all layers run concurrently, connected by FIFOs): ``interval`` =
  the largest layer interval; ``latency(N samples) = interval * N + depth of the longest
  input-to-output path`` (the sum of the depths for a chain of layers).

The constants are first-order figures for UltraScale+ parts at ~250 MHz (``clock_ns=4``); expect
the synthesis reports to differ by tens of percent. To estimate a new layer kind, add a
function to ``_LAYER`` returning its ``LayerEstimate``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from .layers import FLOAT, Layer, NumType, Region

MUL_LATENCY = 3  # DSP48 pipeline registers (A/B, M, P)
ADD_LATENCY = 1  # one fixed-point adder level per cycle
FMUL_LATENCY, FADD_LATENCY = 4, 7  # float32 operators at ~250 MHz (PG060 order of magnitude)
FUNC_LATENCY = 30  # exp/divide/sqrt pipelines, float32
FMUL_DSP, FADD_DSP = 3, 2  # PG060, UltraScale+, full DSP usage
FUNC_DSP = {"sigmoid": 9, "tanh": 9, "softmax": 9, "layer_norm": 12}  # exp 7 + add 2; add+mul+add+mul+add
LUT_MULT_BITS = 10  # products with both operands this narrow use LUTs, not DSPs
LUTRAM_BITS = 1024  # arrays this small are LUTRAM/registers, not BRAM
BRAM_SHAPES = ((1, 16384), (2, 8192), (4, 4096), (9, 2048), (18, 1024), (36, 512))  # 18K (width, depth)


@dataclass
class LayerEstimate:
    name: str
    op: str
    interval: int  # cycles per sample
    depth: int  # cycles from first input to first output
    multipliers: int = 0
    dsp: int = 0
    bram_18k: int = 0
    lutram_bits: int = 0
    reuse: int = 1

    def to_json(self) -> dict:
        return {"estimate": True, **asdict(self)}


@dataclass
class RegionEstimate:
    name: str
    clock_ns: float
    batch: int
    interval: int  # cycles between samples (the slowest layer)
    latency: int  # cycles for ``batch`` samples
    dsp: int
    bram_18k: int
    lutram_bits: int
    layers: list[LayerEstimate] = field(default_factory=list)

    @property
    def latency_us(self) -> float:
        return self.latency * self.clock_ns / 1000

    @property
    def samples_per_second(self) -> float:
        return 1e9 / (max(self.interval, 1) * self.clock_ns)

    def to_json(self) -> dict:
        return {"estimate": True, "region": self.name, "clock_ns": self.clock_ns, "batch": self.batch,
                "interval_cycles": self.interval, "latency_cycles": self.latency,
                "latency_us": self.latency_us, "samples_per_second": self.samples_per_second,
                "dsp": self.dsp, "bram_18k": self.bram_18k, "lutram_bits": self.lutram_bits,
                "layers": [layer.to_json() for layer in self.layers]}


def bits(t: NumType | None) -> int:
    return 32 if t is None or t.is_float else t.width


def dsp_per_multiply(a: NumType | None, b: NumType | None) -> int:
    """DSP48E2 slices for one multiplier (one MAC when float)."""
    if (a is None or a.is_float) or (b is None or b.is_float):
        return FMUL_DSP + FADD_DSP
    wide, narrow = max(a.width, b.width), min(a.width, b.width)
    if wide <= LUT_MULT_BITS:
        return 0
    return math.ceil(wide / 27) * math.ceil(narrow / 18)


def memory(depth: int, width: int) -> tuple[int, int]:
    """(BRAM_18K, LUTRAM bits) of one array of ``depth`` words of ``width`` bits."""
    if depth <= 0 or width <= 0:
        return 0, 0
    if depth * width <= LUTRAM_BITS:
        return 0, depth * width
    return min(math.ceil(width / w) * math.ceil(depth / d) for w, d in BRAM_SHAPES), 0


def _mac(layer: Layer, x_t: NumType, macs: int, outputs: int, reads: int, writes: int,
         fill: int, fan_in: int) -> LayerEstimate:
    """A dense/conv layer: ``outputs`` rows/pixels per sample, ``macs`` per output."""
    reuse = max(1, layer.reuse)
    mults = math.ceil(macs / reuse)
    is_float = x_t.is_float or (layer.weight or FLOAT).is_float
    tree = math.ceil(math.log2(max(fan_in, 2)))
    pipeline = (FMUL_LATENCY + FADD_LATENCY * tree) if is_float else (MUL_LATENCY + ADD_LATENCY * tree)
    bram = lutram = 0
    if reuse > 1:  # one bank per multiplier, reuse words deep
        b, lr = memory(reuse, bits(layer.weight))
        bram, lutram = b * mults, lr * mults
    return LayerEstimate(layer.name, layer.op, max(reads, writes, outputs * reuse), fill + reuse + pipeline,
                         mults, mults * dsp_per_multiply(x_t, layer.weight), bram, lutram, reuse)


def _dense(layer: Layer, in_shape, x_t: NumType) -> LayerEstimate:
    n_in, n_out = layer.weights["weight"].shape
    rows = math.prod(layer.shape[:-1])
    return _mac(layer, x_t, n_in * n_out, rows, rows * n_in, rows * n_out, n_in, n_in)


def _line_buffers(in_shape, kernel, t: NumType) -> tuple[int, int, int]:
    """(cycles to fill the first window, BRAM_18K, LUTRAM bits) of the line buffers."""
    _, w, c = in_shape
    kh, kw = kernel
    b, lr = memory(w, c * bits(t))
    return ((kh - 1) * w + kw) * c, b * (kh - 1), lr * (kh - 1)


def _conv2d(layer: Layer, in_shape, x_t: NumType) -> LayerEstimate:
    kh, kw, cg, f = layer.weights["weight"].shape
    oh, ow, _ = layer.shape
    fill, bram, lutram = _line_buffers(in_shape, (kh, kw), x_t)
    est = _mac(layer, x_t, kh * kw * cg * f, oh * ow, math.prod(in_shape), oh * ow * f, fill, kh * kw * cg)
    est.bram_18k += bram
    est.lutram_bits += lutram
    return est


def _pool(layer: Layer, in_shape, x_t: NumType) -> LayerEstimate:
    fill, bram, lutram = _line_buffers(in_shape, layer.attrs["kernel"], x_t)
    return LayerEstimate(layer.name, layer.op, max(math.prod(in_shape), math.prod(layer.shape)), fill + 2,
                         bram_18k=bram, lutram_bits=lutram)


def _whole_sample(layer: Layer, in_shape, x_t: NumType) -> LayerEstimate:
    n = math.prod(in_shape)
    if layer.op == "global_avg_pool2d":
        return LayerEstimate(layer.name, layer.op, n, n + MUL_LATENCY, 1, dsp_per_multiply(x_t, layer.result))
    b, lr = memory(n, bits(x_t))  # transpose: a ping-pong buffer of one sample
    return LayerEstimate(layer.name, layer.op, n, n, bram_18k=2 * b, lutram_bits=2 * lr)


def _row(layer: Layer, in_shape, x_t: NumType) -> LayerEstimate:
    n = in_shape[-1]
    rows = math.prod(in_shape[:-1])
    b, lr = memory(n, 32)
    return LayerEstimate(layer.name, layer.op, rows * 2 * n, 2 * n + FUNC_LATENCY, 1, FUNC_DSP[layer.op], b, lr)


def _elementwise(layer: Layer, in_shape, x_t: NumType) -> LayerEstimate:
    n = math.prod(layer.shape)
    if layer.op in ("sigmoid", "tanh"):
        return LayerEstimate(layer.name, layer.op, n, FUNC_LATENCY, 1, FUNC_DSP[layer.op])
    if layer.op in ("scale_shift", "multiply", "leaky_relu"):
        other = layer.weight if layer.op == "scale_shift" else (x_t if layer.op == "multiply" else layer.result)
        return LayerEstimate(layer.name, layer.op, n, MUL_LATENCY + 1, 1, dsp_per_multiply(x_t, other))
    return LayerEstimate(layer.name, layer.op, n, 1)  # relu, clip, add


def _free(layer: Layer, in_shape, x_t: NumType) -> LayerEstimate:
    return LayerEstimate(layer.name, layer.op, 0, 0)


_LAYER: dict[str, Callable[[Layer, tuple, NumType], LayerEstimate]] = {
    "dense": _dense, "conv2d": _conv2d, "max_pool2d": _pool, "avg_pool2d": _pool,
    "global_avg_pool2d": _whole_sample, "transpose": _whole_sample, "softmax": _row, "layer_norm": _row,
    "relu": _elementwise, "clip": _elementwise, "leaky_relu": _elementwise, "sigmoid": _elementwise,
    "tanh": _elementwise, "add": _elementwise, "multiply": _elementwise, "scale_shift": _elementwise,
    "reshape": _free,
}


def estimate(region: Region, clock_ns: float = 4.0) -> RegionEstimate:
    """Per-layer and region estimates (see the module doc)."""
    shapes = {name: tuple(shape) for name, shape in region.inputs}
    types = {name: t for (name, _), t in zip(region.inputs, region.input_types)}
    ready = {name: 0 for name, _ in region.inputs}  # cycle of each value's first element
    layers = []
    for layer in region.layers:
        in_shape, x_t = shapes[layer.inputs[0]], types[layer.inputs[0]]
        est = _LAYER[layer.op](layer, in_shape, x_t)
        arrivals = [ready[i] for i in layer.inputs]
        if len(arrivals) > 1:  # skip connection: the early input waits in a FIFO
            early = min(range(len(arrivals)), key=arrivals.__getitem__)
            words = min(math.prod(shapes[layer.inputs[early]]), max(arrivals) - min(arrivals))
            b, lr = memory(words, bits(types[layer.inputs[early]]))
            est.bram_18k += b
            est.lutram_bits += lr
        ready[layer.name] = max(arrivals) + est.depth
        shapes[layer.name], types[layer.name] = tuple(layer.shape), layer.result
        layers.append(est)
    interval = max([est.interval for est in layers] + [1])
    depth = max((ready[name] for name in region.outputs), default=0)
    return RegionEstimate(region.name, clock_ns, region.batch, interval, interval * region.batch + depth,
                          sum(e.dsp for e in layers), sum(e.bram_18k for e in layers),
                          sum(e.lutram_bits for e in layers), layers)


def node_seconds(node, spec) -> float | None:
    """The placement cost model's time for an op graph node (NCHW, before partitioning) on the
    FPGA ``spec``: the same interval model as the layers above (a MAC layer streams ``outputs x
    reuse`` cycles per sample, with the reuse that fits ``max_multipliers``; other layers one
    scalar per cycle) times the batch, at the spec's clock. Layers of a region overlap under
    DATAFLOW, so summing nodes overestimates a region; None for a node without shapes."""
    from .patterns import Limits, choose_reuse

    if not node.inputs or not node.outputs or not node.outputs[0].shape:
        return None
    out = node.outputs[0]
    batch = out.shape[0]
    weight = node.inputs[1].shape if len(node.inputs) > 1 else ()
    streamed = node.inputs[:1] if node.op in ("relax.nn.conv2d", "relax.matmul") else node.inputs  # not weights
    per_sample_in = max(t.size for t in streamed) // max(batch, 1)
    per_sample_out = out.size // max(batch, 1)
    cycles = max(per_sample_in, per_sample_out)
    if node.op == "relax.nn.conv2d" and len(weight) == 4:
        f, cg, kh, kw = weight
        macs, outputs = kh * kw * cg * f, math.prod(out.shape[2:])
    elif node.op == "relax.matmul" and len(weight) == 2:
        macs, outputs = weight[0] * weight[1], per_sample_out // max(weight[1], 1)
    else:
        macs = 0
    if macs:
        reuse = choose_reuse(macs, Limits(max_multipliers=int(spec.params.get("max_multipliers", 4096))))
        if reuse is None:
            return None
        cycles = max(cycles, outputs * reuse)
    return batch * cycles * float(spec.params.get("clock_ns", 4.0)) * 1e-9
