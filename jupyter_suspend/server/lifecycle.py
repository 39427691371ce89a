"""The lifecycle core: one state machine, one operation at a time, journaled.

Knows nothing of tornado. The server extension wires it to an
:class:`~jupyter_suspend.server.environment.Environment`, a backend, a journal
on the persistent volume and an event sink; the handlers only call the public
methods here. What may start is decided by
:func:`~jupyter_suspend.server.states.allowed`; the dry run lives in
:mod:`.preflight`, the reading of the journal in :mod:`.replay`, the live-state
records in :mod:`.live_state`, the status answer in :mod:`.status` and every
sentence in :mod:`.wording`. This module holds the three operation scripts:
suspend, resume, checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import preflight as preflight_mod
from . import status as status_mod
from . import timeline as timeline_mod
from . import wording
from .backends.base import Backend, ReleaseContext, RestoreContext, ReturnedLive, Suspended
from .environment import Environment, KernelRecord
from .flush import KernelFlush, checkpoints_to_restore, flush, reload_application_checkpoints
from .journal import Journal, JournalWriteError
from .live_state import LiveStateRecords, VerifyError, live_lost
from .replay import EntryKind, read_cold_start, replay, restore_report
from .resources import not_measured_as_null
from .save_requests import SaveReport, SaveRequests
from .states import (
    TRANSITIONS,
    Action,
    CapacityUnavailable,
    Decision,
    Failure,
    FlushFailed,
    IllegalState,
    JournalUnavailable,
    Operation,
    OperationInProgress,
    OperationKind,
    Outcome,
    RestoreFailed,
    RestoreKind,
    State,
    allowed,
)

EventSink = Callable[[dict[str, Any]], None]
#: Seconds during which a preflight counts as the start of the suspend flow.
PREFLIGHT_ACTIVITY_WINDOW = 300.0


@dataclass
class LifecycleSettings:
    checkpoint_dir: Path
    flush_kernel_timeout: float = 60.0
    restore_checkpoints_on_resume: bool = True
    capacity_max_wait: float = 3600.0
    kernel_env: dict[str, str] | None = None


def last_cycle(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries from the last ``suspend_requested`` on (empty: never suspended)."""
    starts = [i for i, e in enumerate(entries) if e.get("kind") == EntryKind.SUSPEND_REQUESTED.value]
    return entries[starts[-1] :] if starts else []


