#!/usr/bin/env bash
# tests/apps/plot_test.sh — `dd-node plot` on real runs (ctest plot_test, labels "apps;python"):
#   * a `dd-node launch` cluster (3 learner processes, 12 s budget) whose learner 1 is killed with
#     `dd-chaos kill` once every learner has stepped: loss_tokens.png, loss_time.png, merges.png,
#     timeline.png (the kill from chaos.jsonl and learner 1's restart counted), bytes.png; the
#     final evaluation marked apart from the periodic curve, with its windows;
#   * `dd-node run` of two experiments (one with an in-process learner kill) and its comparison
#     table: comparison.png; a resumed run's new incarnations are not restarts; every timeline's
#     restart count is its summary.json's learner_restarts;
#   * dd-goodput's output directory: goodput.png;
# each a PNG that Debian's matplotlib decodes, with nonzero width and height. Then the errors:
# a missing input, a run directory without learner_loss.csv, a corrupt events.jsonl line (named
# file:line), a comparison table whose run directory is gone, an interpreter without matplotlib
# (each exit 1 with a message naming it), a torn last line (skipped with a warning, exit 0).
# Needs /usr/bin/python3 with python3-matplotlib (scripts/setup.sh installs it): fails without.
# Usage: plot_test.sh DD_NODE DD_CHAOS DD_GOODPUT SOURCE_DIR
set -euo pipefail
dd_node=$(realpath "$1") dd_chaos=$(realpath "$2") dd_goodput=$(realpath "$3") src=$(realpath "$4")
. "$src/tests/support/cluster.sh"
py=/usr/bin/python3
"$py" -c 'import matplotlib' ||
  { echo "FAIL: $py has no matplotlib (apt-get install python3-matplotlib; scripts/setup.sh does)"; exit 1; }

enter_scratch_dir
data=$src/datasets/tinyshakespeare/input.txt
fail() { echo "FAIL: $*"; exit 1; }

# The timeline's restarts (`dd-node plot` output $2) are summary.json's learner_restarts (run $1).
restarts_match_summary() {
  local want got
  want=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["learner_restarts"])' "$1/summary.json")
  got=$(sed -n 's/.*timeline.png: [0-9]* learners, \([0-9]*\) restarts,.*/\1/p' "$2")
  [ -n "$got" ] && [ "$got" = "$want" ] ||
    { cat "$2"; fail "$1: the timeline counts '$got' restarts, summary.json's learner_restarts $want"; }
  echo "ok $1: $got restarts, as summary.json's learner_restarts"
}

