#!/usr/bin/env bash
# scripts/sanitize.sh — the sanitizer stage of CI: one clang tree (CUDA off) built with
# AddressSanitizer + UndefinedBehaviorSanitizer (UBSan halts on the first finding) and the
# libFuzzer targets; then the unit and actor tests under the sanitizers; then every fuzz target
# for a bounded time from its committed corpus.
#
# Usage: scripts/sanitize.sh [build-dir]          (default: build-clang)
# Environment:
#   DD_JOBS=N            parallel build jobs (default: number of cores)
#   DD_WERROR=ON|OFF     -Werror for the clang build too (default OFF)
#   DD_FUZZ_SECONDS=N    fuzzing time per target (default 25; 0 skips fuzzing)
#   DD_FUZZ_SEED=S       libFuzzer seed (default: the current time; printed)
#   DD_SANITIZE_LABELS   ctest label regex (default below)
# Which tests run: ctest labels util, kernels, runtime, messages, config, policy, sim, actors,
# apps, chaos and fuzz (corpus replay). Not run here: label `cluster` (multi-process clusters on
# loopback, hostile peers, network namespaces: minutes of wall time, covered by the normal
# tree) and anything CUDA (label `cuda`; the tree is built with DD_CUDA=OFF, so the CUDA module
# tests do not exist). Suppressions: tests/sanitizers/ (only for Debian's uninstrumented
# libraries; see tests/sanitizers/README.md).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$here/build-clang}"
jobs="${DD_JOBS:-$(nproc)}"
labels="${DD_SANITIZE_LABELS:-^(util|kernels|runtime|messages|config|policy|sim|actors|apps|chaos|fuzz)$}"

command -v clang++ >/dev/null || { echo "sanitize.sh: clang++ not found (scripts/setup.sh installs it)" >&2; exit 2; }

t0=$(date +%s)
# -O1 -g: usable stacks at a moderate cost; asserts stay on (no NDEBUG) in this tree.
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Sanitize \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_FLAGS_SANITIZE="-O1 -g" -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -g" \
  -DDD_SANITIZE=address,undefined -DDD_FUZZ=ON -DDD_CUDA=OFF -DDD_BENCHMARKS=OFF \
  -DDD_WERROR="${DD_WERROR:-OFF}" >/dev/null
cmake --build "$build" -j"$jobs"
t1=$(date +%s)

supp="$here/tests/sanitizers"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 900 -L "$labels"
t2=$(date +%s)

fuzz_seconds="${DD_FUZZ_SECONDS:-25}"
if ((fuzz_seconds > 0)); then
  "$here/scripts/fuzz.sh" --build "$build" --seconds "$fuzz_seconds"
fi
t3=$(date +%s)
echo "sanitize.sh: stage times: clang ASan+UBSan build $((t1 - t0)) s, sanitizer ctest $((t2 - t1)) s, fuzzing $((t3 - t2)) s"
