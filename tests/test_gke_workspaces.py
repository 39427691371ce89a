"""The ``gke-workspaces`` backend (issue 18 item 5): a real ``jupyter server`` process and the real sidecar
(``--workload workspace``) against the loopback Kubernetes API.

GKE Workspaces' snapshot add-on is played by a controller of the test's own, from the public code
(gke-labs/workspaces providers/gke/internal/snapshot/webhook.go ``mutateWorkspace``): a pause request (``spec.paused``
false -> true) on a Workspace whose pod is running is held (``paused`` back to false) and the Workspace annotated
``podsnapshot.gke.kubeflow.org/checkpoint-state: Checkpointing``; its Pod webhook gave the pod the readiness gate
``podsnapshot.gke.kubeflow.org/active`` and ``runtimeClassName: gvisor``. (The real add-on does the first part in an
admission webhook, synchronously; here it happens just after the write, which the backend reads the same way.) A
restore is played as the GKE tests do: the downward-API uid file names a new pod. Nothing here can show that GKE
really restores the memory: that is what the live-state canary checks at every return, and what docs/platforms.md
marks unverified without the platform.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from jupyter_suspend.server.backends.gke_workspaces import WHEN_RESTORED, GKEWorkspacesBackend, addon_evidence
from jupyter_suspend.sidecar.workload import ADDON_CHECKPOINT_STATE, ADDON_READINESS_GATE, workload_view
from tests.gke_helpers import OwnTokenSidecar
from tests.kubeapi import KubeAPI, wait_until
from tests.kubeapi.kubeflow import WORKSPACE_API, workspace_object
from tests.servers import ServerProcess
from tests.sidecar_helpers import NAMESPACE
from tests.test_gke_backend import SETUP, run_cell, verdict

pytestmark = pytest.mark.slow

WORKSPACE = "research"
POD = "ws-research-0"
WS_LABEL = "notebooks.kubeflow.org/workspace-name"


class AddOn:
    """GKE Workspaces' Workspace webhook, as far as a pause goes."""

    def __init__(self, kube: KubeAPI) -> None:
        self.kube = kube
        self.intercepted = 0

    def __call__(self, event_type: str, obj: dict[str, Any], kube: KubeAPI) -> None:
        if obj.get("kind") != "Workspace" or event_type == "DELETED":
            return
        annotations = obj["metadata"].get("annotations") or {}
        if obj["spec"].get("paused") and annotations.get(ADDON_CHECKPOINT_STATE) not in ("Checkpointing", "Ready"):
            self.intercepted += 1
            obj = json.loads(json.dumps(obj))
            obj["spec"]["paused"] = False
            obj["metadata"]["annotations"] = {**annotations, ADDON_CHECKPOINT_STATE: "Checkpointing"}
            kube.update(obj)


def make_workspace_pod(kube: KubeAPI, addon_pod: bool) -> str:
    spec: dict[str, Any] = {"nodeName": "gpu-node-1", "containers": [{"name": "main", "image": "jupyterlab"}]}
    if addon_pod:
        spec |= {"runtimeClassName": "gvisor", "readinessGates": [{"conditionType": ADDON_READINESS_GATE}]}
    pod = kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": POD, "namespace": NAMESPACE, "labels": {WS_LABEL: WORKSPACE}},
            "spec": spec,
        }
    )
    kube.patch_status("v1", "pods", NAMESPACE, POD, {"phase": "Running"})
    return str(pod["metadata"]["uid"])


class Sidecar(OwnTokenSidecar):
    def __init__(self, kube: KubeAPI, directory: Path, uid: str):
        super().__init__(kube, directory, ["--workload", "workspace"], pod_uid=uid)

    def env(self) -> dict[str, str]:
        return {**super().env(), "POD_NAME": POD}


