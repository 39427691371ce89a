#!/usr/bin/env bash
# Create .venv and install jupyter-suspend (editable) with everything the
# demo and the tests need; build the JupyterLab extension. Idempotent: a
# second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PYTHON" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate

stamp=.venv/.jupyter-suspend-installed
want=$(cat pyproject.toml package.json yarn.lock | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "==> installing Python packages"
  python -m pip install --quiet --upgrade pip
  # JupyterLab first: it provides jlpm, which builds the labextension during the install.
  python -m pip install --quiet "jupyterlab>=4.2,<5"
  jlpm install
  python -m pip install --quiet -e ".[test]"
  echo "$want" > "$stamp"
fi

echo "==> building the JupyterLab extension"
jlpm build
# Point JupyterLab at this checkout's build (an editable install does not copy it).
jupyter labextension develop --overwrite . >/dev/null
