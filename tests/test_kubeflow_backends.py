"""The Kubeflow backends in process: the cold-start reading, the sidecar's ``--workload`` flag, a backend with no
sidecar, Workspace times in either unit. Everything that talks to Kubernetes is on the real control plane:
tests/test_cluster_kubeflow.py (an injected 503 on the Notebook's PATCH through tests/cluster/faults.py included).
"""

from __future__ import annotations

import asyncio
import json
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from jupyter_suspend.common import sidecar_protocol as proto
from jupyter_suspend.server.app import load_backend_class
from jupyter_suspend.server.backends.base import ColdStartVerdict, ReleaseContext
from jupyter_suspend.server.backends.kubeflow import KubeflowNotebookBackend, KubeflowWorkspaceBackend
from jupyter_suspend.server.states import FlushFailed, State
from jupyter_suspend.sidecar.config import ConfigError, parse_config

NAMESPACE = "team-a"
POD = "notebook-0"
WORKSPACE_POD = "ws-research-0"

WORKLOAD_VIEW_SCHEMA = json.loads(files("jupyter_suspend.common.schemas").joinpath("sidecar-workload.json").read_text())


def test_a_backend_without_a_sidecar_refuses_before_anything_is_released(tmp_path: Path) -> None:
    recorded: list[str] = []
    ctx = ReleaseContext("op-1", None, [], "test", lambda kind, **_: recorded.append(kind))  # type: ignore[arg-type]
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
