#!/usr/bin/env bash
# tools/gpu_check/run_on_device.sh — the one prepared script for a GPU machine (docs/gpu.md).
#
# Runs from a copy of the repository on a machine with an NVIDIA GPU, a driver and the CUDA
# toolkit's libraries, and nothing of ours installed: it builds nothing, installs nothing and
# reads nothing outside the copy. It unpacks the bundle that tools/gpu_check/make_bundle.sh made
# (bundle/dd-bundle.tar.xz, carried with the tree) under /tmp and runs, each section under its
# own time cap:
#   preflight  (20 s)  the bundle's libraries resolve, the glibc is new enough, a device and its
#                      driver answer; fails fast otherwise (exit 3: no device, 4: bundle)
#   ops        every CUDA op against the reference backend (dd-gpu-check --no-bench)
#   loss       a 200-step single-learner `dd-node train --backend cuda` against the CPU loss
#              curve of the same seed committed in tests/fixtures/gpu/ (|Δ| ≤ 1e-3 at each of
#              the first 50 steps, ≤ 1 % at step 200)
#   job        `dd-node run examples/shakespeare.lua` with learners.backend = "cuda" for a fixed
#              budget (the learner actors step on the GPU, the syncer on the CPU)
#   speed      tokens/s and TFLOP/s of `dd-node train --backend cuda` at the default model and at
#              GPT-2-small (12 layers, width 768, 12 heads, context 1024, vocabulary 50257), MFU
#              against the device's dense fp32 peak, and the PyTorch twin (tools/torch_reference)
#              at the same shapes and precision on the same GPU: the ratio ours / PyTorch
# Everything lands in $OUT (default ./gpu-out): report.json, report.md, and each section's log.
#
# Usage: tools/gpu_check/run_on_device.sh [--quick] [--bundle FILE]
#   --quick   a rerun in under 2 minutes: small op shapes, a 60-step loss check, a shorter job,
#             GPT-2-small speed only
# Exit status: 0 every section passed, 1 a section failed (named in report.md), 3 no device,
# 4 the bundle is missing or does not run here.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
QUICK=0
BUNDLE_TAR="$ROOT/bundle/dd-bundle.tar.xz"
while (($#)); do
  case "$1" in
    --quick) QUICK=1; shift ;;
    --bundle) BUNDLE_TAR="${2:?--bundle needs a file}"; shift 2 ;;
    -h | --help) sed -n '2,27p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run_on_device: unknown flag '$1' (see --help)" >&2; exit 2 ;;
  esac
done
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
DEST="${DD_BUNDLE_DIR:-/tmp/dd-bundle-$$}"
T0=$(date +%s)
say() { echo "run_on_device [$(($(date +%s) - T0)) s]: $*" | tee -a "$OUT/run.log"; }
: >"$OUT/run.log"
declare -A STATUS=()
section() {  # section NAME CAP_SECONDS COMMAND...: runs it under `timeout`, logs to $OUT/NAME.log
  local name=$1 cap=$2
  shift 2
  say "section $name (cap ${cap} s)"
  local t=$(date +%s)
  timeout --kill-after=5 "$cap" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  STATUS[$name]="$rc $(($(date +%s) - t))"
  say "section $name: exit $rc after $(($(date +%s) - t)) s"
  tail -5 "$OUT/$name.log" | sed 's/^/    /'
  return $rc
}

# ---- preflight (fail fast) -------------------------------------------------------------------
[[ -f "$BUNDLE_TAR" ]] || { say "no bundle at $BUNDLE_TAR (run tools/gpu_check/make_bundle.sh first)"; exit 4; }
mkdir -p "$DEST"
tar -C "$DEST" -xJf "$BUNDLE_TAR" || { say "cannot unpack $BUNDLE_TAR"; exit 4; }
B="$DEST/dd-bundle"
DD="$B/bin/dd-node"
# The CUDA runtime and cuBLAS come from this machine's toolkit.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
  [[ -d "$d" ]] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
