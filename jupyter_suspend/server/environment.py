"""What the core needs of the notebook environment: a Protocol, its records and replies.

The lifecycle core, the flush and every backend talk to the running kernels,
sessions and files only through :class:`Environment`. In the server it is
:class:`~jupyter_suspend.server.jupyter_environment.JupyterServerEnvironment`
(an adapter over jupyter_server's managers); the fast tests use a fake
(``tests/fakes.py``). Pure: no jupyter_server, no tornado, no I/O here.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


@dataclass
class KernelRecord:
    """A running kernel and the session (notebook, console) it belongs to."""

    kernel_id: str
    kernel_name: str
    execution_state: str = "unknown"
    last_activity: float | None = None
    pid: int | None = None
    #: Process creation time (psutil, rounded like the kernel side's reading).
    process_start: float | None = None
    session_id: str | None = None
    path: str | None = None
    name: str | None = None
    type: str | None = None

    @property
    def reported_busy(self) -> bool:
        """The server last saw this kernel running a cell (its view lags a moment)."""
        return self.execution_state == "busy"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KernelRecord:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class KernelProcess:
    """A running kernel's process as the server holds it in memory (no message to the kernel)."""

    #: None: this environment cannot say without a round trip.
    pid: int | None
    #: The process still exists (and is not a zombie); None when unknown.
    running: bool | None


class ReplyOutcome(str, enum.Enum):
    """How a kernel answered one protocol request."""

    OK = "ok"  # the helper ran the request
    ERROR = "error"  # the helper ran it and it failed
    ABSENT = "absent"  # no helper answered (not installed, or not loaded)
    TIMEOUT = "timeout"  # no answer in time: the kernel is busy
    EXPIRED = "expired"  # the helper answered after the request's deadline: it was busy
    DEAD = "dead"  # the kernel is not running


@dataclass
class KernelReply:
    """What a kernel answered to a protocol request; it answers the usual questions itself."""

    kernel_id: str
    outcome: ReplyOutcome
    message: str = ""
    content: dict[str, Any] = field(default_factory=dict)
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return self.outcome == ReplyOutcome.OK

    @property
    def busy(self) -> bool:
        """The kernel did not answer in time (a cell is running)."""
        return self.outcome in (ReplyOutcome.TIMEOUT, ReplyOutcome.EXPIRED)

    @property
    def helper_loaded(self) -> bool:
        """The jupyter_suspend helper answered (successfully or not)."""
        return self.outcome in (ReplyOutcome.OK, ReplyOutcome.ERROR)

    @property
    def no_helper(self) -> bool:
        return self.outcome == ReplyOutcome.ABSENT

    @property
    def helper_installed_not_loaded(self) -> bool:
        """The package is importable in the kernel but the IPython extension is not loaded."""
        return self.no_helper and self.content.get("helper") is False

    @property
    def not_running(self) -> bool:
        return self.outcome == ReplyOutcome.DEAD

    @property
    def helper_status(self) -> str:
        """One word for the preflight: loaded | error | absent | busy | not_running."""
        if self.busy:
            return "busy"
        return {ReplyOutcome.OK: "loaded", ReplyOutcome.ERROR: "error", ReplyOutcome.ABSENT: "absent"}.get(
            self.outcome, "not_running"
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = self.outcome.value
        return data


class Environment(Protocol):
    """Sessions, kernels and files of one notebook server, as the core sees them."""

    async def close(self) -> None:
        """Finish what it still does in the background (the server is stopping)."""

    def last_activity(self) -> float | None:
        """The server's last user activity (epoch seconds), as ``GET /api/status`` reports it."""

    async def kernels(self) -> list[KernelRecord]:
        """Every running kernel, with its session when it has one."""

    def has_kernel(self, kernel_id: str) -> bool:
        """A kernel with this id runs now."""

    def kernel_process(self, kernel_id: str) -> KernelProcess | None:
        """The kernel's process as the server knows it now, cheaply and synchronously (``GET status`` polls
        it every few seconds): never a message to the kernel. None: no kernel with this id runs."""

    async def stop_kernel(self, record: KernelRecord) -> None:
        """Shut a kernel down with its session row and the browsers' connections to it."""

    async def start_kernel(
        self, record: KernelRecord, extra_env: dict[str, str], extra_arguments: list[str] | None = None
    ) -> str:
        """Start a kernel under the recorded kernel (and session) id; returns the kernel id.
        ``extra_arguments`` go after the kernel's command line (see :meth:`preload_arguments`)."""

    async def preload_arguments(self, kernel_name: str) -> list[str]:
        """Arguments that make a kernel of ``kernel_name`` read its checkpoints at its start
        (:mod:`jupyter_suspend.kernel.preload`); empty when it cannot."""

    async def restart_kernel(self, kernel_id: str) -> None:
        """Restart a running kernel in place (a new process under the same id)."""

    async def wait_kernel_ready(self, kernel_id: str, timeout: float) -> float:
        """Wait (at most ``timeout`` seconds) until the kernel can run a cell; returns when."""

    def os_path(self, api_path: str) -> str | None:
        """Local path of a contents path, when the contents are files."""

    async def file_exists(self, api_path: str) -> bool: ...

    async def kernel_request(self, kernel_id: str, action: str, timeout: float, **params: Any) -> KernelReply:
        """Send one protocol request (:mod:`jupyter_suspend.common.kernel_protocol`) and wait for its answer."""

    async def load_helper_and_request(self, kernel_id: str, action: str, timeout: float, **params: Any) -> KernelReply:
        """Like :meth:`kernel_request`, loading the helper first where it is installed but not loaded."""
