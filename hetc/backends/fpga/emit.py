"""HLS C++ for an FPGA ``Region``: a Vitis HLS project, and one C-simulation source for TVM.

``project_files(region, options)`` writes the region as a DATAFLOW top function over hetc's
HLS kernel library (``hls/``): one kernel call per layer, ``hls::stream`` s between them,
``clone`` s where a tensor has several readers, array<->stream adapters at the ports, plus the
testbench, the Vitis HLS script, an XRT host program and a README. ``testbench_data`` writes the
testbench's inputs and expected outputs. ``csim_source(region, options)`` is the same firmware
as one C++ translation unit exporting a TVM-FFI function that runs it on float32 tensors.

Every identifier in the generated code is made by ``layers.c_identifier`` from the (untrusted)
model names, through one allocator that also keeps them clear of the names the code itself
uses (``hls``, ``std``, the ``ap_*`` types and modes, anything starting with ``hetc``, all-caps
names that could be macros, the C library's global types and variables). ``top_name(region)``
is the top function's (and the TVM-FFI function's) name: ``region.name`` itself whenever that
is already such a plain identifier.

To add a layer kind: write its kernel in ``hls/`` (see ``hls/hetc_common.h``), then a
``_Emitter._<op>`` method returning its config fields, types, weights and the call.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...errors import CompileError, InputError, UsageError
from .fixed import quantize
from .layers import FLOAT, OPS, Layer, NumType, Region, c_identifier
from .toolchain import hls_include

# Names the generated code uses or includes (with the C library's global types and variables,
# which a typedef or the top function must not redeclare); model names never become these.
_RESERVED = frozenset({
    "hls", "std", "tvm", "nnet", "xrt", "ap_fixed", "ap_ufixed", "ap_int", "ap_uint", "ap_fixed_base",
    "ap_int_base", "ap_private", "ap_q_mode", "ap_o_mode", "ap_range_ref", "af_range_ref", "af_bit_ref",
    "ap_slong", "ap_ulong", "ssdm_int", "half", "exp", "tanh", "sqrt", "fabs", "printf", "errno", "assert",
    "offsetof", "stdin", "stdout", "stderr", "environ", "timezone", "daylight", "tzname", "signgam", "optarg",
    "optind", "opterr", "optopt", "uint", "ushort", "ulong", "u_char", "u_short", "u_int", "u_long", "quad_t",
    "size_t", "ssize_t", "ptrdiff_t", "max_align_t", "nullptr_t", "intptr_t", "uintptr_t", "intmax_t",
    "uintmax_t", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t",
    "u_int8_t", "u_int16_t", "u_int32_t", "u_int64_t", "float_t", "double_t", "time_t", "clock_t", "clockid_t",
    "timer_t", "sig_t", "sigset_t", "pid_t", "uid_t", "gid_t", "id_t", "off_t", "loff_t", "mode_t", "dev_t",
    "ino_t", "key_t", "nlink_t", "blksize_t", "blkcnt_t", "fsblkcnt_t", "fsfilcnt_t", "useconds_t",
    "suseconds_t", "socklen_t", "caddr_t", "daddr_t", "register_t", "fpos_t", "div_t", "ldiv_t", "lldiv_t",
    "wint_t", "wctype_t", "mbstate_t", "locale_t", "pthread_t", "cpu_set_t", "fenv_t", "fexcept_t", "FILE"})


@dataclass(frozen=True)
class EmitOptions:
    """How the Vitis HLS project is built. ``part`` and ``clock_ns`` go to ``run_hls.tcl``,
    ``platform`` to the ``v++`` link in ``host/Makefile``; ``io`` is the inter-layer interface
    (only ``"stream"``: ``hls::stream`` s of scalars)."""

    part: str = "xcu250-figd2104-2L-e"  # Alveo U250
    clock_ns: float = 4.0
    io: str = "stream"
    platform: str = "xilinx_u250_gen3x16_xdma_4_1_202210_1"

    def check(self) -> None:
        if self.io != "stream":
            raise UsageError(f"FPGA io {self.io!r} is not supported (only 'stream')")
        if not (isinstance(self.clock_ns, (int, float)) and 0 < self.clock_ns < 1000):
            raise UsageError(f"FPGA clock period {self.clock_ns!r} ns is not a positive number below 1000")
        for what, value in (("part", self.part), ("platform", self.platform)):
            if not re.fullmatch(r"[A-Za-z0-9_.\-]+", value):
                raise UsageError(f"FPGA {what} {value!r} is not a plain name ([A-Za-z0-9_.-])")


def top_name(region: Region) -> str:
    """The C++ top function of ``region`` and the name ``csim_source`` exports it under."""
    return _Names()(region.name)


def project_files(region: Region, options: EmitOptions | None = None) -> dict[str, str]:
    """The Vitis HLS project of ``region`` as {relative path: text} (see the README it contains)."""
    options = options or EmitOptions()
    options.check()
    d = _Emitter(region).design()
    top = d.top
    files = {
        f"firmware/{top}.h": _guarded(f"HETC_TOP_{top}_H_", '#include "ap_fixed.h"\n\n' + d.port_decls()),
        "firmware/parameters.h": _guarded(
            f"HETC_PARAMETERS_{top}_H_",
            f'#include "hetc_hls/hetc_hls.h"\n#include "{top}.h"\n\n' + d.parameters(inline_weights=False)),
        f"firmware/{top}.cpp": f'#include "parameters.h"\n\n{d.top_function()}',
        f"tb/{top}_tb.cpp": _testbench(d),
        "run_hls.tcl": _tcl(top, options),
        "host/host.cpp": _host(d),
        "host/Makefile": _makefile(top, options),
        "README.md": _readme(d, options),
    }
    for w in d.weights:
        files[f"firmware/weights/{w.name}.h"] = _guarded(f"HETC_WEIGHTS_{w.name}_H_", w.definition())
    for header in sorted(hls_include().glob("*.h")):
        files[f"firmware/hetc_hls/{header.name}"] = header.read_text()
    return files


def csim_source(region: Region, options: EmitOptions | None = None) -> str:
    """One C++17 translation unit: the region's firmware (inlined, in its own namespace) and a
    TVM-FFI function named ``top_name(region)`` in destination-passing style: the region's inputs,
    then its outputs, all float32 CPU tensors with the leading batch axis (``region.batch``). It
    converts each input to its port type, runs the top function once per sample and converts the
    results back to float32.

    Compile with ``-std=c++17 -fPIC -shared -O2 -Wno-unknown-pragmas -ffp-contract=off`` (no fused
    multiply-adds: float layers round every operation, as ``emulate.py`` does) and the include dirs
    ``toolchain.hls_include()``, ``toolchain.ap_types_include()`` and
    ``tvm_ffi.libinfo.find_include_path()`` / ``find_dlpack_include_path()``; it reads nothing else.
    Sources of several regions can share a library (each has its own namespace and symbol). A
    call is not reentrant: the kernels' line buffers are static, as C-simulation of HLS code is.
    """
    options = options or EmitOptions()
    options.check()
    d = _Emitter(region).design()
    ns = d.names("csim_" + d.top)
    args = [f"tvm::ffi::TensorView {p.name}" for p in d.inputs + d.outputs]
    checks, convert_in, convert_out, buffers = [], [], [], []
    for p in d.inputs + d.outputs:
        dims = ", ".join(str(n) for n in (region.batch, *p.shape))
        checks.append(f'    hetc_check({p.name}, "{p.name}", {{{dims}}}, "({dims})");')
        buffers.append(f"    std::vector<{p.type_name}> hetc_{p.name}({p.size});")
    for p in d.inputs:
        convert_in.append(f"        for (int64_t hetc_i = 0; hetc_i < {p.size}; hetc_i++) hetc_{p.name}[hetc_i] = "
                          f"({p.type_name})hetc_data({p.name})[hetc_n * {p.size} + hetc_i];")
    for p in d.outputs:
        convert_out.append(f"        for (int64_t hetc_i = 0; hetc_i < {p.size}; hetc_i++) "
                           f"hetc_data({p.name})[hetc_n * {p.size} + hetc_i] = "
                           f"static_cast<float>(static_cast<double>(hetc_{p.name}[hetc_i]));")
    call = ", ".join(f"hetc_{p.name}.data()" for p in d.inputs + d.outputs)
    return f"""\
