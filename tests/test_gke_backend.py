"""The gke backend end to end on the real control plane of tests/cluster/: deploy/base created as a platform
team would (the real StatefulSet controller makes ``notebook-0``, the real scheduler places it on a fake GPU
node, kwok runs it), the real sidecar process acting with a token of deploy/base's ServiceAccount bound to its
pod (TokenRequest API, judged by the real RBAC authorizer), a real ``jupyter server`` process on the gke
backend, and the simulated GKE snapshot controller (tests/cluster/gke.py, the one proprietary part).

One notebook shares the module's tests, in order: refusals and failures first (each leaves the session
running), then live returns (each one in the pod the real StatefulSet controller makes to replace the stopped
one), then the silent cold start (a new server process with the old journal, the StatefulSet's template
changed so GKE finds no compatible snapshot). Pure tests of the in-pod signals and the cold-start reading
follow; the two item-8 tests have a notebook each. The one check that needs an injected fault (a 500 on one
read of the trigger) has its own notebook whose sidecar reaches the API server through tests/cluster/faults.py's
proxy.

What the tests play that a real pod would do by itself: the server and the sidecar run on, outside any pod;
"the process returns in the new pod" is the test writing the new pod's uid into the downward-API file (or the
clock jump, or gVisor's spec_environ), and a token bound to the new pod into the sidecar's token file (whether
a restored sandbox sees the new pod's projected token is not public: platform-facts §1, "Unknown"). A test
finalizer holds the stopped pod for a moment, so the server's one read after Ready sees it stopped before the
real StatefulSet controller replaces it (on GKE the server, frozen in its pod, reads it only after restore).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import pytest

from jupyter_suspend.server.app import load_backend_class
from jupyter_suspend.server.backends.gke import GKEBackend
from jupyter_suspend.server.pod_return import PodIdentity, PodSignals, parse_environ
from jupyter_suspend.server.sidecar_client import SidecarClient
from jupyter_suspend.server.states import State
from tests.cluster.control_plane import Cluster
from tests.cluster.faults import FaultProxy
from tests.cluster.gke import GKESnapshotController
from tests.cluster.notebook import (
    RealSidecar,
    bound_token,
    deploy_base,
    get,
    running_pod,
    sidecar_args,
    wait_for,
)
from tests.gke_server import GKEServer, PodFiles, no_kube_credentials
from tests.servers import free_port

pytestmark = pytest.mark.slow

POD = "notebook-0"
SIDECAR_ACCOUNT = "jupyter-suspend-sidecar"
POLICY = "notebook-snapshots"
#: A finalizer of the test's: the stopped pod stays (phase Succeeded) until the test lets the real StatefulSet
#: controller's delete finish, so "the pod stopped" is seen before its replacement exists.
HOLD = "test.jupyter-suspend.io/hold"
VERDICT_MIME = "application/vnd.jupyter-suspend.verdict+json"
SETUP = """
%load_ext jupyter_suspend
import jupyter_suspend
import numpy as np
weights = np.random.default_rng(7).standard_normal((64, 32)).astype(np.float32)
vocab = {"a": 1, "b": 2}
jupyter_suspend.register("weights")
jupyter_suspend.register("vocab")
only_in_memory = 41
"""


class ClusterGKEServer(GKEServer):
    """:class:`GKEServer` in the test's namespace (the downward API's POD_NAMESPACE)."""

    def __init__(self, namespace: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.namespace = namespace

    def env(self) -> dict[str, str]:
        return {**super().env(), "POD_NAMESPACE": self.namespace}


@dataclass
class Notebook:
    """deploy/base's notebook in ``namespace``, its sidecar process and its simulated GKE controller."""

    cluster: Cluster
    namespace: str
    gke: GKESnapshotController
    sidecar: RealSidecar
    files: PodFiles
    current: dict[str, Any]  # the pod object the processes play, as the API server showed it

    @property
    def uid(self) -> str:
        return str(self.current["metadata"]["uid"])

    def hold(self) -> None:
        patch = json.dumps({"metadata": {"finalizers": [HOLD]}})
        self.cluster.kubectl("patch", "pod", POD, "-n", self.namespace, "--type=merge", "-p", patch)

    def pod(self) -> dict[str, Any]:
        found = get(self.cluster, self.namespace, "pod", POD)
        assert found is not None
        return found

    def replaced(self, hold: bool = True) -> str:
        """Let the real StatefulSet controller replace the stopped pod; once the new pod runs, give the sidecar a
        token bound to it (as the kubelet projects one into the new pod). Returns the new pod's uid."""
        old = self.uid
        patch = json.dumps({"metadata": {"finalizers": None}})
        self.cluster.kubectl("patch", "pod", POD, "-n", self.namespace, "--type=merge", "-p", patch, check=False)
        self.current = wait_for(
            lambda: running_pod(self.cluster, self.namespace, POD, not_uid=old), 90, "the replacement pod Running"
        )
        self.sidecar.write_token(bound_token(self.cluster, self.namespace, SIDECAR_ACCOUNT, self.current))
        if hold:
            self.hold()
        return self.uid

    def snapshots(self) -> list[str]:
        listed = get(self.cluster, self.namespace, "podsnapshots")
        return [s["metadata"]["name"] for s in (listed or {"items": []})["items"]]

    def triggers(self) -> list[str]:
        listed = get(self.cluster, self.namespace, "podsnapshotmanualtriggers")
        return [s["metadata"]["name"] for s in (listed or {"items": []})["items"]]


