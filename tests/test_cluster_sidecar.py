"""The sidecar as it runs in its container, on the real control plane: ``python -m jupyter_suspend.sidecar`` in a
subprocess with a token bound to its pod (TokenRequest) and deploy/base's Role judged by the real RBAC authorizer,
the simulated GKE snapshot controller (tests/cluster/gke.py) watching the real API server, and the server
extension's :class:`SidecarClient` from the test. The sidecar talks to the API server through
tests/cluster/faults.py's proxy: it records every call that passed (so "a refused request makes no API call" is read
from the wire) and injects the few faults a real API server does not make on request (a 500 or 503 now, a slow
answer). Moved from tests/test_sidecar.py, which ran the same checks against a loopback API server of ours
(since removed)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from jupyter_suspend.common import sidecar_protocol as proto
from jupyter_suspend.server.sidecar_client import SidecarClient, SidecarError, SidecarUnavailable, _parse_response
from tests.cluster.control_plane import Cluster, free_port
from tests.cluster.faults import FaultProxy
from tests.cluster.gke import GKESnapshotController
from tests.cluster.notebook import REPO, RealSidecar, bound_token, create, deploy_base, get, render, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

run = asyncio.run
ACCOUNT = "jupyter-suspend-sidecar"
POD = "notebook-0"
POLICY = "notebook-snapshots"
GROUP, VERSION = "podsnapshot.gke.io", "v1"
REQUIRE_ARGS = ["--policy-mode", "require", "--policy-name", POLICY]  # deploy/base's StatefulSet
POD_LABELS_SELECTOR = "app.kubernetes.io/name=jupyter-suspend-notebook,statefulset.kubernetes.io/pod-name=notebook-0"
#: Create mode, resuming after the checkpoint: the pod keeps running, so its bound token stays valid for the whole
#: session (a stopped pod is replaced by the StatefulSet controller; that path is test_cluster_gke's).
CREATE_ARGS = [
    *("--policy-mode", "create", "--policy-selector", POD_LABELS_SELECTOR, "--storage-config", "jupyter-suspend"),
    *("--post-checkpoint", "resume"),
]


def chunked(body: bytes, size: int = 4096) -> bytes:
    """``body`` in HTTP/1.1 chunked transfer coding."""
    out = b""
    for i in range(0, len(body), size):
        part = body[i : i + size]
        out += f"{len(part):x}\r\n".encode() + part + b"\r\n"
    return out + b"0\r\n\r\n"


class Sidecar(RealSidecar):
    """The real sidecar with raw access to its socket, for requests no client would send."""

    token = ""
    tcp: tuple[str, int] | None = None

    def listen_tcp(self, port: int) -> None:
        """Serve on 127.0.0.1:port instead of the socket (``--listen``)."""
        self.tcp = ("127.0.0.1", port)
        self.args += ["--listen", f"127.0.0.1:{port}"]
        self.client = SidecarClient(self.socket_path, self.secret_path, timeout=30.0, tcp=self.tcp)

    def secret(self) -> str:
        return Path(self.secret_path).read_text().strip()

    def connect(self) -> socket.socket:
        s = socket.socket(socket.AF_INET if self.tcp else socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(20)
        s.connect(self.tcp or self.socket_path)
        return s

    def raw(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        auth: str | None = "secret",
        content_length: bool = True,
    ) -> tuple[int, dict[str, Any]]:
        head = {"Host": "sidecar", "Connection": "close"}
        if auth == "secret":
            head[proto.AUTH_HEADER] = f"Bearer {self.secret()}"
        elif auth is not None:
            head[proto.AUTH_HEADER] = auth
        if body and content_length:
            head["Content-Length"] = str(len(body))
        head.update(headers or {})
        request = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items()) + "\r\n"
        with self.connect() as s:
            s.sendall(request.encode("latin-1") + body)
            chunks = []
            while data := s.recv(65536):
                chunks.append(data)
        status, raw = _parse_response(b"".join(chunks), f"{method} {path}")
        return status, json.loads(raw) if raw else {}


@pytest.fixture
def notebook(cluster: Cluster, kube_ns: str) -> dict[str, Any]:
    return deploy_base(cluster, kube_ns)


@pytest.fixture
def gke(cluster: Cluster, kube_ns: str) -> Iterator[GKESnapshotController]:
    with GKESnapshotController(cluster, kube_ns, checkpoint_seconds=0.3, upload_seconds=0.3) as controller:
        yield controller
    assert not controller.errors, controller.errors


@pytest.fixture
def proxy(cluster: Cluster) -> Iterator[FaultProxy]:
    with FaultProxy(cluster) as running:
        yield running


@pytest.fixture
def sidecars() -> Iterator[list[Sidecar]]:
    """Sidecars started by the test; each is stopped, and its log checked for its secret and token, at teardown."""
    started: list[Sidecar] = []
    yield started
    for sidecar in started:
        secret = sidecar.secret() if os.path.exists(sidecar.secret_path) else None
        sidecar.stop()
        assert sidecar.proc is not None
        log = sidecar.log()
        assert sidecar.proc.returncode == 0, log
        assert sidecar.token not in log
        if secret:
            assert secret not in log
        # A stopped sidecar leaves neither a socket nor a secret behind.
        assert not os.path.exists(sidecar.socket_path)
        assert not os.path.exists(sidecar.secret_path)


def start(
    cluster: Cluster,
    namespace: str,
    pod: dict[str, Any],
    proxy: FaultProxy | None,
    tmp_path: Path,
    sidecars: list[Sidecar],
    args: list[str] = REQUIRE_ARGS,
    name: str = "sidecar",
    token: str | None = None,
    api_port: int | None = None,
    tcp_port: int | None = None,
    **env: str,
) -> Sidecar:
    port = api_port or (proxy.port if proxy else None)
    sidecar = Sidecar(cluster, namespace, pod, tmp_path / name, list(args), api_port=port, extra_env=env)
    if tcp_port is not None:
        sidecar.listen_tcp(tcp_port)
    sidecar.token = token or bound_token(cluster, namespace, ACCOUNT, pod)
    sidecars.append(sidecar)
    sidecar.start(sidecar.token)
    return sidecar


def follow_until_done(client: SidecarClient, trigger: str) -> proto.SnapshotProgress:
    seen: list[str] = []
    view = run(client.follow(trigger))
    while view["phase"] not in proto.TERMINAL_PHASES:
        seen.append(view["phase"])
        assert len(seen) < 40, seen
        view = run(client.follow(trigger, wait=5))
    return view


def custom_get(cluster: Cluster, namespace: str, plural: str, name: str) -> dict[str, Any] | None:
    return get(cluster, namespace, f"{plural}.{GROUP}", name)


def kubectl_json(cluster: Cluster, namespace: str, *args: str, body: dict[str, Any]) -> None:
    cluster.kubectl(*args, "-n", namespace, input=json.dumps(body))


def other_pod(cluster: Cluster, namespace: str, name: str) -> None:
    """Another pod the policy selects (it need not run: GKE's controller reads it only)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "jupyter-suspend-notebook"}},
        # The sidecar's ServiceAccount, as deploy/base's pod: a token can be bound only to a pod that runs as it.
        "spec": {
            "serviceAccountName": ACCOUNT,
            "automountServiceAccountToken": False,
            "containers": [{"name": "notebook", "image": "jupyter-suspend:0.1.0"}],
        },
    }
    kubectl_json(cluster, namespace, "create", "-f", "-", body=pod)


def their_trigger(cluster: Cluster, namespace: str, gke: GKESnapshotController, name: str, pod: str) -> str:
    """A snapshot request for another pod, made by someone else; returns the snapshot GKE took of it."""
    trigger = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodSnapshotManualTrigger", "metadata": {"name": name}}
    trigger["spec"] = {"targetPod": pod}
    kubectl_json(cluster, namespace, "create", "-f", "-", body=trigger)
    snapshot: str = wait_for(lambda: gke.snapshots_created[0] if gke.snapshots_created else None, 30, "their snapshot")
    wait_for(lambda: custom_get(cluster, namespace, "podsnapshots", snapshot), 30, "their snapshot stored")
    return snapshot


