#!/usr/bin/env bash
# The main job: JupyterLab with jupyter-suspend on the embedded local backend
# and a sample notebook ready to suspend and resume.
#   scripts/demo.sh [extra jupyter lab arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate

demo=.demo
mkdir -p "$demo/work" "$demo/state" "$demo/ipython/profile_default"
for nb in examples/*.ipynb; do
  [ -e "$demo/work/$(basename "$nb")" ] || cp "$nb" "$demo/work/"
done
# Every kernel of the demo loads the kernel side (magics, checkpoints, canary).
cat > "$demo/ipython/profile_default/ipython_kernel_config.py" <<'PY'
c.InteractiveShellApp.extensions = ["jupyter_suspend"]
PY
export IPYTHONDIR="$PWD/$demo/ipython"

exec jupyter lab \
  --ServerApp.root_dir="$PWD/$demo/work" \
  --SuspendApp.state_dir="$PWD/$demo/state" \
  --ServerApp.ip=127.0.0.1 \
  --ServerApp.port="${PORT:-8888}" \
  --no-browser \
  --allow-root \
  "$@"
