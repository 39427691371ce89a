"""tests/cluster/faults.py itself, with the real API server behind it: calls pass through with the caller's own
token (the real authorizer decides), a fault answers with a real Status and Retry-After, a watch streams event by
event and can be cut, an answer can be delayed or cut mid-body."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from tests.cluster.control_plane import Cluster
from tests.cluster.faults import FaultProxy, parse_call

pytestmark = [pytest.mark.cluster]


@pytest.fixture
def proxy(cluster: Cluster) -> Iterator[FaultProxy]:
    with FaultProxy(cluster) as running:
        yield running


def body(obj: dict[str, Any]) -> Any:
    """A ConfigMap as a plain dict (the client serializes it as it is)."""
    return obj


def api_through(
    proxy: FaultProxy, cluster: Cluster, token: str, namespace: str, path: Path, retries: Any = False
) -> client.ApiClient:
    """A client through the proxy; by default without urllib3's retries (as the sidecar's: a fault reaches the
    caller), ``retries=None`` for the kubernetes client's default."""
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "p", "cluster": {"server": proxy.server, "certificate-authority": str(cluster.ca_file)}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "p", "context": {"cluster": "p", "user": "u", "namespace": namespace}}],
        "current-context": "p",
    }
    path.write_text(json.dumps(kubeconfig))
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=configuration)
    configuration.retries = retries
    return client.ApiClient(configuration)


@pytest.fixture
def editor(cluster: Cluster, kube_ns: str, proxy: FaultProxy, tmp_path: Path) -> Iterator[client.CoreV1Api]:
    """A ServiceAccount with the built-in `edit` ClusterRole in this namespace only, talking through the proxy."""
    cluster.kubectl("create", "serviceaccount", "editor", "-n", kube_ns)
    cluster.kubectl(
        "create", "rolebinding", "editor", "-n", kube_ns, "--clusterrole=edit", f"--serviceaccount={kube_ns}:editor"
    )
    token = cluster.kubectl("create", "token", "editor", "-n", kube_ns).strip()
    api = api_through(proxy, cluster, token, kube_ns, tmp_path / "editor.kubeconfig")
    try:
        yield client.CoreV1Api(api)
    finally:
        api.close()


def test_parse_call_names_calls_as_rbac_does() -> None:
    assert parse_call("GET", "/api/v1/namespaces/a/pods/notebook-0").triple == ("", "pods", "get")
    watch_call = parse_call(
        "GET", "/apis/podsnapshot.gke.io/v1/namespaces/a/podsnapshots?watch=true&fieldSelector=metadata.name%3Dx"
    )
    assert (watch_call.triple, watch_call.name, watch_call.namespace) == (
        ("podsnapshot.gke.io", "podsnapshots", "watch"),
        "x",
        "a",
    )
    assert parse_call("DELETE", "/api/v1/namespaces/a/configmaps").verb == "deletecollection"
    assert parse_call("PATCH", "/apis/apps/v1/namespaces/a/statefulsets/nb/scale").subresource == "scale"
    assert parse_call("GET", "/api/v1/namespaces/a").triple == ("", "namespaces", "get")


def test_issue16_item4_calls_pass_with_the_callers_token_and_the_real_authorizer_decides(
    cluster: Cluster, kube_ns: str, proxy: FaultProxy, editor: client.CoreV1Api
) -> None:
    editor.create_namespaced_config_map(kube_ns, body({"metadata": {"name": "c1"}, "data": {"k": "v"}}))
    assert editor.read_namespaced_config_map("c1", kube_ns).data == {"k": "v"}
    with pytest.raises(ApiException) as denied:
        editor.list_namespaced_config_map("kube-system")  # another namespace: the real RBAC says no
    assert denied.value.status == 403
    assert "cannot list resource" in str(denied.value.body)
    assert [(c.verb, c.resource, c.namespace, c.status) for c in proxy.calls] == [
        ("create", "configmaps", kube_ns, 201),
        ("get", "configmaps", kube_ns, 200),
        ("list", "configmaps", "kube-system", 403),
    ]
    assert [c.namespace for c in proxy.rejected()] == ["kube-system"]


@pytest.mark.parametrize(
    ("status", "reason", "retry_after"),
    [(500, "InternalError", None), (503, "ServiceUnavailable", None), (429, "TooManyRequests", 3)],
)
def test_issue16_item4_a_fault_is_a_real_status_and_counts_down(
    kube_ns: str, proxy: FaultProxy, editor: client.CoreV1Api, status: int, reason: str, retry_after: int | None
) -> None:
    proxy.fail("GET", r"/configmaps$", status, times=2, retry_after=retry_after)
    for _ in range(2):
        with pytest.raises(ApiException) as fault:
            editor.list_namespaced_config_map(kube_ns)
        assert fault.value.status == status
        body = json.loads(str(fault.value.body))
        assert (body["kind"], body["status"], body["reason"], body["code"]) == ("Status", "Failure", reason, status)
        if retry_after is not None:
            assert dict(fault.value.headers or {})["Retry-After"] == str(retry_after)
            assert body["details"]["retryAfterSeconds"] == retry_after
    assert editor.list_namespaced_config_map(kube_ns).items is not None  # the third passes
    assert [c.injected for c in proxy.calls] == ["fail", "fail", None]


