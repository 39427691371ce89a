"""Fixtures: a real jupyter_server (pytest-jupyter) with the extension loaded,
authentication required, real ipykernel kernels started through the REST API."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse

from jupyter_suspend.server.jupyter_environment import own_client
from jupyter_suspend.server.openapi import check_answer
from tests.cluster.calls import ConnectionCounter

pytest_plugins = ["pytest_jupyter.jupyter_server", "tests.cluster.fixtures"]

API = "jupyter-suspend/api"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "suspend-state"


@pytest.fixture
def suspend_config() -> dict[str, Any]:
    """Per-test overrides of SuspendApp traits."""
    return {"flush_kernel_timeout": 5.0}


@pytest.fixture
def jp_server_config(state_dir: Path, suspend_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_suspend": True},
            "allow_unauthenticated_access": False,
        },
        "SuspendApp": {"state_dir": str(state_dir), **suspend_config},
    }


class Outputs:
    """What a cell printed and displayed, collected from its IOPub messages."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.displays: list[dict[str, Any]] = []
        self.results: list[dict[str, Any]] = []

    def hook(self, msg: dict[str, Any]) -> None:
        kind = msg["msg_type"]
        if kind == "stream":
            self.text.append(msg["content"]["text"])
        elif kind == "error":
            self.text.append("\n".join(msg["content"]["traceback"]))
        elif kind == "display_data":
            self.displays.append(msg["content"]["data"])
        elif kind == "execute_result":
            self.results.append(msg["content"]["data"])

    @property
    def stdout(self) -> str:
        return "".join(self.text)


class SuspendClient:
    """The REST API as the frontend and the magics use it."""

    def __init__(self, fetch: Any, serverapp: Any, root_dir: Path):
        self.fetch = fetch
        self.serverapp = serverapp
        self.root_dir = root_dir

    async def call(self, method: str, endpoint: str, body: Any = None, raw: bytes | None = None) -> HTTPResponse:
        kwargs: dict[str, Any] = {"method": method}
        if method == "POST":
            kwargs["body"] = raw if raw is not None else json.dumps(body if body is not None else {})
        try:
            response = await self.fetch(API, endpoint, **kwargs)
        except HTTPClientError as exc:
            if exc.response is None:  # a timeout, not an HTTP answer
                raise
            response = exc.response
        # Every answer is held to the API contract: the schema the OpenAPI
        # document gives this path, method and status.
        check_answer(method, endpoint, response.code, response.body)
        return response

    async def json(self, method: str, endpoint: str, body: Any = None, expect: int = 200) -> dict[str, Any]:
        response = await self.call(method, endpoint, body)
        text = response.body.decode() if response.body else ""
        assert response.code == expect, f"{method} {endpoint}: {response.code} {text}"
        return json.loads(text)

    async def status(self) -> dict[str, Any]:
        return await self.json("GET", "status")

    async def wait_done(self, timeout: float = 60.0) -> dict[str, Any]:
        """Wait until no operation is in progress; return the final status."""
        deadline = time.monotonic() + timeout
        while True:
            status = await self.status()
            operation = status["operation"]
            if operation is None or not operation["in_progress"]:
                return status
            assert time.monotonic() < deadline, f"operation still running: {status}"
            await asyncio.sleep(0.1)

    async def wait_state(self, *states: str, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status = await self.status()
            if status["state"] in states:
                return status
            assert time.monotonic() < deadline, f"state {status['state']} never became {states}: {status}"
            await asyncio.sleep(0.1)

    async def suspend(self, **body: Any) -> dict[str, Any]:
        await self.json("POST", "suspend", body, expect=202)
        return await self.wait_done()

    async def resume(self, **body: Any) -> dict[str, Any]:
        await self.json("POST", "resume", body, expect=202)
        return await self.wait_done()

    # -- sessions and kernels, through jupyter_server's own REST API --------
    async def open_notebook(self, name: str = "experiment.ipynb", cells: list[str] | None = None) -> dict[str, Any]:
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(c) for c in (cells or ["x = 1"])]
        path = self.root_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(path))
        return await self.open_notebook_path(name)

    async def open_notebook_path(self, path: str) -> dict[str, Any]:
        """Open a session on a notebook that is already on disk."""
        response = await self.fetch(
            "api",
            "sessions",
            method="POST",
            body=json.dumps({"path": path, "name": path, "type": "notebook", "kernel": {"name": "python3"}}),
        )
        session = json.loads(response.body)
        await self.kernel_ready(session["kernel"]["id"])
        return dict(session)

    async def sessions(self) -> list[dict[str, Any]]:
        response = await self.fetch("api", "sessions")
        return list(json.loads(response.body))

    async def kernel_ready(self, kernel_id: str) -> None:
        km = self.serverapp.kernel_manager.get_kernel(kernel_id)
        await km.ready
        client = km.client()
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=60)
        finally:
            client.stop_channels()

    async def run(self, kernel_id: str, code: str, timeout: float = 60.0) -> dict[str, Any]:
        """Execute code in a kernel as a user would; return the execute_reply content
        plus collected stdout (and stderr, tracebacks) under ``stdout``, the
        display_data bundles under ``displays`` and execute_result under ``result``."""
        km = self.serverapp.kernel_manager.get_kernel(kernel_id)
        client = own_client(km)  # never shares a shell identity with another client
        client.start_channels()
        outputs = Outputs()
        try:
            reply = await client.execute_interactive(code, timeout=timeout, output_hook=outputs.hook)
        finally:
            client.stop_channels()
        content = dict(reply["content"])
        content["stdout"] = outputs.stdout
        content["displays"] = outputs.displays
        content["result"] = outputs.results
        return content

    @contextlib.asynccontextmanager
    async def busy(self, kernel_id: str, seconds: float) -> AsyncIterator[None]:
        """A cell that keeps the kernel busy for ``seconds``, as a user's long cell would."""
        km = self.serverapp.kernel_manager.get_kernel(kernel_id)
        # Earlier requests must have settled first: their late "idle" would
        # otherwise arrive after the server saw this cell go busy, or a
        # "busy" still pending would pass for this cell's own.
        await self.wait_until_idle(kernel_id)
        client = own_client(km)
        client.start_channels()
        try:
            client.execute(f"import time; time.sleep({seconds})")
            await self.wait_until_busy(kernel_id)
            yield
        finally:
            client.stop_channels()

    async def wait_until_idle(self, kernel_id: str, timeout: float = 10.0) -> None:
        """The server learns a kernel's state from its status messages, a
        moment after the cell's reply: wait until it has seen the kernel idle."""
        await self._wait_for_execution_state(kernel_id, "idle", timeout)

    async def wait_until_busy(self, kernel_id: str, timeout: float = 30.0) -> None:
        """Wait until the server has seen the kernel go busy (a cell is running)."""
        await self._wait_for_execution_state(kernel_id, "busy", timeout)

    async def _wait_for_execution_state(self, kernel_id: str, state: str, timeout: float) -> None:
        km = self.serverapp.kernel_manager.get_kernel(kernel_id)
        deadline = time.monotonic() + timeout
        nudge_at = time.monotonic() + 2.0
        while km.execution_state != state:
            assert time.monotonic() < deadline, f"kernel {kernel_id} still {km.execution_state}, not {state}"
            if state == "idle" and km.execution_state == "starting" and time.monotonic() >= nudge_at:
                # The server learns the state from IOPub only and can miss a new kernel's first status
                # messages (it subscribes late on a loaded machine): a kernel_info makes a new busy/idle.
                nudge_at = time.monotonic() + 2.0
                nudger = own_client(km)
                nudger.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
                nudger.kernel_info()
                await asyncio.sleep(0.2)
                nudger.stop_channels()
            await asyncio.sleep(0.02)

    def kernel_pid(self, kernel_id: str) -> int:
        km = self.serverapp.kernel_manager.get_kernel(kernel_id)
        return int(km.provisioner.pid)


