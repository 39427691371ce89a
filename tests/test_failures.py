"""Failure before resume: a clear state, a next step, no concurrent restores,
and a way back (retry, or acknowledge and carry on from files)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import SuspendClient


def install_kernelspec(data_dir: Path, name: str) -> Path:
    spec_dir = data_dir / "kernels" / name
    spec_dir.mkdir(parents=True, exist_ok=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": f"Python ({name})",
                "language": "python",
            }
        )
    )
    return spec_dir


async def open_with_kernel(api: SuspendClient, name: str, kernel_name: str) -> dict[str, Any]:
    (api.root_dir / name).write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    response = await api.fetch(
        "api",
        "sessions",
        method="POST",
        body=json.dumps({"path": name, "type": "notebook", "kernel": {"name": kernel_name}}),
    )
    session = json.loads(response.body)
    await api.kernel_ready(session["kernel"]["id"])
    return session


@pytest.mark.slow
async def test_restore_failure_then_retry(suspend_api: SuspendClient, jp_data_dir: Path) -> None:
    spec = install_kernelspec(jp_data_dir, "gpu-env")
    session = await open_with_kernel(suspend_api, "train.ipynb", "gpu-env")
    assert (await suspend_api.suspend())["state"] == "suspended"

    # The environment the kernel needs disappeared while suspended (an image update, say).
    shutil.rmtree(spec)
    status = await suspend_api.resume()
    assert status["state"] == "failed"
    assert status["operation"]["outcome"] == "failed"
    assert "no kernel could be restarted" in status["failure"]["reason"]
    assert "gpu-env" in status["failure"]["reason"]
    assert "%checkpoint restore" in status["failure"]["next_step"]
    assert status["can_resume"] is True
    assert status["can_suspend"] is False
    # A suspend now would forget the recorded environment.
    conflict = await suspend_api.json("POST", "suspend", {}, expect=409)
    assert "cannot suspend while failed" in conflict["message"]

    install_kernelspec(jp_data_dir, "gpu-env")
    status = await suspend_api.resume()
    assert status["state"] == "ready"
    sessions = await suspend_api.sessions()
    assert [(s["id"], s["kernel"]["name"]) for s in sessions] == [(session["id"], "gpu-env")]
    timeline = await suspend_api.json("GET", "timeline")
    assert any("resume failed" in note for note in timeline["cycles"][-1]["notes"])


@pytest.mark.slow
async def test_acknowledge_a_failure_and_carry_on(suspend_api: SuspendClient, jp_data_dir: Path) -> None:
    spec = install_kernelspec(jp_data_dir, "old-env")
    await open_with_kernel(suspend_api, "old.ipynb", "old-env")
    await suspend_api.suspend()
    shutil.rmtree(spec)
    assert (await suspend_api.resume())["state"] == "failed"

    status = await suspend_api.json("POST", "acknowledge", {})
    assert status["state"] == "running"
    assert status["failure"] is None
    assert status["can_resume"] is False
    assert status["can_suspend"] is True
    # The user recovers from files: the notebook is still on disk.
    assert (suspend_api.root_dir / "old.ipynb").exists()
    conflict = await suspend_api.json("POST", "resume", {}, expect=409)
    assert "cannot resume while running" in conflict["message"]


@pytest.fixture
def suspend_config() -> dict[str, Any]:
    return {"flush_kernel_timeout": 5.0, "capacity_max_wait": 0.5}


@pytest.mark.slow
async def test_capacity_never_arrives(suspend_api: SuspendClient) -> None:
    await suspend_api.open_notebook()
    await suspend_api.suspend()
    backend = suspend_api.serverapp.web_app.settings["jupyter_suspend_lifecycle"].backend
    backend.capacity_headroom_bytes = 2**60
    backend.capacity_retry_seconds = 0.1
    status = await suspend_api.resume()
    assert status["state"] == "failed"
    assert "no capacity after 0.5s" in status["failure"]["reason"]
    assert "another machine" in status["failure"]["next_step"]
    assert await suspend_api.sessions() == []
    # When capacity is back, the same recorded sessions can be resumed.
    backend.capacity_headroom_bytes = 0
    assert (await suspend_api.resume())["state"] == "ready"
    assert len(await suspend_api.sessions()) == 1
