#!/usr/bin/env bash
# scripts/slurm_main_job.sh — the main job (examples/shakespeare.lua: 4 learners) started by the
# sbatch file `dd-node launch --slurm --dry-run` prints, under a local single-node Slurm (Debian's
# slurm-wlm and munge, configured and started under WORK and stopped on exit, as the Slurm test
# does: tests/support/local_slurm.sh). Prints the job's state and the run's summary.
#
#   scripts/slurm_main_job.sh [BUILD_DIR] [WORK_DIR] [--set key=value ...]
#
# Needs root. WORK_DIR (default a fresh mktemp directory) is emptied first and kept; the run
# directory is WORK_DIR/run. Extra arguments go to `dd-node launch` (e.g. a smaller budget).
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$(realpath "${1:-build}")"
work="${2:-$(mktemp -d)}"
shift $(($# >= 2 ? 2 : $#))
fail() {
  echo "slurm_main_job: $*" >&2
  exit 1
}
[[ $(id -u) -eq 0 ]] || fail "needs root (slurmd runs as root)"
data_file="$(realpath -e "$here/datasets/tinyshakespeare/input.txt" 2>/dev/null ||
  realpath -e "$here/data/tinyshakespeare/input.txt" 2>/dev/null)" ||
  fail "Tiny Shakespeare not found beside the checkout"
rm -rf "$work" && mkdir -p "$work/state" "$work/spool" || fail "cannot make $work"
chmod 755 "$work"
work="$(realpath "$work")"
export SLURM_CONF="$work/slurm.conf"
# shellcheck source=tests/support/local_slurm.sh
source "$here/tests/support/local_slurm.sh"
trap 'local_slurm_stop "$work"' EXIT
local_slurm_start "$work"
(cd "$work" && "$build/bin/dd-node" launch --slurm --dry-run "$here/examples/shakespeare.lua" \
  --run-dir "$work/run" --progress 60 --set "data.file=\"$data_file\"" "$@") >"$work/job.sh" ||
  fail "the dry run failed"
t0=$SECONDS
job="$(sbatch --parsable --chdir="$work" -o "$work/job.out" "$work/job.sh")" || fail "sbatch"
echo "slurm_main_job: job $job, output $work/job.out"
while [[ -n "$(squeue -h -j "$job" 2>/dev/null)" ]]; do sleep 5; done
echo "slurm_main_job: job $job ended after $((SECONDS - t0)) s: $(scontrol show job "$job" |
  grep -o 'ExitCode=[^ ]*')"
[[ -f "$work/run/summary.json" ]] || fail "no summary.json: $(tail -20 "$work/job.out")"
python3 - "$work/run/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
fe = s.get("final_eval", {})
print(f"final_val_loss {s['final_val_loss']:.4f} on {fe.get('windows')} windows "
      f"(covers the split: {fe.get('covers_split')}), tokens {s['tokens']}, goodput "
      f"{s['goodput']:.3f}, uptime {s['uptime']:.3f}, merges {s['merges']}, contributors per "
      f"merge {s['mean_contributors_per_merge']:.2f}, learner restarts {s['learner_restarts']}")
PY
