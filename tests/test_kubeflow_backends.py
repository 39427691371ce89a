"""The Kubeflow backends end to end: the real sidecar process (``--workload notebook|workspace``, a token of its
own) against the loopback Kubernetes API with the simulated Kubeflow controllers (tests/kubeapi/kubeflow.py), and a
real ``jupyter server`` process on the kubeflow-notebook / kubeflow-workspace backend.

The sidecar: what it refuses (bad bodies, another pod / namespace / kind / name, a pod without the owner label,
snapshot endpoints) makes no write call, and a stop makes exactly the calls the overlay's Role grants. The backends:
a suspend stops the workload (the simulated controller scales the StatefulSet to 0 and the pod goes), a failed
flush aborts before any API call, and a new server in the pod that comes back restarts the recorded sessions with
their checkpoints (COLD). Our polling of status, timeline, openapi and a preflight dry run leaves what Kubeflow's
culler reads (``/api/kernels``) and the Jupyter activity probe reads (``/api/status``) unchanged.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from datetime import datetime
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import nbformat
import pytest

from jupyter_suspend.common import sidecar_protocol as proto
from jupyter_suspend.server.app import load_backend_class
from jupyter_suspend.server.backends.base import ColdStartVerdict, ReleaseContext
from jupyter_suspend.server.backends.kubeflow import KubeflowNotebookBackend, KubeflowWorkspaceBackend
from jupyter_suspend.server.states import FlushFailed, State
from jupyter_suspend.sidecar.config import ConfigError, parse_config
from tests.conftest import checkpoint_handler_code
from tests.gke_helpers import SIDECAR_USER, OwnTokenSidecar
from tests.kubeapi import KubeAPI, wait_until
from tests.kubeapi.kubeflow import (
    NOTEBOOK_API,
    STOPPED_ANNOTATION,
    WORKSPACE_API,
    KubeflowNotebookController,
    KubeflowWorkspaceController,
    notebook_object,
    workspace_object,
)
from tests.kubeapi.rbac import called, granted
from tests.servers import ServerProcess
from tests.sidecar_helpers import NAMESPACE, POD, make_pod, run
from tests.test_gke_backend import SETUP, run_cell, verdict
from tests.test_manifests import DEPLOY, kustomize

pytestmark = pytest.mark.slow

NOTEBOOK = "notebook"  # its pod is notebook-0 (POD), the name the deploy/ Role allows
WORKSPACE = "research"
WORKSPACE_POD = "ws-research-0"
OVERLAYS = {
    "notebook": DEPLOY / "overlays" / "kubeflow-notebook",
    "workspace": DEPLOY / "overlays" / "kubeflow-workspace",
}

WORKLOAD_VIEW_SCHEMA = json.loads(files("jupyter_suspend.common.schemas").joinpath("sidecar-workload.json").read_text())


class WorkloadSidecar(OwnTokenSidecar):
    """The sidecar of a Kubeflow pod: ``--workload KIND``, POD_NAME the pod the controller made."""

    def __init__(self, kube: KubeAPI, directory: Path, kind: str, pod: str):
        super().__init__(kube, directory, ["--workload", kind], pod_uid="uid-at-start")
        self.pod_name = pod

    def env(self) -> dict[str, str]:
        return {**super().env(), "POD_NAME": self.pod_name}


class KubeflowServer(ServerProcess):
    def __init__(self, base: Path, state_dir: Path, sidecar: WorkloadSidecar, backend: str):
        config = (
            f"c.SuspendApp.backend = {backend!r}\n"
            f"c.KubeflowBackend.sidecar_socket = {sidecar.socket_path!r}\n"
            f"c.KubeflowBackend.sidecar_secret = {sidecar.secret_path!r}\n"
            "c.KubeflowBackend.observe_seconds = 5.0\n"
            "c.KubeflowBackend.observe_interval = 0.05\n"
        )
        super().__init__(base, state_dir, config)

    def env(self) -> dict[str, str]:
        return {k: v for k, v in super().env().items() if not k.startswith(("KUBERNETES_", "POD_"))}

    def journal(self) -> list[dict[str, Any]]:
        path = self.state_dir / "journal.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def writes(kube: KubeAPI) -> list[tuple[str, str, str | None]]:
    return [(c.verb, c.resource, c.name) for c in kube.calls if c.verb not in ("get", "list", "watch")]


def role_rules(kind: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) the overlay's sidecar Role grants."""
    (role,) = [d for d in kustomize(OVERLAYS[kind]) if d["kind"] == "Role"]
    return granted(role, resource_names_for=["pods"])


def epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# -- the sidecar alone ------------------------------------------------------------------------------------------


def test_sidecar_stops_its_own_notebook_and_refuses_everything_else(tmp_path: Path) -> None:
    with KubeAPI() as kube:
        KubeflowNotebookController(kube).attach()
        # First a pod of the right name that no Notebook owns (no notebook-name label).
        make_pod(kube, POD, NAMESPACE, labels={"app": "notebook"})
        sidecar = WorkloadSidecar(kube, tmp_path / "sidecar", "notebook", POD).start()
        try:
            kube.reset_calls()
            for method, path, raw in (("GET", proto.PATH_WORKLOAD, b""), ("POST", proto.PATH_WORKLOAD_STOP, b"{}")):
                code, body = sidecar.raw(method, path, raw)
                assert (code, body["error"]) == (409, proto.E_OWNER_UNKNOWN), body
                assert "no label notebook-name" in body["message"]
                assert body["next_step"]
            assert [(c.verb, c.resource, c.name) for c in kube.calls] == [("get", "pods", POD)] * 2
            kube.delete("v1", "pods", NAMESPACE, POD)

            kube.create({**notebook_object(NOTEBOOK, NAMESPACE)})
            wait_until(
                lambda: (kube.get("v1", "pods", NAMESPACE, POD) or {}).get("status", {}).get("phase") == "Running"
            )
            kube.reset_calls()
            refused = [
                (b"{", 400, proto.E_MALFORMED),
                (b"[]", 400, proto.E_NOT_AN_OBJECT),
                (b'{"paused": true}', 400, proto.E_UNKNOWN_FIELD),
                (b'{"name": 7}', 400, proto.E_WRONG_TYPE),
                (b'{"name": "../x"}', 400, proto.E_INVALID_VALUE),
                (b'{"pod": "other-0"}', 403, proto.E_FORBIDDEN_TARGET),
                (b'{"namespace": "team-b"}', 403, proto.E_FORBIDDEN_TARGET),
                (b'{"kind": "workspace"}', 403, proto.E_FORBIDDEN_TARGET),
                (b'{"name": "' + b"x" * (proto.MAX_BODY_BYTES + 1) + b'"}', 413, proto.E_BODY_TOO_LARGE),
            ]
            for raw, status, error in refused:
                code, body = sidecar.raw("POST", proto.PATH_WORKLOAD_STOP, raw)
                assert (code, body["error"]) == (status, error), (raw[:40], body)
            code, body = sidecar.raw("POST", proto.PATH_WORKLOAD_STOP, b"{}", auth="Bearer wrong")
            assert code == 401
            for method, path in (("POST", proto.PATH_SNAPSHOT_REQUESTS), ("GET", proto.PATH_SNAPSHOTS)):
                code, body = sidecar.raw(method, path, b"{}" if method == "POST" else b"")
                assert (code, body["error"]) == (409, proto.E_NOT_ENABLED), body
            assert kube.calls == []  # every refusal above came before any API call
            # Another Notebook's name: the pod's label is read, nothing is written.
            code, body = sidecar.raw("POST", proto.PATH_WORKLOAD_STOP, b'{"name": "someone-else"}')
            assert (code, body["error"]) == (403, proto.E_FORBIDDEN_TARGET), body
            assert writes(kube) == []
            assert "kubeflow-resource-stopped" not in (
                kube.get(NOTEBOOK_API, "notebooks", NAMESPACE, NOTEBOOK)["metadata"].get("annotations") or {}
            )

            view = run(sidecar.client.workload())
            jsonschema.validate(view, WORKLOAD_VIEW_SCHEMA)
            assert (view["kind"], view["name"], view["namespace"], view["pod"]) == (
                "notebook",
                NOTEBOOK,
                NAMESPACE,
                POD,
            )
            assert (view["stopped"], view["ready_replicas"]) == (False, 1)

            before = time.time()
            stopped = run(sidecar.client.stop_workload({"kind": "notebook", "name": NOTEBOOK}))
            assert stopped["already_stopped"] is False
            assert stopped["workload"]["stopped"] is True
            annotation = kube.get(NOTEBOOK_API, "notebooks", NAMESPACE, NOTEBOOK)["metadata"]["annotations"][
                STOPPED_ANNOTATION
            ]
            assert annotation == stopped["requested_at"]
            assert before - 1 <= epoch(annotation) <= time.time() + 1
            wait_until(lambda: kube.get("apps/v1", "statefulsets", NAMESPACE, NOTEBOOK)["spec"]["replicas"] == 0)
            wait_until(lambda: kube.get("v1", "pods", NAMESPACE, POD) is None)
            again = run(sidecar.client.stop_workload())
            assert again["already_stopped"] is True
            assert again["requested_at"] is None
            jsonschema.validate(again["workload"], WORKLOAD_VIEW_SCHEMA)
            assert writes(kube) == [("patch", "notebooks", NOTEBOOK)]  # the second stop wrote nothing
            assert {c.user for c in kube.calls} == {SIDECAR_USER}
            assert {c.name for c in kube.calls if c.resource == "pods"} == {POD}
            assert called(kube) == role_rules("notebook")
        finally:
            sidecar.stop()


