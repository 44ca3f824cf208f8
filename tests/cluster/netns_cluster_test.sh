#!/usr/bin/env bash
# tests/cluster/netns_cluster_test.sh — a three-host cluster on one machine: every node in its
# own network namespace, joined by a Linux bridge, on the reserved test subnet 198.18.0.0/24.
#
#   usage: netns_cluster_test.sh DD_NODE DATA_DIR [WORK_DIR]
#     DD_NODE   the dd-node binary
#     DATA_DIR  the shared data folder (holds tinyshakespeare/input.txt)
#     WORK_DIR  where the experiment file, run directories and logs go (emptied first;
#               default: a fresh mktemp directory, removed when the test passes)
#
# Needs root (network namespaces), iproute2 (`ip`) and util-linux (`unshare`). It never skips:
# a missing tool or permission is a failure with the reason.
#
# Topology (the names carry this shell's PID, so concurrent runs do not collide):
#   ddnt<PID>-sw    the switch: bridge br0 and the host side of every veth pair
#   ddnt<PID>-syn   198.18.0.1   dd-node syncer     (UTS hostname dd-syncer)
#   ddnt<PID>-la    198.18.0.2   dd-node learner 0  (UTS hostname dd-host-a)
#   ddnt<PID>-lb    198.18.0.3   dd-node learner 1  (UTS hostname dd-host-b)
#   ddnt<PID>-lx    198.18.0.4   a learner told to join 198.18.0.9 (nobody): must exit 6
# No namespace has a default route; nothing is added to the root namespace. Everything is
# removed on exit (trap), and leftovers of earlier runs (owner PID gone) are removed at start.
#
# Asserts: the syncer exits 0; summary.json has tokens > 0 and merges > 0; the syncer's
# events.jsonl has one node_join per learner node with its node name, its namespace's hostname
# and its learner id, and merges hold contributions of both learners; both learners exit 0 and
# log node_start / node_done status 0; no host namespace has a route out of the subnet (no
# default route, IPv4 or IPv6; 1.1.1.1 and the root namespace's own addresses unroutable; a TCP
# connect out fails as unreachable); the learner joining the wrong address exits 6 within 15 s
# and never reaches the syncer.
set -uo pipefail

readonly PREFIX=ddnt
readonly TAG="${PREFIX}$$"
readonly SUBNET=198.18.0
readonly PORT=29500
readonly SYNCER_TIMEOUT=120    # seconds for the whole run (it takes a few seconds)
readonly NEG_LIMIT_MS=15000    # the lost learner must give up within this

started=()        # PIDs of the processes this script started
namespaces=()     # namespaces this script created
workdir=""
keep_workdir=1
t0_ms=$(date +%s%3N)

