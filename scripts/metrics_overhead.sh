#!/usr/bin/env bash
# scripts/metrics_overhead.sh — the main job (examples/shakespeare.lua) with the HTTP listener on
# (--http, scraped once a second like a busy Prometheus) against off, in interleaved rounds of a
# short budget; prints each run's tokens per second (summary.json tokens / wall_seconds) and tokens
# per CPU second of the process (user + system, from /usr/bin/time: steadier than wall time on a
# shared machine), the median and spread (min–max) of each arm, and on / off of the medians
# (docs/benchmarks.md, "Metrics"). Run from the repository root.
# Usage: scripts/metrics_overhead.sh [DD_NODE (build/bin/dd-node)] [ROUNDS (5)] [SECONDS (30)]
set -euo pipefail
dd_node=${1:-build/bin/dd-node} rounds=${2:-5} budget=${3:-30}
tmp=$(mktemp -d)
scraper=
cleanup() {
  [ -n "$scraper" ] && kill "$scraper" 2> /dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
one() {  # one ARM ROUND → tokens/s on stdout
  local arm=$1 i=$2 dir=$tmp/$1-$2 extra=()
  [ "$arm" = on ] && extra=(--http 127.0.0.1:0)
  /usr/bin/time -f '%U %S' -o "$tmp/$arm-$i.time" "$dd_node" run examples/shakespeare.lua --run-dir "$dir" --progress 0 \
    --set "budget={seconds=$budget}" --set inner.decay_steps=600 "${extra[@]}" > "$tmp/$arm-$i.out" 2>&1 &
  local pid=$!
  if [ "$arm" = on ]; then
    local url=
    for _ in $(seq 200); do
      url=$(grep -o 'http on http://[0-9.]*:[0-9]*' "$tmp/$arm-$i.out" | sed 's/^http on //' || true)
      [ -n "$url" ] && break
      sleep 0.05
    done
    (while kill -0 "$pid" 2> /dev/null; do curl -s --max-time 1 "$url/metrics" > /dev/null || true
      curl -s --max-time 1 "$url/status" > /dev/null || true; sleep 1; done) &
    scraper=$!
  fi
  wait "$pid" || { cat "$tmp/$arm-$i.out" >&2; exit 1; }
  [ -n "$scraper" ] && { wait "$scraper" 2> /dev/null || true; scraper=; }
  python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
u, k = (float(x) for x in open(sys.argv[2]).read().split()[-2:])
print(s["tokens"] / s["wall_seconds"], s["tokens"] / (u + k))' "$dir/summary.json" "$tmp/$arm-$i.time"
}
on=() off=() on_cpu=() off_cpu=()
for i in $(seq "$rounds"); do
  # Alternate which arm goes first, so a drift in the machine's load hits both.
  if (( i % 2 )); then arms=(off on); else arms=(on off); fi
  for arm in "${arms[@]}"; do
    read -r w c < <(one "$arm" "$i")
    echo "round $i $arm: $w tokens/s, $c tokens per CPU second"
    if [ "$arm" = on ]; then on+=("$w") on_cpu+=("$c"); else off+=("$w") off_cpu+=("$c"); fi
  done
done
python3 - "${#on[@]}" "${on[@]}" "${off[@]}" "${on_cpu[@]}" "${off_cpu[@]}" << 'PY'
import statistics, sys
n = int(sys.argv[1]); v = [float(x) for x in sys.argv[2:]]
arms = {"tokens/s": (v[0:n], v[n:2 * n]), "tokens per CPU second": (v[2 * n:3 * n], v[3 * n:])}
for unit, (on, off) in arms.items():
    for name, x in (("off", off), ("on (--http, scraped every second)", on)):
        print(f"{unit}, {name}: median {statistics.median(x):.0f}, min {min(x):.0f}, max {max(x):.0f}, n {len(x)}")
    print(f"{unit}, on / off (medians): {statistics.median(on) / statistics.median(off):.4f}")
PY
