#!/usr/bin/env python3
"""Build a runtime-only bundle: TVM's runtime, ``standalone.py`` and hetc artifacts in one folder.

    python scripts/runtime_bundle.py OUT [--artifact DIR ...] [--python-version 3.12]
                                         [--wheel-dir DIR] [--no-cudart] [--max-mib 64]
                                         [--runtime-lib DIR]

``OUT`` gets::

    site/            tvm (without libtvm_compiler.so and the other compiler-only parts in
                     STRIP), tvm_ffi, typing_extensions; numpy must be on the target already
    standalone.py    the runner (hetc/runtime/standalone.py)
    artifacts/NAME/  each --artifact, checked (manifest, sha256) before it is copied
    run.sh           TVM_USE_RUNTIME_LIB=1, PYTHONPATH=site, runs standalone.py
    BUNDLE.json      what was bundled: versions, Python, sizes, what was stripped

Packages come from this interpreter's installation when they fit the target Python: always for
the same version, and for another one when the installed wheel is ``py3-none`` (apache-tvm,
typing_extensions) or a compatible ``abi3``. Otherwise (apache-tvm-ffi is built per CPython
version) the wheel is taken from ``--wheel-dir`` or fetched with ``pip download`` for the target
Python and manylinux_2_28_x86_64, and unpacked. The bundle is refused above ``--max-mib``
(default 64 MiB). Errors are one line on stderr, exit status 1. See docs/deploy.md.

The wheel's ``libtvm_runtime_cuda.so`` (CUDA 13) makes every bundle CUDA-capable; ``--runtime-lib
DIR`` replaces the wheel's ``libtvm_runtime.so`` / ``libtvm_runtime_cuda.so`` with the ones in DIR
(a source build: ``scripts/build_cuda_runtime.sh``; docs/cuda.md, "The runtime on the GPU machine").
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
import zipfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STANDALONE = ROOT / "hetc" / "runtime" / "standalone.py"
PLATFORM = "manylinux_2_28_x86_64"
# (distribution, import name): what `import tvm` needs at run time besides numpy. ml_dtypes is
# optional there (bfloat16/float8 numpy dtypes only) and is left out.
DISTS = [("apache-tvm", "tvm"), ("apache-tvm-ffi", "tvm_ffi"), ("typing_extensions", "typing_extensions")]
# Never opened when a model is loaded and run with TVM_USE_RUNTIME_LIB=1 (audit in docs/deploy.md).
STRIP = {
    "tvm": ["lib/libtvm_compiler.so",  # the compiler, 260 MB
            "3rdparty", "include", "src", "cmake", "lib64",  # C++/CUDA headers and sources, CMake
            "relax", "s_tir", "topi", "contrib", "web", "testing", "exec",  # compiler-side Python
            "backend/*/"],  # per-backend codegen hooks; runtime-only mode does not load them
    "tvm_ffi": ["3rdparty", "include", "src", "cython", "share", "stub", "CMakeLists.txt"],
}
DIST_INFO_SKIP = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
CUDART = "libcudart.so.13"  # NEEDED by tvm/lib/libtvm_runtime_cuda.so (RUNPATH $ORIGIN)

RUN_SH = """#!/bin/sh
# Run a hetc artifact with the bundled TVM runtime (Python {py}, numpy installed):
#   ./run.sh artifacts/NAME --inputs in.npz [--outputs out.npz] [--repeat N --warmup W]
# PYTHON picks the interpreter (default python3).
here="$(cd "$(dirname "$0")" && pwd)"
py="${{PYTHON:-python3}}"
have="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" || exit 1
if [ "$have" != "{py}" ]; then
    echo "error: this bundle is for Python {py}, $py is Python $have; set PYTHON or rebuild with --python-version $have" >&2
    exit 1
