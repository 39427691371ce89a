"""The sidecar as it runs in its container: ``python -m jupyter_suspend.sidecar`` in a subprocess, the real
``kubernetes`` client inside it, the loopback API server (``kube_api``) with the simulated GKE snapshot controller,
and the server extension's :class:`SidecarClient` from the test."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_suspend.common import sidecar_protocol as proto
from jupyter_suspend.server.sidecar_client import SidecarClient, SidecarError, SidecarUnavailable, _parse_response
from jupyter_suspend.sidecar.config import ConfigError, parse_config
from tests.kubeapi import KubeAPI, wait_until
from tests.kubeapi.gke import GKESnapshotController
from tests.kubeapi.rbac import bound_role, called, granted
from tests.sidecar_helpers import (
    GKE,
    NAMESPACE,
    POD,
    POD_LABELS,
    ROOT,
    STORAGE,
    Sidecar,
    chunked,
    free_port,
    installed_policy,
    make_pod,
    make_storage_config,
    run,
)

CREATE_ARGS = [
    "--policy-mode",
    "create",
    "--policy-selector",
    "app=notebook,statefulset.kubernetes.io/pod-name=notebook-0",
    "--storage-config",
    STORAGE,
]
REQUIRE_ARGS = ["--policy-mode", "require", "--policy-name", "notebook-snapshots"]


@pytest.fixture
def gke(kube_api: KubeAPI) -> GKESnapshotController:
    controller = GKESnapshotController(kube_api, checkpoint_seconds=0.3, upload_seconds=0.3).attach()
    make_storage_config(kube_api)
    return controller


@pytest.fixture
def sidecars(kube_api: KubeAPI, tmp_path: Path) -> Iterator[list[Sidecar]]:
    """Sidecars started by the test; each is stopped, and its log checked for secrets, at teardown."""
    started: list[Sidecar] = []
    yield started
    for sidecar in started:
        secret = sidecar.secret() if os.path.exists(sidecar.secret_path) else None
        code = sidecar.stop()
        log = sidecar.log()
        assert code == 0, log
        assert kube_api.token not in log
        if secret:
            assert secret not in log
        # A stopped sidecar leaves neither a socket nor a secret behind.
        assert not os.path.exists(sidecar.socket_path)
        assert not os.path.exists(sidecar.secret_path)


def start(kube: KubeAPI, tmp_path: Path, sidecars: list[Sidecar], args: list[str], name: str = "sidecar") -> Sidecar:
    sidecar = Sidecar(kube, tmp_path / name, args)
    sidecars.append(sidecar)
    return sidecar.start()


def follow_until_done(client: SidecarClient, trigger: str, timeout: float = 20.0) -> proto.SnapshotProgress:
    seen: list[str] = []
    view = run(client.follow(trigger))
    while view["phase"] not in proto.TERMINAL_PHASES:
        seen.append(view["phase"])
        assert len(seen) < 40, seen
        view = run(client.follow(trigger, wait=5))
    return view


# --- start, happy path, create mode -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_snapshot_of_own_pod_in_create_mode(
    kube_api: KubeAPI, gke: GKESnapshotController, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    uid = make_pod(kube_api)
    sidecar = start(kube_api, tmp_path, sidecars, CREATE_ARGS)
    client = sidecar.client

    # Start: a 0600 secret, a 0660 socket, health without a secret.
    assert stat.S_IMODE(os.stat(sidecar.secret_path).st_mode) == 0o600
    assert len(sidecar.secret()) >= 43  # 32 random bytes, urlsafe base64
    assert stat.S_ISSOCK(os.stat(sidecar.socket_path).st_mode)
    assert stat.S_IMODE(os.stat(sidecar.socket_path).st_mode) in (0o660, 0o600)
    assert sidecar.raw("GET", proto.PATH_HEALTH, auth=None) == (200, {"ok": True})

    pod = run(client.pod())
    assert (pod["name"], pod["namespace"], pod["uid"], pod["phase"]) == (POD, NAMESPACE, uid, "Running")
    assert pod["started_uid"] == "uid-at-start"
    assert pod["node_name"] == "gpu-node-1"
    assert not pod["restored"]
    # The policy as the sidecar will create it: the server's preflight can say what a suspend does.
    policy_facts = ("policy_mode", "policy_name", "policy_exists", "post_checkpoint", "policy_problem")
    assert tuple(pod[k] for k in policy_facts) == ("create", f"jupyter-suspend-{POD}", False, "stop", None)

    requested = run(client.request_snapshot())
    trigger = requested["trigger"]
    assert trigger.startswith(f"{POD}-")
    assert requested["policy"] == f"jupyter-suspend-{POD}"
    assert requested["policy_created"] is True
    stored_trigger = kube_api.get(GKE, "podsnapshotmanualtriggers", NAMESPACE, trigger)
    assert stored_trigger is not None
    assert stored_trigger["spec"] == {"targetPod": POD}
    assert stored_trigger["metadata"]["labels"]["jupyter-suspend/pod-uid"] == uid

    # The per-pod policy: manual trigger, stop after the checkpoint, 7d retention, the given selector.
    policy = kube_api.get(GKE, "podsnapshotpolicies", NAMESPACE, f"jupyter-suspend-{POD}")
    assert policy is not None
    assert policy["spec"] == {
        "selector": {"matchLabels": POD_LABELS},
        "storageConfigName": STORAGE,
        "triggerConfig": {"type": "manual", "postCheckpoint": "stop"},
        "retentionConfig": {"lastAccessTimeout": "7d"},
    }

    view = follow_until_done(client, trigger)
    assert view["phase"] == "ready", view
    assert view["reason"] == "AllSnapshotsAvailable"
    snapshot = view["snapshot"]
    assert snapshot in gke.snapshots_created
    assert view["gcs_path"] == f"gs://suspend-bucket/snapshots/{NAMESPACE}/{POD}/{snapshot}"
    kinds = {(c["source"], c["type"]): c for c in view["conditions"]}
    assert kinds["trigger", "Triggered"]["status"] == "True"
    assert kinds["snapshot", "Checkpoint"]["reason"] == "Succeeded"
    assert kinds["snapshot", "Ready"]["lastTransitionTime"]
    assert gke.stopped_pods == [POD]
    assert run(client.pod())["phase"] == "Succeeded"

    assert tuple(run(client.pod())[k] for k in policy_facts) == ("create", f"jupyter-suspend-{POD}", True, "stop", None)

    # A second request reuses the policy.
    again = run(client.request_snapshot())
    assert again["policy_created"] is False
    second = follow_until_done(client, again["trigger"])
    assert second["phase"] == "ready"

    # List and delete this pod's snapshots; a delete takes the trigger with it.
    listed = run(client.snapshots())
    assert (listed["pod"], listed["namespace"]) == (POD, NAMESPACE)
    by_name = {s["name"]: s for s in listed["snapshots"]}
    assert set(by_name) == {snapshot, second["snapshot"]}
    entry = by_name[snapshot]
    assert (entry["ready"], entry["policy"], entry["trigger"]) == (True, f"jupyter-suspend-{POD}", trigger)
    assert entry["gcs_path"] == view["gcs_path"]
    assert entry["last_access"]
    assert entry["created"]

    deleted = run(client.delete_snapshot(snapshot))
    assert deleted == {"deleted": snapshot, "trigger": trigger}
    assert kube_api.get(GKE, "podsnapshotmanualtriggers", NAMESPACE, trigger) is None
    wait_until(lambda: kube_api.get(GKE, "podsnapshots", NAMESPACE, snapshot) is None)
    assert gke.deleted_storage == [view["gcs_path"]]
    assert [s["name"] for s in run(client.snapshots())["snapshots"]] == [second["snapshot"]]
    with pytest.raises(SidecarError) as missing:
        run(client.delete_snapshot(snapshot))
    assert (missing.value.status, missing.value.code) == (404, proto.E_NOT_FOUND)
    with pytest.raises(SidecarError) as unknown:
        run(client.follow("no-such-trigger"))
    assert (unknown.value.status, unknown.value.code) == (404, proto.E_NOT_FOUND)

    # A restore: PodRestored and the pinned snapshot show in the pod view.
    kube_api.patch(
        "v1", "pods", NAMESPACE, POD, {"metadata": {"annotations": {"podsnapshot.gke.io/ps-name": second["snapshot"]}}}
    )
    gke.restore_pod(POD)
    restored = run(client.pod())
    assert restored["restored"] is True
    assert str(second["snapshot"]) in (restored["restored_message"] or "")
    assert restored["pinned_snapshot"] == second["snapshot"]
    assert restored["annotations"] == {"podsnapshot.gke.io/ps-name": second["snapshot"]}
    assert any(c["type"] == "PodRestored" and c["status"] == "True" for c in restored["conditions"])


# --- require mode -----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_require_mode_reads_the_installed_policy_only(
    kube_api: KubeAPI, gke: GKESnapshotController, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    make_pod(kube_api)
    client = start(kube_api, tmp_path, sidecars, REQUIRE_ARGS).client

    # The pod view says which policy applies and what it does after the checkpoint, with 'get' only.
    kube_api.reset_calls()
    facts = ("policy_mode", "policy_name", "policy_exists", "post_checkpoint", "policy_problem")
    assert tuple(run(client.pod())[k] for k in facts) == ("require", "notebook-snapshots", False, None, None)
    assert called(kube_api) == {("", "pods", "get"), ("podsnapshot.gke.io", "podsnapshotpolicies", "get")}
    policy = ("podsnapshotpolicies", NAMESPACE, "notebook-snapshots")
    kube_api.create(installed_policy())
    assert tuple(run(client.pod())[k] for k in facts) == ("require", "notebook-snapshots", True, "stop", None)
    kube_api.patch(GKE, *policy, {"spec": {"triggerConfig": {"postCheckpoint": "resume"}}})
    assert run(client.pod())["post_checkpoint"] == "resume"
    kube_api.patch(GKE, *policy, {"spec": {"triggerConfig": {"postCheckpoint": None}}})  # unset: GKE's default
    assert run(client.pod())["post_checkpoint"] == "resume"
    kube_api.fail_next("get", "podsnapshotpolicies", code=403)
    unreadable = run(client.pod())
    assert (unreadable["policy_exists"], unreadable["post_checkpoint"]) == (None, None)
    assert "does not allow 'get'" in (unreadable["policy_problem"] or "")
    kube_api.delete(GKE, *policy)

    kube_api.reset_calls()
    with pytest.raises(SidecarError) as err:
        run(client.request_snapshot())
    assert (err.value.status, err.value.code, err.value.retryable) == (409, proto.E_POLICY_MISSING, False)
    assert "notebook-snapshots" in err.value.message
    assert "ask the platform team to install PodSnapshotPolicy notebook-snapshots" in err.value.next_step
    assert called(kube_api) == {("", "pods", "get"), ("podsnapshot.gke.io", "podsnapshotpolicies", "get")}
    assert not kube_api.objects("podsnapshotmanualtriggers")

    # A policy that does not select this pod is refused before any trigger is made.
    wrong = installed_policy()
    wrong["spec"]["selector"] = {"matchLabels": {"app": "something-else"}}
    kube_api.create(wrong)
    with pytest.raises(SidecarError) as err:
        run(client.request_snapshot())
    assert (err.value.status, err.value.code) == (409, proto.E_POLICY_CONFLICT)
    assert "does not select pod notebook-0" in err.value.message
    kube_api.delete(GKE, "podsnapshotpolicies", NAMESPACE, "notebook-snapshots")

    kube_api.create(installed_policy())
    kube_api.reset_calls()
    requested = run(client.request_snapshot())
    assert (requested["policy"], requested["policy_created"]) == ("notebook-snapshots", False)
    assert follow_until_done(client, requested["trigger"])["phase"] == "ready"
    assert {c.verb for c in kube_api.calls_matching(resource="podsnapshotpolicies")} == {"get"}
    assert not kube_api.calls_matching(verb="create", resource="podsnapshotpolicies")


# --- failures --------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_failures_are_reported(
    kube_api: KubeAPI, gke: GKESnapshotController, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    make_pod(kube_api)
    client = start(kube_api, tmp_path, sidecars, [*CREATE_ARGS, "--kube-timeout", "1.5"]).client

    expected = {
        "trigger_fails": ("Failed", "could not be triggered"),
        "trigger_error": ("Error", "internal error"),
        "checkpoint_fails": ("Failed", "checkpoint failed"),
    }
    for behaviour, (reason, words) in expected.items():
        gke.behaviour = behaviour
        view = follow_until_done(client, run(client.request_snapshot())["trigger"])
        assert view["phase"] == "failed", (behaviour, view)
        assert view["reason"] == reason, (behaviour, view)
        assert words in (view["message"] or ""), (behaviour, view)
        assert view["conditions"], behaviour

    # never_ready: the upload never finishes; a bounded wait answers "uploading" when it runs out.
    gke.behaviour = "never_ready"
    trigger = run(client.request_snapshot())["trigger"]
    view = run(client.follow(trigger))
    while view["phase"] in ("pending", "checkpointing"):
        view = run(client.follow(trigger, wait=5, since=view["phase"]))
    assert (view["phase"], view["reason"]) == ("uploading", "AwaitingCheckpoint")
    view = run(client.follow(trigger, wait=1))
    assert view["phase"] == "uploading"

    # A trigger naming a snapshot the API does not show (yet): still checkpointing, and saying so.
    kube_api.create(
        {
            "apiVersion": GKE,
            "kind": "PodSnapshotManualTrigger",
            "metadata": {"name": "ghost-trigger", "namespace": NAMESPACE},
            "spec": {"targetPod": POD},
            "status": {
                "conditions": [{"type": "Triggered", "status": "True", "reason": "Complete", "message": "done"}],
                "snapshotCreated": {"name": "ghost"},
            },
        }
    )
    ghost = run(client.follow("ghost-trigger"))
    assert (ghost["phase"], ghost["reason"], ghost["snapshot"]) == ("checkpointing", "SnapshotNotFound", "ghost")

    # The API answers 500: a retryable 502.
    kube_api.fail_next("create", "podsnapshotmanualtriggers", code=500)
    with pytest.raises(SidecarError) as err:
        run(client.request_snapshot())
    assert (err.value.status, err.value.code, err.value.retryable) == (502, proto.E_KUBE_UNAVAILABLE, True)
    kube_api.fail_next("get", "pods", code=503)
    with pytest.raises(SidecarError) as err:
        run(client.pod())
    assert (err.value.status, err.value.retryable) == (502, True)

    # The Role does not allow a call: 502 that says so.
    kube_api.fail_next("list", "podsnapshots", code=403)
    with pytest.raises(SidecarError) as err:
        run(client.snapshots())
    assert (err.value.status, err.value.code, err.value.retryable) == (502, proto.E_KUBE_FORBIDDEN, False)
    assert "the sidecar's Role does not allow 'list' on podsnapshot.gke.io/podsnapshots" in err.value.message
    assert "role.yaml" in err.value.next_step

    # The API does not answer in time: a retryable 504.
    kube_api.delay_next("get", "podsnapshotmanualtriggers", 3.0)
    with pytest.raises(SidecarError) as err:
        run(client.follow(trigger))
    assert (err.value.status, err.value.code, err.value.retryable) == (504, proto.E_KUBE_TIMEOUT, True)
    assert run(client.follow(trigger))["phase"] == "uploading"  # and the next call works


# --- refusals: no Kubernetes API call at all ------------------------------------------------------------------------


@pytest.mark.slow
def test_refused_requests_make_no_api_call(
    kube_api: KubeAPI, gke: GKESnapshotController, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    make_pod(kube_api)
    make_pod(kube_api, "other-0", labels={"app": "notebook", "statefulset.kubernetes.io/pod-name": "other-0"})
    kube_api.create(installed_policy())
    sidecar = start(kube_api, tmp_path, sidecars, REQUIRE_ARGS)
    # Another pod's snapshot request and snapshot, made by someone else.
    kube_api.create(
        {
            "apiVersion": GKE,
            "kind": "PodSnapshotManualTrigger",
            "metadata": {"name": "other-trigger", "namespace": NAMESPACE},
            "spec": {"targetPod": "other-0"},
        }
    )
    other: str = wait_until(lambda: gke.snapshots_created[0] if gke.snapshots_created else None, timeout=10)
    wait_until(lambda: kube_api.get(GKE, "podsnapshots", NAMESPACE, other) is not None)

    request = proto.PATH_SNAPSHOT_REQUESTS
    wrong_secret = "Bearer " + "x" * 43
    cases: list[tuple[str, str, bytes, dict[str, Any], int, str]] = [
        # (method, path, body, raw() options, status, error)
        ("POST", request, b"{}", {"auth": None}, 401, proto.E_UNAUTHORIZED),
        ("POST", request, b"{}", {"auth": wrong_secret}, 401, proto.E_UNAUTHORIZED),
        ("POST", request, b"{}", {"auth": "Basic " + sidecar.secret()}, 401, proto.E_UNAUTHORIZED),
        ("GET", proto.PATH_POD, b"", {"auth": None}, 401, proto.E_UNAUTHORIZED),
        ("GET", proto.PATH_SNAPSHOTS, b"", {"auth": wrong_secret}, 401, proto.E_UNAUTHORIZED),
        ("DELETE", proto.snapshot_path(other), b"", {"auth": None}, 401, proto.E_UNAUTHORIZED),
        ("GET", "/v1/nothing-here", b"", {"auth": None}, 401, proto.E_UNAUTHORIZED),
        ("POST", request, b"{not json", {}, 400, proto.E_MALFORMED),
        ("POST", request, b"[1, 2]", {}, 400, proto.E_NOT_AN_OBJECT),
        ("POST", request, b"[" * 10000, {}, 400, proto.E_MALFORMED),
        ("POST", request, b'{"pod": "notebook-\xff"}', {}, 400, proto.E_MALFORMED),
        ("POST", request + "?pod=notebook-0", b"{}", {}, 400, proto.E_UNKNOWN_FIELD),
        ("POST", request, b"x" * (proto.MAX_BODY_BYTES + 1), {}, 413, proto.E_BODY_TOO_LARGE),
        (
            "POST",
            request,
            chunked(b'{"pod": "' + b"a" * (proto.MAX_BODY_BYTES + 100) + b'"}'),
            {"content_length": False, "headers": {"Transfer-Encoding": "chunked"}},
            413,
            proto.E_BODY_TOO_LARGE,
        ),
        ("POST", request, b'{"pod": "notebook-0", "force": true}', {}, 400, proto.E_UNKNOWN_FIELD),
        ("POST", request, b'{"pod": 7}', {}, 400, proto.E_WRONG_TYPE),
        ("POST", request, b'{"namespace": null}', {}, 400, proto.E_WRONG_TYPE),
        ("POST", request, b'{"pod": "other-0"}', {}, 403, proto.E_FORBIDDEN_TARGET),
        ("POST", request, b'{"namespace": "kube-system"}', {}, 403, proto.E_FORBIDDEN_TARGET),
        ("POST", request, b'{"pod": "notebook-0", "namespace": "team-b"}', {}, 403, proto.E_FORBIDDEN_TARGET),
        ("GET", proto.PATH_SNAPSHOTS + "?pod=other-0", b"", {}, 403, proto.E_FORBIDDEN_TARGET),
        ("GET", proto.PATH_POD + "?namespace=team-b", b"", {}, 403, proto.E_FORBIDDEN_TARGET),
        ("DELETE", proto.snapshot_path(other) + "?namespace=team-b", b"", {}, 403, proto.E_FORBIDDEN_TARGET),
        ("GET", proto.PATH_SNAPSHOTS + "?all=true", b"", {}, 400, proto.E_UNKNOWN_FIELD),
        ("GET", proto.PATH_SNAPSHOTS, b'{"pod": "notebook-0"}', {}, 400, proto.E_UNEXPECTED_BODY),
        ("GET", proto.snapshot_request_path("x") + "?wait=soon", b"", {}, 400, proto.E_WRONG_TYPE),
        ("GET", proto.snapshot_request_path("x") + "?wait=31", b"", {}, 400, proto.E_INVALID_VALUE),
        ("GET", proto.snapshot_request_path("x") + "?wait=nan", b"", {}, 400, proto.E_INVALID_VALUE),
        ("GET", proto.snapshot_request_path("x") + "?since=done", b"", {}, 400, proto.E_INVALID_VALUE),
        ("GET", proto.snapshot_request_path("Not_A_Name"), b"", {}, 400, proto.E_INVALID_VALUE),
        ("DELETE", proto.snapshot_path("..%2Fpods"), b"", {}, 400, proto.E_INVALID_VALUE),
        ("PUT", proto.PATH_POD, b"{}", {}, 405, proto.E_METHOD),
        ("GET", "/v1/nothing-here", b"", {}, 404, proto.E_NOT_FOUND),
    ]
    kube_api.reset_calls()
    for method, path, body, options, status, error in cases:
        got_status, answer = sidecar.raw(method, path, body, **options)
        assert (got_status, answer.get("error")) == (status, error), (method, path, body[:60], answer)
        assert isinstance(answer.get("message"), str), answer
        assert answer["message"], answer
        assert kube_api.calls == [], (method, path, kube_api.calls)
    assert not kube_api.rejected

    # Another pod's snapshot: a get to read its origin, then the answer a missing one gets -- never a delete.
    with pytest.raises(SidecarError) as err:
        run(sidecar.client.delete_snapshot(other))
    assert (err.value.status, err.value.code) == (404, proto.E_NOT_FOUND)
    with pytest.raises(SidecarError) as missing:
        run(sidecar.client.delete_snapshot("no-such-snapshot"))
    assert str(err.value).replace(other, "NAME") == str(missing.value).replace("no-such-snapshot", "NAME")
    assert called(kube_api) == {("podsnapshot.gke.io", "podsnapshots", "get")}
    assert kube_api.get(GKE, "podsnapshots", NAMESPACE, other) is not None
    # Another pod's snapshot request cannot be followed, and its snapshot is not listed as this pod's.
    with pytest.raises(SidecarError) as err:
        run(sidecar.client.follow("other-trigger"))
    assert (err.value.status, err.value.code) == (404, proto.E_NOT_FOUND)
    with pytest.raises(SidecarError) as missing:
        run(sidecar.client.follow("no-such-trigger"))
    assert str(err.value).replace("other-trigger", "NAME") == str(missing.value).replace("no-such-trigger", "NAME")
    assert run(sidecar.client.snapshots())["snapshots"] == []
    assert not kube_api.calls_matching(verb="delete")

    # The right secret, then a restart: the client reads the new secret, the old one is refused.
    old_secret = sidecar.secret()
    assert sidecar.stop() == 0
    with pytest.raises(SidecarUnavailable, match="is the sidecar"):
        run(sidecar.client.pod())
    sidecar.start()
    assert sidecar.secret() != old_secret
    assert run(sidecar.client.pod())["name"] == POD
    assert sidecar.raw("GET", proto.PATH_POD, auth=f"Bearer {old_secret}")[0] == 401

    # A restart between the client's read of the secret and the answer: the client asks once more.
    class ReadBeforeRestart(SidecarClient):
        reads = 0

        def _secret(self) -> str:
            self.reads += 1
            return old_secret if self.reads == 1 else super()._secret()

    late = ReadBeforeRestart(sidecar.socket_path, sidecar.secret_path, timeout=10)
    assert run(late.pod())["name"] == POD
    assert late.reads == 3  # stale, compared after the 401, sent again


# --- least privilege --------------------------------------------------------------------------------------------------


def role_triples() -> set[tuple[str, str, str]]:
    documents = yaml.safe_load_all((ROOT / "deploy/base/role.yaml").read_text())
    return granted(bound_role(documents, "jupyter-suspend-sidecar"), resource_names_for=["pods"])


@pytest.mark.slow
def test_role_grants_exactly_the_calls_the_sidecar_makes(
    kube_api: KubeAPI, gke: GKESnapshotController, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    make_pod(kube_api)
    gke.checkpoint_seconds = gke.upload_seconds = 0.6  # long enough for a follow to wait on each object
    client = start(kube_api, tmp_path, sidecars, CREATE_ARGS, "create-mode").client
    run(client.pod())
    trigger = run(client.request_snapshot())["trigger"]
    view = run(client.follow(trigger))  # no wait: get
    assert view["phase"] == "pending"
    view = run(client.follow(trigger, wait=10))  # waits on the trigger
    view = follow_until_done(client, trigger)  # waits on the snapshot
    assert view["phase"] == "ready"
    assert view["snapshot"]
    run(client.snapshots())
    run(client.delete_snapshot(view["snapshot"]))
    create_mode = called(kube_api)
    assert ("podsnapshot.gke.io", "podsnapshotmanualtriggers", "watch") in create_mode
    assert ("podsnapshot.gke.io", "podsnapshots", "watch") in create_mode

    sidecars[0].stop()
    kube_api.reset_calls()
    kube_api.create(installed_policy())
    client = start(kube_api, tmp_path, sidecars, REQUIRE_ARGS, "require-mode").client
    trigger = run(client.request_snapshot())["trigger"]
    assert follow_until_done(client, trigger)["phase"] == "ready"
    require_mode = called(kube_api)
    assert ("podsnapshot.gke.io", "podsnapshotpolicies", "create") not in require_mode

    assert create_mode | require_mode == role_triples()


# --- the boundary, the configuration, the other transport -------------------------------------------------------------


def test_sidecar_never_imports_the_server_extension() -> None:
    code = (
        "import json, sys\n"
        "from jupyter_suspend.sidecar import app\n"
        "app._skip_manifest_validation()  # as main() does; the import takes seconds otherwise\n"
        "import jupyter_suspend.sidecar.app, jupyter_suspend.sidecar.kube, jupyter_suspend.sidecar.__main__\n"
        "bad = ('jupyter_server', 'jupyter_suspend.server', 'jupyter_suspend.kernel', 'ipykernel', 'IPython',"
        " 'jupyter_client', 'traitlets')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in bad or m.startswith(bad))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60, check=True)
    assert json.loads(out.stdout) == []


def test_configuration_is_checked_before_anything_starts(tmp_path: Path) -> None:
    env = {"POD_NAME": POD, "POD_NAMESPACE": NAMESPACE}
    config = parse_config(REQUIRE_ARGS, env)
    assert (config.pod_name, config.namespace, config.policy_name) == (POD, NAMESPACE, "notebook-snapshots")
    assert (config.socket_path, config.secret_path) == (proto.DEFAULT_SOCKET_PATH, proto.DEFAULT_SECRET_PATH)
    assert config.token_file == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    create = parse_config([*CREATE_ARGS, "--retention", "none"], env)
    assert (create.policy_selector, create.retention, create.post_checkpoint) == (POD_LABELS, None, "stop")
    assert parse_config([*REQUIRE_ARGS, "--listen", "127.0.0.1:8765"], env).listen == ("127.0.0.1", 8765)
    (tmp_path / "namespace").write_text("from-file\n")
    assert (
        parse_config([*REQUIRE_ARGS, "--namespace-file", str(tmp_path / "namespace")], {"POD_NAME": POD}).namespace
        == "from-file"
    )

    refused = [
        ([*REQUIRE_ARGS, "--listen", "0.0.0.0:8765"], env, "loopback"),
        ([*REQUIRE_ARGS, "--listen", "10.1.2.3:8765"], env, "loopback"),
        ([*REQUIRE_ARGS, "--listen", "localhost:8765"], env, "127.0.0.1:PORT"),
        (["--policy-mode", "require"], env, "--policy-name"),
        (["--policy-mode", "create", "--storage-config", STORAGE], env, "--policy-selector"),
        (["--policy-mode", "create", "--policy-selector", "app=notebook"], env, "--storage-config"),
        ([*CREATE_ARGS, "--policy-selector", "app"], env, "key=value"),
        ([*CREATE_ARGS, "--retention", "a week"], env, "duration"),
        (REQUIRE_ARGS, {"POD_NAMESPACE": NAMESPACE}, "pod name"),
        ([*REQUIRE_ARGS, "--namespace-file", str(tmp_path / "none")], {"POD_NAME": POD}, "namespace"),
    ]
    for argv, environ, words in refused:
        with pytest.raises(ConfigError, match=words):
            parse_config(argv, environ)

    # The command line says so and exits 2, without importing the kubernetes client.
    out = subprocess.run(
        [sys.executable, "-m", "jupyter_suspend.sidecar", "--listen", "0.0.0.0:1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env, "POLICY_MODE": "require", "POLICY_NAME": "p"},
        timeout=30,
    )
    assert out.returncode == 2, out.stderr
    assert "only a loopback address is allowed" in out.stderr
    help_text = subprocess.run(
        [sys.executable, "-m", "jupyter_suspend.sidecar", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    ).stdout
    help_text = " ".join(help_text.split())
    for variable in ("POD_NAME", "POD_NAMESPACE", "POD_UID", "POLICY_MODE", "POLICY_SELECTOR", "STORAGE_CONFIG"):
        assert f"env {variable}" in help_text


@pytest.mark.slow
def test_loopback_listener_instead_of_the_socket(kube_api: KubeAPI, tmp_path: Path, sidecars: list[Sidecar]) -> None:
    make_pod(kube_api)
    sidecar = Sidecar(kube_api, tmp_path / "tcp", REQUIRE_ARGS, tcp=("127.0.0.1", free_port()))
    sidecars.append(sidecar)
    sidecar.start()
    assert not os.path.exists(sidecar.socket_path)
    assert stat.S_IMODE(os.stat(sidecar.secret_path).st_mode) == 0o600
    assert run(sidecar.client.pod())["name"] == POD
    kube_api.reset_calls()
    assert sidecar.raw("GET", proto.PATH_POD, auth=None)[0] == 401
    assert kube_api.calls == []


def test_client_without_a_sidecar(tmp_path: Path) -> None:
    client = SidecarClient(str(tmp_path / "sidecar.sock"), str(tmp_path / "sidecar.secret"), timeout=2)
    assert run(client.healthy()) is False
    with pytest.raises(SidecarUnavailable, match="is the sidecar container running"):
        run(client.pod())
    (tmp_path / "sidecar.secret").write_text("s")
    with pytest.raises(SidecarUnavailable, match="is the sidecar container running"):
        run(client.request_snapshot())


# --- issue 19: the sidecar under attack ------------------------------------------------------------------------------


def rendered_role(path: str) -> dict[str, Any]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / path)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    (role,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Role"]
    return role


def test_item1_roles_pinned_to_the_objects_the_sidecar_touches(
    kube_api: KubeAPI, gke: GKESnapshotController, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    """Every call of a require-mode session is allowed by the rendered base Role, names included; for each rule a
    neighbour (another pod, another policy, another verb or resource) is denied."""
    from tests.kubeapi.rbac import allows
    from tests.kubeapi.server import Call

    make_pod(kube_api)
    kube_api.create(installed_policy())
    client = start(kube_api, tmp_path, sidecars, REQUIRE_ARGS).client
    run(client.pod())
    trigger = run(client.request_snapshot())["trigger"]
    done = follow_until_done(client, trigger)
    run(client.snapshots())
    run(client.delete_snapshot(done["snapshot"]))
    role = rendered_role("deploy/base")
    calls = kube_api.calls
    assert {c.resource for c in calls} == {"pods", "podsnapshotpolicies", "podsnapshotmanualtriggers", "podsnapshots"}
    for call in calls:
        # A watch names its one object by the field selector metadata.name, as the sidecar sends it.
        assert allows(role, call, field_name=call.name), call

    def call(verb: str, resource: str, name: str | None, group: str = "podsnapshot.gke.io") -> Call:
        return Call(verb, group, "v1", resource, namespace=NAMESPACE, name=name)

    pods = call("get", "pods", POD, group="")
    assert allows(role, pods)
    policy = call("get", "podsnapshotpolicies", "notebook-snapshots")
    assert allows(role, policy)
    neighbours = [
        call("get", "pods", "other-0", group=""),  # rule 0: another pod
        call("patch", "pods", POD, group=""),  # rule 0: another verb on the own pod
        call("list", "pods", None, group=""),
        call("get", "podsnapshotpolicies", "other-policy"),  # rule 1: another policy
        call("create", "podsnapshotpolicies", None),  # require mode: no create
        call("update", "podsnapshotmanualtriggers", "x"),  # rule 2: no other verb
        call("deletecollection", "podsnapshotmanualtriggers", None),
        call("patch", "podsnapshots", "x"),  # rule 3: PodSnapshots are GKE's
        call("create", "podsnapshots", None),
        call("get", "secrets", "token", group=""),
    ]
    for neighbour in neighbours:
        assert not allows(role, neighbour), neighbour

    # Kubeflow Notebooks v1: the owning Notebook only (its pod, `notebook-0`, too).
    notebook = rendered_role("deploy/overlays/kubeflow-notebook")
    assert allows(notebook, call("patch", "notebooks", "notebook", group="kubeflow.org"))
    assert allows(notebook, pods)
    for neighbour in (
        call("patch", "notebooks", "neighbour", group="kubeflow.org"),
        call("get", "notebooks", "neighbour", group="kubeflow.org"),
        call("get", "pods", "neighbour-0", group=""),
        call("delete", "notebooks", "notebook", group="kubeflow.org"),
    ):
        assert not allows(notebook, neighbour), neighbour
    # Workspaces: the owning Workspace only; its pod's name is generated by the controller (said in the overlay).
    workspace = rendered_role("deploy/overlays/kubeflow-workspace")
    # The Workspace is the one whose account ws-research the RoleBinding names.
    assert allows(workspace, call("patch", "workspaces", "research", group="kubeflow.org"))
    assert not allows(workspace, call("patch", "workspaces", "neighbour", group="kubeflow.org"))
    assert not allows(workspace, call("get", "notebooks", "research", group="kubeflow.org"))
    assert not allows(workspace, call("list", "pods", None, group=""))


def long_poll(sidecar: Sidecar, trigger: str, wait: int = 30) -> Any:
    """A `?wait=` request sent and left open (the caller closes the socket to hang up)."""
    s = sidecar.connect()
    request = (
        f"GET {proto.snapshot_request_path(trigger)}?wait={wait} HTTP/1.1\r\nHost: sidecar\r\n"
        f"Authorization: Bearer {sidecar.secret()}\r\nConnection: close\r\n\r\n"
    )
    s.sendall(request.encode())
    return s


def timed_pod_reads(sidecar: Sidecar, count: int) -> list[float]:
    import time

    times = []
    for _ in range(count):
        t0 = time.monotonic()
        status, answer = sidecar.raw("GET", proto.PATH_POD)
        times.append(time.monotonic() - t0)
        assert status == 200, answer
    return times


def test_item2_abandoned_long_polls_do_not_starve_the_sidecar(
    kube_api: KubeAPI, gke: GKESnapshotController, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    """Sixteen and more `?wait=30` long-polls whose callers hang up: their watches end at once, and a plain
    `GET /v1/pod` meanwhile answers within a second."""
    import time

    make_pod(kube_api)
    kube_api.create(installed_policy())
    gke.checkpoint_seconds = 60.0  # the request stays `pending`: every long-poll waits its full time
    sidecar = start(kube_api, tmp_path, sidecars, REQUIRE_ARGS)
    trigger = run(sidecar.client.request_snapshot())["trigger"]
    assert run(sidecar.client.follow(trigger))["phase"] == "pending"

    def open_watches() -> int:
        return len(kube_api._watchers)  # the loopback server's open watch streams

    polls = [long_poll(sidecar, trigger) for _ in range(24)]
    wait_until(lambda: open_watches() >= 8, timeout=10)  # WATCH_SLOTS long-polls hold a watch, the rest wait
    assert max(timed_pod_reads(sidecar, 5)) < 1.0
    for s in polls:
        s.close()  # hang up
    t0 = time.monotonic()
    wait_until(lambda: open_watches() == 0, timeout=5)
    assert time.monotonic() - t0 < 3.0  # not the 5 s of a watch chunk, nor the 30 s asked for
    assert max(timed_pod_reads(sidecar, 5)) < 1.0
    # A long-poll that stays answers at its deadline, with the phase it waited on.
    view = run(sidecar.client.follow(trigger, wait=2))
    assert view["phase"] == "pending"


def test_item2_pod_read_under_200_long_polls_and_300_held_connections(
    kube_api: KubeAPI, gke: GKESnapshotController, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    """The bench of the issue: 200 concurrent long-polls and 300 held connections (connected, nothing sent);
    20 plain `GET /v1/pod` each answer within a second. The figures are printed (median and spread)."""
    import statistics

    make_pod(kube_api)
    kube_api.create(installed_policy())
    gke.checkpoint_seconds = 60.0  # the request stays `pending`
    sidecar = start(kube_api, tmp_path, sidecars, [*REQUIRE_ARGS, "--request-timeout", "60"])
    trigger = run(sidecar.client.request_snapshot())["trigger"]
    assert run(sidecar.client.follow(trigger))["phase"] == "pending"
    baseline = timed_pod_reads(sidecar, 10)
    polls = [long_poll(sidecar, trigger) for _ in range(200)]
    held = [sidecar.connect() for _ in range(300)]
    try:
        wait_until(lambda: len(kube_api._watchers) >= 8, timeout=10)
        loaded = timed_pod_reads(sidecar, 20)
    finally:
        for s in polls + held:
            s.close()
    q = statistics.quantiles(loaded, n=10)
    print(
        f"\nGET /v1/pod, idle: median {1000 * statistics.median(baseline):.1f} ms; under 200 long-polls + 300 held "
        f"connections: median {1000 * statistics.median(loaded):.1f} ms, p10-p90 {1000 * q[0]:.1f}-{1000 * q[-1]:.1f}"
        f" ms, max {1000 * max(loaded):.1f} ms (n={len(loaded)})"
    )
    assert max(loaded) < 1.0, loaded

    # The other reading of "200 concurrent": 200 plain GET /v1/pod at once, beside 300 held connections.
    from concurrent.futures import ThreadPoolExecutor

    def one(_: int) -> float:
        return timed_pod_reads(sidecar, 1)[0]

    held = [sidecar.connect() for _ in range(300)]
    try:
        with ThreadPoolExecutor(200) as pool:
            burst = sorted(pool.map(one, range(200)))
    finally:
        for s in held:
            s.close()
    q = statistics.quantiles(burst, n=10)
    print(
        f"200 concurrent GET /v1/pod + 300 held connections: median {1000 * statistics.median(burst):.0f} ms, "
        f"p10-p90 {1000 * q[0]:.0f}-{1000 * q[-1]:.0f} ms, max {1000 * burst[-1]:.0f} ms"
    )
    assert max(burst) < 1.0, burst


def test_item3_no_secret_or_token_in_any_log_line(
    kube_api: KubeAPI, gke: GKESnapshotController, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    make_pod(kube_api)
    kube_api.create(installed_policy())
    sidecar = start(kube_api, tmp_path, sidecars, REQUIRE_ARGS)
    secret = sidecar.secret()
    token = kube_api.token
    half = len(secret) // 2
    hostile: list[bytes] = [
        # A header with a control character: tornado refuses the request and would quote the line.
        f"GET /v1/pod HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer {secret[:half]}\x01{secret[half:]}\r\n\r\n".encode(),
        f"GET /v1/pod HTTP/1.1\r\nHost: s\r\nX-Token: {token}\x7f\r\nAuthorization: Bearer {secret}\r\n\r\n".encode(),
        f"GET /v1/pod HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer {secret}\r\nBad\x00Name: {secret}\r\n\r\n".encode(),
        # The secret and the token in query strings and paths.
        f"GET /v1/pod?secret={secret} HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer {secret}\r\n\r\n".encode(),
        f"GET /v1/snapshots?token={token} HTTP/1.1\r\nHost: s\r\n\r\n".encode(),
        f"DELETE /v1/snapshots/{secret} HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer {secret}\r\n\r\n".encode(),
        f"GET /v1/{token}?x={secret}%0A HTTP/1.1\r\nHost: s\r\n\r\n".encode(),
        f"GET /v1/snapshot-requests/{token.lower()[:40]} HTTP/1.1\r\nAuthorization: {secret}\r\n\r\n".encode(),
        # A request line that forges a log line.
        f"GET /v1/pod\r\n2026-01-01 INFO forged {secret} HTTP/1.1\r\nHost: s\r\n\r\n".encode(),
        f"P\x01ST /v1/pod?{secret} HTTP/1.1\r\nHost: s\r\n\r\n".encode(),
    ]
    for raw in hostile:
        with sidecar.connect() as s:
            s.sendall(raw)
            s.shutdown(1)
            while s.recv(65536):
                pass
    # The token refused by the API (logged as an API answer) and the sidecar's own DEBUG lines.
    kube_api.fail_next("get", "pods", code=401, times=2, message=f"token {token} rejected")
    with pytest.raises(SidecarError):
        run(sidecar.client.pod())
    log = sidecar.log()
    for needle in (secret, token, secret[:half], secret[half:], token.lower()[:40]):
        assert needle not in log, needle
    # The access log names routes, never the raw URI; control characters never reach the log raw.
    assert "DELETE /v1/snapshots/{name} 400" in log
    assert not any(c in log for c in "\x00\x01\x7f")
    assert "INFO forged" not in log


def test_item4_api_errors_are_said_in_our_words(
    kube_api: KubeAPI, gke: GKESnapshotController, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    make_pod(kube_api)
    kube_api.create(installed_policy())
    sidecar = start(kube_api, tmp_path, sidecars, REQUIRE_ARGS)
    leaks = (
        'Internal error occurred: failed calling webhook "gate.example.com": Post '
        '"https://10.12.0.7:8443/validate?timeout=10s": dial tcp 10.12.0.7:8443: connect: connection refused; '
        'User "system:serviceaccount:team-a:jupyter-suspend-sidecar" cannot create podsnapshotmanualtriggers'
    )
    secret_words = ("10.12.0.7", "gate.example.com", "system:serviceaccount:team-a", "https://")
    for code, expect in ((403, proto.E_KUBE_FORBIDDEN), (500, proto.E_KUBE_UNAVAILABLE), (422, proto.E_KUBE_ERROR)):
        kube_api.fail_next("create", "podsnapshotmanualtriggers", code=code, message=leaks)
        with pytest.raises(SidecarError) as err:
            run(sidecar.client.request_snapshot())
        assert err.value.code == expect
        # What to do: a next step, or for a 5xx "again, in a moment" (retryable; the caller words it).
        assert err.value.next_step if code != 500 else err.value.retryable, err.value
        for word in secret_words:
            assert word not in str(err.value), (word, str(err.value))
    # The detail is in the sidecar's own log, at DEBUG (it names other objects and the identity).
    debug = [line for line in sidecar.log().splitlines() if "10.12.0.7" in line]
    assert debug
    assert all(" DEBUG " in line for line in debug), debug
    # An unexpected failure is not described to the caller either.
    status, answer = sidecar.raw("GET", proto.PATH_POD, headers={"Content-Length": "x"})
    assert status == 400
    assert "x" not in answer["message"].split()


def test_item5_request_deadlines_and_connection_cap(kube_api: KubeAPI, tmp_path: Path, sidecars: list[Sidecar]) -> None:
    import time

    make_pod(kube_api)
    kube_api.create(installed_policy())
    sidecar = start(kube_api, tmp_path, sidecars, [*REQUIRE_ARGS, "--request-timeout", "1", "--max-connections", "16"])
    # A drip-fed body: closed after the deadline, without an answer and without an API call.
    kube_api.reset_calls()
    s = sidecar.connect()
    head = (
        f"POST {proto.PATH_SNAPSHOT_REQUESTS} HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer {sidecar.secret()}\r\n"
        "Content-Length: 100\r\n\r\n{"
    )
    s.sendall(head.encode())
    t0 = time.monotonic()
    closed = False
    while time.monotonic() - t0 < 5:
        try:
            s.sendall(b" ")
            s.settimeout(0.3)
            if s.recv(1024) == b"":
                closed = True
                break
        except TimeoutError:
            continue
        except OSError:
            closed = True
            break
    s.close()
    assert closed
    assert time.monotonic() - t0 < 3.0
    # Headers that never end: closed after the deadline too.
    s = sidecar.connect()
    s.sendall(b"GET /v1/pod HTTP/1.1\r\nHost: s\r\n")
    s.settimeout(5)
    t0 = time.monotonic()
    assert s.recv(1024) == b""
    assert time.monotonic() - t0 < 3.0
    s.close()
    assert kube_api.calls == []
    # The cap: 16 held connections; the 17th is answered 503 too_busy and closed at once, and a slot frees
    # when one goes.
    held = [sidecar.connect() for _ in range(16)]
    time.sleep(0.2)
    extra = sidecar.connect()
    extra.settimeout(2)
    answer = b""
    while data := extra.recv(4096):
        answer += data
    extra.close()
    status, body = _parse_response(answer, "over the cap")
    assert (status, json.loads(body)["error"], json.loads(body)["retryable"]) == (503, proto.E_TOO_BUSY, True)
    held.pop().close()
    time.sleep(0.2)
    assert sidecar.raw("GET", proto.PATH_POD)[0] == 200
    for h in held:
        h.close()
    assert "connections open: refusing further ones" in sidecar.log()


@pytest.mark.parametrize(
    ("check", "good", "bad"),
    [
        (
            proto.is_dns1123_subdomain,
            ["a", "a.b", "a-b.c-d", "0", "a" * 253, ".".join(["a" * 63] * 4)[:253].rstrip(".")],
            ["", "a\n", "a..b", "a.-b", "a-.b", "-a", "a-", ".a", "a.", "A", "a_b", "a b", "a" * 254, "a/b", "é"],
        ),
        (proto.is_dns1123_label, ["a", "a-b", "a" * 63], ["a.b", "a\n", "a" * 64, "-a", "A", ""]),
        (proto.is_label_value, ["", "a", "A_b.c-d", "a" * 63], ["a\n", "-a", "a" * 64, "a b", "a/b"]),
        (proto.is_trigger_name, ["notebook-0-20260101-000000-abcdef", "a" * 63], ["a" * 64, "a\n", "a..b", "A"]),
        (
            proto.is_label_key,
            ["app", "statefulset.kubernetes.io/pod-name", "a_b"],
            ["a\n", "/a", "a..b/c", "a/", "a" * 64, "x/y/z"],
        ),
    ],
)
def test_item6_names_by_kubernetes_rules(check: Any, good: list[str], bad: list[str]) -> None:
    for name in good:
        assert check(name), name
    for name in bad:
        assert not check(name), name


@pytest.mark.parametrize(
    "args",
    [
        ["--pod-name", "notebook-0\n"],
        ["--pod-name", "a..b"],
        ["--pod-namespace", "team.a"],
        ["--policy-name", "p\n"],
        ["--api-version", "v1/../../api"],
        ["--api-version", "v1\n"],
    ],
)
def test_item6_configured_names_are_checked_at_start(args: list[str]) -> None:
    base = ["--pod-name", POD, "--pod-namespace", NAMESPACE, *REQUIRE_ARGS]
    with pytest.raises(ConfigError):
        parse_config([*base, *args], env={})
    with pytest.raises(ConfigError, match="storage-config"):
        parse_config(["--pod-name", POD, "--pod-namespace", NAMESPACE, *CREATE_ARGS[:-1], "store\n"], env={})
    assert parse_config(base, env={}).pod_name == POD


def test_item6_bad_names_are_refused_before_any_api_call(
    kube_api: KubeAPI, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    make_pod(kube_api)
    kube_api.create(installed_policy())
    sidecar = start(kube_api, tmp_path, sidecars, REQUIRE_ARGS)
    kube_api.reset_calls()
    cases = [
        ("DELETE", proto.snapshot_path("a%0A")),  # a trailing newline, decoded into the path argument
        ("DELETE", proto.snapshot_path("a..b")),
        ("DELETE", proto.snapshot_path("a.-b")),
        ("DELETE", proto.snapshot_path("a" * 254)),
        ("GET", proto.snapshot_request_path("a..b")),
        ("GET", proto.snapshot_request_path("a" * 64)),  # a trigger name is also a label value
        ("GET", proto.snapshot_request_path("x%0A")),
        ("GET", proto.PATH_POD + "?pod=notebook-0%0A"),
        ("GET", proto.PATH_POD + "?namespace=team-a%0A"),
        ("GET", proto.PATH_SNAPSHOTS + "?namespace=team.a"),
    ]
    for method, path in cases:
        status, answer = sidecar.raw(method, path)
        assert (status, answer["error"]) == (400, proto.E_INVALID_VALUE), (path, answer)
        assert "\n" not in answer["message"]
    assert kube_api.calls == []


def test_item7_not_found_and_not_yours_are_answered_alike(
    kube_api: KubeAPI, gke: GKESnapshotController, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    make_pod(kube_api)
    make_pod(kube_api, "secret-project-0", labels={"app": "notebook"})
    kube_api.create(installed_policy())
    sidecar = start(kube_api, tmp_path, sidecars, REQUIRE_ARGS)
    kube_api.create(
        {
            "apiVersion": GKE,
            "kind": "PodSnapshotManualTrigger",
            "metadata": {"name": "theirs", "namespace": NAMESPACE},
            "spec": {"targetPod": "secret-project-0"},
        }
    )
    theirs: str = wait_until(lambda: gke.snapshots_created[0] if gke.snapshots_created else None, timeout=10)
    answers = []
    for method, path in (
        ("GET", proto.snapshot_request_path("theirs")),
        ("GET", proto.snapshot_request_path("unknown")),
        ("DELETE", proto.snapshot_path(theirs)),
        ("DELETE", proto.snapshot_path("unknown")),
    ):
        status, answer = sidecar.raw(method, path)
        name = path.rsplit("/", 1)[1]
        answers.append((status, json.dumps(answer).replace(name, "NAME")))
        assert "secret-project" not in json.dumps(answer).replace(name, "")
    assert answers[0] == answers[1], answers
    assert answers[2] == answers[3], answers
    assert answers[0][0] == 404
    assert "secret-project-0" in sidecar.log()  # said at DEBUG, for whoever reads the sidecar's log
    assert not kube_api.calls_matching(verb="delete")


def _sidecar_with(kube_api: KubeAPI, tmp_path: Path, sidecars: list[Sidecar], name: str, **env: str) -> Sidecar:
    sidecar = Sidecar(kube_api, tmp_path / name, [*REQUIRE_ARGS, "--kube-timeout", "2"], extra_env=env)
    sidecars.append(sidecar)
    return sidecar.start()


def test_item8_transport_failures_are_named(kube_api: KubeAPI, tmp_path: Path, sidecars: list[Sidecar]) -> None:
    """Connection refused, DNS failure, TLS failure and timeout: each its own code and next step, and a refused
    connection answers at once (urllib3's NewConnectionError is a ConnectTimeoutError: it used to be "timeout")."""
    import socket
    import threading
    import time

    make_pod(kube_api)
    closed_port = str(free_port())
    refused = _sidecar_with(kube_api, tmp_path, sidecars, "refused", KUBERNETES_SERVICE_PORT=closed_port)
    t0 = time.monotonic()
    with pytest.raises(SidecarError) as err:
        run(refused.client.pod())
    assert (err.value.code, err.value.retryable) == (proto.E_KUBE_REFUSED, True)
    assert "refused the connection" in err.value.message
    assert err.value.next_step
    assert time.monotonic() - t0 < 2.0

    dns = _sidecar_with(kube_api, tmp_path, sidecars, "dns", KUBERNETES_SERVICE_HOST="no-such-api.invalid")
    with pytest.raises(SidecarError) as err:
        run(dns.client.pod())
    assert err.value.code == proto.E_KUBE_DNS, err.value
    assert "KUBERNETES_SERVICE_HOST" in err.value.next_step

    import trustme

    other_ca = tmp_path / "other-ca.crt"
    other_ca.write_bytes(trustme.CA().cert_pem.bytes())  # not the CA that signed the API server's certificate
    tls = Sidecar(kube_api, tmp_path / "tls", [*REQUIRE_ARGS, "--ca-file", str(other_ca)])
    sidecars.append(tls)
    tls.start()
    with pytest.raises(SidecarError) as err:
        run(tls.client.pod())
    assert (err.value.code, err.value.retryable) == (proto.E_KUBE_TLS, False), err.value
    assert "ca-file" in err.value.next_step

    # An address that accepts and never answers.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(silent.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        port = str(silent.getsockname()[1])
        slow = _sidecar_with(kube_api, tmp_path, sidecars, "timeout", KUBERNETES_SERVICE_PORT=port)
        with pytest.raises(SidecarError) as err:
            run(slow.client.pod())
        assert (err.value.status, err.value.code, err.value.retryable) == (504, proto.E_KUBE_TIMEOUT, True)
    finally:
        stop.set()
        thread.join(5)
        for s in accepted:
            s.close()
        silent.close()


# --- issue 18: after a restore, and trigger names ---------------------------------------------------------------------


def _restore(kube_api: KubeAPI) -> str:
    """What a restore does to the API's view: the old pod's token no longer authenticates, the pod is a new one
    (a new uid) whose PodRestored condition is True. Returns the token the new pod's kubelet would project."""
    kube_api._tokens.pop(kube_api.token)  # the deleted pod's bound token is refused from now on
    fresh = kube_api.add_token(kube_api.user)
    kube_api.delete("v1", "pods", NAMESPACE, POD)
    make_pod(kube_api)
    kube_api.patch_status(
        "v1",
        "pods",
        NAMESPACE,
        POD,
        {"conditions": [{"type": "PodRestored", "status": "True", "message": "restored from snapshot s1"}]},
    )
    return fresh


def test_item18_6_after_restore_fresh_token_is_read_again_on_401(
    kube_api: KubeAPI, gke: GKESnapshotController, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    """The world where the kubelet has written the new pod's token: the first call is refused with the cached
    token, the sidecar reads the file at once and the one retry succeeds (not after the client's 60 s refresh)."""
    old_uid = make_pod(kube_api)
    kube_api.create(installed_policy())
    sidecar = Sidecar(kube_api, tmp_path / "sidecar", REQUIRE_ARGS, pod_uid=old_uid)
    sidecars.append(sidecar)
    sidecar.start()
    assert run(sidecar.client.pod())["restored"] is False
    fresh = _restore(kube_api)
    (sidecar.sa / "token").write_text(fresh)
    kube_api.reset_calls()
    pod = run(sidecar.client.pod())
    # The downward-API uid is the old pod's (environment from memory): reported, and the restore is known from the
    # API's PodRestored condition, not from the uid alone.
    assert pod["restored"] is True
    assert pod["started_uid"] == old_uid != pod["uid"]
    assert [c.verb for c in kube_api.rejected] == ["get"]  # one refused call, then the retry with the new token
    assert run(sidecar.client.request_snapshot())["trigger"]
    assert len(kube_api.rejected) == 1
    assert fresh not in sidecar.log()


def test_item18_6_after_restore_stale_token_says_so_and_leaves_cleanup_to_the_releaser(
    kube_api: KubeAPI, gke: GKESnapshotController, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    """The world where the files still hold the deleted pod's token: one retry after re-reading, then a plain
    answer (status, next step) -- and a snapshot deletion is not attempted a third time."""
    make_pod(kube_api)
    kube_api.create(installed_policy())
    sidecar = start(kube_api, tmp_path, sidecars, REQUIRE_ARGS)  # started with a uid that is not the pod's
    assert run(sidecar.client.pod())["restored"] is False  # a uid that differs is not, alone, a restore
    _restore(kube_api)
    kube_api.reset_calls()
    with pytest.raises(SidecarError) as err:
        run(sidecar.client.delete_snapshot("consumed-snapshot"))
    assert (err.value.status, err.value.code, err.value.retryable) == (502, proto.E_KUBE_UNAUTHORIZED, True)
    assert "also after reading it again" in err.value.message
    assert "restored from a snapshot" in err.value.next_step
    assert "releaser" in err.value.next_step
    assert len(kube_api.rejected) == 2  # the call and its one retry
    assert kube_api.calls == []


def test_item18_8_trigger_names_fit_a_label_value(
    kube_api: KubeAPI, gke: GKESnapshotController, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    from jupyter_suspend.sidecar.kube import TRIGGERED_BY_LABEL, trigger_name

    for pod in ("notebook-0", "a" * 63, "a" * 200 + "-0", "x" * 39 + ".y-0", "n" * 40 + "-" * 5 + "b"):
        name = trigger_name(pod)
        assert proto.is_trigger_name(name), name
        assert len(name) <= 63
    long_pod = "research-" + "n" * 100 + "-0"
    make_pod(kube_api, long_pod, labels={"app": "notebook"})
    kube_api.create(installed_policy())
    sidecar = start(kube_api, tmp_path, sidecars, [*REQUIRE_ARGS, "--pod-name", long_pod])
    trigger = run(sidecar.client.request_snapshot())["trigger"]
    assert len(trigger) <= 63
    done = follow_until_done(sidecar.client, trigger)
    snapshot = kube_api.get(GKE, "podsnapshots", NAMESPACE, done["snapshot"])
    assert snapshot["metadata"]["labels"][TRIGGERED_BY_LABEL] == trigger


def test_item8_new_connection_error_is_not_taken_for_a_timeout() -> None:
    """The trap of item 8, pinned: urllib3's NewConnectionError (and NameResolutionError) subclass
    ConnectTimeoutError, so the classification tests them first."""
    import socket

    import urllib3

    from jupyter_suspend.sidecar.config import parse_config
    from jupyter_suspend.sidecar.errors import Fault
    from jupyter_suspend.sidecar.kube import PodSnapshots

    errors = urllib3.exceptions
    assert issubclass(errors.NewConnectionError, errors.ConnectTimeoutError)
    assert issubclass(errors.NameResolutionError, errors.NewConnectionError)
    config = parse_config([*REQUIRE_ARGS, "--pod-name", POD, "--pod-namespace", NAMESPACE], env={})
    from kubernetes import client

    kube = PodSnapshots(config, client.ApiClient(client.Configuration()))
    conn = urllib3.connection.HTTPSConnection("api.example", 443)
    cases = [
        (errors.NewConnectionError(conn, "Failed to establish a new connection: [Errno 111] Connection refused"), 502,
         proto.E_KUBE_REFUSED),
        (errors.NameResolutionError("api.example", conn, socket.gaierror(-2, "Name or service not known")), 502,
         proto.E_KUBE_DNS),
        (errors.ConnectTimeoutError(conn, "timed out"), 504, proto.E_KUBE_TIMEOUT),
        (errors.ReadTimeoutError(None, "/", "read timed out"), 504, proto.E_KUBE_TIMEOUT),  # type: ignore[arg-type]
        (errors.SSLError("certificate verify failed"), 502, proto.E_KUBE_TLS),
        (errors.ProtocolError("Connection aborted."), 502, proto.E_KUBE_UNAVAILABLE),
    ]  # fmt: skip
    for exc, status, code in cases:
        with pytest.raises(Fault) as fault:
            kube._transport_fault(exc, "get", "pods")
        assert (fault.value.status, fault.value.code) == (status, code), exc
        assert fault.value.next_step, exc


def test_item6_an_owner_label_that_is_no_object_name_is_refused_before_any_owner_call(
    kube_api: KubeAPI, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    make_pod(kube_api, labels={"notebook-name": "Not_A.Name"})  # a valid label value, no valid object name
    sidecar = start(kube_api, tmp_path, sidecars, ["--workload", "notebook"])
    kube_api.reset_calls()
    for method, path, body in (("GET", proto.PATH_WORKLOAD, b""), ("POST", proto.PATH_WORKLOAD_STOP, b"{}")):
        status, answer = sidecar.raw(method, path, body)
        assert (status, answer["error"]) == (409, proto.E_OWNER_UNKNOWN), answer
        assert answer["next_step"]
    assert {(c.verb, c.resource) for c in kube_api.calls} == {("get", "pods")}