log() { printf '[netns-test %5.1fs] %s\n' "$(( $(date +%s%3N) - t0_ms ))e-3" "$*"; }
# `... | has PATTERN`: does stdin hold a line matching PATTERN? (Reads all of it: `grep -q` would
# quit early and, under pipefail, turn the writer's SIGPIPE into a failed pipeline.)
has() { grep -c -- "$1" > /dev/null; }
fail() {
  printf 'FAIL: %s\n' "$*" >&2
  show_logs
  exit 1
}
show_logs() {
  [[ -n "$workdir" && -d "$workdir" ]] || return 0
  local f
  for f in "$workdir"/*.out "$workdir"/*.err; do
    [[ -s "$f" ]] || continue
    printf -- '--- %s (last 20 lines)\n' "$f" >&2
    tail -n 20 "$f" >&2
  done
}

# ---------------------------------------------------------------------------------------------
# Cleanup: our processes (by PID), then our namespaces (with anything still inside them).

kill_ns_pids() {   # kill_ns_pids NS: the processes left inside NS (this test's, or an earlier run's)
  local ns="$1" pids
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  [[ -n "${pids// /}" ]] || return 0
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null
  sleep 0.5
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  # shellcheck disable=SC2086
  [[ -n "${pids// /}" ]] && kill -KILL $pids 2>/dev/null
  return 0
}

# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
  local rc=$? pid ns
  trap - EXIT INT TERM
  for pid in "${started[@]}"; do
    kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null
  done
  for pid in "${started[@]}"; do
    wait "$pid" 2>/dev/null
  done
  for ns in "${namespaces[@]}"; do
    kill_ns_pids "$ns"
    ip netns del "$ns" 2>/dev/null
  done
  if ((rc == 0 && keep_workdir == 0)); then
    rm -rf "$workdir"
  elif [[ -n "$workdir" ]]; then
    echo "netns-test: logs and run directories kept in $workdir" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Leftovers of earlier runs: namespaces named ddnt<PID>-* whose PID is not a live run of this
# script (a run killed with SIGKILL cannot clean up after itself).
remove_leftovers() {
  local ns owner
  while read -r ns _; do
    [[ "$ns" =~ ^${PREFIX}([0-9]+)- ]] || continue
    owner="${BASH_REMATCH[1]}"
    if [[ "$owner" != "$$" && -r "/proc/$owner/cmdline" ]] &&
       tr '\0' ' ' < "/proc/$owner/cmdline" | has 'netns_cluster_test'; then
      continue   # a concurrent run's namespace
    fi
    log "removing leftover namespace $ns"
    kill_ns_pids "$ns"
    ip netns del "$ns" 2>/dev/null || fail "cannot remove leftover namespace $ns"
  done < <(ip netns list 2>/dev/null)
}

# ---------------------------------------------------------------------------------------------
# Arguments and prerequisites (fail, never skip).

(($# >= 2 && $# <= 3)) || { echo "usage: $0 DD_NODE DATA_DIR [WORK_DIR]" >&2; exit 2; }
dd_node="$(realpath -e "$1" 2>/dev/null)" || fail "dd-node binary not found: $1"
[[ -x "$dd_node" ]] || fail "dd-node is not executable: $dd_node"
data_file="$(realpath -e "$2/tinyshakespeare/input.txt" 2>/dev/null)" ||
  fail "data file not found: $2/tinyshakespeare/input.txt"
command -v ip >/dev/null 2>&1 ||
  fail "'ip' not found: this test needs iproute2 (apt-get install iproute2; scripts/setup.sh installs it)"
command -v unshare >/dev/null 2>&1 ||
  fail "'unshare' not found: this test needs util-linux"
[[ $(id -u) -eq 0 ]] ||
  fail "this test must run as root (it creates network namespaces); it never skips"

if (($# == 3)); then
  workdir="$3"
  [[ -n "$workdir" && "$(realpath -m "$workdir")" != / ]] || fail "refusing WORK_DIR '$workdir'"
  { rm -rf "$workdir" && mkdir -p "$workdir"; } || fail "cannot create $workdir"
else
  workdir="$(mktemp -d /tmp/netns_cluster.XXXXXX)" || fail "mktemp failed"
  keep_workdir=0
fi
workdir="$(realpath "$workdir")"

remove_leftovers

# ---------------------------------------------------------------------------------------------
# The network.

add_ns() {
  ip netns add "$1" || fail "ip netns add $1 failed (root with CAP_SYS_ADMIN needed)"
  namespaces+=("$1")
  ip -n "$1" link set lo up || fail "lo up in $1"
}

readonly NS_SW="$TAG-sw" NS_SYN="$TAG-syn" NS_LA="$TAG-la" NS_LB="$TAG-lb" NS_LX="$TAG-lx"
add_ns "$NS_SW"
ip -n "$NS_SW" link add br0 type bridge || fail "cannot create a bridge in $NS_SW"
ip -n "$NS_SW" link set br0 up || fail "br0 up"

host_index=0
add_host() {   # add_host NS ADDRESS: a namespace with eth0 = ADDRESS/24, its peer on br0
  local ns="$1" addr="$2" port
  host_index=$((host_index + 1))
  port="p$host_index"
  add_ns "$ns"
  ip -n "$NS_SW" link add "$port" type veth peer name eth0 netns "$ns" ||
    fail "cannot create the veth pair $port <-> $ns/eth0"
  ip -n "$NS_SW" link set "$port" master br0 || fail "$port -> br0"
  ip -n "$NS_SW" link set "$port" up || fail "$port up"
  ip -n "$ns" addr add "$addr/24" dev eth0 || fail "address $addr in $ns"
  ip -n "$ns" link set eth0 up || fail "eth0 up in $ns"
}
add_host "$NS_SYN" "$SUBNET.1"
add_host "$NS_LA" "$SUBNET.2"
add_host "$NS_LB" "$SUBNET.3"
add_host "$NS_LX" "$SUBNET.4"
log "namespaces: ${namespaces[*]}"

# No way out of the subnet from any host namespace.
root_addrs=$(ip -o -4 addr show scope global 2>/dev/null | awk '{split($4, a, "/"); print a[1]}')
check_isolated() {
  local ns="$1" routes line a out
  routes=$(ip -n "$ns" -4 route show)
  [[ -n "$routes" ]] || fail "$ns has no IPv4 route at all"
  while read -r line; do
    [[ "$line" == "$SUBNET.0/24 "* ]] || fail "$ns has a route outside $SUBNET.0/24: '$line'"
  done <<< "$routes"
  ip -n "$ns" -6 route show | has '^default' && fail "$ns has an IPv6 default route"
  out=$(ip -n "$ns" route get 1.1.1.1 2>&1) && fail "$ns can route to 1.1.1.1: $out"
  [[ "$out" == *"unreachable"* ]] || fail "$ns: unexpected answer for 1.1.1.1: $out"
  for a in $root_addrs; do
    [[ "$a" == "$SUBNET".* ]] && continue
    out=$(ip -n "$ns" route get "$a" 2>&1) && fail "$ns can route to the root namespace's $a: $out"
  done
  out=$(ip netns exec "$ns" timeout 5 bash -c 'exec 3<>/dev/tcp/1.1.1.1/53' 2>&1) &&
    fail "$ns opened a TCP connection to 1.1.1.1:53"
  [[ "$out" == *"unreachable"* ]] || fail "$ns: a TCP connect to 1.1.1.1:53 did not fail as unreachable: $out"
}
for ns in "$NS_SYN" "$NS_LA" "$NS_LB" "$NS_LX"; do check_isolated "$ns"; done
log "no namespace has a route out of $SUBNET.0/24: $(ip -n "$NS_LA" route show | tr -s ' ')"

# ---------------------------------------------------------------------------------------------
# The experiment and the nodes.

cat > "$workdir/tiny.lua" <<EOF
experiment {
  name = "netns_tiny",
  data = { file = "$data_file" },
  model = { layers = 1, width = 32, heads = 2, context = 32 },
  learners = { count = 2, batch = 4 },
  sync = { fragments = 2, interval = 4 },
  inner = { decay_steps = 1000 },
  eval = { every_seconds = 0, batches = 2 },
  budget = { steps = 200 },
  checkpoint = { every_versions = 1 },
}
EOF

# in_host NS HOSTNAME TAG CMD...: run CMD in NS with its own UTS hostname, output to TAG.out/.err,
# in the background; sets $last_pid (the dd-node process itself: ip netns exec, unshare and sh exec).
in_host() {
  local ns="$1" host="$2" tag="$3"
  shift 3
  # shellcheck disable=SC2016  # $0 and $@ are the inner shell's
  ip netns exec "$ns" unshare --uts sh -c \
    'echo "$0" > /proc/sys/kernel/hostname && shift && exec "$@"' "$host" - "$@" \
    > "$workdir/$tag.out" 2> "$workdir/$tag.err" &
  last_pid=$!
  started+=("$last_pid")
}

# wait_exit PID SECONDS: the exit status of PID, or fails when it runs longer than SECONDS.
wait_exit() {
  local pid="$1" limit_ms=$(($2 * 1000)) t
  t=$(date +%s%3N)
  while kill -0 "$pid" 2>/dev/null; do
    (($(date +%s%3N) - t > limit_ms)) && { exit_status=-1; return; }
    sleep 0.1
  done
  wait "$pid"
  exit_status=$?
}

in_host "$NS_SYN" dd-syncer syncer "$dd_node" syncer "$workdir/tiny.lua" \
  --listen "$SUBNET.1:$PORT" --insecure --advertise "$SUBNET.1:$PORT" \
  --run-dir "$workdir/syncer" --progress 0
syncer_pid=$last_pid
for _ in $(seq 1 200); do   # up to 20 s for it to listen
  grep -q "listening on $SUBNET.1:$PORT" "$workdir/syncer.out" 2>/dev/null && break
  kill -0 "$syncer_pid" 2>/dev/null || break
  sleep 0.1
done
grep -q "listening on $SUBNET.1:$PORT" "$workdir/syncer.out" 2>/dev/null ||
  fail "the syncer is not listening on $SUBNET.1:$PORT"
log "syncer listening on $SUBNET.1:$PORT (pid $syncer_pid)"

# The lost learner first (it waits out its 5 s deadline while the cluster runs).
neg_t0=$(date +%s%3N)
in_host "$NS_LX" dd-host-x lost "$dd_node" learner --join "$SUBNET.9:$PORT" --join-deadline 5 --insecure \
  --node-name dd-learner-lost --run-dir "$workdir/lost" --threads 1 --progress 0
lost_pid=$last_pid

in_host "$NS_LA" dd-host-a learner_a "$dd_node" learner --join "$SUBNET.1:$PORT" --learner-ids 0 --insecure \
  --node-name dd-learner-a --run-dir "$workdir/learner_a" --threads 1 --join-deadline 60 --progress 0
la_pid=$last_pid
in_host "$NS_LB" dd-host-b learner_b "$dd_node" learner --join "$SUBNET.1:$PORT" --learner-ids 1 --insecure \
  --node-name dd-learner-b --run-dir "$workdir/learner_b" --threads 1 --join-deadline 60 --progress 0
lb_pid=$last_pid

wait_exit "$syncer_pid" "$SYNCER_TIMEOUT"
((exit_status == 0)) || fail "the syncer exited with $exit_status (-1: still running after ${SYNCER_TIMEOUT} s), expected 0"
log "syncer exited 0"
for who in a b; do
  if [[ $who == a ]]; then pid=$la_pid; else pid=$lb_pid; fi
  wait_exit "$pid" 30
  ((exit_status == 0)) || fail "learner $who exited with $exit_status (-1: still running 30 s after the syncer), expected 0"
done
log "both learners exited 0"
wait_exit "$lost_pid" 20
neg_ms=$(($(date +%s%3N) - neg_t0))
((exit_status == 6)) || fail "the learner joining $SUBNET.9 exited with $exit_status after ${neg_ms} ms, expected 6 (no syncer within --join-deadline)"
((neg_ms <= NEG_LIMIT_MS)) || fail "the learner joining $SUBNET.9 took ${neg_ms} ms to give up (limit $NEG_LIMIT_MS)"
log "the learner joining $SUBNET.9 exited 6 after ${neg_ms} ms"

# ---------------------------------------------------------------------------------------------
# Results.

summary="$workdir/syncer/summary.json"
events="$workdir/syncer/events.jsonl"
[[ -s "$summary" ]] || fail "no $summary"
[[ -s "$events" ]] || fail "no $events"
json_int() {   # json_int FILE KEY: the integer value of a top-level numeric key, or empty
  grep -o -m 1 "\"$2\": *[0-9][0-9]*" "$1" | sed 's/.*: *//'
}
tokens=$(json_int "$summary" tokens)
merges=$(json_int "$summary" merges)
[[ -n "$tokens" && "$tokens" -gt 0 ]] || fail "summary.json: tokens = '$tokens', expected > 0"
[[ -n "$merges" && "$merges" -gt 0 ]] || fail "summary.json: merges = '$merges', expected > 0"
grep -q '"failed": *true' "$summary" && fail "summary.json says failed"
log "summary.json: tokens $tokens, merges $merges"

