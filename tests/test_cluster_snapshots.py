"""``jupyter suspend snapshots list|prune`` (the real command) on the real API server, where a PodSnapshot with
GKE's storage finalizer really stays until the (simulated) GKE controller frees its storage, and deleting a
policy first really orphans it: prune deletes snapshots first and their policy only once they are gone."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cli_helpers import run_cli
from tests.cluster.control_plane import Cluster
from tests.cluster.gke import GKESnapshotController
from tests.cluster.notebook import get, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

POD_SPEC = {"containers": [{"name": "notebook", "image": "jupyter/gpu:1", "command": ["jupyter", "lab"]}]}


def _policy(namespace: str, name: str, environment: str) -> dict[str, Any]:
    return {
        "apiVersion": "podsnapshot.gke.io/v1",
        "kind": "PodSnapshotPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "storageConfigName": "jupyter-suspend",
            "selector": {"matchLabels": {"environment": environment}},
            "triggerConfig": {"type": "manual", "postCheckpoint": "stop"},
        },
    }


@pytest.fixture
def gke(cluster: Cluster, kube_ns: str) -> Iterator[GKESnapshotController]:
    with GKESnapshotController(cluster, kube_ns) as controller:
        yield controller
    assert not controller.errors, controller.errors


def _snapshots(cluster: Cluster, namespace: str) -> set[str]:
    listed = get(cluster, namespace, "podsnapshots")
    return {s["metadata"]["name"] for s in (listed or {"items": []})["items"]}


def _json(cluster: Cluster, namespace: str, *args: str) -> dict[str, Any]:
    done = run_cli(
        "snapshots", *args, "--namespace", namespace, "--json",
        kubeconfig=str(cluster.admin_kubeconfig), subprocess=True, timeout=120,
    )  # fmt: skip
    assert done.code == 0, (done.stdout, done.stderr)
    return json.loads(done.stdout)


def test_list_and_prune_keep_the_finalizer_order(cluster: Cluster, kube_ns: str, gke: GKESnapshotController) -> None:
    policies = [_policy(kube_ns, "pol-a", "nb-a"), _policy(kube_ns, "pol-gone", "gone")]
    cluster.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": policies}))
    history = []
    for _ in range(3):
        history.append(gke.seed_snapshot("nb-a-0", {"spec": POD_SPEC}, policy="pol-a"))
        time.sleep(1.1)  # creation timestamps have whole seconds: newest first must be decidable
    gone = [gke.seed_snapshot("gone-0", {"spec": POD_SPEC}, policy="pol-gone") for _ in range(2)]

    listed = _json(cluster, kube_ns, "list", "nb-a")
    assert [s["name"] for s in listed["snapshots"]] == history[::-1]

    done = _json(cluster, kube_ns, "prune", "nb-a", "--keep", "1")
    assert sorted(d["snapshot"] for d in done["deleted"]) == sorted(history[:2])
    wait_for(lambda: _snapshots(cluster, kube_ns) == {history[2], *gone}, 30, "the two pruned snapshots gone")
    assert len(gke.deleted_storage) == 2

    done = _json(cluster, kube_ns, "prune", "--all", "--keep", "0", "--policies")
    assert sorted(d["snapshot"] for d in done["deleted"]) == sorted([history[2], *gone])
    assert "pol-gone" in done["policies_deleted"]
    wait_for(lambda: not _snapshots(cluster, kube_ns), 30, "every snapshot gone")
    assert gke.orphaned_storage == [], "a policy was deleted before its snapshots"
    assert len(gke.deleted_storage) == 5
    assert get(cluster, kube_ns, "podsnapshotpolicy", "pol-gone") is None


def test_deleting_the_policy_first_orphans_the_storage(
    cluster: Cluster, kube_ns: str, gke: GKESnapshotController
) -> None:
    """The rule prune keeps, shown the wrong way round: the finalizer finds no policy."""
    cluster.kubectl("create", "-f", "-", input=json.dumps(_policy(kube_ns, "pol-wrong", "wrong")))
    made = gke.seed_snapshot("wrong-0", {"spec": POD_SPEC}, policy="pol-wrong")
    cluster.kubectl("delete", "podsnapshotpolicy", "pol-wrong", "-n", kube_ns)
    cluster.kubectl("delete", "podsnapshot", made, "-n", kube_ns, "--wait=false")
    wait_for(lambda: gke.orphaned_storage, 30, "the storage orphaned")
    assert gke.deleted_storage == []