def last_suspend_of(cycle: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Who suspended the last cycle (``last_cycle``), why, and when, as the journal recorded it."""
    if not cycle:
        return None
    requested = cycle[0]
    released = next(
        (e for e in cycle if e.get("kind") == EntryKind.RELEASED.value and not e.get("partial")),
        None,
    )
    return {
        "operation_id": requested.get("operation_id"),
        "origin": requested.get("origin") or "user",
        "reason": requested.get("reason") or "",
        "workload_class": requested.get("workload_class"),
        "requested_at": requested.get("wall"),
        "active_work_ended": requested.get("active_work_ended"),
        "suspended_at": released.get("wall") if released else None,
    }


class Lifecycle:
    def __init__(
        self,
        *,
        backend: Backend,
        environment: Environment,
        journal: Journal,
        settings: LifecycleSettings,
        emit: EventSink | None = None,
        log: logging.Logger | None = None,
        save_requests: SaveRequests | None = None,
    ):
        self.backend = backend
        self.environment = environment
        self.journal = journal
        self.settings = settings
        self._emit = emit or (lambda data: None)
        #: Asks the connected JupyterLab pages to save before a flush (None: no event bus, nobody to ask).
        self.save_requests = save_requests
        #: Who suspended last, why and after how long idle (what a returning user is told).
        self.last_suspend: dict[str, Any] | None = None
        self.log = log or logging.getLogger("jupyter_suspend")
        self.state = State.RUNNING
        self.since = time.time()
        self.message = ""
        self.restore: RestoreKind | None = None
        self.failure: Failure | None = None
        self.operation: Operation | None = None
        self.cold_start: dict[str, Any] | None = None
        self.journal_problems: list[dict[str, Any]] = []
        #: The report of the last restore (what came back, which checkpoints).
        self.last_restore: dict[str, Any] | None = None
        self.live_state = LiveStateRecords(environment)
        self._task: asyncio.Task[None] | None = None
        #: What a resume needs (the backend's plan from the last suspend); None: nothing to resume.
        self._resume_plan: dict[str, Any] | None = None
        self._cycle_id: str | None = None
        self._flushed_kernels: list[dict[str, Any]] = []
        self._activity_before_preflight: tuple[float, float | None] | None = None

    @property
    def resume_plan(self) -> dict[str, Any] | None:
        """What a resume needs (the backend's plan from the last suspend); None: nothing to resume."""
        return self._resume_plan

    @property
    def flushed_kernels(self) -> list[dict[str, Any]]:
        """Each kernel's checkpoint answer at the last suspend (what a resume loads back)."""
        return self._flushed_kernels

    # -- start-up -------------------------------------------------------------
    def recover(self) -> None:
        """Read the journal a previous process left and decide where we are."""
        entries = self.journal.read().entries
        past = replay(entries)
        self.backend.recall(last_cycle(entries))
        self.journal_problems = [p.to_dict() for p in self.journal.startup_problems]
        for problem in self.journal.startup_problems:
            self.log.warning("jupyter-suspend journal line %s is %s: %r", problem.line, problem.kind, problem.excerpt)
        self._cycle_id, self._flushed_kernels = past.cycle_id, past.flushed_kernels
        self.last_suspend = last_suspend_of(last_cycle(entries))
        self.last_restore, self.live_state.records = past.last_restore, past.live_state_records
        cold = read_cold_start(past, self.backend)
        if cold is not None:
            self.state, self.restore, self.message = cold.state, cold.restore, cold.message
            self.failure = Failure(cold.message, cold.next_step) if cold.state == State.FAILED else None
            self.cold_start = cold.to_dict() if cold.message else None
        # Resumed, acknowledged or never suspended: nothing waits to be resumed.
        self._resume_plan = past.resume_plan if self.state in (State.SUSPENDED, State.FAILED) else None
        if cold is not None:
            self.journal.append(
                EntryKind.RECOVERED.value,
                to=self.state.value,
                previous_state=cold.previous_state.value,
                previous_boot_id=cold.previous.get("boot_id"),
                message=cold.message,
                restore=self.restore.value if self.restore else None,
                operation_id=self._cycle_id,
            )
        self.journal.append(EntryKind.SERVER_STARTED.value, backend=self.backend.name, state=self.state.value)
        caps = self.backend.capabilities
        if self.state == State.SUSPENDED and self._resume_plan is not None and not caps.resume_from_server:
            self._resume_at_start()

    def _resume_at_start(self) -> None:
        """Suspended, seen by a new process, on a platform that resumes by itself
        (``resume_from_server`` false): the platform brought the pod back cold, and
        nobody can ask for a resume here. It starts now (the backend's ``restore``)."""
        operation = Operation(OperationKind.RESUME, reason="cold start")
        try:
            self._journal(
                EntryKind.OPERATION_STARTED,
                operation_id=operation.id,
                operation_kind=operation.kind.value,
                reason=operation.reason,
                options={},
            )
        except JournalUnavailable:
            return  # nothing starts unrecorded; the status says why
        self.operation = operation
        self._spawn(operation, lambda: self._run_resume(operation, cold_start=True))

    async def stop(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # shutting down
                await task
        try:
            await self.backend.stop()
        except Exception:  # shutting down: say so, carry on
            self.log.exception("jupyter-suspend: the %s backend did not stop cleanly", self.backend.name)
        await self.environment.close()

    # -- state machine ------------------------------------------------------
    def _transition(
        self, new: State, operation: Operation | None, message: str = "", *, must: bool = False, **detail: Any
    ) -> None:
        """Journal the move, then make it. ``must``: a way back (abort, fail) that
        happens even when the journal cannot record it."""
        if new not in TRANSITIONS[self.state]:
            raise RuntimeError(f"illegal transition {self.state.value} -> {new.value}")
        previous = self.state
        failure = self.failure if new == State.FAILED else None
        restore = self.restore if new == State.READY else None
        # Journal first: a write that fails leaves the state as it was.
        self._journal(
            EntryKind.TRANSITION,
            must=must,
            to=new.value,
            **{"from": previous.value},
            operation_id=operation.id if operation else None,
            operation_kind=operation.kind.value if operation else None,
            message=message,
            restore=restore.value if restore else None,
            failure=failure.to_dict() if failure else None,
            **detail,
        )
        self.state, self.since, self.message, self.failure, self.restore = new, time.time(), message, failure, restore
        self._emit(status_mod.event(self, previous, operation))

    def _fail(self, operation: Operation, reason: str, next_step: str) -> None:
        self.failure = Failure(reason, next_step)
        self._transition(State.FAILED, operation, reason, must=True)
        self._finish(operation, Outcome.FAILED, reason)

    def _finish(self, operation: Operation, outcome: Outcome, message: str = "") -> None:
        operation.finish(outcome, message)  # first: whatever the journal does, nothing stays claimed
        self._journal(
            EntryKind.OPERATION_FINISHED,
            must=True,
            operation_id=operation.id,
            operation_kind=operation.kind.value,
            outcome=outcome.value,
            message=message,
            steps=[s.to_dict() for s in operation.steps],
        )
        self._emit(status_mod.event(self, self.state, operation, outcome=outcome.value, message=message))

    def decide(self, action: Action) -> Decision:
        """May ``action`` start now? (the rule both ``_claim`` and ``status()`` use)"""
        in_progress = self.operation is not None and self.operation.in_progress
        return allowed(action, self.state, self._resume_plan is not None, self.backend.capabilities, in_progress)

    def _refuse(self, action: Action) -> None:
        decision = self.decide(action)
        if decision:
            return
        current = self.operation
        if decision.operation_in_progress and current is not None:
            raise OperationInProgress(
                f"a {current.kind.value} operation ({current.id}) is already running",
                state=self.state,
                operation=current,
            )
        prefix = f"the {self.backend.name} backend is " if decision.reason.startswith("resumed by") else ""
        raise IllegalState(prefix + decision.reason, state=self.state)

    def _claim(self, kind: OperationKind, reason: str, **options: Any) -> Operation:
        self._refuse(Action(kind.value))
        operation = Operation(kind, reason=reason, options=options)
        self._journal(
            EntryKind.OPERATION_STARTED,
            operation_id=operation.id,
            operation_kind=kind.value,
            reason=reason,
            options=options,
        )
        self.operation = operation
        return operation

    def _journal(self, kind: EntryKind, must: bool = False, **data: Any) -> dict[str, Any]:
        """Append an entry; a write that fails raises JournalUnavailable (a 409 that
        says why), or with ``must`` is logged and the caller carries on."""
        try:
            return self.journal.append(kind.value, **data)
        except JournalWriteError as exc:
            self.log.error("jupyter-suspend: %s not journaled: %s", kind.value, exc)
            if must:
                return {"kind": kind.value, **data}
            reason = wording.journal_failed(exc)
            if self.state != State.FAILED:  # a failure already shown keeps its own words
                self.failure = Failure(reason, wording.JOURNAL_NEXT_STEP)
            raise JournalUnavailable(reason, state=self.state) from exc

    def _recorder(self, operation: Operation, cycle_id: str | None = None) -> Callable[..., None]:
        """The backend's journal hook for this operation (kinds of its own, never the core's).

        A resume's entries name the cycle they resume (``cycle_id``), so that a
        ``mark`` among their fields lands on that cycle's timeline."""

        def record(kind: str, **fields: Any) -> None:
            if kind in {k.value for k in EntryKind}:
                raise ValueError(f"{kind!r} is a core entry kind; prefix the backend's own kinds")
            if cycle_id is not None:
                fields.setdefault("cycle_id", cycle_id)
            try:
                self.journal.append(kind, operation_id=operation.id, **fields)
            except JournalWriteError as exc:
                self.log.error("jupyter-suspend: %s not journaled: %s", kind, exc)

        return record

    def _spawn(self, operation: Operation, script: Callable[[], Awaitable[None]]) -> None:
        self._task = asyncio.ensure_future(self._run(operation, script))

    async def _run(self, operation: Operation, script: Callable[[], Awaitable[None]]) -> None:
        """Run an operation script; whatever it raises, the operation ends and nothing stays claimed."""
        try:
            await script()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if isinstance(exc, JournalUnavailable):
                reason = f"{operation.kind.value} stopped: {exc}"
            else:
                self.log.exception("jupyter-suspend: %s crashed", operation.kind.value)
                reason = f"internal error during {operation.kind.value}: {exc}"
            if operation.in_progress:
                self._crashed(operation, reason)
            if isinstance(exc, JournalUnavailable) and self.state != State.FAILED:
                self.failure = Failure(reason, wording.JOURNAL_NEXT_STEP)  # the state says nothing of it

    def _crashed(self, operation: Operation, reason: str) -> None:
        if self.state == State.FLUSHING:  # nothing released yet: back to work
            self._abort(operation, FlushFailed(operation.kind.value, reason))
        elif State.FAILED in TRANSITIONS[self.state] and operation.kind != OperationKind.CHECKPOINT:
            self._fail(operation, reason, "See the server log; resume retries.")
        else:
            self._finish(operation, Outcome.FAILED, reason)

    # -- public operations --------------------------------------------------
    def start_suspend(
        self,
        reason: str = "",
        force: bool = False,
        *,
        origin: str = "user",
        workload_class: str | None = None,
        active_work_ended: float | None = None,
    ) -> Operation:
        """``origin``: who asked ("user", or "idle_policy" for an automatic suspend of a ``workload_class``);
        ``active_work_ended``: when the asker measured the last activity (the idle policy's reading),
        else the environment's last activity."""
        operation = self._claim(OperationKind.SUSPEND, reason, force=force)
        self._spawn(operation, lambda: self._run_suspend(operation, force, origin, workload_class, active_work_ended))
        return operation

    def start_resume(self, reason: str = "") -> Operation:
        operation = self._claim(OperationKind.RESUME, reason)
        self._spawn(operation, lambda: self._run_resume(operation))
        return operation

    def start_checkpoint(self, reason: str = "") -> Operation:
        operation = self._claim(OperationKind.CHECKPOINT, reason)
        self._spawn(operation, lambda: self._run_checkpoint(operation))
        return operation

    def acknowledge(self) -> None:
        """Leave the failed state and carry on working without a resume."""
        self._refuse(Action.ACKNOWLEDGE)
        self._transition(State.RUNNING, None, wording.ACKNOWLEDGED)
        self._resume_plan = None

    async def preflight(self) -> dict[str, Any]:
        """What a suspend would keep and lose, per kernel, without doing it."""
        # Probing kernels is kernel activity; remember when the user's own
        # activity ended so the suspend that follows can report it.
        self._activity_before_preflight = (time.time(), self.environment.last_activity())
        report, unsaved = await asyncio.gather(
            preflight_mod.preflight(
                self.environment,
                self.backend,
                state=self.state.value,
                can_suspend=bool(self.decide(Action.SUSPEND)),
                timeout=self.settings.flush_kernel_timeout,
            ),
            self._ask_to_save(None, "dry run", dry_run=True),
        )
        if unsaved is not None:
            report["unsaved_documents"] = unsaved.to_dict()
        return report

    async def _ask_to_save(self, operation_id: str | None, reason: str, *, dry_run: bool) -> SaveReport | None:
        if self.save_requests is None:
            return None
        return await self.save_requests.collect(operation_id=operation_id, reason=reason, dry_run=dry_run)

    async def _save_documents(self, operation: Operation) -> None:
        """Every connected JupyterLab page saves its unsaved documents; FlushFailed when one may be lost."""
        step = operation.step("flush.save")
        report = await self._ask_to_save(operation.id, operation.reason, dry_run=False)
        if report is None:
            step.finish("skipped", "no event bus: no JupyterLab page to ask")
            return
        detail = report.to_dict()
        if report.problems:
            reason = wording.unsaved_documents(report.problems)
            step.finish("failed", reason, **detail)
            raise FlushFailed("flush.save", reason)
        step.finish("ok", report.summary(), **detail)

    async def verify(
        self, kernel_id: str, names: list[str] | None = None, observed: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The live-state verdict on one kernel against its last suspend or checkpoint record."""
        result = await self.live_state.verify(
            kernel_id,
            names,
            observed,
            last_restore=self.last_restore,
            state=self.state.value,
            timeout=self.settings.flush_kernel_timeout,
        )
        self._journal(
            EntryKind.VERIFIED,
            must=True,
            kernel_id=kernel_id,
            verdict=result["verdict"],
            names=list(names or []),
            message=result["message"],
            recorded_operation_id=result["details"]["recorded"]["operation_id"],
        )
        return result

    async def record_kernel_checkpoint(self, kernel_id: str, checkpoint: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint the kernel wrote itself (``%checkpoint save``) leaves the live-state
        record a server-side checkpoint leaves; only for the kernel's own process."""
        record = next((k for k in await self.environment.kernels() if k.kernel_id == kernel_id), None)
        if record is None:
            raise VerifyError(404, f"kernel {kernel_id} is not running on this server: nothing recorded", kernel_id)
        canary = checkpoint.get("canary") or {}
        if record.pid is None or canary.get("pid") != record.pid:
            raise VerifyError(
                409,
                f"the canary of pid {canary.get('pid')} is not this kernel's process (pid {record.pid}): "
                "nothing recorded",
                kernel_id,
            )
        checkpoints = list(checkpoint.get("checkpoints") or [])
        kernel: dict[str, Any] = {
            "kernel_id": kernel_id,
            "path": record.path,
            "status": "checkpointed",
            "message": "written in the kernel by %checkpoint save",
            "checkpoints": checkpoints,
            "canary": canary,
            "checkpoint_dir": checkpoint.get("checkpoint_dir"),
            "pid": record.pid,
            "process_start": record.process_start,
        }
        entry = self._journal(EntryKind.CHECKPOINTED, operation_id=None, source="kernel", kernels=[kernel])
        self.live_state.record([kernel], "checkpoint", entry)
        return {
            "kernel_id": kernel_id,
            "recorded": True,
            "time": entry["time"],
            "names": [c["name"] for c in checkpoints],
        }

    def status(self) -> dict[str, Any]:
        return status_mod.status(self)

    def live_lost(self) -> list[dict[str, Any]]:
        """While ready after a live restore: the kernels it verified LIVE that were restarted or stopped
        since (their memory is not the restored one), from what the server knows of their processes."""
        if self.state != State.READY or self.restore != RestoreKind.LIVE or not self.last_restore:
            return []
        return live_lost(self.last_restore.get("verification"), self.environment.kernel_process)

    def timeline(self) -> dict[str, Any]:
        return timeline_mod.build(self.journal.read().entries)

    # -- suspend --------------------------------------------------------------
    def _active_work_ended(self) -> float | None:
        """Last user activity before this suspend flow started: a preflight
        (the suspend dialog's dry run) moments ago does not count as work."""
        current = self.environment.last_activity()
        if self._activity_before_preflight is not None:
            probed_at, before = self._activity_before_preflight
            if time.time() - probed_at < PREFLIGHT_ACTIVITY_WINDOW and before is not None:
                return before
        return current

    async def _flush(self, operation: Operation, kernels: list[KernelRecord], abort_on_busy: bool) -> list[KernelFlush]:
        root, timeout = self.settings.checkpoint_dir, self.settings.flush_kernel_timeout
        return await flush(self.environment, operation, kernels, root, timeout, abort_on_busy=abort_on_busy)

    async def _run_suspend(
        self,
        operation: Operation,
        force: bool,
        origin: str = "user",
        workload_class: str | None = None,
        measured_work_ended: float | None = None,
    ) -> None:
        active_work_ended = measured_work_ended if measured_work_ended is not None else self._active_work_ended()
        self._activity_before_preflight = None
        caps = self.backend.capabilities
        self._transition(State.FLUSHING, operation, wording.FLUSHING)
        kernels = await self.environment.kernels()
        self._cycle_id, self._resume_plan = operation.id, None
        self._journal(
            EntryKind.SUSPEND_REQUESTED,
            operation_id=operation.id,
            reason=operation.reason,
            origin=origin,
            workload_class=workload_class,
            active_work_ended=active_work_ended,
            kernels=[k.to_dict() for k in kernels],
            backend=self.backend.describe(),
        )
        self.last_suspend = {
            "operation_id": operation.id,
            "origin": origin,
            "reason": operation.reason,
            "workload_class": workload_class,
            "requested_at": operation.started,
            "active_work_ended": active_work_ended,
            "suspended_at": None,
        }
        try:
            await self._save_documents(operation)
            flushed = await self._flush(operation, kernels, abort_on_busy=not force and not caps.keeps_live_memory)
        except FlushFailed as exc:
            self._abort(operation, exc)
            return
        self._flushed_kernels = [f.to_dict() for f in flushed]
        entry = self._journal(EntryKind.FLUSHED, operation_id=operation.id, kernels=self._flushed_kernels)
        self.live_state.record(self._flushed_kernels, "suspend", entry)

        # The plan to resume is durable before anything is released.
        plan = {"kernels": [k.to_dict() for k in kernels]}
        self._journal(EntryKind.RELEASE_STARTED, operation_id=operation.id, resume_plan=plan)
        self._transition(State.SNAPSHOTTING, operation, wording.RELEASING)
        self._resume_plan = plan
        step = operation.step("release")
        try:
            outcome = await self.backend.release(
                ReleaseContext(operation.id, self.environment, kernels, operation.reason, self._recorder(operation))
            )
        except FlushFailed as exc:
            step.finish("failed", exc.reason)
            self._abort(operation, exc)
            return
        except Exception as exc:
            self.log.exception("jupyter-suspend: release failed")
            step.finish("failed", str(exc))
            self._journal(EntryKind.RELEASED, operation_id=operation.id, partial=True, resume_plan=plan, error=str(exc))
            self._fail(operation, *wording.release_failed(caps, str(exc)))
            return
        if isinstance(outcome, Suspended):
            released = not_measured_as_null(outcome.released.to_dict())
            self._journal(
                EntryKind.RELEASED,
                operation_id=operation.id,
                environment_stopped_at=outcome.environment_stopped_at,
                node_released_at=outcome.node_released_at,
                released=released,
                resume_plan=outcome.resume_plan,
            )
            self._resume_plan = outcome.resume_plan
            self.last_suspend = {**(self.last_suspend or {}), "suspended_at": time.time()}
            step.finish("ok", "environment released", released=released)
            self._transition(State.SUSPENDED, operation, wording.suspended(caps, outcome))
            self._finish(operation, Outcome.SUCCEEDED, "suspended")
        else:
            step.finish("ok", f"returned live from snapshot {outcome.snapshot}")
            await self._returned_live(operation, outcome)

    def _abort(self, operation: Operation, exc: FlushFailed) -> None:
        message = wording.abort(exc.reason)
        self._transition(State.RUNNING, operation, message, must=True, aborted_step=exc.step)
        self._resume_plan = None
        self._finish(operation, Outcome.ABORTED, message)

    async def _returned_live(self, operation: Operation, outcome: ReturnedLive) -> None:
        """The server was frozen with the pod and continues after a restore."""
        self._journal(
            EntryKind.RELEASED,
            operation_id=operation.id,
            environment_stopped_at=outcome.environment_stopped_at,
            node_released_at=outcome.environment_stopped_at,
            snapshot=outcome.snapshot,
            resume_plan=None,
        )
        self._resume_plan = None
        self._transition(State.RESTORING, operation, wording.returned_live(outcome.snapshot))
        verdicts = await self.live_state.verify_canaries(self._flushed_kernels, self.settings.flush_kernel_timeout)
        live = bool(verdicts) and all(v["verdict"] == "LIVE" for v in verdicts)
        restore = RestoreKind.LIVE if live else RestoreKind.COLD
        self._ready(
            operation,
            restore,
            wording.ready(restore.value),
            f"returned {restore.value}",
            cycle_id=operation.id,
            resume_requested_at=outcome.restored_at,
            restored_at=outcome.restored_at,
            first_cell_runnable_at=time.time(),
            verification=verdicts,
        )

    def _ready(self, operation: Operation, restore: RestoreKind, message: str, summary: str, **entry: Any) -> None:
        """The environment is back: journal what was restored, then ready."""
        self.restore = restore
        self.last_restore = restore_report(
            self._journal(EntryKind.RESTORED, operation_id=operation.id, restore=restore.value, **entry)
        )
        self._transition(State.READY, operation, message, checkpoints_restored=entry.get("checkpoints_restored"))
        self._resume_plan = None
        self._finish(operation, Outcome.SUCCEEDED, summary)

    # -- resume ---------------------------------------------------------------
    async def _run_resume(self, operation: Operation, cold_start: bool = False) -> None:
        """``cold_start``: a new server process resumes by itself (:meth:`_resume_at_start`)."""
        assert self._resume_plan is not None
        resume_requested_at = time.time()
        cycle_id = self._cycle_id or operation.id
        self._journal(EntryKind.RESUME_REQUESTED, operation_id=operation.id, cycle_id=cycle_id)
        caps = self.backend.capabilities
        if cold_start:
            message = wording.resuming_after_cold_start(caps, self.settings.restore_checkpoints_on_resume)
        else:
            message = wording.resuming(caps)
        self._transition(State.RESTORING, operation, message)
        step = operation.step("restore")
        kernel_env = dict(self.settings.kernel_env or {})
        context = RestoreContext(
            operation.id,
            cycle_id,
            self.environment,
            self._resume_plan,
            kernel_env,
            self._recorder(operation, cycle_id),
            # What the kernels will be asked to restore: a backend may have them begin at their start.
            checkpoints_to_restore(self._flushed_kernels) if self.settings.restore_checkpoints_on_resume else {},
        )
        waited_since: float | None = None
        while True:
            try:
                outcome = await self.backend.restore(context)
                break
            except CapacityUnavailable as exc:
                if waited_since is None:
                    # Monotonic: the wall clock jumps when a restored pod comes back.
                    waited_since = time.monotonic()
                    self._journal(EntryKind.CAPACITY_WAIT, operation_id=operation.id, reason=exc.reason)
                waited = time.monotonic() - waited_since
                if waited > self.settings.capacity_max_wait:
                    step.finish("failed", exc.reason)
                    self._fail(operation, *wording.no_capacity(self.settings.capacity_max_wait, exc.reason))
                    return
                if self.state != State.WAITING_FOR_CAPACITY:
                    self._transition(State.WAITING_FOR_CAPACITY, operation, exc.reason)
                # Never sleep past the deadline: the last try comes when the wait is due to end.
                await asyncio.sleep(max(0.0, min(exc.retry_after, self.settings.capacity_max_wait - waited + 0.01)))
            except RestoreFailed as exc:
                step.finish("failed", exc.reason)
                self._fail(operation, exc.reason, exc.next_step)
                return
        if self.state == State.WAITING_FOR_CAPACITY:
            self._transition(State.RESTORING, operation, wording.CAPACITY_BACK)
        kernels = [k.__dict__ for k in outcome.kernels]
        runnable = sum(1 for k in outcome.kernels if k.runnable_at)
        step.finish("ok", f"{runnable} of {len(kernels)} kernel(s) runnable", kernels=kernels)
        reloaded: dict[str, Any] = {}
        if self.settings.restore_checkpoints_on_resume:
            timeout = self.settings.flush_kernel_timeout
            flushed = self._flushed_kernels
            reloaded = await reload_application_checkpoints(
                self.environment, operation, flushed, outcome.kernels, timeout
            )
        message = wording.ready(
            outcome.restore.value, [f"{k.path or k.kernel_id}: {k.error}" for k in outcome.kernels if k.error]
        )
        self._ready(
            operation,
            outcome.restore,
            message,
            message,
            cycle_id=cycle_id,
            resume_requested_at=resume_requested_at,
            capacity_available_at=outcome.capacity_available_at,
            restored_at=outcome.restored_at,
            first_cell_runnable_at=outcome.first_cell_runnable_at,
            kernels=kernels,
            checkpoints_restored=reloaded,
        )

    # -- checkpoint -----------------------------------------------------------
    async def _run_checkpoint(self, operation: Operation) -> None:
        try:
            results = await self._flush(operation, await self.environment.kernels(), abort_on_busy=False)
        except FlushFailed as exc:
            self._finish(operation, Outcome.FAILED, f"checkpoint failed: {exc.reason}")
            return
        kernels = [r.to_dict() for r in results]
        entry = self._journal(EntryKind.CHECKPOINTED, operation_id=operation.id, kernels=kernels)
        self.live_state.record(kernels, "checkpoint", entry)
        self._finish(operation, Outcome.SUCCEEDED, "flushed")