def start_notebook(
    cluster: Cluster, namespace: str, directory: Path, hold: bool = True, api_port: int | None = None, **gke: float
) -> tuple[Notebook, ClusterGKEServer]:
    """``api_port``: the sidecar reaches the API server there (tests/cluster/faults.py's proxy)."""
    current = deploy_base(cluster, namespace)
    # upload_seconds: long enough for kwok to show the checkpointed pod Succeeded before the snapshot is Ready.
    controller = GKESnapshotController(
        cluster, namespace, **{"checkpoint_seconds": 0.1, "upload_seconds": 1.0, **gke}
    ).start()
    sidecar = RealSidecar(
        cluster, namespace, current, directory / "sidecar", sidecar_args(cluster, namespace), api_port=api_port
    )
    try:
        sidecar.start(bound_token(cluster, namespace, SIDECAR_ACCOUNT, current))
        files = PodFiles(directory / "podinfo")
        notebook = Notebook(cluster, namespace, controller, sidecar, files, current)
        files.reset(notebook.uid)
        if hold:
            notebook.hold()
        server = ClusterGKEServer(namespace, directory, directory / "state", sidecar, files, notebook.uid)
    except BaseException:
        sidecar.stop()
        controller.stop()
        raise
    return notebook, server


def stop_notebook(notebook: Notebook, *servers: GKEServer | None) -> None:
    for server in servers:
        if server is not None:
            server.stop()
    notebook.sidecar.stop()
    notebook.gke.stop()
    patch = json.dumps({"metadata": {"finalizers": None}})
    notebook.cluster.kubectl("patch", "pod", POD, "-n", notebook.namespace, "--type=merge", "-p", patch, check=False)
    assert not notebook.gke.errors, notebook.gke.errors


@dataclass
class Pod:
    notebook: Notebook
    server: GKEServer
    base: Path
    state_dir: Path
    kernel_id: str
    session_id: str
    cycles: list[str] = field(default_factory=list)

    @property
    def gke(self) -> GKESnapshotController:
        return self.notebook.gke

    @property
    def files(self) -> PodFiles:
        return self.notebook.files


def run_cell(server: GKEServer, kernel_id: str, code: str) -> tuple[str, list[dict[str, Any]]]:
    """Execute a cell as a user would; (stdout and tracebacks, display_data bundles)."""
    # The client's readiness check gives up while a booting kernel's heartbeat is not beating yet: try again.
    deadline = time.monotonic() + 60
    while True:
        try:
            client = server.kernel_client(kernel_id)
            break
        except RuntimeError:
            assert time.monotonic() < deadline, "the kernel never answered"
            time.sleep(0.5)
    text: list[str] = []
    displays: list[dict[str, Any]] = []

    def hook(msg: dict[str, Any]) -> None:
        kind = msg["msg_type"]
        if kind == "stream":
            text.append(msg["content"]["text"])
        elif kind == "error":
            text.append("\n".join(msg["content"]["traceback"]))
        elif kind == "display_data":
            displays.append(msg["content"]["data"])

    try:
        reply = client.execute_interactive(code, timeout=60, output_hook=hook)
    finally:
        client.stop_channels()
    assert reply["content"]["status"] == "ok", "".join(text)
    return "".join(text), displays


def verdict(server: GKEServer, kernel_id: str) -> str:
    _, displays = run_cell(server, kernel_id, "%verify_live_state weights vocab")
    assert len(displays) == 1, displays
    return str(displays[0][VERDICT_MIME]["verdict"])


def suspend(server: GKEServer, reason: str = "test") -> dict[str, Any]:
    server.api("POST", "suspend", {"reason": reason}, expect=202)
    return server.wait(lambda s: s["operation"] and not s["operation"]["in_progress"], timeout=90)


def kinds_after(server: GKEServer, seq: int) -> list[str]:
    return [e["kind"] for e in server.journal() if e["seq"] > seq]


def assert_only_the_sidecar_called(pod: Pod) -> None:
    """The server process has no way to the API (no service-account token or API address, no KUBECONFIG); the
    sidecar, the only process with a token, was refused nothing by the real authorizer (it logs every refusal)."""
    environ = pod.server.environ()
    assert no_kube_credentials(environ) == []
    assert "KUBECONFIG" not in environ
    log = pod.notebook.sidecar.log()
    assert "the Kubernetes API answered 403" not in log, log[-3000:]


def assert_still_running(pod: Pod, status: dict[str, Any]) -> None:
    """An aborted suspend: state running, nothing released, the kernel answers with its memory."""
    assert status["state"] == "running", status
    assert status["operation"]["outcome"] == "aborted", status["operation"]
    assert "nothing was released" in status["message"]
    assert "the session keeps running" in status["message"]
    out, _ = run_cell(pod.server, pod.kernel_id, "print(only_in_memory + 1)")
    assert out.strip() == "42"
    # The pod was not stopped: the same pod runs.
    assert pod.notebook.pod()["metadata"]["uid"] == pod.notebook.uid
    assert pod.notebook.pod()["status"]["phase"] == "Running"


