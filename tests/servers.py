"""Real ``jupyter server`` processes, for tests that need a server to stop and
start again (the journal read back by a new process) the way it does in a pod."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
from jupyter_client import BlockingKernelClient

from jupyter_suspend.common.api import API_PREFIX
from jupyter_suspend.server.openapi import check_answer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """A jupyter server subprocess with the extension, token auth and its own dirs."""

    def __init__(self, base: Path, state_dir: Path, extra_config: str = ""):
        self.base = base
        self.state_dir = state_dir
        self.root_dir = base / "root"
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.extra_config = extra_config
        self.process: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self.log_path = base / f"server-{self.port}.log"

    def env(self) -> dict[str, str]:
        # Kernels must find this server on their own (JPY_PARENT_PID and its
        # runtime file), not through overrides a test process may have set.
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_SUSPEND_")}
        env.update(
            {
                "JUPYTER_CONFIG_DIR": str(self.base / "config"),
                "JUPYTER_DATA_DIR": str(self.base / "data"),
                "JUPYTER_RUNTIME_DIR": str(self.base / "runtime"),
                "JUPYTER_PLATFORM_DIRS": "1",
                "IPYTHONDIR": str(self.base / "ipython"),
                # so that test-only backends (tests.backends) can be configured
                "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent), env.get("PYTHONPATH", "")]),
            }
        )
        return env

    def start(self) -> ServerProcess:
        self.root_dir.mkdir(parents=True, exist_ok=True)
        config = self.base / "test_server_config.py"
        config.write_text(
            "c.ServerApp.jpserver_extensions = {'jupyter_suspend': True}\n"
            "c.ServerApp.allow_unauthenticated_access = False\n"
            f"c.IdentityProvider.token = {self.token!r}\n"
            f"c.SuspendApp.state_dir = {str(self.state_dir)!r}\n"
            "c.SuspendApp.flush_kernel_timeout = 20.0\n" + self.extra_config
        )
        log = self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter_server",
                f"--config={config}",
                f"--port={self.port}",
                "--ip=127.0.0.1",
                "--no-browser",
                "--allow-root",
                f"--ServerApp.root_dir={self.root_dir}",
            ],
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text()[-3000:]}")
            try:
                self.request("GET", "api/status")
                return self
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        raise RuntimeError(f"server did not start: {self.log_path.read_text()[-3000:]}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
        """SIGTERM shuts the server down cleanly (kernels included); SIGKILL
        models a lost pod, and the kernels it orphans are killed here."""
        if self.process is None or self.process.poll() is not None:
            self._close_log()
            return
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.Error:
            children = []
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def kernel_client(self, kernel_id: str, timeout: float = 60.0) -> BlockingKernelClient:
        """A client of one of this server's kernels, through its connection file.

        On a loaded machine a kernel that is still starting can miss its first heartbeats, and
        ``wait_for_ready`` takes it for dead ("Kernel died before replying to kernel_info"): a new
        client tries again until ``timeout``.
        """
        deadline = time.monotonic() + timeout
        while True:
            client = BlockingKernelClient(connection_file=str(self.base / "runtime" / f"kernel-{kernel_id}.json"))
            client.load_connection_file()
            client.start_channels()
            try:
                client.wait_for_ready(timeout=max(1.0, deadline - time.monotonic()))
                return client
            except RuntimeError:
                client.stop_channels()
                if time.monotonic() >= deadline:
                    raise
                time.sleep(1.0)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                code, answer = response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            code, answer = exc.code, json.loads(exc.read() or b"null")
        if path.startswith(f"{API_PREFIX}/"):  # held to the API contract (see openapi.check_answer)
            check_answer(method, path[len(API_PREFIX) + 1 :], code, answer)
        return code, answer

    def api(self, method: str, endpoint: str, body: Any = None, expect: int = 200) -> Any:
        code, data = self.request(method, f"jupyter-suspend/api/{endpoint}", body)
        assert code == expect, (code, data)
        return data

    def wait(self, predicate: Any, timeout: float = 90) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status = self.api("GET", "status")
            if predicate(status):
                return status
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
