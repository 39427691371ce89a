#!/usr/bin/env bash
# The tests' Kubernetes control plane by hand (tests/cluster/):
#   scripts/cluster.sh build   build etcd, kube-apiserver, kube-controller-manager,
#                              kube-scheduler, kubectl and kwok from Go modules (once per pin)
#   scripts/cluster.sh up      start it on loopback with 10 fake GPU nodes and print its kubeconfig
#   scripts/cluster.sh status  where it runs
#   scripts/cluster.sh down    stop every process it started
# Then e.g.: export KUBECONFIG=...; kubectl get pods,podsnapshots -A -w
set -euo pipefail
cd "$(dirname "$0")/.."
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
exec "$PY" -m tests.cluster "$@"
