"""The ``gke-workspaces`` backend (issue 18 item 5) in process: the add-on's evidence read from a Workspace and its
pod, a pod without its sidecar, the GPU driver note. The backend in a real ``jupyter server`` with the real sidecar,
on the real control plane with GKE Workspaces' add-on as a real admission webhook, is in
tests/test_cluster_kubeflow.py (``test_item5_*``, ``test_item8_a_driver_below_570_is_reported_in_the_dry_run``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_suspend.server.backends.gke_workspaces import GKEWorkspacesBackend, addon_evidence
from jupyter_suspend.sidecar.workload import ADDON_CHECKPOINT_STATE, ADDON_READINESS_GATE, workload_view
from tests.cluster.kubeflow import workspace_object

WORKSPACE = "research"
POD = "ws-research-x7k2p-0"
NAMESPACE = "team-a"


def test_item5_addon_evidence_is_read_from_the_workspace_and_the_pod() -> None:
    workspace = workspace_object(WORKSPACE, NAMESPACE, "jupyterlab")
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
