#!/usr/bin/env bash
# tools/gpu_check/run_on_device.sh — the one prepared script to run on a GPU machine.
#
# Builds ONLY the kernels (reference, cpu, cuda backends) and dd-gpu-check through the tiny
# standalone project tools/gpu_check/standalone/ (needs CUDA + OpenBLAS + OpenMP, not CAF /
# Cap'n Proto / Lua), for sm_90 (H100/H200) unless DD_CUDA_ARCH says otherwise, with every
# core; then runs `dd-gpu-check --require-device` (extra arguments are passed on, e.g.
# --quick or --no-bench). When $OUT is set, the table goes to $OUT/gpu_check.txt and the build
# log and nvidia-smi output beside it. Exit status: dd-gpu-check's (0 = every op passed,
# 1 = a check failed, 3 = no device), or 4 when the build fails.
#
#   tools/gpu_check/run_on_device.sh            # from anywhere inside the repo copy
#   DD_CUDA_ARCH=90a tools/gpu_check/run_on_device.sh --quick
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${DD_GPU_BUILD:-$ROOT/build-gpu}"
ARCH="${DD_CUDA_ARCH:-90}"
JOBS="$(nproc 2>/dev/null || echo 4)"
OUT_DIR="${OUT:-}"
LOG_DIR="${OUT_DIR:-$BUILD}"
mkdir -p "$BUILD" "$LOG_DIR"
BUILD_LOG="$LOG_DIR/gpu_build.txt"
TABLE="$LOG_DIR/gpu_check.txt"

say() { echo "run_on_device: $*" | tee -a "$BUILD_LOG"; }
: >"$BUILD_LOG"

# ---- tools and libraries --------------------------------------------------------------------
NVCC="$(command -v nvcc || true)"
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -z "$NVCC" ]; then say "nvcc not found (CUDA toolkit missing)"; exit 4; fi

have_cblas() {
  for d in /usr/include /usr/include/x86_64-linux-gnu /usr/include/openblas \
           /usr/include/x86_64-linux-gnu/openblas-pthread /usr/local/include; do
    [ -f "$d/cblas.h" ] && return 0
  done
  return 1
}
APT_PKGS=()
have_cblas || APT_PKGS+=(libopenblas-dev)
command -v cmake >/dev/null || APT_PKGS+=(cmake)
command -v g++ >/dev/null || APT_PKGS+=(g++)
if [ "${#APT_PKGS[@]}" -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"
  say "installing ${APT_PKGS[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${APT_PKGS[@]}" >>"$BUILD_LOG" 2>&1 ||
    { $SUDO apt-get update -q >>"$BUILD_LOG" 2>&1 &&
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${APT_PKGS[@]}" >>"$BUILD_LOG" 2>&1; } ||
    say "apt-get failed; trying to build anyway"
fi

# ---- build ----------------------------------------------------------------------------------
say "nvcc: $("$NVCC" --version | tail -1); arch sm_$ARCH; $JOBS jobs; build dir $BUILD"
START=$(date +%s)
if ! cmake -S "$ROOT/tools/gpu_check/standalone" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" >>"$BUILD_LOG" 2>&1; then
  say "configure failed; see $BUILD_LOG"; tail -30 "$BUILD_LOG"; exit 4
fi
if ! cmake --build "$BUILD" -j "$JOBS" >>"$BUILD_LOG" 2>&1; then
  say "build failed; see $BUILD_LOG"; grep -E "error|Error" "$BUILD_LOG" | head -40; exit 4
fi
say "built in $(( $(date +%s) - START )) s"

# ---- run ------------------------------------------------------------------------------------
if [ -n "$OUT_DIR" ]; then nvidia-smi >"$OUT_DIR/nvidia-smi.txt" 2>&1 || true; fi
"$BUILD/dd-gpu-check" --require-device "$@" 2>&1 | tee "$TABLE"
RC=${PIPESTATUS[0]}
say "dd-gpu-check exit status $RC; table in $TABLE"
exit "$RC"