// C-simulation of the FPGA region {_comment(region.name)} for TVM (generated by hetc).
// Build: g++ -std=c++17 -O2 -fPIC -shared -Wno-unknown-pragmas -ffp-contract=off -I<hls_include> -I<ap_types>
//        -I<tvm_ffi include> -I<dlpack include>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>

#include "hetc_hls.h"

namespace {ns} {{

{d.port_decls()}
{d.parameters(inline_weights=True)}
{d.top_function()}
inline void hetc_check(const tvm::ffi::TensorView& t, const char* what, std::initializer_list<int64_t> shape,
                       const char* shape_text) {{
    bool same = t.ndim() == static_cast<int32_t>(shape.size());
    int32_t axis = 0;
    for (int64_t n : shape) same = same && t.size(axis++) == n;
    if (!same) TVM_FFI_THROW(ValueError) << "{d.top}: " << what << " must have shape " << shape_text;
    if (t.device().device_type != kDLCPU) TVM_FFI_THROW(ValueError) << "{d.top}: " << what << " must be on the CPU";
    if (t.dtype().code != kDLFloat || t.dtype().bits != 32 || t.dtype().lanes != 1) {{
        TVM_FFI_THROW(TypeError) << "{d.top}: " << what << " must be float32";
    }}
    if (!t.IsContiguous()) TVM_FFI_THROW(ValueError) << "{d.top}: " << what << " must be contiguous";
}}

inline float* hetc_data(const tvm::ffi::TensorView& t) {{
    return reinterpret_cast<float*>(static_cast<char*>(t.data_ptr()) + t.byte_offset());
}}

void hetc_ffi_entry({", ".join(args)}) {{
{chr(10).join(checks)}
{chr(10).join(buffers)}
    for (int64_t hetc_n = 0; hetc_n < {region.batch}; hetc_n++) {{
{chr(10).join(convert_in)}
        {d.top}({call});
{chr(10).join(convert_out)}
    }}
}}

}}  // namespace {ns}

TVM_FFI_DLL_EXPORT_TYPED_FUNC({d.top}, {ns}::hetc_ffi_entry);
"""


def testbench_data(region: Region, inputs: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                   atol: float = 0.0, rtol: float = 1e-4) -> dict[str, str]:
    """``tb_data/inputs.txt`` and ``tb_data/expected.txt`` for the project's testbench: one line per
    sample (every input, flattened and concatenated; likewise the outputs), ``inputs`` /
    ``expected`` having a leading sample axis. The testbench accepts an output ``y`` for an
    expected ``e`` when ``|y - e| <= atol + rtol * |e|`` (the first line of expected.txt)."""
    d = _Emitter(region).design()
    samples = None
    for what, arrays, ports in (("input", inputs, d.inputs), ("expected output", expected, d.outputs)):
        if len(arrays) != len(ports):
            raise InputError(f"region {region.name} has {len(ports)} {what}s, got {len(arrays)}")
        for array, port in zip(arrays, ports):
            shape = np.shape(array)
            if shape[1:] != port.shape or (samples is not None and shape[0] != samples):
                raise InputError(f"{what} {port.name} of region {region.name}: shape {shape}, expected "
                                 f"(samples, {', '.join(map(str, port.shape))})")
            samples = shape[0]

    def lines(arrays: Sequence[np.ndarray]) -> str:
        flat = np.concatenate([np.asarray(a, np.float32).reshape(samples, -1) for a in arrays], axis=1)
        # repr of the float32 values as doubles: exact, so a tolerance of 0 means bit-identical
        return "".join(" ".join(map(repr, row)) + "\n" for row in flat.astype(np.float64).tolist())

    return {"tb_data/inputs.txt": lines(inputs),
            "tb_data/expected.txt": f"tolerance {atol:.9g} {rtol:.9g}\n" + lines(expected)}


def write_files(files: dict[str, str], directory: str | Path) -> Path:
    """Writes ``project_files`` / ``testbench_data`` output under ``directory``."""
    root = Path(directory)
    for rel, text in files.items():
        path = root / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise CompileError(f"internal: generated path {rel!r} leaves the project")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


# ---------------------------------------------------------------------------------------------
# Names and numbers


class _Names:
    """Allocates unique, safe C identifiers (see the module docstring)."""

    def __init__(self) -> None:
        self.taken: set[str] = set(_RESERVED)

    def __call__(self, text: str) -> str:
        name = c_identifier(str(text))
        if name.lower().startswith("hetc") or name.isupper() or name.startswith(("ap_", "AP_")):
            name = f"n_{name}"
        return c_identifier(name, self.taken)


def _comment(text: str) -> str:
    """Untrusted text made safe for a // comment (no newline, no line continuation)."""
    return re.sub(r"[^A-Za-z0-9_ .,:;()<>=+\-/\[\]]", "?", str(text))[:120]


