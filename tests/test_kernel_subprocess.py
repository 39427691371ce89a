"""End to end with a real ``jupyter server`` process: the kernel finds its
server through ``JPY_PARENT_PID`` and the runtime file ``jpserver-<pid>.json``
(no environment override), suspends from a magic, and after the resume the
checkpointed names are back and ``%verify_live_state`` says COLD."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient

pytestmark = pytest.mark.slow

TOKEN = "subprocess-test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, tmp: Path):
        self.runtime = tmp / "runtime"
        self.root = tmp / "root"
        self.root.mkdir()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_SUSPEND_")}
        env.update(
            JUPYTER_RUNTIME_DIR=str(self.runtime),
            JUPYTER_CONFIG_DIR=str(tmp / "config"),
            JUPYTER_DATA_DIR=str(tmp / "data"),
            JUPYTER_PLATFORM_DIRS="1",
        )
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter_server",
                "--no-browser",
                "--allow-root",
                f"--port={self.port}",
                "--ip=127.0.0.1",
                f"--ServerApp.root_dir={self.root}",
                f"--IdentityProvider.token={TOKEN}",
                "--ServerApp.jpserver_extensions={'jupyter_suspend': True}",
                f"--SuspendApp.state_dir={tmp / 'state'}",
                "--SuspendApp.flush_kernel_timeout=20",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not (self.runtime / f"jpserver-{self.process.pid}.json").exists():
            assert self.process.poll() is None, "jupyter server exited"
            assert time.monotonic() < deadline, "jupyter server did not start"
            time.sleep(0.1)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Authorization": f"token {TOKEN}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def wait_state(self, *states: str, timeout: float = 90) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status = self.call("GET", "jupyter-suspend/api/status")
            if status["state"] in states and not (status["operation"] or {}).get("in_progress"):
                return dict(status)
            assert time.monotonic() < deadline, status
            time.sleep(0.2)

    def client(self, kernel_id: str) -> BlockingKernelClient:
        client = BlockingKernelClient(connection_file=str(self.runtime / f"kernel-{kernel_id}.json"))
        client.load_connection_file()
        client.start_channels()
        client.wait_for_ready(timeout=60)
        return client

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def run(client: BlockingKernelClient, code: str) -> tuple[str, list[dict[str, Any]]]:
    out: list[str] = []
    displays: list[dict[str, Any]] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append("\n".join(msg["content"]["traceback"]))
        elif msg["msg_type"] == "display_data":
            displays.append(msg["content"]["data"])

    reply = client.execute_interactive(code, timeout=60, output_hook=hook)
    assert reply["content"]["status"] == "ok", "".join(out)
    return "".join(out), displays


def test_real_server_discovery_suspend_resume_and_cold_verdict(tmp_path: Path) -> None:
    server = Server(tmp_path)
    try:
        (server.root / "exp.ipynb").write_text(
            json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
        )
        session = server.call(
            "POST", "api/sessions", {"path": "exp.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
        )
        kernel_id = session["kernel"]["id"]
        client = server.client(kernel_id)
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

        status = server.wait_state("suspended")
        assert status["operation"]["outcome"] == "succeeded", status
        server.call("POST", "jupyter-suspend/api/resume", {})
        status = server.wait_state("ready")
        assert status["restore"] == "cold"
        assert status["last_restore"]["checkpoints_restored"][kernel_id]["restored"] == ["steps"]

        client = server.client(kernel_id)
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
