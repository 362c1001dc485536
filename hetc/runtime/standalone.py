"""Run a hetc artifact with nothing but the TVM runtime, numpy and the standard library.

This file imports nothing from hetc (nor onnx, onnxruntime, click, rich): copy it next to a
runtime-only TVM install (``scripts/runtime_bundle.py`` makes one) and run::

    python standalone.py ARTIFACT --inputs in.npz [--outputs out.npz]
                         [--repeat N] [--warmup W] [--json timings.json]

It validates ``ARTIFACT/manifest.json`` (schema version 1, parts, sha256 of every listed
file), checks the inputs against the manifest, loads each part's library with
``tvm.runtime.load_module``, builds the Relax VM with ``tvm.runtime.vm.VirtualMachine`` (a
runtime module; ``tvm.relax`` is never imported) and calls ``main``. Every problem is
reported as one line on stderr with exit status 1; 2 is for command-line usage errors.

``TVM_USE_RUNTIME_LIB`` defaults to 1 here, so only ``libtvm_runtime.so`` is loaded even when
the full TVM wheel is installed. See docs/deploy.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
# Printed by TVM's C++ side on every VM executable load; harmless (see hetc/native_log.py).
_NOISE = re.compile(rb"executable\.cc:\d+: Warning: Scope (Saving|Loaded):")


class RunError(Exception):
    """A problem the user can act on; its message is the one line that is printed."""


def last_line(err: BaseException) -> str:
    """TVM puts the failed check on the last non-empty line of its multi-line messages."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return lines[-1] if lines else type(err).__name__


# ---------------------------------------------------------------------------------------
# manifest and inputs (no TVM needed)
# ---------------------------------------------------------------------------------------

def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _check_specs(value, field: str) -> list[dict]:
    ok = isinstance(value, list) and all(
        isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("dtype"), str)
        and isinstance(s.get("shape"), list)
        # None: an output dim ONNX cannot name; str: a symbolic dim (its range is in "dims")
        and all(d is None or isinstance(d, (int, str)) for d in s["shape"])
        for s in value)
    if not ok:
        raise TypeError(field)
    return value


def _check_dims(value) -> dict:
    if not (isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v)
            for k, v in value.items())):
        raise TypeError("dims")
    return value


def shape_problem(specs: list[dict], shapes: list[tuple], dims: dict, gears: dict | None = None) -> str | None:
    """Why ``shapes`` (one per input, in order) do not fit the inputs ``specs`` (dicts with
    name, shape) and the symbolic dims' ranges ``dims`` ({name: [low, high]}), or None.

    A symbolic dim must lie in its range, be one of its ``gears`` (the sizes Ascend regions are
    built for, {name: [sizes]}) where it has some, and be the same size in every input that has it."""
    seen: dict[str, tuple[int, str]] = {}
    for spec, shape in zip(specs, shapes):
        name, want = spec["name"], list(spec["shape"])
        shown = "[" + ", ".join(str(d) for d in want) + "]"
        if len(shape) != len(want):
            return (f"input '{name}' has rank {len(shape)} (shape {list(shape)}), expected rank {len(want)}: "
                    f"{shown}")
        for axis, (size, dim) in enumerate(zip(shape, want)):
            if isinstance(dim, int):
                if size != dim:
                    return f"input '{name}' has shape {list(shape)}, expected {shown} (dim {axis} is {size}, not {dim})"
                continue
            low, high = dims.get(dim, (0, 2**63 - 1))
            if not low <= size <= high:
                return (f"input '{name}' dim {axis} ('{dim}') is {size}, outside its range {low}..{high} "
                        f"(compile with --dim {dim}=LOW:HIGH to change it)")
            if gears and dim in gears and size not in gears[dim]:
                return (f"input '{name}' dim {axis} ('{dim}') is {size}, not one of the gears the Ascend regions "
                        f"are built for: {dim} in {', '.join(map(str, gears[dim]))} (compile with --gears "
                        f"{dim}=SIZE,...)")
            if dim in seen and seen[dim][0] != size:
                return (f"input '{name}' dim {axis} ('{dim}') is {size}, but input '{seen[dim][1]}' has "
                        f"{dim} = {seen[dim][0]}")
            seen.setdefault(dim, (size, name))
    return None


