"""The real control plane itself (tests/cluster/): what the other Kubernetes
tests stand on. Each test here would fail on a home-made API server that only
does what its authors believed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.cluster.build import KUBERNETES_VERSION
from tests.cluster.control_plane import Cluster
from tests.cluster.fixtures import service_account_token, token_kubeconfig
from tests.cluster.notebook import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TOLERATE_GPU_NODES = [
    {"key": "sandbox.gke.io/runtime", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
]


def test_components_are_the_pinned_release_and_ready(cluster: Cluster) -> None:
    version = json.loads(cluster.kubectl("version", "-o", "json"))
    assert version["serverVersion"]["gitVersion"] == KUBERNETES_VERSION
    assert version["clientVersion"]["gitVersion"] == KUBERNETES_VERSION
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json"))["items"]
    assert len(nodes) == cluster.nodes
    for node in nodes:
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(cluster.gpus_per_node)
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])
    # kwok renews each node's Lease, as a kubelet does (the node lifecycle controller reads them).
    leases = json.loads(cluster.kubectl("get", "leases", "-n", "kube-node-lease", "-o", "json"))["items"]
    assert {lease["metadata"]["name"] for lease in leases} == {n["metadata"]["name"] for n in nodes}
    assert cluster.ready_seconds < 60, cluster.ready_seconds
    print(f"control plane ready in {cluster.ready_seconds:.1f} s; resident memory {cluster.rss_bytes()}")


def test_controllers_and_scheduler_run_a_deployment_onto_a_fake_node(cluster: Cluster, kube_ns: str) -> None:
    """Deployment -> ReplicaSet (controller-manager) -> pod bound to a node (scheduler) -> Running (kwok)."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": kube_ns},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"tolerations": TOLERATE_GPU_NODES, "containers": [{"name": "web", "image": "web:1"}]},
            },
        },
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(deployment))

    def running() -> list[str]:
        pods = json.loads(cluster.kubectl("get", "pods", "-n", kube_ns, "-o", "json"))["items"]
        done = [p for p in pods if p["status"].get("phase") == "Running" and p["spec"].get("nodeName")]
        return [p["spec"]["nodeName"] for p in done] if len(done) == 2 else []

    nodes = wait_for(running, 60, "two Running pods of the Deployment")
    assert all(n.startswith("gpu-node-") for n in nodes)


def test_scheduler_leaves_a_pod_pending_with_its_own_message(cluster: Cluster, kube_ns: str) -> None:
    """No node has two GPUs: the real scheduler says so (FailedScheduling), nobody invents it."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "greedy", "namespace": kube_ns},
        "spec": {
            "tolerations": TOLERATE_GPU_NODES,
            "containers": [{"name": "c", "image": "x:1", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
        },
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(pod))

    def failed_scheduling() -> str:
        events = json.loads(cluster.kubectl("get", "events", "-n", kube_ns, "-o", "json"))["items"]
        return next((e["message"] for e in events if e["reason"] == "FailedScheduling"), "")

    message = wait_for(failed_scheduling, 60, "a FailedScheduling event")
    assert "Insufficient nvidia.com/gpu" in message, message
    phase = json.loads(cluster.kubectl("get", "pod", "greedy", "-n", kube_ns, "-o", "json"))["status"]["phase"]
    assert phase == "Pending"


def test_tokenrequest_tokens_authenticate_and_rbac_denies(cluster: Cluster, kube_ns: str, tmp_path: Path) -> None:
    cluster.kubectl("create", "serviceaccount", "reader", "-n", kube_ns)
    token = service_account_token(cluster, kube_ns, "reader")
    api = config.new_client_from_config(str(token_kubeconfig(cluster, tmp_path / "kc", token, kube_ns)))
    try:
        review = client.AuthenticationV1Api(api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
        assert review.status.user_info.username == f"system:serviceaccount:{kube_ns}:reader"
        with pytest.raises(ApiException) as denied:
            client.CoreV1Api(api).list_namespaced_secret(kube_ns)
        assert denied.value.status == 403
    finally:
        api.close()
    # A made-up token is not a user at all.
    api = config.new_client_from_config(str(token_kubeconfig(cluster, tmp_path / "bad", "not-a-token", kube_ns)))
    try:
        with pytest.raises(ApiException) as unauthenticated:
            client.CoreV1Api(api).list_namespaced_pod(kube_ns)
        assert unauthenticated.value.status == 401
    finally:
        api.close()


def test_only_the_gke_controller_may_write_podsnapshots(cluster: Cluster, kube_ns: str) -> None:
    """platform-facts §1: an admission policy rejects anyone but GKE creating PodSnapshots;
    here a real ValidatingAdmissionPolicy does, even for cluster-admin."""
    snapshot = {
        "apiVersion": "podsnapshot.gke.io/v1",
        "kind": "PodSnapshot",
        "metadata": {"name": "forged", "namespace": kube_ns},
        "spec": {"policyName": "p"},
    }
    with pytest.raises(subprocess.CalledProcessError) as refused:
        cluster.kubectl("create", "-f", "-", input=json.dumps(snapshot))
    assert "PodSnapshot objects are managed by GKE" in refused.value.stderr


def test_restarted_api_server_keeps_its_objects(cluster: Cluster, kube_ns: str) -> None:
    cluster.kubectl("create", "configmap", "kept", "-n", kube_ns, "--from-literal=a=1")
    cluster.restart_apiserver()
    assert json.loads(cluster.kubectl("get", "configmap", "kept", "-n", kube_ns, "-o", "json"))["data"] == {"a": "1"}