def _guarded(guard: str, body: str) -> str:
    return f"#ifndef {guard}\n#define {guard}\n\n{body}\n#endif\n"


def _double(value: float) -> str:
    value = float(value)
    if math.isnan(value):
        raise CompileError("internal: NaN constant in an FPGA layer")
    if math.isinf(value):
        return "std::numeric_limits<double>::infinity()" if value > 0 else "-std::numeric_limits<double>::infinity()"
    return repr(value)


def _literal(value: float, t: NumType) -> str:
    return f"{value!r}f" if t.is_float else repr(value)


# ---------------------------------------------------------------------------------------------
# The design: what the files are rendered from


@dataclass
class _Port:
    name: str  # in0 / out0
    type_name: str  # input0_t / result0_t
    ntype: NumType
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass
class _Weights:
    name: str  # C array name, also the header file's name
    type_expr: str  # e.g. dense1_config::weight_t
    ntype: NumType
    values: np.ndarray  # quantized, flat
    about: str

    def definition(self) -> str:
        rows = []
        for start in range(0, len(self.values), 8):
            rows.append("    " + ", ".join(_literal(float(v), self.ntype) for v in self.values[start:start + 8]))
        body = ",\n".join(rows) if rows else "    0"
        size = max(len(self.values), 1)
        head = f"// {self.about}, quantized to {self.ntype} (each value is exactly representable)\n"
        if self.ntype.is_float:
            return head + f"static const {self.type_expr} {self.name}[{size}] = {{\n{body}\n}};\n"
        # An initializer of thousands of ap_fixed objects takes g++ minutes (one constructor call
        # each); C-simulation converts a plain double table once, at load time, instead.
        return (head + "#ifdef __SYNTHESIS__\n"
                f"static const {self.type_expr} {self.name}[{size}] = {{\n{body}\n}};\n"
                "#else\n"
                f"static const double {self.name}_values[{size}] = {{\n{body}\n}};\n"
                f"static {self.type_expr} {self.name}[{size}];\n"
                f"static const bool {self.name}_loaded = hetc_hls::load_table({self.name}, {self.name}_values, {size});\n"
                "#endif\n")


@dataclass
class _Value:
    """A tensor travelling as a stream: a region input or a layer's result."""

    shape: tuple[int, ...]
    ntype: NumType
    type_name: str
    stream: str
    readers: list[str] = field(default_factory=list)  # one stream per reader, handed out in order

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass
class _Design:
    top: str
    names: _Names
    inputs: list[_Port]
    outputs: list[_Port]
    typedefs: list[str]  # layer result types and configs (parameters.h)
    weights: list[_Weights]
    body: list[str]  # the top function's statements

    def port_decls(self) -> str:
        lines = [f"typedef {p.ntype.cpp()} {p.type_name};" for p in self.inputs + self.outputs]
        return "\n".join(lines) + f"\n\nvoid {self.signature()};\n"

    def signature(self) -> str:
        ports = [f"const {p.type_name} {p.name}[{p.size}]" for p in self.inputs]
        ports += [f"{p.type_name} {p.name}[{p.size}]" for p in self.outputs]
        return f"{self.top}({', '.join(ports)})"

    def parameters(self, inline_weights: bool) -> str:
        if inline_weights:
            weights = "\n".join(w.definition() for w in self.weights)
        else:
            weights = "".join(f'#include "weights/{w.name}.h"\n' for w in self.weights)
        return "\n".join(self.typedefs) + "\n" + weights

    def top_function(self) -> str:
        pragmas = []
        for k, p in enumerate(self.inputs + self.outputs):
            pragmas.append(f"    #pragma HLS INTERFACE m_axi port={p.name} offset=slave bundle=gmem{k} depth={p.size}")
            pragmas.append(f"    #pragma HLS INTERFACE s_axilite port={p.name} bundle=control")
        pragmas.append("    #pragma HLS INTERFACE s_axilite port=return bundle=control")
        pragmas.append("    #pragma HLS DATAFLOW")
        return f"void {self.signature()} {{\n" + "\n".join(pragmas) + "\n\n" + "\n".join(self.body) + "\n}\n"


