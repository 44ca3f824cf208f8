#!/usr/bin/env bash
# tests/apps/model_file_test.sh — what a run leaves behind, checked from outside (ctest
# model_file_test, label "apps;python"): a tiny `dd-node run` (2 learners, 1-layer GPT, seed 7),
# then
#   * model.safetensors loaded with PyPI's `safetensors` + `numpy` (tests/apps/model_file_check.py:
#     names, shapes, digest, and a NumPy forward pass giving the run's final loss within 1e-4 on
#     the windows summary.json states);
#   * learner_loss.csv: header wall_time,learner,incarnation,step,tokens,loss,lr and one row per
#     learner step (steps 1..N of each learner, tokens = step·B·T, lr > 0);
#   * `dd-node eval RUN_DIR` reproduces the run's loss; `dd-node sample` prints the prompt and the
#     requested number of bytes, the same text for the same seed, other text for another seed.
# The venv is made once per build tree (BUILD/pyvenv-model-file); pip without network FAILS the
# test (no skip).
# Usage: model_file_test.sh DD_NODE SOURCE_DIR BUILD_DIR
set -euo pipefail
dd_node=$1 src=$2 build=$3
. "$src/tests/support/pyvenv.sh"
py=$(pyvenv "$build/pyvenv-model-file" safetensors numpy) || { echo "$py"; exit 1; }
"$py" -c 'import safetensors, numpy; print("venv", safetensors.__version__, numpy.__version__)'

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run=$tmp/run
seed=7
steps=12
echo "seed $seed"
# The data next to the repository, as DD_DATA_DIR of the C++ tests (ctest runs in the build tree).
data=$src/datasets/tinyshakespeare/input.txt
rc=0
"$dd_node" run "$src/examples/shakespeare.lua" --run-dir "$run" --progress 0 \
  --set "data.file=\"$data\"" --set seed=$seed --set model.layers=1 --set model.width=32 \
  --set model.heads=2 --set model.context=32 --set learners.count=2 --set learners.batch=4 \
  --set sync.fragments=2 --set sync.interval=4 --set budget.steps=$steps \
  --set eval.every_seconds=0 --set eval.windows=50 > "$tmp/run.log" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$tmp/run.log"; echo "FAIL: dd-node run exited $rc"; exit 1; }
ls "$run"

"$py" "$src/tests/apps/model_file_check.py" "$run" --tol 1e-4

# learner_loss.csv: one row per learner step.
"$py" - "$run/learner_loss.csv" $steps <<'PY'
import csv, sys
path, steps = sys.argv[1], int(sys.argv[2])
with open(path) as f:
    rows = list(csv.reader(f))
want = ["wall_time", "learner", "incarnation", "step", "tokens", "loss", "lr"]
if rows[0] != want:
    sys.exit(f"FAIL: {path} header {rows[0]} != {want}")
by = {}
for r in rows[1:]:
    by.setdefault(int(r[1]), []).append(r)
if sorted(by) != [0, 1]:
    sys.exit(f"FAIL: {path} learners {sorted(by)} != [0, 1]")
for l, rs in by.items():
    got = [int(r[3]) for r in rs]
    if got != list(range(1, steps + 1)):
        sys.exit(f"FAIL: learner {l} steps {got} != 1..{steps}")
    for r in rs:
        if int(r[4]) != int(r[3]) * 4 * 32:
            sys.exit(f"FAIL: learner {l} step {r[3]}: tokens {r[4]} != step*B*T")
        if not float(r[6]) > 0 or not 0 < float(r[5]) < 10:
            sys.exit(f"FAIL: learner {l} step {r[3]}: lr {r[6]} / loss {r[5]}")
print(f"learner_loss.csv: {len(rows) - 1} rows, one per step of each learner")
PY

# dd-node eval reproduces the run's loss on the stated windows.
out=$("$dd_node" eval "$run")
echo "$out"
"$py" - "$run/summary.json" "$out" <<'PY'
import json, re, sys
s = json.load(open(sys.argv[1]))
m = re.match(r"val_loss (\S+) nats/token", sys.argv[2])
if not m or "the run recorded" not in sys.argv[2]:
    sys.exit(f"FAIL: dd-node eval printed {sys.argv[2]!r}")
if abs(float(m.group(1)) - s["final_val_loss"]) > 1e-5:
    sys.exit(f"FAIL: dd-node eval {m.group(1)} != final_val_loss {s['final_val_loss']}")
print("dd-node eval matches final_val_loss")
PY

# dd-node sample: prompt + N bytes, deterministic per seed.
"$dd_node" sample "$run" --prompt "ROMEO:" --tokens 40 --seed 3 --top-k 20 > "$tmp/a.txt" 2> "$tmp/a.err"
"$dd_node" sample "$run" --prompt "ROMEO:" --tokens 40 --seed 3 --top-k 20 > "$tmp/b.txt" 2>/dev/null
"$dd_node" sample "$run/model.safetensors" --prompt "ROMEO:" --tokens 40 --seed 4 > "$tmp/c.txt" 2>/dev/null
cat "$tmp/a.err" "$tmp/a.txt"
grep -q "seed 3" "$tmp/a.err" || { echo "FAIL: dd-node sample did not print its seed"; exit 1; }
cmp -s "$tmp/a.txt" "$tmp/b.txt" || { echo "FAIL: same seed, different text"; exit 1; }
! cmp -s "$tmp/a.txt" "$tmp/c.txt" || { echo "FAIL: seeds 3 and 4 gave the same text"; exit 1; }
[ "$(head -c 6 "$tmp/a.txt")" = "ROMEO:" ] || { echo "FAIL: the output does not start with the prompt"; exit 1; }
[ "$(wc -c < "$tmp/a.txt")" -eq 47 ] || { echo "FAIL: expected 6 + 40 bytes + newline, got $(wc -c < "$tmp/a.txt")"; exit 1; }
echo "PASS"
