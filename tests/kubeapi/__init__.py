"""A Kubernetes API server of our own for tests (see server.py)."""

from tests.kubeapi.server import (
    Call,
    KubeAPI,
    KubeError,
    ResourceType,
    condition,
    set_condition,
    start_kube_api,
    wait_until,
)

__all__ = ["Call", "KubeAPI", "KubeError", "ResourceType", "condition", "set_condition", "start_kube_api", "wait_until"]
