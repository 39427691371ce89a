"""What the tests put on the real API server besides the product's own
manifests: the CRDs (tests/cluster/crds/generated/), GKE's "only GKE writes
PodSnapshots" rule as a real ValidatingAdmissionPolicy, namespaces, and
tokens of ServiceAccounts through the TokenRequest API."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from .control_plane import Cluster

HERE = Path(__file__).resolve().parent
#: JUPYTER_SUSPEND_TEST_CRDS: another folder of CRDs (to try a CRD change without regenerating).
CRD_DIR = Path(os.environ.get("JUPYTER_SUSPEND_TEST_CRDS") or HERE / "crds" / "generated")

#: The identity of the simulated GKE snapshot controller (a client certificate).
GKE_CONTROLLER_USER = "system:gke-pod-snapshot-controller"


def crd_documents() -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for path in sorted(CRD_DIR.glob("*.yaml")):
        documents += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return documents


def _only_gke_writes_podsnapshots() -> list[dict[str, Any]]:
    # platform-facts §1: "PodSnapshot objects are written only by GKE — an
    # admission policy rejects anyone else creating or updating them". The
    # same rule, enforced by the real API server's CEL admission.
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "podsnapshots-written-by-gke-only"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["podsnapshot.gke.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["podsnapshots", "podsnapshots/status"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": f"request.userInfo.username == '{GKE_CONTROLLER_USER}'",
                    "message": "PodSnapshot objects are managed by GKE",
                    "reason": "Forbidden",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "podsnapshots-written-by-gke-only"},
        "spec": {"policyName": "podsnapshots-written-by-gke-only", "validationActions": ["Deny"]},
    }
    return [policy, binding]


def install_crds(cluster: Cluster, timeout: float = 60.0) -> list[str]:
    """Create every CRD (strict field validation) and wait until each is Established."""
    documents = crd_documents()
    if not documents:
        raise FileNotFoundError(f"no CRDs in {CRD_DIR}")
    names = [doc["metadata"]["name"] for doc in documents]
    payload = {"apiVersion": "v1", "kind": "List", "items": documents + _only_gke_writes_podsnapshots()}
    cluster.kubectl(
        "apply", "--server-side", "--field-manager=tests", "--validate=strict", "-f", "-", input=json.dumps(payload)
    )
    deadline = time.monotonic() + timeout
    for name in names:
        cluster.kubectl(
            "wait",
            "--for=condition=Established",
            f"crd/{name}",
            f"--timeout={max(1, int(deadline - time.monotonic()))}s",
        )
    return names


def install_platform_defaults(cluster: Cluster, volumes: int = 80) -> None:
    """What a GKE cluster with GKE Sandbox already has: the ``gvisor``
    RuntimeClass (handler ``runsc``). Without it the RuntimeClass admission
    plugin rejects every pod of deploy/base, as a cluster without Sandbox would."""
    runtime_class = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "gvisor"},
        "handler": "runsc",
    }
    # GKE's default StorageClass name; the volumes are provisioned ahead
    # (static provisioning, bound by the real PersistentVolume controller)
    # because no CSI driver runs here. Nothing ever mounts them.
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": "standard-rwo",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "Immediate",
        "reclaimPolicy": "Retain",
    }
    volumes = [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"test-volume-{index:03d}"},
            "spec": {
                "capacity": {"storage": "20Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "standard-rwo",
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": f"/nonexistent/jupyter-suspend-test-volume-{index:03d}"},
            },
        }
        for index in range(volumes)
    ]
    payload = {"apiVersion": "v1", "kind": "List", "items": [runtime_class, storage_class, *volumes]}
    cluster.kubectl(
        "apply", "--server-side", "--field-manager=tests", "--validate=strict", "-f", "-", input=json.dumps(payload)
    )


def add_volumes(cluster: Cluster, first: int, count: int) -> None:
    """More pre-provisioned volumes (a test that makes many notebooks)."""
    install_platform_defaults(cluster, volumes=first + count)
