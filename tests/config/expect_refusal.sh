#!/bin/sh
# tests/config/expect_refusal.sh DD_NODE FILE — passes when `DD_NODE resolve FILE` exits with 2,
# prints nothing on stdout, and its first error line starts with "FILE:LINE:". The scripts that
# hang (hang_*.lua) are stopped by a 2-second --script-timeout, so each case ends quickly.
out=$("$1" resolve "$2" --script-timeout 2 2>&1 >/dev/null)
rc=$?
echo "$out"
[ "$rc" -eq 2 ] || { echo "expected exit code 2, got $rc"; exit 1; }
case "$out" in
  "$2":[0-9]*) exit 0 ;;
esac
echo "expected the error to start with '$2:LINE:'"
exit 1
