"""What counts as activity: every signal, and one explainable answer.

jupyter_server's own ``last_activity`` cannot drive an automatic suspend:

- a cell that runs quietly (no output) does not move a kernel's
  ``last_activity``, yet the user is clearly working;
- our own kernel probes (the preflight dry run, the checkpoint flush) are
  silent ``execute_request`` s that move it;
- JupyterLab polls ``/api/sessions``, ``/api/kernels`` and the contents API
  every few seconds while a tab is open, which moves ``api_last_activity``:
  an open tab would never be idle.

So :class:`KernelWatch` listens to each kernel's IOPub itself and counts only
what a user causes: a cell that started (``execute_input``, which silent
requests never publish) until its ``idle``, outputs, comm traffic (widgets),
and the requests a connected frontend makes (completion, inspection,
kernel_info...). Terminals count through jupyter_server_terminals' own
``terminal_last_activity``. The GPU counts through NVML where ``pynvml``
imports and finds a device; otherwise it is *not measured*, never idle.
Our REST handlers never count: they switch activity tracking off.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..common.times import epoch
from .journal import utc_iso

#: IOPub messages that are a user's work: output, display, widgets.
OUTPUT_MESSAGES = frozenset(
    {"stream", "display_data", "update_display_data", "execute_result", "error", "clear_output"}
    | {"comm_open", "comm_msg", "comm_close"}
)

#: Signal names, in the order the answer lists them.
KERNEL_EXECUTION = "kernel_execution"
KERNEL_OUTPUT = "kernel_output"
KERNEL_CONNECTION = "kernel_connection"
TERMINALS = "terminals"
GPU = "gpu"
KEEP_RUNNING = "keep_running"
ENVIRONMENT_STARTED = "environment_started"
SIGNALS = (KERNEL_EXECUTION, KERNEL_OUTPUT, KERNEL_CONNECTION, TERMINALS, GPU, KEEP_RUNNING, ENVIRONMENT_STARTED)


@dataclass
class KernelActivity:
    """What one kernel's IOPub told us about its user."""

    kernel_id: str
    #: Cells started by a user (their execute_request's msg_id) that have not gone idle.
    running: set[str] = field(default_factory=set)
    #: The kernel was busy when we started listening: count it as running until its next idle.
    busy_when_attached: bool = False
    last_execution: float | None = None
    last_output: float | None = None
    last_request: float | None = None

    #: Requests that are no user's doing (jupyter_server's ``untracked_message_types``: a
    #: frontend's kernel_info on every reconnect, comm_info, shutdown...).
    untracked: frozenset[str] = frozenset()

    def on_message(self, msg_type: str, parent: dict[str, Any], content: dict[str, Any] | None, now: float) -> None:
        parent_id = parent.get("msg_id")
        if msg_type == "execute_input" and parent_id:
            # Silent requests (ours) never publish execute_input: this is a user's cell.
            self.running.add(parent_id)
            self.last_execution = now
        elif msg_type == "status" and content is not None:
            state = content.get("execution_state")
            if state == "idle":
                if parent_id in self.running:
                    self.running.discard(parent_id)
                    self.last_execution = now  # the cell ran until now
                if self.busy_when_attached:
                    self.busy_when_attached = False
                    self.last_execution = now
            elif state == "busy" and parent.get("msg_type") not in (None, "execute_request", *self.untracked):
                # A frontend's request (kernel_info, complete, inspect, comm_info, ...):
                # someone is connected and doing something.
                self.last_request = now
        elif msg_type in OUTPUT_MESSAGES:
            self.last_output = now

    @property
    def cell_running(self) -> bool:
        return bool(self.running) or self.busy_when_attached


