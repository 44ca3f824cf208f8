#!/usr/bin/env bash
# tests/cluster/slurm_cluster_test.sh — a cluster started by the sbatch file of
# `dd-node launch --slurm --dry-run` under a real single-node Slurm (Debian's slurm-wlm, munge),
# configured and started here and stopped on exit.
#
#   usage: slurm_cluster_test.sh DD_NODE DATA_DIR [WORK_DIR]
#     DD_NODE   the dd-node binary
#     DATA_DIR  the shared data folder (holds tinyshakespeare/input.txt)
#     WORK_DIR  where Slurm's and the runs' files go (emptied first; default: a fresh mktemp
#               directory, removed when the test passes)
#
# Slurm here: munged, slurmctld and slurmd as root on this host with their own ports, sockets
# and state under WORK_DIR; ProctrackType=proctrack/linuxproc and TaskPlugin=task/none (no
# cgroup plugins: these machines have cgroup v1 with cpu and freezer only); the node declared
# with 8 CPUs (SlurmdParameters=config_overrides) so the job's 5 tasks fit on 2 cores; every step
# `srun --overlap`; AuthInfo cred_expire=10, so a requeued job starts again after about 10 s
# instead of 120.
#
# Asserts:
#   dry run: exit 0, `bash -n` accepts the script, it holds --signal=B:TERM@120, --requeue,
#     --ntasks=5 and the learner ids 0 1 2 3; --slurm without --dry-run exits 2.
#   job A (4 learners, tiny model, 3000 steps each): learner 2's step is killed with
#     `scancel --signal=KILL JOB.STEP` after learner 2 has stepped; its retry loop starts it
#     again in place (job output: "learner-2: step exited 137", "learner-2: start 2"); the job
#     ends with ExitCode 0:0; summary.json: not failed, not interrupted, tokens = 4 x 3000 x 4 x
#     32 (every learner's whole budget), learner_restarts >= 1; the syncer's events hold two
#     node_join of slurm-learner-2.
#   job B (preemption): SIGTERM to the batch shell (`scancel --batch --signal=TERM`, what
#     --signal=B:TERM@120 sends ahead of the time limit) after the learners have stepped: the
#     syncer stops the run (summary.json "interrupted"), the job requeues itself, the requeued
#     job (SLURM_RESTART_COUNT 1) resumes the run (syncer_incarnation 2) to its whole budget;
#     scontrol shows Restarts=1, ExitCode 0:0.
# Needs root, slurm-wlm and munge (scripts/setup.sh installs them); it never skips.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../support/cluster.sh"

dd_node="$(realpath -e "$1" 2>/dev/null)" || { echo "FAIL: dd-node '$1' not found" >&2; exit 1; }
data_dir="$2"
work="${3:-}"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
for t in munged slurmctld slurmd sbatch srun scontrol squeue scancel sinfo python3; do
  command -v "$t" >/dev/null || fail "$t not found (apt-get install slurm-wlm munge)"
done
[[ $(id -u) -eq 0 ]] || fail "needs root (slurmd runs as root)"
[[ -x "$dd_node" ]] || fail "dd-node '$dd_node' is not executable"
data_file="$(realpath -e "$data_dir/tinyshakespeare/input.txt" 2>/dev/null)" ||
  fail "data file not found: $data_dir/tinyshakespeare/input.txt"
keep_work=1
if [[ -z "$work" ]]; then
  work="$(mktemp -d)"
  keep_work=0
fi
rm -rf "$work" && mkdir -p "$work/state" "$work/spool" || fail "cannot make $work"
chmod 755 "$work"
export SLURM_CONF="$work/slurm.conf"
passed=0

# shellcheck source=tests/support/local_slurm.sh
source "$(dirname "$0")/../support/local_slurm.sh"
stop_slurm() {
  local_slurm_stop "$work"
  if ((passed && !keep_work)); then rm -rf "$work"; fi
}
trap stop_slurm EXIT
local_slurm_start "$work"

tiny_experiment "$work/tiny.lua" "$data_file" name=slurm_tiny learners=4 lr=3e-3 eval_every=0 \
  budget='steps = 3000' checkpoint_every=1
readonly want_tokens=$((4 * 3000 * 4 * 32))

# --- dry run -----------------------------------------------------------------------------------
(cd "$work" && "$dd_node" launch --slurm tiny.lua) >/dev/null 2>"$work/no_dry_run.err"
[[ $? -eq 2 ]] || fail "--slurm without --dry-run must exit 2"
grep -q -- '--slurm and --dry-run go together' "$work/no_dry_run.err" ||
  fail "--slurm without --dry-run: $(cat "$work/no_dry_run.err")"
make_script() {  # make_script RUN_DIR OUT
  (cd "$work" && "$dd_node" launch --slurm --dry-run tiny.lua --run-dir "$1" --heartbeat 0.2 \
    --connection-timeout 2 --progress 0) >"$2" || fail "dry run exited $?"
  bash -n "$2" || fail "bash -n refuses $2"
  local want
  for want in '#SBATCH --signal=B:TERM@120' '#SBATCH --requeue' '#SBATCH --ntasks=5' \
    'LEARNER_IDS=(0 1 2 3)'; do
    grep -qF -- "$want" "$2" || fail "the script lacks '$want'"
  done
}

