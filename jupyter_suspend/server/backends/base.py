"""The one interface every platform implements.

Two shapes of platform exist and the interface serves both:

* the server survives the suspend (``local``): only the kernels stop; the same
  server process answers while suspended and performs the resume itself;
* the server is frozen with its pod (GKE Pod Snapshots): ``release`` either
  returns after a *live* restore, in a new pod, as if nothing happened
  (:class:`ReturnedLive`), or never returns, and a new server process starts
  cold and learns from the journal what happened
  (:meth:`Backend.interpret_cold_start`).

Everything the UI says about what a suspend keeps is derived from
:class:`Capabilities`; nothing is hard-coded per backend.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from traitlets import MetaHasTraits
from traitlets.config import LoggingConfigurable

from .. import wording
from ..states import RestoreKind, State

if TYPE_CHECKING:
    from ..environment import Environment, KernelRecord


@dataclass(frozen=True)
class Capabilities:
    #: Notebooks and other files on the persistent volume survive.
    keeps_files: bool = True
    #: Application checkpoints written by the flush survive.
    keeps_application_checkpoints: bool = True
    #: Variables in kernel memory come back without re-running anything.
    keeps_live_memory: bool = False
    #: Tensors in accelerator memory come back without reloading.
    keeps_gpu_memory: bool = False
    #: Kernel processes stop, so their memory (and GPU memory) is freed.
    releases_kernel_memory: bool = True
    #: The whole node (and its accelerators) can go back to the pool.
    releases_node: bool = False
    #: Needs the privileged sidecar to act on the pod.
    needs_sidecar: bool = False
    #: This server process keeps answering while suspended.
    server_survives_suspend: bool = True
    #: ``POST resume`` on this server performs the resume (otherwise the
    #: platform resumes the pod and this server only reports).
    resume_from_server: bool = True
    #: The platform keeps snapshots of this pod that can be listed and deleted
    #: (``GET``/``DELETE snapshots``, :meth:`Backend.list_snapshots`).
    keeps_snapshots: bool = False

    def to_dict(self) -> dict[str, bool]:
        return asdict(self)


@dataclass
class ResourceReport:
    """What a suspend freed, measured, never assumed."""

    kernel_memory_bytes: int = 0
    gpu_memory_bytes: int = 0
    gpu_devices: list[str] = field(default_factory=list)
    gpu_measurement: str = "nvml unavailable"
    per_kernel: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Suspended:
    """The environment is down and this server is still running (local)."""

    environment_stopped_at: float
    node_released_at: float | None
    released: ResourceReport
    #: What the backend needs to resume later (its own data, JSON); journaled durably.
    resume_plan: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReturnedLive:
    """The server was frozen with the pod and has just come back live."""

    snapshot: str
    environment_stopped_at: float | None
    restored_at: float
    detail: dict[str, Any] = field(default_factory=dict)


ReleaseOutcome = Suspended | ReturnedLive


@dataclass
class RestoredKernel:
    kernel_id: str
    session_id: str | None
    path: str | None
    kernel_name: str
    runnable_at: float | None
    error: str | None = None


@dataclass
class RestoreOutcome:
    restore: RestoreKind
    restored_at: float
    first_cell_runnable_at: float | None
    kernels: list[RestoredKernel] = field(default_factory=list)
    capacity_available_at: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class ColdStartVerdict:
    """How a server that starts cold reads the previous process's journal."""

    state: State
    message: str
    restore: RestoreKind | None = None
    next_step: str = ""


#: ``record(kind, **fields)``: journal a fact of the backend's own (``kind``
#: prefixed with the backend's name, e.g. ``gke_snapshot_requested``) as part of
#: this operation; a journal that cannot be written is logged, never raised.
Recorder = Callable[..., None]


def _no_record(kind: str, **fields: Any) -> None:
    return None


@dataclass
class ReleaseContext:
    operation_id: str
    environment: Environment
    kernels: list[KernelRecord]
    reason: str
    record: Recorder = _no_record


@dataclass
class RestoreContext:
    operation_id: str
    cycle_id: str
    environment: Environment
    #: The plan the release left: :attr:`Suspended.resume_plan`, or
    #: ``{"kernels": [...]}`` (the kernels recorded before the release started).
    resume_plan: dict[str, Any]
    kernel_env: dict[str, str]
    record: Recorder = _no_record
    #: kernel id -> ``{"checkpoint_dir", "names"}``: the application checkpoints the
    #: resume will ask each restarted kernel to restore (empty when it will not).
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)


