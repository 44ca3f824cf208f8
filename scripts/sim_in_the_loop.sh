#!/usr/bin/env bash
# scripts/sim_in_the_loop.sh — the goodput simulator's prediction against a real cluster on the
# same failure trace (docs/goodput.md, "Simulation in the loop").
#
#   scripts/sim_in_the_loop.sh [BUILD_DIR] [OUT_DIR]
#
# For each cluster MTBF in $MTBFS (seconds between learner failures, whole cluster): dd-goodput
# --trace simulates one seeded Decoupled DiLoCo run of M = 4 learners (one slice each) for
# $SECONDS_RUN seconds and writes its failure trace as a dd-chaos scenario; `dd-node launch`
# runs the main job's model for the same seconds budget while `dd-chaos run` replays the trace
# (each failure: learner:g killed with SIGKILL and held down for its repair time, then restarted
# by the launcher). Prints one row per rate: failures, the simulator's goodput and uptime, the
# run's (summary.json), and the difference. Environment: MTBFS (default "30 60"), SECONDS_RUN
# (240), SEED (7, printed), RECOVERY_MEAN (8 s, lognormal, CV 0.5), RESTART (2 s: a learner
# process's start and join, the simulator's respawn cost), STEP (0.1 s, the inner step).
set -euo pipefail
build=${1:-build}
out=${2:-runs/sim-in-the-loop}
mtbfs=${MTBFS:-30 60}
secs=${SECONDS_RUN:-240}
seed=${SEED:-7}
recovery=${RECOVERY_MEAN:-8}
restart=${RESTART:-2}
step=${STEP:-0.1}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
echo "sim_in_the_loop: seed $seed, M = 4, ${secs} s per run, cluster MTBF: $mtbfs s"
rows=()
for mtbf in $mtbfs; do
  trace="$out/trace-mtbf$mtbf.lua"
  run="$out/run-mtbf$mtbf"
  # Per-chip MTBI = M x the cluster's MTBF (4 chips, one per learner).
  "$build/bin/dd-goodput" --trace "$trace" --chips 4 --slice-chips 1 --learners 4 \
    --seconds "$secs" --mtbi-seconds $((4 * mtbf)) --recovery-dist lognormal \
    --recovery-mean "$recovery" --recovery-cv 0.5 --restart "$restart" --restart-cold "$restart" \
    --step "$step" --seed "$seed"
  rm -rf "$run"
  "$build/bin/dd-node" launch "$here/examples/shakespeare.lua" --run-dir "$run" \
    --set "budget={seconds=$secs}" --set inner.decay_steps=2000 --set eval.every_seconds=0 \
    --progress 60 > "$out/launch-mtbf$mtbf.log" 2>&1 &
  launch=$!
  for _ in $(seq 600); do [[ -s "$run/nodes.json" ]] && break; sleep 0.1; done
  "$build/bin/dd-chaos" run "$trace" --run-dir "$run" > "$out/chaos-mtbf$mtbf.log" 2>&1 || true
  wait "$launch" || echo "sim_in_the_loop: dd-node launch exited $? (see $out/launch-mtbf$mtbf.log)"
  rows+=("$(python3 - "$trace.json" "$run/summary.json" "$mtbf" <<'PY'
import json, sys
sim = json.load(open(sys.argv[1]))
run = json.load(open(sys.argv[2]))
p = sim["predicted"]
print(f"{sys.argv[3]:>9} {sim['failures']:>8} {p['goodput']:>11.4f} {run['goodput']:>11.4f} "
      f"{run['goodput'] - p['goodput']:>+8.4f} {p['uptime']:>10.4f} {run['uptime']:>10.4f} "
      f"{run.get('learner_restarts', 0):>9}")
PY
)")
done
printf '\n%9s %8s %11s %11s %8s %10s %10s %9s\n' "mtbf_s" failures "sim_goodput" "run_goodput" \
  "diff" "sim_uptime" "run_uptime" restarts
printf '%s\n' "${rows[@]}"