def test_sidecar_pauses_its_own_workspace(tmp_path: Path) -> None:
    with KubeAPI() as kube:
        KubeflowWorkspaceController(kube, terminate_seconds=0.3).attach()
        kube.create(workspace_object(WORKSPACE, NAMESPACE))
        wait_until(
            lambda: (
                (kube.get(WORKSPACE_API, "workspaces", NAMESPACE, WORKSPACE).get("status") or {}).get("state")
                == "Running"
            )
        )
        sidecar = WorkloadSidecar(kube, tmp_path / "sidecar", "workspace", WORKSPACE_POD).start()
        try:
            kube.reset_calls()
            code, body = sidecar.raw("POST", proto.PATH_WORKLOAD_STOP, b'{"kind": "notebook"}')
            assert (code, body["error"]) == (403, proto.E_FORBIDDEN_TARGET)
            assert kube.calls == []
            view = run(sidecar.client.workload())
            jsonschema.validate(view, WORKLOAD_VIEW_SCHEMA)
            assert (view["kind"], view["name"], view["state"], view["stopped"]) == (
                "workspace",
                WORKSPACE,
                "Running",
                False,
            )
            stopped = run(sidecar.client.stop_workload({"name": WORKSPACE}))
            assert stopped["workload"]["stopped"] is True
            assert kube.get(WORKSPACE_API, "workspaces", NAMESPACE, WORKSPACE)["spec"]["paused"] is True
            terminating = run(sidecar.client.workload())
            assert terminating["state"] == "Terminating", terminating
            wait_until(lambda: kube.get("v1", "pods", NAMESPACE, WORKSPACE_POD) is None)
            status = kube.get(WORKSPACE_API, "workspaces", NAMESPACE, WORKSPACE)["status"]
            assert status["state"] == "Paused"
            assert status["pauseTime"] > 0
            assert writes(kube) == [("patch", "workspaces", WORKSPACE)]
            assert called(kube) == role_rules("workspace")
        finally:
            sidecar.stop()


# -- the backends in a real jupyter server ------------------------------------------------------------------------


def kernels_view(server: KubeflowServer) -> list[tuple[str, str, str]]:
    """What Kubeflow's culler reads: ``GET /api/kernels`` execution_state and last_activity."""
    code, kernels = server.request("GET", "api/kernels")
    assert code == 200
    return sorted((k["id"], k["execution_state"], k["last_activity"]) for k in kernels)


def probe_view(server: KubeflowServer) -> str:
    """What the Jupyter activity probe of Kubeflow Workspaces reads: ``GET /api/status`` last_activity (a request
    to /api/kernels, the culler's own, counts as activity there: read this one without it in between)."""
    code, status = server.request("GET", "api/status")
    assert code == 200
    return str(status["last_activity"])