@pytest.fixture
def kernel_server_env(
    monkeypatch: pytest.MonkeyPatch, jp_serverapp: Any, jp_http_port: int, jp_base_url: str, state_dir: Path
) -> Path:
    """Kernels started from now on find this (in-process) server through the
    environment override, and write checkpoints under its checkpoint root."""
    root = state_dir / "checkpoints"
    monkeypatch.setenv("JUPYTER_SUSPEND_SERVER_URL", f"http://127.0.0.1:{jp_http_port}{jp_base_url}")
    monkeypatch.setenv("JUPYTER_SUSPEND_TOKEN", jp_serverapp.identity_provider.token)
    monkeypatch.setenv("JUPYTER_SUSPEND_CHECKPOINT_DIR", str(root))
    return root


@pytest.fixture
def suspend_api(jp_fetch: Any, jp_serverapp: Any, jp_root_dir: Path) -> SuspendClient:
    return SuspendClient(jp_fetch, jp_serverapp, jp_root_dir)


#: Kernel code that registers protocol handlers the way the IPython extension
#: does, so that the server side can be tested on its own.
REGISTER_CHECKPOINT_HANDLER = """
from jupyter_suspend.kernel import protocol as _p
import time as _t
_calls = []
def _checkpoint(request):
    _calls.append(request)
    _t.sleep({delay})
    if {fail!r}:
        raise RuntimeError({fail!r})
    canary = {{"hash": "abc", "pid": __import__("os").getpid()}}
    return {{"checkpoints": [{{"name": "weights", "bytes": 8}}], "canary": canary}}
def _probe(request):
    return {{"registered": ["weights"], "uses_gpu": False}}
_p.register_handler("checkpoint", _checkpoint)
_p.register_handler("probe", _probe)
"""


def checkpoint_handler_code(delay: float = 0.0, fail: str = "") -> str:
    return REGISTER_CHECKPOINT_HANDLER.format(delay=delay, fail=fail)


@pytest.fixture
def nowhere(tmp_path: Path) -> Iterator[tuple[ConnectionCounter, str]]:
    """A kubeconfig whose server only counts connections: a command that makes none made no API call."""
    counter = ConnectionCounter()
    try:
        yield counter, counter.kubeconfig(tmp_path / "nowhere.kubeconfig")
    finally:
        counter.close()