@pytest.fixture(scope="module")
def module_ns(cluster: Cluster) -> Iterator[str]:
    name = f"gke-backend-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def pod(cluster: Cluster, module_ns: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    base = tmp_path_factory.mktemp("gke-pod")
    notebook, server = start_notebook(cluster, module_ns, base)
    the_pod: Pod | None = None
    try:
        server.start()
        name = "model.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), server.root_dir / name)
        code, session = server.request(
            "POST", "api/sessions", {"path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}}
        )
        assert code == 201, session
        the_pod = Pod(notebook, server, base, base / "state", session["kernel"]["id"], session["id"])
        run_cell(server, the_pod.kernel_id, SETUP)
        yield the_pod
    finally:
        stop_notebook(notebook, the_pod.server if the_pod is not None else server)


# -- refusals and failures: nothing released, the session keeps running --------------------------------------


@pytest.mark.cluster
def test_sidecar_down_preflight_says_so_and_the_suspend_is_refused(pod: Pod) -> None:
    triggers = pod.notebook.triggers()
    pod.notebook.sidecar.stop()
    try:
        preflight = pod.server.api("POST", "suspend", {"dry_run": True})
        assert any("the sidecar does not answer" in note for note in preflight["notes"]), preflight["notes"]
        # Not only a note: the dry run says a suspend would abort, and why.
        assert len(preflight["would_abort"]) == 1, preflight["would_abort"]
        assert "the sidecar does not answer" in preflight["would_abort"][0]
        status = suspend(pod.server)
        assert_still_running(pod, status)
        assert "the sidecar does not answer" in status["message"]
        release = next(s for s in status["operation"]["steps"] if s["name"] == "release")
        assert release["status"] == "failed"
    finally:
        pod.notebook.sidecar.start(bound_token(pod.notebook.cluster, pod.notebook.namespace, SIDECAR_ACCOUNT,
                                               pod.notebook.current))  # fmt: skip
    # Nothing reached the API: the server has no credentials, and no trigger or snapshot was made.
    assert pod.notebook.triggers() == triggers
    assert pod.notebook.snapshots() == []
    preflight = pod.server.api("POST", "suspend", {"dry_run": True})
    assert preflight["would_abort"] == []
    note = next(note for note in preflight["notes"] if note.startswith("The sidecar answers at"))
    # The sidecar's facts about the policy (deploy/base runs it with --policy-mode require), read by the sidecar
    # from the real API server under its Role.
    assert (
        "the snapshot policy 'notebook-snapshots' (installed by the platform team) stops the pod after the "
        "checkpoint: the node can go back to the pool." in note
    ), note
    assert_only_the_sidecar_called(pod)


@pytest.mark.cluster
@pytest.mark.parametrize(("behaviour", "reason"), [("trigger_fails", "Failed"), ("trigger_error", "Error")])
def test_trigger_failure_aborts(pod: Pod, behaviour: str, reason: str) -> None:
    pod.gke.behaviour = behaviour
    seq = pod.server.last_seq()
    status = suspend(pod.server)
    assert_still_running(pod, status)
    assert "GKE could not trigger the snapshot" in status["message"]
    assert reason in status["message"]
    assert "then suspend again" in status["message"]
    kinds = kinds_after(pod.server, seq)
    assert "gke_snapshot_requested" in kinds
    assert "gke_snapshot_aborted" in kinds
    assert "gke_snapshot_ready" not in kinds
    assert pod.notebook.snapshots() == []
    assert_only_the_sidecar_called(pod)


@pytest.mark.cluster
def test_checkpoint_failure_aborts_and_deletes_the_failed_snapshot(pod: Pod) -> None:
    pod.gke.behaviour = "checkpoint_fails"
    made = len(pod.gke.snapshots_created)
    status = suspend(pod.server)
    assert_still_running(pod, status)
    assert "the checkpoint of snapshot" in status["message"]
    assert "simulated: checkpoint failed" in status["message"]
    assert "was deleted" in status["message"]
    assert len(pod.gke.snapshots_created) == made + 1  # there was one, and the sidecar deleted it
    wait_for(lambda: pod.notebook.snapshots() == [], 30, "the failed snapshot gone")
    assert_only_the_sidecar_called(pod)


@pytest.mark.cluster
def test_snapshot_never_ready_times_out_and_aborts(pod: Pod) -> None:
    pod.gke.behaviour = "never_ready"
    pod.gke.stop_after_upload = True  # frozen while uploading, never stopped: the upload never ends
    try:
        started = time.monotonic()
        status = suspend(pod.server)
    finally:
        pod.gke.stop_after_upload = False
    assert time.monotonic() - started >= 4.0  # snapshot_timeout
    assert_still_running(pod, status)
    assert "was not Ready within 4 s" in status["message"]
    assert "last phase: uploading" in status["message"]
    wait_for(lambda: pod.notebook.snapshots() == [], 30, "the unfinished snapshot gone")
    assert_only_the_sidecar_called(pod)


def _failing_webhook(namespace: str) -> dict[str, Any]:
    """A validating webhook on trigger creates in ``namespace`` whose server does not answer: with
    failurePolicy Fail the real API server refuses the request as an InternalError (500, "Internal error
    occurred: failed calling webhook ..."; Kubernetes documentation "Dynamic Admission Control", failure
    policy; the same message in public reports, e.g. harness/developer-hub's knowledge base). The test checks
    that answer itself (dry run) before relying on it."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": f"unreachable-{namespace}"},
        "webhooks": [
            {
                "name": "unreachable.test.jupyter-suspend.io",
                "clientConfig": {"url": f"https://127.0.0.1:{free_port()}/validate"},
                "rules": [
                    {
                        "apiGroups": ["podsnapshot.gke.io"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["podsnapshotmanualtriggers"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 2,
            }
        ],
    }


def _dry_run_trigger(cluster: Cluster, namespace: str) -> str:
    """A server-side dry-run create of a trigger (webhooks with sideEffects None are called; nothing is stored):
    '' when accepted, else the API server's refusal."""
    body = {
        "apiVersion": "podsnapshot.gke.io/v1",
        "kind": "PodSnapshotManualTrigger",
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": {"targetPod": POD},
    }
    import subprocess

    try:
        cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(body))
    except subprocess.CalledProcessError as exc:
        return str(exc.stderr or exc.stdout or exc)
    return ""