def settled_kernels_view(server: KubeflowServer) -> list[tuple[str, str, str]]:
    """The culler's view once every kernel is idle and the view holds still for a moment."""
    deadline = time.monotonic() + 20
    previous = None
    while True:
        view = kernels_view(server)
        if view == previous and all(state == "idle" for _, state, _ in view):
            return view
        assert time.monotonic() < deadline, view
        previous = view
        time.sleep(0.3)


def assert_polling_is_not_activity(server: KubeflowServer, rounds: int = 3) -> dict[str, Any]:
    """Status, timeline, openapi and dry runs leave both activity views as they were; the last dry run."""
    kernels = settled_kernels_view(server)
    probe = probe_view(server)
    preflight = poll_like_the_plugin(server, rounds)
    assert probe_view(server) == probe
    assert kernels_view(server) == kernels
    return preflight


def poll_like_the_plugin(server: KubeflowServer, rounds: int = 3) -> dict[str, Any]:
    """Our own polling: status, timeline, openapi, and the suspend dialog's dry run; the last dry run."""
    preflight: dict[str, Any] = {}
    for _ in range(rounds):
        server.api("GET", "status")
        server.api("GET", "timeline")
        server.api("GET", "openapi.json")
        preflight = server.api("POST", "suspend", {"dry_run": True})
    return preflight


