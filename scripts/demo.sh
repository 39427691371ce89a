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
mkdir -p "$demo/work" "$demo/state"
for nb in examples/*.ipynb; do
  [ -e "$demo/work/$(basename "$nb")" ] || cp "$nb" "$demo/work/"
done
# The sample notebook loads the kernel side itself (%load_ext jupyter_suspend); a resume loads it into
# every restarted kernel that needs its application checkpoints back.

exec jupyter lab \
  --ServerApp.root_dir="$PWD/$demo/work" \
  --SuspendApp.state_dir="$PWD/$demo/state" \
  --ServerApp.ip=127.0.0.1 \
  --ServerApp.port="${PORT:-8888}" \
  --no-browser \
  --allow-root \
  "$@"
