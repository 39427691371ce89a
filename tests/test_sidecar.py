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
from jupyter_suspend.server.sidecar_client import SidecarClient, SidecarError, SidecarUnavailable
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

    # Another pod's snapshot: a get to read its origin, then 403 -- never a delete.
    with pytest.raises(SidecarError) as err:
        run(sidecar.client.delete_snapshot(other))
    assert (err.value.status, err.value.code) == (403, proto.E_FORBIDDEN_TARGET)
    assert "other-0" in err.value.message
    assert called(kube_api) == {("podsnapshot.gke.io", "podsnapshots", "get")}
    assert kube_api.get(GKE, "podsnapshots", NAMESPACE, other) is not None
    # Another pod's snapshot request cannot be followed, and its snapshot is not listed as this pod's.
    with pytest.raises(SidecarError) as err:
        run(sidecar.client.follow("other-trigger"))
    assert (err.value.status, err.value.code) == (403, proto.E_FORBIDDEN_TARGET)
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
