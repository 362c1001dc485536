"""GPU binaries in the artifact: nvcc-built fatbins instead of the CUDA source TVM embeds.

This TVM wheel's CUDA codegen stores kernel *source* in the executable (module kind "cuda",
format "cuda"); the CUDA runtime would compile it at load time with NVRTC or nvcc. hetc compiles
that source with nvcc at export time for every requested architecture (SASS for each, plus PTX
for the newest so later GPUs can JIT it) and stores the fatbin in its place, so running an
artifact needs only the TVM runtime and the NVIDIA driver.

How: ``export_library`` packs the module's imports itself (TVM's ``fpack_imports`` hook). The
packed blob is TVM's own serialization (``runtime.ModulePackImportsToTensor``): a u64 length,
then each module as its kind string and a u64-length-prefixed payload. A CUDA module's payload
is ``fmt`` (string), the function table, then ``data`` (string); the runtime calls
``cuModuleLoadData(data)`` for any ``fmt`` other than "cuda" (source), and that accepts a fatbin.
Only ``fmt`` and ``data`` are replaced; the function table is kept byte for byte. Strings are
u64 length + bytes, little-endian.
"""

from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm_ffi

from ...errors import CompileError, last_line
from ...native_log import filtered_stderr
from ..cpu.pool import pool_object

SOURCE_FORMAT = "cuda"  # what TVM stores: CUDA C++ compiled at load time
BINARY_FORMAT = "fatbin"
FATBIN_MAGIC = 0xBA55ED50  # first 4 bytes (little-endian) of an nvcc fatbin
_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class CudaBlob:
    """One CUDA module as stored in an exported library."""

    fmt: str
    data: bytes
    offset: int  # where its payload starts in the packed blob
    length: int  # payload length


def _string(value: bytes) -> bytes:
    return _U64.pack(len(value)) + value


def cuda_modules(module) -> list:
    """The CUDA modules in an executable's import tree."""
    found, stack = [], [module]
    while stack:
        mod = stack.pop()
        if mod.kind == "cuda":
            found.append(mod)
        stack.extend(mod.imports)
    return found


def gencode_flags(archs: Sequence[str]) -> list[str]:
    """SASS for every arch, plus PTX of the newest (forward compatibility)."""
    flags = []
    for arch in archs:
        num = arch.removeprefix("sm_")
        flags += ["-gencode", f"arch=compute_{num},code=sm_{num}"]
    newest = archs[-1].removeprefix("sm_")
    return flags + ["-gencode", f"arch=compute_{newest},code=compute_{newest}"]


def nvcc_path() -> str:
    found = shutil.which("nvcc") or next(
        (str(p) for p in sorted(Path("/usr/local").glob("cuda*/bin/nvcc"), reverse=True)), None)
    if not found:
        raise CompileError("compiling for cuda needs nvcc (the CUDA toolkit) on PATH to build the GPU "
                           "binaries; install the CUDA toolkit or add its bin/ to PATH")
    return found