fi
export TVM_USE_RUNTIME_LIB=1
export PYTHONPATH="$here/site${{PYTHONPATH:+:$PYTHONPATH}}"
exec "$py" "$here/standalone.py" "$@"
"""


class BundleError(Exception):
    """One-line failure message."""


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def tree_size(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())


def _ignore(package: str, base: Path):
    """A ``copytree`` ignore function dropping ``__pycache__`` and ``STRIP[package]`` (paths
    relative to ``base``, the folder holding the package)."""
    patterns = STRIP.get(package, [])

    def ignore(directory: str, names: list[str]) -> set[str]:
        rel = Path(directory).relative_to(base)
        dropped = {"__pycache__"}
        for name in names:
            path = (rel / name).as_posix()
            is_dir = (Path(directory) / name).is_dir()
            for pattern in patterns:
                dir_only = pattern.endswith("/")  # "backend/*/": the subfolders, not the files
                if (is_dir or not dir_only) and fnmatch.fnmatch(path, f"{package}/{pattern.rstrip('/')}"):
                    dropped.add(name)
        return dropped & set(names)

    return ignore


def copy_dist(top: Path, names: list[str], package: str, site: Path) -> None:
    """Copy the top-level entries ``names`` found in ``top`` into ``site``, stripped."""
    for name in names:
        src = top / name
        if name.endswith(".dist-info"):
            shutil.copytree(src, site / name, ignore=lambda d, n: DIST_INFO_SKIP & set(n))
        elif src.is_dir():
            shutil.copytree(src, site / name, ignore=_ignore(package, top))
        else:
            shutil.copy2(src, site / name)


def wheel_tags(dist_info_wheel: str) -> list[tuple[str, str, str]]:
    """``(python, abi, platform)`` triples from a WHEEL file's ``Tag:`` lines."""
    return [tuple(line.split(":", 1)[1].strip().split("-"))
            for line in dist_info_wheel.splitlines() if line.startswith("Tag:")]


def fits(tags: list[tuple[str, str, str]], version: str) -> bool:
    """Whether a wheel with these tags runs on CPython ``version`` (same platform assumed)."""
    major, minor = (int(x) for x in version.split("."))
    for python, abi, _ in tags:
        if abi == "none" and python in {"py3", f"py{major}", f"py{major}{minor}"}:
            return True
        if python == f"cp{major}{minor}":
            return True
        match = re.fullmatch(r"cp3(\d+)", python)
        if abi == "abi3" and match and int(match.group(1)) <= minor:
            return True
    return False


def find_wheel(wheel_dir: Path, dist: str, version: str, py: str) -> Path | None:
    """A wheel for ``dist==version`` in ``wheel_dir`` that fits Python ``py``."""
    stem = f"{re.sub(r'[-_.]+', '_', dist).lower()}-{version}-"
    for wheel in sorted(wheel_dir.glob("*.whl")):
        if not wheel.name.lower().startswith(stem):
            continue
        python, abi, plats = wheel.name[:-4].split("-")[-3:]
        tags = [(p, abi, plat) for p in python.split(".") for plat in plats.split(".")]
        if fits(tags, py) and any("x86_64" in plat and "linux" in plat for plat in plats.split(".")):
            return wheel
    return None


