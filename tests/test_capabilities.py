"""Preflight, status and the live-return path follow the backend's declared capabilities."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import SuspendClient, checkpoint_handler_code


@pytest.fixture
def suspend_config() -> dict[str, Any]:
    return {"backend": "tests.backends:SnapshotLikeBackend", "flush_kernel_timeout": 1.0}


async def test_preflight_is_derived_from_capabilities(suspend_api: SuspendClient) -> None:
    session = await suspend_api.open_notebook()
    await suspend_api.run(session["kernel"]["id"], checkpoint_handler_code())
    status = await suspend_api.status()
    assert status["backend"]["name"] == "snapshot-like"
    assert status["backend"]["capabilities"]["keeps_live_memory"] is True
    assert status["can_resume"] is False

    preflight = await suspend_api.json("POST", "suspend", {"dry_run": True})
    assert preflight["keeps"]["live_memory"] is True
    assert preflight["keeps"]["gpu_memory"] is True
    assert preflight["releases"]["node"] is True
    kernel = preflight["kernels"][0]
    assert "all variables in kernel memory" in kernel["keeps"]
    assert kernel["loses"] == []


async def test_platform_resumed_backend_refuses_server_resume(suspend_api: SuspendClient) -> None:
    conflict = await suspend_api.json("POST", "resume", {}, expect=409)
    assert "resumed by the platform" in conflict["message"]


@pytest.mark.slow
async def test_busy_kernel_does_not_block_a_live_snapshot(suspend_api: SuspendClient) -> None:
    session = await suspend_api.open_notebook()
    kernel_id = session["kernel"]["id"]
    await suspend_api.run(kernel_id, checkpoint_handler_code())
    async with suspend_api.busy(kernel_id, 4):
        status = await suspend_api.suspend()
    # The snapshot keeps the running cell, so a skipped checkpoint loses nothing.
    assert status["operation"]["outcome"] == "succeeded", status["operation"]
    assert status["state"] == "ready"
    flushed = next(s for s in status["operation"]["steps"] if s["name"] == "flush.kernels")
    assert flushed["detail"]["kernels"][0]["status"] == "busy_skipped"


def test_a_files_only_sidecar_backend_is_never_described_as_a_snapshot() -> None:
    """Kubeflow-like: the sidecar stops the workload; nothing is frozen, no snapshot is taken."""
    from jupyter_suspend.server import wording
    from jupyter_suspend.server.backends.gke import GKEBackend
    from jupyter_suspend.server.backends.kubeflow import KubeflowBackend

    files_only = KubeflowBackend.capabilities
    text = wording.backend_text(files_only)
    notes = wording.preflight_notes(files_only)
    assert "snapshot" not in text["while_suspended"]
    assert "frozen" not in text["while_suspended"]
    assert "stop the workload" in text["while_suspended"]
    assert not any("snapshot" in note for note in notes)
    assert any("workload is stopped by the sidecar" in note for note in notes)

    live = GKEBackend.capabilities
    assert "takes the snapshot" in wording.backend_text(live)["while_suspended"]
    assert any("snapshot is taken by the sidecar" in note for note in wording.preflight_notes(live))
