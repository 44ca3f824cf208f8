#!/usr/bin/env bash
# tests/cluster/systemd_units_test.sh — the example systemd units (examples/systemd/) are valid
# units that run the dd-node that was built.
#
#   usage: systemd_units_test.sh DD_NODE UNIT_DIR
#
# Asserts, for dd-syncer.service and an instance of dd-learner@.service (learner 3), with their
# /usr/local/bin/dd-node replaced by DD_NODE: `systemd-analyze verify` exits 0 and prints nothing
# (an unknown key, a bad value or a missing executable is a line there); the offline security
# review rates each at most 2.0 (its hardening options); the restart policy is the documented one
# (Restart=on-failure; the syncer does not retry exit 1 and 2, a learner not 2-7); both load the
# join token as a credential; the learner
# instance asks for learner id 3; DD_NODE answers `syncer --help` and `learner --help` with every
# flag the units pass. Needs systemd-analyze (package systemd); never skips.
set -uo pipefail
dd_node="$1"
unit_dir="$2"
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v systemd-analyze >/dev/null || fail "systemd-analyze not found (apt-get install systemd)"
[[ -x "$dd_node" ]] || fail "dd-node '$dd_node' is not executable"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for u in dd-syncer.service dd-learner@.service; do
  [[ -f "$unit_dir/$u" ]] || fail "missing $unit_dir/$u"
  sed "s#/usr/local/bin/dd-node#${dd_node}#g" "$unit_dir/$u" >"$work/$u"
done
ln -s dd-learner@.service "$work/dd-learner@3.service"
cd "$work" || fail "cd $work"
out="$(systemd-analyze verify ./dd-syncer.service ./dd-learner@3.service 2>&1)"
rc=$?
echo "systemd-analyze verify: rc=$rc"
[[ $rc -eq 0 ]] || fail "systemd-analyze verify exited $rc: $out"
[[ -z "$out" ]] || fail "systemd-analyze verify printed: $out"

for u in dd-syncer.service dd-learner@3.service; do
  sec="$(systemd-analyze security --offline=true "./$u" 2>&1)"
  level="$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' <<<"$sec")"
  echo "$u: exposure $level"
  [[ -n "$level" ]] || fail "no exposure level for $u: $sec"
  awk -v l="$level" 'BEGIN { exit !(l <= 2.0) }' || fail "$u exposure $level > 2.0"
done

grep -qx 'Restart=on-failure' dd-syncer.service || fail "syncer: Restart=on-failure"
grep -qx 'RestartPreventExitStatus=1 2' dd-syncer.service || fail "syncer: RestartPreventExitStatus"
grep -q -- '--resume' dd-syncer.service || fail "syncer: a restart must --resume"
grep -qx 'Restart=on-failure' dd-learner@.service || fail "learner: Restart=on-failure"
grep -qx 'RestartPreventExitStatus=2 3 4 5 6 7' dd-learner@.service ||
  fail "learner: RestartPreventExitStatus"
for u in dd-syncer.service dd-learner@.service; do
  grep -qx 'LoadCredential=join_token:/etc/dd/join_token' "$u" || fail "$u: the join token credential"
  grep '^ExecStart=' "$u" | grep -q -- '--join-token-file' || fail "$u: --join-token-file"
done
# The instance name is the learner id: systemd expands %i in ExecStart.
grep '^ExecStart=' dd-learner@.service | grep -q -- '--learner-ids %i' ||
  fail "learner: --learner-ids %i"

# Every flag the units pass exists in the built dd-node.
"$dd_node" syncer --help >"$work/syncer.help" 2>&1
"$dd_node" learner --help >"$work/learner.help" 2>&1
for f in --listen --run-dir --resume --join-token-file; do
  grep -q -- "$f" "$work/syncer.help" || fail "dd-node syncer --help lacks $f"
done
for f in --join --learner-ids --node-name --run-dir --join-token-file; do
  grep -q -- "$f" "$work/learner.help" || fail "dd-node learner --help lacks $f"
done
echo "PASS"