def _check_parts(value) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise TypeError("parts")
    for part in value:
        if not (isinstance(part, dict) and isinstance(part.get("name"), str)
                and isinstance(part.get("library"), str) and isinstance(part.get("device"), str)):
            raise TypeError("parts")
        devices = part.get("devices", [])
        if not (isinstance(devices, list) and all(isinstance(d, str) for d in devices)):
            raise TypeError("parts[].devices")
        if not isinstance(part.get("threads", 0), int):
            raise TypeError("parts[].threads")
        cpu = part.get("cpu", {})
        if not (isinstance(cpu, dict) and all(isinstance(f, str) for f in cpu.get("features", []))):
            raise TypeError("parts[].cpu")
    return value


def read_manifest(root: Path) -> dict:
    """Read and validate ``root/manifest.json``, including every listed file's sha256."""
    path = root / MANIFEST
    if not root.is_dir():
        raise RunError(f"{root}: no such artifact directory")
    if not path.is_file():
        raise RunError(f"{root}: not a hetc artifact (no {MANIFEST})")
    try:
        data = json.loads(path.read_text())
        schema = data.get("schema_version")
    except (ValueError, OSError, AttributeError) as err:
        raise RunError(f"{path}: unreadable manifest ({last_line(err)})") from None
    if schema != SCHEMA_VERSION:
        raise RunError(f"{path}: artifact schema version {schema}, this runner reads version "
                       f"{SCHEMA_VERSION}; recompile the model with a matching hetc")
    try:
        _check_specs(data.get("inputs"), "inputs")
        _check_specs(data.get("outputs"), "outputs")
        _check_parts(data.get("parts"))
        _check_dims(data.get("dims", {}))
        files = data.get("files")
        if not (isinstance(files, dict) and all(isinstance(v, str) for v in files.values())):
            raise TypeError("files")
    except TypeError as err:
        raise RunError(f"{path}: malformed manifest (bad or missing field '{err}')") from None
    for part in data["parts"]:
        if part["library"] not in files:
            raise RunError(f"{path}: part '{part['name']}' library {part['library']} is not listed in files")
    resolved_root = root.resolve()
    for rel, expected in files.items():
        file = (root / rel).resolve()
        if not file.is_relative_to(resolved_root) or not file.is_file():
            raise RunError(f"{root}: file {rel} is missing")
        actual = sha256(file)
        if actual != expected:
            raise RunError(f"{root}: file {rel} is damaged (sha256 mismatch: manifest {expected[:12]}…, "
                           f"file {actual[:12]}…)")
    return data


def read_inputs(path: Path, specs: list[dict], np, dims: dict | None = None) -> list:
    """The arrays of ``path`` (.npz) in manifest input order, checked by name, dtype and shape
    (``dims``: the manifest's symbolic dim ranges)."""
    if not path.is_file():
        raise RunError(f"{path}: no such inputs file")
    if not zipfile.is_zipfile(path):
        raise RunError(f"{path}: not an .npz file")
    try:
        with np.load(path, allow_pickle=False) as npz:
            given = {name: npz[name] for name in npz.files}
    except Exception as err:  # noqa: BLE001 - numpy raises many types for a bad file
        raise RunError(f"{path}: cannot read inputs ({last_line(err)})") from None
    expected = [s["name"] for s in specs]
    missing = [n for n in expected if n not in given]
    unknown = [n for n in given if n not in expected]
    if missing or unknown:
        problems = ([f"missing input(s) {', '.join(missing)}"] if missing else []) + (
            [f"unknown input(s) {', '.join(unknown)}"] if unknown else [])
        signature = ", ".join(f"{s['name']}: {s['dtype']}{s['shape']}" for s in specs)
        raise RunError(f"{path}: {'; '.join(problems)}; the model takes {signature}")
    arrays = []
    for spec in specs:
        array = given[spec["name"]]
        if array.dtype.name != spec["dtype"]:
            raise RunError(f"input '{spec['name']}' has dtype {array.dtype.name}, expected {spec['dtype']}")
        arrays.append(np.ascontiguousarray(array))
    problem = shape_problem(specs, [a.shape for a in arrays], dims or {})
    if problem:
        raise RunError(problem)
    return arrays


