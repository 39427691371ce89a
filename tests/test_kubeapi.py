"""Self-tests of the Kubernetes test API server (tests/kubeapi) and its simulated controllers, through the real
`kubernetes` client over HTTPS, configured in-cluster and from a kubeconfig.

Only the parts still used once the Kubernetes tests are on the real control plane (issue 16) are tested here: the
server core (TLS, tokens, CRUD, patches, status, selectors, watches, finalizers, admission) and the GKE simulation,
which tests/test_snapshots_api.py and tests/test_gke_workspaces.py still run on. Its fault injection
(``fail_next``/``delay_next``) and call record gave way to tests/cluster/faults.py's proxy in front of the real API
server, its StatefulSet scaling and pod restore to the real StatefulSet controller and tests/cluster/gke.py."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.config.incluster_config import InClusterConfigLoader

from tests.kubeapi import (
    Call,
    GKESnapshotController,
    KubeAPI,
    condition,
    wait_until,
)

NS = "team-a"
PS = "podsnapshot.gke.io"
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


# --- fixtures -------------------------------------------------------------------------------------------------------


def incluster_client(kube: KubeAPI, directory: Path, namespace: str = NS) -> client.ApiClient:
    env = kube.incluster_files(directory, namespace)
    configuration = client.Configuration()
    loader = InClusterConfigLoader(
        token_filename=str(directory / "token"), cert_filename=str(directory / "ca.crt"), environ=env
    )
    loader.load_and_set(configuration)
    configuration.retries = False
    return client.ApiClient(configuration)


@pytest.fixture
def kube(kube_api: KubeAPI) -> KubeAPI:
    return kube_api


@pytest.fixture
def api(kube: KubeAPI, tmp_path: Path) -> Iterator[client.ApiClient]:
    api_client = incluster_client(kube, tmp_path / "serviceaccount")
    yield api_client
    api_client.close()


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture
def gke(kube: KubeAPI) -> GKESnapshotController:
    return GKESnapshotController(kube, checkpoint_seconds=0.05, upload_seconds=0.05).attach()


def pod(name: str, labels: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
        "spec": {"containers": [{"name": "notebook", "image": "jupyter/gpu:1"}]},
    }
    if status:
        body["status"] = status
    return body


def error_of(excinfo: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body = json.loads(excinfo.value.body)
    assert body["kind"] == "Status"
    assert body["code"] == excinfo.value.status
    return body  # type: ignore[no-any-return]


def raw(kube: KubeAPI, method: str, path: str, body: bytes | None = None, **headers: str) -> urllib3.BaseHTTPResponse:
    http = urllib3.PoolManager(ca_certs=kube.ca_path, retries=False)
    return http.request(method, kube.url + path, body=body, headers=headers, preload_content=True)


# --- configuration, TLS, authentication -----------------------------------------------------------------------------


def test_incluster_configuration_reaches_the_server(kube: KubeAPI, tmp_path: Path) -> None:
    directory = tmp_path / "sa"
    env = kube.incluster_files(directory, "notebooks")
    assert env == {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(kube.port)}
    assert (directory / "namespace").read_text() == "notebooks"
    assert (directory / "token").read_text() == kube.token
    configuration = client.Configuration()
    InClusterConfigLoader(
        token_filename=str(directory / "token"), cert_filename=str(directory / "ca.crt"), environ=env
    ).load_and_set(configuration)
    assert configuration.host == kube.url
    core = client.CoreV1Api(client.ApiClient(configuration))
    core.create_namespaced_config_map("notebooks", {"metadata": {"name": "cm"}, "data": {"k": "v"}})
    assert kube.get("v1", "ConfigMap", "notebooks", "cm")["data"] == {"k": "v"}  # type: ignore[index]
    assert kube.calls == [Call("create", "", "v1", "configmaps", None, "notebooks", None)]


def test_kubeconfig_reaches_the_server(kube: KubeAPI, tmp_path: Path) -> None:
    path = kube.kubeconfig(tmp_path / "config", namespace="from-kubeconfig")
    configuration = client.Configuration()
    config.load_kube_config(config_file=path, client_configuration=configuration)
    _, active = config.list_kube_config_contexts(config_file=path)
    namespace = active["context"]["namespace"]
    assert namespace == "from-kubeconfig"
    apps = client.AppsV1Api(client.ApiClient(configuration))
    created = apps.create_namespaced_stateful_set(
        namespace, {"metadata": {"name": "nb"}, "spec": {"replicas": 0, "selector": {}, "template": {}}}
    )
    assert created.metadata.namespace == "from-kubeconfig"
    assert apps.read_namespaced_stateful_set("nb", namespace).spec.replicas == 0


def test_tls_with_another_ca_fails(kube: KubeAPI, tmp_path: Path) -> None:
    api = incluster_client(kube, tmp_path / "sa")
    other_ca = tmp_path / "other-ca.crt"
    other_ca.write_bytes(trustme.CA().cert_pem.bytes())
    configuration = api.configuration
    configuration.ssl_ca_cert = str(other_ca)
    with pytest.raises(ApiException) as excinfo:  # client 37 wraps the SSLError: status 0
        client.CoreV1Api(client.ApiClient(configuration)).list_namespaced_pod(NS)
    assert excinfo.value.status == 0
    assert "CERTIFICATE_VERIFY_FAILED" in str(excinfo.value.reason)
    assert kube.calls == []


@pytest.mark.parametrize("header", [None, "Bearer wrong-token", "Basic abc"])
def test_requests_without_the_token_are_refused_and_nothing_is_stored(
    kube: KubeAPI, tmp_path: Path, header: str | None
) -> None:
    configuration = client.Configuration(host=kube.url, ssl_ca_cert=kube.ca_path)
    if header is not None:  # (an in-cluster configuration would put its own token back before every request)
        configuration.api_key = {"BearerToken": header}
    with pytest.raises(ApiException) as excinfo:
        client.CoreV1Api(client.ApiClient(configuration)).create_namespaced_pod(NS, pod("intruder"))
    assert excinfo.value.status == 401
    assert error_of(excinfo)["reason"] == "Unauthorized"
    assert kube.objects("pods") == []
    assert kube.calls == []
    assert kube.rejected == [Call("create", "", "v1", "pods", None, NS, None, allowed=False)]


def test_the_bearer_scheme_is_case_insensitive(kube: KubeAPI) -> None:
    for scheme in ("Bearer", "bearer", "BEARER"):
        response = raw(kube, "GET", f"/api/v1/namespaces/{NS}/pods", Authorization=f"{scheme} {kube.token}")
        assert response.status == 200, scheme
        assert json.loads(response.data)["kind"] == "PodList"
    assert [call.verb for call in kube.calls] == ["list"] * 3


# --- create, get, errors ----------------------------------------------------------------------------------------------


def test_create_answers_201_with_the_stored_object(kube: KubeAPI, core: client.CoreV1Api) -> None:
    created, status_code, _ = core.create_namespaced_pod_with_http_info(NS, pod("nb-0", {"app": "nb"}, phase="Running"))
    assert status_code == 201
    assert re.fullmatch(r"[0-9a-f-]{36}", created.metadata.uid)
    assert int(created.metadata.resource_version) > 0
    raw_answer = core.create_namespaced_pod(NS, pod("raw"), _preload_content=False)
    assert raw_answer.status == 201
    assert RFC3339.match(json.loads(raw_answer.data)["metadata"]["creationTimestamp"])
    assert created.metadata.creation_timestamp.tzinfo is not None
    assert created.metadata.namespace == NS
    assert created.status.phase == "Pending"  # status is the server's, not the client's
    again = core.read_namespaced_pod("nb-0", NS)
    assert again.metadata.uid == created.metadata.uid
    assert again.metadata.labels == {"app": "nb"}
    assert int(core.read_namespaced_pod("raw", NS).metadata.resource_version) > int(created.metadata.resource_version)


def test_generate_name(kube: KubeAPI, custom: client.CustomObjectsApi) -> None:
    body = {"apiVersion": f"{PS}/v1", "kind": "PodSnapshotManualTrigger", "metadata": {"generateName": "suspend-"}}
    first = custom.create_namespaced_custom_object(PS, "v1", NS, "podsnapshotmanualtriggers", body)
    second = custom.create_namespaced_custom_object(PS, "v1", NS, "podsnapshotmanualtriggers", body)
    assert re.fullmatch(r"suspend-[a-z0-9]{5}", first["metadata"]["name"])
    assert first["metadata"]["name"] != second["metadata"]["name"]
    assert len(kube.objects("podsnapshotmanualtriggers")) == 2


def test_already_exists_and_not_found_are_status_objects(
    core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    core.create_namespaced_pod(NS, pod("nb-0"))
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_pod(NS, pod("nb-0"))
    assert excinfo.value.status == 409
    body = error_of(excinfo)
    assert body["reason"] == "AlreadyExists"
    assert body["details"] == {"name": "nb-0", "group": "", "kind": "pods"}
    with pytest.raises(ApiException) as excinfo:
        core.read_namespaced_pod("missing", NS)
    assert excinfo.value.status == 404
    assert error_of(excinfo)["reason"] == "NotFound"
    assert error_of(excinfo)["message"] == 'pods "missing" not found'
    with pytest.raises(ApiException) as excinfo:
        custom.get_namespaced_custom_object(PS, "v1", NS, "podsnapshots", "gone")
    body = error_of(excinfo)
    assert (excinfo.value.status, body["reason"]) == (404, "NotFound")
    assert body["details"] == {"name": "gone", "group": PS, "kind": "podsnapshots"}


def test_unknown_resources_and_malformed_bodies(kube: KubeAPI, custom: client.CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as excinfo:
        custom.list_namespaced_custom_object(PS, "v1", NS, "podsnapshotz")
    assert (excinfo.value.status, error_of(excinfo)["reason"]) == (404, "NotFound")
    with pytest.raises(ApiException) as excinfo:
        custom.list_namespaced_custom_object("example.com", "v1", NS, "widgets")
    assert excinfo.value.status == 404
    auth = {"Authorization": f"Bearer {kube.token}", "Content-Type": "application/json"}
    response = raw(kube, "POST", f"/api/v1/namespaces/{NS}/configmaps", b"{not json", **auth)
    assert response.status == 400
    assert json.loads(response.data)["reason"] == "BadRequest"
    response = raw(kube, "POST", f"/api/v1/namespaces/{NS}/configmaps", b'{"metadata": {"name": "Bad_Name"}}', **auth)
    assert (response.status, json.loads(response.data)["reason"]) == (422, "Invalid")
    assert kube.objects("configmaps") == []


def test_cluster_scoped_custom_resources(kube: KubeAPI, custom: client.CustomObjectsApi) -> None:
    body = {
        "apiVersion": f"{PS}/v1",
        "kind": "PodSnapshotStorageConfig",
        "metadata": {"name": "gcs"},
        "spec": {"snapshotStorageConfig": {"gcs": {"bucket": "b", "path": "p"}}},
    }
    created = custom.create_cluster_custom_object(PS, "v1", "podsnapshotstorageconfigs", body)
    assert "namespace" not in created["metadata"]
    assert custom.get_cluster_custom_object(PS, "v1", "podsnapshotstorageconfigs", "gcs")["spec"] == body["spec"]
    listed = custom.list_cluster_custom_object(PS, "v1", "podsnapshotstorageconfigs")
    assert listed["kind"] == "PodSnapshotStorageConfigList"
    assert [item["metadata"]["name"] for item in listed["items"]] == ["gcs"]
    assert kube.calls[-1] == Call("list", PS, "v1", "podsnapshotstorageconfigs")


# --- update, patch, status subresource --------------------------------------------------------------------------------


def test_update_with_a_stale_resource_version_conflicts(
    core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    created = core.create_namespaced_config_map(NS, {"metadata": {"name": "cm"}, "data": {"v": "1"}})
    created.data = {"v": "2"}
    updated = core.replace_namespaced_config_map("cm", NS, created)
    assert updated.data == {"v": "2"}
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
    created.data = {"v": "3"}  # still carries the first resourceVersion
    with pytest.raises(ApiException) as excinfo:
        core.replace_namespaced_config_map("cm", NS, created)
    assert (excinfo.value.status, error_of(excinfo)["reason"]) == (409, "Conflict")
    assert core.read_namespaced_config_map("cm", NS).data == {"v": "2"}
    notebook = {"apiVersion": "kubeflow.org/v1", "kind": "Notebook", "metadata": {"name": "nb"}, "spec": {"a": 1}}
    custom.create_namespaced_custom_object("kubeflow.org", "v1", NS, "notebooks", notebook)
    with pytest.raises(ApiException) as excinfo:  # custom resources need a resourceVersion on update
        custom.replace_namespaced_custom_object("kubeflow.org", "v1", NS, "notebooks", "nb", notebook)
    assert (excinfo.value.status, error_of(excinfo)["reason"]) == (422, "Invalid")


def test_merge_and_json_patches(core: client.CoreV1Api, custom: client.CustomObjectsApi) -> None:
    body = {
        "apiVersion": "kubeflow.org/v1beta1",
        "kind": "Workspace",
        "metadata": {"name": "ws", "annotations": {"a": "1", "b": "2"}},
        "spec": {"paused": False, "podTemplate": {"volumes": ["home"]}},
    }
    created = custom.create_namespaced_custom_object("kubeflow.org", "v1beta1", NS, "workspaces", body)
    merged = custom.patch_namespaced_custom_object(
        "kubeflow.org",
        "v1beta1",
        NS,
        "workspaces",
        "ws",
        {"metadata": {"annotations": {"a": None}}, "spec": {"paused": True}},
    )  # the custom-objects client sends merge patch for a dict by default
    assert merged["metadata"]["annotations"] == {"b": "2"}
    assert merged["spec"] == {"paused": True, "podTemplate": {"volumes": ["home"]}}
    assert merged["metadata"]["generation"] == created["metadata"]["generation"] + 1
    patched = custom.patch_namespaced_custom_object(
        "kubeflow.org",
        "v1beta1",
        NS,
        "workspaces",
        "ws",
        [
            {"op": "test", "path": "/spec/paused", "value": True},
            {"op": "add", "path": "/spec/podTemplate/volumes/-", "value": "data"},
            {"op": "replace", "path": "/metadata/annotations/b", "value": "3"},
        ],
        _content_type=JSON_PATCH,
    )
    assert patched["spec"]["podTemplate"]["volumes"] == ["home", "data"]
    assert patched["metadata"]["annotations"] == {"b": "3"}
    with pytest.raises(ApiException) as excinfo:  # a failing test operation changes nothing
        custom.patch_namespaced_custom_object(
            "kubeflow.org",
            "v1beta1",
            NS,
            "workspaces",
            "ws",
            [{"op": "test", "path": "/spec/paused", "value": False}, {"op": "remove", "path": "/spec"}],
            _content_type=JSON_PATCH,
        )
    assert excinfo.value.status == 422
    assert custom.get_namespaced_custom_object("kubeflow.org", "v1beta1", NS, "workspaces", "ws")["spec"]["paused"]
    with pytest.raises(ApiException) as excinfo:  # strategic merge is for built-in kinds only
        custom.patch_namespaced_custom_object(
            "kubeflow.org", "v1beta1", NS, "workspaces", "ws", {"spec": {}}, _content_type=STRATEGIC
        )
    assert (excinfo.value.status, error_of(excinfo)["reason"]) == (415, "UnsupportedMediaType")
    core.create_namespaced_pod(NS, pod("p"))
    labelled = core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"x": "y"}}}, _content_type=MERGE)
    assert labelled.metadata.labels == {"x": "y"}


def test_strategic_merge_patch_merges_conditions_by_type(kube: KubeAPI, core: client.CoreV1Api) -> None:
    kube.create(
        pod(
            "p",
            phase="Running",
            conditions=[{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
        )
    )
    patched = core.patch_namespaced_pod_status(  # a dict: client 37 sends a strategic merge patch
        "p", NS, {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Suspending"}]}}
    )
    assert [(c.type, c.status) for c in patched.status.conditions] == [("Ready", "False"), ("PodScheduled", "True")]
    merged = core.patch_namespaced_pod_status(
        "p", NS, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, _content_type=MERGE
    )
    assert [(c.type, c.status) for c in merged.status.conditions] == [("Ready", "True")]  # a merge patch replaces lists


def test_status_subresource_is_isolated_both_ways(
    kube: KubeAPI, custom: client.CustomObjectsApi, core: client.CoreV1Api
) -> None:
    args = ("kubeflow.org", "v1beta1", NS, "workspaces")
    body = {
        "apiVersion": "kubeflow.org/v1beta1",
        "kind": "Workspace",
        "metadata": {"name": "ws"},
        "spec": {"paused": False},
    }
    created = custom.create_namespaced_custom_object(*args, {**body, "status": {"state": "Running"}})
    assert "status" not in created  # status is not written through the main resource
    custom.patch_namespaced_custom_object_status(
        *args, "ws", {"status": {"state": "Running"}, "spec": {"paused": True}}
    )
    current = custom.get_namespaced_custom_object(*args, "ws")
    assert current["status"] == {"state": "Running"}
    assert current["spec"] == {"paused": False}  # the status endpoint does not touch spec
    custom.patch_namespaced_custom_object(*args, "ws", {"spec": {"paused": True}, "status": {"state": "Paused"}})
    current = custom.get_namespaced_custom_object(*args, "ws")
    assert current["spec"] == {"paused": True}
    assert current["status"] == {"state": "Running"}  # the main endpoint does not touch status
    current["status"] = {"state": "Error"}
    current["spec"] = {"paused": False}
    replaced = custom.replace_namespaced_custom_object(*args, "ws", current)
    assert (replaced["spec"], replaced["status"]) == ({"paused": False}, {"state": "Running"})
    current = custom.get_namespaced_custom_object(*args, "ws")
    current["status"] = {"state": "Paused"}
    current["spec"] = {"paused": "ignored"}
    replaced = custom.replace_namespaced_custom_object_status(*args, "ws", current)
    assert (replaced["spec"], replaced["status"]) == ({"paused": False}, {"state": "Paused"})
    kube.create(pod("p", {"a": "1"}, phase="Running"))
    core.patch_namespaced_pod(
        "p", NS, {"status": {"phase": "Failed"}, "metadata": {"labels": {"a": "2"}}}, _content_type=MERGE
    )
    read = core.read_namespaced_pod("p", NS)
    assert (read.status.phase, read.metadata.labels) == ("Running", {"a": "2"})
    core.patch_namespaced_pod_status(
        "p", NS, {"status": {"phase": "Succeeded"}, "metadata": {"labels": {"a": "3"}}}, _content_type=MERGE
    )
    read = core.read_namespaced_pod("p", NS)
    assert (read.status.phase, read.metadata.labels) == ("Succeeded", {"a": "2"})


# --- selectors, lists -------------------------------------------------------------------------------------------------


def test_label_and_field_selectors(kube: KubeAPI, core: client.CoreV1Api) -> None:
    kube.create(pod("a", {"app": "nb", "tier": "gpu"}, phase="Running"))
    kube.create(pod("b", {"app": "nb", "tier": "cpu"}, phase="Pending"))
    kube.create(pod("c", {"app": "web"}, phase="Running"))
    kube.create(
        {
            **pod("d", {"app": "nb", "tier": "gpu"}),
            "metadata": {"name": "d", "namespace": "other", "labels": {"app": "nb"}},
        }
    )

    def names(**selectors: str) -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod(NS, **selectors).items]

    assert names(label_selector="app=nb") == ["a", "b"]
    assert names(label_selector="app==nb,tier!=cpu") == ["a"]
    assert names(label_selector="tier") == ["a", "b"]
    assert names(label_selector="!tier") == ["c"]
    assert names(label_selector="tier in (gpu, cpu),app notin (web)") == ["a", "b"]
    assert names(label_selector="app notin (nb)") == ["c"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="status.phase=Running") == ["a", "c"]
    assert names(field_selector="status.phase!=Running,metadata.namespace=team-a") == ["b"]
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces(label_selector="app=nb").items] == ["d", "a", "b"]
    with pytest.raises(ApiException) as excinfo:
        names(field_selector="spec.containers=x")
    assert (excinfo.value.status, error_of(excinfo)["reason"]) == (400, "BadRequest")
    with pytest.raises(ApiException) as excinfo:
        names(label_selector="app in (a")
    assert excinfo.value.status == 400
    first = json.loads(core.list_namespaced_pod(NS, limit=2, _preload_content=False).data)
    assert first["kind"] == "PodList"
    assert [i["metadata"]["name"] for i in first["items"]] == ["a", "b"]
    assert int(first["metadata"]["resourceVersion"]) >= 4
    rest = core.list_namespaced_pod(NS, limit=2, _continue=first["metadata"]["continue"])
    assert [p.metadata.name for p in rest.items] == ["c"]


# --- watch ------------------------------------------------------------------------------------------------------------


def test_watch_from_a_resource_version_in_order_and_ends_at_timeout(kube: KubeAPI, core: client.CoreV1Api) -> None:
    kube.create(pod("before"))
    start = core.list_namespaced_pod(NS).metadata.resource_version
    core.create_namespaced_pod(NS, pod("p", {"v": "1"}))
    core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"v": "2"}}}, _content_type=MERGE)

    def later() -> None:
        time.sleep(0.2)
        core.delete_namespaced_pod("p", NS)

    thread = threading.Thread(target=later)
    thread.start()
    began = time.monotonic()
    events = [
        (event["type"], event["object"].metadata.name, (event["object"].metadata.labels or {}).get("v"))
        for event in watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=start, timeout_seconds=1)
    ]
    elapsed = time.monotonic() - began
    thread.join()
    assert events == [("ADDED", "p", "1"), ("MODIFIED", "p", "2"), ("DELETED", "p", "2")]
    assert 0.9 < elapsed < 3
    assert Call("watch", "", "v1", "pods", None, NS, None) in kube.calls
    assert Call("list", "", "v1", "pods", None, NS, None) in kube.calls


def test_watch_without_resource_version_starts_with_the_current_state(
    kube: KubeAPI, custom: client.CustomObjectsApi
) -> None:
    for name in ("s1", "s2"):
        kube.create(
            {
                "apiVersion": f"{PS}/v1",
                "kind": "PodSnapshot",
                "metadata": {"name": name, "namespace": NS, "labels": {"keep": "yes"}},
            }
        )
    kube.create({"apiVersion": f"{PS}/v1", "kind": "PodSnapshot", "metadata": {"name": "s3", "namespace": NS}})

    def later() -> None:
        time.sleep(0.2)
        kube.patch(f"{PS}/v1", "podsnapshots", NS, "s1", {"metadata": {"labels": {"keep": "no"}}})
        kube.patch(f"{PS}/v1", "podsnapshots", NS, "s3", {"metadata": {"labels": {"keep": "yes"}}})

    thread = threading.Thread(target=later)
    thread.start()
    stream = watch.Watch().stream(
        custom.list_namespaced_custom_object, PS, "v1", NS, "podsnapshots", label_selector="keep=yes", timeout_seconds=1
    )
    events = [(event["type"], event["object"]["metadata"]["name"]) for event in stream]
    thread.join()
    # an object leaving the selector is DELETED for this watch, one entering it is ADDED
    assert events == [("ADDED", "s1"), ("ADDED", "s2"), ("DELETED", "s1"), ("ADDED", "s3")]


def test_watch_spellings_and_raw_event_lines(kube: KubeAPI) -> None:
    kube.create(pod("p"))
    http = urllib3.PoolManager(ca_certs=kube.ca_path, retries=False)
    for spelling in ("true", "True", "1"):
        response = http.request(
            "GET",
            f"{kube.url}/api/v1/namespaces/{NS}/pods?watch={spelling}&timeoutSeconds=30",
            headers={"Authorization": f"Bearer {kube.token}"},
            preload_content=False,
        )
        assert response.status == 200
        assert response.headers.get("Transfer-Encoding") == "chunked"
        event = json.loads(next(iter(response)))
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "p"), spelling
        response.close()  # the server drops the watcher when the client goes away
    wait_until(lambda: not kube._watchers)
    assert [call.verb for call in kube.calls] == ["watch"] * 3


def test_watch_from_an_expired_resource_version_is_gone(tmp_path: Path) -> None:
    with KubeAPI(history=5) as kube:
        core = client.CoreV1Api(incluster_client(kube, tmp_path / "sa"))
        for index in range(10):
            kube.create(pod(f"p{index}"))
        with pytest.raises(ApiException) as excinfo:
            list(watch.Watch().stream(core.list_namespaced_pod, NS, resource_version="2", timeout_seconds=1))
        assert excinfo.value.status == 410
        assert "Expired" in str(excinfo.value.reason)
        recent = [
            e["object"].metadata.name
            for e in watch.Watch().stream(core.list_namespaced_pod, NS, resource_version="8", timeout_seconds=1)
        ]
        assert recent == ["p8", "p9"]


# --- delete and finalizers ------------------------------------------------------------------------------------------


def test_delete_with_finalizers_waits_for_them(kube: KubeAPI, core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map(
        NS, {"metadata": {"name": "cm", "finalizers": ["example.com/a", "example.com/b"]}}
    )
    deleted = core.delete_namespaced_config_map("cm", NS, _preload_content=False)
    assert deleted.status == 200
    body = json.loads(deleted.data)
    assert RFC3339.match(body["metadata"]["deletionTimestamp"])
    assert core.read_namespaced_config_map("cm", NS).metadata.deletion_timestamp is not None
    with pytest.raises(ApiException) as excinfo:  # no new finalizers once deleting
        core.patch_namespaced_config_map(
            "cm", NS, {"metadata": {"finalizers": ["example.com/a", "example.com/b", "c"]}}, _content_type=MERGE
        )
    assert excinfo.value.status == 422
    core.patch_namespaced_config_map("cm", NS, {"metadata": {"finalizers": ["example.com/b"]}}, _content_type=MERGE)
    assert core.read_namespaced_config_map("cm", NS).metadata.finalizers == ["example.com/b"]
    core.patch_namespaced_config_map(
        "cm", NS, [{"op": "remove", "path": "/metadata/finalizers"}], _content_type=JSON_PATCH
    )
    with pytest.raises(ApiException) as excinfo:
        core.read_namespaced_config_map("cm", NS)
    assert excinfo.value.status == 404
    core.create_namespaced_pod(NS, pod("p"))
    gone = core.delete_namespaced_pod("p", NS)
    assert gone.metadata.name == "p"
    assert kube.objects("pods") == []


# --- recording, faults, hooks ---------------------------------------------------------------------------------------


def test_admission_denial_stores_nothing(kube: KubeAPI, core: client.CoreV1Api) -> None:
    seen: list[tuple[str, str]] = []

    def admit(verb: str, obj: dict[str, Any], user: str) -> str | None:
        seen.append((verb, user))
        if (obj["metadata"].get("labels") or {}).get("forbidden") == "yes":
            return "forbidden label"
        return None

    kube.add_admission(admit)
    with pytest.raises(ApiException) as excinfo:
        core.create_namespaced_config_map(NS, {"metadata": {"name": "cm", "labels": {"forbidden": "yes"}}})
    body = error_of(excinfo)
    assert (excinfo.value.status, body["reason"]) == (403, "Forbidden")
    assert "forbidden label" in body["message"]
    assert kube.objects("configmaps") == []
    core.create_namespaced_config_map(NS, {"metadata": {"name": "cm"}})
    with pytest.raises(ApiException) as excinfo:
        core.patch_namespaced_config_map("cm", NS, {"metadata": {"labels": {"forbidden": "yes"}}}, _content_type=MERGE)
    assert excinfo.value.status == 403
    assert kube.get("v1", "configmaps", NS, "cm")["metadata"].get("labels") is None  # type: ignore[index]
    assert seen == [("create", kube.user), ("create", kube.user), ("patch", kube.user)]


def test_controllers_see_committed_changes_and_can_schedule(kube: KubeAPI, core: client.CoreV1Api) -> None:
    seen: list[tuple[str, str, str]] = []
    threads: set[str] = set()

    def controller(event_type: str, obj: dict[str, Any], kube_: KubeAPI) -> None:
        threads.add(threading.current_thread().name)
        seen.append((event_type, obj["kind"], obj["metadata"]["name"]))
        if event_type == "ADDED" and obj["kind"] == "ConfigMap":
            kube_.call_soon(
                lambda: kube_.patch("v1", "configmaps", NS, obj["metadata"]["name"], {"data": {"seen": "1"}}), 0.05
            )

    kube.add_controller(controller)
    core.create_namespaced_config_map(NS, {"metadata": {"name": "cm"}})
    wait_until(lambda: (kube.get("v1", "configmaps", NS, "cm") or {}).get("data") == {"seen": "1"})
    assert seen == [("ADDED", "ConfigMap", "cm"), ("MODIFIED", "ConfigMap", "cm")]
    assert threads == {"kubeapi"}
    assert kube.calls == [Call("create", "", "v1", "configmaps", None, NS, None)]


@pytest.mark.slow
def test_get_stays_fast_over_a_thousand_requests(kube: KubeAPI, core: client.CoreV1Api) -> None:
    kube.create(pod("p"))
    durations = []
    for _ in range(1000):
        began = time.perf_counter()
        response = core.read_namespaced_pod("p", NS, _preload_content=False)
        assert response.status == 200
        assert response.data  # read it all, so the connection goes back to the pool (else: a TLS handshake each)
        response.release_conn()
        durations.append(time.perf_counter() - began)
    first, last = sum(durations[:100]) / 100, sum(durations[-100:]) / 100
    assert last < 2 * first, (first, last)
    assert len(kube.calls) == 1000


# --- the simulated GKE Pod Snapshots controller -----------------------------------------------------------------------


def setup_snapshots(kube: KubeAPI, custom: client.CustomObjectsApi, post_checkpoint: str = "resume") -> None:
    kube.create(pod("nb-0", {"app": "nb", "notebook": "alice"}, phase="Running"))
    custom.create_cluster_custom_object(
        PS,
        "v1",
        "podsnapshotstorageconfigs",
        {"metadata": {"name": "gcs"}, "spec": {"snapshotStorageConfig": {"gcs": {"bucket": "snaps", "path": "lab"}}}},
    )
    custom.create_namespaced_custom_object(
        PS,
        "v1",
        NS,
        "podsnapshotpolicies",
        {
            "metadata": {"name": "alice"},
            "spec": {
                "selector": {
                    "matchLabels": {"app": "nb"},
                    "matchExpressions": [{"key": "notebook", "operator": "In", "values": ["alice"]}],
                },
                "storageConfigName": "gcs",
                "triggerConfig": {"type": "manual", "postCheckpoint": post_checkpoint},
            },
        },
    )


def trigger(custom: client.CustomObjectsApi, name: str = "suspend-1", target: str = "nb-0") -> dict[str, Any]:
    body = {
        "apiVersion": f"{PS}/v1",
        "kind": "PodSnapshotManualTrigger",
        "metadata": {"name": name},
        "spec": {"targetPod": target},
    }
    return custom.create_namespaced_custom_object(PS, "v1", NS, "podsnapshotmanualtriggers", body)  # type: ignore[no-any-return]


def triggered(custom: client.CustomObjectsApi, name: str = "suspend-1") -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        return condition(
            custom.get_namespaced_custom_object(PS, "v1", NS, "podsnapshotmanualtriggers", name), "Triggered"
        )

    return wait_until(done)  # type: ignore[no-any-return]


def test_gke_trigger_to_ready_snapshot(
    kube: KubeAPI, gke: GKESnapshotController, custom: client.CustomObjectsApi
) -> None:
    setup_snapshots(kube, custom)
    trigger(custom)
    stream = watch.Watch().stream(custom.list_namespaced_custom_object, PS, "v1", NS, "podsnapshots", timeout_seconds=2)
    ready_snapshot = None
    for event in stream:
        if (condition(event["object"], "Ready") or {}).get("status") == "True":
            ready_snapshot = event["object"]
            break
    assert ready_snapshot is not None
    name = ready_snapshot["metadata"]["name"]
    assert name.startswith("nb-0-")
    assert ready_snapshot["metadata"]["labels"] == {"gke-pod-snapshot-triggered-by": "suspend-1"}
    assert ready_snapshot["metadata"]["annotations"]["podsnapshot.gke.io/origin-pod"] == "nb-0"
    assert ready_snapshot["metadata"]["annotations"]["simulated.podsnapshot.gke.io/size-bytes"] == str(gke.size_bytes)
    assert ready_snapshot["metadata"]["finalizers"] == ["podsnapshot.gke.io/storage"]
    assert ready_snapshot["spec"] == {"policyName": "alice"}
    status = ready_snapshot["status"]
    assert status["storageStatus"]["gcs"]["observedGCSPath"] == f"gs://snaps/lab/{NS}/nb-0/{name}"
    assert RFC3339.match(status["lastAccessTime"])
    assert condition(ready_snapshot, "Ready")["reason"] == "AllSnapshotsAvailable"  # type: ignore[index]
    checkpoint = condition(ready_snapshot, "Checkpoint")
    assert checkpoint is not None
    assert (checkpoint["status"], checkpoint["reason"]) == ("True", "Succeeded")
    assert RFC3339.match(checkpoint["lastTransitionTime"])
    trig = custom.get_namespaced_custom_object(PS, "v1", NS, "podsnapshotmanualtriggers", "suspend-1")
    assert (condition(trig, "Triggered") or {}).get("reason") == "Complete"
    assert trig["status"]["snapshotCreated"] == {"name": name}
    assert kube.get("v1", "pods", NS, "nb-0")["status"]["phase"] == "Running"  # type: ignore[index]
    assert gke.stopped_pods == []


def test_gke_only_gke_writes_podsnapshots(
    kube: KubeAPI, gke: GKESnapshotController, custom: client.CustomObjectsApi
) -> None:
    body = {
        "apiVersion": f"{PS}/v1",
        "kind": "PodSnapshot",
        "metadata": {"name": "forged"},
        "spec": {"policyName": "x"},
    }
    with pytest.raises(ApiException) as excinfo:
        custom.create_namespaced_custom_object(PS, "v1", NS, "podsnapshots", body)
    assert (excinfo.value.status, error_of(excinfo)["reason"]) == (403, "Forbidden")
    with pytest.raises(ApiException) as excinfo:  # admission sees the defaulted object: kind set by the server
        custom.create_namespaced_custom_object(PS, "v1", NS, "podsnapshots", {"metadata": {"name": "bare"}})
    assert excinfo.value.status == 403
    assert kube.objects("podsnapshots") == []
    kube.create({**body, "metadata": {"name": "real", "namespace": NS}})
    with pytest.raises(ApiException) as excinfo:
        custom.patch_namespaced_custom_object(PS, "v1", NS, "podsnapshots", "real", {"spec": {"policyName": "y"}})
    assert excinfo.value.status == 403
    with pytest.raises(ApiException) as excinfo:
        custom.patch_namespaced_custom_object_status(PS, "v1", NS, "podsnapshots", "real", {"status": {"x": 1}})
    assert excinfo.value.status == 403
    custom.delete_namespaced_custom_object(PS, "v1", NS, "podsnapshots", "real")  # deleting is allowed
    assert kube.objects("podsnapshots") == []


@pytest.mark.parametrize(("behaviour", "reason"), [("trigger_fails", "Failed"), ("trigger_error", "Error")])
def test_gke_trigger_failures(
    kube: KubeAPI, gke: GKESnapshotController, custom: client.CustomObjectsApi, behaviour: str, reason: str
) -> None:
    setup_snapshots(kube, custom)
    gke.behaviour = behaviour
    trigger(custom)
    cond = triggered(custom)
    assert (cond["status"], cond["reason"]) == ("False", reason)
    assert cond["message"]
    time.sleep(0.15)
    assert kube.objects("podsnapshots") == []


def test_gke_trigger_without_a_matching_policy_fails(
    kube: KubeAPI, gke: GKESnapshotController, custom: client.CustomObjectsApi
) -> None:
    setup_snapshots(kube, custom)
    kube.create(pod("other-0", {"app": "nb", "notebook": "bob"}, phase="Running"))
    trigger(custom, target="other-0")
    cond = triggered(custom)
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False",
        "Failed",
        "no PodSnapshotPolicy matches pod other-0",
    )
    assert kube.objects("podsnapshots") == []


def test_gke_checkpoint_fails(kube: KubeAPI, gke: GKESnapshotController, custom: client.CustomObjectsApi) -> None:
    setup_snapshots(kube, custom)
    gke.behaviour = "checkpoint_fails"
    trigger(custom)
    assert triggered(custom)["reason"] == "Complete"
    [snapshot] = wait_until(lambda: kube.objects("podsnapshots"))
    time.sleep(0.2)
    snapshot = kube.get(f"{PS}/v1", "podsnapshots", NS, snapshot["metadata"]["name"])
    assert (condition(snapshot, "Checkpoint") or {}).get("status") == "False"
    assert (condition(snapshot, "Checkpoint") or {}).get("reason") == "Failed"
    assert (condition(snapshot, "Ready") or {}).get("status") == "False"


def test_gke_never_ready(kube: KubeAPI, gke: GKESnapshotController, custom: client.CustomObjectsApi) -> None:
    setup_snapshots(kube, custom)
    gke.behaviour = "never_ready"
    trigger(custom)
    assert triggered(custom)["reason"] == "Complete"
    time.sleep(0.3)
    [snapshot] = kube.objects("podsnapshots")
    ready = condition(snapshot, "Ready") or {}
    assert (ready.get("status"), ready.get("reason")) == ("False", "AwaitingCheckpoint")
    assert (condition(snapshot, "Checkpoint") or {}).get("status") == "True"


def test_gke_post_checkpoint_stop_completes_the_pod(
    kube: KubeAPI, gke: GKESnapshotController, custom: client.CustomObjectsApi, core: client.CoreV1Api
) -> None:
    setup_snapshots(kube, custom, post_checkpoint="stop")
    trigger(custom)
    assert triggered(custom)["reason"] == "Complete"
    read = core.read_namespaced_pod("nb-0", NS)
    assert read.status.phase == "Succeeded"
    assert read.status.container_statuses[0].state.terminated.reason == "Completed"
    assert gke.stopped_pods == ["nb-0"]


def test_gke_deleting_snapshots_deletes_or_orphans_storage(
    kube: KubeAPI, gke: GKESnapshotController, custom: client.CustomObjectsApi
) -> None:
    setup_snapshots(kube, custom)
    snapshots = []
    for name in ("t1", "t2"):
        trigger(custom, name)
        snapshots.append(
            triggered(custom, name)
            and custom.get_namespaced_custom_object(PS, "v1", NS, "podsnapshotmanualtriggers", name)["status"][
                "snapshotCreated"
            ]["name"]
        )
    wait_until(lambda: all((condition(s, "Ready") or {}).get("status") == "True" for s in kube.objects("podsnapshots")))
    paths = {
        s["metadata"]["name"]: s["status"]["storageStatus"]["gcs"]["observedGCSPath"]
        for s in kube.objects("podsnapshots")
    }
    deleted = custom.delete_namespaced_custom_object(PS, "v1", NS, "podsnapshots", snapshots[0])
    assert deleted["metadata"]["deletionTimestamp"]
    wait_until(lambda: kube.get(f"{PS}/v1", "podsnapshots", NS, snapshots[0]) is None)
    assert gke.deleted_storage == [paths[snapshots[0]]]
    custom.delete_namespaced_custom_object(PS, "v1", NS, "podsnapshotpolicies", "alice")  # policy first: orphans
    custom.delete_namespaced_custom_object(PS, "v1", NS, "podsnapshots", snapshots[1])
    wait_until(lambda: kube.get(f"{PS}/v1", "podsnapshots", NS, snapshots[1]) is None)
    assert gke.orphaned_storage == [paths[snapshots[1]]]
    assert gke.deleted_storage == [paths[snapshots[0]]]


# --- the simulated StatefulSet controller ---------------------------------------------------------------------------
