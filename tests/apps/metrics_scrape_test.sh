#!/usr/bin/env bash
# tests/apps/metrics_scrape_test.sh — every node kind's /metrics, scraped from real processes
# (ctest metrics_scrape_test, labels "apps;cluster"):
#   * `dd-node run --http`: /metrics accepted by `promtool check metrics` (Debian's prometheus),
#     /healthz, /readyz, /status;
#   * a `dd-node launch` cluster (3 learner processes, default 1 s middleman heartbeat): the
#     launcher's, the syncer's and every learner node's /metrics accepted by promtool; counters
#     advance between two scrapes (tokens, steps, merges); learner 1 killed with `dd-chaos kill`
#     shows as dd_learner_up 0 on the syncer within two heartbeats (2 s) of the kill, and as 1
#     again with a higher dd_learner_incarnation once the launcher restarted it;
#   * the operators' files in examples/monitoring: `promtool check rules` on alerts.yml,
#     `promtool check config` on prometheus.yml, and every dd_ metric that alerts.yml and the
#     Grafana dashboard's queries name was seen in the scrapes above.
# Prints each measured delay. Needs curl and promtool (scripts/setup.sh installs prometheus).
# Usage: metrics_scrape_test.sh DD_NODE DD_CHAOS SOURCE_DIR
set -euo pipefail
dd_node=$1 dd_chaos=$2 src=$3
. "$src/tests/support/cluster.sh"
command -v promtool > /dev/null || { echo "FAIL: no promtool (apt-get install prometheus)"; exit 1; }
command -v curl > /dev/null || { echo "FAIL: no curl"; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
cd "$tmp"
data=$src/datasets/tinyshakespeare/input.txt
fail() { echo "FAIL: $*"; exit 1; }
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$(now)"; }

tiny_experiment tiny.lua "$data" budget='seconds = 20'

# scrape NAME URL: /metrics into NAME.prom, checked by promtool (any complaint fails), its sample
# names added to seen.txt.
scrape() {
  curl -sf --max-time 5 "$2/metrics" > "$1.prom" || fail "$1: GET $2/metrics failed"
  promtool check metrics < "$1.prom" > "$1.promtool" 2>&1 || {
    cat "$1.promtool"
    fail "$1: promtool check metrics refused $2/metrics"
  }
  [ ! -s "$1.promtool" ] || { cat "$1.promtool"; fail "$1: promtool complained"; }
  grep -v '^#' "$1.prom" | sed -E 's/[{ ].*//' >> seen.txt
}
# value FILE SERIES: the sample value of the exact series (name{labels}) in FILE, or "".
value() { grep -F "$2 " "$1" | head -1 | awk '{print $2}'; }
# metric URL SERIES: the live value from a fresh scrape.
metric() { curl -sf --max-time 2 "$1/metrics" | grep -F "$2 " | head -1 | awk '{print $2}' || true; }
url_of() { grep -o 'http on http://[0-9.]*:[0-9]*' "$1" | head -1 | sed 's/^http on //'; }

# --- dd-node run --http ---------------------------------------------------------------------------
"$dd_node" run tiny.lua --run-dir run1 --progress 0 --set budget.seconds=5 --http 127.0.0.1:0 \
  > run1.out 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -n "$(url_of run1.out)" ] && break; sleep 0.1; done
u=$(url_of run1.out)
[ -n "$u" ] || { cat run1.out; fail "dd-node run printed no http address"; }
wait_until 100 curl -sf -o /dev/null "$u/readyz" || fail "dd-node run: /readyz never 200"
curl -sf "$u/healthz" | grep -qx ok || fail "dd-node run: /healthz"
curl -sf "$u/status" | python3 -c 'import json,sys; s=json.load(sys.stdin); assert s["kind"]=="run" and len(s["learners"])==3, s' ||
  fail "dd-node run: /status does not list 3 learners"
scrape run "$u"
grep -q '^dd_learner_steps_total{' run.prom || fail "dd-node run: no dd_learner_steps_total"
echo "ok dd-node run: $(grep -vc '^#' run.prom) samples, promtool clean"
wait "${pids[-1]}" || { cat run1.out; fail "dd-node run failed"; }
grep -q '^== tiny done in ' run1.out || { cat run1.out; fail "dd-node run: no summary"; }