def compile_fatbin(source: str, archs: Sequence[str]) -> bytes:
    """nvcc the kernels' CUDA source into one fatbin for ``archs`` (lowest first)."""
    nvcc = nvcc_path()
    with tempfile.TemporaryDirectory(prefix="hetc-nvcc-") as tmp:
        src, out = Path(tmp) / "kernels.cu", Path(tmp) / "kernels.fatbin"
        src.write_text(source)
        # The flags TVM's own nvcc path uses for its generated code (tvm.support.nvcc).
        cmd = [nvcc, "--fatbin", "-O3", *gencode_flags(archs), "-std=c++17",
               "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
               "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
               "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
               "--expt-relaxed-constexpr", "--expt-extended-lambda", "-o", str(out), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            errors = [ln for ln in (proc.stderr + proc.stdout).splitlines() if "error" in ln]
            raise CompileError(f"nvcc failed on the generated CUDA code for {','.join(archs)}: "
                               f"{(errors or [proc.stderr.strip() or 'no output'])[0][:300]}")
        return out.read_bytes()


def find_cuda_blobs(blob: bytes) -> list[CudaBlob]:
    """The CUDA module payloads in a packed imports blob."""
    key = _string(b"cuda")
    found, start = [], 0
    while (at := blob.find(key, start)) >= 0:
        start = at + 1
        payload = at + len(key) + _U64.size
        if payload + len(key) > len(blob):
            continue
        (length,) = _U64.unpack_from(blob, at + len(key))
        (fmt_len,) = _U64.unpack_from(blob, payload)
        if fmt_len > 16 or payload + length > len(blob):
            continue  # "cuda" inside some other data, not a module key
        fmt = blob[payload + 8: payload + 8 + fmt_len].decode("ascii", "replace")
        data_at = _data_offset(blob, payload, length)
        if fmt in (SOURCE_FORMAT, BINARY_FORMAT, "ptx", "cubin") and data_at is not None:
            found.append(CudaBlob(fmt, blob[data_at + 8: payload + length], payload, length))
    return found


def _data_offset(blob: bytes, payload: int, length: int) -> int | None:
    """Offset of the payload's last field (u64 length + data): the data is the payload's tail,
    so its length prefix is the first u64 after ``fmt`` that makes it end exactly there (the
    function table in between holds only short strings and small counts)."""
    end = payload + length
    pos = payload + 8 + _U64.unpack_from(blob, payload)[0]
    while pos + 8 <= end:
        (n,) = _U64.unpack_from(blob, pos)
        if pos + 8 + n == end:
            return pos
        pos += 1
    return None


def replace_sources(blob: bytes, binaries: dict[str, bytes]) -> bytes:
    """Swap every CUDA source payload whose data is a key of ``binaries`` (source text) for
    (``fatbin``, its binary); the packed blob's leading total length is updated."""
    out = bytearray(blob)
    for entry in sorted(find_cuda_blobs(blob), key=lambda e: -e.offset):  # back to front: offsets stay valid
        if entry.fmt != SOURCE_FORMAT:
            continue
        binary = binaries.get(entry.data.decode("utf-8", "replace"))
        if binary is None:
            raise CompileError("internal: a CUDA module in the executable has no compiled binary")
        fmt_len = _U64.unpack_from(blob, entry.offset)[0]
        table = blob[entry.offset + 8 + fmt_len: entry.offset + entry.length - 8 - len(entry.data)]
        payload = _string(BINARY_FORMAT.encode()) + table + _string(binary)
        out[entry.offset - 8: entry.offset + entry.length] = _U64.pack(len(payload)) + payload
    _U64.pack_into(out, 0, len(out) - _U64.size)
    return bytes(out)


def _assembly(symbol: str, blob_file: Path) -> str:
    """An assembler file defining ``symbol`` as the bytes of ``blob_file``: the packed imports
    hold the model's weights (tens of MB), which TVM's C route would print as hex text for g++."""
    return (f".section .rodata\n.globl {symbol}\n.balign 16\n{symbol}:\n"
            f'.incbin "{blob_file}"\n.section .note.GNU-stack,"",@progbits\n')


def export_library(executable, path: Path, archs: Sequence[str]) -> None:
    """``executable.export_library(path)``, with every CUDA module's source compiled to a fatbin."""
    sources = [m.inspect_source("cuda") for m in cuda_modules(executable.mod)]
    if not sources:
        with filtered_stderr():
            executable.export_library(str(path), addons=[pool_object()])
        return
    binaries = {src: compile_fatbin(src, archs) for src in dict.fromkeys(sources)}

    def pack_imports(mod, is_system_lib: bool, prefix: str, workspace_dir: str) -> str:
        packed = np.from_dlpack(tvm_ffi.get_global_func("runtime.ModulePackImportsToTensor")(mod)).tobytes()
        blob = Path(workspace_dir) / f"{prefix}devc.bin"
        blob.write_bytes(replace_sources(packed, binaries))
        symbol = prefix + tvm_ffi.get_global_func("runtime.ModuleImportsBlobName")()
        out = Path(workspace_dir) / f"{prefix}devc.S"
        out.write_text(_assembly(symbol, blob))
        return str(out)

    try:
        with filtered_stderr():
            executable.export_library(str(path), fpack_imports=pack_imports, addons=[pool_object()])
    except CompileError:
        raise
    except Exception as err:
        raise CompileError(f"writing the CUDA library failed: {last_line(err)}") from err


def read_embedded(path: Path) -> list[CudaBlob]:
    """The CUDA modules stored in an exported library (for checks and ``hetc inspect``): reads
    the packed-imports symbol without loading the modules (works on a machine without a GPU)."""
    import tvm_ffi.libinfo  # noqa: F401  (TVM-FFI symbols the library links against are loaded)

    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
    symbol = ctypes.c_uint8.in_dll(lib, "__tvm_ffi__library_bin")
    (size,) = _U64.unpack(ctypes.string_at(ctypes.addressof(symbol), 8))
    return find_cuda_blobs(ctypes.string_at(ctypes.addressof(symbol), size + 8))


def fatbin_contents(data: bytes) -> list[str]:
    """What a fatbin holds, e.g. ``["ptx compute_90", "sass sm_90"]``, read from its headers
    (the layout cuobjdump reads: a 16-byte header, then entries of kind 1 = PTX, 2 = ELF/SASS,
    each with its header size, padded payload size, and SM version at byte 28)."""
    magic, _version, header, size = struct.unpack_from("<IHHQ", data, 0)
    if magic != FATBIN_MAGIC:
        raise ValueError("not a CUDA fatbin")
    contents, offset = [], header
    while offset < header + size:
        kind, _, entry_header, padded = struct.unpack_from("<HHII", data, offset)
        (sm,) = struct.unpack_from("<I", data, offset + 28)
        contents.append({1: f"ptx compute_{sm}", 2: f"sass sm_{sm}"}.get(kind, f"kind{kind} {sm}"))
        offset += entry_header + padded
    return sorted(contents)