def write_npz(path: Path, arrays: dict, np) -> None:
    """Like ``np.savez`` but any array name works (savez's own keywords would collide)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w", allowZip64=True) as zf:
            for name, array in arrays.items():
                with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, np.asanyarray(array), allow_pickle=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------
# the TVM runtime
# ---------------------------------------------------------------------------------------

def _physical_cores() -> int:
    """Physical cores this process may use (TVM's default pool assumes 2 threads per core)."""
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    cores = set()
    for cpu in usable:
        topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(((topo / "physical_package_id").read_text(), (topo / "core_id").read_text()))
        except OSError:
            return len(usable)
    return max(1, len(cores) or os.cpu_count() or 1)


def host_cpu_flags() -> set[str] | None:
    """This CPU's /proc/cpuinfo flags; None where there is no such file (checks are skipped)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return None


def cpu_problem(part: dict, flags: set[str] | None = None) -> str | None:
    """Why this CPU cannot run ``part`` (a manifest part whose ``cpu`` record lists the
    instruction sets its code uses), or None. Run anyway, such code dies of SIGILL."""
    record = part.get("cpu") or {}
    flags = host_cpu_flags() if flags is None else flags
    if not record or flags is None:
        return None
    missing = [f for f in record.get("features", []) if f not in flags]
    if not missing:
        return None
    return (f"part '{part.get('name', 'main')}' was compiled for CPU {record.get('mcpu', '?')} and uses "
            f"{', '.join(missing)}, which this CPU lacks; compile it on this machine, or with --cpu naming "
            "a CPU this one can stand in for (e.g. --cpu haswell for AVX2)")


def default_threads() -> int:
    """Threads of a part that does not name its own: ``TVM_NUM_THREADS``, else the physical cores."""
    value = os.environ.get("TVM_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else _physical_cores()


def install_pool(library: Path, threads: int = 0) -> bool:
    """Switch the CPU library at ``library``, already loaded by ``tvm.runtime.load_module``, to
    hetc's thread pool (``hetc/backends/cpu/pool.cc``, linked into every CPU library hetc
    writes) with ``threads`` threads (0: ``default_threads()``). TVM points the library's
    parallel loops at its own pool at every load, so call this after each load. False (TVM's
    pool stays) for a library without hetc's pool (written by an older hetc) or one whose loops
    need TVM's barrier. ``HETC_POOL=tvm`` keeps TVM's pool everywhere."""
    if os.environ.get("HETC_POOL", "") == "tvm":
        return False
    import ctypes

    try:
        handle = ctypes.CDLL(str(library))  # the handle TVM's load opened (the same file is not loaded twice)
        install = handle.hetc_pool_install
    except (OSError, AttributeError):
        return False
    install.argtypes, install.restype = [ctypes.c_int], ctypes.c_int
    return install(threads or default_threads()) == 0


def import_runtime():
    """Import numpy and TVM (runtime library only); one-line errors where they are missing."""
    os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")
    os.environ.setdefault("TVM_FFI_DISABLE_TORCH_C_DLPACK", "1")  # else tvm_ffi imports torch if present
    # Same default as hetc's CPU backend: one worker per physical core (set before first use).
    os.environ.setdefault("TVM_NUM_THREADS", str(_physical_cores()))
    try:
        import numpy as np
    except ImportError as err:
        raise RunError(f"numpy is not installed for this Python ({sys.executable}): {err}") from None
    try:
        import tvm
        import tvm_ffi
        from tvm.runtime.vm import VirtualMachine
    except Exception as err:  # noqa: BLE001 - ImportError, OSError from ctypes, TVM errors
        raise RunError(f"cannot import the TVM runtime ({last_line(err)}); put the bundle's site/ "
                       "on PYTHONPATH") from None
    return np, tvm, tvm_ffi, VirtualMachine


class _QuietStderr:
    """Capture file descriptor 2 (TVM's C++ logging) and replay it minus known noise."""

    def __enter__(self):
        sys.stderr.flush()
        self._saved = os.dup(2)
        self._file = tempfile.TemporaryFile()
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, exc_type, exc, tb):
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        kept = [ln for ln in self._file.read().splitlines(keepends=True) if not _NOISE.search(ln)]
        self._file.close()
        if kept and exc_type is None:  # on error the raised message says what went wrong
            os.write(2, b"".join(kept))
        return False