class Server(ServerProcess):
    def __init__(self, base: Path, sidecar: Sidecar, uid_file: Path, uid: str, backend: str = "gke-workspaces"):
        config = (
            f"c.SuspendApp.backend = {backend!r}\n"
            f"c.KubeflowBackend.sidecar_socket = {sidecar.socket_path!r}\n"
            f"c.KubeflowBackend.sidecar_secret = {sidecar.secret_path!r}\n"
            f"c.GKEWorkspacesBackend.pod_uid_file = {str(uid_file)!r}\n"
            "c.GKEWorkspacesBackend.spec_environ_path = ''\n"
            "c.GKEWorkspacesBackend.return_check_interval = 0.1\n"
            "c.GKEWorkspacesBackend.addon_poll_interval = 0.2\n"
        )
        super().__init__(base, base / "state", config)
        self.uid = uid

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in super().env().items() if not k.startswith(("KUBERNETES_", "POD_"))}
        return {**env, "POD_UID": self.uid}

    def journal(self) -> list[dict[str, Any]]:
        path = self.state_dir / "journal.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def open_kernel(server: Any) -> str:
    name = "model.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), server.root_dir / name)
    code, session = server.request(
        "POST", "api/sessions", {"path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}}
    )
    assert code == 201, session
    kernel_id = str(session["kernel"]["id"])
    run_cell(server, kernel_id, SETUP)
    return kernel_id


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[KubeAPI, AddOn, Server, Path, str]]:
    addon_pod, backend = getattr(request, "param", (True, "gke-workspaces"))
    with KubeAPI() as kube:
        addon = AddOn(kube)
        kube.add_controller(addon)
        kube.create(workspace_object(WORKSPACE, NAMESPACE))
        uid = make_workspace_pod(kube, addon_pod)
        uid_file = tmp_path / "podinfo" / "uid"
        uid_file.parent.mkdir()
        uid_file.write_text(uid)
        sidecar = Sidecar(kube, tmp_path / "sidecar", uid)
        sidecar.start()
        server = Server(tmp_path, sidecar, uid_file, uid, backend)
        server.start()
        try:
            yield kube, addon, server, uid_file, open_kernel(server)
        finally:
            server.stop()
            sidecar.stop()


def test_item5_a_pause_on_gke_workspaces_returns_live_judged_by_the_canary(world: Any) -> None:
    kube, addon, server, uid_file, kernel_id = world
    preflight = server.api("POST", "suspend", {"dry_run": True})
    assert preflight["would_abort"] == [], preflight
    notes = " ".join(preflight["notes"])
    assert "snapshot add-on is active for this pod" in notes
    assert f"kept {WHEN_RESTORED}" in notes
    status = server.api("GET", "status")
    assert status["backend"]["mode"]["snapshot_addon"] == "active"
    assert f"variables in kernel memory ({WHEN_RESTORED})" in status["backend"]["text"]["keeps"]

    server.api("POST", "suspend", {"reason": "lunch"}, expect=202)
    # The add-on held the pause and is snapshotting; the kernels were not stopped (they are in the snapshot).
    wait_until(lambda: any(e.get("mark") == "addon_checkpointing" for e in server.journal()), timeout=30)
    assert addon.intercepted == 1
    workspace = kube.get(WORKSPACE_API, "workspaces", NAMESPACE, WORKSPACE)
    assert workspace["spec"]["paused"] is False
    assert server.api("GET", "status")["state"] == "snapshotting"

    # GKE restores the pod from the snapshot: the downward-API file names the new pod.
    uid_file.write_text(str(uuid.uuid4()))
    status = server.wait(lambda s: s["state"] == "ready", timeout=30)
    assert status["restore"] == "live", status
    assert status["last_restore"]["verification"][0]["verdict"] == "LIVE"
    assert verdict(server, kernel_id) == "LIVE"
    out, _ = run_cell(server, kernel_id, "print(only_in_memory + 1)")
    assert out.strip() == "42"
    marks = [e["mark"] for e in server.journal() if e.get("mark")]
    assert marks.index("workspace_pause_requested") < marks.index("addon_checkpointing") < marks.index("pod_returned")


@pytest.mark.parametrize("world", [(False, "gke-workspaces")], indirect=True)
def test_item5_without_the_addon_the_dry_run_says_so_and_a_suspend_is_refused(world: Any) -> None:
    kube, addon, server, _, kernel_id = world
    preflight = server.api("POST", "suspend", {"dry_run": True})
    assert len(preflight["would_abort"]) == 1, preflight
    assert "snapshot add-on is not active" in preflight["would_abort"][0]
    assert "kubeflow-workspace backend" in " ".join(preflight["notes"])
    assert server.api("GET", "status")["backend"]["mode"]["snapshot_addon"] == "not detected"
    server.api("POST", "suspend", {"reason": "lunch"}, expect=202)
    status = server.wait(lambda s: s["operation"] and not s["operation"]["in_progress"], timeout=30)
    assert status["state"] == "running", status
    assert "nothing was released" in status["message"].lower()
    assert kube.get(WORKSPACE_API, "workspaces", NAMESPACE, WORKSPACE)["spec"]["paused"] is False
    assert addon.intercepted == 0
    out, _ = run_cell(server, kernel_id, "print(only_in_memory)")
    assert out.strip() == "41"


