#!/usr/bin/env bash
# tests/apps/gpu_bundle_test.sh — keeps the GPU machine's path working on a machine without a GPU
# (docs/gpu.md): packs the bundle from this build tree with tools/gpu_check/make_bundle.sh
# --from-build, then checks that
#   - the archive is under the 60 MiB the device tool's transfer allows;
#   - the unpacked dd-node resolves every library of ours inside the bundle (only the C runtime
#     and CUDA from outside) and runs `train` on the CPU backend from there;
#   - tools/gpu_check/run_on_device.sh, given that bundle, passes its preflight's library checks
#     and refuses cleanly without a device (exit 3, "no driver or no device" in its log) within
#     20 seconds.
# Usage: gpu_bundle_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
src="$2"
work="$(mktemp -d "${TMPDIR:-/tmp}/gpu_bundle_test.XXXXXX")"
trap 'rm -rf "$work"' EXIT
fail() { echo "gpu_bundle_test: FAIL: $*" >&2; exit 1; }

"$src/tools/gpu_check/make_bundle.sh" --from-build "$build" --out "$work/b.tar.xz"
size=$(stat -c %s "$work/b.tar.xz")
((size < 60 * 1024 * 1024)) || fail "archive is $size bytes"
echo "gpu_bundle_test: archive $((size / 1024 / 1024)) MiB"

mkdir "$work/u"
tar -C "$work/u" -xJf "$work/b.tar.xz"
b="$work/u/dd-bundle"
for lib in libcaf_core libcapnp libopenblas libfmt liblua; do
  ls "$b/lib/" | grep -q "^$lib" || fail "$lib is not in the bundle"
done
outside=$(env -i ldd "$b/bin/dd-node" | awk '$3 ~ /^\// {print $3}' |
  grep -v "^$b/" | grep -v -E '/(ld-linux[^/]*|libc|libm|libpthread|libdl|librt)\.so' || true)
[[ -z "$outside" ]] || fail "dd-node loads from outside the bundle: $outside"
env -i PATH=/usr/bin:/bin "$b/bin/dd-node" train --data "$b/data/input.txt" --steps 3 \
  --eval-every 0 --eval-batches 1 --log-every 1 --out "$work/train" >"$work/train.log" 2>&1 ||
  { cat "$work/train.log"; fail "the bundled dd-node train failed"; }
grep -q '"compute_tokens_per_second"' "$work/train/summary.json" || fail "summary.json lacks compute_tokens_per_second"

mkdir -p "$work/out"
t0=$(date +%s)
set +e
env -i PATH=/usr/bin:/bin OUT="$work/out" "$src/tools/gpu_check/run_on_device.sh" \
  --bundle "$work/b.tar.xz" >"$work/device.log" 2>&1
rc=$?
set -e
dt=$(($(date +%s) - t0))
cat "$work/device.log"
if command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then
  echo "gpu_bundle_test: a device is present here; the refusal path was not taken (exit $rc)"
else
  [[ $rc == 3 ]] || fail "run_on_device.sh exit $rc without a device (expected 3)"
  grep -q "no driver or no device" "$work/device.log" || fail "no 'no device' line"
  grep -q "unresolved" "$work/device.log" && fail "the preflight found unresolved libraries"
fi
((dt <= 20)) || fail "the preflight took $dt s (its cap is 20 s)"
echo "gpu_bundle_test: PASS (preflight $dt s, exit $rc)"