def cuda_available(tvm, spec: str) -> None:
    """Load TVM's CUDA runtime (``import tvm`` in runtime-only mode does not) and check that
    the GPU ``spec`` is present."""
    message = f"this artifact needs an NVIDIA GPU ({spec}) and none is available here"
    if "tvm_runtime_cuda" not in tvm.base._LOADED_LIBS:
        from tvm_ffi.libinfo import load_lib_ctypes

        lib_dir = Path(tvm.base._LOADED_LIBS["tvm_runtime"]._name).resolve().parent
        try:
            tvm.base._LOADED_LIBS["tvm_runtime_cuda"] = load_lib_ctypes(
                "tvm", "tvm_runtime_cuda", "RTLD_LOCAL", extra_lib_paths=[lib_dir])
        except (OSError, RuntimeError) as err:  # libcuda.so.1 (driver) or libcudart.so.13 missing
            raise RunError(f"{message} (cannot load TVM's CUDA runtime: {last_line(err)})") from None
    if not tvm.device(spec).exist:
        raise RunError(message)


def parse_devices(tvm, part: dict) -> list:
    """``part["devices"]`` (all the VM's devices, in order; empty or absent for a one-device
    part: ``[part["device"]]``) as TVM devices, checked to exist."""
    devices = []
    for spec in part.get("devices") or [part["device"]]:
        kind, sep, index = spec.partition(":")
        if kind not in {"cpu", "cuda"} or (sep and not index.isdigit()):
            raise RunError(f"part '{part['name']}': unsupported device '{spec}' (expected cpu:N or cuda:N)")
        spec = f"{kind}:{index or 0}"
        if kind == "cuda":
            cuda_available(tvm, spec)
        devices.append(tvm.device(spec))
    return devices


def dim_sizes(specs: list[dict], shapes: list) -> dict:
    """{symbolic dim name: size} read off ``shapes`` (one per input spec, in order)."""
    return {d: int(n) for spec, shape in zip(specs, shapes) for d, n in zip(spec["shape"], shape)
            if isinstance(d, str)}


