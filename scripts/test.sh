#!/usr/bin/env bash
# scripts/test.sh — run the whole test suite (builds first if needed). GPU tests skip without a device.
# Usage: scripts/test.sh [build-dir] [extra ctest args...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$here/build}"
shift || true
[[ -f "$build/CMakeCache.txt" ]] || "$here/scripts/setup.sh" "$build"
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 900 "$@"