class KernelWatch:
    """One IOPub listener per kernel of the server, kept in step with the kernels that run."""

    def __init__(self, kernel_manager: Any, clock: Callable[[], float] = time.time):
        self.kernel_manager = kernel_manager
        self.clock = clock
        self.kernels: dict[str, KernelActivity] = {}
        # kernel id -> (the manager object and its IOPub port we listen to, the stream)
        self._streams: dict[str, tuple[tuple[int, Any], Any]] = {}

    def sync(self) -> None:
        """Listen to kernels that started, stop listening to those that ended.

        A kernel restarted under the same id (a resume) is a new manager or new
        ports: listen again."""
        ids = set(self.kernel_manager.list_kernel_ids())
        for kernel_id in list(self._streams):
            if kernel_id not in ids:
                self._close(kernel_id)
                self.kernels.pop(kernel_id, None)
        for kernel_id in ids:
            try:
                km = self.kernel_manager.get_kernel(kernel_id)
            except KeyError:
                continue
            key = (id(km), getattr(km, "iopub_port", None))
            current = self._streams.get(kernel_id)
            if current is not None and current[0] == key:
                continue
            if current is not None:
                self._close(kernel_id)
            self._attach(kernel_id, km, key)

    def _attach(self, kernel_id: str, km: Any, key: tuple[int, Any]) -> None:
        try:
            stream = km.connect_iopub()
        except Exception:  # noqa: BLE001 - a kernel still starting: try again next tick
            return
        activity = self.kernels.get(kernel_id) or KernelActivity(kernel_id)
        activity.untracked = frozenset(getattr(self.kernel_manager, "untracked_message_types", ()))
        # Work seen before we listened: jupyter_server's own reading of the kernel.
        try:  # (a kernel still starting has no last_activity yet: reading the trait raises)
            seen_before = epoch(km.last_activity)
        except Exception:  # noqa: BLE001
            seen_before = None
        # A kernel that started is someone's doing: never older than its start (or our first sight of it).
        activity.last_output = activity.last_output or seen_before or self.clock()
        activity.busy_when_attached = getattr(km, "execution_state", "") == "busy"
        self.kernels[kernel_id] = activity
        session = km.session

        def on_recv(msg_list: list[bytes]) -> None:
            try:
                _idents, parts = session.feed_identities(msg_list)
                msg = session.deserialize(parts, content=False)
                msg_type = msg["header"]["msg_type"]
                content = None
                if msg_type == "status":
                    content = session.deserialize(parts)["content"]
                activity.on_message(msg_type, msg.get("parent_header") or {}, content, self.clock())
            except Exception:  # noqa: BLE001 - a message we cannot read is no activity
                return

        stream.on_recv(on_recv)
        self._streams[kernel_id] = (key, stream)

    def _close(self, kernel_id: str) -> None:
        _key, stream = self._streams.pop(kernel_id)
        with contextlib.suppress(Exception):
            stream.close()

    def stop(self) -> None:
        for kernel_id in list(self._streams):
            self._close(kernel_id)


class GPUUtilisation:
    """GPU utilisation through NVML, when ``pynvml`` imports and finds a device."""

    def __init__(self, busy_percent: float):
        self.busy_percent = busy_percent
        self.problem: str | None = None
        self._nvml: Any = None
        self._handles: list[Any] = []
        try:
            import pynvml  # type: ignore[import-not-found,unused-ignore]

            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self._nvml = pynvml
            if not self._handles:
                self.problem = "no GPU found by NVML"
        except ImportError:
            self.problem = "pynvml is not installed"
        except Exception as exc:  # noqa: BLE001 - NVML says why: no driver, no device
            self.problem = f"NVML unavailable: {exc}"
        self.last_busy: float | None = None
        self.last_percent: float | None = None

    @property
    def measured(self) -> bool:
        return self._nvml is not None and bool(self._handles)

    def sample(self, now: float) -> None:
        if not self.measured:
            return
        try:
            percent = max(float(self._nvml.nvmlDeviceGetUtilizationRates(h).gpu) for h in self._handles)
        except Exception as exc:  # noqa: BLE001 - a failed reading is not a reading of idleness
            self.problem, self.last_percent = f"NVML reading failed: {exc}", None
            self.last_busy = now
            return
        self.last_percent = percent
        if percent >= self.busy_percent:
            self.last_busy = now


@dataclass
class Signal:
    name: str
    counted: bool
    measured: bool
    active: bool
    last_activity: float | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "counted": self.counted,
            "measured": self.measured,
            "active": self.active,
            "last_activity": utc_iso(self.last_activity) if self.last_activity else None,
            "detail": self.detail,
        }


@dataclass
class Reading:
    """Every signal at one moment, and what they add up to."""

    at: float
    signals: list[Signal]

    @property
    def active_now(self) -> list[str]:
        return [s.name for s in self.signals if s.counted and s.active]

    @property
    def cell_running(self) -> bool:
        return any(s.name == KERNEL_EXECUTION and s.active for s in self.signals)

    @property
    def last(self) -> Signal | None:
        """The counted signal that saw activity last."""
        seen = [s for s in self.signals if s.counted and s.last_activity is not None]
        return max(seen, key=lambda s: s.last_activity or 0.0) if seen else None

    @property
    def idle_seconds(self) -> float:
        """0 while any counted signal is active; else seconds since the last activity."""
        if self.active_now:
            return 0.0
        last = self.last
        return max(0.0, self.at - last.last_activity) if last and last.last_activity else 0.0

    def to_dict(self) -> dict[str, Any]:
        last = self.last
        return {
            "at": utc_iso(self.at),
            "idle_seconds": round(self.idle_seconds, 3),
            "active_now": self.active_now,
            "last_signal": last.name if last else None,
            "last_activity": utc_iso(last.last_activity) if last and last.last_activity else None,
            "signals": [s.to_dict() for s in self.signals],
        }