def allow_create_mode(cluster: Cluster, namespace: str) -> None:
    """deploy/base's Role as role.yaml writes it for create mode: the `create` rule its kustomization removes, and
    the policy name pinned to the one create mode makes (jupyter-suspend-<pod>)."""
    patch: list[dict[str, Any]] = [
        {"op": "replace", "path": "/rules/1/resourceNames", "value": [f"jupyter-suspend-{POD}"]},
        {"op": "add", "path": "/rules/-", "value": {**policy_rule(), "resourceNames": None, "verbs": ["create"]}},
    ]
    patch[1]["value"] = {k: v for k, v in patch[1]["value"].items() if v is not None}
    cluster.kubectl("patch", "role", ACCOUNT, "-n", namespace, "--type=json", "-p", json.dumps(patch))


# --- start, the happy path in create mode -----------------------------------------------------------------------------


def test_snapshot_of_own_pod_in_create_mode(
    cluster: Cluster,
    kube_ns: str,
    notebook: dict[str, Any],
    gke: GKESnapshotController,
    proxy: FaultProxy,
    tmp_path: Path,
    sidecars: list[Sidecar],
) -> None:
    allow_create_mode(cluster, kube_ns)
    cluster.kubectl("delete", f"podsnapshotpolicies.{GROUP}", POLICY, "-n", kube_ns)  # create mode makes its own
    sidecar = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars, CREATE_ARGS)
    client = sidecar.client

    # Start: a 0600 secret, a 0660 socket, health without a secret.
    assert stat.S_IMODE(os.stat(sidecar.secret_path).st_mode) == 0o600
    assert len(sidecar.secret()) >= 43  # 32 random bytes, urlsafe base64
    assert stat.S_ISSOCK(os.stat(sidecar.socket_path).st_mode)
    assert stat.S_IMODE(os.stat(sidecar.socket_path).st_mode) in (0o660, 0o600)
    assert sidecar.raw("GET", proto.PATH_HEALTH, auth=None) == (200, {"ok": True})

    pod = run(client.pod())
    uid = notebook["metadata"]["uid"]
    assert (pod["name"], pod["namespace"], pod["uid"], pod["phase"]) == (POD, kube_ns, uid, "Running")
    assert pod["started_uid"] == uid
    assert pod["node_name"] == notebook["spec"]["nodeName"]
    assert not pod["restored"]
    policy_facts = ("policy_mode", "policy_name", "policy_exists", "post_checkpoint", "policy_problem")
    assert tuple(pod[k] for k in policy_facts) == ("create", f"jupyter-suspend-{POD}", False, "resume", None)

    requested = run(client.request_snapshot())
    trigger = requested["trigger"]
    assert trigger.startswith(f"{POD}-")
    assert (requested["policy"], requested["policy_created"]) == (f"jupyter-suspend-{POD}", True)
    stored_trigger = custom_get(cluster, kube_ns, "podsnapshotmanualtriggers", trigger)
    assert stored_trigger is not None
    assert stored_trigger["spec"] == {"targetPod": POD}
    assert stored_trigger["metadata"]["labels"]["jupyter-suspend/pod-uid"] == uid

    # The per-pod policy as the real API server stored it (CRD defaulting and pruning applied).
    policy = custom_get(cluster, kube_ns, "podsnapshotpolicies", f"jupyter-suspend-{POD}")
    assert policy is not None
    assert policy["spec"] == {
        "selector": {"matchLabels": dict(term.split("=") for term in POD_LABELS_SELECTOR.split(","))},
        "storageConfigName": "jupyter-suspend",
        "triggerConfig": {"type": "manual", "postCheckpoint": "resume"},
        "retentionConfig": {"lastAccessTimeout": "7d"},
    }  # fmt: skip

    view = follow_until_done(client, trigger)
    assert view["phase"] == "ready", view
    assert view["reason"] == "AllSnapshotsAvailable"
    snapshot = view["snapshot"]
    assert snapshot in gke.snapshots_created
    assert view["gcs_path"] == f"gs://simulated/{kube_ns}/{POD}/{snapshot}"
    kinds = {(c["source"], c["type"]): c for c in view["conditions"]}
    assert kinds["trigger", "Triggered"]["status"] == "True"
    assert kinds["snapshot", "Checkpoint"]["reason"] == "Succeeded"
    assert kinds["snapshot", "Ready"]["lastTransitionTime"]
    assert gke.stopped_pods == []  # postCheckpoint resume: the pod keeps running, the same pod
    after = run(client.pod())
    assert (after["uid"], after["phase"]) == (uid, "Running")
    assert tuple(after[k] for k in policy_facts) == ("create", f"jupyter-suspend-{POD}", True, "resume", None)

    # A second request reuses the policy.
    again = run(client.request_snapshot())
    assert again["policy_created"] is False
    second = follow_until_done(client, again["trigger"])
    assert second["phase"] == "ready"

    # List and delete this pod's snapshots; a delete takes the trigger with it.
    listed = run(client.snapshots())
    assert (listed["pod"], listed["namespace"]) == (POD, kube_ns)
    by_name = {s["name"]: s for s in listed["snapshots"]}
    assert set(by_name) == {snapshot, second["snapshot"]}
    entry = by_name[snapshot]
    assert (entry["ready"], entry["policy"], entry["trigger"]) == (True, f"jupyter-suspend-{POD}", trigger)
    assert entry["gcs_path"] == view["gcs_path"]
    assert entry["last_access"]
    assert entry["created"]

    deleted = run(client.delete_snapshot(snapshot))
    assert deleted == {"deleted": snapshot, "trigger": trigger}
    wait_for(lambda: custom_get(cluster, kube_ns, "podsnapshotmanualtriggers", trigger) is None, 30, "trigger gone")
    wait_for(lambda: custom_get(cluster, kube_ns, "podsnapshots", snapshot) is None, 30, "snapshot gone")
    assert gke.deleted_storage == [view["gcs_path"]]  # GKE's finalizer freed the storage
    assert [s["name"] for s in run(client.snapshots())["snapshots"]] == [second["snapshot"]]
    with pytest.raises(SidecarError) as missing:
        run(client.delete_snapshot(snapshot))
    assert (missing.value.status, missing.value.code) == (404, proto.E_NOT_FOUND)
    with pytest.raises(SidecarError) as unknown:
        run(client.follow("no-such-trigger"))
    assert (unknown.value.status, unknown.value.code) == (404, proto.E_NOT_FOUND)
    assert proxy.rejected() == []  # the real authorizer allowed every call the session made


# --- require mode -----------------------------------------------------------------------------------------------------


def base_policy(cluster: Cluster, namespace: str) -> dict[str, Any]:
    """deploy/base's PodSnapshotPolicy, as the platform team installs it for require mode."""
    (policy,) = [d for d in render(cluster, REPO / "deploy" / "base", namespace) if d["kind"] == "PodSnapshotPolicy"]
    return policy


def set_role_rule(cluster: Cluster, namespace: str, index: int, rule: dict[str, Any]) -> dict[str, Any]:
    """Replace one rule of the sidecar's Role (returns the old one to put back)."""
    role = get(cluster, namespace, "role", ACCOUNT)
    assert role is not None
    old: dict[str, Any] = role["rules"][index]
    patch = [{"op": "replace", "path": f"/rules/{index}", "value": rule}]
    cluster.kubectl("patch", "role", ACCOUNT, "-n", namespace, "--type=json", "-p", json.dumps(patch))
    return old


def can(cluster: Cluster, namespace: str, verb: str, what: str) -> bool:
    out = cluster.kubectl(
        "auth", "can-i", verb, what, "-n", namespace, f"--as=system:serviceaccount:{namespace}:{ACCOUNT}", check=False
    )
    return out.strip() == "yes"


