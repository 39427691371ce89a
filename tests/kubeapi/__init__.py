"""A Kubernetes API server of our own, on loopback, for tests with the real `kubernetes` client (see server.py),
with simulated controllers: GKE Pod Snapshots (gke.py) and StatefulSets (workloads.py)."""

from tests.kubeapi.gke import GKESnapshotController
from tests.kubeapi.server import (
    Call,
    KubeAPI,
    KubeError,
    ResourceType,
    Timer,
    condition,
    now_rfc3339,
    set_condition,
    start_kube_api,
    wait_until,
)
from tests.kubeapi.workloads import StatefulSetController

__all__ = [
    "Call",
    "GKESnapshotController",
    "KubeAPI",
    "KubeError",
    "ResourceType",
    "StatefulSetController",
    "Timer",
    "condition",
    "now_rfc3339",
    "set_condition",
    "start_kube_api",
    "wait_until",
]
