"""``GET snapshots`` and ``DELETE snapshots/NAME``: on the local backend (a real in-process jupyter_server:
``supported: false``, bad input refused) and on the gke backend (a real ``jupyter server`` process, the real
sidecar, the loopback Kubernetes API with the simulated GKE snapshot controller). Every answer is held to the
OpenAPI document (``check_answer``)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
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
from tests.gke_helpers import GKEServer, OwnTokenSidecar, PodFiles, pod_running
from tests.kubeapi import KubeAPI, wait_until
from tests.kubeapi.gke import FINALIZER, ORIGIN_POD, TRIGGERED_BY, GKESnapshotController
from tests.sidecar_helpers import GKE, NAMESPACE, POD, installed_policy, make_pod, make_storage_config, run

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


# -- gke backend, through the real sidecar ---------------------------------------------------------------------------


@dataclass
class Pod:
    kube: KubeAPI
    gke: GKESnapshotController
    sidecar: OwnTokenSidecar
    server: GKEServer


def call(server: GKEServer, method: str, endpoint: str, openapi_path: str) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        f"{server.url}{API_PREFIX}/{endpoint}", method=method, headers={"Authorization": f"token {server.token}"}
    )
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
    trigger = run(pod.sidecar.client.request_snapshot())["trigger"]
    progress = run(pod.sidecar.client.follow(trigger, wait=10))
    while progress["phase"] != "ready":
        assert progress["phase"] != "failed", progress
        progress = run(pod.sidecar.client.follow(trigger, wait=10))
    pod_running(pod.kube)  # the policy stops the pod after the checkpoint; it runs on here
    assert progress["snapshot"]
    return str(progress["snapshot"])


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    base = tmp_path_factory.mktemp("snapshots-pod")
    with KubeAPI() as kube:
        gke = GKESnapshotController(kube, checkpoint_seconds=0.05, upload_seconds=0.1).attach()
        make_storage_config(kube)
        kube.create(installed_policy())
        uid = make_pod(kube)
        files = PodFiles(base / "podinfo")
        files.reset(uid)
        sidecar = OwnTokenSidecar(
            kube, base / "sidecar", ["--policy-mode", "require", "--policy-name", "notebook-snapshots"], pod_uid=uid
        )
        sidecar.start()
        server = GKEServer(base, base / "state", sidecar, files, uid)
        server.start()
        try:
            yield Pod(kube, gke, sidecar, server)
        finally:
            server.stop()
            sidecar.stop()
        assert not kube.controller_errors, kube.controller_errors


def other_pods_snapshot(kube: KubeAPI) -> str:
    """A snapshot of another pod in the same namespace, as GKE made it."""
    make_pod(kube, name="other-0", labels={"app": "other"})
    kube.create(
        {
            "apiVersion": GKE,
            "kind": "PodSnapshot",
            "metadata": {
                "name": "other-0-1234abcd",
                "namespace": NAMESPACE,
                "labels": {TRIGGERED_BY: "other-trigger"},
                "annotations": {ORIGIN_POD: "other-0"},
                "finalizers": [FINALIZER],
            },
            "spec": {"policyName": "notebook-snapshots"},
        }
    )
    return "other-0-1234abcd"


@pytest.mark.slow
def test_gke_list_and_delete_through_the_sidecar(pod: Pod) -> None:
    empty = listing(pod.server)
    assert (empty["supported"], empty["snapshots"], empty["would_restore"]) == (True, [], None)
    assert (empty["pod"], empty["namespace"], empty["backend"]) == (POD, NAMESPACE, "gke")
    older = take_snapshot(pod)
    time.sleep(1.05)  # creationTimestamp has whole seconds: "newest" must be decidable
    newer = take_snapshot(pod)
    others = other_pods_snapshot(pod.kube)
    # GKE documents no size field; where one is reported (this spelling is one the sidecar reads), it is shown.
    stored = pod.kube.get(GKE, "podsnapshots", NAMESPACE, newer)
    assert stored is not None
    path = stored["status"]["storageStatus"]["gcs"]["observedGCSPath"]
    size = {"gcs": {"observedGCSPath": path, "sizeBytes": "5368709120"}}
    pod.kube.patch_status(GKE, "podsnapshots", NAMESPACE, newer, {"storageStatus": size})

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
    assert first["size_bytes"] == 5 * 2**30
    assert second["size_bytes"] is None  # not reported: unknown, never guessed
    assert first["policy"] == "notebook-snapshots"
    assert first["last_access"] is not None
    assert first["trigger"] is not None
    assert 0 <= second["age_seconds"] < 60
    assert second["age_seconds"] >= first["age_seconds"]
    assert all(s["deletable"] and s["protected_because"] is None for s in answer["snapshots"])  # running

    # Another pod's snapshot: answered as a missing one (issue 19: nothing about other pods revealed); nothing deleted.
    code, error = call(pod.server, "DELETE", f"snapshots/{others}", ONE)
    assert code == 404, error
    assert pod.kube.get(GKE, "podsnapshots", NAMESPACE, others) is not None
    # Missing: 404, the same answer.
    code, missing = call(pod.server, "DELETE", "snapshots/notebook-0-00000000", ONE)
    assert code == 404, missing
    assert error["message"].replace(others, "NAME") == missing["message"].replace("notebook-0-00000000", "NAME")

    # This pod's older snapshot: deleted with its trigger, and its storage freed by the finalizer.
    trigger = second["trigger"]
    code, deleted = call(pod.server, "DELETE", f"snapshots/{older}", ONE)
    assert code == 200, deleted
    assert deleted == {"deleted": older, "trigger": trigger}, deleted
    wait_until(lambda: pod.kube.get(GKE, "podsnapshots", NAMESPACE, older) is None, timeout=10)
    assert pod.kube.get(GKE, "podsnapshotmanualtriggers", NAMESPACE, trigger) is None
    assert any(path.endswith(f"/{older}") for path in pod.gke.deleted_storage), pod.gke.deleted_storage
    assert not pod.gke.orphaned_storage
    assert [s["name"] for s in listing(pod.server)["snapshots"]] == [newer]


@pytest.mark.slow
def test_gke_the_snapshot_a_resume_needs_is_kept_while_suspending(pod: Pod) -> None:
    """A suspend whose snapshot never becomes Ready holds the server in 'snapshotting' for the backend's
    snapshot_timeout (4 s here): the newest Ready snapshot and the one uploading cannot be deleted then."""
    ready = listing(pod.server)["would_restore"] or take_snapshot(pod)
    pod.gke.behaviour = "never_ready"
    try:
        pod.server.api("POST", "suspend", {"reason": "test"}, expect=202)
        pod.server.wait(lambda s: s["state"] == "snapshotting", timeout=10)
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
        for name in (ready, uploading[0]["name"]):
            code, error = call(pod.server, "DELETE", f"snapshots/{name}", ONE)
            assert code == 409, error
            assert error["reason"] == "Conflict", error
            assert error["state"] == "snapshotting", error
            assert pod.kube.get(GKE, "podsnapshots", NAMESPACE, name) is not None
        status = pod.server.wait(lambda s: not s["operation"]["in_progress"], timeout=30)
        assert status["state"] == "running", status  # aborted: nothing released
    finally:
        pod.gke.behaviour = "succeed"
        pod_running(pod.kube)
    # Running again: the same snapshot may go.
    code, deleted = call(pod.server, "DELETE", f"snapshots/{ready}", ONE)
    assert code == 200, deleted
    assert deleted["deleted"] == ready, deleted


@pytest.mark.slow
def test_gke_sidecar_down_is_503_and_no_list(pod: Pod) -> None:
    pod.sidecar.stop()
    try:
        code, error = call(pod.server, "GET", "snapshots", "snapshots")
        assert code == 503, error
        assert "could not be listed" in error["message"], error
        code, error = call(pod.server, "DELETE", "snapshots/notebook-0-abcd", ONE)
        assert code == 503, error
    finally:
        pod.sidecar.start()
    assert listing(pod.server)["supported"] is True