def test_item5_addon_evidence_is_read_from_the_workspace_and_the_pod() -> None:
    workspace = workspace_object(WORKSPACE, NAMESPACE)
    plain = workload_view("workspace", workspace, POD, {"spec": {}})
    assert addon_evidence(plain) == []
    gated = workload_view(
        "workspace", workspace, POD, {"spec": {"readinessGates": [{"conditionType": ADDON_READINESS_GATE}]}}
    )
    assert addon_evidence(gated) == ["this pod has the add-on's readiness gate podsnapshot.gke.kubeflow.org/active"]
    marked = {**workspace, "metadata": {**workspace["metadata"], "annotations": {ADDON_CHECKPOINT_STATE: "Ready"}}}
    assert "checkpoint-state annotation is Ready" in addon_evidence(workload_view("workspace", marked, POD, None))[0]
    assert addon_evidence(None) == []
    assert GKEWorkspacesBackend.capabilities.keeps_snapshots is False  # the add-on owns (and deletes) them


@pytest.mark.parametrize("backend_name", ["kubeflow-workspace", "gke-workspaces"])
def test_item1_a_pod_without_its_sidecar_says_so_in_status_and_dry_run_and_refuses(
    tmp_path: Path, backend_name: str
) -> None:
    """No sidecar (the injector was down, failurePolicy Ignore): never a silent cold suspend."""
    import asyncio

    from jupyter_suspend.server.app import load_backend_class
    from jupyter_suspend.server.backends.base import ReleaseContext
    from jupyter_suspend.server.states import FlushFailed

    backend = load_backend_class(backend_name)(
        sidecar_socket=str(tmp_path / "none.sock"), sidecar_secret=str(tmp_path / "none")
    )
    assert backend.describe()["sidecar_problem"] is None  # not checked yet: nothing claimed
    (blocker,) = asyncio.run(backend.preflight_blockers(None))  # type: ignore[arg-type]
    assert "this pod has no running sidecar" in blocker
    assert "jupyter-suspend-injector" in blocker
    assert "this pod has no running sidecar" in backend.describe()["sidecar_problem"]
    recorded: list[str] = []
    ctx = ReleaseContext("op-1", None, [], "test", lambda kind, **_: recorded.append(kind))  # type: ignore[arg-type]
    with pytest.raises(FlushFailed, match="no running sidecar"):
        asyncio.run(backend.release(ctx))
    assert recorded == []


@pytest.mark.parametrize(
    ("version", "said"),
    [
        ("535.183.01", "GPU memory will not be kept: the NVIDIA driver is 535.183.01"),
        ("570.86.15", "NVIDIA driver 570.86.15: GPU memory can be kept"),
        (None, None),  # no nvidia-ml-py or no driver: no claim either way
        ("garbage", None),
    ],
)
def test_item8_the_gpu_driver_is_read_at_preflight(version: str | None, said: str | None) -> None:
    from jupyter_suspend.server.backends.gke import GKEBackend
    from jupyter_suspend.server.backends.gpu_driver import gpu_driver_note

    note = gpu_driver_note(lambda: version)
    if said is None:
        assert note is None
    else:
        assert note is not None
        assert note.startswith(said)
    assert GKEBackend.driver_version_reader is not None


class Driver535Backend(GKEWorkspacesBackend):
    """The gke-workspaces backend on a node with the default 535 driver (NVML's answer is the seam)."""

    driver_version_reader = staticmethod(lambda: "535.183.01")


@pytest.mark.parametrize("world", [(True, "tests.test_gke_workspaces:Driver535Backend")], indirect=True)
def test_item8_a_driver_below_570_is_reported_in_the_dry_run(world: Any) -> None:
    _, _, server, _, _ = world
    preflight = server.api("POST", "suspend", {"dry_run": True})
    notes = preflight["notes"]
    assert any(n.startswith("GPU memory will not be kept: the NVIDIA driver is 535.183.01") for n in notes), notes