class _Emitter:
    """Builds the ``_Design`` of a region: validates it, names everything, orders the calls."""

    def __init__(self, region: Region):
        self.region = region
        self.names = _Names()
        self.values: dict[str, _Value] = {}
        self.typedefs: list[str] = []
        self.weights: list[_Weights] = []
        self.body: list[str] = []

    def fail(self, layer: Layer | None, message: str) -> CompileError:
        where = f"layer {layer.name!r} ({layer.op})" if layer else "the region"
        return CompileError(f"FPGA region {self.region.name!r}, {where}: {message}")

    # -- structure ------------------------------------------------------------------------------

    def design(self) -> _Design:
        region = self.region
        top = self.names(region.name)
        if len(region.inputs) != len(region.input_types):
            raise self.fail(None, f"{len(region.inputs)} inputs but {len(region.input_types)} input types")
        inputs = [_Port(self.names(f"in{k}"), self.names(f"input{k}_t"), t, tuple(shape))
                  for k, ((_, shape), t) in enumerate(zip(region.inputs, region.input_types))]
        out_names = [(self.names(f"out{k}"), self.names(f"result{k}_t")) for k in range(len(region.outputs))]
        uses = self._uses()
        for port, (name, _) in zip(inputs, region.inputs):
            if name in self.values:
                raise self.fail(None, f"two inputs are named {name!r}")
            stream = self.names(f"{port.name}_stream")
            self.values[name] = _Value(port.shape, port.ntype, port.type_name, stream)
            self._declare(stream, port.type_name, 2)
            self.body.append(f"    hetc_hls::array_to_stream<{port.type_name}, {port.size}>({port.name}, {stream});")
            self._fan_out(name, uses)
        for layer in region.layers:
            self._layer(layer, uses)
        outputs = []
        for (port_name, type_name), name in zip(out_names, region.outputs):
            if name not in self.values:
                raise self.fail(None, f"output {name!r} is not a layer of the region")
            value = self.values[name]
            outputs.append(_Port(port_name, type_name, value.ntype, value.shape))
            self.body.append(f"    hetc_hls::stream_to_array<{type_name}, {value.size}>({value.readers.pop(0)}, "
                             f"{port_name});")
        return _Design(top, self.names, inputs, outputs, self.typedefs, self.weights, self.body)

    def _uses(self) -> dict[str, int]:
        """How many streams each produced tensor must be split into (a same-type reshape reads
        its producer's stream, so its readers count as the producer's)."""
        root: dict[str, str] = {name: name for name, _ in self.region.inputs}
        uses = {name: 0 for name in root}
        for layer in self.region.layers:
            if layer.name in root:
                raise self.fail(layer, "its name is used twice in the region")
            missing = [i for i in layer.inputs if i not in root]
            if missing:
                raise self.fail(layer, f"reads {missing[0]!r}, which no input or earlier layer produces")
            if layer.op == "reshape" and len(layer.inputs) == 1 and self._is_alias(layer, root):
                root[layer.name] = root[layer.inputs[0]]
                continue
            root[layer.name] = layer.name
            uses[layer.name] = 0
            for name in layer.inputs:
                uses[root[name]] += 1
        for name in self.region.outputs:
            if name in root:
                uses[root[name]] += 1
        self._root = root
        return uses

    def _is_alias(self, layer: Layer, root: dict[str, str]) -> bool:
        source = root[layer.inputs[0]]
        if source in dict(self.region.inputs):
            k = [name for name, _ in self.region.inputs].index(source)
            return self.region.input_types[k] == layer.result
        return self.region.layer(source).result == layer.result

    def _declare(self, stream: str, type_name: str, depth: int) -> None:
        self.body.append(f'    hls::stream<{type_name}> {stream}("{stream}");')
        self.body.append(f"    #pragma HLS STREAM variable={stream} depth={depth}")

    def _fan_out(self, name: str, uses: dict[str, int]) -> None:
        """Gives the tensor ``name`` one stream per reader: itself, a sink, or a chain of clones."""
        value, count = self.values[name], uses[name]
        if count == 0:
            self.body.append(f"    hetc_hls::sink<{value.type_name}, {value.size}>({value.stream});")
        elif count == 1:
            value.readers = [value.stream]
        else:
            config = self.names(f"{value.stream}_clone_config")
            self.typedefs.append(f"struct {config} {{\n    static const unsigned n_elem = {value.size};\n}};\n")
            source = value.stream
            for k in range(count - 1):
                copy = self.names(f"{value.stream}_copy{k}")
                last = k == count - 2
                rest = self.names(f"{value.stream}_copy{k + 1}" if last else f"{value.stream}_rest{k}")
                # depth: a branch may wait for the whole tensor while the other one is computed
                self._declare(copy, value.type_name, value.size)
                self._declare(rest, value.type_name, value.size)
                self.body.append(f"    hetc_hls::clone<{value.type_name}, {config}>({source}, {copy}, {rest});")
                value.readers.append(copy)
                source = rest
            value.readers.append(source)

    # -- layers ---------------------------------------------------------------------------------

    def _layer(self, layer: Layer, uses: dict[str, int]) -> None:
        if layer.op not in OPS:
            raise self.fail(layer, f"unknown op (the FPGA target supports {', '.join(sorted(OPS))})")
        ins = [self.values[name] for name in layer.inputs]
        arity = 2 if layer.op in ("add", "multiply") else 1
        if len(ins) != arity:
            raise self.fail(layer, f"takes {arity} input(s), got {len(ins)}")
        shape = tuple(int(n) for n in layer.shape)
        if self._root[layer.name] != layer.name:  # a reshape reading its producer's stream
            if math.prod(shape) != ins[0].size:
                raise self.fail(layer, f"reshapes {ins[0].size} elements into {shape}")
            source = ins[0]
            self.values[layer.name] = _Value(shape, source.ntype, source.type_name, source.stream, source.readers)
            return
        base = c_identifier(layer.name)
        type_name = self.names(f"{base}_t")
        config = self.names(f"{base}_config")
        fields, types, weights, kernel = getattr(self, f"_{layer.op}")(layer, ins, shape)
        self.typedefs.append(f"// {base}: {layer.op} {' + '.join(str(v.shape) for v in ins)} -> {shape}"
                             + (f", from {_comment(layer.source)}" if layer.source else "")
                             + f"\ntypedef {layer.result.cpp()} {type_name};\n"
                             + _config_struct(config, fields, types))
        arrays = []
        for wname, values, ntype, typedef in weights:
            if ntype.width > 53:
                raise self.fail(layer, f"{wname} type {ntype} is wider than 53 bits: its values cannot be "
                                       "written exactly as C++ literals")
            w = _Weights(self.names(f"{base}_{wname}"), f"{config}::{typedef}", ntype,
                         quantize(np.ravel(values).astype(np.float64), ntype),
                         f"{base} {wname} {tuple(np.shape(values))}")
            self.weights.append(w)
            arrays.append(w.name)
        stream = self.names(f"{base}_out")
        self.values[layer.name] = _Value(shape, layer.result, type_name, stream)
        self._declare(stream, type_name, 2)
        in_streams = [value.readers.pop(0) for value in ins]
        targs = ", ".join([v.type_name for v in ins] + [type_name, config])
        args = ", ".join(in_streams + [stream] + arrays)
        self.body.append(f"    hetc_hls::{kernel}<{targs}>({args});")
        self._fan_out(layer.name, uses)

    def _type(self, layer: Layer, which: str, ins: list[_Value]) -> NumType:
        t = getattr(layer, which)
        if t is not None:
            return t
        if layer.result.is_float and all(v.ntype.is_float for v in ins):
            return FLOAT
        raise self.fail(layer, f"no {which} type (needed when it computes in ap_fixed)")

    def _same_kind(self, layer: Layer, *types: NumType) -> None:
        if len({t.is_float for t in types}) > 1:
            raise self.fail(layer, f"mixes float and ap_fixed operands ({', '.join(map(str, types))})")

    def _weight(self, layer: Layer, name: str, shape: tuple[int, ...], default: float | None = None) -> np.ndarray:
        w = layer.weights.get(name)
        if w is None:
            if default is None:
                raise self.fail(layer, f"has no {name!r} weights")
            return np.full(shape, default, np.float32)
        w = np.asarray(w, np.float32)
        if w.size == 1 and math.prod(shape) != 1:
            w = np.broadcast_to(w.reshape(()), shape)
        if w.shape != shape:
            raise self.fail(layer, f"{name} has shape {w.shape}, expected {shape}")
        if not np.all(np.isfinite(w)):
            raise self.fail(layer, f"{name} holds non-finite values")
        return w

    def _mac_types(self, layer: Layer, ins: list[_Value]) -> dict[str, NumType]:
        types = {t: self._type(layer, f, ins) for t, f in (("weight_t", "weight"), ("bias_t", "bias"),
                                                           ("accum_t", "accum"))}
        self._same_kind(layer, ins[0].ntype, types["weight_t"])
        return types

    def _dense(self, layer, ins, shape):
        n_in, n_out = ins[0].shape[-1] if ins[0].shape else 0, shape[-1] if shape else 0
        if not n_in or not n_out or ins[0].shape[:-1] != shape[:-1]:
            raise self.fail(layer, f"maps {ins[0].shape} to {shape}; expected (..., n_in) -> (..., n_out)")
        w = self._weight(layer, "weight", (n_in, n_out))
        b = self._weight(layer, "bias", (n_out,), 0.0)
        types = self._mac_types(layer, ins)
        reuse = max(1, int(layer.reuse))
        limit = math.ceil(n_in * n_out / reuse)
        fields = {"n_rows": math.prod(shape[:-1]), "n_in": n_in, "n_out": n_out, "reuse": reuse,
                  "multiplier_limit": limit, "weight_partition": limit}
        weights = [("weight", w, types["weight_t"], "weight_t"), ("bias", b, types["bias_t"], "bias_t")]
        return fields, types, weights, "dense"

    def _window(self, layer, ins, shape, kernel, channels_out):
        """The window fields of hls/hetc_window.h."""
        if len(ins[0].shape) != 3 or len(shape) != 3:
            raise self.fail(layer, f"maps {ins[0].shape} to {shape}; expected (H, W, C) images")
        (h, w, c), (oh, ow, f) = ins[0].shape, shape
        sh, sw = (int(s) for s in layer.attrs.get("strides", (1, 1)))
        pt, pl, pb, pr = (int(p) for p in layer.attrs.get("pads", (0, 0, 0, 0)))
        kh, kw = kernel
        if min(sh, sw, kh, kw) < 1 or min(pt, pl, pb, pr) < 0 or f != channels_out:
            raise self.fail(layer, f"bad window: kernel {kernel}, strides {(sh, sw)}, pads {(pt, pl, pb, pr)}")
        if not (1 <= oh and 1 <= ow and (oh - 1) * sh < h + pt + pb and (ow - 1) * sw < w + pl + pr
                and h + pt + pb >= kh and w + pl + pr >= kw):
            raise self.fail(layer, f"output {shape} does not fit the input {ins[0].shape} and the window")
        return {"in_height": h, "in_width": w, "n_chan": c, "filt_height": kh, "filt_width": kw,
                "stride_height": sh, "stride_width": sw, "pad_top": pt, "pad_left": pl, "pad_bottom": pb,
                "pad_right": pr, "out_height": oh, "out_width": ow}

    def _conv2d(self, layer, ins, shape):
        w = layer.weights.get("weight")
        if w is None or np.ndim(w) != 4:
            raise self.fail(layer, "needs a (KH, KW, C_in / groups, F) weight")
        kh, kw, cg, f = np.shape(w)
        groups = int(layer.attrs.get("groups", 1))
        fields = self._window(layer, ins, shape, (kh, kw), f)
        c = fields["n_chan"]
        if groups < 1 or c % groups or f % groups or cg != c // groups:
            raise self.fail(layer, f"groups={groups} does not fit {c} input channels, {f} filters, weight "
                                   f"{np.shape(w)}")
        expected = tuple(
            (fields[f"in_{d}"] + fields[f"pad_{a}"] + fields[f"pad_{b}"] - k) // fields[f"stride_{d}"] + 1
            for d, a, b, k in (("height", "top", "bottom", kh), ("width", "left", "right", kw)))
        if expected != shape[:2]:
            raise self.fail(layer, f"output {shape} is not the convolution's ({expected[0]}, {expected[1]}, {f})")
        types = self._mac_types(layer, ins)
        reuse = max(1, int(layer.reuse))
        limit = math.ceil(kh * kw * cg * f / reuse)
        fields.update(n_filt=f, groups=groups, reuse=reuse, multiplier_limit=limit, weight_partition=limit)
        weights = [("weight", self._weight(layer, "weight", (kh, kw, cg, f)), types["weight_t"], "weight_t"),
                   ("bias", self._weight(layer, "bias", (f,), 0.0), types["bias_t"], "bias_t")]
        return fields, types, weights, "conv2d"

    def _pool(self, layer, ins, shape, kernel_name):
        kernel = tuple(int(k) for k in layer.attrs.get("kernel", ()))
        if len(kernel) != 2:
            raise self.fail(layer, f"kernel {kernel} is not (KH, KW)")
        channels = ins[0].shape[-1] if ins[0].shape else 0
        fields = self._window(layer, ins, shape, kernel, channels)
        types = {}
        if kernel_name == "avg_pool2d":
            fields["count_include_pad"] = bool(layer.attrs.get("count_include_pad", False))
            types["accum_t"] = _sum_type(ins[0].ntype, kernel[0] * kernel[1])
        return fields, types, [], kernel_name

    def _max_pool2d(self, layer, ins, shape):
        return self._pool(layer, ins, shape, "max_pool2d")

    def _avg_pool2d(self, layer, ins, shape):
        return self._pool(layer, ins, shape, "avg_pool2d")

    def _global_avg_pool2d(self, layer, ins, shape):
        if len(ins[0].shape) != 3 or shape not in ((ins[0].shape[2],), (1, 1, ins[0].shape[2])):
            raise self.fail(layer, f"maps {ins[0].shape} to {shape}; expected (H, W, C) -> (C,)")
        h, w, c = ins[0].shape
        return ({"in_height": h, "in_width": w, "n_chan": c}, {"accum_t": _sum_type(ins[0].ntype, h * w)}, [],
                "global_avg_pool2d")

    def _elementwise(self, layer, ins, shape, kernel, **constants):
        if math.prod(shape) != ins[0].size:
            raise self.fail(layer, f"maps {ins[0].shape} to {shape}")
        return {"n_elem": ins[0].size, **constants}, {}, [], kernel

    def _relu(self, layer, ins, shape):
        return self._elementwise(layer, ins, shape, "relu")

    def _clip(self, layer, ins, shape):
        lo, hi = layer.attrs.get("min"), layer.attrs.get("max")
        lo = -math.inf if lo is None else float(lo)
        hi = math.inf if hi is None else float(hi)
        return self._elementwise(layer, ins, shape, "clip", lo=lo, hi=hi)

    def _leaky_relu(self, layer, ins, shape):
        # alpha as float32 (ONNX's attribute type), as emulate.py takes it
        alpha = float(np.float32(layer.attrs.get("alpha", 0.01)))
        return self._elementwise(layer, ins, shape, "leaky_relu", alpha=alpha)

    def _sigmoid(self, layer, ins, shape):
        return self._elementwise(layer, ins, shape, "sigmoid")

    def _tanh(self, layer, ins, shape):
        return self._elementwise(layer, ins, shape, "tanh")

    def _reshape(self, layer, ins, shape):  # changes the type: a copy
        return self._elementwise(layer, ins, shape, "cast")

    def _merge(self, layer, ins, shape, kernel):
        if not ins[0].size == ins[1].size == math.prod(shape):
            raise self.fail(layer, f"inputs {ins[0].shape}, {ins[1].shape} and output {shape} differ in size "
                                   "(broadcasting is not supported)")
        self._same_kind(layer, ins[0].ntype, ins[1].ntype)
        return {"n_elem": ins[0].size}, {}, [], kernel

    def _add(self, layer, ins, shape):
        return self._merge(layer, ins, shape, "add")

    def _multiply(self, layer, ins, shape):
        return self._merge(layer, ins, shape, "multiply")

    def _scale_shift(self, layer, ins, shape):
        channels = shape[-1] if shape else 1
        if math.prod(shape) != ins[0].size:
            raise self.fail(layer, f"maps {ins[0].shape} to {shape}")
        types = {"weight_t": self._type(layer, "weight", ins), "bias_t": self._type(layer, "bias", ins)}
        self._same_kind(layer, ins[0].ntype, types["weight_t"], types["bias_t"])
        weights = [("scale", self._weight(layer, "scale", (channels,)), types["weight_t"], "weight_t"),
                   ("shift", self._weight(layer, "shift", (channels,), 0.0), types["bias_t"], "bias_t")]
        return {"n_elem": ins[0].size, "n_chan": channels}, types, weights, "scale_shift"

    def _rows(self, layer, ins, shape):
        if not shape or shape != ins[0].shape:
            raise self.fail(layer, f"maps {ins[0].shape} to {shape}; expected the same shape")
        return {"n_rows": math.prod(shape[:-1]), "n_in": shape[-1]}

    def _softmax(self, layer, ins, shape):
        return self._rows(layer, ins, shape), {}, [], "softmax"

    def _layer_norm(self, layer, ins, shape):
        fields = self._rows(layer, ins, shape)
        fields["epsilon"] = float(layer.attrs.get("epsilon", 1e-5))
        types = {"weight_t": self._type(layer, "weight", ins), "bias_t": self._type(layer, "bias", ins)}
        weights = [("gamma", self._weight(layer, "gamma", (shape[-1],), 1.0), types["weight_t"], "weight_t"),
                   ("beta", self._weight(layer, "beta", (shape[-1],), 0.0), types["bias_t"], "bias_t")]
        return fields, types, weights, "layer_norm"

    def _transpose(self, layer, ins, shape):
        in_shape = ins[0].shape
        perm = [int(p) for p in layer.attrs.get("perm", reversed(range(len(in_shape))))]
        if sorted(perm) != list(range(len(in_shape))) or tuple(in_shape[p] for p in perm) != shape:
            raise self.fail(layer, f"perm {perm} does not map {in_shape} to {shape}")
        if len(in_shape) > 4:
            raise self.fail(layer, f"transposes {len(in_shape)} axes (at most 4 are supported)")
        pad = 4 - len(in_shape)
        dims = (1,) * pad + tuple(in_shape)
        perm4 = list(range(pad)) + [p + pad for p in perm]
        strides = [math.prod(dims[a + 1:]) for a in range(4)]
        fields = {"n_elem": ins[0].size}
        fields.update({f"out_d{k}": dims[perm4[k]] for k in range(4)})
        fields.update({f"in_s{k}": strides[perm4[k]] for k in range(4)})
        return fields, {}, [], "transpose"