def cache_call(main, kv: dict, specs: list[dict], arrays: list, tvm, device, np, error=RunError) -> list:
    """``main`` of a model compiled with its KV cache in place (manifest ``kv_cache``: the layout
    of ``hetc/passes/kv_cache.py``) called with the exported signature: each past input copied
    into a fresh buffer of ``max_len`` positions, and the outputs the exported ones, logits then
    each present (its buffer's valid prefix, copied out). ``error``: the class raised for a past
    that does not fit the buffers."""
    by_name = {spec["name"]: array for spec, array in zip(specs, arrays)}
    slots, max_len = kv["slots"], kv["max_len"]

    def exported(slot):  # the buffer's sequence axis in the exported layout (a transposed one swaps 2, 3)
        return 2 if slot.get("transposed") else slot["axis"]

    first = by_name[slots[0]["past"]]
    batch, past = first.shape[0], first.shape[exported(slots[0])]
    step = [(spec, a) for spec, a in zip(specs, arrays) if spec["name"] in kv["step_inputs"]]
    new = dim_sizes([spec for spec, _ in step], [a.shape for _, a in step])[kv["new_dim"]]
    if past + new > max_len:
        raise error(f"the past ({past}) and this step's {new} entries need {past + new} cache positions; the "
                    f"model was compiled with --kv-cache {max_len}")

    def window(slot, length):
        index = [slice(None)] * len(slot["shape"])
        index[slot["axis"]] = slice(0, length)
        return tuple(index)

    def blocked(slot):  # keys transposed in blocks of positions, [b, h, max_len / T, d, T]
        return slot.get("transposed") and len(slot["shape"]) == 5

    buffers = []
    for slot in slots:
        value = by_name[slot["past"]]
        if blocked(slot):  # the positions in order, then cut into blocks, each block's axes swapped
            _, heads, blocks, width, tile = slot["shape"]
            flat = np.zeros((batch, heads, blocks * tile, width), value.dtype)
            flat[:, :, :past] = value
            buffer = np.ascontiguousarray(flat.reshape(batch, heads, blocks, tile, width).swapaxes(3, 4))
        else:
            buffer = np.zeros([batch, *slot["shape"][1:]], value.dtype)
            buffer[window(slot, past)] = value.swapaxes(2, 3) if slot.get("transposed") else value
        buffers.append(tvm.runtime.tensor(buffer, device))
    args = [tvm.runtime.tensor(np.ascontiguousarray(by_name[n]), device) for n in kv["step_inputs"]]
    logits = main(*args, *buffers, tvm.runtime.tensor(np.full(batch, past, np.int64), device),
                  tvm.runtime.ShapeTuple([past]))
    presents = []
    for slot, buffer in zip(slots, buffers):
        if blocked(slot):
            b, heads, blocks, width, tile = buffer.shape
            valid = buffer.numpy().swapaxes(3, 4).reshape(b, heads, blocks * tile, width)[:, :, :past + new]
        else:
            valid = buffer.numpy()[window(slot, past + new)]
            valid = valid.swapaxes(2, 3) if slot.get("transposed") else valid
        presents.append(np.ascontiguousarray(valid))
    return [logits.numpy(), *presents]


class Part:
    """One part's Relax VM: ``part(arrays)`` calls ``main`` and returns numpy arrays."""

    def __init__(self, root: Path, part: dict, tvm, vm_class, kv_cache: dict | None = None,
                 inputs: list | None = None) -> None:
        """``kv_cache``/``inputs``: the manifest's, for a decoder with its cache in place."""
        problem = cpu_problem(part)
        if problem:
            raise RunError(f"{root}: {problem}")
        self.tvm = tvm
        self.devices = parse_devices(tvm, part)
        if part.get("threads", 0) > 0:
            tvm.get_global_func("runtime.config_threadpool")(1, part["threads"])
        try:
            with _QuietStderr():
                library = tvm.runtime.load_module(str(root / part["library"]))
                install_pool(root / part["library"], part.get("threads", 0))
                self.vm = vm_class(library, self.devices)
        except Exception as err:  # noqa: BLE001 - TVM raises its own error classes
            raise RunError(f"{root}: cannot load part '{part['name']}' ({part['library']}): "
                           f"{last_line(err)}") from None
        self.main = self.vm["main"]
        self.kv_cache, self.inputs = kv_cache, inputs

    def __call__(self, arrays: list) -> list:
        tvm = self.tvm
        if self.kv_cache:  # the cache kept in place: called with the exported signature
            import numpy as np

            return cache_call(self.main, self.kv_cache, self.inputs, arrays, tvm, self.devices[0], np)
        args = [tvm.runtime.tensor(a, self.devices[0]) for a in arrays]
        return self._flatten(self.main(*args))

    def _flatten(self, value) -> list:
        if isinstance(value, self.tvm.runtime.Tensor):
            return [value.numpy()]
        if isinstance(value, self.tvm.runtime.ShapeTuple):  # an ONNX Shape output kept symbolic
            import numpy as np

            return [np.array(list(value), np.int64)]
        return [array for item in value for array in self._flatten(item)]


# ---------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------

