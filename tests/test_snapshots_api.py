"""``GET snapshots`` and ``DELETE snapshots/NAME``: on the local backend (a real in-process jupyter_server:
``supported: false``, bad input refused) and on the gke backend (a real ``jupyter server`` process, the real
sidecar, the real control plane of tests/cluster/ with the simulated GKE snapshot controller, and
tests/cluster/faults.py's proxy for the API server's 5xx). Every answer is held to the OpenAPI document
(``check_answer``)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_suspend.common.api import API_PREFIX
from jupyter_suspend.server import snapshots
from jupyter_suspend.server.backends.base import Capabilities
from jupyter_suspend.server.backends.local import LocalBackend
from jupyter_suspend.server.openapi import check_answer
from jupyter_suspend.server.states import State
from tests.cluster.control_plane import Cluster
from tests.cluster.faults import FaultProxy
from tests.cluster.gke import GKESnapshotController
from tests.cluster.notebook import RealSidecar, bound_token, get, wait_for
from tests.gke_server import GKEServer
from tests.test_gke_backend import POD, POLICY, SIDECAR_ACCOUNT, Notebook, start_notebook, stop_notebook

from .conftest import API, SuspendClient

ONE = "snapshots/{name}"  # the OpenAPI path of DELETE


# -- local backend: no snapshots, and bad input changes nothing ------------------------------------------------------


async def delete(suspend_api: SuspendClient, name: str, body: bytes | None = None) -> tuple[int, dict[str, Any]]:
    kwargs: dict[str, Any] = {"method": "DELETE"}
    if body is not None:
        kwargs["body"] = body
        kwargs["allow_nonstandard_methods"] = True
    try:
        response = await suspend_api.fetch(API, "snapshots", name, **kwargs)  # jp_fetch URL-escapes the name
    except HTTPClientError as exc:
        if exc.response is None:  # a timeout, not an answer
            raise
        response = exc.response
    check_answer("DELETE", ONE, response.code, response.body)
    return response.code, json.loads(response.body)


async def test_local_backend_says_it_keeps_no_snapshots(suspend_api: SuspendClient) -> None:
    answer = await suspend_api.json("GET", "snapshots")
    assert answer["supported"] is False
    assert answer["snapshots"] == []
    assert answer["would_restore"] is None
    assert answer["backend"] == "local"
    assert answer["state"] == "running"
    assert answer["reason"].startswith("The local backend keeps no snapshots")
    assert "application checkpoints" in answer["reason"]
    code, error = await delete(suspend_api, "notebook-0-abcd")
    assert code == 404, error
    assert "keeps no snapshots" in error["message"], error


@pytest.mark.parametrize("name", ["Bad_Name", "..", "a..b", "a.-b", "a%2Fb", "x\n", "-lead", "a" * 254, "é", "a b"])
async def test_a_name_that_is_not_an_object_name_is_400(suspend_api: SuspendClient, name: str) -> None:
    before = await suspend_api.status()
    code, error = await delete(suspend_api, name)
    assert code == 400, error
    assert "not a valid Kubernetes object name" in error["message"], error
    after = await suspend_api.status()
    assert (after["state"], after["operation"]) == (before["state"], before["operation"])


async def test_a_delete_with_a_body_is_400(suspend_api: SuspendClient) -> None:
    code, error = await delete(suspend_api, "notebook-0-abcd", body=b'{"force": true}')
    assert code == 400, error
    assert "no body" in error["message"], error


async def test_delete_needs_authentication_and_the_xsrf_token(jp_fetch: Any, jp_serverapp: Any) -> None:
    async def refused(headers: dict[str, str]) -> HTTPClientError:
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch(API, "snapshots", "notebook-0-abcd", method="DELETE", headers=headers)
        return info.value

    # No credentials at all (an empty Authorization overrides the fixture's token).
    assert (await refused({"Authorization": ""})).code == 403
    # A browser's login cookie without the X-XSRFToken header: refused before the handler runs.
    token = jp_serverapp.identity_provider.token
    login = await jp_fetch("api", "status", params={"token": token}, headers={"Authorization": ""})
    login_cookie = next(c.split(";", 1)[0] for c in login.headers.get_list("Set-Cookie") if c.startswith("username-"))
    xsrf = "0123456789abcdef"  # double submit: the cookie and the header must agree (tornado's v1 token form)
    cookies = f"{login_cookie}; _xsrf={xsrf}"
    error = await refused({"Authorization": "", "Cookie": cookies})
    assert error.code == 403
    assert error.response is not None
    assert b"_xsrf' argument missing" in error.response.body
    # The same cookie with the header reaches the handler (404: the local backend keeps no snapshots).
    error = await refused({"Authorization": "", "Cookie": cookies, "X-XSRFToken": xsrf})
    assert error.code == 404
    assert error.response is not None
    assert b"keeps no snapshots" in error.response.body


# -- pure: what a resume needs -------------------------------------------------------------------------------------


def summary(name: str, created: str, ready: bool = True, reason: str = "AllSnapshotsAvailable") -> dict[str, Any]:
    return {"name": name, "created": created, "ready": ready, "ready_reason": reason, "deleting": False}


def test_the_resume_needs_the_newest_ready_snapshot_and_the_one_uploading() -> None:
    old = summary("nb-0-old", "2026-01-01T00:00:00Z")
    new = summary("nb-0-new", "2026-01-02T00:00:00Z")
    uploading = summary("nb-0-up", "2026-01-03T00:00:00Z", ready=False, reason="AwaitingCheckpoint")
    failed = summary("nb-0-bad", "2026-01-04T00:00:00Z", ready=False, reason="CheckpointFailed")
    candidate = snapshots.restore_candidate([old, new, uploading, failed])
    assert candidate == "nb-0-new"
    for state in (State.RUNNING, State.READY, State.FAILED):
        assert all(snapshots.protection(s, candidate, state) is None for s in (old, new, uploading, failed))
    for state in snapshots.RESUME_NEEDS_SNAPSHOT:
        assert snapshots.protection(old, candidate, state) is None
        assert snapshots.protection(failed, candidate, state) is None
        assert "a resume restores" in str(snapshots.protection(new, candidate, state))
        assert "being uploaded" in str(snapshots.protection(uploading, candidate, state))


def test_the_unsupported_sentence_comes_from_the_capabilities() -> None:
    backend = LocalBackend()
    assert "application checkpoints" in snapshots.unsupported_reason(backend)
    backend.capabilities = Capabilities(keeps_application_checkpoints=False)
    assert "application checkpoints" not in snapshots.unsupported_reason(backend)


def test_a_size_is_shown_where_one_is_reported_and_never_guessed() -> None:
    """GKE documents no size field (platform-facts §1), and our CRD (written from it) has none, so the real API
    server prunes one: the cluster tests below see ``size_bytes: null``. Where one is reported (these spellings
    are the ones the sidecar reads), the sidecar's summary carries it and the answer's row shows it."""
    from jupyter_suspend.sidecar.kube import snapshot_size

    gcs = {"observedGCSPath": "gs://b/p", "sizeBytes": "5368709120"}
    assert snapshot_size({"status": {"storageStatus": {"gcs": gcs}}}) == 5 * 2**30
    assert snapshot_size({"status": {"storageStatus": {"gcs": {"observedGCSPath": "gs://b/p"}}}}) is None
    row = snapshots._row(
        {**summary("nb-0-a", "2026-01-01T00:00:00Z"), "size_bytes": 5 * 2**30}, None, State.RUNNING, time.time()
    )
    assert row["size_bytes"] == 5 * 2**30


# -- gke backend on the real control plane, through the real sidecar ------------------------------------------------
#
# deploy/base in the module's namespace (the real StatefulSet controller makes notebook-0, kwok runs it), the real
# sidecar with a token of deploy/base's ServiceAccount bound to that pod (TokenRequest API, the real RBAC
# authorizer) reaching the API server through tests/cluster/faults.py's proxy (for the 5xx a real API server does
# not make on demand), the simulated GKE snapshot controller (tests/cluster/gke.py), and a real ``jupyter server``
# on the gke backend. Snapshots are taken with the policy's postCheckpoint: resume (the pod runs on, as the
# loopback version reset it to Running); the suspend test sets stop, as deploy/base installs it.


@dataclass
class Pod:
    notebook: Notebook
    proxy: FaultProxy
    server: GKEServer

    @property
    def gke(self) -> GKESnapshotController:
        return self.notebook.gke

    @property
    def sidecar(self) -> RealSidecar:
        return self.notebook.sidecar

    def snapshot(self, name: str) -> dict[str, Any] | None:
        return get(self.notebook.cluster, self.notebook.namespace, "podsnapshots", name)

    def trigger(self, name: str) -> dict[str, Any] | None:
        return get(self.notebook.cluster, self.notebook.namespace, "podsnapshotmanualtriggers", name)

    def post_checkpoint(self, value: str) -> None:
        patch = json.dumps({"spec": {"triggerConfig": {"postCheckpoint": value}}})
        self.notebook.cluster.kubectl(
            "patch", "podsnapshotpolicy", POLICY, "-n", self.notebook.namespace, "--type=merge", "-p", patch
        )


def call(
    server: GKEServer, method: str, endpoint: str, openapi_path: str, token: str | None = ""
) -> tuple[int, dict[str, Any]]:
    """``token``: "" the server's own, None none at all."""
    headers = {} if token is None else {"Authorization": f"token {token or server.token}"}
    req = urllib.request.Request(f"{server.url}{API_PREFIX}/{endpoint}", method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            code, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        code, body = exc.code, exc.read()
    check_answer(method, openapi_path, code, body)
    return code, json.loads(body)


def listing(server: GKEServer) -> dict[str, Any]:
    code, answer = call(server, "GET", "snapshots", "snapshots")
    assert code == 200, answer
    return answer


def take_snapshot(pod: Pod) -> str:
    """A snapshot of the notebook pod as a suspend asks for one (a trigger through the sidecar), once Ready."""
    trigger = asyncio.run(pod.sidecar.client.request_snapshot())["trigger"]
    progress = asyncio.run(pod.sidecar.client.follow(trigger, wait=10))
    while progress["phase"] != "ready":
        assert progress["phase"] != "failed", progress
        progress = asyncio.run(pod.sidecar.client.follow(trigger, wait=10))
    assert progress["snapshot"]
    return str(progress["snapshot"])


@pytest.fixture(scope="module")
def pod(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    base = tmp_path_factory.mktemp("snapshots-pod")
    namespace = f"snapshots-api-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    try:
        with FaultProxy(cluster) as proxy:
            notebook, server = start_notebook(
                cluster, namespace, base, hold=False, api_port=proxy.port, checkpoint_seconds=0.05, upload_seconds=0.3
            )
            try:
                the_pod = Pod(notebook, proxy, server)
                the_pod.post_checkpoint("resume")
                server.start()
                yield the_pod
            finally:
                stop_notebook(notebook, server)
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def other_pods_snapshot(pod: Pod) -> str:
    """A Ready snapshot of another pod in the same namespace, as GKE names (a UUID) and marks it."""
    return pod.gke.seed_snapshot("other-0", pod.notebook.current)


@pytest.mark.cluster
def test_gke_list_and_delete_through_the_sidecar(pod: Pod) -> None:
    empty = listing(pod.server)
    assert (empty["supported"], empty["snapshots"], empty["would_restore"]) == (True, [], None)
    assert (empty["pod"], empty["namespace"], empty["backend"]) == (POD, pod.notebook.namespace, "gke")
    older = take_snapshot(pod)
    time.sleep(1.05)  # creationTimestamp has whole seconds: "newest" must be decidable
    newer = take_snapshot(pod)
    others = other_pods_snapshot(pod)

    answer = listing(pod.server)
    assert answer["supported"] is True
    assert answer["reason"] is None
    assert answer["state"] == "running"
    assert [s["name"] for s in answer["snapshots"]] == [newer, older]  # newest first; not the other pod's
    assert answer["would_restore"] == newer
    first, second = answer["snapshots"]
    assert (first["would_restore"], second["would_restore"]) == (True, False)
    assert first["ready"] is True
    assert first["ready_reason"] == "AllSnapshotsAvailable"
    # GKE documents no size field (platform-facts §1): none is reported, so none is shown -- never guessed.
    assert first["size_bytes"] is None
    assert second["size_bytes"] is None
    assert first["policy"] == POLICY
    assert first["last_access"] is not None
    assert first["trigger"] is not None
    assert 0 <= second["age_seconds"] < 120
    assert second["age_seconds"] >= first["age_seconds"]
    assert all(s["deletable"] and s["protected_because"] is None for s in answer["snapshots"])  # running

    # Another pod's snapshot: answered as a missing one (issue 19: nothing about other pods revealed); nothing deleted.
    pod.proxy.reset_calls()
    code, error = call(pod.server, "DELETE", f"snapshots/{others}", ONE)
    assert code == 404, error
    assert pod.snapshot(others) is not None
    assert not [c for c in pod.proxy.calls if c.verb == "delete"], pod.proxy.calls
    # Missing: 404, the same answer.
    code, missing = call(pod.server, "DELETE", "snapshots/notebook-0-00000000", ONE)
    assert code == 404, missing
    assert error["message"].replace(others, "NAME") == missing["message"].replace("notebook-0-00000000", "NAME")

    # This pod's older snapshot: deleted with its trigger, and its storage freed by the finalizer.
    trigger = second["trigger"]
    code, deleted = call(pod.server, "DELETE", f"snapshots/{older}", ONE)
    assert code == 200, deleted
    assert deleted == {"deleted": older, "trigger": trigger}, deleted
    wait_for(lambda: pod.snapshot(older) is None, 30, "the older snapshot gone")
    assert pod.trigger(trigger) is None
    assert any(path.endswith(f"/{older}") for path in pod.gke.deleted_storage), pod.gke.deleted_storage
    assert not pod.gke.orphaned_storage
    assert [s["name"] for s in listing(pod.server)["snapshots"]] == [newer]
    assert pod.proxy.rejected() == []  # the real authorizer refused the sidecar nothing
    pod.notebook.cluster.kubectl("delete", "podsnapshot", others, "-n", pod.notebook.namespace)


@pytest.mark.cluster
def test_gke_the_snapshot_a_resume_needs_is_kept_while_suspending(pod: Pod) -> None:
    """A suspend whose snapshot never becomes Ready holds the server in 'snapshotting' for the backend's
    snapshot_timeout (4 s here): the newest Ready snapshot and the one uploading cannot be deleted then."""
    ready = listing(pod.server)["would_restore"] or take_snapshot(pod)
    pod.gke.behaviour = "never_ready"
    pod.gke.stop_after_upload = True  # frozen while uploading, never stopped: the upload never ends
    pod.post_checkpoint("stop")
    try:
        pod.server.api("POST", "suspend", {"reason": "test"}, expect=202)
        pod.server.wait(lambda s: s["state"] == "snapshotting", timeout=20)
        deadline = time.monotonic() + 3
        while True:
            answer = listing(pod.server)
            uploading = [s for s in answer["snapshots"] if s["ready_reason"] == "AwaitingCheckpoint"]
            if uploading or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert answer["state"] == "snapshotting", answer
        assert uploading, answer
        assert answer["would_restore"] == ready
        by_name = {s["name"]: s for s in answer["snapshots"]}
        assert by_name[ready]["deletable"] is False
        assert "a resume restores" in by_name[ready]["protected_because"]
        assert uploading[0]["deletable"] is False
        pod.proxy.reset_calls()
        for name in (ready, uploading[0]["name"]):
            code, error = call(pod.server, "DELETE", f"snapshots/{name}", ONE)
            assert code == 409, error
            assert error["reason"] == "Conflict", error
            assert error["state"] == "snapshotting", error
            assert pod.snapshot(name) is not None
        # Refused before any delete: the API server saw none (the server only listed, to know what a resume needs).
        assert not [c for c in pod.proxy.calls if c.verb == "delete"], pod.proxy.calls
        status = pod.server.wait(lambda s: not s["operation"]["in_progress"], timeout=30)
        assert status["state"] == "running", status  # aborted: nothing released
    finally:
        pod.gke.behaviour = "succeed"
        pod.gke.stop_after_upload = False
        pod.post_checkpoint("resume")
    assert pod.notebook.pod()["metadata"]["uid"] == pod.notebook.uid  # the same pod runs on
    # Running again: the same snapshot may go.
    code, deleted = call(pod.server, "DELETE", f"snapshots/{ready}", ONE)
    assert code == 200, deleted
    assert deleted["deleted"] == ready, deleted


@pytest.mark.cluster
def test_gke_an_api_error_behind_the_sidecar_is_502_and_changes_nothing(pod: Pod) -> None:
    """The API server answers the sidecar's list, then its delete, with a 500 (injected by the proxy): the
    server answers 502 (the platform's failure, not the caller's), and the snapshot stays."""
    name = listing(pod.server)["would_restore"] or take_snapshot(pod)
    rule = pod.proxy.fail("GET", r"/podsnapshots$", 500, times=10)
    try:
        code, error = call(pod.server, "GET", "snapshots", "snapshots")
    finally:
        pod.proxy.clear()
    assert rule.matched >= 1, rule
    assert code == 502, error
    assert "could not be listed" in error["message"], error
    rule = pod.proxy.fail("DELETE", r"/podsnapshots/", 500, times=10)
    try:
        code, error = call(pod.server, "DELETE", f"snapshots/{name}", ONE)
    finally:
        pod.proxy.clear()
    assert rule.matched >= 1, rule
    assert code == 502, error
    assert pod.snapshot(name) is not None
    assert name in [s["name"] for s in listing(pod.server)["snapshots"]]


@pytest.mark.cluster
def test_gke_unauthenticated_calls_are_403_and_reach_no_sidecar(pod: Pod) -> None:
    name = listing(pod.server)["would_restore"] or take_snapshot(pod)
    pod.proxy.reset_calls()
    for token in (None, "not-the-token"):
        code, _ = call(pod.server, "GET", "snapshots", "snapshots", token=token)
        assert code == 403
        code, _ = call(pod.server, "DELETE", f"snapshots/{name}", ONE, token=token)
        assert code == 403
    assert pod.proxy.calls == []
    assert pod.snapshot(name) is not None


@pytest.mark.cluster
def test_gke_sidecar_down_is_503_and_no_list(pod: Pod) -> None:
    pod.sidecar.stop()
    try:
        code, error = call(pod.server, "GET", "snapshots", "snapshots")
        assert code == 503, error
        assert "could not be listed" in error["message"], error
        code, error = call(pod.server, "DELETE", "snapshots/notebook-0-abcd", ONE)
        assert code == 503, error
    finally:
        pod.sidecar.start(
            bound_token(pod.notebook.cluster, pod.notebook.namespace, SIDECAR_ACCOUNT, pod.notebook.current)
        )
    assert listing(pod.server)["supported"] is True