def test_issue16_item4_the_kubernetes_clients_default_honours_retry_after(
    cluster: Cluster, kube_ns: str, proxy: FaultProxy, editor: client.CoreV1Api, tmp_path: Path
) -> None:
    """What a client without ``retries`` configured does (the CLI's, jupyter_suspend/cli/kube.py): urllib3's
    default Retry(total=3) sleeps Retry-After and asks again on a 429 or 503 that carries it (urllib3
    util/retry.py, RETRY_AFTER_STATUS_CODES) -- the caller never sees two throttled answers."""
    token = cluster.kubectl("create", "token", "editor", "-n", kube_ns).strip()
    api = api_through(proxy, cluster, token, kube_ns, tmp_path / "default.kubeconfig", retries=None)
    try:
        proxy.fail("GET", r"/configmaps$", 429, times=2, retry_after=1)
        started = time.monotonic()
        listed = client.CoreV1Api(api).list_namespaced_config_map(kube_ns).items
        assert "kube-root-ca.crt" in [
            item.metadata.name for item in listed if item.metadata
        ]  # the real answer, at the third ask
        assert time.monotonic() - started >= 2.0
        assert [c.injected for c in proxy.calls] == ["fail", "fail", None]
    finally:
        api.close()


def test_issue16_item4_a_watch_streams_event_by_event_and_can_be_cut(
    kube_ns: str, proxy: FaultProxy, editor: client.CoreV1Api
) -> None:
    # Streaming: the first event arrives while the watch is still open (not buffered until it ends).
    seen: list[tuple[str, float]] = []

    def follow() -> None:
        for event in watch.Watch().stream(
            editor.list_namespaced_config_map, kube_ns, label_selector="probe", timeout_seconds=20
        ):
            seen.append((event["object"].metadata.name, time.monotonic()))
            if len(seen) == 2:
                return

    thread = threading.Thread(target=follow)
    thread.start()
    deadline = time.monotonic() + 20
    while proxy.open_watches == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    editor.create_namespaced_config_map(kube_ns, body({"metadata": {"name": "first", "labels": {"probe": "1"}}}))
    while not seen and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [name for name, _ in seen] == ["first"], "the event was not relayed while the watch stayed open"
    assert proxy.open_watches == 1
    editor.create_namespaced_config_map(kube_ns, body({"metadata": {"name": "second", "labels": {"probe": "1"}}}))
    thread.join(20)
    assert [name for name, _ in seen] == ["first", "second"]

    # Cut after one event, cleanly: the stream ends as at the API server's timeout.
    proxy.cut_watch(r"/configmaps$", after_events=1)
    started = time.monotonic()
    names = [
        e["object"].metadata.name
        for e in watch.Watch().stream(
            editor.list_namespaced_config_map, kube_ns, label_selector="probe", timeout_seconds=20
        )
    ]
    assert len(names) == 1
    assert time.monotonic() - started < 10  # ended by the cut, not by the 20 s timeout
    # Cut abruptly: the connection drops mid-stream, and the client sees a broken stream.
    proxy.cut_watch(r"/configmaps$", after_events=1, abrupt=True)
    with pytest.raises((urllib3.exceptions.ProtocolError, urllib3.exceptions.HTTPError)):
        for _ in watch.Watch().stream(
            editor.list_namespaced_config_map, kube_ns, label_selector="probe", timeout_seconds=20
        ):
            pass
    assert [c.injected for c in proxy.calls if c.verb == "watch"] == [None, "cut_watch", "cut_watch"]


def test_issue16_item4_a_delayed_answer_and_an_answer_cut_mid_body(
    kube_ns: str, proxy: FaultProxy, editor: client.CoreV1Api
) -> None:
    editor.create_namespaced_config_map(kube_ns, body({"metadata": {"name": "c"}, "data": {"k": "v" * 4000}}))
    proxy.delay("GET", r"/configmaps/c$", 2.0)
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        editor.read_namespaced_config_map("c", kube_ns, _request_timeout=0.5)
    proxy.hang_up("GET", r"/configmaps/c$")
    with pytest.raises((urllib3.exceptions.ProtocolError, urllib3.exceptions.HTTPError)):
        editor.read_namespaced_config_map("c", kube_ns)
    assert (editor.read_namespaced_config_map("c", kube_ns).data or {})["k"] == "v" * 4000
