#!/usr/bin/env bash
# scripts/links_under_load.sh — counts the links a cluster loses on a loaded host with no fault
# injected (docs/cluster.md "Under load", docs/benchmarks-transport.md "Links under load").
#
# Runs a tiny `dd-node launch` (1-layer GPT, 3 learner processes, checkpoints every version, a
# `seconds` budget) at nice $NICE inside a cgroup-v1 cpu group limited to QUOTA percent of one
# CPU, together with BUSY nice-0 busy loops in the same group, and prints how often the learner
# nodes lost the syncer ("lost the syncer" lines in logs/learner-*.log) and how many learner
# `failure` events the syncer logged. The group bounds the whole experiment's CPU, so the rest
# of the host is not loaded by it. Deterministic apart from the scheduler (no seed).
#
# Needs root (it makes /sys/fs/cgroup/cpu/ddlinks_<pid>) and a built dd-node.
# Usage: scripts/links_under_load.sh OUT_DIR QUOTA_PERCENT BUSY SECONDS [dd-node launch flags]
#   e.g. NICE=15 scripts/links_under_load.sh /tmp/links 100 4 45 --heartbeat 0.5 --connection-timeout 3
# Environment: NICE (default 15), DD_NODE (default build/bin/dd-node),
#   DD_DATA (default the repository's datasets/).
set -u
if (($# < 4)); then
  sed -n '2,17p' "$0" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$here/tests/support/cluster.sh"
out=$1 quota=$2 busy=$3 secs=$4
shift 4
bin="${DD_NODE:-$here/build/bin/dd-node}"
data="${DD_DATA:-$here/datasets}"
cg=/sys/fs/cgroup/cpu/ddlinks_$$
rm -rf "$out"
mkdir -p "$out"
tiny_experiment "$out/tiny.lua" "$data/tinyshakespeare/input.txt" lr=3e-3 eval_every=0 \
  budget="seconds = $secs" checkpoint_every=1
mkdir "$cg" || exit 1
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  echo $$ >/sys/fs/cgroup/cpu/cgroup.procs
  rmdir "$cg"
}
pids=()
trap cleanup EXIT
echo 100000 >"$cg/cpu.cfs_period_us"
echo $((quota * 1000)) >"$cg/cpu.cfs_quota_us"
echo $$ >"$cg/cgroup.procs"
for _ in $(seq 1 "$busy"); do
  (while :; do :; done) &
  pids+=($!)
done
cd "$out" || exit 1
start=$(date +%s.%N)
timeout $((secs + 180)) nice -n "${NICE:-15}" "$bin" launch tiny.lua --run-dir run --progress 0 "$@" \
  >launch.out 2>&1
rc=$?
end=$(date +%s.%N)
lost=$(cat run/logs/learner-*.log 2>/dev/null | grep -c "lost the syncer")
fail=$(grep -c '"event":"failure"' run/events.jsonl 2>/dev/null)
printf 'quota=%s%% busy=%s nice=%s secs=%s flags=[%s] rc=%s wall=%.1f lost_syncer=%s syncer_failures=%s\n' \
  "$quota" "$busy" "${NICE:-15}" "$secs" "$*" "$rc" "$(echo "$end - $start" | bc)" "$lost" "$fail"
