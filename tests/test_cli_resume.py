"""``jupyter suspend status`` / ``resume`` from outside the pod, on the loopback Kubernetes API (real client, HTTPS).

The StatefulSet controller (tests/kubeapi/workloads.py) plays the scheduler with a capacity the test sets: a pod
over capacity stays Pending with ``PodScheduled=False/Unschedulable`` and the scheduler's (and autoscaler's) events.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from jupyter_suspend.cli import follow
from jupyter_suspend.cli.follow import Assessment, Observation, SnapshotView, assess
from jupyter_suspend.cli.resume import Request, lease_name, resume_environment
from jupyter_suspend.cli.workloads import Kube
from jupyter_suspend.common.workloads import (
    NOTEBOOK_STOPPED_ANNOTATION,
    PIN_SNAPSHOT_ANNOTATION,
    POD_RESTORED_CONDITION,
)
from tests.cli_helpers import kube_client, run_cli, statefulset, validate_output, write_kubeconfig
from tests.kubeapi import KubeAPI
from tests.kubeapi.gke import GKESnapshotController
from tests.kubeapi.server import now_rfc3339, wait_until
from tests.kubeapi.workloads import UNSCHEDULABLE, StatefulSetController

FAST = ("--poll-interval=0.1",)


@pytest.fixture
def kubeconfig(kube_api: KubeAPI, tmp_path: Path) -> str:
    return write_kubeconfig(kube_api, tmp_path)


def scale_patches(kube: KubeAPI, name: str | None = None) -> int:
    return sum(
        1
        for call in kube.calls_matching("patch", "statefulsets")
        if call.subresource == "scale" and name in (None, call.name)
    )


def pod_creations(kube: KubeAPI) -> Counter[str]:
    """Pods ever created per environment, counted by the controller hook installed in ``count_pods``."""
    return kube.pod_creations  # type: ignore[attr-defined,no-any-return]


def count_pods(kube: KubeAPI) -> None:
    counts: Counter[str] = Counter()

    def hook(event_type: str, obj: dict[str, Any], _kube: KubeAPI) -> None:
        if obj.get("kind") == "Pod" and event_type == "ADDED":
            counts[(obj["metadata"].get("labels") or {}).get("environment", "?")] += 1

    kube.add_controller(hook)
    kube.pod_creations = counts  # type: ignore[attr-defined]


def snapshot(name: str, origin_pod: str, ready: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "podsnapshot.gke.io/v1",
        "kind": "PodSnapshot",
        "metadata": {"name": name, "namespace": "default", "annotations": {"podsnapshot.gke.io/origin-pod": origin_pod}},
        "spec": {"policyName": "nb-policy"},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "AllSnapshotsAvailable" if ready else "AwaitingCheckpoint",
                    "lastTransitionTime": now_rfc3339(),
                }
            ]
        },
    }


# --- resume to ready --------------------------------------------------------------------------------------------


def test_resume_of_a_scaled_to_zero_statefulset_reaches_ready_cold(kube_api: KubeAPI, kubeconfig: str) -> None:
    StatefulSetController(kube_api).attach()
    count_pods(kube_api)
    kube_api.create(statefulset("nb"))
    status = run_cli("status", "nb", "--json", kubeconfig=kubeconfig)
    assert status.code == 0, status.stderr
    assert validate_output(status.json(), "status")["state"] == "suspended"

    kube_api.reset_calls()
    done = run_cli("resume", "nb", "--wait", "--json", *FAST, kubeconfig=kubeconfig)
    assert done.code == 0, done.stderr
    answer = validate_output(done.json(), "resume")
    assert answer["state"] == "ready" and answer["action"] == "resumed"
    assert (answer["restore"], answer["restore_source"]) == ("cold", "pod")  # no snapshot, no PodRestored
    assert answer["pod"] == "nb-0" and answer["lease"]["mine"] is True
    assert [h["state"] for h in answer["history"]][-1] == "ready"
    assert kube_api.get("apps/v1", "statefulsets", "default", "nb")["spec"]["replicas"] == 1
    assert scale_patches(kube_api) == 1
    assert pod_creations(kube_api)["nb"] == 1
    assert kube_api.get("coordination.k8s.io/v1", "leases", "default", lease_name("statefulset", "nb")) is None

    again = run_cli("resume", "nb", "--wait", "--json", *FAST, kubeconfig=kubeconfig)
    assert again.code == 0
    assert validate_output(again.json(), "resume")["action"] == "already_ready"
    assert scale_patches(kube_api) == 1  # nothing more was asked
