// apps/dd_node/slurm_script.cpp — see slurm_script.hpp.
#include "apps/dd_node/slurm_script.hpp"

#include <fmt/format.h>

namespace dd::app {

std::vector<std::vector<int>> deal_learner_ids(int learners, int processes) {
  std::vector<std::vector<int>> out(static_cast<size_t>(processes > 0 ? processes : 0));
  for (int i = 0; i < learners && processes > 0; ++i)
    out[static_cast<size_t>(i % processes)].push_back(i);
  return out;
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                        "0123456789_-+=.,/:@%") == std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

namespace {

std::string words(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& w : v) out += (out.empty() ? "" : " ") + shell_quote(w);
  return out;
}

}  // namespace

std::string slurm_script(const slurm_script_options& o) {
  std::string ids;  // one word per learner process: its ids, comma-separated
  for (const auto& p : o.learner_ids) {
    std::string one;
    for (int i : p) one += (one.empty() ? "" : ",") + std::to_string(i);
    ids += (ids.empty() ? "" : " ") + one;
  }
  const size_t tasks = o.learner_ids.size() + 1;
  std::string s;
  s += "#!/bin/bash\n";
  s += fmt::format(
      "# A Decoupled DiLoCo cluster of experiment '{}' as one Slurm job, printed by\n"
      "#   dd-node launch --slurm --dry-run (docs/deploying.md \"Slurm\").\n",
      o.experiment_name);
  s += "# Submit: sbatch [-N NODES] [--time T] THIS_FILE. The syncer runs on the first node; the\n"
       "# learner processes, one step each, round-robin over all nodes. Every step is an\n"
       "# `srun --overlap` restarted in place by a retry loop (Slurm does not restart steps).\n";
  s += fmt::format("#SBATCH --job-name=dd-{}\n", o.experiment_name);
  s += fmt::format("#SBATCH --ntasks={}\n", tasks);
  s += "#SBATCH --open-mode=append\n";
  s += fmt::format("#SBATCH --signal=B:TERM@{}\n", o.signal_lead_s);
  s += "#SBATCH --requeue\n";
  s += "set -u\n\n";
  s += fmt::format("DD_NODE={}\n", shell_quote(o.dd_node));
  s += fmt::format("EXPERIMENT={}\n", shell_quote(o.experiment));
  s += fmt::format("RUN_DIR={}\n", shell_quote(o.run_dir));
  s += fmt::format("EXPERIMENT_FLAGS=({})\n", words(o.experiment_flags));
  s += fmt::format("NODE_FLAGS=({})\n", words(o.node_flags));
  s += fmt::format("LEARNER_IDS=({})   # one entry per learner process: its learner ids\n", ids);
  s += fmt::format("SYNCER_RESTART_DELAY={}\n", o.syncer_restart_delay_s);
  s += fmt::format("PROGRESS={}\n", o.progress_s);
  s += fmt::format("BACKOFF_CAP={}\n", o.learner_backoff_cap_s);
  if (o.tls) {
    std::string certs = "syncer operator";
    for (size_t k = 0; k < o.learner_ids.size(); ++k) {
      std::string names;
      for (int i : o.learner_ids[k])
        names += (names.empty() ? "" : ",") + fmt::format("learner-{}", i);
      certs += fmt::format(" learner-{}={}", k, names);
    }
    s += fmt::format(
        "CERTS=({})   # dd-node certs: the syncer's, the operator's, each learner step's\n", certs);
  }
  if (o.port != 0)
    s += fmt::format("PORT={}\n", o.port);
  else
    s += "PORT=$((20000 + SLURM_JOB_ID % 20000))   # a port of this job's own\n";
  s += R"SH(
CTL="$RUN_DIR/slurm"          # this job's control files, logs and learner run directories
mkdir -p "$CTL/logs" || exit 2
# The run's join token (docs/securing.md "The join token"): made once, in the run directory
# every node reads (mode 0600); a requeued job keeps it.
TOKEN="$RUN_DIR/join_token"
[[ -s "$TOKEN" ]] || (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TOKEN") || exit 2
# Mutual TLS (CERTS set): a CA and certificates in the run directory, made once; each step gets
# its own (node_security NAME). Without it the nodes run in the clear (--insecure).
TLS_DIR="$RUN_DIR/tls"
if [[ -n "${CERTS+x}" && ! -s "$TLS_DIR/ca.pem" ]]; then
  "$DD_NODE" certs "$TLS_DIR" "${CERTS[@]}" >/dev/null || exit 2
fi
node_security() {
  if [[ -n "${CERTS+x}" ]]; then
    SECURITY=(--tls-cert "$TLS_DIR/$1.pem" --tls-key "$TLS_DIR/$1.key" --tls-ca "$TLS_DIR/ca.pem")
  else
    SECURITY=(--insecure)
  fi
}
rm -f "$CTL/stopping" "$CTL/done" "$CTL"/*.step
mapfile -t HOSTS < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
SYNCER_HOST="${HOSTS[0]}"
echo "$SYNCER_HOST:$PORT" > "$CTL/syncer"   # the rendezvous file (learners use the same value)
say() { echo "[$(date -u +%FT%TZ)] dd-slurm: $*"; }
say "job $SLURM_JOB_ID (restart count ${SLURM_RESTART_COUNT:-0}) on ${HOSTS[*]}; syncer $SYNCER_HOST:$PORT"

# The run directory holds a run to continue: events and no summary.json, or a summary.json of
# an interrupted run (a stopped or preempted job).
holds_run() {
  [[ -e "$RUN_DIR/events.jsonl" || -e "$RUN_DIR/monitor.json" ]] || return 1
  [[ ! -e "$RUN_DIR/summary.json" ]] || grep -q '"interrupted": *true' "$RUN_DIR/summary.json"
}

# retry NAME HOST COMMAND... : runs COMMAND as a job step on HOST until it exits 0 or with a
# result the loop must not retry, the job is stopping, or it failed 10 times within 60 s.
# $retry_final holds the statuses that are results, $retry_delay the wait before a restart. The
# step writes its id to $CTL/NAME.step (signal it with scancel --signal=SIG JOB.STEP: signalling
# srun itself would make srun kill the step).
retry() {
  local name="$1" host="$2" starts=0 rc
  shift 2
  local -a recent=()
  while :; do
    starts=$((starts + 1))
    local args=("$@")
    [[ "$name" == syncer ]] && holds_run && args+=(--resume)
    say "$name: start $starts on $host"
    srun --overlap --nodes=1 --ntasks=1 --nodelist="$host" --job-name="$name" \
      bash -c 'echo "$SLURM_JOB_ID.$SLURM_STEP_ID" > "$0"; exec "$@"' "$CTL/$name.step" \
      "${args[@]}" >>"$CTL/logs/$name.log" 2>&1
    rc=$?
    rm -f "$CTL/$name.step"
    say "$name: step exited $rc"
    [[ $rc -eq 0 || -e "$CTL/stopping" || -e "$CTL/done" ]] && return $rc
    for f in $retry_final; do [[ $rc -eq $f ]] && say "$name: not restarted (a result)" && return $rc; done
    local now=$SECONDS
    recent+=("$now")
    local kept=()
    for t in "${recent[@]}"; do ((now - t < 60)) && kept+=("$t"); done
    recent=("${kept[@]}")
    if ((${#recent[@]} > 10)); then say "$name: 10 restarts within 60 s: left down"; return $rc; fi
    sleep "$retry_delay"
    say "$name: restarting"
  done
}

# signal_step NAME SIG: SIG to the running step NAME (no-op when none runs).
signal_step() {
  [[ -e "$CTL/$1.step" ]] && scancel --signal="$2" "$(cat "$CTL/$1.step")" 2>/dev/null
}

# SIGTERM to the batch shell (--signal ahead of the time limit, scancel --batch --signal=TERM):
# stop the syncer (it stops the learners and writes summary.json "interrupted"), then requeue.
stop_requested=0
on_term() {
  stop_requested=1
  touch "$CTL/stopping"
  say "SIGTERM: stopping the run"
  signal_step syncer TERM
}
trap on_term TERM

node_security syncer
(retry_final="1 2" retry_delay="$SYNCER_RESTART_DELAY" retry syncer "$SYNCER_HOST" \
  "$DD_NODE" syncer "$EXPERIMENT" --listen "0.0.0.0:$PORT" --advertise "$SYNCER_HOST:$PORT" \
  "${SECURITY[@]}" --join-token-file "$TOKEN" --run-dir "$RUN_DIR" --progress "$PROGRESS" \
  "${EXPERIMENT_FLAGS[@]}" "${NODE_FLAGS[@]}") &
syncer_loop=$!
learner_loops=()
for k in "${!LEARNER_IDS[@]}"; do
  host="${HOSTS[$((k % ${#HOSTS[@]}))]}"
  node_security "learner-$k"
  (retry_final="2 3 4 5 6 7" retry_delay=1 retry "learner-$k" "$host" \
    "$DD_NODE" learner --join "$SYNCER_HOST:$PORT" --learner-ids "${LEARNER_IDS[$k]}" \
    --node-name "slurm-learner-$k" --run-dir "$CTL/learner-$k" --backoff-cap "$BACKOFF_CAP" \
    "${SECURITY[@]}" --join-token-file "$TOKEN" --progress 0 "${NODE_FLAGS[@]}") &
  learner_loops+=($!)
done

# `wait` returns early when the trap runs; wait again until the syncer's loop is over.
while :; do
  wait "$syncer_loop"
  syncer_rc=$?
  kill -0 "$syncer_loop" 2>/dev/null || break
done
touch "$CTL/done"
say "the syncer's loop ended with $syncer_rc"
# Learners leave when the syncer ends the run; any still there after 30 s (at once when the job
# is stopping: a learner that lost its syncer waits for it) get SIGTERM and drain.
((stop_requested)) && for k in "${!LEARNER_IDS[@]}"; do signal_step "learner-$k" TERM; done
for _ in $(seq 30); do
  alive=0
  for p in "${learner_loops[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  ((alive)) || break
  sleep 1
done
for k in "${!LEARNER_IDS[@]}"; do signal_step "learner-$k" TERM; done
wait
rm -f "$CTL/done"
if ((stop_requested)) && holds_run; then
  say "the run is not over: requeueing job $SLURM_JOB_ID (the next start resumes it)"
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$syncer_rc"
)SH";
  return s;
}

}  // namespace dd::app