def open_session(server: KubeflowServer, name: str = "model.ipynb") -> tuple[str, str]:
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), server.root_dir / name)
    code, session = server.request(
        "POST", "api/sessions", {"path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}}
    )
    assert code == 201, session
    return str(session["kernel"]["id"]), str(session["id"])


def suspend(server: KubeflowServer) -> dict[str, Any]:
    server.api("POST", "suspend", {"reason": "overnight"}, expect=202)
    return server.wait(lambda s: s["operation"] and not s["operation"]["in_progress"], timeout=60)


def pod_running(kube: KubeAPI, name: str) -> str:
    """Wait for the controller's pod to run; its uid."""
    pod = wait_until(
        lambda: (p := kube.get("v1", "pods", NAMESPACE, name)) and p.get("status", {}).get("phase") == "Running" and p,
        timeout=10,
    )
    return str(pod["metadata"]["uid"])


def backend_marks(server: KubeflowServer, after: int = 0) -> list[str]:
    return [e["mark"] for e in server.journal() if e["seq"] > after and e.get("mark")]


def cold_start(server_cls_args: tuple[Path, Path, WorkloadSidecar, str]) -> tuple[KubeflowServer, dict[str, Any]]:
    """A new server in the pod that came back, with the old journal: it resumes by itself."""
    server = KubeflowServer(*server_cls_args).start()
    status = server.wait(lambda s: s["state"] == "ready" and not (s["operation"] or {}).get("in_progress"), 60)
    return server, status


def test_notebook_suspend_stops_it_and_the_new_pod_restores_the_sessions_cold(tmp_path: Path) -> None:
    with KubeAPI() as kube:
        KubeflowNotebookController(kube).attach()
        kube.create(notebook_object(NOTEBOOK, NAMESPACE))
        first_uid = pod_running(kube, POD)
        sidecar = WorkloadSidecar(kube, tmp_path / "sidecar", "notebook", POD).start()
        args = (tmp_path, tmp_path / "state", sidecar, "kubeflow-notebook")
        server = KubeflowServer(*args).start()
        second: KubeflowServer | None = None
        try:
            kernel_id, session_id = open_session(server)
            run_cell(server, kernel_id, SETUP)

            # The culler must not see our requests: polling and a dry run move nothing it reads.
            preflight = assert_polling_is_not_activity(server, rounds=2)
            assert preflight["would_abort"] == []
            notes = " ".join(preflight["notes"])
            assert "Kubeflow Notebook 'notebook' in namespace team-a" in notes
            assert "No snapshot is taken: kernel memory is lost" in notes
            text = server.api("GET", "status")["backend"]["text"]
            assert "variables in kernel memory" not in text["keeps"]
            assert text["keeps"] == ["notebooks and other files", "application checkpoints"]

            # A flush that fails aborts before anything reaches the Kubernetes API.
            run_cell(
                server,
                kernel_id,
                "from jupyter_suspend.kernel import protocol as _p\n_saved = _p._handlers['checkpoint']\n"
                + checkpoint_handler_code(fail="disk full"),
            )
            calls_before = len(kube.calls)
            aborted = suspend(server)
            assert (aborted["state"], aborted["operation"]["outcome"]) == ("running", "aborted"), aborted
            assert "disk full" in aborted["message"]
            assert kube.calls[calls_before:] == []
            run_cell(server, kernel_id, "_p.register_handler('checkpoint', _saved)")

            seq = max(e["seq"] for e in server.journal())
            status = suspend(server)
            assert status["state"] == "suspended", status
            notebook = kube.get(NOTEBOOK_API, "notebooks", NAMESPACE, NOTEBOOK)
            stopped_at = notebook["metadata"]["annotations"][STOPPED_ANNOTATION]
            assert kube.get("apps/v1", "statefulsets", NAMESPACE, NOTEBOOK)["spec"]["replicas"] == 0
            assert kube.get("v1", "pods", NAMESPACE, POD) is None
            assert backend_marks(server, seq) == ["notebook_stop_requested", "notebook_scaled_down"]
            (requested,) = [e for e in server.journal() if e["seq"] > seq and e["kind"] == "kubeflow_stop_requested"]
            assert requested["annotation_or_patch_at"] == stopped_at
            assert requested["workload"]["name"] == NOTEBOOK
            assert status["backend"]["workload"]["ready_replicas"] == 0
            jsonschema.validate(status["backend"]["workload"], WORKLOAD_VIEW_SCHEMA)
            assert "Kubeflow notebook is stopped" in status["backend"]["text"]["while_suspended"]
            assert {c.user for c in kube.calls} == {SIDECAR_USER}
            assert called(kube) == role_rules("notebook")

            # The pod is gone with its processes; `jupyter suspend resume --kind notebook` removes the annotation.
            server.stop(signal.SIGKILL)
            kube.patch(
                NOTEBOOK_API,
                "notebooks",
                NAMESPACE,
                NOTEBOOK,
                {"metadata": {"annotations": {STOPPED_ANNOTATION: None}}},
            )
            assert pod_running(kube, POD) != first_uid
            second, ready = cold_start(args)
            assert ready["restore"] == "cold", ready
            assert "This is a new pod: notebook notebook was asked to stop at" in ready["cold_start"]["message"]
            _, sessions = second.request("GET", "api/sessions")
            assert [(s["id"], s["kernel"]["id"], s["path"]) for s in sessions] == [
                (session_id, kernel_id, "model.ipynb")
            ]
            restored = ready["last_restore"]["checkpoints_restored"][kernel_id]
            assert sorted(restored["restored"]) == ["vocab", "weights"]
            assert verdict(second, kernel_id) == "COLD"
            out, _ = run_cell(second, kernel_id, "print(vocab, 'only_in_memory' in dir())")
            assert out.strip() == "{'a': 1, 'b': 2} False"
            cycle = second.api("GET", "timeline")["cycles"][-1]
            assert (cycle["outcome"], cycle["restore"]) == ("resumed", "cold")
            names = [e["name"] for e in cycle["events"]]
            assert names == ["notebook_stop_requested", "notebook_scaled_down", "pod_started_cold"], json.dumps(
                cycle["events"]
            )
        finally:
            for process in (second, server):
                if process is not None:
                    process.stop()
            sidecar.stop()


def test_workspace_suspend_pauses_it_with_state_and_pause_time_on_the_timeline(tmp_path: Path) -> None:
    with KubeAPI() as kube:
        KubeflowWorkspaceController(kube, terminate_seconds=0.3).attach()
        kube.create(workspace_object(WORKSPACE, NAMESPACE))
        pod_running(kube, WORKSPACE_POD)
        wait_until(
            lambda: (
                kube.get(WORKSPACE_API, "workspaces", NAMESPACE, WORKSPACE).get("status", {}).get("state") == "Running"
            )
        )
        sidecar = WorkloadSidecar(kube, tmp_path / "sidecar", "workspace", WORKSPACE_POD).start()
        args = (tmp_path, tmp_path / "state", sidecar, "kubeflow-workspace")
        server = KubeflowServer(*args).start()
        second: KubeflowServer | None = None
        try:
            kernel_id, _ = open_session(server)
            run_cell(
                server, kernel_id, "x = 41"
            )  # checkpoints are the notebook test's; this one is about the workspace
            # The Jupyter activity probe reads /api/status: our polling does not move it.
            preflight = assert_polling_is_not_activity(server, rounds=2)
            assert "Kubeflow Workspace 'research' in namespace team-a (state Running" in " ".join(preflight["notes"])

            seq = max(e["seq"] for e in server.journal())
            status = suspend(server)
            assert status["state"] == "suspended", status
            workspace = kube.get(WORKSPACE_API, "workspaces", NAMESPACE, WORKSPACE)
            assert workspace["spec"]["paused"] is True
            assert workspace["status"]["state"] == "Paused"
            assert kube.get("v1", "pods", NAMESPACE, WORKSPACE_POD) is None
            # Terminating is seen if the pod still terminates once the kernels are stopped (timing): never else.
            marks = backend_marks(server, seq)
            assert marks in (
                ["workspace_stop_requested", "workspace_paused"],
                ["workspace_stop_requested", "workspace_terminating", "workspace_paused"],
            ), marks
            (paused,) = [e for e in server.journal() if e.get("mark") == "workspace_paused"]
            # pauseTime is epoch milliseconds (current Kubeflow); the journal has it in whole seconds (item 3).
            assert workspace["status"]["pauseTime"] > 10**11
            assert paused["pause_time"] == workspace["status"]["pauseTime"] // 1000
            # At pauseTime (whole seconds), or at the mark before it if that came later: the timeline keeps order.
            before_paused = [e for e in server.journal() if e.get("mark") in marks[:-1]]
            assert paused["mark_at"] == max(float(paused["pause_time"]), before_paused[-1]["mark_at"])
            assert (paused["workload_state"], paused["workload_state_message"]) == ("Paused", "Workspace is paused")
            assert status["backend"]["workload"]["state"] == "Paused"
            jsonschema.validate(status["backend"]["workload"], WORKLOAD_VIEW_SCHEMA)
            cycle = server.api("GET", "timeline")["cycles"][-1]
            assert [e["name"] for e in cycle["events"]] == marks
            assert called(kube) == role_rules("workspace")

            server.stop(signal.SIGKILL)
            kube.patch(WORKSPACE_API, "workspaces", NAMESPACE, WORKSPACE, {"spec": {"paused": False}})
            pod_running(kube, WORKSPACE_POD)
            second, ready = cold_start(args)
            assert ready["restore"] == "cold"
            assert ready["backend"]["workload"]["state"] == "Running"
            (cold,) = [e for e in second.journal() if e["kind"] == "kubeflow_cold_start"]
            assert (cold["workload_state"], cold["kernels_restarted"]) == ("Running", 1)
        finally:
            for process in (second, server):
                if process is not None:
                    process.stop()
            sidecar.stop()


# -- in process: refusals, the cold-start reading, the sidecar's flags --------------------------------------------


def test_a_suspend_the_sidecar_cannot_serve_aborts_before_anything_is_released(tmp_path: Path) -> None:
    recorded: list[str] = []
    ctx = ReleaseContext("op-1", None, [], "test", lambda kind, **_: recorded.append(kind))  # type: ignore[arg-type]
    with KubeAPI() as kube:
        make_pod(kube, POD, NAMESPACE, labels={"app": "notebook"})  # no notebook-name label: not a Notebook's pod
        sidecar = WorkloadSidecar(kube, tmp_path / "sidecar", "notebook", POD).start()
        try:
            backend = KubeflowNotebookBackend(sidecar_socket=sidecar.socket_path, sidecar_secret=sidecar.secret_path)
            (blocker,) = asyncio.run(backend.preflight_blockers(None))
            assert "has no label notebook-name" in blocker
            with pytest.raises(FlushFailed) as failed:
                asyncio.run(backend.release(ctx))
            assert "could not be stopped" in failed.value.reason
            assert "run the sidecar with --workload matching the pod's owner" in failed.value.reason
            assert failed.value.reason.endswith("Nothing was released; the session keeps running.")
            assert writes(kube) == []
        finally:
            sidecar.stop()
    down = KubeflowWorkspaceBackend(sidecar_socket=str(tmp_path / "none.sock"), sidecar_secret=str(tmp_path / "none"))
    (note,) = asyncio.run(down.preflight_notes(None))
    assert note.startswith("A suspend would be refused now: the sidecar does not answer")
    with pytest.raises(FlushFailed, match="the sidecar does not answer"):
        asyncio.run(down.release(ctx))
    assert recorded == []


def test_the_cold_start_reading() -> None:
    backend = KubeflowNotebookBackend()
    backend.recall([])
    verdict_ = backend.interpret_cold_start(State.SNAPSHOTTING, {"time": "T0"})
    assert verdict_.state == State.SUSPENDED
    assert "the previous server stopped before it asked the workload to stop" in verdict_.message
    backend.recall([{"kind": "kubeflow_stop_requested", "mark_at": 1_700_000_000.0, "workload": {"name": "nb"}}])
    for last in (State.SNAPSHOTTING, State.SUSPENDED, State.RESTORING, State.WAITING_FOR_CAPACITY):
        verdict_ = backend.interpret_cold_start(last, {"time": "T1"})
        assert verdict_.state == State.SUSPENDED
        assert "This is a new pod: notebook nb was asked to stop at 2023-11-14T22:13:20" in verdict_.message
        assert "keeps files and application checkpoints, not kernel memory" in verdict_.message
    assert backend.interpret_cold_start(State.FLUSHING, {"time": "T2"}).state == State.RUNNING
    failed = backend.interpret_cold_start(State.FAILED, {"time": "T3"})
    assert (failed.state, bool(failed.next_step)) == (State.FAILED, True)
    assert failed.message == "The previous server recorded a failure at T3."
    assert backend.interpret_cold_start(State.READY, None) == ColdStartVerdict(State.RUNNING, "")
    assert load_backend_class("kubeflow-notebook") is KubeflowNotebookBackend
    assert load_backend_class("kubeflow-workspace") is KubeflowWorkspaceBackend
    caps = KubeflowWorkspaceBackend.capabilities
    assert (caps.keeps_files, caps.keeps_application_checkpoints, caps.keeps_live_memory) == (True, True, False)
    assert (caps.resume_from_server, caps.server_survives_suspend) == (False, False)


def test_the_sidecars_workload_flag() -> None:
    config = parse_config(["--workload", "workspace", "--pod-name", WORKSPACE_POD, "--pod-namespace", NAMESPACE], {})
    assert (config.workload, config.policy_mode) == ("workspace", "off")
    assert (
        parse_config([], {"WORKLOAD": "notebook", "POD_NAME": POD, "POD_NAMESPACE": NAMESPACE}).workload == "notebook"
    )
    with pytest.raises(ConfigError, match="--workload 'jupyterhub'"):
        parse_config([], {"WORKLOAD": "jupyterhub", "POD_NAME": POD, "POD_NAMESPACE": NAMESPACE})
    # Without --workload the snapshot flags are still required.
    with pytest.raises(ConfigError, match="needs --policy-selector"):
        parse_config(["--pod-name", POD, "--pod-namespace", NAMESPACE], {})


def test_a_stop_the_api_fails_is_read_again_and_aborts_when_nothing_stopped(tmp_path: Path) -> None:
    recorded: list[str] = []
    ctx = ReleaseContext("op-1", None, [], "test", lambda kind, **_: recorded.append(kind))  # type: ignore[arg-type]
    with KubeAPI() as kube:
        KubeflowNotebookController(kube).attach()
        kube.create(notebook_object(NOTEBOOK, NAMESPACE))
        pod_running(kube, POD)
        sidecar = WorkloadSidecar(kube, tmp_path / "sidecar", "notebook", POD).start()
        try:
            backend = KubeflowNotebookBackend(sidecar_socket=sidecar.socket_path, sidecar_secret=sidecar.secret_path)
            kube.fail_next("patch", "notebooks", 503)
            with pytest.raises(FlushFailed, match="Nothing was released") as failed:
                asyncio.run(backend.release(ctx))
            assert "503" in failed.value.reason
            # Read (the backend), read and patch (the stop), and after the failed patch read again before saying so.
            assert [c.verb for c in kube.calls if c.resource == "notebooks"] == ["get", "get", "patch", "get"]
            notebook = kube.get(NOTEBOOK_API, "notebooks", NAMESPACE, NOTEBOOK)
            assert STOPPED_ANNOTATION not in (notebook["metadata"].get("annotations") or {})
            assert kube.get("v1", "pods", NAMESPACE, POD) is not None
            assert recorded == []
        finally:
            sidecar.stop()


# -- issue 18 item 3: Workspace times in milliseconds (current Kubeflow) or seconds (the alpha branch) -------------


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        (1_780_000_000_123, 1_780_000_000),  # notebooks-v2: metav1.Now().UnixMilli()
        (1_780_000_000, 1_780_000_000),  # v2.0-alpha-branch: Unix()
        (1_780_000_000.9, 1_780_000_000),
        (0, None),  # never paused
        (-5, None),
        (True, None),
        ("1780000000000", None),
        (float("nan"), None),
        (float("inf"), None),
        (10**20, None),  # nanoseconds or garbage: no date in the year 5138+
        (None, None),
        ({"seconds": 1}, None),
    ],
)
def test_item3_workspace_pause_time_is_read_by_magnitude_and_odd_values_never_crash(raw: Any, seconds: Any) -> None:
    from jupyter_suspend.common.times import epoch_by_magnitude
    from jupyter_suspend.sidecar.workload import workload_view

    workspace = {"metadata": {"name": "w", "namespace": "n"}, "spec": {"paused": True}, "status": {"pauseTime": raw}}
    view = workload_view(proto.WORKLOAD_WORKSPACE, workspace, "ws-w-0")
    jsonschema.validate(view, WORKLOAD_VIEW_SCHEMA)
    assert view["pause_time"] == seconds
    assert view["stopped_at"] == (None if seconds is None else "2026-05-28T20:26:40Z")
    # activity.lastActivity / lastUpdate share the unit and the reader.
    got = epoch_by_magnitude(raw)
    assert (int(got) if got is not None else None) == seconds