@pytest.mark.cluster
def test_api_error_aborts_before_any_trigger(pod: Pod) -> None:
    """A 5xx from the real API server on the trigger's create: a webhook it cannot reach."""
    pod.gke.behaviour = "succeed"
    cluster, namespace = pod.notebook.cluster, pod.notebook.namespace
    triggers = pod.notebook.triggers()
    webhook = _failing_webhook(namespace)
    cluster.kubectl("create", "--validate=strict", "-f", "-", input=json.dumps(webhook))
    try:
        refusal = wait_for(lambda: _dry_run_trigger(cluster, namespace), 30, "the webhook in force")
        assert "failed calling webhook" in refusal, refusal
        status = suspend(pod.server)
    finally:
        cluster.kubectl("delete", "validatingwebhookconfiguration", webhook["metadata"]["name"], check=False)
    assert_still_running(pod, status)
    assert "the snapshot could not be requested" in status["message"]
    assert "kube_unavailable" in status["message"]
    assert "suspend again in a moment" in status["message"]
    assert pod.notebook.triggers() == triggers
    assert "the Kubernetes API answered 500" in pod.notebook.sidecar.log()
    wait_for(lambda: _dry_run_trigger(cluster, namespace) == "" and "gone", 30, "the webhook gone")
    assert_only_the_sidecar_called(pod)


@pytest.mark.cluster
def test_policy_that_resumes_the_pod_releases_nothing_and_says_so(pod: Pod) -> None:
    pod.gke.behaviour = "succeed"
    cluster, namespace = pod.notebook.cluster, pod.notebook.namespace

    def post_checkpoint(value: str) -> None:
        patch = json.dumps({"spec": {"triggerConfig": {"postCheckpoint": value}}})
        cluster.kubectl("patch", "podsnapshotpolicy", POLICY, "-n", namespace, "--type=merge", "-p", patch)

    post_checkpoint("resume")
    try:
        # The dry run says it before: nothing would be released, the suspend would abort.
        preflight = pod.server.api("POST", "suspend", {"dry_run": True})
        assert len(preflight["would_abort"]) == 1, preflight["would_abort"]
        assert "'notebook-snapshots' has postCheckpoint: resume" in preflight["would_abort"][0]
        assert "release nothing" in preflight["would_abort"][0]
        assert any("nothing would be released" in note for note in preflight["notes"]), preflight["notes"]
        status = suspend(pod.server)
    finally:
        post_checkpoint("stop")
    assert_still_running(pod, status)
    assert "is Ready but the pod kept running" in status["message"]
    assert "postCheckpoint: stop" in status["message"]
    # A Ready snapshot left behind would be restored by the pod's next restart: deleted.
    assert "was deleted" in status["message"]
    wait_for(lambda: pod.notebook.snapshots() == [], 30, "the Ready snapshot deleted")
    assert_only_the_sidecar_called(pod)


# -- live returns: the same process continues in the pod the real StatefulSet controller makes ----------------


