# tests/support/cluster.sh — shell helpers of the tests and scripts that start a small cluster
# (dd-node run / launch): the tiny experiment they run, a scratch directory that cleans up after
# the launcher, and a poll loop. Source it:
#   . "$src/tests/support/cluster.sh"

# tiny_experiment FILE DATA_FILE [KEY=VALUE ...]: writes to FILE the tiny GPT experiment these
# runs train (1 layer, width 32, 2 heads, context 32; batch 4, one thread a learner; 2 fragments,
# interval 4; warmup 5, decay over 2000 steps; 2 evaluation batches) on DATA_FILE. KEYs and their
# defaults: name=tiny learners=3 lr=1e-3 eval_every=1 (seconds, 0 = off) budget='seconds = 20'
# (the budget table's body) checkpoint_every=4 (versions). An unknown KEY is refused (status 2).
tiny_experiment() {
  local file=$1 data=$2
  shift 2
  local name=tiny learners=3 lr=1e-3 eval_every=1 budget='seconds = 20' checkpoint_every=4 kv
  for kv in "$@"; do
    case $kv in
      name=*) name=${kv#*=} ;;
      learners=*) learners=${kv#*=} ;;
      lr=*) lr=${kv#*=} ;;
      eval_every=*) eval_every=${kv#*=} ;;
      budget=*) budget=${kv#*=} ;;
      checkpoint_every=*) checkpoint_every=${kv#*=} ;;
      *)
        echo "tiny_experiment: unknown setting '$kv'" >&2
        return 2
        ;;
    esac
  done
  cat > "$file" << LUA
experiment {
  name = '$name',
  data = { file = '$data' },
  model = { layers = 1, width = 32, heads = 2, context = 32 },
  learners = { count = $learners, batch = 4, threads = 1 },
  sync = { fragments = 2, interval = 4 },
  inner = { lr = $lr, warmup = 5, decay_steps = 2000 },
  eval = { every_seconds = $eval_every, batches = 2 },
  budget = { $budget },
  checkpoint = { every_versions = $checkpoint_every },
}
LUA
}

# wait_until TENTHS COMMAND [ARG ...]: runs COMMAND every 0.1 s until it succeeds, at most TENTHS
# times; the status of its last run (0 once it succeeded).
wait_until() {
  local tries=$1 i
  shift
  for ((i = 1; i < tries; i++)); do
    "$@" && return 0
    sleep 0.1
  done
  "$@"
}

# enter_scratch_dir: makes a temporary directory ($tmp) and changes into it; on exit the process
# $launch_pid (when the caller has set it) is stopped and waited for, and the directory removed.
enter_scratch_dir() {
  tmp=$(mktemp -d)
  launch_pid=
  trap scratch_dir_cleanup EXIT
  cd "$tmp"
}
scratch_dir_cleanup() {
  [ -n "$launch_pid" ] && kill "$launch_pid" 2>/dev/null && wait "$launch_pid" 2>/dev/null
  rm -rf "$tmp"
}
