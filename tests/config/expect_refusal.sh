#!/bin/sh
# tests/config/expect_refusal.sh DD_NODE FILE — passes when `DD_NODE resolve FILE` exits with 2,
# prints nothing on stdout, and its first error line starts with "FILE:LINE:". The scripts that
# hang (hang_*.lua) are stopped by a 2-second --script-timeout, so each case ends quickly; the
# others get 20 s (under ASan on a loaded machine a plain refusal once took over 2 s: a false
# "did not finish" instead of its error), still inside ctest's 30 s.
case "$2" in
  */hang_*.lua) limit=2 ;;
  *) limit=20 ;;
esac
out=$("$1" resolve "$2" --script-timeout "$limit" 2>&1 >/dev/null)
rc=$?
echo "$out"
[ "$rc" -eq 2 ] || { echo "expected exit code 2, got $rc"; exit 1; }
case "$out" in
  "$2":[0-9]*) exit 0 ;;
esac
echo "expected the error to start with '$2:LINE:'"
exit 1
