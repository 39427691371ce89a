"""deploy/base on the real control plane: the real sidecar asks for a snapshot
of its own pod with a token bound to that pod; the simulated GKE controller
(the one proprietary part) checkpoints it and stops the pod; the real
StatefulSet controller replaces the Completed pod; the replacement is
restored. The sidecar's Role is judged by the real RBAC authorizer."""

from __future__ import annotations

import asyncio
import io
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from jupyter_suspend.cli.release import DEFAULT_SELECTOR, Watcher, connect_release_kube
from tests.cli_helpers import kube_client, run_cli
from tests.cluster.control_plane import Cluster
from tests.cluster.fixtures import token_kubeconfig
from tests.cluster.gke import GKESnapshotController
from tests.cluster.notebook import (
    REPO,
    RealSidecar,
    bound_token,
    create,
    deploy_base,
    get,
    render,
    running_pod,
    sidecar_args,
    wait_for,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SIDECAR_ACCOUNT = "jupyter-suspend-sidecar"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.fixture
def notebook(cluster: Cluster, kube_ns: str) -> dict[str, Any]:
    return deploy_base(cluster, kube_ns)


@pytest.fixture
def gke(cluster: Cluster, kube_ns: str) -> Iterator[GKESnapshotController]:
    with GKESnapshotController(cluster, kube_ns) as controller:
        yield controller
    assert not controller.errors, controller.errors


@pytest.fixture
def sidecar(cluster: Cluster, kube_ns: str, notebook: dict[str, Any], tmp_path: Path) -> Iterator[RealSidecar]:
    token = bound_token(cluster, kube_ns, SIDECAR_ACCOUNT, notebook)
    process = RealSidecar(cluster, kube_ns, notebook, tmp_path / "sidecar", sidecar_args(cluster, kube_ns))
    process.start(token)
    try:
        yield process
    finally:
        process.stop()


def test_suspend_and_restore_through_the_real_statefulset_controller(
    cluster: Cluster, kube_ns: str, notebook: dict[str, Any], gke: GKESnapshotController, sidecar: RealSidecar
) -> None:
    view = asyncio.run(sidecar.client.pod())
    assert view["uid"] == notebook["metadata"]["uid"] == view["started_uid"]
    assert view["policy_exists"] is True
    assert view["post_checkpoint"] == "stop"

    requested = asyncio.run(sidecar.client.request_snapshot())
    trigger = requested["trigger"]
    assert len(trigger) <= 63, "a trigger name becomes the snapshot's label value"

    def ready() -> Any:
        progress = asyncio.run(sidecar.client.follow(trigger, wait=5))
        assert progress["phase"] != "failed", progress
        return progress if progress["phase"] == "ready" else None

    progress = wait_for(ready, 60, "the snapshot Ready")
    snapshot = progress["snapshot"]
    assert UUID.match(snapshot), snapshot
    stored = get(cluster, kube_ns, "podsnapshot", snapshot)
    assert stored is not None
    assert stored["metadata"]["labels"]["gke-pod-snapshot-triggered-by"] == trigger
    assert stored["metadata"]["annotations"]["podsnapshot.gke.io/origin-pod"] == "notebook-0"

    # The pod stopped after its checkpoint; the real StatefulSet controller replaces it
    # (a new uid), and the replacement is restored from the snapshot.
    old_uid = notebook["metadata"]["uid"]
    new_pod = wait_for(lambda: running_pod(cluster, kube_ns, "notebook-0", not_uid=old_uid), 60, "a new notebook-0")

    def restored() -> Any:
        pod = get(cluster, kube_ns, "pod", "notebook-0")
        conditions = {c["type"]: c for c in (pod or {}).get("status", {}).get("conditions", [])}
        return conditions.get("PodRestored")

    condition = wait_for(restored, 30, "PodRestored on the new pod")
    assert condition["status"] == "True"
    assert snapshot in condition["message"]
    events = get(cluster, kube_ns, "events", "--field-selector", f"involvedObject.uid={new_pod['metadata']['uid']}")
    assert events is not None
    messages = [e["message"] for e in events["items"] if e["reason"] == "GKEPodSnapshotting"]
    assert messages
    assert f"PodSnapshot {kube_ns}/{snapshot}" in messages[0]
    assert gke.restored == [("notebook-0", snapshot)]


def test_a_token_bound_to_the_old_pod_is_refused_after_the_pod_is_replaced(
    cluster: Cluster, kube_ns: str, notebook: dict[str, Any], tmp_path: Path
) -> None:
    """The unknown of platform-facts §1 (does a restored sandbox keep the old pod's projected token?) matters
    because the real API server refuses a token whose bound pod is gone: 401, not 403."""
    token = bound_token(cluster, kube_ns, SIDECAR_ACCOUNT, notebook)
    api = config.new_client_from_config(str(token_kubeconfig(cluster, tmp_path / "kc", token, kube_ns)))
    try:
        assert (
            client.CoreV1Api(api).read_namespaced_pod("notebook-0", kube_ns).metadata.uid == notebook["metadata"]["uid"]
        )
        cluster.kubectl("delete", "pod", "notebook-0", "-n", kube_ns, "--grace-period=0", "--force")
        wait_for(
            lambda: running_pod(cluster, kube_ns, "notebook-0", not_uid=notebook["metadata"]["uid"]), 60, "replacement"
        )
        # The API server caches a token's authentication for a few seconds; then it checks the bound pod's uid.
        status = wait_for(
            lambda: _denied(lambda: client.CoreV1Api(api).read_namespaced_pod("notebook-0", kube_ns)) != 200 and 1,
            30,
            "the old pod's token refused",
        )
        assert status
        assert _denied(lambda: client.CoreV1Api(api).read_namespaced_pod("notebook-0", kube_ns)) == 401
    finally:
        api.close()


def _has_condition(cluster: Cluster, namespace: str, pod: str, kind: str) -> bool:
    found = get(cluster, namespace, "pod", pod)
    return any(c["type"] == kind for c in (found or {}).get("status", {}).get("conditions", []))


def _denied(call: Any) -> int:
    try:
        call()
    except ApiException as exc:
        return int(exc.status)
    return 200


def test_the_sidecars_role_is_least_privilege_by_the_real_authorizer(
    cluster: Cluster, kube_ns: str, notebook: dict[str, Any], tmp_path: Path
) -> None:
    """What the sidecar's identity may do, and one denied call per neighbouring temptation."""
    cluster.kubectl("create", "namespace", f"{kube_ns}-other")
    try:
        cluster.kubectl("run", "neighbour", "-n", kube_ns, "--image=x:1", "--restart=Never")
        cluster.kubectl("create", "secret", "generic", "s", "-n", kube_ns, "--from-literal=a=b")
        token = bound_token(cluster, kube_ns, SIDECAR_ACCOUNT, notebook)
        api = config.new_client_from_config(str(token_kubeconfig(cluster, tmp_path / "kc", token, kube_ns)))
        core, apps, custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
        group, version = "podsnapshot.gke.io", "v1"
        try:
            # allowed: its own pod, the policy, its triggers, the snapshots
            assert _denied(lambda: core.read_namespaced_pod("notebook-0", kube_ns)) == 200
            assert (
                _denied(
                    lambda: custom.get_namespaced_custom_object(
                        group, version, kube_ns, "podsnapshotpolicies", "notebook-snapshots"
                    )
                )
                == 200
            )
            assert _denied(lambda: custom.list_namespaced_custom_object(group, version, kube_ns, "podsnapshots")) == 200
            # denied: another pod, another namespace, secrets, writing PodSnapshots or policies, scaling
            assert _denied(lambda: core.read_namespaced_pod("neighbour", kube_ns)) == 403
            assert _denied(lambda: core.list_namespaced_pod(kube_ns)) == 403
            assert _denied(lambda: core.read_namespaced_pod("notebook-0", f"{kube_ns}-other")) == 403
            assert _denied(lambda: core.read_namespaced_secret("s", kube_ns)) == 403
            assert _denied(lambda: core.list_namespaced_secret(kube_ns)) == 403
            snapshot = {"apiVersion": f"{group}/{version}", "kind": "PodSnapshot", "metadata": {"name": "x"}}
            assert (
                _denied(
                    lambda: custom.create_namespaced_custom_object(group, version, kube_ns, "podsnapshots", snapshot)
                )
                == 403
            )
            policy = {"apiVersion": f"{group}/{version}", "kind": "PodSnapshotPolicy", "metadata": {"name": "mine"}}
            assert (
                _denied(
                    lambda: custom.create_namespaced_custom_object(
                        group, version, kube_ns, "podsnapshotpolicies", policy
                    )
                )
                == 403
            )
            scale = {"spec": {"replicas": 0}}
            assert _denied(lambda: apps.patch_namespaced_stateful_set_scale("notebook", kube_ns, scale)) == 403
            assert _denied(lambda: apps.read_namespaced_stateful_set("notebook", kube_ns)) == 403
            pods_in_other = lambda: custom.list_namespaced_custom_object(  # noqa: E731
                group, version, f"{kube_ns}-other", "podsnapshots"
            )
            assert _denied(pods_in_other) == 403
        finally:
            api.close()
    finally:
        cluster.kubectl("delete", "namespace", f"{kube_ns}-other", "--wait=false", check=False)


def test_the_releaser_wins_the_race_with_the_real_statefulset_controller(
    cluster: Cluster, kube_ns: str, notebook: dict[str, Any], gke: GKESnapshotController, sidecar: RealSidecar,
    tmp_path: Path,
) -> None:  # fmt: skip
    """After the suspend the real StatefulSet controller replaces the Completed pod at once (and GKE would restore
    it, holding the GPU again); `jupyter suspend release --wait`, acting as deploy/releaser's ServiceAccount with
    the Role that deploy/releaser grants, scales the StatefulSet to 0 once the snapshot is Ready."""
    create(cluster, render(cluster, REPO / "deploy" / "releaser", kube_ns))
    token = cluster.kubectl("create", "token", "jupyter-suspend-releaser", "-n", kube_ns).strip()
    kubeconfig = token_kubeconfig(cluster, tmp_path / "releaser.kubeconfig", token, kube_ns)
    requested = asyncio.run(sidecar.client.request_snapshot())
    done = run_cli(
        "release", "notebook", "--namespace", kube_ns, "--wait", "--timeout", "120", "--json",
        kubeconfig=str(kubeconfig), subprocess=True, timeout=180,
    )  # fmt: skip
    assert done.code == 0, (done.stdout, done.stderr)
    answer = done.json()
    assert answer["state"] == "released", answer
    statefulset = get(cluster, kube_ns, "statefulset", "notebook")
    assert statefulset is not None
    assert statefulset["spec"]["replicas"] == 0
    wait_for(lambda: get(cluster, kube_ns, "pod", "notebook-0") is None, 60, "no notebook pod left")
    snapshots = get(cluster, kube_ns, "podsnapshots")
    assert snapshots is not None
    labels = [s["metadata"]["labels"]["gke-pod-snapshot-triggered-by"] for s in snapshots["items"]]
    assert labels == [requested["trigger"]]
    used = snapshots["items"][0]["metadata"]["name"]

    # The user resumes; GKE restores the pod from that snapshot; the releaser (its own identity, its Role judged by
    # the real authorizer) deletes the used-up snapshot and its trigger, and GKE's finalizer frees the storage.
    cluster.kubectl("scale", "statefulset", "notebook", "-n", kube_ns, "--replicas=1")
    wait_for(lambda: ("notebook-0", used) in gke.restored, 60, "the restore")
    wait_for(lambda: _has_condition(cluster, kube_ns, "notebook-0", "PodRestored"), 30, "PodRestored on the pod")
    watcher = Watcher(
        connect_release_kube(kube_client(str(kubeconfig)), kube_ns), DEFAULT_SELECTOR, 0.5, out=io.StringIO()
    )
    watcher.round()
    assert watcher.consumed == [("notebook", used)]
    wait_for(lambda: not (get(cluster, kube_ns, "podsnapshots") or {"items": []})["items"], 30, "the snapshot gone")
    assert get(cluster, kube_ns, "podsnapshotmanualtrigger", requested["trigger"]) is None
    assert len(gke.deleted_storage) == 1
    assert gke.orphaned_storage == []
    watcher.round()  # nothing more to do, nothing refused
    assert watcher.consumed == [("notebook", used)]
    statefulset = get(cluster, kube_ns, "statefulset", "notebook")
    assert statefulset is not None
    assert statefulset["spec"]["replicas"] == 1


def test_a_resume_leaves_no_pin_and_no_rollout_deletes_the_restored_pod(
    cluster: Cluster, kube_ns: str, notebook: dict[str, Any], gke: GKESnapshotController, sidecar: RealSidecar,
    tmp_path: Path,
) -> None:  # fmt: skip
    """A pin an older version wrote on the StatefulSet's template is removed before the pod exists; the resume
    (with --snapshot naming the snapshot GKE restores anyway) changes nothing on the template; the real StatefulSet
    controller then has no new revision to roll, and the restored pod stays."""
    requested = asyncio.run(sidecar.client.request_snapshot())
    snapshot = wait_for(
        lambda: (p := asyncio.run(sidecar.client.follow(requested["trigger"], wait=5)))["phase"] == "ready" and p,
        60,
        "snapshot Ready",
    )["snapshot"]
    cluster.kubectl("scale", "statefulset", "notebook", "-n", kube_ns, "--replicas=0")
    wait_for(lambda: get(cluster, kube_ns, "pod", "notebook-0") is None, 60, "the pod gone")
    stale_pin = {"spec": {"template": {"metadata": {"annotations": {"podsnapshot.gke.io/ps-name": "gone-snapshot"}}}}}
    cluster.kubectl("patch", "statefulset", "notebook", "-n", kube_ns, "--type=merge", "-p", json.dumps(stale_pin))
    done = run_cli(
        "resume", "notebook", "--kind", "statefulset", "--namespace", kube_ns, "--snapshot", snapshot,
        "--wait", "--timeout", "120", "--json",
        kubeconfig=str(cluster.admin_kubeconfig), subprocess=True, timeout=180,
    )  # fmt: skip
    assert done.code == 0, (done.stdout, done.stderr)
    answer = done.json()
    assert answer["state"] == "ready", answer
    assert answer["restore"] == "live", answer
    statefulset = get(cluster, kube_ns, "statefulset", "notebook")
    assert statefulset is not None
    annotations = statefulset["spec"]["template"]["metadata"].get("annotations") or {}
    assert "podsnapshot.gke.io/ps-name" not in annotations, annotations
    restored = get(cluster, kube_ns, "pod", "notebook-0")
    assert restored is not None
    time.sleep(5)  # a rollout would replace the pod now
    statefulset = get(cluster, kube_ns, "statefulset", "notebook")
    assert statefulset is not None
    assert statefulset["status"]["currentRevision"] == statefulset["status"]["updateRevision"]
    still = get(cluster, kube_ns, "pod", "notebook-0")
    assert still is not None
    assert still["metadata"]["uid"] == restored["metadata"]["uid"]
