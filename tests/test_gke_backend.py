"""The gke backend end to end: a real ``jupyter server`` process on it, the real sidecar process (with a
token of its own), the loopback Kubernetes API and the simulated GKE snapshot controller (tests/gke_helpers).

One notebook pod is shared by the tests of this module, in order: refusals and failures first (each leaves
the session running), then live returns (each one a new pod), then the silent cold start (a new server process
with the old journal). A few pure tests of the in-pod signals and the cold-start reading come last.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest

from jupyter_suspend.server.app import load_backend_class
from jupyter_suspend.server.backends.gke import GKEBackend
from jupyter_suspend.server.pod_return import PodIdentity, PodSignals, parse_environ
from jupyter_suspend.server.sidecar_client import SidecarClient
from jupyter_suspend.server.states import State
from tests.gke_helpers import (
    SIDECAR_USER,
    GKEServer,
    OwnTokenSidecar,
    PodFiles,
    new_pod,
    no_kube_credentials,
    pod_running,
)
from tests.kubeapi import KubeAPI, wait_until
from tests.kubeapi.gke import GKESnapshotController
from tests.sidecar_helpers import GKE, NAMESPACE, POD, installed_policy, make_pod, make_storage_config

pytestmark = pytest.mark.slow

REQUIRE_ARGS = ["--policy-mode", "require", "--policy-name", "notebook-snapshots"]
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


@dataclass
class Pod:
    kube: KubeAPI
    gke: GKESnapshotController
    sidecar: OwnTokenSidecar
    files: PodFiles
    server: GKEServer
    base: Path
    state_dir: Path
    kernel_id: str
    session_id: str


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
    return server.wait(lambda s: s["operation"] and not s["operation"]["in_progress"], timeout=60)


def snapshots(kube: KubeAPI) -> list[str]:
    return [s["metadata"]["name"] for s in kube.list(GKE, "podsnapshots", NAMESPACE)]


def kinds_after(server: GKEServer, seq: int) -> list[str]:
    return [e["kind"] for e in server.journal() if e["seq"] > seq]


def assert_only_the_sidecar_called(pod: Pod) -> None:
    calls = pod.kube.calls
    assert {c.user for c in calls} <= {SIDECAR_USER}, {(c.user, c.verb, c.resource) for c in calls}
    assert not pod.kube.rejected
    assert no_kube_credentials(pod.server.environ()) == []


def assert_still_running(pod: Pod, status: dict[str, Any]) -> None:
    """An aborted suspend: state running, nothing released, the kernel answers with its memory."""
    assert status["state"] == "running", status
    assert status["operation"]["outcome"] == "aborted", status["operation"]
    assert "nothing was released" in status["message"]
    assert "the session keeps running" in status["message"]
    out, _ = run_cell(pod.server, pod.kernel_id, "print(only_in_memory + 1)")
    assert out.strip() == "42"


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    base = tmp_path_factory.mktemp("gke-pod")
    state_dir = base / "state"
    with KubeAPI() as kube:
        gke = GKESnapshotController(kube, checkpoint_seconds=0.1, upload_seconds=0.3).attach()
        make_storage_config(kube)
        kube.create(installed_policy())
        uid = make_pod(kube)
        files = PodFiles(base / "podinfo")
        files.reset(uid)
        sidecar = OwnTokenSidecar(kube, base / "sidecar", REQUIRE_ARGS, pod_uid=uid)
        sidecar.start()
        server = GKEServer(base, state_dir, sidecar, files, uid)
        server.start()
        try:
            name = "model.ipynb"
            nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), server.root_dir / name)
            code, session = server.request(
                "POST", "api/sessions", {"path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}}
            )
            assert code == 201, session
            the_pod = Pod(kube, gke, sidecar, files, server, base, state_dir, session["kernel"]["id"], session["id"])
            run_cell(server, the_pod.kernel_id, SETUP)
            yield the_pod
        finally:
            the_server = the_pod.server if "the_pod" in locals() else server
            the_server.stop()
            sidecar.stop()
        assert not kube.controller_errors, kube.controller_errors


# -- refusals and failures: nothing released, the session keeps running --------------------------------------


def test_sidecar_down_preflight_says_so_and_the_suspend_is_refused(pod: Pod) -> None:
    before = len(pod.kube.calls)
    pod.sidecar.stop()
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
        pod.sidecar.start()
    assert pod.kube.calls[before:] == []  # nothing reached the API
    preflight = pod.server.api("POST", "suspend", {"dry_run": True})
    assert preflight["would_abort"] == []
    note = next(note for note in preflight["notes"] if note.startswith("The sidecar answers at"))
    # The sidecar's facts about the policy (it runs with --policy-mode require).
    assert (
        "the snapshot policy 'notebook-snapshots' (installed by the platform team) stops the pod after the "
        "checkpoint: the node can go back to the pool." in note
    ), note


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
    assert_only_the_sidecar_called(pod)


def test_checkpoint_failure_aborts_and_deletes_the_failed_snapshot(pod: Pod) -> None:
    pod.gke.behaviour = "checkpoint_fails"
    status = suspend(pod.server)
    assert_still_running(pod, status)
    assert "the checkpoint of snapshot" in status["message"]
    assert "simulated: checkpoint failed" in status["message"]
    assert "was deleted" in status["message"]
    wait_until(lambda: snapshots(pod.kube) == [], timeout=10)
    assert_only_the_sidecar_called(pod)


def test_snapshot_never_ready_times_out_and_aborts(pod: Pod) -> None:
    pod.gke.behaviour = "never_ready"
    started = time.monotonic()
    status = suspend(pod.server)
    assert time.monotonic() - started >= 4.0  # snapshot_timeout
    pod_running(pod.kube)  # the simulation stopped the pod at the checkpoint; a real one would be frozen
    assert_still_running(pod, status)
    assert "was not Ready within 4 s" in status["message"]
    assert "last phase: uploading" in status["message"]
    wait_until(lambda: snapshots(pod.kube) == [], timeout=10)
    assert_only_the_sidecar_called(pod)


def test_api_error_aborts_before_any_trigger(pod: Pod) -> None:
    pod.gke.behaviour = "succeed"
    triggers = len(pod.kube.list(GKE, "podsnapshotmanualtriggers", NAMESPACE))
    pod.kube.fail_next("create", "podsnapshotmanualtriggers", 500)
    status = suspend(pod.server)
    assert_still_running(pod, status)
    assert "the snapshot could not be requested" in status["message"]
    assert "kube_unavailable" in status["message"]
    assert "suspend again in a moment" in status["message"]
    assert len(pod.kube.list(GKE, "podsnapshotmanualtriggers", NAMESPACE)) == triggers
    assert_only_the_sidecar_called(pod)


def test_policy_that_resumes_the_pod_releases_nothing_and_says_so(pod: Pod) -> None:
    pod.gke.behaviour = "succeed"
    policy = ("podsnapshotpolicies", NAMESPACE, "notebook-snapshots")
    pod.kube.patch(GKE, *policy, {"spec": {"triggerConfig": {"postCheckpoint": "resume"}}})
    try:
        # The dry run says it before: nothing would be released, the suspend would abort.
        preflight = pod.server.api("POST", "suspend", {"dry_run": True})
        assert len(preflight["would_abort"]) == 1, preflight["would_abort"]
        assert "'notebook-snapshots' has postCheckpoint: resume" in preflight["would_abort"][0]
        assert "release nothing" in preflight["would_abort"][0]
        assert any("nothing would be released" in note for note in preflight["notes"]), preflight["notes"]
        status = suspend(pod.server)
    finally:
        pod.kube.patch(GKE, *policy, {"spec": {"triggerConfig": {"postCheckpoint": "stop"}}})
    assert_still_running(pod, status)
    assert "is Ready but the pod kept running" in status["message"]
    assert "postCheckpoint: stop" in status["message"]
    # A Ready snapshot left behind would be restored by the pod's next restart: deleted.
    assert "was deleted" in status["message"]
    wait_until(lambda: snapshots(pod.kube) == [], timeout=10)
    assert_only_the_sidecar_called(pod)


# -- live returns: the same process continues in a new pod ------------------------------------------------


def test_live_return_detected_from_the_new_pod_uid(pod: Pod) -> None:
    pod.gke.behaviour = "succeed"
    seq = pod.server.last_seq()
    # A read of the trigger fails once: the follow retries, the suspend goes on.
    pod.kube.fail_next("get", "podsnapshotmanualtriggers", 500)
    pod.server.api("POST", "suspend", {"reason": "lunch"}, expect=202)
    ready = pod.server.wait_journal("gke_snapshot_ready", after=seq)
    pod.server.wait_journal("gke_pod_stopped", after=seq)
    assert (pod.kube.get("v1", "pods", NAMESPACE, POD) or {})["status"]["phase"] == "Succeeded"
    # Frozen with its pod (here: waiting in release for the return).
    assert pod.server.api("GET", "status")["state"] == "snapshotting"

    # GKE restores the pod: a new pod object; the downward-API file shows its uid.
    uid = new_pod(pod.kube)
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

    # The late PodRestored condition is recorded when it comes; the consumed snapshot is deleted then.
    snapshot = ready["snapshot"]
    assert pod.gke.restore_pod(POD, snapshot) == snapshot
    restored = pod.server.wait_journal("gke_pod_restored", after=seq)
    assert snapshot in restored["pod_restored_message"]
    assert pod.server.wait_journal("gke_snapshot_deleted", after=seq)["snapshot"] == snapshot
    wait_until(lambda: snapshot not in snapshots(pod.kube), timeout=10)

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


@pytest.mark.parametrize("seen_by", ["clock_jump", "spec_environ"])
def test_live_return_detected_from_other_in_pod_signals(pod: Pod, seen_by: str) -> None:
    pod.gke.behaviour = "succeed"
    seq = pod.server.last_seq()
    pod.server.api("POST", "suspend", {"reason": seen_by}, expect=202)
    pod.server.wait_journal("gke_pod_stopped", after=seq)
    uid = new_pod(pod.kube)
    if seen_by == "clock_jump":
        # Frozen for 10 minutes: the wall clock moved on, the monotonic clock did not.
        pod.files.jump_clock(600)
    else:
        pod.files.new_pod(uid, uid_file=False, spec_environ=True)
    status = pod.server.wait(lambda s: s["state"] == "ready", timeout=30)
    assert status["restore"] == "live", status
    returned = pod.server.wait_journal("gke_returned", after=seq)
    expected = "the wall clock moved" if seen_by == "clock_jump" else "spec_environ names pod uid"
    assert any(expected in s for s in returned["signals"]), returned["signals"]
    assert len(returned["signals"]) == 1
    assert verdict(pod.server, pod.kernel_id) == "LIVE"
    pod.files.new_pod(uid)  # the downward-API file follows the new pod too
    assert_only_the_sidecar_called(pod)


# -- the silent cold start: a new server process with the old journal ----------------------------------------


def test_silent_cold_start_restarts_the_sessions_and_restores_the_checkpoints(pod: Pod) -> None:
    pod.gke.behaviour = "succeed"
    pod_running(pod.kube)
    seq = pod.server.last_seq()
    pod.server.api("POST", "suspend", {"reason": "overnight"}, expect=202)
    ready = pod.server.wait_journal("gke_snapshot_ready", after=seq)
    pod.server.wait_journal("gke_pod_stopped", after=seq)
    assert pod.server.process is not None
    old_pid = pod.server.process.pid
    pod.server.stop(signal.SIGKILL)  # gone with its pod; GKE finds no compatible snapshot

    uid = new_pod(pod.kube)
    pod.files.reset(uid)  # a cold pod: POD_UID and the file agree
    second = GKEServer(pod.base, pod.state_dir, pod.sidecar, pod.files, uid, backend="gke")
    pod.server = second
    second.start()
    assert second.process is not None
    assert second.process.pid != old_pid
    status = second.wait(lambda s: s["state"] == "ready" and not (s["operation"] or {}).get("in_progress"), 60)
    assert status["restore"] == "cold", status
    message = status["cold_start"]["message"]
    assert f"snapshot {ready['snapshot']} was Ready" in message, message
    assert "the pod spec probably changed" in message
    assert status["backend"]["name"] == "gke"

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


def test_item8_readiness_fails_from_before_the_settle_until_the_return(tmp_path: Path) -> None:
    """The readiness endpoint answers 503 before the snapshot is requested (the settle runs with the pod already
    out of its Service), stays so while frozen, and answers 200 again once back in the restored pod."""
    import urllib.error
    import urllib.request

    from tests.servers import free_port

    def readiness(port: int) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    with KubeAPI() as kube:
        GKESnapshotController(kube, checkpoint_seconds=0.1, upload_seconds=0.3).attach()
        make_storage_config(kube)
        kube.create(installed_policy())
        uid = make_pod(kube)
        files = PodFiles(tmp_path / "podinfo")
        files.reset(uid)
        sidecar = OwnTokenSidecar(kube, tmp_path / "sidecar", REQUIRE_ARGS, pod_uid=uid)
        sidecar.start()
        server = GKEServer(tmp_path, tmp_path / "state", sidecar, files, uid)
        port = free_port()
        server.extra_config += (
            f"c.GKEBackend.readiness_port = {port}\n"
            "c.GKEBackend.readiness_host = '127.0.0.1'\n"
            "c.GKEBackend.settle_seconds = 1.0\n"
        )
        server.start()
        try:
            assert readiness(port) == 200
            seq = server.last_seq()
            server.api("POST", "suspend", {"reason": "lunch"}, expect=202)
            wait_until(lambda: readiness(port) == 503, timeout=20, interval=0.05)
            out_at = time.time()
            requested = server.wait_journal("gke_snapshot_requested", after=seq)
            assert out_at <= requested["mark_at"], (out_at, requested["mark_at"])
            server.wait_journal("gke_pod_stopped", after=seq)
            assert readiness(port) == 503  # frozen with the pod: still out of the Service
            files.new_pod(new_pod(kube))
            status = server.wait(lambda s: s["state"] == "ready", timeout=30)
            assert status["restore"] in ("live", "cold")
            assert readiness(port) == 200
        finally:
            server.stop()
            sidecar.stop()


def test_item8_a_pod_started_while_its_predecessors_snapshot_uploads_writes_nothing_until_it_is_ready(
    tmp_path: Path,
) -> None:
    """The StatefulSet controller may replace the stopped pod before the upload ends (until the releaser scales it
    to 0). That pod's server must not write the volume meanwhile: it writes its first journal line only after the
    sidecar says the snapshot is Ready."""
    with KubeAPI() as kube:
        GKESnapshotController(kube, checkpoint_seconds=0.1, upload_seconds=4.0).attach()
        make_storage_config(kube)
        kube.create(installed_policy())
        uid = make_pod(kube)
        files = PodFiles(tmp_path / "podinfo")
        files.reset(uid)
        sidecar = OwnTokenSidecar(kube, tmp_path / "sidecar", REQUIRE_ARGS, pod_uid=uid)
        sidecar.start()
        first = GKEServer(tmp_path, tmp_path / "state", sidecar, files, uid)
        first.start()
        second: GKEServer | None = None
        try:
            seq = first.last_seq()
            first.api("POST", "suspend", {"reason": "lunch"}, expect=202)
            requested = first.wait_journal("gke_snapshot_requested", after=seq)
            first.stop(signal.SIGKILL)  # frozen and stopped with its pod: the journal ends at the request
            lines_before = len(first.journal())

            new_uid = new_pod(kube)
            files.reset(new_uid)  # a new pod, not a restore
            second = GKEServer(tmp_path, tmp_path / "state", sidecar, files, new_uid, backend="gke")
            second.start()
            ready_at = None
            while ready_at is None:
                snaps = kube.list(GKE, "podsnapshots", NAMESPACE)
                if any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for s in snaps
                    for c in (s.get("status") or {}).get("conditions") or []
                ):
                    ready_at = time.time()
                else:
                    assert len(second.journal()) == lines_before, "written while the snapshot was uploading"
                    time.sleep(0.05)
            status = second.wait(lambda s: not (s["operation"] or {}).get("in_progress"), 60)
            new_entries = second.journal()[lines_before:]
            assert new_entries, status
            assert new_entries[0]["kind"] == "recovered"
            from jupyter_suspend.common.times import rfc3339_epoch

            first_write = rfc3339_epoch(new_entries[0]["time"])
            assert first_write is not None
            assert first_write >= ready_at - 0.5, (first_write, ready_at)  # the poll above sees Ready a little late
            assert requested["trigger"] in second.log_path.read_text()  # it said what it waited for
        finally:
            if second is not None:
                second.stop()
            sidecar.stop()