# --- dd-node launch ------------------------------------------------------------------------------
"$dd_node" launch tiny.lua --run-dir run --progress 0 > launch.out 2>&1 &
launch_pid=$!
pids+=("$launch_pid")
# nodes.json: the launcher's and every node's listener.
ports() {
  python3 - << 'PY'
import json
d = json.load(open("run/nodes.json"))
print("launch", d["launcher"]["http"])
for n in d["nodes"]:
    print(n["name"], "http://127.0.0.1:%d" % n["endpoints"]["http"])
PY
}
for _ in $(seq 150); do [ -f run/nodes.json ] && [ "$(ports 2> /dev/null | wc -l)" -eq 5 ] && break; sleep 0.1; done
ports > urls.txt || { cat launch.out; fail "nodes.json lists no http endpoints"; }
cat urls.txt
syncer=$(awk '$1=="syncer"{print $2}' urls.txt)
# Ready: the syncer serves and every learner node steps.
for _ in $(seq 300); do
  ready=0
  while read -r name url; do curl -sf --max-time 1 "$url/readyz" > /dev/null && ready=$((ready + 1)); done < urls.txt
  [ "$ready" -eq 5 ] && break
  sleep 0.1
done
[ "$ready" -eq 5 ] || { cat launch.out; fail "only $ready of 5 listeners ready within 30 s"; }
while read -r name url; do scrape "$name-a" "$url"; done < urls.txt
sleep 1.5
while read -r name url; do scrape "$name-b" "$url"; done < urls.txt
echo "ok promtool accepts the launcher's, the syncer's and 3 learner nodes' /metrics"
run=$(python3 -c 'import json; print(json.load(open("run/nodes.json"))["run_id"])')
# `run` on every series of every node, the launcher's own and dd_build_info included (a launcher
# series once kept run="" after the run id was known).
for f in launch-b.prom syncer-b.prom learner-0-b.prom learner-1-b.prom learner-2-b.prom; do
  bad=$(grep -v '^#' "$f" | grep -v "[{,]run=\"$run\"" || true)
  [ -z "$bad" ] || { echo "$bad" | head -5; fail "$f: series without run=\"$run\""; }
done
# A learner node's event counters are there before their first event, at 0.
for s in "dd_node_reconnects_total{run=\"$run\"}" "dd_node_restarts_total{run=\"$run\",kind=\"learner\"}"; do
  [ "$(value learner-0-b.prom "$s")" = 0 ] || fail "learner-0: $s is not 0"
