#!/usr/bin/env bash
# scripts/test.sh — run the whole test suite (builds first if needed); with --sanitize also the sanitizer stage.
# GPU tests skip without a device.
# Usage: scripts/test.sh [--sanitize] [build-dir] [extra ctest args...]
#   Stage 0: scripts/lint.sh format-check (the tree as .clang-format says), role-faults (no
#            role file holds fault code) and role-services (no role header names a node service).
#   Stage 1: build `build-dir` (default build; scripts/setup.sh configures it when missing) and
#            run every ctest test in it.
#   Stage 2 (--sanitize or DD_SANITIZE_STAGE=1; CI's .ci/run passes --sanitize):
#            scripts/sanitize.sh — the clang ASan+UBSan tree build-clang: its build, the unit
#            and actor tests under the sanitizers, every fuzz target for DD_FUZZ_SECONDS (25) s
#            from seed DD_FUZZ_SEED (default 20261202, printed); then scripts/lint.sh tidy
#            (docs/testing.md).
# Prints each stage's wall time at the end.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sanitize="${DD_SANITIZE_STAGE:-0}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n '2,14p' "${BASH_SOURCE[0]}"
  exit 0
fi
if [[ "${1:-}" == "--sanitize" ]]; then
  sanitize=1
  shift
fi
build="${1:-$here/build}"
shift || true
t0=$(date +%s)
# Stage 0: the tree is formatted as .clang-format says (no build needed).
"$here/scripts/lint.sh" format-check
"$here/scripts/lint.sh" role-faults
"$here/scripts/lint.sh" role-services
tf=$(date +%s)
[[ -f "$build/CMakeCache.txt" ]] || "$here/scripts/setup.sh" "$build"
cmake --build "$build" -j"$(nproc)"
t1=$(date +%s)
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 900 "$@"
t2=$(date +%s)
times="format-check $((tf - t0)) s, build $((t1 - tf)) s, ctest $((t2 - t1)) s"
if [[ "$sanitize" == 1 ]]; then
  # A fixed libFuzzer seed by default: a slower machine then explores a prefix of the same
  # mutation sequence as a faster one, so CI fuzzing is reproducible (DD_FUZZ_SEED overrides).
  # (sanitize.sh prints its build / ctest / fuzzing times itself.)
  DD_FUZZ_SEED="${DD_FUZZ_SEED:-20261202}" "$here/scripts/sanitize.sh"
  ts=$(date +%s)
  # clang-tidy over the code that parses untrusted bytes (reads build-clang's compile commands).
  "$here/scripts/lint.sh" tidy
  t3=$(date +%s)
  times+=", sanitizer stage $((ts - t2)) s, clang-tidy $((t3 - ts)) s"
else
  times+=", sanitizer stage not run (--sanitize runs it)"
fi
echo "test.sh: stage times: $times"
