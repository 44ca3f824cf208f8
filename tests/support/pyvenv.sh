# tests/support/pyvenv.sh — the Python venvs of the tests that check files with PyPI packages.
# Source it, then:  py=$(pyvenv DIR PACKAGE ...) || exit 1

# pyvenv DIR PACKAGE ...: makes DIR a venv holding the PACKAGEs (their import names), once: a
# venv there that imports them all is kept. Prints DIR/bin/python. When venv or pip fails (no
# network) it says FAIL and returns 1: the test fails, it never skips.
pyvenv() {
  local venv=$1
  shift
  local py=$venv/bin/python imports
  imports=$(IFS=,; echo "$*")
  if ! "$py" -c "import $imports" 2> /dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv" >&2 || {
      echo "FAIL: python3 -m venv $venv failed (is python3-venv installed?)"
      return 1
    }
    "$venv/bin/pip" install --disable-pip-version-check -q "$@" >&2 || {
      echo "FAIL: pip could not install $* from PyPI into $venv (no network?); this test needs them"
      rm -rf "$venv"
      return 1
    }
  fi
  echo "$py"
}