class SnapshotError(Exception):
    """The platform refused or could not answer a snapshot call: ``status`` is the HTTP status to pass on
    (403 another pod's, 404 missing, 502 the platform answered badly, 503 it could not be reached)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class _BackendMeta(MetaHasTraits, abc.ABCMeta):
    """Configurable (traitlets) and abstract at once."""


class Backend(LoggingConfigurable, metaclass=_BackendMeta):
    """A platform that can take the environment down and bring it back.

    Backends are traitlets ``Configurable``: configure them by class name,
    e.g. ``c.LocalBackend.capacity_headroom_bytes = 8 * 2**30``.
    """

    name: str = "abstract"
    capabilities: Capabilities = Capabilities()
    #: The backend's own journal entry kinds (``ctx.record``) whose newest entry
    #: journal rotation must keep: what its cold-start reading (:meth:`recall`)
    #: or the timeline of the last cycle needs.
    pinned_kinds: frozenset[str] = frozenset()

    def describe(self) -> dict[str, Any]:
        """``backend`` of status and preflight: name, capabilities and the
        sentences derived from them (``text``, see :mod:`~jupyter_suspend.server.wording`)."""
        return {
            "name": self.name,
            "capabilities": self.capabilities.to_dict(),
            "text": wording.backend_text(self.capabilities),
        }

    async def preflight_notes(self, environment: Environment) -> list[str]:
        """Platform facts worth showing before a suspend, beyond what the
        capabilities already say (empty by default)."""
        return []

    async def preflight_blockers(self, environment: Environment) -> list[str]:
        """Why a suspend would be refused (aborted, nothing released) if it
        started now, one sentence each: the dry run's ``would_abort``. Empty by
        default. Must answer within a few seconds: a dry run never hangs on it."""
        return []

    async def list_snapshots(self) -> dict[str, Any]:
        """This pod's snapshots (only when ``capabilities.keeps_snapshots``): ``{"pod", "namespace",
        "snapshots": [SnapshotSummary]}`` as the sidecar protocol has them; raises :class:`SnapshotError`."""
        raise SnapshotError(404, f"the {self.name} backend keeps no snapshots")

    async def delete_snapshot(self, name: str) -> dict[str, Any]:
        """Delete one of this pod's snapshots and its trigger: ``{"deleted", "trigger"}``; raises
        :class:`SnapshotError` (403 another pod's, 404 missing)."""
        raise SnapshotError(404, f"the {self.name} backend keeps no snapshots")

    async def stop(self) -> None:
        """The server is shutting down: end the backend's own background work
        (called by the lifecycle core's ``stop``). Nothing by default."""

    @abc.abstractmethod
    async def release(self, ctx: ReleaseContext) -> ReleaseOutcome:
        """Take the environment down. Called only after a successful flush.

        Use only ``ctx.environment`` (the :class:`~jupyter_suspend.server.environment.Environment`
        protocol). Raise :class:`~jupyter_suspend.server.states.FlushFailed` if
        nothing was released and the session can keep running as it is.
        """

    @abc.abstractmethod
    async def restore(self, ctx: RestoreContext) -> RestoreOutcome:
        """Bring the environment back from ``ctx.resume_plan``.

        Raise :class:`~jupyter_suspend.server.states.CapacityUnavailable` to
        wait and retry, :class:`~jupyter_suspend.server.states.RestoreFailed`
        to give up with a next step for the user.
        """

    def recall(self, entries: list[dict[str, Any]]) -> None:
        """At start-up, before :meth:`interpret_cold_start`: the journal entries of
        the last suspend cycle (from its ``suspend_requested`` on), the backend's own
        (``ctx.record``) included. Ignored by default."""

    @abc.abstractmethod
    def interpret_cold_start(self, last_state: State, last_entry: dict[str, Any] | None) -> ColdStartVerdict:
        """Decide the state of a server process that finds a journal from a
        previous process (``last_state`` is the last state it recorded).

        The message may be empty: :mod:`~jupyter_suspend.server.wording` then
        says what the capabilities allow to say."""
