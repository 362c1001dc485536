"""Compile options shared by the API, the CLI and the backends."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from .errors import UsageError

LAYOUTS = (None, "NHWC", "NCHW")
# The largest dim hetc accepts anywhere (declared, inferred, --input-shape, --dim): TVM indexes
# within a dim with int32 in places, and no tensor of this machine's memory needs more.
MAX_DIM = 2**31 - 1
WINOGRAD_MODES = ("auto", "off", "2", "4")  # hetc/backends/cpu/winograd.py
ARCH_PATTERN = re.compile(r"sm_\d{2,3}[af]?")  # CUDA SM architectures: sm_80, sm_90a, sm_100f


WEIGHT_TYPES = (None, "int8")


@dataclass(frozen=True)
class CompileOptions:
    targets: tuple[str, ...] = ("cpu",)  # target names, validated against the registry
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # binds dynamic dims
    layout: str | None = None  # conv layout to convert to; None = the target's preferred layout
    num_threads: int = 0  # CPU worker threads; 0 = all cores of this machine
    database: str | None = None  # tuning database directory (hetc tune); None = default schedules
    # GPU code architectures ("sm_90", or a device spec name from hetc/devices); () = the target's default
    arch: tuple[str, ...] = ()
    # FPGA number types: "float", "fixed" (from --calibration ranges, else a default), a type
    # such as "ap_fixed<16,6>", or a JSON file of per-layer types (docs/fpga.md); None = float
    precision: str | None = None
    calibration: str | None = None  # .npz of model inputs for choosing fixed-point ranges
    # symbolic input dims: name -> (low, high) (--dim batch=1:64); undeclared ones get the default range
    dims: dict[str, tuple[int, int]] = field(default_factory=dict)
    # a representative size per symbolic dim, for costs, placement and planning (--plan-shape batch=8)
    plan_shape: dict[str, int] = field(default_factory=dict)
    # the sizes Ascend regions are built for, per symbolic dim (--gears batch=1,8,32): CANN graphs
    # are static, or compiled for a list of shapes ("gears"); undeclared dims get default_gears
    gears: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # the CPU the LLVM code is for (an LLVM -mcpu name: haswell, znver3, skylake-avx512, ...);
    # None = the compiling machine's. The CPU rules pick vector widths and tiles from it.
    cpu: str | None = None
    # 3x3 stride-1 convs on the CPU: "auto" (a cost rule per conv), "off", or "2"/"4" (every
    # eligible conv as Winograd F(2x2,3x3) / F(4x4,3x3)); see hetc/backends/cpu/winograd.py
    winograd: str = "auto"
    # decoders: keep the KV cache in preallocated buffers of this many positions, updated in
    # place (hetc/passes/kv_cache.py, hetc.session); 0 = the model's own past/present signature
    kv_cache: int = 0
    # constant matmul weights stored as "int8" (per output channel scale, dequantized in the
    # matmul's inner loop: hetc/passes/weight_int8.py); None = as the model has them
    weights: str | None = None

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise UsageError(f"invalid layout {self.layout!r}; choose NHWC or NCHW, or leave it unset")
        if self.num_threads < 0:
            raise UsageError(f"num_threads must be >= 0, got {self.num_threads}")
        for arch in self.arch:
            if not ARCH_PATTERN.fullmatch(arch):
                from .devices import all_specs

                if arch not in all_specs():
                    raise UsageError(f"invalid arch {arch!r}; expected sm_XX (e.g. sm_90) or a device: "
                                     f"{', '.join(all_specs())}")

        for name, value in self.plan_shape.items():
            low, high = self.dims.get(name, (0, None))
            if value < max(low, 0) or (high is not None and value > high):
                raise UsageError(f"--plan-shape {name}={value} is outside the dim's range {low}..{high}")
        for name, values in self.gears.items():
            if name not in self.dims:
                continue  # checked against the model's dims once it is loaded (check_gears)
            check_gears(name, values, self.dims[name])
        if self.cpu is not None:
            check_cpu(self.cpu)
        if self.winograd not in WINOGRAD_MODES:
            raise UsageError(f"invalid winograd mode {self.winograd!r}; choose one of {', '.join(WINOGRAD_MODES)}")
        if self.weights not in WEIGHT_TYPES:
            raise UsageError(f"invalid --weights {self.weights!r}; choose {', '.join(w for w in WEIGHT_TYPES if w)} "
                             "(or leave it unset: the model's own weights)")
        if self.weights is not None and any(t != "cpu" for t in self.targets):
            raise UsageError(f"--weights {self.weights} is for the CPU target; got --target {','.join(self.targets)}")
        if self.kv_cache < 0:
            raise UsageError(f"--kv-cache is the cache's length in positions (>= 1), got {self.kv_cache}")
        if self.calibration is not None:
            if self.precision not in (None, "fixed"):
                raise UsageError("--calibration chooses fixed-point types: use it with --precision fixed "
                                 "(or alone)")
            object.__setattr__(self, "precision", "fixed")

    @property
    def threads(self) -> int:
        return self.num_threads or default_threads()


def check_cpu(name: str) -> None:
    """UsageError unless LLVM knows the CPU ``name`` (for this machine's target triple)."""
    import tvm

    known = list(tvm.target.codegen.llvm_get_cpu_archlist(tvm.target.Target("llvm")))
    if name not in known:
        examples = [n for n in ("haswell", "skylake-avx512", "icelake-server", "sapphirerapids", "znver3",
                                "znver4", "znver5") if n in known]
        raise UsageError(f"unknown CPU {name!r} for --cpu; LLVM knows {len(known)} names, e.g. "
                         f"{', '.join(examples or known[:6])}")


def default_threads() -> int:
    """Physical cores this process may run on (hyper-threads add little to compute kernels)."""
    import psutil

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or usable
    return max(1, min(usable, physical))


def parse_input_shape(spec: str) -> tuple[str, tuple[int, ...]]:
    """``"name=1,3,224,224"`` -> ("name", (1, 3, 224, 224))."""
    name, sep, dims = spec.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
    except ValueError:
        shape = ()
    if not sep or not name or not shape or any(not 0 <= d <= MAX_DIM for d in shape):
        raise UsageError(f"invalid --input-shape {spec!r}; expected NAME=D0,D1,... with dims 0..{MAX_DIM}")
    return name, shape


def parse_dim(spec: str) -> tuple[str, tuple[int, int]]:
    """``"batch=1:64"`` -> ("batch", (1, 64)); ``"seq=128"`` -> ("seq", (128, 128))."""
    name, sep, value = spec.partition("=")
    low, colon, high = value.partition(":")
    try:
        bounds = (int(low), int(high if colon else low))
    except ValueError:
        bounds = (-1, -1)
    if not sep or not name.strip() or not 0 <= bounds[0] <= bounds[1] <= MAX_DIM:
        raise UsageError(f"invalid --dim {spec!r}; expected NAME=LOW:HIGH with 0 <= LOW <= HIGH <= {MAX_DIM} "
                         "(e.g. batch=1:64)")
    return name.strip(), bounds


def parse_plan_shape(spec: str) -> tuple[str, int]:
    """``"seq=128"`` -> ("seq", 128): the size costs and placement assume for a symbolic dim."""
    name, sep, value = spec.partition("=")
    if not sep or not name.strip() or not value.strip().isdigit():
        raise UsageError(f"invalid --plan-shape {spec!r}; expected NAME=SIZE[,NAME=SIZE...] (e.g. seq=128)")
    return name.strip(), int(value)


def parse_plan_shapes(specs) -> dict[str, int]:
    """``("batch=4,seq=128", "heads=2")`` -> {"batch": 4, "seq": 128, "heads": 2}: repeated
    ``--plan-shape`` options, each one size or a comma-separated list; a dim given twice is an error."""
    sizes: dict[str, int] = {}
    for spec in specs:
        for part in spec.split(","):
            name, size = parse_plan_shape(part)
            if name in sizes:
                raise UsageError(f"--plan-shape given twice for '{name}'")
            sizes[name] = size
    return sizes


def plan_values(dims: dict[str, tuple[int, int]], plan_shape: dict[str, int]) -> dict[str, int]:
    """The size each symbolic dim is costed at: ``plan_shape``, else its range's low end (at least 1)."""
    return {name: plan_shape.get(name, min(max(low, 1), high)) for name, (low, high) in dims.items()}


MAX_GEARS = 8  # default gears per dim; ATC takes 2..100 gears (the product over the dims, for --dynamic_dims)


def parse_gears(spec: str) -> tuple[str, tuple[int, ...]]:
    """``"batch=1,8,32"`` -> ("batch", (1, 8, 32)): the sizes Ascend regions are built for."""
    name, sep, value = spec.partition("=")
    try:
        sizes = tuple(sorted({int(v) for v in value.split(",")}))
    except ValueError:
        sizes = ()
    if not sep or not name.strip() or not sizes or sizes[0] < 1:
        raise UsageError(f"invalid --gears {spec!r}; expected DIM=SIZE,SIZE,... with sizes >= 1 (e.g. batch=1,8,32)")
    return name.strip(), sizes


def check_gears(name: str, sizes, bounds: tuple[int, int]) -> None:
    """Gears must lie within the dim's declared range."""
    low, high = bounds
    outside = [s for s in sizes if not low <= s <= high]
    if outside:
        raise UsageError(f"--gears {name}: {', '.join(map(str, outside))} outside the dim's range {low}..{high} "
                         f"(declare a wider one with --dim {name}=LOW:HIGH)")


def default_gears(bounds: tuple[int, int], limit: int = MAX_GEARS) -> tuple[int, ...]:
    """The gears of a dim declared only by its range: the powers of two inside it plus both ends,
    at most ``limit`` sizes; beyond that the largest ones are kept (with the low end), since a
    longer input costs more and a gear must match the input exactly. 1:8 -> 1, 2, 4, 8;
    1:512 -> 1, 8, 16, 32, 64, 128, 256, 512; 3:100 -> 3, 4, 8, 16, 32, 64, 100."""
    low, high = max(bounds[0], 1), max(bounds[1], 1)
    sizes = sorted({low, high} | {1 << k for k in range(high.bit_length()) if low < 1 << k < high})
    if len(sizes) > limit:
        sizes = [sizes[0], *sizes[len(sizes) - limit + 1:]]
    return tuple(sizes)


def parse_arch(spec: str | None) -> tuple[str, ...]:
    """``"sm_90,sm_80"`` or ``"nvidia-a100"`` -> a tuple of names (validated by CompileOptions)."""
    if spec is None:
        return ()
    names = tuple(n.strip() for n in spec.split(","))
    if not names or any(not n for n in names):
        raise UsageError(f"invalid --arch {spec!r}; expected e.g. sm_90, sm_80,sm_90 or a device name")
    return names
