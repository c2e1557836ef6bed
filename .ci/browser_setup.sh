#!/usr/bin/env bash
# Installs what tests/browser/test_jupyterlab.py needs:
#   * Debian's chromium at /usr/bin/chromium (apt-get; run this before the test command), and
#   * with a PYTHON argument, Playwright's Python package in that interpreter's environment
#     (normally it comes with the test extra: pip install -e ".[test]").
# Never runs `playwright install`: the test launches /usr/bin/chromium through executable_path.
#
# Usage: bash .ci/browser_setup.sh [PYTHON]      Idempotent: skips what is already there.
set -euo pipefail

if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" -eq 0 ]; then sudo_cmd=(); else sudo_cmd=(sudo); fi
  echo "+ apt-get install chromium"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi
/usr/bin/chromium --version 2>/dev/null || { echo "chromium is not usable at /usr/bin/chromium" >&2; exit 1; }

if [ $# -ge 1 ]; then
  python_bin="$1"
  if ! "$python_bin" -c "import playwright.sync_api" 2>/dev/null; then
    echo "+ $python_bin -m pip install playwright"
    "$python_bin" -m pip install --quiet "playwright>=1.40"
  fi
  "$python_bin" -c "import importlib.metadata as m; print('playwright', m.version('playwright'))"
fi