def test_require_mode_reads_the_installed_policy_only(
    cluster: Cluster,
    kube_ns: str,
    notebook: dict[str, Any],
    gke: GKESnapshotController,
    proxy: FaultProxy,
    tmp_path: Path,
    sidecars: list[Sidecar],
) -> None:
    policy_kind = f"podsnapshotpolicies.{GROUP}"
    cluster.kubectl("delete", policy_kind, POLICY, "-n", kube_ns)
    client = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars).client

    # The pod view says which policy applies and what it does after the checkpoint, with 'get' only.
    proxy.reset_calls()
    facts = ("policy_mode", "policy_name", "policy_exists", "post_checkpoint", "policy_problem")
    assert tuple(run(client.pod())[k] for k in facts) == ("require", POLICY, False, None, None)
    assert proxy.triples() == {("", "pods", "get"), (GROUP, "podsnapshotpolicies", "get")}
    policy = base_policy(cluster, kube_ns)
    policy["spec"]["triggerConfig"]["postCheckpoint"] = "resume"  # the pod keeps running (and its token valid)
    kubectl_json(cluster, kube_ns, "create", "-f", "-", body=policy)
    assert tuple(run(client.pod())[k] for k in facts) == ("require", POLICY, True, "resume", None)
    stop = {"spec": {"triggerConfig": {"postCheckpoint": "stop"}}}
    cluster.kubectl("patch", policy_kind, POLICY, "-n", kube_ns, "--type=merge", "-p", json.dumps(stop))
    assert run(client.pod())["post_checkpoint"] == "stop"
    unset = {"spec": {"triggerConfig": {"postCheckpoint": None}}}  # unset: GKE's default
    cluster.kubectl("patch", policy_kind, POLICY, "-n", kube_ns, "--type=merge", "-p", json.dumps(unset))
    assert run(client.pod())["post_checkpoint"] == "resume"

    # The Role stops allowing the read (the real authorizer's 403): said as a problem, not a crash.
    old = set_role_rule(cluster, kube_ns, 1, {**policy_rule(), "resourceNames": ["another-policy"]})
    wait_for(lambda: not can(cluster, kube_ns, "get", f"{policy_kind}/{POLICY}"), 30, "RBAC denies the policy read")
    unreadable = run(client.pod())
    assert (unreadable["policy_exists"], unreadable["post_checkpoint"]) == (None, None)
    assert "does not allow 'get'" in (unreadable["policy_problem"] or "")
    assert [c.resource for c in proxy.rejected()] == ["podsnapshotpolicies"]
    set_role_rule(cluster, kube_ns, 1, old)
    wait_for(lambda: can(cluster, kube_ns, "get", f"{policy_kind}/{POLICY}"), 30, "RBAC allows the policy read again")
    cluster.kubectl("delete", policy_kind, POLICY, "-n", kube_ns)

    proxy.reset_calls()
    with pytest.raises(SidecarError) as err:
        run(client.request_snapshot())
    assert (err.value.status, err.value.code, err.value.retryable) == (409, proto.E_POLICY_MISSING, False)
    assert POLICY in err.value.message
    assert f"ask the platform team to install PodSnapshotPolicy {POLICY}" in err.value.next_step
    assert proxy.triples() == {("", "pods", "get"), (GROUP, "podsnapshotpolicies", "get")}
    assert (
        json.loads(cluster.kubectl("get", f"podsnapshotmanualtriggers.{GROUP}", "-n", kube_ns, "-o", "json"))["items"]
        == []
    )

    # A policy that does not select this pod is refused before any trigger is made.
    wrong = base_policy(cluster, kube_ns)
    wrong["spec"]["selector"] = {"matchLabels": {"app": "something-else"}}
    kubectl_json(cluster, kube_ns, "create", "-f", "-", body=wrong)
    with pytest.raises(SidecarError) as err:
        run(client.request_snapshot())
    assert (err.value.status, err.value.code) == (409, proto.E_POLICY_CONFLICT)
    assert f"does not select pod {POD}" in err.value.message
    cluster.kubectl("delete", policy_kind, POLICY, "-n", kube_ns)

    kubectl_json(cluster, kube_ns, "create", "-f", "-", body=policy)
    proxy.reset_calls()
    requested = run(client.request_snapshot())
    assert (requested["policy"], requested["policy_created"]) == (POLICY, False)
    assert follow_until_done(client, requested["trigger"])["phase"] == "ready"
    assert {c.verb for c in proxy.calls if c.resource == "podsnapshotpolicies"} == {"get"}


def policy_rule() -> dict[str, Any]:
    return {"apiGroups": [GROUP], "resources": ["podsnapshotpolicies"], "resourceNames": [POLICY], "verbs": ["get"]}


# --- failures --------------------------------------------------------------------------------------------------------


def resume_policy(cluster: Cluster, namespace: str) -> None:
    """The installed policy resumes the pod after its checkpoint: the pod (and the token bound to it) stays."""
    patch = {"spec": {"triggerConfig": {"postCheckpoint": "resume"}}}
    cluster.kubectl(
        "patch", f"podsnapshotpolicies.{GROUP}", POLICY, "-n", namespace, "--type=merge", "-p", json.dumps(patch)
    )


