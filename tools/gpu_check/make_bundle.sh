#!/usr/bin/env bash
# tools/gpu_check/make_bundle.sh — builds dd-node, dd-gpu-check and the CUDA backend module for a
# GPU machine that has the CUDA toolkit and a driver but none of the project's Debian libraries,
# and packs them into one compressed archive (docs/gpu.md, "Running it on a GPU machine").
#
# The archive holds dd-bundle/{bin,lib,data,VERSION}: the binaries (stripped, RUNPATH
# $ORIGIN/../lib), every shared library they need that is not part of the C runtime or of CUDA
# (CAF, Cap'n Proto, Lua, OpenBLAS and its Fortran runtime, fmt, zlib, OpenSSL, libstdc++, OpenMP),
# and the Tiny Shakespeare text the device script trains on. The CUDA libraries (cudart, cuBLAS)
# and the driver come from the GPU machine. CPU code is built for x86-64-v3 (AVX2), not for this
# machine's CPU, so it runs on any current server CPU.
#
# Usage: tools/gpu_check/make_bundle.sh [--from-build DIR] [--out FILE]
#   --from-build DIR  pack the binaries of an existing build tree (bin/ and lib/) instead of
#                     building; used by the test that keeps this script working
#   --out FILE        the archive (default bundle/dd-bundle.tar.xz; bundle/ is git-ignored)
# Environment: DD_CUDA_ARCH (default 90: H100/H200), DD_JOBS (default: cores),
#              DD_BUNDLE_BUILD (default build-bundle), DD_DATA (default: Tiny Shakespeare beside
#              the repository, datasets/tinyshakespeare/input.txt).
# Exit status: 0 packed (size and contents printed), 1 a step failed (named), 2 bad flags.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FROM_BUILD=""
OUT_FILE="$ROOT/bundle/dd-bundle.tar.xz"
while (($#)); do
  case "$1" in
    --from-build) FROM_BUILD="${2:?--from-build needs a directory}"; shift 2 ;;
    --out) OUT_FILE="${2:?--out needs a file}"; shift 2 ;;
    -h | --help) sed -n '2,20p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "make_bundle: unknown flag '$1' (see --help)" >&2; exit 2 ;;
  esac
done
say() { echo "make_bundle: $*"; }
die() { echo "make_bundle: $*" >&2; exit 1; }

ARCH="${DD_CUDA_ARCH:-90}"
JOBS="${DD_JOBS:-$(nproc)}"
DATA="${DD_DATA:-$ROOT/datasets/tinyshakespeare/input.txt}"
[[ -f "$DATA" ]] || die "no training text at $DATA (set DD_DATA)"
command -v patchelf >/dev/null || die "patchelf is missing (apt-get install patchelf)"

if [[ -z "$FROM_BUILD" ]]; then
  BUILD="${DD_BUNDLE_BUILD:-$ROOT/build-bundle}"
  [[ -x /usr/local/cuda/bin/nvcc ]] || command -v nvcc >/dev/null ||
    die "nvcc not found: the bundle needs the CUDA toolkit to build the backend module"
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  say "configuring $BUILD (Release, CUDA sm_$ARCH, x86-64-v3, no tests)"
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DDD_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DDD_NATIVE=OFF -DCMAKE_CXX_FLAGS="-march=x86-64-v3" \
    -DDD_TESTS=OFF -DDD_BENCHMARKS=OFF "${launcher[@]}" >"$BUILD.configure.log" 2>&1 ||
    die "configure failed: see $BUILD.configure.log"
  say "building dd-node, dd-gpu-check and the CUDA module with $JOBS jobs"
  cmake --build "$BUILD" -j"$JOBS" --target dd-node dd-gpu-check dd_backend_cuda ||
    die "build failed"
  FROM_BUILD="$BUILD"
fi

BIN="$FROM_BUILD/bin"
MODULE="$FROM_BUILD/lib/libdd_backend_cuda.so"
for f in "$BIN/dd-node" "$BIN/dd-gpu-check" "$MODULE"; do
  [[ -f "$f" ]] || die "$f is missing (was the build tree built with CUDA?)"
done

STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
B="$STAGE/dd-bundle"
mkdir -p "$B/bin" "$B/lib" "$B/data"
cp "$BIN/dd-node" "$BIN/dd-gpu-check" "$B/bin/"
cp "$MODULE" "$B/lib/"
cp "$DATA" "$B/data/input.txt"

# Shared libraries to carry: everything the binaries resolve here except the C runtime (the
# GPU machine's glibc is used; it must be at least this machine's, checked by the device
# script) and CUDA (the GPU machine's toolkit and driver).
is_system() {
  case "$(basename "$1")" in
    ld-linux*.so* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | \
      libresolv.so* | libutil.so* | linux-vdso*) return 0 ;;
    libcuda.so* | libcudart.so* | libcublas.so* | libcublasLt.so* | libnvidia*) return 0 ;;
  esac
  return 1
}
declare -A seen=()
for obj in "$B/bin/dd-node" "$B/bin/dd-gpu-check" "$B/lib/libdd_backend_cuda.so"; do
  while read -r name _ path _; do
    [[ "$path" == /* ]] || continue
    is_system "$path" && continue
    [[ -n "${seen[$name]:-}" ]] && continue
    seen[$name]=1
    cp -L "$path" "$B/lib/$name"
  done < <(ldd "$obj" | grep '=>')
done
missing=$(ldd "$B/bin/dd-node" | grep 'not found' || true)
[[ -z "$missing" ]] || die "dd-node has unresolved libraries here: $missing"

strip --strip-unneeded "$B/bin/"* "$B/lib/"*.so* 2>/dev/null || true
for f in "$B/bin/"*; do patchelf --set-rpath '$ORIGIN/../lib' "$f"; done
for f in "$B/lib/"*.so*; do patchelf --set-rpath '$ORIGIN' "$f"; done

glibc_needed=$(objdump -T "$B/bin/"* "$B/lib/"*.so* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' |
  sort -t. -k1,1 -k2,2n -k3,3n -u | tail -1)
{
  echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "built $(date -u +%FT%TZ) on $(uname -m), cuda arch sm_$ARCH"
  echo "needs $glibc_needed or newer"
} >"$B/VERSION"

# The check that matters: with the C runtime and nothing else of this machine's library
# directories, every library of the bundle resolves inside the bundle.
out_of_bundle=$(env -i LD_LIBRARY_PATH= ldd "$B/bin/dd-node" | awk '$3 ~ /^\// {print $3}' |
  while read -r p; do is_system "$p" || [[ "$p" == "$B"/* ]] || echo "$p"; done)
[[ -z "$out_of_bundle" ]] || die "dd-node still loads from outside the bundle: $out_of_bundle"
"$B/bin/dd-node" --help >/dev/null || die "the bundled dd-node does not start"

mkdir -p "$(dirname "$OUT_FILE")"
tar -C "$STAGE" -cf - dd-bundle | xz -T"$JOBS" -6 >"$OUT_FILE"
size=$(stat -c %s "$OUT_FILE")
say "packed $OUT_FILE: $((size / 1024 / 1024)) MiB ($size bytes), $(ls "$B/lib" | wc -l) libraries, $(cat "$B/VERSION" | tr '\n' ';')"
(( size < 60 * 1024 * 1024 )) || die "the archive is over 60 MiB: it must travel with the tree (64 MiB in all)"
