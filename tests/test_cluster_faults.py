"""Faults the product's code paths rely on, produced by the real API server rather than believed: a stale
resourceVersion precondition (409, what the releaser's scale and the resume Lease depend on), a watch from an
expired resourceVersion (410 Gone, which the sidecar's follow turns into a re-read), throttling by API Priority
and Fairness (429), and a restarted API server under a running sidecar."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from jupyter_suspend.cli.release import ReleaseKube
from tests.cli_helpers import kube_client
from tests.cluster.control_plane import Cluster
from tests.cluster.fixtures import token_kubeconfig
from tests.cluster.notebook import RealSidecar, bound_token, deploy_base, sidecar_args

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_a_stale_resource_version_on_the_releasers_scale_is_a_real_409(cluster: Cluster, kube_ns: str) -> None:
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "nb", "namespace": kube_ns},
        "spec": {
            "replicas": 0,
            "serviceName": "nb",
            "selector": {"matchLabels": {"app": "nb"}},
            "template": {
                "metadata": {"labels": {"app": "nb"}},
                "spec": {"containers": [{"name": "c", "image": "x:1"}]},
            },
        },
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(statefulset))
    kube = ReleaseKube(kube_client(str(cluster.admin_kubeconfig)), kube_ns)
    stale = kube.get_statefulset("nb")
    assert stale is not None
    cluster.kubectl("annotate", "statefulset", "nb", "-n", kube_ns, "moved=yes")
    with pytest.raises(ApiException) as conflict:
        kube.scale_to_zero("nb", stale["metadata"]["resourceVersion"])
    assert conflict.value.status == 409
    assert "the object has been modified" in conflict.value.body


def test_a_watch_from_an_expired_resource_version_is_a_real_410(cluster: Cluster, kube_ns: str) -> None:
    """The sidecar follows a trigger with a watch by name from the resourceVersion it read; one older than the
    API server's watch window is answered 410 Gone (as an ERROR event), which the sidecar re-reads on."""
    api = kube_client(str(cluster.admin_kubeconfig))
    custom = client.CustomObjectsApi(api)
    stream = watch.Watch()
    with pytest.raises(ApiException) as gone:
        for _ in stream.stream(
            custom.list_namespaced_custom_object,
            "podsnapshot.gke.io",
            "v1",
            kube_ns,
            "podsnapshotmanualtriggers",
            field_selector="metadata.name=x",
            resource_version="1",
            timeout_seconds=5,
        ):
            pass
    assert gone.value.status == 410


@pytest.fixture
def throttled_sidecar(cluster: Cluster, kube_ns: str, tmp_path: Path) -> Iterator[RealSidecar]:
    """The sidecar's identity in a priority level of its own with one seat and no queue (Reject): API Priority
    and Fairness answers 429 to what does not fit."""
    level = f"{kube_ns}-one-seat"
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration",
            "metadata": {"name": level},
            "spec": {
                "type": "Limited",
                "limited": {"nominalConcurrencyShares": 1, "lendablePercent": 0, "limitResponse": {"type": "Reject"}},
            },
        },
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": level},
            "spec": {
                "priorityLevelConfiguration": {"name": level},
                "matchingPrecedence": 100,
                "rules": [
                    {
                        "subjects": [
                            {
                                "kind": "ServiceAccount",
                                "serviceAccount": {"name": "jupyter-suspend-sidecar", "namespace": kube_ns},
                            }
                        ],
                        "resourceRules": [
                            {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"]}
                        ],
                    }
                ],
            },
        },
    ]
    notebook = deploy_base(cluster, kube_ns)
    cluster.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    sidecar = RealSidecar(cluster, kube_ns, notebook, tmp_path / "sidecar", sidecar_args(cluster, kube_ns))
    sidecar.start(bound_token(cluster, kube_ns, "jupyter-suspend-sidecar", notebook))
    try:
        yield sidecar
    finally:
        sidecar.stop()
        for obj in objects:
            cluster.kubectl("delete", obj["kind"].lower(), obj["metadata"]["name"], "--wait=false", check=False)


def test_throttling_by_the_real_api_server_reaches_the_caller_as_retryable(
    cluster: Cluster, kube_ns: str, throttled_sidecar: RealSidecar, tmp_path: Path
) -> None:
    """Other clients of the same identity fill the one seat (16 threads listing); the sidecar's own calls are then
    refused with 429 by the real API server, and the caller hears a retryable answer, not a crash."""
    token = cluster.kubectl("create", "token", "jupyter-suspend-sidecar", "-n", kube_ns).strip()
    stop = threading.Event()

    def hammer(index: int) -> None:
        api = config.new_client_from_config(str(token_kubeconfig(cluster, tmp_path / f"kc{index}", token, kube_ns)))
        custom = client.CustomObjectsApi(api)
        try:
            while not stop.is_set():
                with contextlib.suppress(ApiException):
                    custom.list_namespaced_custom_object("podsnapshot.gke.io", "v1", kube_ns, "podsnapshots")
        finally:
            api.close()

    hammers = [threading.Thread(target=hammer, args=(index,)) for index in range(16)]
    for thread in hammers:
        thread.start()
    answers: list[tuple[int, dict[str, Any]]] = []

    def ask() -> None:
        for _ in range(5):
            answers.append(throttled_sidecar.raw_get("/v1/snapshots"))

    try:
        time.sleep(1)
        askers = [threading.Thread(target=ask) for _ in range(12)]
        for thread in askers:
            thread.start()
        for thread in askers:
            thread.join(120)
    finally:
        stop.set()
        for thread in hammers:
            thread.join(30)
    throttled = [body for status, body in answers if status != 200]
    assert throttled, f"no answer of {len(answers)} was throttled: {answers[:3]}"
    for body in throttled:
        assert body.get("retryable") is True, body
        assert (
            "429" in json.dumps(body) or "throttl" in json.dumps(body).lower() or "busy" in json.dumps(body).lower()
        ), body
    assert "Traceback" not in throttled_sidecar.log()


def test_a_restarted_api_server_under_a_running_sidecar(cluster: Cluster, kube_ns: str, tmp_path: Path) -> None:
    notebook = deploy_base(cluster, kube_ns)
    sidecar = RealSidecar(cluster, kube_ns, notebook, tmp_path / "sidecar", sidecar_args(cluster, kube_ns))
    sidecar.start(bound_token(cluster, kube_ns, "jupyter-suspend-sidecar", notebook))
    try:
        assert asyncio.run(sidecar.client.pod())["uid"] == notebook["metadata"]["uid"]
        cluster.restart_apiserver()
        # Pooled connections died with the old process; the next call connects again.
        assert asyncio.run(sidecar.client.pod())["uid"] == notebook["metadata"]["uid"]
    finally:
        sidecar.stop()