#: Seconds a kernel's start event waits for the server to list the kernel.
KERNEL_LISTED_WAIT = 2.0
#: jupyter_server's kernel start/restart/shutdown events.
KERNEL_ACTIONS_SCHEMA_ID = "https://events.jupyter.org/jupyter_server/kernel_actions/v1"


class ActivityMonitor:
    """Reads every signal of one Jupyter server into a :class:`Reading`.

    Listens to a kernel from its start (jupyter_server's kernel action events),
    not only from the next reading: a user's first cell is not missed."""

    def __init__(self, serverapp: Any, gpu_busy_percent: float = 5.0, clock: Callable[[], float] = time.time):
        self.serverapp = serverapp
        self.clock = clock
        self.kernel_watch = KernelWatch(serverapp.kernel_manager, clock)
        self.gpu = GPUUtilisation(gpu_busy_percent)
        self.keep_running_at: float | None = None
        self.event_logger = getattr(serverapp, "event_logger", None)
        if self.event_logger is not None:
            self.event_logger.add_listener(schema_id=KERNEL_ACTIONS_SCHEMA_ID, listener=self._on_kernel_action)

    async def _on_kernel_action(self, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        # The event comes as the kernel's own start ends, a moment before the server lists it.
        kernel_id = data.get("kernel_id")
        deadline = time.monotonic() + KERNEL_LISTED_WAIT
        while kernel_id is not None and data.get("action") in ("start", "restart") and time.monotonic() < deadline:
            if kernel_id in self.serverapp.kernel_manager.list_kernel_ids():
                break
            await asyncio.sleep(0.02)
        self.kernel_watch.sync()

    def _settings(self) -> dict[str, Any]:
        web_app = getattr(self.serverapp, "web_app", None)
        return dict(web_app.settings) if web_app is not None else {}

    def read(self, running_since: float) -> Reading:
        """``running_since``: when the environment last started running (a resume counts as a start)."""
        now = self.clock()
        self.kernel_watch.sync()
        self.gpu.sample(now)
        kernels = list(self.kernel_watch.kernels.values())
        running = [k.kernel_id for k in kernels if k.cell_running]

        def newest(values: list[float | None]) -> float | None:
            present = [v for v in values if v is not None]
            return max(present) if present else None

        settings = self._settings()
        terminal_last = epoch(settings.get("terminal_last_activity"))
        signals = [
            Signal(
                KERNEL_EXECUTION,
                True,
                True,
                bool(running),
                now if running else newest([k.last_execution for k in kernels]),
                f"a cell is running in {len(running)} of {len(kernels)} kernel(s)",
            ),
            Signal(
                KERNEL_OUTPUT,
                True,
                True,
                False,
                newest([k.last_output for k in kernels]),
                "outputs, displays and widget messages from the kernels",
            ),
            Signal(
                KERNEL_CONNECTION,
                True,
                True,
                False,
                newest([k.last_request for k in kernels]),
                f"requests from {self._connections()} connected frontend(s) (completion, inspection, kernel info)",
            ),
            Signal(
                TERMINALS,
                True,
                "terminal_manager" in settings,
                False,
                terminal_last,
                "terminal input and output" if "terminal_manager" in settings else "terminals are not enabled",
            ),
            self._gpu_signal(),
            Signal(KEEP_RUNNING, True, True, False, self.keep_running_at, "the user chose Keep running"),
            Signal(
                ENVIRONMENT_STARTED,
                True,
                True,
                False,
                running_since,
                "the environment started or was resumed (idle time starts here)",
            ),
        ]
        return Reading(now, signals)

    def _connections(self) -> int:
        total = 0
        manager = self.serverapp.kernel_manager
        for kernel_id in list(manager.list_kernel_ids()):
            with contextlib.suppress(Exception):  # a kernel that ended meanwhile
                total += int(manager.kernel_model(kernel_id).get("connections", 0))
        return total

    def _gpu_signal(self) -> Signal:
        gpu = self.gpu
        if not gpu.measured:
            # Not measured is never idle: it simply adds nothing.
            return Signal(GPU, False, False, False, None, f"not measured: {gpu.problem}")
        busy = gpu.last_percent is None or gpu.last_percent >= gpu.busy_percent
        percent = "unknown" if gpu.last_percent is None else f"{gpu.last_percent:g}%"
        return Signal(GPU, True, True, busy, gpu.last_busy, f"utilisation {percent} (busy at {gpu.busy_percent:g}%)")

    def keep_running(self) -> None:
        self.keep_running_at = self.clock()

    def stop(self) -> None:
        if self.event_logger is not None:
            with contextlib.suppress(Exception):  # never added (no event logger) or already removed
                self.event_logger.remove_listener(schema_id=KERNEL_ACTIONS_SCHEMA_ID, listener=self._on_kernel_action)
        self.kernel_watch.stop()