export LD_LIBRARY_PATH
cat "$B/VERSION" | tee -a "$OUT/run.log"
need=$(sed -n 's/^needs GLIBC_\([0-9.]*\).*/\1/p' "$B/VERSION")
have=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
if [[ -n "$need" ]] && [[ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]]; then
  say "this machine's glibc $have is older than the bundle's $need"; exit 4
fi
unresolved=$(ldd "$DD" "$B/lib/libdd_backend_cuda.so" 2>&1 | grep 'not found' || true)
[[ -z "$unresolved" ]] || { say "unresolved libraries: $unresolved"; exit 4; }
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || { say "nvidia-smi failed: no driver or no device"; exit 3; }
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
GPU_MEM_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
say "device: $GPU_NAME, $GPU_MEM_MIB MiB; driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
"$DD" --version >>"$OUT/run.log" 2>&1 || true
TEXT="$B/data/input.txt"
PY=$(command -v python3)

# ---- ops -------------------------------------------------------------------------------------
ops_args=(--require-device --no-bench)
((QUICK)) && ops_args+=(--quick)
section ops $((QUICK ? 45 : 75)) "$B/bin/dd-gpu-check" "${ops_args[@]}"

# ---- loss agreement with the CPU curve --------------------------------------------------------
LOSS_STEPS=$((QUICK ? 60 : 200))
section loss $((QUICK ? 25 : 45)) "$DD" train --backend cuda --data "$TEXT" --steps "$LOSS_STEPS" \
  --seed 1337 --eval-every 0 --eval-batches 2 --log-every 50 --out "$OUT/loss-run"
section loss_compare 10 "$PY" "$ROOT/tools/gpu_check/device_report.py" compare-loss \
  --fixture "$ROOT/tests/fixtures/gpu/cpu_loss_200.csv" --run "$OUT/loss-run/loss.csv" \
  --steps "$LOSS_STEPS" --json "$OUT/loss.json"

# ---- the main job with learners on the GPU -----------------------------------------------------
JOB_STEPS=$((QUICK ? 100 : 300))
section job $((QUICK ? 30 : 60)) "$DD" run "$ROOT/examples/shakespeare.lua" \
  --set "data.file=\"$TEXT\"" --set 'learners.backend="cuda"' --set "budget.steps=$JOB_STEPS" \
  --run-dir "$OUT/job-run" --overwrite

# ---- speed: ours and the PyTorch twin at two shapes ---------------------------------------------
speed_shapes=(default gpt2-small)
((QUICK)) && speed_shapes=(gpt2-small)
for shape in "${speed_shapes[@]}"; do
  section "speed_$shape" $((QUICK ? 40 : 60)) "$PY" "$ROOT/tools/gpu_check/device_report.py" speed \
    --shape "$shape" --dd-node "$DD" --data "$TEXT" --gpu-mem-mib "$GPU_MEM_MIB" \
    --gpu-name "$GPU_NAME" --json "$OUT/speed_$shape.json" --work "$OUT/speed-$shape"
done

# ---- report -----------------------------------------------------------------------------------
status_json="{"
for k in "${!STATUS[@]}"; do
  read -r rc secs <<<"${STATUS[$k]}"
  status_json+="\"$k\": {\"exit\": $rc, \"seconds\": $secs},"
done
status_json="${status_json%,}}"
echo "$status_json" >"$OUT/sections.json"
"$PY" "$ROOT/tools/gpu_check/device_report.py" report --out "$OUT" --gpu-name "$GPU_NAME" ||
  say "the report could not be assembled"
say "done in $(($(date +%s) - T0)) s; report in $OUT/report.md"
failed=0
for k in "${!STATUS[@]}"; do [[ "${STATUS[$k]%% *}" == 0 ]] || failed=1; done
rm -rf "$DEST"
exit $failed
