#!/usr/bin/env bash
# Every check and every test, from a fresh machine: installs what is missing,
# then lint and type checks (Python and TypeScript), the frontend unit tests
# (jest), the pytest suite (real jupyter_server, real kernels), the packaging
# check (a built wheel in a clean venv) and the browser tests (Galata: a real
# jupyter lab in the system Chromium).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

if ! command -v chromium >/dev/null 2>&1; then
  step "installing Chromium (Debian package) for the browser tests"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

# Generated files are checked for drift before anything regenerates them: setup.sh's build rewrites
# src/_generated/schemas.ts (jlpm build:schema-types), which would hide a stale committed file. Its hash is
# taken first; if the build changes it, the file as it was (committed, or in this tree) was stale.
generated=src/_generated/schemas.ts
generated_before=$(sha256sum "$generated" | cut -d' ' -f1)
scripts/setup.sh
if [ "$(sha256sum "$generated" | cut -d' ' -f1)" != "$generated_before" ]; then
  step "generated files: DRIFT"
  echo "$generated was stale: the build regenerated it from jupyter_suspend/common/schemas/." >&2
  echo "Review and commit the regenerated file (git diff $generated), then run this again." >&2
  exit 1
fi
step "generated files: $generated matches its schemas"
node scripts/schema-types.mjs --check
# shellcheck disable=SC1091
. .venv/bin/activate
# The torch rows of the checkpoint tests need torch. Only a wheel already on this machine is taken
# (pip's configured find-links, e.g. a CPU build); from PyPI a plain `torch` is a
# multi-GB CUDA build, so without a local wheel those tests are skipped, and say so.
if ! python -c "import torch" 2>/dev/null; then
  probe=$(mktemp -d)
  if python -m pip download --quiet --no-index --no-deps --dest "$probe" "torch==2.13.0" 2>/dev/null; then
    python -m pip install --quiet "torch==2.13.0" # the local wheel; its small dependencies from PyPI
  else
    echo "note: no local torch wheel; the torch checkpoint tests will be skipped"
  fi
  rm -rf "$probe"
fi

step "ruff (lint and format)"
ruff check jupyter_suspend tests scripts bench
ruff format --check jupyter_suspend tests scripts bench

step "mypy"
mypy

step "prettier, eslint and tsc"
jlpm lint:check

step "jest (frontend unit tests)"
jlpm test

step "test control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok from Go modules (once per pin, cached)"
if ! command -v go >/dev/null 2>&1; then
  echo "error: Go (>= 1.26) is needed to build the test control plane (tests/cluster/); install it and run again" >&2
  exit 1
fi
python -m tests.cluster build
tests/cluster/crds/generate.sh --check

step "pytest"
python -m pytest tests -q -p no:cacheprovider

step "packaging: wheel in a clean venv"
scripts/check-package.sh

step "browser tests: Galata in the system Chromium against a real jupyter lab"
ui-tests/run.sh

echo
echo "ALL CHECKS PASSED"