def test_failures_are_reported(
    cluster: Cluster,
    kube_ns: str,
    notebook: dict[str, Any],
    gke: GKESnapshotController,
    proxy: FaultProxy,
    tmp_path: Path,
    sidecars: list[Sidecar],
) -> None:
    resume_policy(cluster, kube_ns)
    client = start(
        cluster, kube_ns, notebook, proxy, tmp_path, sidecars, [*REQUIRE_ARGS, "--kube-timeout", "1.5"]
    ).client

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

    # A trigger naming a snapshot the API does not show (yet): still checkpointing, and saying so. (GKE's
    # controller is stopped first: the status is the test's, written through the status subresource.)
    gke.stop()
    ghost = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodSnapshotManualTrigger",
        "metadata": {"name": "ghost-trigger"},
    }
    ghost["spec"] = {"targetPod": POD}
    kubectl_json(cluster, kube_ns, "create", "-f", "-", body=ghost)
    status = {
        "status": {
            "conditions": [{"type": "Triggered", "status": "True", "reason": "Complete", "message": "done",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "snapshotCreated": {"name": "ghost"},
        }
    }  # fmt: skip
    cluster.kubectl(
        "patch", f"podsnapshotmanualtriggers.{GROUP}", "ghost-trigger", "-n", kube_ns,
        "--subresource=status", "--type=merge", "-p", json.dumps(status),
    )  # fmt: skip
    seen = run(client.follow("ghost-trigger"))
    assert (seen["phase"], seen["reason"], seen["snapshot"]) == ("checkpointing", "SnapshotNotFound", "ghost")

    # The API answers 500, 503 or 429: a retryable 502.
    proxy.fail("POST", r"/podsnapshotmanualtriggers$", 500)
    with pytest.raises(SidecarError) as err:
        run(client.request_snapshot())
    assert (err.value.status, err.value.code, err.value.retryable) == (502, proto.E_KUBE_UNAVAILABLE, True)
    proxy.fail("GET", rf"/pods/{POD}$", 503)
    with pytest.raises(SidecarError) as err:
        run(client.pod())
    assert (err.value.status, err.value.retryable) == (502, True)
    proxy.fail("GET", rf"/pods/{POD}$", 429, retry_after=5)
    started = time.monotonic()
    with pytest.raises(SidecarError) as err:
        run(client.pod())
    assert (err.value.status, err.value.code, err.value.retryable) == (502, proto.E_KUBE_UNAVAILABLE, True)
    assert time.monotonic() - started < 4.0  # the caller hears it at once (no sleep on Retry-After inside)

    # The Role does not allow a call (the real authorizer's 403): 502 that says so.
    snapshots_rule = {"apiGroups": [GROUP], "resources": ["podsnapshots"], "verbs": ["get", "watch", "delete"]}
    old = set_role_rule(cluster, kube_ns, 3, snapshots_rule)
    wait_for(lambda: not can(cluster, kube_ns, "list", f"podsnapshots.{GROUP}"), 30, "RBAC denies the list")
    with pytest.raises(SidecarError) as err:
        run(client.snapshots())
    assert (err.value.status, err.value.code, err.value.retryable) == (502, proto.E_KUBE_FORBIDDEN, False)
    assert "the sidecar's Role does not allow 'list' on podsnapshot.gke.io/podsnapshots" in err.value.message
    assert "role.yaml" in err.value.next_step
    set_role_rule(cluster, kube_ns, 3, old)

    # The API does not answer in time: a retryable 504.
    proxy.delay("GET", r"/podsnapshotmanualtriggers/", 3.0)
    with pytest.raises(SidecarError) as err:
        run(client.follow(trigger))
    assert (err.value.status, err.value.code, err.value.retryable) == (504, proto.E_KUBE_TIMEOUT, True)
    assert run(client.follow(trigger))["phase"] == "uploading"  # and the next call works


# --- refusals: no Kubernetes API call at all ------------------------------------------------------------------------


def test_refused_requests_make_no_api_call(
    cluster: Cluster,
    kube_ns: str,
    notebook: dict[str, Any],
    gke: GKESnapshotController,
    proxy: FaultProxy,
    tmp_path: Path,
    sidecars: list[Sidecar],
) -> None:
    resume_policy(cluster, kube_ns)
    other_pod(cluster, kube_ns, "other-0")
    sidecar = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars)
    other = their_trigger(cluster, kube_ns, gke, "other-trigger", "other-0")

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
    proxy.reset_calls()
    for method, path, body, options, status, error in cases:
        got_status, answer = sidecar.raw(method, path, body, **options)
        assert (got_status, answer.get("error")) == (status, error), (method, path, body[:60], answer)
        assert isinstance(answer.get("message"), str), answer
        assert answer["message"], answer
        assert proxy.calls == [], (method, path, proxy.calls)

    # Another pod's snapshot: a get to read its origin, then the answer a missing one gets -- never a delete.
    with pytest.raises(SidecarError) as err:
        run(sidecar.client.delete_snapshot(other))
    assert (err.value.status, err.value.code) == (404, proto.E_NOT_FOUND)
    with pytest.raises(SidecarError) as missing:
        run(sidecar.client.delete_snapshot("no-such-snapshot"))
    assert str(err.value).replace(other, "NAME") == str(missing.value).replace("no-such-snapshot", "NAME")
    assert proxy.triples() == {(GROUP, "podsnapshots", "get")}
    assert custom_get(cluster, kube_ns, "podsnapshots", other) is not None
    # Another pod's snapshot request cannot be followed, and its snapshot is not listed as this pod's.
    with pytest.raises(SidecarError) as err:
        run(sidecar.client.follow("other-trigger"))
    assert (err.value.status, err.value.code) == (404, proto.E_NOT_FOUND)
    with pytest.raises(SidecarError) as missing:
        run(sidecar.client.follow("no-such-trigger"))
    assert str(err.value).replace("other-trigger", "NAME") == str(missing.value).replace("no-such-trigger", "NAME")
    assert run(sidecar.client.snapshots())["snapshots"] == []
    assert not [c for c in proxy.calls if c.verb == "delete"]

    # The right secret, then a restart: the client reads the new secret, the old one is refused.
    old_secret = sidecar.secret()
    sidecar.stop()
    assert sidecar.proc is not None
    assert sidecar.proc.returncode == 0
    with pytest.raises(SidecarUnavailable, match="is the sidecar"):
        run(sidecar.client.pod())
    sidecar.start(sidecar.token)
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


# --- least privilege, by the real authorizer --------------------------------------------------------------------------


def role_triples(cluster: Cluster, namespace: str) -> set[tuple[str, str, str]]:
    """(group, resource, verb) that the Role of deploy/base grants, as rendered into ``namespace``."""
    (role,) = [d for d in render(cluster, REPO / "deploy" / "base", namespace) if d["kind"] == "Role"]
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_role_grants_exactly_the_calls_the_sidecar_makes(
    cluster: Cluster,
    kube_ns: str,
    notebook: dict[str, Any],
    gke: GKESnapshotController,
    proxy: FaultProxy,
    tmp_path: Path,
    sidecars: list[Sidecar],
) -> None:
    """A require-mode session through every endpoint (deploy/base's own configuration): each call it makes is one the
    real RBAC authorizer allows with deploy/base's Role (none refused), the watches name their one object (the
    field selector metadata.name, which RBAC's resourceNames can match), and together they are every grant of the
    Role -- nothing granted is unused. Create mode's extra grant is shown by test_snapshot_of_own_pod_in_create_mode;
    the denied neighbours by test_cluster_gke's least-privilege test."""
    resume_policy(cluster, kube_ns)
    gke.checkpoint_seconds = gke.upload_seconds = 0.6  # long enough for a follow to wait on each object
    client = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars).client
    run(client.pod())
    trigger = run(client.request_snapshot())["trigger"]
    view = run(client.follow(trigger))  # no wait: get
    assert view["phase"] == "pending"
    run(client.follow(trigger, wait=10))  # waits on the trigger
    view = follow_until_done(client, trigger)  # waits on the snapshot
    assert view["phase"] == "ready"
    run(client.snapshots())
    run(client.delete_snapshot(view["snapshot"]))
    calls = proxy.calls
    assert proxy.rejected() == [], proxy.rejected()
    assert all(c.namespace == kube_ns for c in calls), calls
    made = proxy.triples()
    assert (GROUP, "podsnapshotmanualtriggers", "watch") in made
    assert (GROUP, "podsnapshots", "watch") in made
    assert made == role_triples(cluster, kube_ns)
    for call in calls:
        if call.verb in ("get", "watch", "delete"):
            assert call.name, call  # a watch by name: pinnable by resourceNames
        if call.resource == "pods":
            assert call.name == POD, call
        if call.resource == "podsnapshotpolicies":
            assert call.name == POLICY, call


# --- the configuration's other transport ------------------------------------------------------------------------------


def test_loopback_listener_instead_of_the_socket(
    cluster: Cluster, kube_ns: str, notebook: dict[str, Any], proxy: FaultProxy, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    sidecar = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars, tcp_port=free_port())
    assert not os.path.exists(sidecar.socket_path)
    assert stat.S_IMODE(os.stat(sidecar.secret_path).st_mode) == 0o600
    assert run(sidecar.client.pod())["name"] == POD
    proxy.reset_calls()
    assert sidecar.raw("GET", proto.PATH_POD, auth=None)[0] == 401
    assert proxy.calls == []


# --- issue 19: the sidecar under attack ------------------------------------------------------------------------------


def long_poll(sidecar: Sidecar, trigger: str, wait: int = 30) -> socket.socket:
    """A `?wait=` request sent and left open (the caller closes the socket to hang up)."""
    s = sidecar.connect()
    request = (
        f"GET {proto.snapshot_request_path(trigger)}?wait={wait} HTTP/1.1\r\nHost: sidecar\r\n"
        f"Authorization: Bearer {sidecar.secret()}\r\nConnection: close\r\n\r\n"
    )
    s.sendall(request.encode())
    return s


def timed_pod_reads(sidecar: Sidecar, count: int) -> list[float]:
    times = []
    for _ in range(count):
        t0 = time.monotonic()
        status, answer = sidecar.raw("GET", proto.PATH_POD)
        times.append(time.monotonic() - t0)
        assert status == 200, answer
    return times


@pytest.fixture
def pending_request(
    cluster: Cluster,
    kube_ns: str,
    notebook: dict[str, Any],
    gke: GKESnapshotController,
    proxy: FaultProxy,
    tmp_path: Path,
    sidecars: list[Sidecar],
) -> tuple[Sidecar, str]:
    """A sidecar with a snapshot request that stays `pending` (GKE takes a minute to checkpoint)."""
    gke.checkpoint_seconds = 60.0
    sidecar = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars, [*REQUIRE_ARGS, "--request-timeout", "60"])
    trigger = run(sidecar.client.request_snapshot())["trigger"]
    assert run(sidecar.client.follow(trigger))["phase"] == "pending"
    return sidecar, trigger


def test_item2_abandoned_long_polls_do_not_starve_the_sidecar(
    proxy: FaultProxy, pending_request: tuple[Sidecar, str]
) -> None:
    """Sixteen and more `?wait=30` long-polls whose callers hang up: their watches on the real API server end at once
    (counted as open streams through the proxy), and a plain `GET /v1/pod` meanwhile answers within a second."""
    sidecar, trigger = pending_request
    polls = [long_poll(sidecar, trigger) for _ in range(24)]
    wait_for(lambda: proxy.open_watches >= 8, 20, "WATCH_SLOTS long-polls hold a watch, the rest wait")
    assert max(timed_pod_reads(sidecar, 5)) < 1.0
    for s in polls:
        s.close()  # hang up
    t0 = time.monotonic()
    wait_for(lambda: proxy.open_watches == 0, 10, "the watches of the abandoned long-polls end")
    assert time.monotonic() - t0 < 3.0  # not the 5 s of a watch chunk, nor the 30 s asked for
    assert max(timed_pod_reads(sidecar, 5)) < 1.0
    # A long-poll that stays answers at its deadline, with the phase it waited on.
    view = run(sidecar.client.follow(trigger, wait=2))
    assert view["phase"] == "pending"


