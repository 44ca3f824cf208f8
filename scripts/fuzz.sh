#!/usr/bin/env bash
# scripts/fuzz.sh — run the libFuzzer targets of tests/fuzz for a bounded time each.
#
# Usage: scripts/fuzz.sh [--build DIR] [--seconds N] [--seed S] [--seeds] [target...]
#   --build DIR   the clang tree (default build-clang; scripts/sanitize.sh configures it)
#   --seconds N   fuzzing time per target (default $DD_FUZZ_SECONDS or 25)
#   --seed S      libFuzzer's -seed (default $DD_FUZZ_SEED or the current time); printed, so a
#                 run reproduces with the same seed, binary and corpus
#   --seeds       only (re)write the committed seed corpora and the DSL dictionary with
#                 DIR/bin/fuzz_seeds, then exit
#   target...     default: every target (codec_fuzz owner_checkpoint_fuzz safetensors_fuzz
#                 config_fuzz)
# Each target starts from its committed corpus tests/fuzz/corpus/<target>/ (never modified
# here: new inputs go to DIR/fuzz/<target>/corpus) with its dictionary when it has one. A crash,
# leak, timeout or sanitizer finding stops that target; its input is saved as
# DIR/fuzz/<target>/crash-* (or leak-*, timeout-*) and the script exits 1 after the others ran.
# Turn a finding into a regression input: fix it, then copy the file to
# tests/fuzz/corpus/<target>/regress_<what> (ctest label "fuzz" replays every corpus file).
# Prints one summary line per target: executions, executions/s, corpus size, new units.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$here/build-clang"
seconds="${DD_FUZZ_SECONDS:-25}"
seed="${DD_FUZZ_SEED:-$(date +%s)}"
seeds_only=0
targets=()
while (($#)); do
  case "$1" in
    --build) build="$(cd "$2" && pwd)"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --seeds) seeds_only=1; shift ;;
    -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ "$seconds" =~ ^[0-9]+$ && "$seconds" -gt 0 ]] || { echo "fuzz.sh: --seconds needs a positive integer, got '$seconds'" >&2; exit 2; }
[[ "$seed" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: --seed needs a non-negative integer, got '$seed'" >&2; exit 2; }
((${#targets[@]})) || targets=(codec_fuzz owner_checkpoint_fuzz safetensors_fuzz config_fuzz)
fuzzdir="$here/tests/fuzz"

if ((seeds_only)); then
  [[ -x "$build/bin/fuzz_seeds" ]] || { echo "fuzz.sh: $build/bin/fuzz_seeds is not built (cmake --build $build --target fuzz_seeds)" >&2; exit 2; }
  "$build/bin/fuzz_seeds" "$fuzzdir"
  echo "fuzz.sh: seeds written under $fuzzdir/corpus and $fuzzdir/dict"
  exit 0
fi

# Debian's uninstrumented libraries (Lua, OpenBLAS): see tests/sanitizers/README.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$here/tests/sanitizers/lsan.supp:print_suppressions=0}"

echo "fuzz.sh: seed $seed, ${seconds}s per target, build $build"
failed=()
summary=()
for t in "${targets[@]}"; do
  bin="$build/bin/$t"
  [[ -x "$bin" ]] || { echo "fuzz.sh: $bin is not built (scripts/sanitize.sh builds it)" >&2; exit 2; }
  work="$build/fuzz/$t"
  rm -rf "$work"
  mkdir -p "$work/corpus"
  args=(-seed="$seed" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536
        -print_final_stats=1 -artifact_prefix="$work/")
  dict="$fuzzdir/dict/${t%_fuzz}.dict"
  [[ -f "$dict" ]] && args+=(-dict="$dict")
  rc=0
  corpora=("$fuzzdir/corpus/$t")
  # config_fuzz also starts from examples/ and tests/config/bad/, read in place
  # (tests/fuzz/CMakeLists.txt).
  [[ "$t" == config_fuzz ]] && corpora+=("$here/examples" "$here/tests/config/bad")
  "$bin" "${args[@]}" "$work/corpus" "${corpora[@]}" >"$work/log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -1)
  added=$(sed -n 's/^stat::new_units_added: *//p' "$work/log" | tail -1)
  seeds=$(find "$fuzzdir/corpus/$t" -type f | wc -l)
  # libFuzzer's last status line: "#N DONE cov: C ft: F corp: U/Sb ..." (corpus after merging).
  last=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$work/log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$last")
  line=$(printf '%-22s rc=%d execs=%s exec/s=%s seeds=%d new=%s corpus=%s cov=%s' "$t" "$rc" \
         "${execs:-?}" "${rate:-?}" "$seeds" "${added:-?}" "${corp:-?}" "${cov:-?}")
  summary+=("$line")
  echo "fuzz.sh: $line"
  if ((rc != 0)); then
    failed+=("$t")
    echo "---- $t failed (exit $rc); last lines of $work/log:" >&2
    tail -n 60 "$work/log" >&2
    ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* 2>/dev/null >&2 || true
  fi
done
echo "fuzz.sh: summary (seed $seed, ${seconds}s each)"
printf '  %s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "fuzz.sh: FAILED: ${failed[*]} (inputs under $build/fuzz/<target>/; reproduce with $build/bin/<target> <input>)" >&2
  exit 1
fi