@pytest.mark.parametrize("status", ["Paused", 7, ["pauseTime"], None])
def test_item3_a_workspace_with_a_malformed_status_reads_as_no_status(status: Any) -> None:
    from jupyter_suspend.sidecar.workload import workload_view

    workspace = {"metadata": {"name": "w", "namespace": "n"}, "spec": [], "status": status}
    view = workload_view(proto.WORKLOAD_WORKSPACE, workspace, "ws-w-0")
    jsonschema.validate(view, WORKLOAD_VIEW_SCHEMA)
    assert (view["pause_time"], view["state"], view["stopped"]) == (None, None, False)


@pytest.mark.parametrize("seconds_clock", [False, True], ids=["milliseconds", "seconds"])
def test_item3_the_sidecar_reads_a_paused_workspaces_pause_time_in_either_unit(
    tmp_path: Path, seconds_clock: bool
) -> None:
    with KubeAPI() as kube:
        KubeflowWorkspaceController(kube, terminate_seconds=0.0, seconds_clock=seconds_clock).attach()
        kube.create(workspace_object(WORKSPACE, NAMESPACE))
        pod_running(kube, WORKSPACE_POD)
        sidecar = WorkloadSidecar(kube, tmp_path / "sidecar", "workspace", WORKSPACE_POD).start()
        try:
            before = time.time()
            run(sidecar.client.stop_workload({"name": WORKSPACE}))
            wait_until(
                lambda: kube.get(WORKSPACE_API, "workspaces", NAMESPACE, WORKSPACE)["status"]["state"] == "Paused"
            )
            raw = kube.get(WORKSPACE_API, "workspaces", NAMESPACE, WORKSPACE)["status"]["pauseTime"]
            assert (raw < 10**11) is seconds_clock
            view = run(sidecar.client.workload())  # the pod is gone; the sidecar process still answers
            jsonschema.validate(view, WORKLOAD_VIEW_SCHEMA)
            assert before - 1 <= view["pause_time"] <= time.time() + 1
            assert abs(epoch(view["stopped_at"]) - view["pause_time"]) < 1
        finally:
            sidecar.stop()
