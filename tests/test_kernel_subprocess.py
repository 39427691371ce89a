"""End to end with a real ``jupyter server`` process: the kernel finds its
server through ``JPY_PARENT_PID`` and the runtime file ``jpserver-<pid>.json``
(no environment override), suspends from a magic, and after the resume the
checkpointed names are back and ``%verify_live_state`` says COLD."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient

from .conftest import Outputs
from .servers import ServerProcess

pytestmark = pytest.mark.slow


def run(client: BlockingKernelClient, code: str) -> tuple[str, list[dict[str, Any]]]:
    outputs = Outputs()
    reply = client.execute_interactive(code, timeout=60, output_hook=outputs.hook)
    assert reply["content"]["status"] == "ok", outputs.stdout
    return outputs.stdout, outputs.displays


def test_real_server_discovery_suspend_resume_and_cold_verdict(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, tmp_path / "state").start()
    try:
        (server.root_dir / "exp.ipynb").write_text(
            json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
        )
        code, session = server.request(
            "POST", "api/sessions", {"path": "exp.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
        )
        assert code == 201, session
        kernel_id = session["kernel"]["id"]
        client = server.kernel_client(kernel_id)
        try:
            out, _ = run(
                client,
                "%load_ext jupyter_suspend\nimport jupyter_suspend\nsteps = [1, 2, 3]\n"
                "jupyter_suspend.register('steps')\n%suspend --dry-run",
            )
            assert "exp.ipynb [this kernel, helper loaded]" in out, out
            assert "application checkpoints: steps" in out
            out, _ = run(client, "%suspend --reason 'real server'")
            assert "Suspend requested: operation" in out, out
        finally:
            client.stop_channels()

        def settled_in(state: str) -> Any:
            return lambda s: s["state"] == state and not (s["operation"] or {}).get("in_progress")

        status = server.wait(settled_in("suspended"))
        assert status["operation"]["outcome"] == "succeeded", status
        server.api("POST", "resume", {}, expect=202)
        status = server.wait(settled_in("ready"))
        assert status["restore"] == "cold"
        assert status["last_restore"]["checkpoints_restored"][kernel_id]["restored"] == ["steps"]

        client = server.kernel_client(kernel_id)
        try:
            out, _ = run(client, "print(steps)")
            assert out.strip() == "[1, 2, 3]"
            out, displays = run(client, "%verify_live_state steps")
            assert out == ""
            assert displays[0]["text/plain"].startswith("COLD: new kernel process")
            verdict = displays[0]["application/vnd.jupyter-suspend.verdict+json"]
            assert verdict["checkpoints_restored"] == ["steps"]
            assert verdict["details"]["names"]["steps"]["status"] == "match"
        finally:
            client.stop_channels()
    finally:
        server.stop()


def test_a_kernel_started_normally_writes_checkpoints_under_the_configured_state_dir(tmp_path: Path) -> None:
    """Issue 8, item 8: not only kernels restarted by a resume know the configured folder."""
    state_dir = tmp_path / "custom-state"
    server = ServerProcess(tmp_path, state_dir).start()
    try:
        (server.root_dir / "plain.ipynb").write_text(
            json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
        )
        code, session = server.request(
            "POST", "api/sessions", {"path": "plain.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
        )
        assert code == 201, session
        client = server.kernel_client(session["kernel"]["id"])
        try:
            out, _ = run(client, "%load_ext jupyter_suspend\nx = [1, 2]\n%checkpoint save x")
        finally:
            client.stop_channels()
        assert "saved 1 name(s)" in out, out
        folders = [p for p in (state_dir / "checkpoints").iterdir() if p.name.startswith("plain.ipynb-")]
        assert len(folders) == 1, out
        assert str(folders[0]) in out
        assert not (tmp_path / "data" / "jupyter_suspend" / "checkpoints").exists()
    finally:
        server.stop()