def _sum_type(t: NumType, terms: int) -> NumType:
    """A type holding the sum of ``terms`` values of ``t`` exactly."""
    if t.is_float:
        return FLOAT
    grow = max(0, math.ceil(math.log2(terms)))
    return NumType(t.width + grow, t.integer + grow, t.signed)


def _config_struct(name: str, fields: dict, types: dict[str, NumType]) -> str:
    lines = [f"struct {name} {{"]
    for key, value in fields.items():
        if isinstance(value, bool):
            lines.append(f"    static const bool {key} = {'true' if value else 'false'};")
        elif isinstance(value, int):
            lines.append(f"    static const unsigned {key} = {value};")
        else:
            lines.append(f"    static constexpr double {key} = {_double(value)};")
    lines += [f"    typedef {t.cpp()} {key};" for key, t in types.items()]
    return "\n".join(lines) + "\n};\n"


# ---------------------------------------------------------------------------------------------
# Project files


def _testbench(d: _Design) -> str:
    n_in = sum(p.size for p in d.inputs)
    n_out = sum(p.size for p in d.outputs)
    buffers = [f"    std::vector<{p.type_name}> {p.name}({p.size});" for p in d.inputs + d.outputs]
    convert_in, compare, offset = [], [], 0
    for p in d.inputs:
        convert_in.append(f"        for (int hetc_i = 0; hetc_i < {p.size}; hetc_i++) "
                          f"{p.name}[hetc_i] = ({p.type_name})(float)hetc_x[{offset} + hetc_i];")
        offset += p.size
    offset = 0
    for p in d.outputs:
        compare.append(f"        for (int hetc_i = 0; hetc_i < {p.size}; hetc_i++) hetc_compare(hetc_sample, "
                       f"\"{p.name}\", hetc_i, static_cast<double>({p.name}[hetc_i]), hetc_y[{offset} + hetc_i]);")
        offset += p.size
    call = ", ".join(f"{p.name}.data()" for p in d.inputs + d.outputs)
    # every local is hetc_-prefixed: no model-derived name can shadow or be shadowed by them
    return f"""\
// C-simulation testbench of {d.top} (generated by hetc): runs every sample of
// tb_data/inputs.txt (one line per sample: the inputs flattened and concatenated) and compares
// with tb_data/expected.txt (first line "tolerance <atol> <rtol>", then one line per sample).
// Usage: {d.top}_tb [tb_data directory]; exits non-zero on a mismatch or unreadable data.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../firmware/{d.top}.h"

static double hetc_atol = 0, hetc_rtol = 0;
static long hetc_mismatches = 0;

static bool hetc_read(std::ifstream& hetc_file, std::vector<double>& hetc_values) {{
    std::string hetc_line;
    while (std::getline(hetc_file, hetc_line)) {{
        if (hetc_line.empty() || hetc_line[0] == '#') continue;
        std::istringstream hetc_fields(hetc_line);
        hetc_values.clear();
        double hetc_v;
        while (hetc_fields >> hetc_v) hetc_values.push_back(hetc_v);
        return true;
    }}
    return false;
}}

static void hetc_compare(long hetc_sample, const char* hetc_port, int hetc_i, double hetc_got, double hetc_want) {{
    if (std::fabs(hetc_got - hetc_want) <= hetc_atol + hetc_rtol * std::fabs(hetc_want)) return;
    if (hetc_mismatches++ < 10) {{
        std::printf("sample %ld %s[%d]: got %.9g, expected %.9g\\n", hetc_sample, hetc_port, hetc_i, hetc_got,
                    hetc_want);
    }}
}}

int main(int hetc_argc, char** hetc_argv) {{
    const std::string hetc_dir = hetc_argc > 1 ? hetc_argv[1] : "tb_data";
    std::ifstream hetc_inputs((hetc_dir + "/inputs.txt").c_str());
    std::ifstream hetc_expected((hetc_dir + "/expected.txt").c_str());
    std::string hetc_word;
    if (!hetc_inputs || !hetc_expected || !(hetc_expected >> hetc_word >> hetc_atol >> hetc_rtol) ||
        hetc_word != "tolerance") {{
        std::printf("cannot read %s/inputs.txt and %s/expected.txt (tolerance line)\\n", hetc_dir.c_str(),
                    hetc_dir.c_str());
        return 2;
    }}
{chr(10).join(buffers)}
    std::vector<double> hetc_x, hetc_y;
    long hetc_sample = 0;
    for (; hetc_read(hetc_inputs, hetc_x); hetc_sample++) {{
        if (!hetc_read(hetc_expected, hetc_y) || hetc_x.size() != {n_in} || hetc_y.size() != {n_out}) {{
            std::printf("sample %ld: expected {n_in} input and {n_out} output values\\n", hetc_sample);
            return 2;
        }}
{chr(10).join(convert_in)}
        {d.top}({call});
{chr(10).join(compare)}
    }}
    std::printf("{d.top}: %ld samples, %ld mismatches (atol %g, rtol %g)\\n", hetc_sample, hetc_mismatches,
                hetc_atol, hetc_rtol);
    return hetc_sample == 0 ? 2 : hetc_mismatches != 0;
}}
"""


