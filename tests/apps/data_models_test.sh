#!/usr/bin/env bash
# tests/apps/data_models_test.sh — your data in, your model out (ctest data_models_test, label
# "apps;python"), from outside the binaries:
#   1. token data: llm.c shards (tools/hf/write_token_shards.py), then plain uint16 arrays, each
#      trained by `dd-node run` with 2 learners while learner 1 is killed and respawned; the
#      data trace (DD_DATA_TRACE) shows every step's windows: each learner's cursor advances by
#      exactly B windows a step (no batch repeated or skipped, across the respawn too), a
#      replayed step reads the same windows, and the learners' windows of an epoch are disjoint.
#      A run on the shards interrupted (SIGINT) after a checkpoint and continued with --resume:
#      each learner's trace is continuous across both parts and the resumed part starts past
#      step 0.
#      Bad token files are refused naming the file (magic, id >= vocab, truncated, empty list).
#   2. export: `dd-node export --format hf` of run 1, checked by tools/hf/check_export.py (NumPy
#      forward over transformers' names and Conv1D layouts; the `tokenizers` wheel); MoE refused.
#   3. round trip: model.init_from = the export, a run that cannot move the weights (lr 1e-30,
#      one step): the final loss equals run 1's to 1e-6; a shape mismatch is refused naming it.
#   4. subword: `dd-node tokenize --train-tokenizer --vocab 400` on a slice of the text, the
#      `tokenizers` wheel encodes the validation text to the shard's ids; a run on the shards
#      reports final_val_bpb; sample decodes with it.
# The venv (numpy, safetensors, tokenizers from PyPI) is made once per build tree
# (BUILD/pyvenv-data-models); pip without network FAILS the test.
# Usage: data_models_test.sh DD_NODE SOURCE_DIR BUILD_DIR
set -euo pipefail
dd_node=$1 src=$2 build=$3
. "$src/tests/support/pyvenv.sh"
py=$(pyvenv "$build/pyvenv-data-models" numpy safetensors tokenizers) || { echo "$py"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
text=$src/datasets/tinyshakespeare/input.txt
seed=11
echo "seed $seed"

# A tiny experiment on token files; $1 = data table body, $2 = extra Lua.
experiment() {
  cat > "$tmp/exp.lua" <<EOF
experiment {
  name = "tok",
  seed = $seed,
  data = { kind = "tokens", $1 },
  model = { layers = 1, width = 32, heads = 2, context = 32 },
  learners = { count = 2, batch = 4 },
  sync = { fragments = 2, interval = 4 },
  budget = { steps = 16 },
  eval = { every_seconds = 0, batches = 3 },
  $2
}
EOF
}
kill_learner='chaos = { events = { { at_step = 7, action = "kill", target = 1 } } }'

check_trace() {  # $1 trace, $2 run dir, $3 steps per learner (0: the trace's last + 1)
  "$py" - "$1" "$2/summary.json" "${3:-16}" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
summary = json.load(open(sys.argv[2]))
B, T, steps = 4, 32, int(sys.argv[3])
resumed = summary.get("resumed", False)
if not resumed and summary.get("learner_restarts", 0) < 1:
    sys.exit(f"FAIL: no learner was respawned (learner_restarts {summary.get('learner_restarts')})")
by = {}
for l in lines:
    by.setdefault(l["learner"], []).append(l)
if sorted(by) != [0, 1]:
    sys.exit(f"FAIL: learners {sorted(by)} in the trace")
epoch_windows = {}
for learner, ls in by.items():
    final = {}
    for l in ls:
        k = l["step"]
        if k in final and final[k]["starts"] != l["starts"]:
            sys.exit(f"FAIL: learner {learner} step {k} read {final[k]['starts']} then, replayed "
                     f"after the respawn, {l['starts']}")
        final[k] = l
    n = steps if steps > 0 else max(final) + 1
    if sorted(final) != list(range(n)):
        sys.exit(f"FAIL: learner {learner} steps {sorted(final)} != 0..{n - 1}")
    replayed = len(ls) - len(final)
    for k in range(1, n):
        a, b = final[k - 1], final[k]
        if b["epoch"] == a["epoch"] and b["position"] != a["position"] + B:
            sys.exit(f"FAIL: learner {learner} step {k}: cursor {b['epoch']}/{b['position']} after "
                     f"{a['epoch']}/{a['position']} (expected +{B} windows)")
        if b["epoch"] != a["epoch"] and b["epoch"] != a["epoch"] + 1:
            sys.exit(f"FAIL: learner {learner} step {k}: epoch jumps {a['epoch']} -> {b['epoch']}")
    for l in final.values():
        for s in l["starts"]:
            epoch_windows.setdefault(l["epoch"], []).append((learner, s))
    first, last = final[0], final[n - 1]
    print(f"learner {learner}: steps 0..{n - 1} continuous, cursor {first['epoch']}/"
          f"{first['position']} -> {last['epoch']}/{last['position']}, {replayed} step(s) replayed "
          f"after the {'resume' if resumed else 'respawn'} with the same windows; token ranges "
          f"[{min(min(l['starts']) for l in final.values())}, "
          f"{max(max(l['starts']) for l in final.values()) + T + 1})")
for e, ws in epoch_windows.items():
    starts = [s for _, s in ws]
    if len(starts) != len(set(starts)):
        sys.exit(f"FAIL: epoch {e}: a window was read twice ({len(starts) - len(set(starts))} repeats)")
print(f"every window of each epoch read once across both learners; learner_restarts "
      f"{summary['learner_restarts']}{', resumed' if resumed else ''}")
PY
}

run_tokens() {  # $1 name, $2 data body
  experiment "$2" "$kill_learner"
  rm -f "$tmp/trace_$1.jsonl"
  local rc=0
  DD_DATA_TRACE="$tmp/trace_$1.jsonl" "$dd_node" run "$tmp/exp.lua" --run-dir "$tmp/run_$1" \
    --progress 0 > "$tmp/run_$1.log" 2>&1 || rc=$?
  [ $rc -eq 0 ] || { cat "$tmp/run_$1.log"; echo "FAIL: dd-node run ($1) exited $rc"; exit 1; }
  check_trace "$tmp/trace_$1.jsonl" "$tmp/run_$1"
}

# 1. llm.c shards, then plain uint16 arrays (the first 300 kB of the text, byte ids).
"$py" "$src/tools/hf/write_token_shards.py" "$text" "$tmp/llmc" --shards 2 --max-bytes 300000
run_tokens llmc "files = \"$tmp/llmc/train_*.bin\", validation_files = { \"$tmp/llmc/val_000.bin\" }"
"$py" "$src/tools/hf/write_token_shards.py" "$text" "$tmp/u16" --shards 3 --max-bytes 300000 --format uint16
run_tokens u16 "files = { \"$tmp/u16/train_000.bin\", \"$tmp/u16/train_00[12].bin\" }, format = \"uint16\", train_fraction = 0.9"

# --resume on token data: a run interrupted (SIGINT) after its first checkpoint continues each
# learner's cursor: the trace of both parts is continuous, and the resumed part starts past step 0.
experiment "files = \"$tmp/llmc/train_*.bin\", validation_files = { \"$tmp/llmc/val_000.bin\" }" ""
sed -i 's/budget = { steps = 16 },/budget = { seconds = 120 }, inner = { decay_steps = 1000 },/' "$tmp/exp.lua"
rm -f "$tmp/trace_resume.jsonl"
DD_DATA_TRACE="$tmp/trace_resume.jsonl" "$dd_node" run "$tmp/exp.lua" --run-dir "$tmp/run_resume" \
  --progress 0 > "$tmp/resume_a.log" 2>&1 &
pid=$!
for _ in $(seq 240); do
  grep -q '"event":"checkpoint"' "$tmp/run_resume/events.jsonl" 2>/dev/null && break
  sleep 0.25
done
sleep 0.5
kill -INT $pid
rc=0; wait $pid || rc=$?
[ $rc -eq 130 ] || { cat "$tmp/resume_a.log"; echo "FAIL: interrupted run exited $rc, not 130"; exit 1; }
first_lines=$(wc -l < "$tmp/trace_resume.jsonl")
first_tokens=$("$py" -c "import json; print(json.load(open('$tmp/run_resume/summary.json'))['tokens'])")
rc=0
DD_DATA_TRACE="$tmp/trace_resume.jsonl" "$dd_node" run "$tmp/exp.lua" --run-dir "$tmp/run_resume" \
  --progress 0 --resume --set "budget={tokens=$((first_tokens + 4096))}" > "$tmp/resume_b.log" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$tmp/resume_b.log"; echo "FAIL: dd-node run --resume exited $rc"; exit 1; }
check_trace "$tmp/trace_resume.jsonl" "$tmp/run_resume" 0
"$py" - "$tmp/trace_resume.jsonl" "$first_lines" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
n1 = int(sys.argv[2])
for learner in (0, 1):
    a = [l["step"] for l in lines[:n1] if l["learner"] == learner]
    b = [l["step"] for l in lines[n1:] if l["learner"] == learner]
    if not a or not b:
        sys.exit(f"FAIL: learner {learner} read {len(a)} batches before and {len(b)} after --resume")
    if b[0] == 0 or b[0] > a[-1] + 1:
        sys.exit(f"FAIL: learner {learner} resumed at step {b[0]} after step {a[-1]} (cursor not restored)")
    print(f"learner {learner}: interrupted after step {a[-1]}, resumed at step {b[0]}")
PY

# Bad token files: exit 2 and a line naming the file.
refused() {  # $1 data body, $2 expected text
  experiment "$1" ""
  local rc=0
  "$dd_node" run "$tmp/exp.lua" --run-dir "$tmp/run_bad" --progress 0 > "$tmp/bad.log" 2>&1 || rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$2" "$tmp/bad.log"; then
    cat "$tmp/bad.log"; echo "FAIL: expected exit 2 and '$2', got exit $rc"; exit 1
  fi
  echo "refused: $(grep -F -- "$2" "$tmp/bad.log" | head -1)"
}
printf 'garbage!%.0s' $(seq 200) > "$tmp/magic.bin"
refused "files = \"$tmp/magic.bin\"" "token file '$tmp/magic.bin': wrong magic"
head -c 2000 "$tmp/llmc/train_000.bin" > "$tmp/short.bin"
refused "files = \"$tmp/short.bin\"" "token file '$tmp/short.bin': truncated"
"$py" -c "import numpy as np; np.array([1,2,300,4]*100, '<u2').tofile('$tmp/big.bin')"
refused "files = \"$tmp/big.bin\", format = \"uint16\"" "token file '$tmp/big.bin': token id 300 at position 2 is not below model.vocab = 256"
refused "files = {}" "data.files: the list of token files is empty"
refused "files = \"$tmp/none_*.bin\"" "'$tmp/none_*.bin' matches no file"

# 2. Export of run 1, checked without our code.
"$dd_node" export "$tmp/run_llmc" --format hf "$tmp/hf"
ls "$tmp/hf"
"$py" "$src/tools/hf/check_export.py" "$tmp/hf" "$tmp/run_llmc" --tol 1e-5
rc=0; "$dd_node" export "$tmp/run_llmc" --format onnx "$tmp/x" 2> "$tmp/x.err" || rc=$?
[ $rc -eq 2 ] || { echo "FAIL: --format onnx exited $rc"; exit 1; }

# 3. Round trip: init_from the export, weights unmoved, same loss.
experiment "files = \"$tmp/llmc/train_*.bin\", validation_files = { \"$tmp/llmc/val_000.bin\" }" \
  "inner = { lr = 1e-30, warmup = 0 }, outer = { lr = 1e-30 }"
rc=0
"$dd_node" run "$tmp/exp.lua" --run-dir "$tmp/run_rt" --progress 0 --set budget.steps=1 \
  --set "model.init_from=\"$tmp/hf\"" > "$tmp/rt.log" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$tmp/rt.log"; echo "FAIL: init_from run exited $rc"; exit 1; }
"$py" - "$tmp/run_llmc/summary.json" "$tmp/run_rt/summary.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))["final_val_loss"]
b = json.load(open(sys.argv[2]))["final_val_loss"]
print(f"round trip: exported run {a:.8f}, run started from the export {b:.8f}, difference {abs(a - b):.2e}")
if abs(a - b) > 1e-6:
    sys.exit("FAIL: the round trip changed the loss by more than 1e-6")
PY
rc=0
"$dd_node" run "$tmp/exp.lua" --run-dir "$tmp/run_rt2" --progress 0 --set model.width=64 \
  --set "model.init_from=\"$tmp/hf\"" > "$tmp/rt2.log" 2>&1 || rc=$?
grep -q "model.width is 64 in the experiment but 32 in its config.json" "$tmp/rt2.log" && [ $rc -eq 2 ] ||
  { cat "$tmp/rt2.log"; echo "FAIL: a width mismatch was not refused naming model.width (exit $rc)"; exit 1; }
echo "init_from with another width refused: $(grep -o 'model.width is.*' "$tmp/rt2.log" | head -1)"

# 4. Subword tokenizer: train, shards, tokenizers agrees, a run reports bits per byte.
head -c 200000 "$text" > "$tmp/small.txt"
"$dd_node" tokenize --train-tokenizer --vocab 400 "$tmp/small.txt" --out "$tmp/sp"
"$py" - "$tmp/sp" "$tmp/small.txt" <<'PY'
import json, sys
import numpy as np
from tokenizers import Tokenizer
d, path = sys.argv[1], sys.argv[2]
rep = json.load(open(f"{d}/tokenize.json"))
text = open(path, encoding="utf-8").read()
cut = len(text.encode()) - rep["files"][0]["val"]["bytes"]
val = text.encode()[cut:].decode()
raw = open(f"{d}/small_val.bin", "rb").read()
ours = np.frombuffer(raw[1024:], "<u2").tolist()
got = Tokenizer.from_file(f"{d}/tokenizer.json").encode(val).ids
if got != ours:
    i = next((i for i, (x, y) in enumerate(zip(got, ours)) if x != y), min(len(got), len(ours)))
    sys.exit(f"FAIL: tokenizers gives {len(got)} ids, our shard {len(ours)}; first difference at {i}: {got[i:i+6]} vs {ours[i:i+6]}")
print(f"tokenizer.json encodes the {len(val)}-character validation text to the shard's {len(ours)} ids "
      f"({rep['bytes_per_token']:.2f} bytes/token, {rep['mb_per_second']:.2f} MB/s)")
PY
experiment "files = \"$tmp/sp/small_train.bin\", validation_files = { \"$tmp/sp/small_val.bin\" }, tokenizer = \"$tmp/sp\"" ""
sed -i 's/layers = 1,/layers = 1, vocab = 400,/' "$tmp/exp.lua"
rc=0
"$dd_node" run "$tmp/exp.lua" --run-dir "$tmp/run_sp" --progress 0 --set budget.steps=8 > "$tmp/sp.log" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$tmp/sp.log"; echo "FAIL: subword run exited $rc"; exit 1; }
"$py" - "$tmp/run_sp" <<'PY'
import json, math, sys
s = json.load(open(f"{sys.argv[1]}/summary.json"))
loss, bpb = s["final_val_loss"], s.get("final_val_bpb")
if bpb is None or not (0 < bpb < loss / math.log(2)):
    sys.exit(f"FAIL: final_val_bpb {bpb} (loss {loss} nats/token, several bytes per token)")
ev = [json.loads(l) for l in open(f"{sys.argv[1]}/events.jsonl") if '"event":"eval"' in l]
if not ev or "val_bpb" not in ev[-1]:
    sys.exit("FAIL: eval events carry no val_bpb")
print(f"subword run: {loss:.4f} nats/token = {bpb:.4f} bits/byte; eval events carry val_bpb")
PY
"$dd_node" sample "$tmp/run_sp" --prompt "ROMEO:" --tokens 20 --temperature 0 > "$tmp/sample.txt"
head -c 6 "$tmp/sample.txt" | grep -q "ROMEO:" || { echo "FAIL: sample output"; exit 1; }
echo "sample: $(head -c 80 "$tmp/sample.txt" | tr '\n' ' ')"
echo "PASS"
