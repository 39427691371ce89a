#!/usr/bin/env bash
# Regenerates the CustomResourceDefinitions the test control plane installs
# (tests/cluster/crds/generated/*.yaml) from the Go types in types/*/, with
# controller-gen built from the pinned tool module in tool/. See README.md.
#
#   tests/cluster/crds/generate.sh           write generated/*.yaml
#   tests/cluster/crds/generate.sh --check   regenerate into a temporary folder and fail,
#                                            with a diff, if generated/ has drifted
#
# Both modes then validate the CRDs with the API server's own code (tool/crdcheck).
# Needs Go and the Go module proxy (or a warm module cache); builds its tools into
# ${JUPYTER_SUSPEND_CRD_TOOLS:-~/.cache/jupyter-suspend/crd-tools}.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mode=write
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

tools="${JUPYTER_SUSPEND_CRD_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/jupyter-suspend/crd-tools}"
mkdir -p "$tools"
# -mod=readonly: a go.mod or go.sum that is not tidy is an error here, never silently rewritten.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly"

build() {
  if ! go -C "$here/tool" build -o "$tools/" "$@"; then
    echo "generate.sh: could not build $* from $here/tool (run: go -C $here/tool build -o $tools/ $*)" >&2
    exit 1
  fi
}
build sigs.k8s.io/controller-tools/cmd/controller-gen ./crdpatch ./crdcheck

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
out="$work/generated"
mkdir -p "$out"

# One module per k8s.io/api version the upstream CRDs were generated with (README.md).
for module in "$here"/types/*/; do
  module="${module%/}"
  # maxDescLen=0: descriptions do not change validation or pruning, and upstream's
  # Notebook CRD is generated the same way; it keeps the files reviewable.
  if ! (cd "$module" && "$tools/controller-gen" crd:maxDescLen=0 paths=./... output:crd:dir="$out"); then
    echo "generate.sh: controller-gen failed in $module" >&2
    exit 1
  fi
  # Patches for what markers cannot express: <crd file name without .yaml>.patch.yaml
  for patch in "$module"/*.patch.yaml; do
    [ -e "$patch" ] || continue
    target="$out/$(basename "$patch" .patch.yaml).yaml"
    if [ ! -e "$target" ]; then
      echo "generate.sh: $patch names no generated CRD ($target)" >&2
      exit 1
    fi
    "$tools/crdpatch" "$target" "$patch"
  done
done

"$tools/crdcheck" "$out"

if [ "$mode" = check ]; then
  if ! diff -ru "$here/generated" "$out"; then
    echo "generate.sh --check: tests/cluster/crds/generated/ is out of date; run tests/cluster/crds/generate.sh" >&2
    exit 1
  fi
  echo "generate.sh --check: generated/ is up to date"
else
  rm -f "$here"/generated/*.yaml
  cp "$out"/*.yaml "$here/generated/"
  echo "generate.sh: wrote $(ls "$out" | wc -l) CRDs to $here/generated/"
fi