@pytest.mark.cluster
def test_live_return_detected_from_the_new_pod_uid(pod: Pod) -> None:
    pod.gke.behaviour = "succeed"
    pod.gke.restores_held = True  # PodRestored only after the lazy memory restore (platform-facts §1)
    old_uid = pod.notebook.uid
    seq = pod.server.last_seq()
    pod.server.api("POST", "suspend", {"reason": "lunch"}, expect=202)
    ready = pod.server.wait_journal("gke_snapshot_ready", after=seq, timeout=60)
    pod.server.wait_journal("gke_pod_stopped", after=seq, timeout=30)
    stopped = pod.notebook.pod()
    assert (stopped["metadata"]["uid"], stopped["status"]["phase"]) == (old_uid, "Succeeded")
    # Frozen with its pod (here: waiting in release for the return).
    assert pod.server.api("GET", "status")["state"] == "snapshotting"

    # The real StatefulSet controller replaces the stopped pod: a new pod object; the downward-API file shows its uid.
    uid = pod.notebook.replaced()
    assert uid != old_uid
    returned_at = time.monotonic()
    pod.files.new_pod(uid)
    status = pod.server.wait(lambda s: s["state"] == "ready", timeout=30)
    assert time.monotonic() - returned_at < 10
    assert status["restore"] == "live", status
    assert status["last_restore"]["verification"][0]["verdict"] == "LIVE"
    # Ready and live without PodRestored, which only comes later.
    assert "gke_pod_restored" not in kinds_after(pod.server, seq)
    assert verdict(pod.server, pod.kernel_id) == "LIVE"
    out, _ = run_cell(pod.server, pod.kernel_id, "print(only_in_memory)")
    assert out.strip() == "41"

    returned = pod.server.wait_journal("gke_returned", after=seq)
    assert returned["new_pod_uid"] == uid
    assert any("downward-API file" in s for s in returned["signals"]), returned["signals"]

    # GKE ends the restore: PodRestored on the new pod is recorded when it comes; the consumed snapshot is
    # deleted then (by the sidecar, with the new pod's token, under its Role).
    snapshot = ready["snapshot"]
    pod.gke.restores_held = False
    wait_for(lambda: (POD, snapshot) in pod.gke.restored, 60, "GKE's restore of the new pod")
    restored = pod.server.wait_journal("gke_pod_restored", after=seq, timeout=60)
    assert snapshot in restored["pod_restored_message"]
    assert pod.server.wait_journal("gke_snapshot_deleted", after=seq, timeout=30)["snapshot"] == snapshot
    wait_for(lambda: snapshot not in pod.notebook.snapshots(), 30, "the consumed snapshot gone")

    kinds = kinds_after(pod.server, seq)
    order = [
        "gke_identity",
        "gke_snapshot_requested",
        "gke_checkpoint_done",
        "gke_snapshot_ready",
        "gke_pod_stopped",
        "gke_returned",
        "restored",
        "gke_pod_restored",
    ]
    assert [k for k in kinds if k in order] == order
    cycle = pod.server.api("GET", "timeline")["cycles"][-1]
    assert cycle["outcome"] == "resumed"
    assert cycle["restore"] == "live"
    assert cycle["times"]["environment_stopped"]
    assert cycle["times"]["first_cell_runnable"]
    # The backend's own marks, on the same cycle, in time order (the timeline).
    events = {e["name"]: e for e in cycle["events"]}
    names = [e["name"] for e in cycle["events"]]
    assert names[:4] == ["snapshot_requested", "checkpoint_done", "snapshot_ready", "pod_stopped"], names
    assert set(names[4:]) == {"pod_returned_live", "pod_restored", "snapshot_deleted"}, names
    assert events["pod_returned_live"]["since_suspend_requested"] >= events["pod_stopped"]["since_suspend_requested"]
    assert events["snapshot_ready"]["kind"] == "gke_snapshot_ready"
    assert all(e["since_suspend_requested"] is not None for e in cycle["events"])
    assert_only_the_sidecar_called(pod)


@pytest.mark.cluster
@pytest.mark.parametrize("seen_by", ["clock_jump", "spec_environ"])
def test_live_return_detected_from_other_in_pod_signals(pod: Pod, seen_by: str) -> None:
    pod.gke.behaviour = "succeed"
    seq = pod.server.last_seq()
    pod.server.api("POST", "suspend", {"reason": seen_by}, expect=202)
    ready = pod.server.wait_journal("gke_snapshot_ready", after=seq, timeout=60)
    pod.server.wait_journal("gke_pod_stopped", after=seq, timeout=30)
    uid = pod.notebook.replaced()
    if seen_by == "clock_jump":
        # Frozen for 10 minutes: the wall clock moved on, the monotonic clock did not.
        pod.files.jump_clock(600)
    else:
        spec_environ = f"POD_NAME={POD}\0POD_NAMESPACE={pod.notebook.namespace}\0POD_UID={uid}\0"
        pod.files.spec_environ.write_bytes(spec_environ.encode())
    status = pod.server.wait(lambda s: s["state"] == "ready", timeout=30)
    assert status["restore"] == "live", status
    returned = pod.server.wait_journal("gke_returned", after=seq)
    expected = "the wall clock moved" if seen_by == "clock_jump" else "spec_environ names pod uid"
    assert any(expected in s for s in returned["signals"]), returned["signals"]
    assert len(returned["signals"]) == 1
    assert verdict(pod.server, pod.kernel_id) == "LIVE"
    pod.files.new_pod(uid)  # the downward-API file follows the new pod too
    # GKE restored the new pod from this cycle's snapshot; the server consumed it.
    assert pod.server.wait_journal("gke_snapshot_deleted", after=seq, timeout=60)["snapshot"] == ready["snapshot"]
    assert (POD, ready["snapshot"]) in pod.gke.restored
    assert_only_the_sidecar_called(pod)


# -- the silent cold start: a new server process with the old journal ----------------------------------------


