"""The Jupyter side of the lifecycle: sessions, kernels, files, activity.

:class:`JupyterServerEnvironment` implements the core's
:class:`~jupyter_suspend.server.environment.Environment` protocol over
jupyter_server's managers, so that the lifecycle core and the backends never
touch tornado or the ServerApp directly.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import json
import os
import queue
import time
import uuid
from datetime import datetime
from typing import Any

import psutil
from jupyter_core.utils import ensure_async
from traitlets import TraitError

from ..common.kernel_protocol import PRELOAD_EXTENSION, PROTOCOL_VERSION, USER_EXPRESSION_KEY, build_expression
from ..common.times import epoch
from .environment import KernelProcess, KernelRecord, KernelReply, ReplyOutcome
from .states import new_operation_id

LOAD_HELPER_CODE = "get_ipython().run_line_magic('load_ext', 'jupyter_suspend')"


#: How long a stop waits for the browsers' websockets to its kernel to close
#: (tornado aborts a close handshake the client does not answer after 5 s).
WEBSOCKET_CLOSE_TIMEOUT = 10.0

#: How long a silent request of ours waits for the server to record the kernel idle again, so that it can
#: put the kernel's ``last_activity`` back (see ``_execute``).
ACTIVITY_SETTLE_SECONDS = 1.0
#: How much of that wait the request's caller waits for; the rest runs in the background. The server's
#: watcher usually records the idle within milliseconds, but on a kernel that has just started (a resume's
#: restore request) it may not record it at all, and the caller would wait the whole second for nothing.
ACTIVITY_SETTLE_FOREGROUND_SECONDS = 0.2


async def close_kernel_websockets(kernel_id: str, timeout: float = WEBSOCKET_CLOSE_TIMEOUT) -> int:
    """Close the browsers' websockets to a stopped kernel; returns how many.

    jupyter_server leaves them open when a kernel is shut down by someone else
    than the browser (usually it is the browser that asks), still bound to the
    stopped kernel's ZMQ ports: a kernel started again under the same id, as a
    resume does, would never see what the browser sends on them. Closed, the
    browser's kernel connection reconnects, to the new kernel once it runs.

    Waits until each connection is torn down: a teardown that lands after a
    resume started the kernel again under the same id acts on the new kernel
    (it takes one off its connection count, which the tests show, and its
    code would buffer the stopped kernel's channels for that session key).
    """
    try:
        from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection
    except ImportError:  # another kernel websocket implementation: nothing to close here
        return 0
    closing = []
    for connection in list(getattr(ZMQChannelsWebsocketConnection, "_open_sockets", ())):
        if connection.kernel_id == kernel_id:
            connection.websocket_handler.close()  # its on_close tears the ZMQ streams down
            closing.append(asyncio.wrap_future(connection._close_future))
    if closing:
        await asyncio.wait(closing, timeout=timeout)
    return len(closing)


def kernel_attribute(km: Any, name: str, default: Any = None) -> Any:
    """A kernel manager's attribute, or ``default`` while it has none: jupyter_client lists a starting
    kernel before jupyter_server sets ``last_activity`` and ``execution_state`` on it, and reading a
    traitlets ``Instance`` that has no value yet raises TraitError (not AttributeError).
    Checked in the source: jupyter_client ``MultiKernelManager._add_kernel_when_ready`` adds the kernel to
    ``_kernels`` once it started; jupyter_server ``AsyncMappingKernelManager._async_start_kernel`` sets
    ``execution_state``/``last_activity`` only after awaiting that (jupyter_server 2.21, jupyter_client 8);
    ``ServerKernelManager.last_activity`` is ``Instance(datetime)`` without a default."""
    try:
        return getattr(km, name, default)
    except TraitError:
        return default


def own_client(km: Any) -> Any:
    """A client of the kernel with a session (and so a ZMQ identity) of its own.

    ``km.client()`` shares the manager's session, and with it the identity of
    its shell socket: two such clients connected at once (ours during a flush
    and anyone else's) make the kernel route replies to the wrong one.
    """
    session = km.session.clone()
    session.session = uuid.uuid4().hex
    return km.client(session=session)


def process_start(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        return round(psutil.Process(pid).create_time(), 2)
    except psutil.Error:
        return None


def process_running(pid: int) -> bool:
    """The process exists and is not a zombie (one /proc read)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class JupyterServerEnvironment:
    """Sessions, kernels and files of one Jupyter server (the :class:`Environment` of the server)."""

    def __init__(self, serverapp: Any):
        self.serverapp = serverapp
        #: kernel id -> (last_activity and last_kernel_activity before our requests, the task putting them back)
        self._settling: dict[str, tuple[Any, Any, asyncio.Task[None]]] = {}
        #: kernels started here (a resume) that no request of ours has reached yet
        self._just_started: set[str] = set()

    @property
    def kernel_manager(self) -> Any:
        return self.serverapp.kernel_manager

    @property
    def session_manager(self) -> Any:
        return self.serverapp.session_manager

    @property
    def contents_manager(self) -> Any:
        return self.serverapp.contents_manager

    # -- activity -----------------------------------------------------------
    def last_activity(self) -> float | None:
        """The server's last activity, as ``GET /api/status`` reports it."""
        web_app = getattr(self.serverapp, "web_app", None)
        if web_app is None:
            return None
        return epoch(web_app.last_activity())

    # -- kernels and sessions -----------------------------------------------
    def kernel_pid(self, kernel_id: str) -> int | None:
        try:
            km = self.kernel_manager.get_kernel(kernel_id)
        except KeyError:
            return None
        provisioner = getattr(km, "provisioner", None)
        pid = getattr(provisioner, "pid", None)
        if pid is None:
            process = getattr(provisioner, "process", None)
            pid = getattr(process, "pid", None)
        return pid if isinstance(pid, int) else None

    def has_kernel(self, kernel_id: str) -> bool:
        return kernel_id in self.kernel_manager

    def kernel_process(self, kernel_id: str) -> KernelProcess | None:
        """The pid the kernel's provisioner holds (in memory) and whether that process still runs."""
        if not self.has_kernel(kernel_id):
            return None
        pid = self.kernel_pid(kernel_id)
        return KernelProcess(pid=pid, running=process_running(pid) if pid is not None else None)

    async def kernels(self) -> list[KernelRecord]:
        """Every running kernel, with its session when it has one."""
        by_kernel = await self._sessions_by_kernel()
        records = []
        for kernel_id in list(self.kernel_manager.list_kernel_ids()):
            try:
                km = self.kernel_manager.get_kernel(kernel_id)
            except KeyError:
                continue  # shut down meanwhile
            session = by_kernel.get(kernel_id, {})
            records.append(
                KernelRecord(
                    kernel_id=kernel_id,
                    kernel_name=km.kernel_name,
                    # None until jupyter_server has marked the kernel it just started
                    execution_state=kernel_attribute(km, "execution_state") or "starting",
                    last_activity=epoch(kernel_attribute(km, "last_activity", None)),
                    pid=(pid := self.kernel_pid(kernel_id)),
                    process_start=process_start(pid),
                    session_id=session.get("id"),
                    path=session.get("path"),
                    name=session.get("name"),
                    type=session.get("type"),
                )
            )
        return records

    async def _sessions_by_kernel(self) -> dict[str, dict[str, Any]]:
        """kernel id -> its session (id, path, name, type)."""
        try:
            sessions = await ensure_async(self.session_manager.list_sessions())
            return {s["kernel"]["id"]: s for s in sessions}
        except Exception:  # noqa: BLE001 - a kernel still starting has no model yet (no last_activity)
            # The session table itself names every session's kernel.
            rows = self.session_manager.cursor.execute("SELECT session_id, path, name, type, kernel_id FROM session")
            return {
                row["kernel_id"]: {
                    "id": row["session_id"],
                    "path": row["path"],
                    "name": row["name"],
                    "type": row["type"],
                }
                for row in rows.fetchall()
            }

    async def stop_kernel(self, record: KernelRecord) -> None:
        """Shut a kernel down; its session row goes with it, and so do the
        browsers' websockets to it."""
        try:
            if record.session_id is not None:
                try:
                    await ensure_async(self.session_manager.delete_session(record.session_id))
                    return
                except KeyError:
                    pass  # the session vanished; make sure the kernel goes too
            if record.kernel_id in self.kernel_manager:
                await ensure_async(self.kernel_manager.shutdown_kernel(record.kernel_id))
        finally:
            self._just_started.discard(record.kernel_id)
            await close_kernel_websockets(record.kernel_id)

    async def preload_arguments(self, kernel_name: str) -> list[str]:
        """The command-line arguments that make a restarted kernel begin reading its
        checkpoints at its start (:mod:`jupyter_suspend.kernel.preload`); empty when its
        kernel spec does not run ipykernel (another kernel would not know the option)."""
        try:
            spec = await ensure_async(
                self.kernel_manager.kernel_spec_manager.get_kernel_spec(
                    kernel_name or self.kernel_manager.default_kernel_name
                )
            )
        except Exception:  # noqa: BLE001 - unknown spec: start it as it is
            return []
        argv = [str(a) for a in getattr(spec, "argv", None) or []]
        runs_ipykernel = any(
            a in {"ipykernel_launcher", "ipykernel"} or a.endswith(("/ipykernel_launcher.py", "/ipykernel"))
            for a in argv
        )
        if str(getattr(spec, "language", "")).lower() != "python" or not runs_ipykernel:
            return []
        # IPython's option for extensions given on the command line: the kernel's own
        # configured ``extensions`` still load (IPython/core/shellapp.py, init_extensions).
        return [f"--InteractiveShellApp.extra_extensions={PRELOAD_EXTENSION}"]

    async def start_kernel(
        self, record: KernelRecord, extra_env: dict[str, str], extra_arguments: list[str] | None = None
    ) -> str:
        """Start a kernel under the recorded id and re-create its session row,
        so the frontend finds the same session and kernel ids again.

        The recorded session is then the only one at its path: another session
        there (a kernel started for the notebook while it was suspended, past
        the session guard) is shut down, before the start (its memory is what
        the restored kernel needs) and once more after it."""
        await self._end_other_sessions(record)
        kernel_id = await self._start_recorded(record, extra_env, extra_arguments or [])
        await self._end_other_sessions(record)
        self._just_started.add(kernel_id)
        return kernel_id

    async def _end_other_sessions(self, record: KernelRecord) -> list[str]:
        """Shut down every session at ``record.path`` but the recorded one; returns their ids.

        Busy or not: it was started against the rule (while suspended a recorded
        notebook gets no new kernel), the page on it is pointed at the restored
        session after the resume, and left running it would be an orphan holding
        the memory the suspend released, or a second kernel for one notebook."""
        if record.path is None:
            return []
        rows = self.session_manager.cursor.execute(
            "SELECT session_id, kernel_id FROM session WHERE path=?", (record.path,)
        ).fetchall()
        ended = []
        for session_id, kernel_id in rows:
            if session_id == record.session_id or kernel_id == record.kernel_id:
                continue
            state = kernel_attribute(self._kernel_or_none(kernel_id), "execution_state") or "unknown"
            self.serverapp.log.warning(
                "jupyter-suspend: resume of %s: shutting down session %s (kernel %s, %s), "
                "started for it while suspended; the notebook gets its recorded session %s back",
                record.path,
                session_id,
                kernel_id,
                state,
                record.session_id,
            )
            try:
                await self.stop_kernel(KernelRecord(kernel_id=kernel_id, kernel_name="", session_id=session_id))
            except Exception as exc:  # noqa: BLE001 - a dead kernel's session: its row goes anyway
                self.serverapp.log.warning("jupyter-suspend: session %s: %s", session_id, exc)
                self.session_manager.cursor.execute("DELETE FROM session WHERE session_id=?", (session_id,))
            ended.append(session_id)
        return ended

    def _kernel_or_none(self, kernel_id: str) -> Any:
        try:
            return self.kernel_manager.get_kernel(kernel_id)
        except KeyError:
            return None

    async def _start_recorded(self, record: KernelRecord, extra_env: dict[str, str], extra_arguments: list[str]) -> str:
        path = record.path
        kernel_path = await ensure_async(self.contents_manager.get_kernel_path(path=path or ""))
        env = {**os.environ, **extra_env}
        if path is not None:
            env = {**self.session_manager.get_kernel_env(path, record.name), **extra_env}
        # jupyter_client appends ``extra_arguments`` to the kernel spec's argv
        # (LocalProvisioner.pre_launch -> format_kernel_cmd).
        more = {"extra_arguments": extra_arguments} if extra_arguments else {}
        kernel_id: str = await ensure_async(
            self.kernel_manager.start_kernel(
                kernel_id=record.kernel_id,
                path=kernel_path,
                kernel_name=record.kernel_name,
                env=env,
                **more,
            )
        )
        if record.session_id is not None:
            await ensure_async(
                self.session_manager.save_session(
                    record.session_id,
                    path=record.path,
                    name=record.name,
                    type=record.type,
                    kernel_id=kernel_id,
                )
            )
        return kernel_id

    async def restart_kernel(self, kernel_id: str) -> None:
        await ensure_async(self.kernel_manager.restart_kernel(kernel_id))

    async def wait_kernel_ready(self, kernel_id: str, timeout: float) -> float:
        """Wait until the kernel answers ``kernel_info`` on its shell channel: a
        cell can run now. Ends at ``timeout`` (TimeoutError) whatever the kernel
        sends meanwhile (jupyter_client's ``wait_for_ready`` also waits for 0.2 s
        of silence on IOPub, which output streaming to any client never gives)."""
        deadline = time.monotonic() + timeout
        km = self.kernel_manager.get_kernel(kernel_id)
        ready = getattr(km, "ready", None)
        if ready is not None:
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        client = own_client(km)
        client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
        try:
            while True:
                # Ask again every second: a request sent before the kernel listened is lost.
                attempt_ends = min(deadline, time.monotonic() + 1.0)
                if await self._await_reply(client, client.kernel_info(), attempt_ends) is not None:
                    return time.time()
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"kernel {kernel_id} did not answer kernel_info within {timeout:g}s")
        finally:
            client.stop_channels()

    # -- files ----------------------------------------------------------------
    def os_path(self, api_path: str) -> str | None:
        """Local path of a contents-API path, when the contents are files."""
        to_os = getattr(self.contents_manager, "_get_os_path", None)
        if to_os is None:
            return None
        return str(to_os(api_path))

    async def file_exists(self, api_path: str) -> bool:
        return bool(await ensure_async(self.contents_manager.file_exists(api_path)))

    # -- the kernel request protocol -----------------------------------------
    async def _execute(
        self, kernel_id: str, code: str, user_expressions: dict[str, str], timeout: float
    ) -> tuple[dict[str, Any] | None, str]:
        """Run a silent execute_request; return (reply content or None on timeout, kernel state)."""
        km = self.kernel_manager.get_kernel(kernel_id)
        # Our request is not the user's activity: culling controllers (Kubeflow's reads /api/kernels) must not
        # see it. The server's IOPub watcher moves last_activity on the request's busy/idle: put it back.
        # ... and the manager's last_kernel_activity, which /api/status reports (the Workspaces activity probe).
        settling = self._settling.pop(kernel_id, None)
        if settling is not None:
            # An earlier request of ours is still being put back: its values are the user's, keep them.
            activity_before, server_activity_before, task = settling
            task.cancel()
        else:
            activity_before = kernel_attribute(km, "last_activity", None)
            server_activity_before = getattr(self.kernel_manager, "last_kernel_activity", None)
        client = own_client(km)
        client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
        try:
            msg_id = client.execute(
                code, silent=True, store_history=False, user_expressions=user_expressions, allow_stdin=False
            )
            reply = await self._await_reply(client, msg_id, time.monotonic() + timeout)
        finally:
            client.stop_channels()
        state = kernel_attribute(km, "execution_state") or "unknown"
        if activity_before is not None:
            task = asyncio.ensure_future(self._restore_activity(km, activity_before, server_activity_before))
            self._settling[kernel_id] = (activity_before, server_activity_before, task)
            task.add_done_callback(functools.partial(self._settled, kernel_id))
            if kernel_id not in self._just_started:
                await asyncio.wait({task}, timeout=ACTIVITY_SETTLE_FOREGROUND_SECONDS)
        # The first request a resume sends a kernel it just started does not wait at all: the server's
        # watcher often has not subscribed to the new kernel's IOPub yet and never records that request.
        self._just_started.discard(kernel_id)
        return reply, state

    async def close(self) -> None:
        """Stop putting activity back (the server is stopping: nobody reads it any more)."""
        tasks = [task for _, _, task in self._settling.values()]
        self._settling.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _settled(self, kernel_id: str, task: asyncio.Task[None]) -> None:
        settling = self._settling.get(kernel_id)
        if settling is not None and settling[2] is task:
            del self._settling[kernel_id]
        if not task.cancelled() and task.exception() is not None:
            self.serverapp.log.warning(
                "jupyter-suspend: could not put kernel %s's activity back: %s", kernel_id, task.exception()
            )

    async def _restore_activity(
        self, km: Any, before: Any, server_before: Any, settle: float = ACTIVITY_SETTLE_SECONDS
    ) -> None:
        """Once the watcher has seen our request's idle (at most ``settle`` s), ``last_activity`` goes back;
        the manager's ``last_kernel_activity`` becomes the newest of its value before and every kernel's."""
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:
            if (
                kernel_attribute(km, "execution_state", None) == "idle"
                and kernel_attribute(km, "last_activity", None) != before
            ):
                break
            await asyncio.sleep(0.01)
        if kernel_attribute(km, "execution_state", None) != "idle":
            return  # busy with a user's cell meanwhile: that is activity, leave it
        km.last_activity = before
        manager = self.kernel_manager
        if server_before is not None and hasattr(manager, "last_kernel_activity"):
            kernels = [manager.get_kernel(k) for k in list(manager.list_kernel_ids())]
            times = [
                t for t in (kernel_attribute(k, "last_activity", None) for k in kernels) if isinstance(t, datetime)
            ]
            manager.last_kernel_activity = max([server_before, *times])

    async def _alive(self, kernel_id: str) -> str | None:
        """None when the kernel is alive, otherwise why not."""
        try:
            km = self.kernel_manager.get_kernel(kernel_id)
        except KeyError:
            return "kernel is not running"
        if not await ensure_async(km.is_alive()):
            return "kernel process is not alive"
        return None

    async def kernel_request(self, kernel_id: str, action: str, timeout: float, **params: Any) -> KernelReply:
        """Send one protocol request to a kernel and wait for its answer."""
        started = time.monotonic()
        dead = await self._alive(kernel_id)
        if dead:
            return KernelReply(kernel_id, ReplyOutcome.DEAD, dead)
        request = {
            "protocol": PROTOCOL_VERSION,
            "action": action,
            "request_id": new_operation_id(),
            "deadline": time.time() + timeout,
            **params,
        }
        reply, state = await self._execute(kernel_id, "", {USER_EXPRESSION_KEY: build_expression(request)}, timeout)
        elapsed = time.monotonic() - started
        if reply is None:
            return KernelReply(
                kernel_id, ReplyOutcome.TIMEOUT, f"no answer in {timeout:g}s (kernel {state})", elapsed=elapsed
            )
        result = _interpret_reply(kernel_id, reply)
        result.elapsed = elapsed
        return result

    async def load_helper_and_request(self, kernel_id: str, action: str, timeout: float, **params: Any) -> KernelReply:
        """Like :meth:`kernel_request`, loading the IPython extension first in a
        kernel that has it installed but not loaded (a freshly restarted one)."""
        reply = await self.kernel_request(kernel_id, action, timeout, **params)
        if reply.helper_installed_not_loaded:
            await self._execute(kernel_id, LOAD_HELPER_CODE, {}, timeout)
            reply = await self.kernel_request(kernel_id, action, timeout, **params)
        return reply

    @staticmethod
    async def _await_reply(client: Any, msg_id: str, deadline: float) -> dict[str, Any] | None:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                msg = await client.get_shell_msg(timeout=remaining)
            except queue.Empty:
                return None
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                return dict(msg["content"])


def _interpret_reply(kernel_id: str, content: dict[str, Any]) -> KernelReply:
    if content.get("status") != "ok":
        return KernelReply(
            kernel_id, ReplyOutcome.ABSENT, f"kernel could not run the request: {content.get('ename', 'error')}"
        )
    expression = (content.get("user_expressions") or {}).get(USER_EXPRESSION_KEY)
    if not isinstance(expression, dict) or expression.get("status") != "ok":
        ename = expression.get("ename", "no result") if isinstance(expression, dict) else "no result"
        return KernelReply(
            kernel_id, ReplyOutcome.ABSENT, f"jupyter_suspend helper not available in this kernel ({ename})"
        )
    text = expression.get("data", {}).get("text/plain", "")
    try:
        answer = json.loads(ast.literal_eval(text))
    except (ValueError, SyntaxError, TypeError):
        return KernelReply(kernel_id, ReplyOutcome.ABSENT, "kernel answered something that is not a protocol reply")
    if not isinstance(answer, dict):
        return KernelReply(kernel_id, ReplyOutcome.ABSENT, "kernel answered something that is not a protocol reply")
    if answer.get("status") == "expired":
        return KernelReply(kernel_id, ReplyOutcome.EXPIRED, answer.get("message", ""), answer)
    if not answer.get("helper", False):
        return KernelReply(kernel_id, ReplyOutcome.ABSENT, answer.get("message", "helper not loaded"), answer)
    outcome = ReplyOutcome.OK if answer.get("status") == "ok" else ReplyOutcome.ERROR
    return KernelReply(kernel_id, outcome, answer.get("message", ""), answer)