def test_item2_pod_read_under_200_long_polls_and_300_held_connections(
    proxy: FaultProxy, pending_request: tuple[Sidecar, str]
) -> None:
    """The bench of the issue: 200 concurrent long-polls and 300 held connections (connected, nothing sent);
    20 plain `GET /v1/pod` each answer within a second. The figures are printed (median and spread)."""
    import statistics
    from concurrent.futures import ThreadPoolExecutor

    sidecar, trigger = pending_request
    baseline = timed_pod_reads(sidecar, 10)
    polls = [long_poll(sidecar, trigger) for _ in range(200)]
    held = [sidecar.connect() for _ in range(300)]
    try:
        wait_for(lambda: proxy.open_watches >= 8, 20, "long-polls holding watches")
        loaded = timed_pod_reads(sidecar, 20)
    finally:
        for s in polls + held:
            s.close()
    q = statistics.quantiles(loaded, n=10)
    print(
        f"\nGET /v1/pod (real API server), idle: median {1000 * statistics.median(baseline):.1f} ms; under 200 "
        f"long-polls + 300 held connections: median {1000 * statistics.median(loaded):.1f} ms, p10-p90 "
        f"{1000 * q[0]:.1f}-{1000 * q[-1]:.1f} ms, max {1000 * max(loaded):.1f} ms (n={len(loaded)})"
    )
    assert max(loaded) < 1.0, loaded

    # The other reading of "200 concurrent": 200 plain GET /v1/pod at once, beside 300 held connections.
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
    cluster: Cluster, kube_ns: str, notebook: dict[str, Any], proxy: FaultProxy, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    sidecar = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars)
    secret = sidecar.secret()
    token = sidecar.token  # the real bound token (a JWT the real API server accepts)
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
    proxy.fail("GET", rf"/pods/{POD}$", 401, times=2, message=f"token {token} rejected")
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
    cluster: Cluster, kube_ns: str, notebook: dict[str, Any], proxy: FaultProxy, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    sidecar = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars)
    leaks = (
        'Internal error occurred: failed calling webhook "gate.example.com": Post '
        '"https://10.12.0.7:8443/validate?timeout=10s": dial tcp 10.12.0.7:8443: connect: connection refused; '
        f'User "system:serviceaccount:{kube_ns}:jupyter-suspend-sidecar" cannot create podsnapshotmanualtriggers'
    )
    secret_words = ("10.12.0.7", "gate.example.com", f"system:serviceaccount:{kube_ns}", "https://")
    for code, expect in ((403, proto.E_KUBE_FORBIDDEN), (500, proto.E_KUBE_UNAVAILABLE), (422, proto.E_KUBE_ERROR)):
        proxy.fail("POST", r"/podsnapshotmanualtriggers$", code, message=leaks)
        with pytest.raises(SidecarError) as err:
            run(sidecar.client.request_snapshot())
        assert err.value.code == expect
        # What to do: a next step, or for a 5xx "again, in a moment" (retryable; the caller words it).
        assert err.value.next_step if code != 500 else err.value.retryable, err.value
        for word in secret_words:
            assert word not in str(err.value), (word, str(err.value))
    # The real API server's own words for a real 403 are not passed on either (they name the identity).
    set_role_rule(
        cluster, kube_ns, 2, {"apiGroups": [GROUP], "resources": ["podsnapshotmanualtriggers"], "verbs": ["get"]}
    )
    wait_for(lambda: not can(cluster, kube_ns, "create", f"podsnapshotmanualtriggers.{GROUP}"), 30, "RBAC denies")
    with pytest.raises(SidecarError) as err:
        run(sidecar.client.request_snapshot())
    assert err.value.code == proto.E_KUBE_FORBIDDEN
    assert f"system:serviceaccount:{kube_ns}" not in str(err.value)
    assert [c.verb for c in proxy.rejected()] == ["create"]
    # The detail is in the sidecar's own log, at DEBUG (it names other objects and the identity).
    debug = [line for line in sidecar.log().splitlines() if "10.12.0.7" in line]
    assert debug
    assert all(" DEBUG " in line for line in debug), debug
    # An unexpected failure is not described to the caller either.
    status, answer = sidecar.raw("GET", proto.PATH_POD, headers={"Content-Length": "x"})
    assert status == 400
    assert "x" not in answer["message"].split()


def test_item5_request_deadlines_and_connection_cap(
    cluster: Cluster, kube_ns: str, notebook: dict[str, Any], proxy: FaultProxy, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    args = [*REQUIRE_ARGS, "--request-timeout", "1", "--max-connections", "16"]
    sidecar = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars, args)
    # A drip-fed body: closed after the deadline, without an answer and without an API call.
    proxy.reset_calls()
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
    assert proxy.calls == []
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


def test_item6_bad_names_are_refused_before_any_api_call(
    cluster: Cluster, kube_ns: str, notebook: dict[str, Any], proxy: FaultProxy, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    sidecar = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars)
    proxy.reset_calls()
    cases = [
        ("DELETE", proto.snapshot_path("a%0A")),  # a trailing newline, decoded into the path argument
        ("DELETE", proto.snapshot_path("a..b")),
        ("DELETE", proto.snapshot_path("a.-b")),
        ("DELETE", proto.snapshot_path("a" * 254)),
        ("GET", proto.snapshot_request_path("a..b")),
        ("GET", proto.snapshot_request_path("a" * 64)),  # a trigger name is also a label value
        ("GET", proto.snapshot_request_path("x%0A")),
        ("GET", proto.PATH_POD + "?pod=notebook-0%0A"),
        ("GET", proto.PATH_POD + f"?namespace={kube_ns}%0A"),
        ("GET", proto.PATH_SNAPSHOTS + "?namespace=team.a"),
    ]
    for method, path in cases:
        status, answer = sidecar.raw(method, path)
        assert (status, answer["error"]) == (400, proto.E_INVALID_VALUE), (path, answer)
        assert "\n" not in answer["message"]
    assert proxy.calls == []


def test_item6_an_owner_label_that_is_no_object_name_is_refused_before_any_owner_call(
    cluster: Cluster, kube_ns: str, notebook: dict[str, Any], proxy: FaultProxy, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    cluster.kubectl("label", "pod", POD, "-n", kube_ns, "notebook-name=Not_A.Name")  # a label value, no object name
    sidecar = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars, ["--workload", "notebook"])
    proxy.reset_calls()
    for method, path, body in (("GET", proto.PATH_WORKLOAD, b""), ("POST", proto.PATH_WORKLOAD_STOP, b"{}")):
        status, answer = sidecar.raw(method, path, body)
        assert (status, answer["error"]) == (409, proto.E_OWNER_UNKNOWN), answer
        assert answer["next_step"]
    assert {(c.verb, c.resource) for c in proxy.calls} == {("get", "pods")}
    assert proxy.rejected() == []


def test_item7_not_found_and_not_yours_are_answered_alike(
    cluster: Cluster,
    kube_ns: str,
    notebook: dict[str, Any],
    gke: GKESnapshotController,
    proxy: FaultProxy,
    tmp_path: Path,
    sidecars: list[Sidecar],
) -> None:
    other_pod(cluster, kube_ns, "secret-project-0")
    sidecar = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars)
    theirs = their_trigger(cluster, kube_ns, gke, "theirs", "secret-project-0")
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
    assert not [c for c in proxy.calls if c.verb == "delete"]
    assert custom_get(cluster, kube_ns, "podsnapshots", theirs) is not None


def _sidecar_with(
    cluster: Cluster, namespace: str, pod: dict[str, Any], tmp_path: Path, sidecars: list[Sidecar], name: str, **kw: Any
) -> Sidecar:
    return start(cluster, namespace, pod, None, tmp_path, sidecars, [*REQUIRE_ARGS, "--kube-timeout", "2"], name, **kw)