# PNG check: every named file exists, is nonzero, and decodes to an image of nonzero size.
check_pngs() {
  "$py" - "$@" <<'PY'
import os, sys
import matplotlib.image as mpimg
for p in sys.argv[1:]:
    if not os.path.isfile(p):
        sys.exit(f"FAIL: {p} was not written")
    size = os.path.getsize(p)
    with open(p, "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            sys.exit(f"FAIL: {p} is not a PNG (signature)")
    img = mpimg.imread(p)
    if size == 0 or img.shape[0] < 100 or img.shape[1] < 100:
        sys.exit(f"FAIL: {p}: {size} bytes, {img.shape}")
    print(f"ok {p}: {size} bytes, {img.shape[1]}x{img.shape[0]}")
PY
}

tiny_experiment tiny.lua "$data" budget='seconds = 12'

# --- A cluster with a learner process killed by dd-chaos ---------------------------------------
"$dd_node" launch tiny.lua --run-dir run --progress 0 --heartbeat 0.2 --connection-timeout 1 \
  > launch.out 2>&1 &
launch_pid=$!
stepped() {  # every learner has a row in learner_loss.csv
  [ -f run/learner_loss.csv ] && [ "$(tail -n +2 run/learner_loss.csv | cut -d, -f2 | sort -u | wc -l)" -ge 3 ]
}
wait_until 300 stepped || { cat launch.out; fail "not every learner stepped within 30 s"; }
"$dd_chaos" kill learner:1 --run-dir run > kill.out 2>&1 || { cat kill.out; fail "dd-chaos kill"; }
rc=0
wait "$launch_pid" || rc=$?
launch_pid=
[ $rc -eq 0 ] || { cat launch.out; fail "dd-node launch exited $rc"; }
grep -q '"event":"rejoin","incarnation":1,"learner":1' run/events.jsonl || {
  grep '"learner":1' run/events.jsonl | grep -v '"event":"push"' | grep -v '"event":"merge"'
  cat kill.out launch.out
  fail "learner 1 never came back with incarnation 1"
}

"$dd_node" plot run > plot.out 2>&1 || { cat plot.out; fail "dd-node plot run"; }
cat plot.out
check_pngs run/figures/{loss_tokens,loss_time,merges,timeline,bytes}.png
grep -q 'timeline.png: 3 learners, 1 restarts, [1-9][0-9]* faults (1 from chaos.jsonl)' plot.out ||
  fail "the timeline does not count 3 learners, 1 restart and the kill from chaos.jsonl"
restarts_match_summary run plot.out
grep -q 'loss_tokens.png: 3 learners, [1-9][0-9]* steps, [1-9][0-9]* evaluations' plot.out ||
  fail "the loss figure has no steps or no evaluation"
# The final evaluation (eval.windows: the whole validation split) scores other windows than the
# periodic ones (eval.periodic_windows): a point marked apart, naming its windows, not the end of
# the periodic curve.
final_windows=$("$py" -c '
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if "\"eval\"" in l]
print([e for e in ev if e.get("event") == "eval" and e.get("final") is True][-1]["windows"])' run/events.jsonl)
grep -q "loss_tokens.png: .* evaluations ([0-9]* periodic.*, the final one of $final_windows windows marked apart)" plot.out ||
  { cat plot.out; fail "the final evaluation ($final_windows windows) is not marked apart"; }
grep -q 'merges.png: [1-9][0-9]* merges over 2 fragments' plot.out || fail "merges.png counts no merge"
"$dd_node" plot run --out elsewhere > /dev/null
check_pngs elsewhere/timeline.png

# --- Two experiments and their comparison table -------------------------------------------------
common="data = { file = '$data' },
  model = { layers = 1, width = 32, heads = 2, context = 32 },
  learners = { count = 2, batch = 4, threads = 1 },
  eval = { every_seconds = 0.2, batches = 2 },
  budget = { steps = 40 },"
cat > two.lua <<EOF
experiment { name = 'h4', $common
  sync = { fragments = 2, interval = 4 } }
experiment { name = 'h8_kill', $common
  sync = { fragments = 2, interval = 8 },
  chaos = { events = { { at_step = 20, action = 'kill', target = 1 } } } }
EOF
"$dd_node" run two.lua --progress 0 --table runs/comparison.json > two.out 2>&1 ||
  { cat two.out; fail "dd-node run two.lua"; }
"$dd_node" plot runs/comparison.json > cmp.out 2>&1 || { cat cmp.out; fail "dd-node plot TABLE"; }
cat cmp.out
check_pngs runs/figures/comparison.png
grep -q 'comparison.png: 2 experiments: h4, h8_kill' cmp.out || fail "comparison.png lacks an experiment"
"$dd_node" plot runs/h8_kill > kill.out 2>&1 || { cat kill.out; fail "dd-node plot runs/h8_kill"; }
grep -q 'timeline.png: 2 learners, 1 restarts, 1 faults (0 from chaos.jsonl)' kill.out ||
  { cat kill.out; fail "the in-process kill is not on the timeline"; }
restarts_match_summary runs/h8_kill kill.out
# A resumed `dd-node run` (h4's events.jsonl with a second part appended as --resume writes it:
# a resume event, every learner's rejoin with a new incarnation, live false): new incarnations,
# not restarts (summary.json counts none), drawn as rejoins or resumes.
cp -r runs/h4 resumed
"$py" - resumed/events.jsonl <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
t = max(e["time"] for e in lines) + 1.0
more = [{"event": "resume", "experiment": "h4", "t": 0.0, "time": t}]
more += [{"event": "rejoin", "incarnation": 1, "learner": i, "live": False, "resume_step": 20,
          "t": 0.01, "time": t + 0.01} for i in (0, 1)]
with open(sys.argv[1], "a") as f:
    f.write("".join(json.dumps(e) + "\n" for e in more))
PY
"$dd_node" plot resumed > resumed.out 2>&1 || { cat resumed.out; fail "dd-node plot resumed"; }
grep -q 'timeline.png: 2 learners, 0 restarts, .*, 2 rejoins or resumes' resumed.out ||
  { cat resumed.out; fail "a resume counted as restarts (or its rejoins not drawn)"; }
restarts_match_summary resumed resumed.out

# --- dd-goodput ---------------------------------------------------------------------------------
"$dd_goodput" --chips 4096 --learners 2 --days 1 --seeds 2 --out gp > gp.out 2>&1 ||
  { cat gp.out; fail "dd-goodput"; }
"$dd_node" plot gp > gpplot.out 2>&1 || { cat gpplot.out; fail "dd-node plot gp"; }
check_pngs gp/figures/goodput.png

# --- Errors -------------------------------------------------------------------------------------
expect_error() {  # expect_error WHAT TEXT -- ARGS...: exit 1 and TEXT on stderr
  local what=$1 want=$2
  shift 3
  local rc=0
  "$@" > err.out 2> err.err || rc=$?
  [ $rc -eq 1 ] || { cat err.out err.err; fail "$what: exit $rc, expected 1"; }
  grep -qF -- "$want" err.err || { cat err.err; fail "$what: stderr lacks '$want'"; }
  echo "ok $what: $(head -1 err.err)"
}
expect_error "a missing input" "dd-node plot: nowhere does not exist" -- "$dd_node" plot nowhere
cp -r run broken
rm broken/learner_loss.csv
expect_error "no learner_loss.csv" "broken/learner_loss.csv does not exist" -- "$dd_node" plot broken
cp run/learner_loss.csv broken/
sed -i '3s/.*/{"event": "merge", "t": 1, "ti/' broken/events.jsonl
expect_error "a corrupt events.jsonl" "broken/events.jsonl:3: not a JSON object" -- "$dd_node" plot broken
cp run/events.jsonl broken/events.jsonl
printf '{"event": "merge", "t"' >> broken/events.jsonl
"$dd_node" plot broken > torn.out 2> torn.err || { cat torn.err; fail "a torn last line must not fail the plot"; }
grep -q "events.jsonl:[0-9]*: skipped the last line, cut short without a newline" torn.err ||
  { cat torn.err; fail "the torn last line was not reported"; }
echo "ok a torn last line: $(cat torn.err)"
mv runs/h4 runs/h4.gone
expect_error "a table's run directory gone" "row 0 ('h4'): no run directory found" -- \
  "$dd_node" plot runs/comparison.json
printf '#!/bin/sh\nexec %s -S "$@"\n' "$py" > nompl
chmod +x nompl
expect_error "no matplotlib" "matplotlib is not installed" -- "$dd_node" plot run --python ./nompl
expect_error "no interpreter" "no Python interpreter at /nonexistent/python3" -- \
  "$dd_node" plot run --python /nonexistent/python3
echo "plot_test: ok"