def _tcl(top: str, options: EmitOptions) -> str:
    return f"""\
# Vitis HLS script for {top} (generated by hetc; never run by hetc, which has no Xilinx tools).
# Usage, in this directory: vitis_hls -f run_hls.tcl
open_project -reset {top}_prj
set_top {top}
add_files firmware/{top}.cpp -cflags "-std=c++14"
add_files -tb tb/{top}_tb.cpp -cflags "-std=c++14 -Wno-unknown-pragmas"
add_files -tb tb_data
open_solution -reset solution1 -flow_target vitis
set_part {{{options.part}}}
create_clock -period {options.clock_ns:g} -name default
csim_design
csynth_design
cosim_design
export_design -format xo -output {top}.xo
exit
"""


def _word(t: NumType) -> str:
    """The unsigned integer a port element of type ``t`` occupies in device memory."""
    if t.is_float:
        return "uint32_t"
    return f"uint{max(8, 1 << math.ceil(math.log2(t.width)))}_t"


def _host(d: _Design) -> str:
    lines = []
    for k, p in enumerate(d.inputs + d.outputs):
        lines.append(f"    xrt::bo {p.name}_bo(device, {p.size} * sizeof({_word(p.ntype)}), kernel.group_id({k}));")
    pack, unpack, offset = [], [], 0
    for p in d.inputs:
        word = _word(p.ntype)
        pack.append(f"        {word}* {p.name}_words = {p.name}_bo.map<{word}*>();")
        pack.append(f"        for (int i = 0; i < {p.size}; i++) {p.name}_words[i] = "
                    f"hetc_pack<{word}>(({p.type_name})(float)x[{offset} + i]);")
        pack.append(f"        {p.name}_bo.sync(XCL_BO_SYNC_BO_TO_DEVICE);")
        offset += p.size
    offset = 0
    for p in d.outputs:
        word = _word(p.ntype)
        unpack.append(f"        {p.name}_bo.sync(XCL_BO_SYNC_BO_FROM_DEVICE);")
        unpack.append(f"        const {word}* {p.name}_words = {p.name}_bo.map<const {word}*>();")
        unpack.append(f"        for (int i = 0; i < {p.size}; i++) {{")
        unpack.append(f"            const double got = static_cast<double>(hetc_unpack<{p.type_name}>({p.name}_words[i]));")
        unpack.append(f"            bad += std::fabs(got - y[{offset} + i]) > atol + rtol * std::fabs(y[{offset} + i]);")
        unpack.append("        }")
        offset += p.size
    bos = ", ".join(f"{p.name}_bo" for p in d.inputs + d.outputs)
    return f"""\
// XRT host program for the {d.top} kernel (generated by hetc; never compiled against XRT by hetc).
// Runs every sample of tb_data/ on the FPGA and compares with the expected outputs.
// Usage: ./host [{d.top}.xclbin] [tb_data directory]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <xrt/xrt_bo.h>
#include <xrt/xrt_device.h>
#include <xrt/xrt_kernel.h>

#include "../firmware/{d.top}.h"  // the port types (ap_fixed.h from Vitis HLS's include dir)

// A port element travels as its raw bits in the smallest power-of-two word that holds them.
template <class word_T> word_T hetc_pack(float x) {{
    word_T w;
    std::memcpy(&w, &x, sizeof(w));
    return w;
}}
template <class word_T, class T> word_T hetc_pack(const T& x) {{
    return (word_T)x.range(T::width - 1, 0).to_uint64();
}}
template <class T, class word_T> T hetc_unpack(word_T w) {{
    T x;
    x.range(T::width - 1, 0) = (ap_ulong)w;
    return x;
}}
template <> float hetc_unpack<float, uint32_t>(uint32_t w) {{
    float x;
    std::memcpy(&x, &w, sizeof(x));
    return x;
}}

static bool hetc_read(std::ifstream& file, std::vector<double>& values) {{
    std::string line;
    while (std::getline(file, line)) {{
        if (line.empty() || line[0] == '#') continue;
        std::istringstream fields(line);
        values.clear();
        double v;
        while (fields >> v) values.push_back(v);
        return true;
    }}
    return false;
}}

int main(int argc, char** argv) {{
    const std::string xclbin = argc > 1 ? argv[1] : "{d.top}.xclbin";
    const std::string dir = argc > 2 ? argv[2] : "../tb_data";
    std::ifstream inputs((dir + "/inputs.txt").c_str()), expected((dir + "/expected.txt").c_str());
    std::string word;
    double atol = 0, rtol = 0;
    if (!inputs || !expected || !(expected >> word >> atol >> rtol) || word != "tolerance") {{
        std::printf("cannot read %s/inputs.txt and %s/expected.txt\\n", dir.c_str(), dir.c_str());
        return 2;
    }}
    xrt::device device(0);
    const xrt::uuid uuid = device.load_xclbin(xclbin);
    xrt::kernel kernel(device, uuid, "{d.top}");
{chr(10).join(lines)}
    std::vector<double> x, y;
    long sample = 0, bad = 0;
    for (; hetc_read(inputs, x) && hetc_read(expected, y); sample++) {{
{chr(10).join(pack)}
        xrt::run run = kernel({bos});
        run.wait();
{chr(10).join(unpack)}
    }}
    std::printf("{d.top} on the FPGA: %ld samples, %ld mismatches\\n", sample, bad);
    return sample == 0 ? 2 : bad != 0;
}}
"""