def test_item8_transport_failures_are_named(
    cluster: Cluster, kube_ns: str, notebook: dict[str, Any], tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    """Connection refused, DNS failure, TLS failure and timeout: each its own code and next step, and a refused
    connection answers at once (urllib3's NewConnectionError is a ConnectTimeoutError: it used to be "timeout")."""
    import threading

    import trustme

    refused = _sidecar_with(cluster, kube_ns, notebook, tmp_path, sidecars, "refused", api_port=free_port())
    t0 = time.monotonic()
    with pytest.raises(SidecarError) as err:
        run(refused.client.pod())
    assert (err.value.code, err.value.retryable) == (proto.E_KUBE_REFUSED, True)
    assert "refused the connection" in err.value.message
    assert err.value.next_step
    assert time.monotonic() - t0 < 2.0

    dns = _sidecar_with(
        cluster, kube_ns, notebook, tmp_path, sidecars, "dns", KUBERNETES_SERVICE_HOST="no-such-api.invalid"
    )
    with pytest.raises(SidecarError) as err:
        run(dns.client.pod())
    assert err.value.code == proto.E_KUBE_DNS, err.value
    assert "KUBERNETES_SERVICE_HOST" in err.value.next_step

    other_ca = tmp_path / "other-ca.crt"
    other_ca.write_bytes(trustme.CA().cert_pem.bytes())  # not the CA that signed the API server's certificate
    tls = start(
        cluster, kube_ns, notebook, None, tmp_path, sidecars, [*REQUIRE_ARGS, "--ca-file", str(other_ca)], "tls"
    )
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
        port = int(silent.getsockname()[1])
        slow = _sidecar_with(cluster, kube_ns, notebook, tmp_path, sidecars, "timeout", api_port=port)
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


def token_status(cluster: Cluster, namespace: str, token: str) -> int:
    """The real API server's answer to a read of the sidecar's own pod with ``token`` (directly, not through the
    proxy: the test's probe is not one of the sidecar's calls)."""
    import ssl
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"{cluster.server}/api/v1/namespaces/{namespace}/pods/{POD}", headers={"Authorization": f"Bearer {token}"}
    )
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def pod_restored(cluster: Cluster, namespace: str, name: str, old_uid: str) -> dict[str, Any] | None:
    pod = get(cluster, namespace, "pod", name)
    if pod is None or pod["metadata"]["uid"] == old_uid:
        return None
    conditions = {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []}
    restored = conditions.get("PodRestored")
    return pod if restored and restored["status"] == "True" else None


def test_item18_6_after_restore_a_stale_token_says_so_and_a_fresh_one_is_read_again_on_401(
    cluster: Cluster,
    kube_ns: str,
    notebook: dict[str, Any],
    gke: GKESnapshotController,
    proxy: FaultProxy,
    tmp_path: Path,
    sidecars: list[Sidecar],
) -> None:
    """A real restore: the sidecar's snapshot stops the pod, the real StatefulSet controller replaces it (a new uid),
    GKE restores the replacement. The sidecar process goes on (as a restored sandbox does) with the old pod's
    environment and token, which the real API server now refuses (401: its bound pod is gone).

    While the files still hold the deleted pod's token: one retry after re-reading, then a plain answer (status,
    next step) -- and a snapshot deletion is not attempted a third time. Once the kubelet has written the new pod's
    token: the first call is refused with the cached token, the sidecar reads the file at once and the one retry
    succeeds (not after the client's 60 s refresh)."""
    sidecar = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars)
    old_uid = notebook["metadata"]["uid"]
    assert run(sidecar.client.pod())["restored"] is False
    trigger = run(sidecar.client.request_snapshot())["trigger"]
    new_pod = wait_for(lambda: pod_restored(cluster, kube_ns, POD, old_uid), 120, "the restored replacement pod")
    snapshot = gke.restored[0][1]
    assert gke.snapshots_created == [snapshot]
    assert trigger

    # The stale token, once the API server's cache of successful authentications (10 s, TokenSuccessCacheTTL in
    # k8s.io/kubernetes pkg/kubeapiserver/options/authentication.go) no longer vouches for it.
    wait_for(lambda: token_status(cluster, kube_ns, sidecar.token) == 401, 60, "the old pod's token refused")
    proxy.reset_calls()
    with pytest.raises(SidecarError) as err:
        run(sidecar.client.delete_snapshot("consumed-snapshot"))
    assert (err.value.status, err.value.code, err.value.retryable) == (502, proto.E_KUBE_UNAUTHORIZED, True)
    assert "also after reading it again" in err.value.message
    assert "restored from a snapshot" in err.value.next_step
    assert "releaser" in err.value.next_step
    assert [c.status for c in proxy.rejected()] == [401, 401]  # the call and its one retry, by the real API server
    assert [c for c in proxy.calls if c.status not in (401, 403)] == []

    # The kubelet writes the new pod's token.
    stale = sidecar.token
    sidecar.token = bound_token(cluster, kube_ns, ACCOUNT, new_pod)
    sidecar.write_token(sidecar.token)
    cluster.kubectl("annotate", "pod", POD, "-n", kube_ns, f"podsnapshot.gke.io/ps-name={snapshot}")
    proxy.reset_calls()
    pod = run(sidecar.client.pod())
    # The downward-API uid is the old pod's (environment from memory): reported, and the restore is known from the
    # API's PodRestored condition, not from the uid alone.
    assert pod["restored"] is True
    assert snapshot in (pod["restored_message"] or "")
    assert pod["started_uid"] == old_uid != pod["uid"] == new_pod["metadata"]["uid"]
    assert pod["pinned_snapshot"] == snapshot
    assert pod["annotations"] == {"podsnapshot.gke.io/ps-name": snapshot}
    assert any(c["type"] == "PodRestored" and c["status"] == "True" for c in pod["conditions"])
    assert [c.verb for c in proxy.rejected()] == ["get"]  # one refused call, then the retry with the new token
    resume_policy(cluster, kube_ns)  # the next snapshot leaves the pod (and this token) in place
    assert run(sidecar.client.request_snapshot())["trigger"]
    assert len(proxy.rejected()) == 1
    assert stale not in sidecar.log()


def test_item18_8_trigger_names_fit_a_label_value(
    cluster: Cluster,
    kube_ns: str,
    notebook: dict[str, Any],
    gke: GKESnapshotController,
    proxy: FaultProxy,
    tmp_path: Path,
    sidecars: list[Sidecar],
) -> None:
    from jupyter_suspend.sidecar.kube import TRIGGERED_BY_LABEL, trigger_name

    for name in ("notebook-0", "a" * 63, "a" * 200 + "-0", "x" * 39 + ".y-0", "n" * 40 + "-" * 5 + "b"):
        made = trigger_name(name)
        assert proto.is_trigger_name(made), made
        assert len(made) <= 63
    long_pod = "research-" + "n" * 100 + "-0"
    other_pod(cluster, kube_ns, long_pod)
    pod = get(cluster, kube_ns, "pod", long_pod)
    assert pod is not None
    set_role_rule(
        cluster, kube_ns, 0, {"apiGroups": [""], "resources": ["pods"], "resourceNames": [long_pod], "verbs": ["get"]}
    )
    resume_policy(cluster, kube_ns)
    sidecar = start(cluster, kube_ns, pod, proxy, tmp_path, sidecars, [*REQUIRE_ARGS, "--pod-name", long_pod])
    trigger = run(sidecar.client.request_snapshot())["trigger"]
    assert len(trigger) <= 63
    done = follow_until_done(sidecar.client, trigger)
    assert done["phase"] == "ready", done
    snapshot = custom_get(cluster, kube_ns, "podsnapshots", done["snapshot"])
    assert snapshot is not None  # created by the real API server: the label value it validated
    assert snapshot["metadata"]["labels"][TRIGGERED_BY_LABEL] == trigger


# --- hostile input on the socket (moved from tests/test_hostile.py) --------------------------------------------------
# Whatever arrives on its socket, a request it refuses (401, 400, 403, 405, 413) makes no Kubernetes API call at all --
# read from the proxy's record of what reached the real API server --, nothing is a 5xx, every answer is a JSON error
# in the sidecar's words, and its log holds neither the bearer secret nor the token, nor a raw control character.

#: Errors that refuse a request for its form or its target: none of them may reach the API.
REFUSALS = {
    proto.E_UNAUTHORIZED,
    proto.E_MALFORMED,
    proto.E_NOT_AN_OBJECT,
    proto.E_UNKNOWN_FIELD,
    proto.E_UNEXPECTED_BODY,
    proto.E_WRONG_TYPE,
    proto.E_INVALID_VALUE,
    proto.E_FORBIDDEN_TARGET,
    proto.E_METHOD,
    proto.E_BODY_TOO_LARGE,
}


@pytest.fixture(scope="module")
def hostile_sidecar(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FaultProxy, Sidecar]]:
    """deploy/base in a namespace of this module's own, another pod the policy selects, GKE's controller (requests
    made here stay pending), and the sidecar behind the fault proxy."""
    import uuid

    namespace = f"hostile-sidecar-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    proxy = FaultProxy(cluster).start()
    try:
        pod = deploy_base(cluster, namespace)
        other_pod(cluster, namespace, "other-0")
        with GKESnapshotController(cluster, namespace, checkpoint_seconds=3600) as gke:
            started: list[Sidecar] = []
            sidecar = start(cluster, namespace, pod, proxy, tmp_path_factory.mktemp("hostile"), started)
            try:
                yield proxy, sidecar
            finally:
                secret = sidecar.secret()
                sidecar.stop()
                assert sidecar.proc is not None
                assert sidecar.proc.returncode == 0
                log = sidecar.log()
                assert secret not in log
                assert sidecar.token not in log
                assert not any(c in log for c in "\x00\x01\x1b\x7f")
        assert not gke.errors, gke.errors
    finally:
        proxy.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