# wait_job JOB SECONDS: until the job has left the queue (0) or SECONDS passed (1).
wait_job() {
  local end=$((SECONDS + $2))
  while ((SECONDS < end)); do
    [[ -z "$(squeue -h -j "$1" 2>/dev/null)" ]] && return 0
    sleep 0.5
  done
  return 1
}
# wait_steps RUN_DIR LEARNER STEP SECONDS: until learner_loss.csv has LEARNER at STEP or more.
wait_steps() {
  local end=$((SECONDS + $4))
  while ((SECONDS < end)); do
    [[ -f "$1/learner_loss.csv" ]] &&
      awk -F, -v l="$2" -v s="$3" '$2 == l && $4 >= s { found = 1 } END { exit !found }' \
        "$1/learner_loss.csv" && return 0
    sleep 0.1
  done
  return 1
}
summary_field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]))" "$1" "$2"; }

check_summary() {  # check_summary RUN_DIR
  [[ -f "$1/summary.json" ]] || fail "no summary.json in $1"
  [[ "$(summary_field "$1/summary.json" failed)" != True ]] || fail "the run failed"
  [[ "$(summary_field "$1/summary.json" interrupted)" != True ]] || fail "the run was interrupted"
  local tokens
  tokens="$(summary_field "$1/summary.json" tokens)"
  [[ "$tokens" == "$want_tokens" ]] || fail "tokens $tokens, want $want_tokens (every budget)"
}

# --- job A: a learner's step killed ----------------------------------------------------------
t0=$SECONDS
make_script "$work/runA" "$work/jobA.sh"
jobA="$(sbatch --parsable --chdir="$work" -o "$work/jobA.out" "$work/jobA.sh")" || fail "sbatch A"
echo "job A: $jobA"
wait_steps "$work/runA" 2 20 60 || fail "learner 2 did not step: $(cat "$work/jobA.out")"
step="$(cat "$work/runA/slurm/learner-2.step" 2>/dev/null)"
[[ "$step" == "$jobA".* ]] || fail "no step id for learner-2 ('$step')"
scancel --signal=KILL "$step" || fail "scancel --signal=KILL $step"
echo "killed step $step (learner-2)"
wait_job "$jobA" 120 || fail "job A did not end: $(cat "$work/jobA.out")"
cat "$work/jobA.out"
grep -q 'learner-2: step exited 137' "$work/jobA.out" || fail "learner-2's step did not die by KILL"
grep -q 'learner-2: start 2' "$work/jobA.out" || fail "learner-2 was not restarted"
exitA="$(scontrol show job "$jobA" | grep -o 'ExitCode=[^ ]*')"
[[ "$exitA" == "ExitCode=0:0" ]] || fail "job A: $exitA"
check_summary "$work/runA"
restarts="$(summary_field "$work/runA/summary.json" learner_restarts)"
((restarts >= 1)) || fail "learner_restarts $restarts"
joins="$(grep '"node_join"' "$work/runA/events.jsonl" | grep -c '"slurm-learner-2"')"
[[ $joins -eq 2 ]] || fail "slurm-learner-2 joined $joins times, want 2"
echo "job A: $((SECONDS - t0)) s, $exitA, learner_restarts $restarts, learner-2 joined $joins times"

# --- job B: preempted (SIGTERM to the batch shell), requeued, resumed -------------------------
t0=$SECONDS
make_script "$work/runB" "$work/jobB.sh"
jobB="$(sbatch --parsable --chdir="$work" -o "$work/jobB.out" "$work/jobB.sh")" || fail "sbatch B"
echo "job B: $jobB"
wait_steps "$work/runB" 0 20 60 || fail "learner 0 did not step: $(cat "$work/jobB.out")"
scancel --batch --signal=TERM "$jobB" || fail "scancel --batch --signal=TERM $jobB"
wait_job "$jobB" 150 || fail "job B did not end: $(cat "$work/jobB.out")"
cat "$work/jobB.out"
grep -q 'requeueing job' "$work/jobB.out" || fail "job B did not requeue itself"
grep -q "job $jobB (restart count 1)" "$work/jobB.out" || fail "job B did not start again"
info="$(scontrol show job "$jobB")"
grep -q 'Restarts=1 ' <<<"$info" || fail "job B: $(grep -o 'Restarts=[^ ]*' <<<"$info")"
exitB="$(grep -o 'ExitCode=[^ ]*' <<<"$info")"
[[ "$exitB" == "ExitCode=0:0" ]] || fail "job B: $exitB"
check_summary "$work/runB"
[[ "$(cat "$work/runB/syncer_incarnation")" == 2 ]] ||
  fail "syncer_incarnation $(cat "$work/runB/syncer_incarnation"), want 2 (one resume)"
echo "job B: $((SECONDS - t0)) s, Restarts=1, $exitB, resumed once"
passed=1
echo "PASS"