def run(args: argparse.Namespace) -> int:
    """Validate, load, run ``main`` (timed if asked), write the outputs."""
    root = Path(args.artifact).absolute()
    manifest = read_manifest(root)
    if len(manifest["parts"]) != 1:
        raise RunError(f"{root}: {len(manifest['parts'])} parts; this runner runs single-part artifacts")
    np, tvm, tvm_ffi, vm_class = import_runtime()
    arrays = read_inputs(Path(args.inputs), manifest["inputs"], np, manifest.get("dims", {}))
    built = (manifest.get("tvm_version"), manifest.get("tvm_ffi_version"))
    if built != (tvm.__version__, tvm_ffi.__version__):
        raise RunError(f"{root}: built with TVM {built[0]} / tvm-ffi {built[1]}, this runtime is TVM "
                       f"{tvm.__version__} / tvm-ffi {tvm_ffi.__version__}; use a matching runtime")
    served = [o for o in manifest.get("offloads", []) if not o.get("linked", True)]
    if served:  # e.g. Ascend regions: onnxruntime emulation or a CANN host library, both hetc's runtime
        raise RunError(f"{root}: {len(served)} {served[0]['target']} region(s) run through hetc's runtime "
                       f"({served[0]['name']}, ...); run this artifact with `hetc run`")
    part = Part(root, manifest["parts"][0], tvm, vm_class, manifest.get("kv_cache"), manifest["inputs"])

    times_ms = []
    runs = args.warmup + max(1, args.repeat or 0)
    for i in range(runs):
        start = time.perf_counter()
        try:
            outputs = part(arrays)
        except Exception as err:  # noqa: BLE001 - TVM raises its own error classes
            raise RunError(f"{root}: running main failed: {last_line(err)}") from None
        if i >= args.warmup:
            times_ms.append((time.perf_counter() - start) * 1e3)
    specs = manifest["outputs"]
    if len(outputs) != len(specs):
        raise RunError(f"{root}: model returned {len(outputs)} outputs, manifest lists {len(specs)}")
    named = {s["name"]: out for s, out in zip(specs, outputs)}

    if args.outputs:
        try:
            write_npz(Path(args.outputs), named, np)
        except OSError as err:
            raise RunError(f"{args.outputs}: cannot write outputs ({err.strerror or err})") from None
    for name, out in named.items():
        print(f"{name}: {out.dtype.name}{list(out.shape)}")
    for o in manifest.get("offloads", []):  # regions an external target runs: say how they ran here
        print(f"{o['target']} region {o['name']}: ran as {o['execution']}"
              + (" (emulated, not on the device)" if o.get("emulated", True) else ""))
    timing = {"median_ms": statistics.median(times_ms), "min_ms": min(times_ms), "runs": len(times_ms),
              "warmup": args.warmup, "devices": [str(d) for d in part.devices], "times_ms": times_ms}
    if args.repeat:
        print(f"main: median {timing['median_ms']:.3f} ms, min {timing['min_ms']:.3f} ms over "
              f"{timing['runs']} runs after {args.warmup} warm-up on {', '.join(timing['devices'])}")
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(timing, indent=2) + "\n")
        except OSError as err:
            raise RunError(f"{args.json}: cannot write timings ({err.strerror or err})") from None
    return 0


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a hetc artifact with only the TVM runtime.")
    parser.add_argument("artifact", help="artifact directory (with manifest.json)")
    parser.add_argument("--inputs", required=True, help=".npz with one array per model input")
    parser.add_argument("--outputs", help="write the outputs here (.npz, named by the manifest)")
    parser.add_argument("--repeat", type=_count, default=0, help="time this many runs and print the median")
    parser.add_argument("--warmup", type=_count, default=0, help="untimed runs before the timed ones")
    parser.add_argument("--json", help="write the timings (ms) to this JSON file")
    args = parser.parse_args(argv)
    try:
        return run(args)
    except RunError as err:
        print(f"error: {err}", file=sys.stderr)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - still one line, never a traceback
        print(f"error: {type(err).__name__}: {last_line(err)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
