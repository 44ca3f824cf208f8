#!/usr/bin/env bash
# scripts/before_after.sh — the main job (examples/shakespeare.lua) run by two dd-node binaries
# (e.g. a build of main before a change and one after it) in interleaved rounds of a short steps
# budget; prints each run's final validation loss and tokens per second (summary.json), and the
# median and spread (min–max) of each side. Which side goes first alternates every round, so a
# drift in the machine's load hits both. Run from the repository root.
# Usage: scripts/before_after.sh BEFORE_DD_NODE AFTER_DD_NODE [ROUNDS (5)] [STEPS (40)]
set -euo pipefail
before=$1 after=$2 rounds=${3:-5} steps=${4:-40}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
one() {  # one SIDE BINARY ROUND → "loss tokens/s" on stdout
  local dir=$tmp/$1-$3
  "$2" run examples/shakespeare.lua --run-dir "$dir" --progress 0 --set "budget={steps=$steps}" \
    > "$tmp/$1-$3.out" 2>&1 || { cat "$tmp/$1-$3.out" >&2; exit 1; }
  python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
print(s["final_val_loss"], s["tokens"] / s["wall_seconds"])' "$dir/summary.json"
}
results=()
for i in $(seq "$rounds"); do
  if (( i % 2 )); then sides=(before after); else sides=(after before); fi
  for side in "${sides[@]}"; do
    bin=$before; [ "$side" = after ] && bin=$after
    read -r loss tps < <(one "$side" "$bin" "$i")
    echo "round $i $side: final val loss $loss, $tps tokens/s"
    results+=("$side" "$loss" "$tps")
  done
done
python3 - "${results[@]}" << 'PY'
import statistics, sys
v = sys.argv[1:]
rows = [(v[i], float(v[i + 1]), float(v[i + 2])) for i in range(0, len(v), 3)]
for side in ("before", "after"):
    loss = [r[1] for r in rows if r[0] == side]
    tps = [r[2] for r in rows if r[0] == side]
    print(f"{side}: final val loss median {statistics.median(loss):.4f} (min {min(loss):.4f}, "
          f"max {max(loss):.4f}); tokens/s median {statistics.median(tps):.0f} "
          f"(min {min(tps):.0f}, max {max(tps):.0f}); n {len(loss)}")
PY
