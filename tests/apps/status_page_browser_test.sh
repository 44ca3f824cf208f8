#!/usr/bin/env bash
# tests/apps/status_page_browser_test.sh — the syncer's status page in a real browser (ctest
# status_page_browser_test, labels "apps;browser"): during a `dd-node launch` run (3 learner
# processes), headless Chromium (Debian's chromium, --no-sandbox as root) loads the page at `/`
# of the syncer's HTTP listener and its DOM — after the page's own script has fetched /status and
# drawn it — must show
#   1. every learner, stepping, with incarnation 0, and the charts' library loaded;
#   2. learner 1, killed with `dd-chaos kill learner:1 --for 15s` (held down 15 s), as down;
#   3. learner 1 back, stepping with incarnation 1, and the kill (from chaos.jsonl, /chaos.json)
#      on the page's timeline.
# Each check polls `chromium --headless --dump-dom` (one page load each, the page's timers run in
# virtual time) for up to 30 s. Fails, never skips, without chromium (scripts/setup.sh installs it).
# Usage: status_page_browser_test.sh DD_NODE DD_CHAOS SOURCE_DIR [SCREENSHOT.png]
#   With SCREENSHOT, also saves a screenshot of the page after the recovery (docs/status_page.png
#   is made this way).
set -euo pipefail
dd_node=$(realpath "$1") dd_chaos=$(realpath "$2") src=$(realpath "$3") shot=${4:-}
. "$src/tests/support/cluster.sh"
[ -n "$shot" ] && shot=$(realpath -m "$shot")
chromium=$(command -v chromium || true)
[ -n "$chromium" ] || { echo "FAIL: no chromium on PATH (apt-get install chromium; scripts/setup.sh does)"; exit 1; }
py=/usr/bin/python3

enter_scratch_dir
fail() {
  echo "FAIL: $*"
  echo "--- launch.out"; tail -20 launch.out || true
  echo "--- last DOM"; cat dom.html 2>/dev/null | head -c 4000 || true
  exit 1
}
data=$src/datasets/tinyshakespeare/input.txt
budget=40  # seconds; the checks end the run sooner (the screenshot wants a longer one)
[ -n "$shot" ] && budget=60

tiny_experiment tiny.lua "$data" budget="seconds = $budget" checkpoint_every=8

"$dd_node" launch tiny.lua --run-dir run --progress 0 --heartbeat 0.5 --connection-timeout 5 \
  > launch.out 2>&1 &
launch_pid=$!

# The syncer's page, from the nodes file the launcher writes.
url=
deadline=$((SECONDS + 30))
while ((SECONDS < deadline)); do
  url=$("$py" - run/nodes.json <<'PY' 2>/dev/null || true
import json, sys
for n in json.load(open(sys.argv[1]))["nodes"]:
    http = (n.get("endpoints") or {}).get("http")
    if n.get("role") == "syncer" and http:
        print(f"http://127.0.0.1:{http}/" if isinstance(http, int) else f"http://{http}/")
PY
)
  [ -n "$url" ] && break
  sleep 0.2
done
[ -n "$url" ] || fail "no syncer HTTP endpoint in run/nodes.json within 30 s"
echo "page: $url"

# A profile of its own in the scratch folder (not root's), no GPU, no sandbox (root).
chrome_flags=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run
              --user-data-dir="$tmp/chrome")

# One page load: the DOM after the page's script ran; prints one line per learner row,
# "ID STATE INCARNATION", "charts yes|no" and "tape N" (timeline entries of dd-chaos faults on
# learner 1, from the run's chaos.jsonl).
load() {
  timeout 60 "$chromium" "${chrome_flags[@]}" --virtual-time-budget=1500 --dump-dom "$url" \
    > dom.html 2> chromium.err || true
  "$py" - dom.html <<'PY'
import sys
from html.parser import HTMLParser
class P(HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows, self.charts, self.tape = [], False, 0
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "data-learner" in a:
            self.rows.append((a["data-learner"], a.get("data-state"), a.get("data-incarnation")))
        if tag == "li" and a.get("data-event") == "dd-chaos" and a.get("data-learner") == "1":
            self.tape += 1
    def handle_data(self, d):
        if "Charts: Chart.js" in d:
            self.charts = True
p = P()
p.feed(open(sys.argv[1], encoding="utf-8", errors="replace").read())
for r in p.rows:
    print(*r)
print("charts", "yes" if p.charts else "no")
print("tape", p.tape)
PY
}

# Polls until the page shows what `check` (an awk program over load's lines) accepts.
wait_page() {
  local what=$1 check=$2 deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)); do
    load > rows.txt
    if awk "$check" rows.txt; then
      echo "ok $what: $(tr '\n' ';' < rows.txt)"
      return 0
    fi
    kill -0 "$launch_pid" 2>/dev/null || fail "the run ended before: $what"
  done
  fail "$what (last: $(tr '\n' ';' < rows.txt))"
}

wait_page "every learner stepping, incarnation 0, charts loaded" \
  '/^[0-9]/ && $2 == "stepping" && $3 == "0" { n++ } /^charts yes/ { c = 1 } END { exit !(n == 3 && c) }'
"$dd_chaos" kill learner:1 --for 15s --run-dir run > kill.out 2>&1 || { cat kill.out; fail "dd-chaos kill"; }
wait_page "learner 1 down" '$1 == "1" && $2 == "down" { d = 1 } END { exit !d }'
wait_page "learner 1 back with incarnation 1, the kill on the timeline" \
  '$1 == "1" && ($2 == "stepping" || $2 == "live") && $3 == "1" { b = 1 } /^tape [1-9]/ { k = 1 }
   END { exit !(b && k) }'
if [ -n "$shot" ]; then
  sleep 3  # a few more points on the curves
  timeout 60 "$chromium" "${chrome_flags[@]}" --hide-scrollbars --window-size=1280,1200 \
    --virtual-time-budget=4000 --screenshot="$shot" "$url" > chromium.out 2>&1 || true
  [ -s "$shot" ] || { cat chromium.out; fail "no screenshot written to $shot"; }
  echo "screenshot: $shot"
fi
kill "$launch_pid" 2>/dev/null || true
wait "$launch_pid" 2>/dev/null || true
launch_pid=
echo "status_page_browser_test: ok"
