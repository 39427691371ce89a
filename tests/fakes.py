"""Fakes for testing the lifecycle core without a server (in the spirit of nbclient's fake kernel manager).

:class:`FakeEnvironment` implements the core's ``Environment`` protocol with
kernels that are plain records: each answers the kernel protocol as the
helper would (a canary per process, checkpoints, probes), or not at all
(``helper=False``), and any request can be held (:meth:`FakeEnvironment.hold`)
or made to fail (:meth:`FakeEnvironment.fail`). :class:`FakeBackend` is a
platform whose release and restore are scripted: ``Suspended`` (the default:
the kernels stop), ``ReturnedLive``, an exception (``FlushFailed``,
``CapacityUnavailable``, ``RestoreFailed``, anything), held until a gate
opens, or never returning. :func:`make_lifecycle` builds a ``Lifecycle`` over
them with a real ``Journal`` in a temporary folder.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jupyter_suspend.server.backends.base import (
    Backend,
    Capabilities,
    ColdStartVerdict,
    ReleaseContext,
    ResourceReport,
    RestoreContext,
    RestoredKernel,
    RestoreOutcome,
    ReturnedLive,
    Suspended,
)
from jupyter_suspend.server.backends.gke import GKEBackend
from jupyter_suspend.server.backends.local import LocalBackend
from jupyter_suspend.server.environment import KernelProcess, KernelRecord, KernelReply, ReplyOutcome
from jupyter_suspend.server.journal import Journal, JournalWriteError
from jupyter_suspend.server.lifecycle import Lifecycle, LifecycleSettings
from jupyter_suspend.server.states import RestoreKind, State

#: The local backend's capabilities: the server survives, kernels stop.
LOCAL_LIKE = LocalBackend.capabilities
#: A pod-snapshot platform (GKE Pod Snapshots): live and GPU memory kept, the
#: node released, a sidecar needed, the server frozen with the pod, resumed by the platform.
GKE_LIKE = GKEBackend.capabilities

_pids = itertools.count(4000)


class FakeEnvironment:
    """Kernels, sessions and files of a notebook server, in memory."""

    def __init__(self) -> None:
        self.running: dict[str, KernelRecord] = {}
        self.helper: dict[str, bool] = {}
        #: names each kernel registered for application checkpoints
        self.registered: dict[str, list[str]] = {}
        self.files: set[str] = set()
        self.activity: float | None = None
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.stopped: list[str] = []
        self._gates: dict[str, asyncio.Event] = {}
        self._failures: dict[str, BaseException] = {}
        self._replies: dict[str, KernelReply] = {}
        self.closed = False

    async def close(self) -> None:
        self.closed = True

    # -- set-up -----------------------------------------------------------------
    def add_kernel(
        self, kernel_id: str = "k1", path: str | None = "nb.ipynb", *, helper: bool = True, busy: bool = False
    ) -> KernelRecord:
        record = KernelRecord(
            kernel_id=kernel_id,
            kernel_name="python3",
            execution_state="busy" if busy else "idle",
            pid=next(_pids),
            process_start=round(time.time(), 2),
            session_id=f"session-{kernel_id}" if path else None,
            path=path,
            name=path,
            type="notebook" if path else None,
        )
        self.running[kernel_id] = record
        self.helper[kernel_id] = helper
        self.registered[kernel_id] = ["weights"]
        if path:
            self.files.add(path)
        return record

    def hold(self, action: str) -> asyncio.Event:
        """Requests of ``action`` wait until the returned event is set."""
        gate = self._gates[action] = asyncio.Event()
        return gate

    def fail(self, action: str, error: BaseException) -> None:
        """Requests of ``action`` raise ``error``."""
        self._failures[action] = error

    def answer(self, action: str, reply: KernelReply) -> None:
        """Requests of ``action`` get ``reply`` (its kernel id is replaced)."""
        self._replies[action] = reply

    @staticmethod
    def canary(record: KernelRecord) -> str:
        return f"canary-{record.kernel_id}-{record.pid}"

    # -- the Environment protocol ---------------------------------------------------
    def last_activity(self) -> float | None:
        return self.activity

    async def kernels(self) -> list[KernelRecord]:
        return [KernelRecord.from_dict(r.to_dict()) for r in self.running.values()]

    def has_kernel(self, kernel_id: str) -> bool:
        return kernel_id in self.running

    def kernel_process(self, kernel_id: str) -> KernelProcess | None:
        record = self.running.get(kernel_id)
        return KernelProcess(pid=record.pid, running=True) if record else None

    async def stop_kernel(self, record: KernelRecord) -> None:
        self.running.pop(record.kernel_id, None)
        self.stopped.append(record.kernel_id)

    async def preload_arguments(self, kernel_name: str) -> list[str]:
        return []

    async def start_kernel(
        self, record: KernelRecord, extra_env: dict[str, str], extra_arguments: list[str] | None = None
    ) -> str:
        started = KernelRecord.from_dict({**record.to_dict(), "pid": next(_pids), "execution_state": "idle"})
        self.running[record.kernel_id] = started
        self.helper.setdefault(record.kernel_id, True)
        self.registered.setdefault(record.kernel_id, ["weights"])
        return record.kernel_id

    async def restart_kernel(self, kernel_id: str) -> None:
        self.running[kernel_id].pid = next(_pids)

    async def wait_kernel_ready(self, kernel_id: str, timeout: float) -> float:
        return time.time()

    def os_path(self, api_path: str) -> str | None:
        return None  # not a local file system: notebooks are checked, not fsynced

    async def file_exists(self, api_path: str) -> bool:
        return api_path in self.files

    async def kernel_request(self, kernel_id: str, action: str, timeout: float, **params: Any) -> KernelReply:
        self.requests.append((kernel_id, action, params))
        gate = self._gates.get(action)
        if gate is not None:
            await gate.wait()
        if action in self._failures:
            raise self._failures[action]
        record = self.running.get(kernel_id)
        if record is None:
            return KernelReply(kernel_id, ReplyOutcome.DEAD, "kernel is not running")
        if action in self._replies:
            reply = self._replies[action]
            return KernelReply(kernel_id, reply.outcome, reply.message, dict(reply.content))
        if not self.helper[kernel_id]:
            return KernelReply(kernel_id, ReplyOutcome.ABSENT, "jupyter_suspend helper not available in this kernel")
        names = self.registered[kernel_id]
        content: dict[str, Any] = {"helper": True, "status": "ok"}
        if action == "probe":
            content.update(registered=names, uses_gpu=False)
        elif action == "checkpoint":
            content.update(
                checkpoints=[{"name": n, "content_hash": f"hash-{n}"} for n in names],
                canary={"hash": self.canary(record), "pid": record.pid, "process_start": record.process_start},
            )
        elif action == "verify":
            content["observed"] = {
                "canary_hash": self.canary(record),
                "pid": record.pid,
                "process_start": record.process_start,
                "helper": True,
                "names": {n: {"content_hash": f"hash-{n}"} for n in params.get("names", [])},
            }
        elif action == "restore":
            content.update(restored=list(params.get("names", [])), missing=[], failed=[])
        return KernelReply(kernel_id, ReplyOutcome.OK, "", content)

    async def load_helper_and_request(self, kernel_id: str, action: str, timeout: float, **params: Any) -> KernelReply:
        return await self.kernel_request(kernel_id, action, timeout, **params)


Script = Callable[[Any], Awaitable[Any]]


class FakeBackend(Backend):
    """A platform with scripted release and restore.

    By default it behaves like the local backend (the release stops the
    kernels and returns ``Suspended``; the restore starts them again, cold)
    and reads a cold start the way the local backend does.
    """

    name = "fake"

    def __init__(self, capabilities: Capabilities = LOCAL_LIKE, **kwargs: Any):
        super().__init__(**kwargs)
        self.capabilities = capabilities
        self.releases: list[Script] = []
        self.restores: list[Script] = []
        self.release_calls = 0
        self.restore_calls = 0
        self.stop_calls = 0

    # -- scripting: each call takes the next step, the default once the list is empty ----
    def then_release(self, step: Script) -> None:
        self.releases.append(step)

    def then_restore(self, step: Script) -> None:
        self.restores.append(step)

    async def release(self, ctx: ReleaseContext) -> Suspended | ReturnedLive:
        self.release_calls += 1
        if self.releases:
            result: Suspended | ReturnedLive = await self.releases.pop(0)(ctx)
            return result
        return await stop_kernels(ctx)

    async def restore(self, ctx: RestoreContext) -> RestoreOutcome:
        self.restore_calls += 1
        if self.restores:
            result: RestoreOutcome = await self.restores.pop(0)(ctx)
            return result
        return await start_kernels(ctx)

    async def stop(self) -> None:
        self.stop_calls += 1

    def interpret_cold_start(self, last_state: State, last_entry: dict[str, Any] | None) -> ColdStartVerdict:
        if not self.capabilities.server_survives_suspend and last_state in (State.SNAPSHOTTING, State.SUSPENDED):
            return ColdStartVerdict(State.READY, "the pod came back without its snapshot", restore=RestoreKind.COLD)
        return LocalBackend.interpret_cold_start(self, last_state, last_entry)  # type: ignore[arg-type]


# -- scripted steps ------------------------------------------------------------------------
async def stop_kernels(ctx: ReleaseContext) -> Suspended:
    for record in ctx.kernels:
        await ctx.environment.stop_kernel(record)
    now = time.time()
    return Suspended(now, None, ResourceReport(), {"kernels": [k.to_dict() for k in ctx.kernels]})


async def start_kernels(ctx: RestoreContext) -> RestoreOutcome:
    kernels = []
    for data in ctx.resume_plan.get("kernels", []):
        record = KernelRecord.from_dict(data)
        await ctx.environment.start_kernel(record, ctx.kernel_env)
        ready = await ctx.environment.wait_kernel_ready(record.kernel_id, 1)
        kernels.append(RestoredKernel(record.kernel_id, record.session_id, record.path, record.kernel_name, ready))
    now = time.time()
    return RestoreOutcome(RestoreKind.COLD, now, now, kernels, capacity_available_at=now)


def returned_live(ctx: ReleaseContext) -> Awaitable[ReturnedLive]:
    async def step() -> ReturnedLive:
        return ReturnedLive(
            snapshot=f"snap-{ctx.operation_id}", environment_stopped_at=time.time(), restored_at=time.time()
        )

    return step()


def raising(error: BaseException) -> Script:
    async def step(ctx: Any) -> Any:
        raise error

    return step


def held(gate: asyncio.Event, then: Script) -> Script:
    async def step(ctx: Any) -> Any:
        await gate.wait()
        return await then(ctx)

    return step


async def never(ctx: Any) -> Any:
    await asyncio.Event().wait()


# -- the lifecycle over the fakes ------------------------------------------------------------
def make_lifecycle(
    state_dir: Path,
    environment: FakeEnvironment | None = None,
    backend: FakeBackend | None = None,
    journal: Journal | None = None,
) -> Lifecycle:
    """A recovered Lifecycle over the fakes and a real journal in ``state_dir``."""
    lifecycle = Lifecycle(
        backend=backend or FakeBackend(),
        environment=environment or FakeEnvironment(),
        journal=journal or Journal(state_dir),
        settings=LifecycleSettings(
            checkpoint_dir=state_dir / "checkpoints", flush_kernel_timeout=1.0, capacity_max_wait=0.5
        ),
    )
    lifecycle.recover()
    return lifecycle


async def settle(lifecycle: Lifecycle, timeout: float = 5.0) -> None:
    """Wait until no operation runs."""
    deadline = time.monotonic() + timeout
    while lifecycle.operation is not None and lifecycle.operation.in_progress:
        assert time.monotonic() < deadline, f"still {lifecycle.state.value}: {lifecycle.operation.to_dict()}"
        await asyncio.sleep(0.001)


async def reach(lifecycle: Lifecycle, state: State, timeout: float = 5.0) -> None:
    """Wait until the lifecycle is in ``state``."""
    deadline = time.monotonic() + timeout
    while lifecycle.state != state:
        assert time.monotonic() < deadline, f"still {lifecycle.state.value}, never {state.value}"
        await asyncio.sleep(0.001)


class FaultyJournal(Journal):
    """A real journal whose appends fail (as on a full disk) while ``fault`` is set."""

    def __init__(self, directory: Path, **kwargs: Any):
        super().__init__(directory, **kwargs)
        self.fault: str | None = None
        #: fail only appends of these kinds (None: every append)
        self.fault_kinds: set[str] | None = None

    def append(self, kind: str, **data: Any) -> dict[str, Any]:
        if self.fault is not None and (self.fault_kinds is None or kind in self.fault_kinds):
            raise JournalWriteError(28, self.fault)
        return super().append(kind, **data)