@pytest.mark.cluster
def test_silent_cold_start_restarts_the_sessions_and_restores_the_checkpoints(pod: Pod) -> None:
    pod.gke.behaviour = "succeed"
    cluster, namespace = pod.notebook.cluster, pod.notebook.namespace
    seq = pod.server.last_seq()
    pod.server.api("POST", "suspend", {"reason": "overnight"}, expect=202)
    ready = pod.server.wait_journal("gke_snapshot_ready", after=seq, timeout=60)
    pod.server.wait_journal("gke_pod_stopped", after=seq, timeout=30)
    assert pod.server.process is not None
    old_pid = pod.server.process.pid
    pod.server.stop(signal.SIGKILL)  # gone with its pod

    # A new image in the StatefulSet's template: the image is in GKE's restore hash (platform-facts §1), so the
    # real StatefulSet controller's new pod matches no snapshot and GKE starts it cold, silently.
    statefulset = get(cluster, namespace, "statefulset", "notebook")
    assert statefulset is not None
    containers = statefulset["spec"]["template"]["spec"]["containers"]
    index = next(i for i, c in enumerate(containers) if c["name"] == "notebook")
    change = [
        {
            "op": "replace",
            "path": f"/spec/template/spec/containers/{index}/image",
            "value": containers[index]["image"] + "-candidate",
        }
    ]
    cluster.kubectl("patch", "statefulset", "notebook", "-n", namespace, "--type=json", "-p", json.dumps(change))
    restored_before = list(pod.gke.restored)
    uid = pod.notebook.replaced(hold=False)
    assert pod.notebook.current["spec"]["containers"][index]["image"].endswith("-candidate")
    pod.files.reset(uid)  # a cold pod: POD_UID and the file agree
    second = ClusterGKEServer(namespace, pod.base, pod.state_dir, pod.notebook.sidecar, pod.files, uid, backend="gke")
    pod.server = second
    second.start()
    assert second.process is not None
    assert second.process.pid != old_pid
    status = second.wait(lambda s: s["state"] == "ready" and not (s["operation"] or {}).get("in_progress"), 90)
    assert status["restore"] == "cold", status
    message = status["cold_start"]["message"]
    assert f"snapshot {ready['snapshot']} was Ready" in message, message
    assert "the pod spec probably changed" in message
    assert status["backend"]["name"] == "gke"
    assert pod.gke.restored == restored_before  # GKE restored nothing: no compatible snapshot

    code, sessions = second.request("GET", "api/sessions")
    assert code == 200
    assert [(s["id"], s["kernel"]["id"], s["path"]) for s in sessions] == [
        (pod.session_id, pod.kernel_id, "model.ipynb")
    ]
    restored = status["last_restore"]["checkpoints_restored"][pod.kernel_id]
    assert sorted(restored["restored"]) == ["vocab", "weights"]
    assert verdict(second, pod.kernel_id) == "COLD"
    out, _ = run_cell(second, pod.kernel_id, "print(vocab, 'only_in_memory' in dir())")
    assert out.strip() == "{'a': 1, 'b': 2} False"
    assert "gke_cold_start" in kinds_after(second, seq)
    # While it resumed by itself the status said what happened: a cold start, not a snapshot restore.
    restoring = [e for e in second.journal() if e["seq"] > seq and e["kind"] == "transition" and e["to"] == "restoring"]
    assert [e["message"] for e in restoring] == [
        "the pod started cold, not from its snapshot: starting the recorded sessions again "
        "and restoring their application checkpoints"
    ]
    cycle = second.api("GET", "timeline")["cycles"][-1]
    assert (cycle["outcome"], cycle["restore"]) == ("resumed", "cold")
    names = [e["name"] for e in cycle["events"]]
    assert names[:3] == ["snapshot_requested", "checkpoint_done", "snapshot_ready"], names
    assert "pod_started_cold" in names
    assert "pod_returned_live" not in names
    assert_only_the_sidecar_called(pod)


# -- pure: the signals and the cold-start reading -----------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.wall, self.mono = 1_000_000.0, 50.0

    def advance(self, wall: float, mono: float) -> None:
        self.wall += wall
        self.mono += mono


def signals(tmp_path: Path, clock: Clock, env_uid: str = "old") -> PodSignals:
    return PodSignals(
        pod_uid_file=str(tmp_path / "uid"),
        spec_environ_path=str(tmp_path / "spec_environ"),
        environ={"POD_UID": env_uid},
        wall=lambda: clock.wall,
        monotonic=lambda: clock.mono,
        clock_jump_threshold=5.0,
    )


def test_signals_clock_jump_only_above_the_threshold(tmp_path: Path) -> None:
    clock = Clock()
    s = signals(tmp_path, clock)
    before = s.identity()
    clock.advance(wall=30.0, mono=27.0)  # 3 s of drift: not a freeze
    assert not s.check(before).returned
    clock.advance(wall=400.0, mono=2.0)
    check = s.check(before)
    assert check.returned
    assert check.clock_jump_seconds == pytest.approx(401.0)
    assert check.new_pod_uid is None


