#!/usr/bin/env bash
# Build TVM's runtime with CUDA from source: libtvm_runtime.so + libtvm_runtime_cuda.so, no
# compiler, no LLVM. The result is a drop-in for the wheel's runtime libraries:
#
#   scripts/build_cuda_runtime.sh [MIRROR_GIT_DIR] [REF]          # defaults below
#   python scripts/runtime_bundle.py B --python-version 3.12 --runtime-lib build/tvm-cuda-runtime/lib
#
# Why it is a fallback, not the default (docs/cuda.md, "The runtime on the GPU machine"): the
# apache-tvm 0.27.0.post1 wheel already ships libtvm_runtime_cuda.so built by the release with
# CUDA 13, from the same commit (g7b5acb32b) as the compiler that writes the artifacts; that commit
# is not in the apache/tvm mirror (no v0.27.0 tag or branch), so a source build is of a nearby
# commit and must be checked against an artifact before it is trusted (the bundle test does).
#
# Inputs: a bare git mirror of apache/tvm, nvcc (CUDA 13) under /usr/local/cuda, cmake, ninja or
# make, the project's .venv (tvm_ffi's installed package holds tvm-ffi's CMake sources and dlpack,
# used for the missing 3rdparty/tvm-ffi submodule). No libcuda is needed: a stub with the driver's
# soname is linked against (the real one comes from the GPU machine's driver).
# cudart is linked statically (libcudart_static.a), so the libraries need no CUDA toolkit there.
# Output: build/tvm-cuda-runtime/lib/{libtvm_runtime.so,libtvm_runtime_cuda.so} (ignored by git).
# CMake >= 3.28 is needed (3.25 does not know nvcc 13's CUDA20 dialect): CMAKE=path, e.g. from
# `pip install --target /work/cmake-pip cmake` -> CMAKE=/work/cmake-pip/cmake/data/bin/cmake.
# Runs niced with 2 jobs (shared 2-core machine).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MIRROR="${1:-/work/.mirror/apache+tvm/repo}"
REF="${2:-main}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
OUT="$ROOT/build/tvm-cuda-runtime"
SRC="$OUT/src"
BLD="$OUT/build"
JOBS="${JOBS:-2}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
CMAKE="${CMAKE:-cmake}"

[ -d "$MIRROR" ] || { echo "error: $MIRROR: no TVM git mirror (fetch apache/tvm first)" >&2; exit 1; }
ver="$("$CMAKE" --version | head -1 | awk '{print $3}')"
if [ "$(printf '%s\n3.28\n' "$ver" | sort -V | head -1)" != 3.28 ]; then
    echo "error: $CMAKE is CMake $ver; 3.28 or newer is needed (set CMAKE=...)" >&2; exit 1
fi
[ -x "$CUDA_HOME/bin/nvcc" ] || { echo "error: no nvcc under $CUDA_HOME" >&2; exit 1; }
FFI="$("$PY" -c 'import os, tvm_ffi; print(os.path.dirname(tvm_ffi.__file__))')"
[ -f "$FFI/CMakeLists.txt" ] || { echo "error: $FFI has no CMake sources (need the apache-tvm-ffi package)" >&2; exit 1; }

mkdir -p "$OUT" "$BLD"
COMMIT="$(git --git-dir="$MIRROR" rev-parse "$REF^{commit}")"
if [ ! -f "$SRC/.commit" ] || [ "$(cat "$SRC/.commit")" != "$COMMIT" ]; then
    rm -rf "$SRC" && mkdir -p "$SRC"
    git --git-dir="$MIRROR" archive "$COMMIT" | tar -x -C "$SRC"
    # Submodules are not in the archive: tvm-ffi from the installed package (the version hetc pins).
    rm -rf "$SRC/3rdparty/tvm-ffi"
    cp -r "$FFI" "$SRC/3rdparty/tvm-ffi"
    mkdir -p "$SRC/3rdparty/tvm-ffi/cmake"  # its CMake helpers are installed under share/
    cp -r "$FFI/share/cmake/tvm_ffi/Utils" "$SRC/3rdparty/tvm-ffi/cmake/Utils"
    rm -rf "$SRC/3rdparty/tvm-ffi/lib" "$SRC/3rdparty/tvm-ffi"/core*.so "$SRC/3rdparty/tvm-ffi/__pycache__"
    echo "$COMMIT" > "$SRC/.commit"
fi

# A libcuda stub: only its soname matters at link time (symbols resolve at load time on the GPU machine).
STUB="$OUT/stub"
mkdir -p "$STUB"
echo 'void hetc_libcuda_stub(void) {}' > "$STUB/stub.c"
cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$STUB/libcuda.so" "$STUB/stub.c"

GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
CMAKE_POLICY_VERSION_MINIMUM=3.5 "$CMAKE" -S "$SRC" -B "$BLD" "${GEN[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DUSE_CUDA="$CUDA_HOME" -DUSE_LLVM=OFF -DUSE_NCCL=OFF -DUSE_NVTX=OFF -DUSE_CUBLAS=OFF \
    -DUSE_CUDNN=OFF -DUSE_CUTLASS=OFF -DUSE_THRUST=OFF -DUSE_LIBBACKTRACE=OFF \
    -DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc" -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCUDA_CUDA_LIBRARY="$STUB/libcuda.so" \
    -DCUDA_CUDART_LIBRARY="$CUDA_HOME/lib64/libcudart_static.a" \
    -DTVM_FFI_USE_LIBBACKTRACE=OFF -DTVM_FFI_BACKTRACE_ON_SEGFAULT=OFF \
    > "$OUT/cmake.log" 2>&1 || { tail -20 "$OUT/cmake.log" >&2; exit 1; }
nice -n 19 "$CMAKE" --build "$BLD" --target tvm_runtime tvm_runtime_cuda -j "$JOBS" > "$OUT/build.log" 2>&1 \
    || { tail -30 "$OUT/build.log" >&2; exit 1; }

mkdir -p "$OUT/lib"
for lib in libtvm_runtime.so libtvm_runtime_cuda.so; do
    found="$(find "$BLD" -name "$lib" -type f | head -1)"
    [ -n "$found" ] || { echo "error: $lib was not built" >&2; exit 1; }
    cp "$found" "$OUT/lib/$lib"
done
echo "$COMMIT" > "$OUT/lib/COMMIT"
echo "built $OUT/lib from apache/tvm $COMMIT:"
ls -l "$OUT/lib"
ldd "$OUT/lib/libtvm_runtime_cuda.so" | grep -E "cuda|tvm" || true