_NAME_PARTS = st.sampled_from(
    ["notebook-0", "other-0", "a..b", "a.-b", "-a", "A", "a_b", "x" * 64, "y" * 254, "%0A", "%00", "%2F", "..", ".",
     "%2e%2e", "\u00e9", "a%0Ab", "ok", "kube-system", "snap.1", ""]
)  # fmt: skip
_NAMES = st.one_of(
    _NAME_PARTS,
    st.lists(_NAME_PARTS, min_size=1, max_size=3).map("".join),
    st.text(max_size=20).map(lambda t: quote(t, safe="")),  # percent-encoded: it reaches the handler decoded
    st.text(max_size=8),  # raw: spaces and controls the HTTP layer refuses
)
_ROUTES = st.one_of(
    st.sampled_from(
        [
            ("GET", proto.PATH_POD),
            ("GET", proto.PATH_SNAPSHOTS),
            ("POST", proto.PATH_SNAPSHOT_REQUESTS),
            ("GET", proto.PATH_WORKLOAD),
            ("POST", proto.PATH_WORKLOAD_STOP),
        ]
    ),
    _NAMES.map(lambda n: ("GET", f"{proto.PATH_SNAPSHOT_REQUESTS}/{n}")),
    _NAMES.map(lambda n: ("DELETE", f"{proto.PATH_SNAPSHOTS}/{n}")),
)
_PATHS = st.one_of(
    st.sampled_from(["/v1", "/", "/v2/pod", proto.PATH_HEALTH]),
    _NAMES.map(lambda n: f"{proto.PATH_SNAPSHOTS}/{n}"),
    _NAMES.map(lambda n: f"/v1/{n}/../pod"),
)
#: Mostly an endpoint with its own method (the checks behind routing get exercised), else anything.
_REQUESTS = st.one_of(
    _ROUTES,
    _ROUTES,
    _ROUTES,
    st.tuples(
        st.sampled_from(["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS"]),
        st.one_of(_PATHS, _ROUTES.map(lambda r: r[1])),
    ),
)
_QUERY = st.one_of(
    st.just({}),
    st.dictionaries(
        st.sampled_from(["pod", "namespace", "wait", "since", "all", "secret", "SECRET"]),
        st.one_of(_NAMES, st.sampled_from(["31", "-1", "nan", "1e9", "0", "ready", "done", "team-a", "team-b"])),
        max_size=3,
    ),
)
_JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(), _NAMES, st.lists(st.integers(), max_size=2))
_BODIES = st.one_of(
    st.just(b""),
    st.just(b""),
    st.dictionaries(
        st.sampled_from(["pod", "namespace", "kind", "name", "force", "all"]), _JSON_VALUES, max_size=3
    ).map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=64),
    st.sampled_from([b"[" * 5000, b'{"pod": "notebook-0"', b"null", b"x" * (proto.MAX_BODY_BYTES + 1)]),
)
_AUTH = st.sampled_from(["right"] * 5 + ["none", "wrong", "basic", "right+junk", "lowercase"])
#: Further headers: control characters, the secret or the token in other headers, a second Authorization.
_EXTRA_HEADERS = st.lists(
    st.tuples(
        st.sampled_from(["X-Note", "Authorization", "Cookie", "X-Forwarded-For", "Bad\x01Name", "Transfer-Encoding"]),
        st.sampled_from(["SECRET", "TOKEN", "a\x01b", "a\x7fb", "\x1b[31mred", "chunked", "x" * 2000, "Bearer SECRET"]),
    ),
    max_size=2,
)


def _send(sidecar: Sidecar, raw: bytes) -> tuple[int, dict[str, Any]]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(20)
        s.connect(sidecar.socket_path)
        s.sendall(raw)
        chunks = []
        while data := s.recv(65536):
            chunks.append(data)
    if not chunks:
        return 0, {}  # closed without an answer (a request tornado cannot parse)
    status, body = _parse_response(b"".join(chunks), "hostile")
    return status, json.loads(body) if body else {}


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(
    request=_REQUESTS,
    query=_QUERY,
    body=_BODIES,
    auth=_AUTH,
    extra=_EXTRA_HEADERS,
)
def test_hostile_sidecar_requests_make_no_api_call_when_refused(
    hostile_sidecar: tuple[FaultProxy, Sidecar],
    request: tuple[str, str],
    query: dict[str, str],
    body: bytes,
    auth: str,
    extra: list[tuple[str, str]],
) -> None:
    proxy, sidecar = hostile_sidecar
    method, path = request
    secret = sidecar.secret()
    header = {
        "right": f"Bearer {secret}",
        "none": None,
        "wrong": "Bearer " + "x" * len(secret),
        "basic": f"Basic {secret}",
        "right+junk": f"Bearer {secret}x",
        "lowercase": f"bearer {secret.lower()}",
    }[auth]
    query = {k.replace("SECRET", secret): v for k, v in query.items()}  # the secret as a parameter's name
    target = path + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
    lines = [f"{method} {target} HTTP/1.1", "Host: sidecar", "Connection: close", f"Content-Length: {len(body)}"]
    if header is not None:
        lines.append(f"Authorization: {header}")
    for name, value in extra:
        lines.append(f"{name}: {value.replace('SECRET', secret).replace('TOKEN', sidecar.token)}")
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape") + body
    proxy.reset_calls()
    # Authorized: exactly one Authorization header, with the right secret (it may come from ``extra`` alone).
    sent = ([header] if header is not None else []) + [
        value.replace("SECRET", secret) for name, value in extra if name == "Authorization"
    ]
    authorized = sent == [f"Bearer {secret}"]
    status, answer = _send(sidecar, raw)
    calls = proxy.calls  # what passed to the real API server, refused by it or not
    event(f"{status} {answer.get('error', '')} calls={len(calls)}")
    if status == 0 or (status == 400 and not answer):
        # Closed, or refused by the HTTP layer itself (a request line it cannot parse): never reaches a handler.
        assert calls == [], calls
        return
    if status >= 500:
        # Only an accepted request meets the API server; on a busy machine its call may outlast the sidecar's
        # timeout. Then the answer says so (retryable), and the call it made is a call it was allowed to make.
        assert answer.get("retryable") is True, (status, answer)
        assert authorized, (status, answer)
        assert calls, (status, answer)
        return
    if not authorized and path != proto.PATH_HEALTH:  # health answers without a secret, by design
        assert (status, answer.get("error")) == (401, proto.E_UNAUTHORIZED), (auth, answer)
    if status >= 400:
        assert set(answer) <= {"error", "message", "retryable", "next_step"}, answer
        assert isinstance(answer["message"], str)
        assert not any(ord(c) < 32 for c in answer["message"]), answer
        if answer["error"] in REFUSALS:
            assert calls == [], (method, target, body[:80], answer, calls)
    assert secret not in json.dumps(answer)
    assert all(c.namespace in (None, sidecar.namespace) for c in calls), calls
    assert not [c for c in calls if c.status in (401, 403)], calls  # the real authorizer allowed each call
    assert all(c.name in (None, "notebook-0", "notebook-snapshots") or c.resource != "pods" for c in calls), calls