def test_signals_new_uid_in_the_file_or_in_spec_environ(tmp_path: Path) -> None:
    clock = Clock()
    s = signals(tmp_path, clock)
    (tmp_path / "uid").write_text("old\n")
    before = s.identity()
    assert isinstance(before, PodIdentity)
    assert before.pod_uid_file == "old"
    assert not s.check(before).returned
    (tmp_path / "spec_environ").write_bytes(b"HOME=/home/jovyan\0POD_UID=new\0")
    check = s.check(before)
    assert check.returned
    assert check.new_pod_uid == "new"
    (tmp_path / "uid").write_text("newer")
    check = s.check(before)
    assert check.new_pod_uid == "newer"
    assert len(check.signals) == 2
    assert parse_environ("A=1\nB=x=y\n") == {"A": "1", "B": "x=y"}


def test_signals_without_any_source_never_fire(tmp_path: Path) -> None:
    clock = Clock()
    s = PodSignals(
        pod_uid_file="", spec_environ_path="", environ={}, wall=lambda: clock.wall, monotonic=lambda: clock.mono
    )
    before = s.identity()
    clock.advance(1.0, 1.0)
    assert not s.check(before).returned


async def test_stop_ends_the_wait_for_pod_restored(tmp_path: Path) -> None:
    """After a return the backend follows PodRestored in the background; a shutdown stops that."""
    from jupyter_suspend.server.backends.gke import _Progress

    backend = GKEBackend(pod_restored_poll=0.01, pod_restored_timeout=600)
    client = SidecarClient(str(tmp_path / "no-sidecar.sock"), str(tmp_path / "no-secret"), timeout=0.1)
    recorded: list[str] = []
    backend._spawn(backend._after_return(client, _Progress("t-1", 1.0), lambda kind, **_: recorded.append(kind)))
    (task,) = backend._background
    await asyncio.sleep(0.05)
    assert not task.done()  # still asking a sidecar that does not answer
    await asyncio.wait_for(backend.stop(), 5)
    assert task.cancelled()
    assert backend._background == set()
    assert recorded == []
    await backend.stop()  # nothing left: a no-op


def test_gke_is_a_backend_name_and_reads_the_journal_it_left() -> None:
    assert load_backend_class("gke") is GKEBackend
    backend = GKEBackend(predecessor_wait_seconds=0)  # no sidecar here to wait for (item 8's hold: tested below)
    caps = backend.capabilities
    assert (caps.keeps_live_memory, caps.keeps_gpu_memory, caps.releases_node, caps.needs_sidecar) == (True,) * 4
    assert (caps.server_survives_suspend, caps.resume_from_server) == (False, False)
    last = {"time": "2026-01-01T00:00:00+00:00"}

    backend.recall([{"kind": "gke_snapshot_requested", "trigger": "t-1", "requested_at": 1.0e9}])
    verdict_ = backend.interpret_cold_start(State.SNAPSHOTTING, last)
    assert verdict_.state == State.SUSPENDED  # with resume_from_server false: the core resumes at once
    assert "trigger t-1) was never seen Ready" in verdict_.message

    backend.recall([])
    assert "stopped before it requested a snapshot" in backend.interpret_cold_start(State.SNAPSHOTTING, last).message
    assert backend.interpret_cold_start(State.FLUSHING, last).state == State.RUNNING
    assert backend.interpret_cold_start(State.READY, last).message == ""
    failed = backend.interpret_cold_start(State.FAILED, last)
    assert failed.state == State.FAILED
    assert failed.message == "The previous server recorded a failure at 2026-01-01T00:00:00+00:00."
    assert failed.next_step.startswith("Acknowledge to carry on; start kernels by hand")
    assert failed.next_step.endswith("with %checkpoint restore.")


# -- issue 18 item 8: out of the Service before the freeze ----------------------------------------------------------


@pytest.mark.cluster
def test_item8_readiness_fails_from_before_the_settle_until_the_return(
    cluster: Cluster, kube_ns: str, tmp_path: Path
) -> None:
    """The readiness endpoint answers 503 before the snapshot is requested (the settle runs with the pod already
    out of its Service), stays so while frozen, and answers 200 again once back in the restored pod."""
    import urllib.error
    import urllib.request

    def readiness(port: int) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    notebook, server = start_notebook(cluster, kube_ns, tmp_path)
    port = free_port()
    server.extra_config += (
        f"c.GKEBackend.readiness_port = {port}\n"
        "c.GKEBackend.readiness_host = '127.0.0.1'\n"
        "c.GKEBackend.settle_seconds = 1.0\n"
    )
    try:
        server.start()
        assert readiness(port) == 200
        seq = server.last_seq()
        server.api("POST", "suspend", {"reason": "lunch"}, expect=202)
        wait_for(lambda: readiness(port) == 503, 20, "readiness 503", interval=0.05)
        out_at = time.time()
        requested = server.wait_journal("gke_snapshot_requested", after=seq)
        assert out_at <= requested["mark_at"], (out_at, requested["mark_at"])
        server.wait_journal("gke_pod_stopped", after=seq, timeout=60)
        assert readiness(port) == 503  # frozen with the pod: still out of the Service
        notebook.files.new_pod(notebook.replaced(hold=False))
        status = server.wait(lambda s: s["state"] == "ready", timeout=30)
        assert status["restore"] in ("live", "cold")
        assert readiness(port) == 200
    finally:
        stop_notebook(notebook, server)