def _makefile(top: str, options: EmitOptions) -> str:
    return f"""\
# Builds the XRT host program and links the exported kernel ({top}.xo, from run_hls.tcl) into an
# xclbin. Needs Vitis and XRT (generated by hetc; not run by hetc).
XILINX_XRT ?= /opt/xilinx/xrt
XILINX_HLS ?= /tools/Xilinx/Vitis_HLS/2023.2
PLATFORM ?= {options.platform}
TARGET ?= hw
CXX ?= g++

all: host {top}.xclbin

host: host.cpp ../firmware/{top}.h
\t$(CXX) -std=c++17 -O2 -I$(XILINX_XRT)/include -I$(XILINX_HLS)/include -o $@ host.cpp \\
\t\t-L$(XILINX_XRT)/lib -lxrt_coreutil -pthread

{top}.xclbin: ../{top}.xo
\tv++ -l -t $(TARGET) --platform $(PLATFORM) -o $@ $<

run: all
\t./host {top}.xclbin ../tb_data

clean:
\trm -f host {top}.xclbin *.log
\trm -rf _x .run .ipcache

.PHONY: all run clean
"""


def _readme(d: _Design, options: EmitOptions) -> str:
    ports = "\n".join(f"- `{p.name}`: `{p.ntype}` x {p.size}, shape {p.shape}" for p in d.inputs + d.outputs)
    return f"""\
# {d.top}: an FPGA region generated by hetc

**Nothing here was synthesised.** hetc has no Xilinx tools: it verified this design only by
C-simulation (g++ against the ap_types headers) of the same firmware. Synthesis, co-simulation,
timing and the host program are untested until you run them.

Top function `{d.top}` (ports in order; arrays in device memory, AXI4 master each, control over
AXI4-Lite):

{ports}

| path | what |
| --- | --- |
| `firmware/{d.top}.cpp` | the DATAFLOW top function: port readers, one kernel call per layer over `hls::stream`s, clones for fan-out, port writers |
| `firmware/{d.top}.h` | the port types and the top function's declaration |
| `firmware/parameters.h` | per-layer types and config structs (sizes, types, reuse) |
| `firmware/weights/*.h` | weights quantized to their layer's types (exactly representable values) |
| `firmware/hetc_hls/` | hetc's HLS kernel library (arithmetic and conventions: `hetc_common.h`) |
| `tb/{d.top}_tb.cpp` | C-simulation testbench over `tb_data/` |
| `tb_data/` | `inputs.txt` and `expected.txt` (tolerance on its first line), when hetc wrote them |
| `run_hls.tcl` | `vitis_hls -f run_hls.tcl`: C-sim, synthesis for `{options.part}` at {options.clock_ns:g} ns, co-sim, export of `{d.top}.xo` |
| `host/host.cpp`, `host/Makefile` | XRT host program (`make -C host` links the xclbin for `{options.platform}` and builds it) |

C-simulation without Vitis: `g++ -std=c++14 -I firmware -I <ap_types> tb/{d.top}_tb.cpp firmware/{d.top}.cpp
-o tb_run && ./tb_run tb_data`.
"""