def test_item1_roles_pinned_to_the_objects_the_sidecar_touches(cluster: Cluster, kube_ns: str) -> None:
    """deploy/base's Role as the real RBAC authorizer judges it (SubjectAccessReview through `kubectl auth can-i`):
    each rule allows what a session uses (test_role_grants_exactly_the_calls_the_sidecar_makes shows that every call
    of a session passed), and for each rule a neighbour -- another pod, another policy, another verb or resource --
    is denied. The Kubeflow overlays' Roles: tests/test_cluster_overlay_rbac.py."""
    wanted = {"ServiceAccount", "Role", "RoleBinding"}
    create(cluster, [d for d in render(cluster, REPO / "deploy" / "base", kube_ns) if d["kind"] in wanted])
    snapshots = f"podsnapshots.{GROUP}"
    triggers = f"podsnapshotmanualtriggers.{GROUP}"
    policies = f"podsnapshotpolicies.{GROUP}"
    allowed = [
        ("get", f"pods/{POD}"),
        ("get", f"{policies}/{POLICY}"),
        ("create", triggers),
        ("get", f"{triggers}/x"),
        ("watch", f"{triggers}/x"),
        ("delete", f"{triggers}/x"),
        ("get", f"{snapshots}/x"),
        ("list", snapshots),
        ("watch", f"{snapshots}/x"),
        ("delete", f"{snapshots}/x"),
    ]
    neighbours = [
        ("get", "pods/other-0"),  # rule 0: another pod
        ("patch", f"pods/{POD}"),  # rule 0: another verb on the own pod
        ("list", "pods"),
        ("get", f"{policies}/other-policy"),  # rule 1: another policy
        ("create", policies),  # require mode: no create
        ("update", f"{triggers}/x"),  # rule 2: no other verb
        ("deletecollection", triggers),
        ("patch", f"{snapshots}/x"),  # rule 3: PodSnapshots are GKE's
        ("create", snapshots),
        ("get", "secrets/token"),
    ]
    wait_for(lambda: can(cluster, kube_ns, "get", f"pods/{POD}"), 30, "the Role bound")
    for verb, what in allowed:
        assert can(cluster, kube_ns, verb, what), (verb, what)
    for verb, what in neighbours:
        assert not can(cluster, kube_ns, verb, what), (verb, what)


# --- faults only the proxy can make: dropped watches, answers cut mid-body -------------------------------------------


def test_a_long_poll_survives_dropped_and_ended_watches(
    cluster: Cluster,
    kube_ns: str,
    notebook: dict[str, Any],
    gke: GKESnapshotController,
    proxy: FaultProxy,
    tmp_path: Path,
    sidecars: list[Sidecar],
) -> None:
    """The watches a long-poll holds are cut: the API server ends one cleanly after an event (as at its timeout), the
    connection of another drops mid-stream. The caller still hears the request's progress to `ready`, never an
    error, and the sidecar says nothing worse than DEBUG about it."""
    resume_policy(cluster, kube_ns)
    gke.checkpoint_seconds = gke.upload_seconds = 1.5
    sidecar = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars)
    trigger = run(sidecar.client.request_snapshot())["trigger"]
    proxy.cut_watch(r"/podsnapshotmanualtriggers$", after_events=1, times=2)
    proxy.cut_watch(r"/podsnapshotmanualtriggers$", after_events=1, abrupt=True, times=2)
    proxy.cut_watch(r"/podsnapshots$", after_events=1, abrupt=True, times=2)
    view = follow_until_done(sidecar.client, trigger)
    assert view["phase"] == "ready", view
    cut = [c for c in proxy.calls if c.injected == "cut_watch"]
    assert cut, "no watch was cut: the test did not test"
    assert "Traceback" not in sidecar.log()


def test_issue16_item3_an_answer_cut_mid_body_is_a_retryable_502(
    cluster: Cluster, kube_ns: str, notebook: dict[str, Any], proxy: FaultProxy, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    sidecar = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars)
    proxy.hang_up("GET", rf"/pods/{POD}$")
    with pytest.raises(SidecarError) as err:
        run(sidecar.client.pod())
    assert (err.value.status, err.value.code, err.value.retryable) == (502, proto.E_KUBE_UNAVAILABLE, True)
    assert run(sidecar.client.pod())["name"] == POD  # the next call connects again
    # The API server created the trigger (201) and the answer was cut: the sidecar finds its trigger by its unique
    # name and answers as created -- not "retryable", which would make the caller ask again and take a second
    # snapshot.
    proxy.hang_up("POST", r"/podsnapshotmanualtriggers$")
    trigger = run(sidecar.client.request_snapshot())["trigger"]
    listed = json.loads(cluster.kubectl("get", f"podsnapshotmanualtriggers.{GROUP}", "-n", kube_ns, "-o", "json"))
    assert [t["metadata"]["name"] for t in listed["items"]] == [trigger]
    assert [c.injected for c in proxy.calls if c.verb == "create"] == ["hang_up"]
    # A 500 the API server's own (the proxy answers without forwarding): nothing was created, the 502 stays.
    proxy.fail("POST", r"/podsnapshotmanualtriggers$", 500)
    with pytest.raises(SidecarError) as err:
        run(sidecar.client.request_snapshot())
    assert (err.value.status, err.value.code, err.value.retryable) == (502, proto.E_KUBE_UNAVAILABLE, True)
    assert "Traceback" not in sidecar.log()


def test_a_shared_pod_read_and_its_fault_are_not_kept(
    cluster: Cluster, kube_ns: str, notebook: dict[str, Any], proxy: FaultProxy, tmp_path: Path, sidecars: list[Sidecar]
) -> None:
    """Concurrent `GET /v1/pod` share one read of the pod (one API call for the burst, counted on the wire); a read
    that fails fails the callers that shared it, and the next caller reads again (no failure is kept)."""
    from concurrent.futures import ThreadPoolExecutor

    sidecar = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars)
    proxy.reset_calls()
    proxy.delay("GET", rf"/pods/{POD}$", 1.0)
    with ThreadPoolExecutor(5) as pool:
        answers = list(pool.map(lambda _: sidecar.raw("GET", proto.PATH_POD), range(5)))
    assert [status for status, _ in answers] == [200] * 5, answers
    assert len([c for c in proxy.calls if c.resource == "pods"]) == 1, proxy.calls
    proxy.fail("GET", rf"/pods/{POD}$", 503, after=1.0)  # a slow failure: the three callers share it
    with ThreadPoolExecutor(3) as pool:
        failed = list(pool.map(lambda _: sidecar.raw("GET", proto.PATH_POD), range(3)))
    assert {status for status, _ in failed} <= {502}, failed
    assert all(answer["error"] == proto.E_KUBE_UNAVAILABLE for _, answer in failed), failed
    assert sidecar.raw("GET", proto.PATH_POD)[0] == 200  # read again, not the kept failure


def test_issue16_item3_a_deleted_snapshot_is_answered_deleted_when_an_answer_or_the_cleanup_fails(
    cluster: Cluster,
    kube_ns: str,
    notebook: dict[str, Any],
    gke: GKESnapshotController,
    proxy: FaultProxy,
    tmp_path: Path,
    sidecars: list[Sidecar],
) -> None:
    """`DELETE /v1/snapshots/NAME` deletes the PodSnapshot, then its trigger. When only the trigger's cleanup meets a
    fault, the snapshot is gone all the same: the answer says it was deleted (and that the trigger was not), rather
    than a retryable 502 whose retry finds no snapshot and answers 404."""
    resume_policy(cluster, kube_ns)
    sidecar = start(cluster, kube_ns, notebook, proxy, tmp_path, sidecars)
    requested = run(sidecar.client.request_snapshot())
    snapshot = follow_until_done(sidecar.client, requested["trigger"])["snapshot"]
    proxy.fail("DELETE", r"/podsnapshotmanualtriggers/", 500)
    deleted = run(sidecar.client.delete_snapshot(snapshot))
    assert deleted == {"deleted": snapshot, "trigger": None}
    wait_for(lambda: custom_get(cluster, kube_ns, "podsnapshots", snapshot) is None, 30, "the snapshot gone")
    assert custom_get(cluster, kube_ns, "podsnapshotmanualtriggers", requested["trigger"]) is not None
    assert f"PodSnapshotManualTrigger {requested['trigger']} was left" in sidecar.log()
    with pytest.raises(SidecarError) as again:
        run(sidecar.client.delete_snapshot(snapshot))
    assert again.value.status == 404

    # The answer to the snapshot's own delete is lost (cut mid-answer): the snapshot is gone or going all the same,
    # and the answer says deleted (a "retryable" 502 would have been retried into a 404).
    second = run(sidecar.client.request_snapshot())["trigger"]
    other = follow_until_done(sidecar.client, second)["snapshot"]
    proxy.hang_up("DELETE", r"/podsnapshots/")
    assert run(sidecar.client.delete_snapshot(other)) == {"deleted": other, "trigger": second}
    wait_for(lambda: custom_get(cluster, kube_ns, "podsnapshots", other) is None, 30, "the second snapshot gone")
    assert [c.injected for c in proxy.calls if c.verb == "delete" and c.resource == "podsnapshots"][-1] == "hang_up"