@pytest.mark.cluster
def test_item8_a_pod_started_while_its_predecessors_snapshot_uploads_writes_nothing_until_it_is_ready(
    cluster: Cluster, kube_ns: str, tmp_path: Path
) -> None:
    """The real StatefulSet controller replaces the stopped pod before the upload ends (here: at once; until the
    releaser scales it to 0). That pod's server must not write the volume meanwhile: it writes its first journal
    line only after its sidecar says the snapshot is Ready."""
    from jupyter_suspend.common.times import rfc3339_epoch

    notebook, first = start_notebook(cluster, kube_ns, tmp_path, hold=False, upload_seconds=8.0)
    second: ClusterGKEServer | None = None
    try:
        first.start()
        seq = first.last_seq()
        first.api("POST", "suspend", {"reason": "lunch"}, expect=202)
        requested = first.wait_journal("gke_snapshot_requested", after=seq)
        first.stop(signal.SIGKILL)  # frozen and stopped with its pod: the journal ends at the request
        lines_before = len(first.journal())

        # The new pod (not a restore: nothing is Ready yet) runs new processes: its sidecar with its own token.
        old = notebook.uid
        notebook.current = wait_for(lambda: running_pod(cluster, kube_ns, POD, not_uid=old), 60, "the replacement")
        notebook.sidecar.stop()
        notebook.sidecar.pod = notebook.current
        notebook.sidecar.start(bound_token(cluster, kube_ns, SIDECAR_ACCOUNT, notebook.current))
        notebook.files.reset(notebook.uid)
        second = ClusterGKEServer(
            kube_ns, tmp_path, tmp_path / "state", notebook.sidecar, notebook.files, notebook.uid, backend="gke"
        )
        # start() returns once the server answers, and it answers only after its hold: start it beside the polls.
        import threading

        starting = threading.Thread(target=second.start, daemon=True)
        starting.start()
        wait_for(lambda: second.process is not None, 30, "the second server's process")
        # Ready came after the start of the last poll that did not see it (``not_ready_at``).
        not_ready_at: float | None = None
        while True:
            polled_at = time.time()
            listed = get(cluster, kube_ns, "podsnapshots") or {"items": []}
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for s in listed["items"]
                for c in (s.get("status") or {}).get("conditions") or []
            ):
                break
            assert len(second.journal()) == lines_before, "written while the snapshot was uploading"
            not_ready_at = polled_at
            time.sleep(0.05)
        assert not_ready_at is not None, "the snapshot was Ready before the new server ran: nothing was shown"
        starting.join(90)
        assert not starting.is_alive(), "the second server never answered"
        status = second.wait(lambda s: not (s["operation"] or {}).get("in_progress"), 90)
        new_entries = second.journal()[lines_before:]
        assert new_entries, status
        assert new_entries[0]["kind"] == "recovered"
        first_write = rfc3339_epoch(new_entries[0]["time"])
        assert first_write is not None
        assert first_write >= not_ready_at - 0.01, (first_write, not_ready_at)
        assert requested["trigger"] in second.log_path.read_text()  # it said what it waited for
    finally:
        stop_notebook(notebook, second)


# -- a fault the real API server does not make on demand: tests/cluster/faults.py's proxy in front of it ----------


@pytest.mark.cluster
def test_a_failed_read_of_the_trigger_is_retried_and_the_suspend_goes_on(
    cluster: Cluster, kube_ns: str, tmp_path: Path
) -> None:
    """One 500 on the sidecar's read of the trigger while the server follows the snapshot: the follow retries
    and the pod returns live. The sidecar reaches the real API server through the fault proxy, which answers that
    one GET itself (the real server cannot be made to fail exactly one read: webhooks see no reads)."""
    with FaultProxy(cluster) as proxy:
        notebook, server = start_notebook(cluster, kube_ns, tmp_path, api_port=proxy.port)
        try:
            server.start()
            seq = server.last_seq()
            rule = proxy.fail("GET", r"/podsnapshotmanualtriggers/[^/]+$", 500)
            server.api("POST", "suspend", {"reason": "lunch"}, expect=202)
            server.wait_journal("gke_snapshot_ready", after=seq, timeout=60)
            server.wait_journal("gke_pod_stopped", after=seq, timeout=60)
            # The injected 500 was met (by a read of the trigger: the proxy answered it) and the follow said it
            # retries; the suspend went on and the next reads reached the real API server.
            assert rule.matched == 1, rule
            failed = [c for c in proxy.calls if c.injected == "fail"]
            assert [(c.resource, c.verb, c.status) for c in failed] == [("podsnapshotmanualtriggers", "get", 500)]
            assert any(
                c.resource == "podsnapshotmanualtriggers" and c.verb == "get" and c.injected is None
                and c.status == 200 for c in proxy.calls
            ), proxy.calls  # fmt: skip
            log = server.log_path.read_text()
            assert "following the snapshot" in log
            assert "(retrying)" in log
            new_uid = notebook.replaced(hold=False)
            notebook.files.new_pod(new_uid)
            server.wait(lambda s: s["state"] == "ready", timeout=60)
            assert server.wait_journal("gke_returned", after=seq)["new_pod_uid"] == new_uid
            assert proxy.rejected() == []  # the real authorizer refused the sidecar nothing
        finally:
            stop_notebook(notebook, server)
