#!/usr/bin/env bash
# Build the wheel and install it (not editable) into a throwaway venv, then
# check what a platform team would check after `pip install jupyter_suspend`.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
. .venv/bin/activate

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" .
python -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet "$work"/dist/jupyter_suspend-*.whl "jupyterlab>=4.2,<5"

export JUPYTER_CONFIG_DIR="$work/config" JUPYTER_DATA_DIR="$work/data" JUPYTER_RUNTIME_DIR="$work/runtime"
cd "$work"
server=$("$work/venv/bin/jupyter" server extension list 2>&1)
echo "$server" | grep -E "jupyter_suspend.*OK" >/dev/null || { echo "$server"; echo "server extension not OK"; exit 1; }
lab=$("$work/venv/bin/jupyter" labextension list 2>&1)
echo "$lab" | grep -E "jupyter-suspend v[0-9.]+ .*enabled.*OK" >/dev/null || { echo "$lab"; echo "labextension not OK"; exit 1; }
"$work/venv/bin/python" -m jupyterlab.browser_check --no-browser-test --allow-root
echo "packaging OK: server extension and labextension enabled, browser_check passed"