def fetch_wheel(dist: str, version: str, py: str, wheel_dir: Path) -> Path:
    """The wheel from ``wheel_dir``, else ``pip download`` it there for Python ``py``."""
    wheel = find_wheel(wheel_dir, dist, version, py)
    if wheel:
        return wheel
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", py, "--platform", PLATFORM, "-d", str(wheel_dir), f"{dist}=={version}"]
    print(f"downloading {dist}=={version} for Python {py} ...", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheel = find_wheel(wheel_dir, dist, version, py)
    if proc.returncode != 0 or wheel is None:
        detail = (proc.stderr.strip().splitlines() or ["no matching wheel"])[-1]
        raise BundleError(f"cannot get a {dist}=={version} wheel for Python {py} ({PLATFORM}): {detail}")
    return wheel


def add_packages(site: Path, py: str, wheel_dir: Path | None, work: Path) -> dict:
    """Fill ``site`` with DISTS for Python ``py``; returns ``{dist: {version, source}}``."""
    same = py == f"{sys.version_info.major}.{sys.version_info.minor}"
    report = {}
    for dist, package in DISTS:
        try:
            installed = metadata.distribution(dist)
        except metadata.PackageNotFoundError:
            raise BundleError(f"{dist} is not installed for {sys.executable}") from None
        version = installed.version
        tags = wheel_tags(installed.read_text("WHEEL") or "")
        if same or fits(tags, py):
            top = Path(installed.locate_file(""))
            names = sorted({Path(str(f)).parts[0] for f in installed.files or []
                            if not str(f).startswith("..")} - {"__pycache__"})
            copy_dist(top, names, package, site)
            source = "installed"
        else:
            wheel = fetch_wheel(dist, version, py, wheel_dir or work)
            unpacked = work / wheel.stem
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(unpacked)
            names = sorted(p.name for p in unpacked.iterdir() if not p.name.endswith(".data"))
            copy_dist(unpacked, names, package, site)
            source = wheel.name
        report[dist] = {"version": version, "source": source,
                        "tags": ["-".join(t) for t in tags] if source == "installed" else []}
    return report


def add_cudart(site: Path) -> str | None:
    """Copy the CUDA runtime that libtvm_runtime_cuda.so links next to it (found with ldd)."""
    lib = site / "tvm" / "lib" / "libtvm_runtime_cuda.so"
    try:
        out = subprocess.run(["ldd", str(lib)], capture_output=True, text=True, check=False).stdout
    except OSError:
        return None
    match = re.search(rf"^\s*{re.escape(CUDART)} => (/\S+)", out, re.MULTILINE)
    if not match:
        return None
    shutil.copy2(Path(match.group(1)).resolve(), lib.parent / CUDART)
    return match.group(1)


RUNTIME_LIBS = ("libtvm_runtime.so", "libtvm_runtime_cuda.so")


def replace_runtime(site: Path, lib_dir: Path) -> dict:
    """Put ``lib_dir``'s runtime libraries in place of the wheel's; returns {name: bytes}."""
    missing = [n for n in RUNTIME_LIBS if not (lib_dir / n).is_file()]
    if missing:
        raise BundleError(f"{lib_dir}: no {', '.join(missing)} (scripts/build_cuda_runtime.sh builds them)")
    out = {}
    for name in RUNTIME_LIBS:
        shutil.copy2(lib_dir / name, site / "tvm" / "lib" / name)
        out[name] = (lib_dir / name).stat().st_size
    return out


def _load_standalone():
    spec = importlib.util.spec_from_file_location("hetc_standalone", STANDALONE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def add_artifacts(out: Path, artifacts: list[str], versions: dict) -> list[str]:
    """Check each artifact (manifest, hashes, TVM versions) and copy it to ``out/artifacts``."""
    standalone = _load_standalone()
    names = []
    for artifact in artifacts:
        src = Path(artifact).absolute()
        try:
            manifest = standalone.read_manifest(src)
        except standalone.RunError as err:
            raise BundleError(str(err)) from None
        built = (manifest.get("tvm_version"), manifest.get("tvm_ffi_version"))
        if built != (versions["apache-tvm"]["version"], versions["apache-tvm-ffi"]["version"]):
            raise BundleError(f"{src}: built with TVM {built[0]} / tvm-ffi {built[1]}, the bundle has "
                              f"{versions['apache-tvm']['version']} / {versions['apache-tvm-ffi']['version']}")
        if src.name in names:
            raise BundleError(f"two artifacts are named {src.name}; rename one")
        dst = out / "artifacts" / src.name
        for rel in [*manifest["files"], standalone.MANIFEST]:
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, dst / rel)
        names.append(src.name)
    return names


def build(out: Path, artifacts: list[str], py: str, wheel_dir: Path | None, cudart: bool,
          max_mib: float, runtime_lib: Path | None = None) -> dict:
    """Build the bundle in a temporary sibling of ``out``, then move it into place."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / "BUNDLE.json").is_file())):
        raise BundleError(f"{out}: exists and is not an empty directory or a bundle; refusing to overwrite it")
    if not re.fullmatch(r"3\.\d+", py):
        raise BundleError(f"invalid --python-version {py!r}; expected 3.N")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        (tmp / "site").mkdir(parents=True)
        with tempfile.TemporaryDirectory() as work:
            if wheel_dir:
                wheel_dir.mkdir(parents=True, exist_ok=True)
            packages = add_packages(tmp / "site", py, wheel_dir, Path(work))
        runtime = replace_runtime(tmp / "site", runtime_lib) if runtime_lib else None
        cudart_from = add_cudart(tmp / "site") if cudart else None
        shutil.copy2(STANDALONE, tmp / "standalone.py")
        names = add_artifacts(tmp, artifacts, packages)
        (tmp / "run.sh").write_text(RUN_SH.format(py=py))
        (tmp / "run.sh").chmod(0o755)
        info = {"python_version": py, "platform": PLATFORM, "packages": packages, "artifacts": names,
                "stripped": STRIP, "cudart": cudart_from,
                "runtime_lib": {"from": str(runtime_lib), "bytes": runtime} if runtime else "wheel",
                "size_bytes": {"site": tree_size(tmp / "site"),
                               "artifacts": tree_size(tmp / "artifacts") if names else 0}}
        (tmp / "BUNDLE.json").write_text(json.dumps(info, indent=2) + "\n")
        info["size_bytes"]["total"] = total = tree_size(tmp)
        if total > max_mib * 2**20:
            raise BundleError(f"bundle would be {_mib(total)}, over the {max_mib:g} MiB limit (site "
                              f"{_mib(info['size_bytes']['site'])}, artifacts "
                              f"{_mib(info['size_bytes']['artifacts'])})")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build a runtime-only TVM bundle with hetc artifacts.")
    parser.add_argument("out", help="bundle directory to create (or replace, if it is a bundle)")
    parser.add_argument("--artifact", action="append", default=[], help="hetc artifact to include (repeat)")
    parser.add_argument("--python-version", default=f"{sys.version_info.major}.{sys.version_info.minor}",
                        help="target CPython X.Y (default: this interpreter's)")
    parser.add_argument("--wheel-dir", type=Path, help="wheels to use, and where downloads go")
    parser.add_argument("--no-cudart", action="store_true",
                        help=f"do not copy {CUDART} (the GPU machine must then provide it)")
    parser.add_argument("--max-mib", type=float, default=64, help="refuse bundles larger than this")
    parser.add_argument("--runtime-lib", type=Path,
                        help="folder with libtvm_runtime.so and libtvm_runtime_cuda.so to use instead of the wheel's")
    args = parser.parse_args(argv)
    out = Path(args.out).absolute()
    try:
        info = build(out, args.artifact, args.python_version, args.wheel_dir, not args.no_cudart,
                     args.max_mib, args.runtime_lib)
    except BundleError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"error: {err.filename or out}: {err.strerror or err}", file=sys.stderr)
        return 1
    sizes = info["size_bytes"]
    print(f"bundle {out}: {_mib(sizes['total'])} (site {_mib(sizes['site'])}, artifacts "
          f"{_mib(sizes['artifacts'])}) for Python {info['python_version']}")
    print(f"  CUDA runtime: {'bundled ' + CUDART if info['cudart'] else CUDART + ' not bundled'}")
    for name in info["artifacts"]:
        print(f"  run: {out}/run.sh {out}/artifacts/{name} --inputs INPUTS.npz --outputs OUT.npz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
