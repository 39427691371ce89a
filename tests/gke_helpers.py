"""A notebook pod played on one machine for the GKE backend's tests on the loopback API server:

* the loopback Kubernetes API (tests/kubeapi) with the simulated GKE snapshot controller;
* the real sidecar process (tests/sidecar_helpers.Sidecar) with a service-account token of its OWN, so
  that every recorded API call can be traced to it;
* the real ``jupyter server`` process and the pod's files: tests/gke_server.py (re-exported here; tests on the
  real control plane import it from there, without the loopback server).
"""

from __future__ import annotations

from pathlib import Path

from tests.gke_server import ClockSeamGKEBackend, GKEServer, PodFiles, no_kube_credentials
from tests.kubeapi import KubeAPI
from tests.sidecar_helpers import NAMESPACE, POD, POD_LABELS, Sidecar

__all__ = [
    "SIDECAR_USER",
    "ClockSeamGKEBackend",
    "GKEServer",
    "OwnTokenSidecar",
    "PodFiles",
    "new_pod",
    "no_kube_credentials",
    "pod_running",
]

SIDECAR_USER = f"system:serviceaccount:{NAMESPACE}:jupyter-suspend-sidecar"


class OwnTokenSidecar(Sidecar):
    """The sidecar with a token of its own (the API server knows it as SIDECAR_USER)."""

    def __init__(self, kube: KubeAPI, directory: Path, args: list[str], pod_uid: str):
        super().__init__(kube, directory, args, pod_uid=pod_uid)
        self.token = kube.add_token(SIDECAR_USER)

    def env(self) -> dict[str, str]:
        env = super().env()
        (self.sa / "token").write_text(self.token)  # instead of the test client's token
        return env


def new_pod(kube: KubeAPI) -> str:
    """Replace the notebook pod by a new one of the same name (as a StatefulSet does); returns its uid."""
    kube.delete("v1", "pods", NAMESPACE, POD)
    pod = kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": POD, "namespace": NAMESPACE, "labels": dict(POD_LABELS)},
            "spec": {"nodeName": "gpu-node-2", "containers": [{"name": "notebook", "image": "jupyter-suspend:0.1.0"}]},
        }
    )
    kube.patch_status("v1", "pods", NAMESPACE, POD, {"phase": "Running"})
    return str(pod["metadata"]["uid"])


def pod_running(kube: KubeAPI) -> None:
    """The pod runs again (an aborted suspend that the simulation stopped all the same)."""
    kube.patch_status("v1", "pods", NAMESPACE, POD, {"phase": "Running"})