done
echo "ok every series names run $run; a learner node's event counters start at 0"
advances() {  # advances NODE SERIES
  a=$(value "$1-a.prom" "$2") b=$(value "$1-b.prom" "$2")
  python3 -c "import sys; sys.exit(0 if float('${b:-0}') > float('${a:-0}') else 1)" ||
    fail "$1: $2 did not advance ($a then $b)"
  echo "ok $1 $2: $a -> $b"
}
advances syncer "dd_run_tokens_total{run=\"$run\"}"
advances syncer "dd_fragment_merges_total{run=\"$run\",fragment=\"0\"}"
advances syncer "dd_learner_steps_total{run=\"$run\",learner=\"1\"}"
advances learner-1 "dd_learner_steps_total{run=\"$run\",learner=\"1\"}"
advances learner-1 "dd_learner_step_seconds_count{run=\"$run\",learner=\"1\"}"
advances learner-1 "dd_learner_pushes_sent_total{run=\"$run\",learner=\"1\"}"
[ "$(value syncer-b.prom "dd_learner_up{run=\"$run\",learner=\"1\"}")" = 1 ] || fail "learner 1 not up"
inc0=$(value syncer-b.prom "dd_learner_incarnation{run=\"$run\",learner=\"1\"}")

# Learner 1 killed: down on the syncer within two heartbeats (1 s each), then back.
t0=$(now)
"$dd_chaos" kill learner:1 --run-dir run > kill.out 2>&1 || { cat kill.out; fail "dd-chaos kill"; }
down=
for _ in $(seq 100); do
  [ "$(metric "$syncer" "dd_learner_up{run=\"$run\",learner=\"1\"}")" = 0 ] && { down=$(since "$t0"); break; }
  sleep 0.05
done
[ -n "$down" ] || fail "dd_learner_up of learner 1 never 0 on the syncer after the kill"
python3 -c "import sys; sys.exit(0 if $down <= 2.0 else 1)" ||
  fail "dd_learner_up of learner 1 went to 0 after $down s, more than two heartbeats (2 s)"
echo "ok learner 1 killed: dd_learner_up 0 on the syncer after $down s"
back=
for _ in $(seq 300); do
  if [ "$(metric "$syncer" "dd_learner_up{run=\"$run\",learner=\"1\"}")" = 1 ]; then
    inc=$(metric "$syncer" "dd_learner_incarnation{run=\"$run\",learner=\"1\"}")
    python3 -c "import sys; sys.exit(0 if float('$inc') > float('$inc0') else 1)" && { back=$(since "$t0"); break; }
  fi
  sleep 0.1
done
[ -n "$back" ] || fail "learner 1 never back up with a new incarnation (was $inc0)"
echo "ok learner 1 back: dd_learner_up 1, incarnation $inc0 -> $inc, $back s after the kill"
scrape syncer-c "$syncer"
launcher=$(awk '$1=="launch"{print $2}' urls.txt)
scrape launch-c "$launcher"
grep -q "^dd_launch_node_starts_total{run=\"$run\",node=\"learner-1\",role=\"learner\"} 2$" launch-c.prom ||
  { grep dd_launch_node_starts launch-c.prom; fail "the launcher does not count learner-1's second start"; }
rc=0
wait "$launch_pid" || rc=$?
[ $rc -eq 0 ] || { cat launch.out; fail "dd-node launch exited $rc"; }
grep -q '^== tiny done in ' launch.out || { cat launch.out; fail "no summary in the launcher's output"; }

# --- examples/monitoring -------------------------------------------------------------------------
ex=$src/examples/monitoring
promtool check rules "$ex/alerts.yml" || fail "promtool check rules $ex/alerts.yml"
promtool check config "$ex/prometheus.yml" || fail "promtool check config $ex/prometheus.yml"
# Its jq line (from its comment) makes the launch cluster's targets: every node and the launcher.
jq_line=$(sed -n '/^#   jq /,/dd_targets.json$/p' "$ex/prometheus.yml" | sed -E 's/^#\s*//' |
  sed 's#runs/NAME/nodes.json#run/nodes.json#' | tr '\n' ' ')
eval "$jq_line" || fail "the jq line of prometheus.yml failed: $jq_line"
got=$(jq -r '.[0].targets[]' dd_targets.json | sort | tr '\n' ' ')
want=$(sed -E 's#^[^ ]+ http://##' urls.txt | sort | tr '\n' ' ')
[ "$got" = "$want" ] || fail "prometheus.yml's jq line gives targets '$got', nodes.json has '$want'"
# As shipped it scrapes only those: no fixed target that nothing listens on (DDNodeDown).
! grep -qE '^\s+- targets:' "$ex/prometheus.yml" || fail "prometheus.yml ships fixed targets"
echo "ok prometheus.yml's jq line lists the launcher and every node: $got"
sort -u seen.txt > seen_sorted.txt
python3 - "$ex" seen_sorted.txt << 'PY'
import json, re, sys
ex, seen_file = sys.argv[1], sys.argv[2]
seen = set(open(seen_file).read().split())
name = re.compile(r"\bdd_[a-z0-9_]+")
exprs = []
dash = json.load(open(f"{ex}/grafana_dashboard.json"))
for p in dash["panels"]:
    if not p.get("targets"):
        sys.exit(f"FAIL: dashboard panel '{p['title']}' has no query")
    for t in p["targets"]:
        exprs.append((f"dashboard panel '{p['title']}'", t["expr"]))
for line in open(f"{ex}/alerts.yml"):
    if "expr:" in line or line.strip().startswith(("sum", "<", "and", "dd_")):
        exprs.append(("alerts.yml", line.strip()))
bad, names = [], set()
for where, e in exprs:
    found = name.findall(e)
    if not found and where != "alerts.yml":
        bad.append(f"{where}: no dd_ metric in '{e}'")
    for n in found:
        names.add(n)
        if n not in seen:
            bad.append(f"{where}: {n} was not seen in any scrape")
if bad:
    sys.exit("FAIL:\n  " + "\n  ".join(bad))
print(f"ok {len(exprs)} queries name {len(names)} metrics, each seen in a scrape")
PY
echo "PASS"