# node_join: one per learner node, with its node name, its namespace's hostname, its learner id.
check_join() {
  local node="$1" host="$2" id="$3" line
  line=$(grep '"event":"node_join"' "$events" | grep "\"node\":\"$node\"")
  [[ -n "$line" ]] || fail "no node_join for $node in $events"
  (($(grep -c . <<< "$line") == 1)) || fail "more than one node_join for $node: $line"
  [[ "$line" == *"\"host\":\"$host\""* ]] || fail "node_join of $node is not from host $host: $line"
  [[ "$line" == *"\"learners\":[$id]"* ]] || fail "node_join of $node does not hold learner $id: $line"
}
check_join dd-learner-a dd-host-a 0
check_join dd-learner-b dd-host-b 1
# Both learners' pushes were merged (each appears among the contributors of some merge).
for id in 0 1; do
  grep '"event":"merge"' "$events" | has "\"learner\":$id," ||
    fail "no merge has a contribution of learner $id"
done
grep -q 'dd-learner-lost' "$events" && fail "the learner joining $SUBNET.9 reached the syncer"
grep -q '"event":"node_refused"' "$events" && fail "the syncer refused a node: $(grep node_refused "$events")"
log "node_join from dd-learner-a@dd-host-a (learner 0) and dd-learner-b@dd-host-b (learner 1)"

for who in a b; do
  ev="$workdir/learner_$who/events.jsonl"
  [[ -s "$ev" ]] || fail "no $ev"
  grep '"event":"node_start"' "$ev" | has "\"node\":\"dd-learner-$who\"" ||
    fail "no node_start of dd-learner-$who in $ev"
  grep '"event":"node_done"' "$ev" | has '"status":0' ||
    fail "no node_done with status 0 in $ev: $(grep node_done "$ev")"
done
grep -q "$SUBNET.9" "$workdir/lost.out" "$workdir/lost.err" ||
  fail "the lost learner's output does not name $SUBNET.9"

log "PASS ($(( ($(date +%s%3N) - t0_ms) / 1000 )) s)"
exit 0
