#!/usr/bin/env bash
# Run the Galata UI tests headless in the system Chromium against a real
# `jupyter lab`; exits non-zero when a test fails.
#
# Needs, in the active Python environment: jupyterlab 4.6 and this package
# with its built labextension (pip install -e ".[test]" runs the build).
# Extra arguments go to `playwright test` (e.g. -g "preflight").
# JUPYTER_SUSPEND_SCREENSHOTS=1 also writes docs/screenshots/*.png.
set -euo pipefail
cd "$(dirname "$0")"

fail() {
  echo "ui-tests/run.sh: $*" >&2
  exit 2
}

command -v jupyter >/dev/null || fail "jupyter is not on PATH (activate the environment first)"
command -v jlpm >/dev/null || fail "jlpm is not on PATH (pip install jupyterlab)"
export CHROMIUM_PATH="${CHROMIUM_PATH:-/usr/bin/chromium}"
[ -x "$CHROMIUM_PATH" ] || fail "no Chromium at $CHROMIUM_PATH (apt-get install chromium, or set CHROMIUM_PATH)"
# (Captured first: grep -q closing the pipe early would fail under pipefail.)
labextensions="$(jupyter labextension list 2>&1)"
grep -q "jupyter-suspend.*enabled.*OK" <<<"$labextensions" ||
  fail "the jupyter-suspend labextension is not installed (pip install -e . && jlpm build at the top)"
serverextensions="$(jupyter server extension list 2>&1)"
grep -q "jupyter_suspend.*enabled" <<<"$serverextensions" ||
  fail "the jupyter_suspend server extension is not enabled"

# The verify-helper tests need the kernel side (%verify_live_state).
if python -c "import sys, jupyter_suspend as j; sys.exit(0 if hasattr(j, 'load_ipython_extension') else 1)"; then
  export JUPYTER_SUSPEND_KERNEL_SIDE=1
else
  export JUPYTER_SUSPEND_KERNEL_SIDE=0
  echo "ui-tests/run.sh: kernel side absent: the verify-helper tests (tests/verify.spec.ts) are SKIPPED"
fi

# A free port: the machine is shared and 8888 may be taken.
if [ -z "${JUPYTER_SUSPEND_UI_PORT:-}" ]; then
  JUPYTER_SUSPEND_UI_PORT="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  export JUPYTER_SUSPEND_UI_PORT
fi

# jupyter_server's kernel websocket steps go to jupyter-server.log; a failed test
# prints those of its own kernels (tests/fixtures.ts). 0 turns them off.
export JUPYTER_SUSPEND_UI_DEBUG="${JUPYTER_SUSPEND_UI_DEBUG:-1}"

# No browser download: Playwright drives the system Chromium.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
jlpm install
# Type-check the tests (with the top-level TypeScript) before running them:
# Playwright only strips the types.
(cd .. && jlpm tsc -p ui-tests/tsconfig.json)
exec jlpm playwright test "$@"
