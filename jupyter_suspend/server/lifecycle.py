"""The lifecycle core: one state machine, one operation at a time, journaled.

Knows nothing of tornado. The server extension wires it to a
:class:`~jupyter_suspend.workspace.Workspace`, a backend, a journal on the
persistent volume and an event sink; the handlers only call the public
methods here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import live_state as verify_mod
from . import timeline as timeline_mod
from .backends.base import Backend, ReleaseContext, RestoreContext, ReturnedLive, Suspended
from .flush import KernelFlush, checkpoint_dir_for, flush_kernels, flush_notebooks
from .journal import BOOT_ID, Journal, utc_iso
from .jupyter_environment import KernelRecord, KernelReply, Workspace
from .states import (
    STEADY_STATES,
    TRANSITIONS,
    CapacityUnavailable,
    FlushFailed,
    IllegalState,
    Operation,
    OperationInProgress,
    OperationKind,
    Outcome,
    RestoreFailed,
    RestoreKind,
    State,
)

EventSink = Callable[[dict[str, Any]], None]
#: Seconds during which a preflight counts as the start of the suspend flow.
PREFLIGHT_ACTIVITY_WINDOW = 300.0
#: How long a preflight waits for a kernel the server reports busy.
PREFLIGHT_BUSY_GRACE_SECONDS = 1.0


@dataclass
class LifecycleSettings:
    checkpoint_dir: Path
    flush_kernel_timeout: float = 60.0
    restore_checkpoints_on_resume: bool = True
    capacity_max_wait: float = 3600.0
    kernel_env: dict[str, str] | None = None


@dataclass
class Failure:
    reason: str
    next_step: str

    def to_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "next_step": self.next_step}


class Lifecycle:
    def __init__(
        self,
        *,
        backend: Backend,
        workspace: Workspace,
        journal: Journal,
        settings: LifecycleSettings,
        emit: EventSink | None = None,
        log: logging.Logger | None = None,
    ):
        self.backend = backend
        self.workspace = workspace
        self.journal = journal
        self.settings = settings
        self._emit = emit or (lambda data: None)
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
        self._task: asyncio.Task[None] | None = None
        #: What the last suspend recorded, needed to resume (also in the journal).
        self._restore_record: dict[str, Any] | None = None
        self._cycle_id: str | None = None
        self._flushed: list[dict[str, Any]] = []
        self._activity_before_preflight: tuple[float, float | None] | None = None
        #: kernel id -> the live-state record (canary, per-name hashes) of its
        #: last suspend or checkpoint, which verification compares against.
        self._records: dict[str, dict[str, Any]] = {}

    # -- start-up -------------------------------------------------------------
    def recover(self) -> None:
        """Read the journal a previous process left and decide where we are."""
        readout = self.journal.read()
        self.journal_problems = [p.to_dict() for p in self.journal.startup_problems]
        for problem in self.journal.startup_problems:
            self.log.warning("jupyter-suspend journal line %s is %s: %r", problem.line, problem.kind, problem.excerpt)
        last_transition = None
        for entry in readout.entries:
            if entry["kind"] in {"transition", "recovered"}:
                last_transition = entry
                if entry.get("to") in {State.RUNNING.value, State.READY.value}:
                    self._restore_record = None  # resumed or acknowledged: nothing left to resume
            elif entry["kind"] == "suspend_requested":
                self._cycle_id = entry.get("operation_id")
                self._restore_record = None
                self._flushed = []
            elif entry["kind"] == "flushed":
                self._flushed = entry.get("kernels", [])
                self._remember(self._flushed, "suspend", entry)
            elif entry["kind"] == "checkpointed":
                self._remember(entry.get("kernels", []), "checkpoint", entry)
            elif entry["kind"] == "released":
                self._restore_record = entry.get("restore_record")
            elif entry["kind"] == "restored":
                self.last_restore = _restore_report(entry)
        if last_transition is None:
            self.journal.append("server_started", backend=self.backend.name, state=self.state.value)
            return
        try:
            last_state = State(last_transition["to"])
        except (KeyError, ValueError):
            last_state = State.RUNNING
        verdict = self.backend.interpret_cold_start(last_state, last_transition)
        if verdict.state in {State.SUSPENDED, State.FAILED} and self._restore_record is None:
            # Nothing recorded to resume from: the honest state is running.
            verdict.state = State.RUNNING
        self.state = verdict.state
        self.restore = verdict.restore
        self.message = verdict.message
        if verdict.state == State.FAILED:
            self.failure = Failure(verdict.message, verdict.next_step)
        if verdict.message:
            self.cold_start = {
                "previous_state": last_state.value,
                "previous_time": last_transition.get("time"),
                "message": verdict.message,
                "next_step": verdict.next_step,
            }
        self.journal.append(
            "recovered",
            to=self.state.value,
            previous_state=last_state.value,
            previous_boot_id=last_transition.get("boot_id"),
            message=verdict.message,
            restore=self.restore.value if self.restore else None,
            operation_id=self._cycle_id,
        )
        self.journal.append("server_started", backend=self.backend.name, state=self.state.value)

    async def stop(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # shutting down
                await task

    # -- state machine ------------------------------------------------------
    def _transition(self, new: State, operation: Operation | None, message: str = "", **detail: Any) -> None:
        if new not in TRANSITIONS[self.state]:
            raise RuntimeError(f"illegal transition {self.state.value} -> {new.value}")
        previous = self.state
        self.state = new
        self.since = time.time()
        self.message = message
        if new != State.FAILED:
            self.failure = None
        if new != State.READY:
            self.restore = None
        self.journal.append(
            "transition",
            to=new.value,
            **{"from": previous.value},
            operation_id=operation.id if operation else None,
            operation_kind=operation.kind.value if operation else None,
            message=message,
            restore=self.restore.value if self.restore else None,
            failure=self.failure.to_dict() if self.failure else None,
            **detail,
        )
        self._emit(self._event(previous, operation))

    def _event(self, previous: State, operation: Operation | None) -> dict[str, Any]:
        data: dict[str, Any] = {
            "state": self.state.value,
            "previous_state": previous.value,
            "message": self.message,
            "backend": self.backend.name,
        }
        if operation is not None:
            data["operation_id"] = operation.id
            data["operation_kind"] = operation.kind.value
        if self.restore is not None:
            data["restore"] = self.restore.value
        if self.failure is not None:
            data["reason"] = self.failure.reason
            data["next_step"] = self.failure.next_step
        return data

    def _fail(self, operation: Operation, reason: str, next_step: str) -> None:
        self.failure = Failure(reason, next_step)
        self._transition(State.FAILED, operation, reason)
        self._finish(operation, Outcome.FAILED, reason)

    def _finish(self, operation: Operation, outcome: Outcome, message: str = "") -> None:
        operation.finish(outcome, message)
        self.journal.append(
            "operation_finished",
            operation_id=operation.id,
            operation_kind=operation.kind.value,
            outcome=outcome.value,
            message=message,
            steps=[s.to_dict() for s in operation.steps],
        )
        self._emit(
            {
                "state": self.state.value,
                "previous_state": self.state.value,
                "message": message,
                "backend": self.backend.name,
                "operation_id": operation.id,
                "operation_kind": operation.kind.value,
                "outcome": outcome.value,
            }
        )

    def _claim(self, kind: OperationKind, reason: str, allowed: frozenset[State], **options: Any) -> Operation:
        current = self.operation
        if current is not None and current.in_progress:
            raise OperationInProgress(
                f"a {current.kind.value} operation ({current.id}) is already running",
                state=self.state,
                operation=current,
            )
        if self.state not in allowed:
            raise IllegalState(f"cannot {kind.value} while {self.state.value}", state=self.state)
        operation = Operation(kind, reason=reason, options=options)
        self.operation = operation
        self.journal.append(
            "operation_started", operation_id=operation.id, operation_kind=kind.value, reason=reason, options=options
        )
        return operation

    def _spawn(self, coro: Any) -> None:
        self._task = asyncio.ensure_future(coro)

    async def wait(self) -> None:
        """Wait for the running operation, if any (tests and magics use it)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    # -- public operations --------------------------------------------------
    def start_suspend(self, reason: str = "", force: bool = False) -> Operation:
        allowed = STEADY_STATES
        # From failed only if nothing recorded is waiting to be resumed:
        # suspending again would forget that environment.
        if self._restore_record is None:
            allowed |= {State.FAILED}
        operation = self._claim(OperationKind.SUSPEND, reason, allowed, force=force)
        self._spawn(self._run_suspend(operation, force))
        return operation

    def start_resume(self, reason: str = "") -> Operation:
        if not self.backend.capabilities.resume_from_server:
            raise IllegalState(
                f"the {self.backend.name} backend is resumed by the platform, not by this server",
                state=self.state,
            )
        allowed = frozenset({State.SUSPENDED}) | (
            frozenset({State.FAILED}) if self._restore_record is not None else frozenset()
        )
        operation = self._claim(OperationKind.RESUME, reason, allowed)
        self._spawn(self._run_resume(operation))
        return operation

    def start_checkpoint(self, reason: str = "") -> Operation:
        operation = self._claim(OperationKind.CHECKPOINT, reason, STEADY_STATES | {State.FAILED})
        self._spawn(self._run_checkpoint(operation))
        return operation

    def acknowledge(self) -> None:
        """Leave the failed state and carry on working without a resume."""
        current = self.operation
        if current is not None and current.in_progress:
            raise OperationInProgress(
                f"a {current.kind.value} operation ({current.id}) is already running",
                state=self.state,
                operation=current,
            )
        if self.state != State.FAILED:
            raise IllegalState(f"nothing to acknowledge while {self.state.value}", state=self.state)
        self._restore_record = None
        self._transition(State.RUNNING, None, "failure acknowledged by the user")

    async def preflight(self) -> dict[str, Any]:
        """What a suspend would keep and lose, per kernel, without doing it."""
        caps = self.backend.capabilities
        # Probing kernels is kernel activity; remember when the user's own
        # activity ended so the suspend that follows can report it.
        self._activity_before_preflight = (time.time(), self.workspace.last_activity())
        kernels = await self.workspace.kernels()

        async def probe(record: KernelRecord) -> KernelReply:
            timeout = min(5.0, self.settings.flush_kernel_timeout)
            reported_busy = record.execution_state == "busy"
            if reported_busy:
                # A busy kernel could only answer after its cell ends (and the
                # kernel that runs %suspend --dry-run is busy running it), so
                # it gets a short chance only. Short, not none: the server's
                # execution_state lags a moment behind a cell that just ended.
                timeout = min(timeout, PREFLIGHT_BUSY_GRACE_SECONDS)
            reply = await self.workspace.kernel_request(record.kernel_id, "probe", timeout)
            if reported_busy and reply.outcome in ("timeout", "expired"):
                return KernelReply(record.kernel_id, "timeout", "kernel is busy running a cell")
            return reply

        probes = await asyncio.gather(*(probe(k) for k in kernels))
        per_kernel = [
            self._kernel_preflight(record, reply.outcome, reply.content, reply.message)
            for record, reply in zip(kernels, probes, strict=True)
        ]
        blocking = [k for k in per_kernel if k["helper"] == "busy" and not caps.keeps_live_memory]
        return {
            "state": self.state.value,
            "backend": self.backend.describe(),
            "keeps": {
                "files": caps.keeps_files,
                "application_checkpoints": caps.keeps_application_checkpoints,
                "live_memory": caps.keeps_live_memory,
                "gpu_memory": caps.keeps_gpu_memory,
            },
            "releases": {"kernel_memory": caps.releases_kernel_memory, "node": caps.releases_node},
            "kernels": per_kernel,
            "notes": await self.backend.preflight_notes(self.workspace),
            "would_abort": [
                f"kernel {k['kernel_id']} ({k['path'] or 'no notebook'}) is busy; wait, interrupt it, or use force"
                for k in blocking
            ],
            "can_suspend": self.state in STEADY_STATES and not (self.operation and self.operation.in_progress),
        }

    def _kernel_preflight(
        self, record: KernelRecord, outcome: str, content: dict[str, Any], message: str
    ) -> dict[str, Any]:
        caps = self.backend.capabilities
        helper = {"ok": "loaded", "error": "error", "absent": "absent", "timeout": "busy", "expired": "busy"}.get(
            outcome, "not_running"
        )
        registered = list(content.get("registered", [])) if outcome == "ok" else []
        uses_gpu = bool(content.get("uses_gpu", False))
        kept = ["notebook file on disk"] if record.type == "notebook" and caps.keeps_files else []
        lost = []
        if registered and caps.keeps_application_checkpoints:
            kept.append("application checkpoints: " + ", ".join(registered))
        if caps.keeps_live_memory:
            kept.append("all variables in kernel memory")
        else:
            lost.append("variables not registered for checkpoints" if registered else "all variables in kernel memory")
        if uses_gpu:
            (kept if caps.keeps_gpu_memory else lost).append("tensors in GPU memory")
        return {
            "kernel_id": record.kernel_id,
            "kernel_name": record.kernel_name,
            "path": record.path,
            "session_id": record.session_id,
            "execution_state": record.execution_state,
            "helper": helper,
            "helper_message": message,
            "registered": registered,
            "keeps": kept,
            "loses": lost,
        }

    # -- the operations themselves -----------------------------------------
    async def _flush(self, operation: Operation, kernels: list[KernelRecord], force: bool) -> list[KernelFlush]:
        step = operation.step("flush.notebooks")
        try:
            notebooks = await flush_notebooks(self.workspace, kernels)
        except FlushFailed as exc:
            step.finish("failed", exc.reason)
            raise
        step.finish("ok", f"{len(notebooks)} notebook(s) on disk", notebooks=[n.to_dict() for n in notebooks])

        step = operation.step("flush.kernels")
        results = await flush_kernels(
            self.workspace, kernels, self.settings.checkpoint_dir, self.settings.flush_kernel_timeout, operation.id
        )
        detail = {"kernels": [r.to_dict() for r in results]}
        failed = [r for r in results if r.status == "failed"]
        if failed:
            reason = "; ".join(f"{r.path or r.kernel_id}: {r.message}" for r in failed)
            step.finish("failed", f"application checkpoint failed: {reason}", **detail)
            raise FlushFailed("flush.kernels", f"application checkpoint failed: {reason}")
        busy = [r for r in results if r.status == "busy_skipped"]
        # A busy kernel's live state survives only on a backend that keeps memory.
        loses_busy_work = not self.backend.capabilities.keeps_live_memory
        if busy and operation.kind == OperationKind.SUSPEND and not force and loses_busy_work:
            names = ", ".join(r.path or r.kernel_id for r in busy)
            message = (
                f"kernel busy: checkpoint skipped for {names}; suspending now would lose its work. "
                "Wait for the cell to finish or interrupt it, or suspend with force."
            )
            step.finish("failed", message, **detail)
            raise FlushFailed("flush.kernels", message)
        summary = ", ".join(f"{r.status}: {sum(1 for x in results if x.status == r.status)}" for r in results)
        step.finish("ok", summary or "no kernels", **detail)
        return results

    def _active_work_ended(self) -> float | None:
        """Last user activity before this suspend flow started: a preflight
        (the suspend dialog's dry run) moments ago does not count as work."""
        current = self.workspace.last_activity()
        if self._activity_before_preflight is not None:
            probed_at, before = self._activity_before_preflight
            if time.time() - probed_at < PREFLIGHT_ACTIVITY_WINDOW and before is not None:
                return before
        return current

    async def _run_suspend(self, operation: Operation, force: bool) -> None:
        active_work_ended = self._active_work_ended()
        self._activity_before_preflight = None
        try:
            self._transition(State.FLUSHING, operation, "saving notebooks and application checkpoints")
            kernels = await self.workspace.kernels()
            self._cycle_id = operation.id
            self._restore_record = None
            self.journal.append(
                "suspend_requested",
                operation_id=operation.id,
                reason=operation.reason,
                active_work_ended=active_work_ended,
                kernels=[k.to_dict() for k in kernels],
                backend=self.backend.describe(),
            )
            try:
                flushed = await self._flush(operation, kernels, force)
            except FlushFailed as exc:
                self._abort(operation, exc)
                return
            self._flushed = [f.to_dict() for f in flushed]
            entry = self.journal.append("flushed", operation_id=operation.id, kernels=self._flushed)
            self._remember(self._flushed, "suspend", entry)

            self._transition(State.SNAPSHOTTING, operation, "releasing the environment")
            step = operation.step("release")
            try:
                outcome = await self.backend.release(
                    ReleaseContext(operation.id, self.workspace, kernels, operation.reason)
                )
            except FlushFailed as exc:
                step.finish("failed", exc.reason)
                self._abort(operation, exc)
                return
            except Exception as exc:
                self.log.exception("jupyter-suspend: release failed")
                step.finish("failed", str(exc))
                self._restore_record = {"kernels": [k.to_dict() for k in kernels]}
                self.journal.append(
                    "released",
                    operation_id=operation.id,
                    partial=True,
                    restore_record=self._restore_record,
                    error=str(exc),
                )
                self._fail(
                    operation,
                    f"releasing the environment failed part-way: {exc}",
                    "Notebooks and checkpoints were flushed. Resume restarts the recorded sessions; "
                    "or acknowledge and start kernels by hand.",
                )
                return
            if isinstance(outcome, Suspended):
                self._record_suspended(operation, outcome)
                step.finish("ok", "environment released", released=outcome.released.to_dict())
                self._transition(State.SUSPENDED, operation, "suspended: kernels stopped, memory released")
                self._finish(operation, Outcome.SUCCEEDED, "suspended")
            else:
                step.finish("ok", f"returned live from snapshot {outcome.snapshot}")
                await self._returned_live(operation, outcome)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not leave the lock held
            self.log.exception("jupyter-suspend: suspend crashed")
            if self.state in {State.FLUSHING}:
                self._abort(operation, FlushFailed("suspend", f"internal error: {exc}"))
            elif operation.in_progress:
                self.failure = Failure(f"internal error during suspend: {exc}", "See the server log; resume retries.")
                if State.FAILED in TRANSITIONS[self.state]:
                    self._transition(State.FAILED, operation, str(exc))
                self._finish(operation, Outcome.FAILED, str(exc))

    def _abort(self, operation: Operation, exc: FlushFailed) -> None:
        message = f"suspend aborted, nothing was released: {exc.reason}"
        self._transition(State.RUNNING, operation, message, aborted_step=exc.step)
        self._finish(operation, Outcome.ABORTED, message)

    def _record_suspended(self, operation: Operation, outcome: Suspended) -> None:
        self._restore_record = outcome.restore_record
        self.journal.append(
            "released",
            operation_id=operation.id,
            environment_stopped_at=outcome.environment_stopped_at,
            node_released_at=outcome.node_released_at,
            released=outcome.released.to_dict(),
            restore_record=outcome.restore_record,
        )

    async def _returned_live(self, operation: Operation, outcome: ReturnedLive) -> None:
        """The server was frozen with the pod and continues after a restore."""
        self.journal.append(
            "released",
            operation_id=operation.id,
            environment_stopped_at=outcome.environment_stopped_at,
            node_released_at=outcome.environment_stopped_at,
            snapshot=outcome.snapshot,
            restore_record=None,
        )
        self._transition(State.RESTORING, operation, f"restored from snapshot {outcome.snapshot}; verifying")
        verdicts = await self._verify_canaries()
        live = bool(verdicts) and all(v["verdict"] == "LIVE" for v in verdicts)
        self.restore = RestoreKind.LIVE if live else RestoreKind.COLD
        first_cell = time.time()
        entry = self.journal.append(
            "restored",
            operation_id=operation.id,
            cycle_id=operation.id,
            resume_requested_at=outcome.restored_at,
            restored_at=outcome.restored_at,
            first_cell_runnable_at=first_cell,
            restore=self.restore.value,
            verification=verdicts,
        )
        self.last_restore = _restore_report(entry)
        self._transition(State.READY, operation, f"ready ({self.restore.value} restore)")
        self._finish(operation, Outcome.SUCCEEDED, f"returned {self.restore.value}")

    async def _verify_canaries(self) -> list[dict[str, Any]]:
        """Compare each kernel's live-state canary with the one recorded at suspend."""
        results = []
        for flushed in self._flushed:
            kernel_id = flushed["kernel_id"]
            if not flushed.get("canary"):
                continue
            record = self._records.get(kernel_id) or verify_mod.record_from_flush(flushed, "suspend", None, None)
            try:
                observed = await self._observe(kernel_id, [], self.settings.flush_kernel_timeout)
            except verify_mod.VerifyError as exc:
                # Unproven is not live.
                results.append({"kernel_id": kernel_id, "verdict": "COLD", "message": f"not verified: {exc}"})
                continue
            result = verify_mod.compare(kernel_id, observed, record, None, [])
            results.append({k: result[k] for k in ("kernel_id", "verdict", "message", "details")})
        return results

    # -- live-state verification ------------------------------------------------
    def _remember(self, kernels: list[dict[str, Any]], source: str, entry: dict[str, Any]) -> None:
        """Keep what identifies each kernel's process at this suspend or checkpoint:
        its canary when the helper answered, else the pid and start time the
        server saw (enough to prove a restart, never enough to claim LIVE)."""
        for kernel in kernels:
            kernel_id = kernel.get("kernel_id")
            if not kernel_id:
                continue
            if kernel.get("status") == "checkpointed" and kernel.get("canary"):
                self._records[kernel_id] = verify_mod.record_from_flush(
                    kernel, source, entry.get("operation_id"), entry.get("time")
                )
                continue
            if kernel.get("pid") is None:
                continue
            known = self._records.get(kernel_id, {}).get("canary", {})
            if known.get("hash") and known.get("pid") == kernel["pid"]:
                continue  # the same process's canary from an earlier checkpoint says more
            identity = {"pid": kernel["pid"], "process_start": kernel.get("process_start")}
            self._records[kernel_id] = verify_mod.record_from_flush(
                {**kernel, "canary": identity}, source, entry.get("operation_id"), entry.get("time")
            )

    async def _observe(self, kernel_id: str, names: list[str], timeout: float) -> dict[str, Any]:
        """Ask a kernel for its observation (or look at it from outside when it
        has no helper); VerifyError when it cannot answer within ``timeout``."""
        records = {k.kernel_id: k for k in await self.workspace.kernels()}
        record = records.get(kernel_id)
        if record is None:
            raise verify_mod.VerifyError(
                409, f"kernel {kernel_id} is not running (state {self.state.value}): nothing to observe", kernel_id
            )
        reply = await self.workspace.kernel_request(kernel_id, "verify", timeout, names=names)
        if reply.outcome in {"timeout", "expired"}:
            raise verify_mod.VerifyError(
                409, f"kernel {kernel_id} is busy: run %verify_live_state in it, or retry when it is idle", kernel_id
            )
        if reply.outcome == "ok" and isinstance(reply.content.get("observed"), dict):
            observed: dict[str, Any] = reply.content["observed"]
            return observed
        if reply.outcome == "absent":
            return verify_mod.external_observation(record.pid, record.process_start, names)
        raise verify_mod.VerifyError(409, f"kernel {kernel_id} could not be observed: {reply.message}", kernel_id)

    async def verify(
        self, kernel_id: str, names: list[str] | None = None, observed: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The verdict on one kernel against its last suspend or checkpoint record.

        With ``observed`` (sent by the kernel itself, busy running the magic)
        only compare; otherwise ask the kernel.
        """
        record = self._records.get(kernel_id)
        if record is None:
            running = kernel_id in {k.kernel_id for k in await self.workspace.kernels()}
            raise verify_mod.VerifyError(
                404,
                f"no suspend or checkpoint recorded for kernel {kernel_id}: nothing to compare with"
                + (" (suspend or checkpoint first)" if running else ""),
                kernel_id,
            )
        if observed is None:
            # The state the server tracks can lag; a busy-looking kernel gets a short chance.
            busy = any(k.kernel_id == kernel_id and k.execution_state == "busy" for k in await self.workspace.kernels())
            timeout = min(2.0 if busy else 10.0, self.settings.flush_kernel_timeout)
            observed = await self._observe(kernel_id, list(names or []), timeout)
        result = verify_mod.compare(kernel_id, observed, record, self.last_restore, names)
        self.journal.append(
            "verified",
            kernel_id=kernel_id,
            verdict=result["verdict"],
            names=list(names or []),
            message=result["message"],
            recorded_operation_id=record.get("operation_id"),
        )
        return result

    async def _run_resume(self, operation: Operation) -> None:
        assert self._restore_record is not None
        resume_requested_at = time.time()
        cycle_id = self._cycle_id or operation.id
        self.journal.append("resume_requested", operation_id=operation.id, cycle_id=cycle_id)
        try:
            self._transition(State.RESTORING, operation, "restarting the recorded sessions")
            step = operation.step("restore")
            waited_since: float | None = None
            while True:
                try:
                    outcome = await self.backend.restore(
                        RestoreContext(
                            operation.id,
                            cycle_id,
                            self.workspace,
                            self._restore_record,
                            dict(self.settings.kernel_env or {}),
                        )
                    )
                    break
                except CapacityUnavailable as exc:
                    if waited_since is None:
                        waited_since = time.time()
                        self.journal.append("capacity_wait", operation_id=operation.id, reason=exc.reason)
                    if time.time() - waited_since > self.settings.capacity_max_wait:
                        step.finish("failed", exc.reason)
                        self._fail(
                            operation,
                            f"no capacity after {self.settings.capacity_max_wait:g}s: {exc.reason}",
                            "Resume again later, or recover the work from the notebook and its checkpoints "
                            "on another machine.",
                        )
                        return
                    if self.state != State.WAITING_FOR_CAPACITY:
                        self._transition(State.WAITING_FOR_CAPACITY, operation, exc.reason)
                    await asyncio.sleep(exc.retry_after)
                    continue
                except RestoreFailed as exc:
                    step.finish("failed", exc.reason)
                    self._fail(operation, exc.reason, exc.next_step)
                    return
            if self.state == State.WAITING_FOR_CAPACITY:
                self._transition(State.RESTORING, operation, "capacity available; restarting")
            step.finish(
                "ok",
                f"{sum(1 for k in outcome.kernels if k.runnable_at)} of {len(outcome.kernels)} kernel(s) runnable",
                kernels=[k.__dict__ for k in outcome.kernels],
            )
            restored_checkpoints = await self._restore_checkpoints(operation, outcome.kernels)
            self.restore = outcome.restore
            entry = self.journal.append(
                "restored",
                operation_id=operation.id,
                cycle_id=cycle_id,
                resume_requested_at=resume_requested_at,
                capacity_available_at=outcome.capacity_available_at,
                restored_at=outcome.restored_at,
                first_cell_runnable_at=outcome.first_cell_runnable_at,
                restore=outcome.restore.value,
                kernels=[k.__dict__ for k in outcome.kernels],
                checkpoints_restored=restored_checkpoints,
            )
            self.last_restore = _restore_report(entry)
            self._restore_record = None
            errors = [k for k in outcome.kernels if k.error]
            message = f"ready ({outcome.restore.value} restore)"
            if errors:
                message += "; " + "; ".join(f"{k.path or k.kernel_id}: {k.error}" for k in errors)
            self._transition(State.READY, operation, message, checkpoints_restored=restored_checkpoints)
            self._finish(operation, Outcome.SUCCEEDED, message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.log.exception("jupyter-suspend: resume crashed")
            if operation.in_progress:
                self._fail(operation, f"internal error during resume: {exc}", "See the server log; resume retries.")

    async def _restore_checkpoints(self, operation: Operation, kernels: list[Any]) -> dict[str, Any]:
        """Put application checkpoints back into kernels that wrote them."""
        if not self.settings.restore_checkpoints_on_resume:
            return {}
        step = operation.step("restore.checkpoints")
        by_kernel = {f["kernel_id"]: f for f in self._flushed if f.get("status") == "checkpointed"}
        restored: dict[str, Any] = {}
        for kernel in kernels:
            flushed = by_kernel.get(kernel.kernel_id)
            if flushed is None or kernel.runnable_at is None:
                continue
            names = [c.get("name") for c in flushed.get("checkpoints", []) if c.get("name")]
            reply = await self.workspace.load_helper_and_request(
                kernel.kernel_id,
                "restore",
                self.settings.flush_kernel_timeout,
                checkpoint_dir=flushed.get("checkpoint_dir"),
                names=names,
                operation_id=operation.id,
            )
            restored[kernel.kernel_id] = {
                "path": kernel.path,
                "outcome": reply.outcome,
                "message": reply.message,
                "restored": reply.content.get("restored", []),
                "missing": reply.content.get("missing", []),
                "failed": reply.content.get("failed", []),
            }
        failed = [r for r in restored.values() if r["outcome"] != "ok"]
        step.finish("failed" if failed else "ok", f"{len(restored) - len(failed)} kernel(s) restored", kernels=restored)
        return restored

    async def _run_checkpoint(self, operation: Operation) -> None:
        try:
            kernels = await self.workspace.kernels()
            try:
                results = await self._flush(operation, kernels, force=True)
            except FlushFailed as exc:
                self._finish(operation, Outcome.FAILED, f"checkpoint failed: {exc.reason}")
                return
            entry = self.journal.append(
                "checkpointed", operation_id=operation.id, kernels=[r.to_dict() for r in results]
            )
            self._remember(entry["kernels"], "checkpoint", entry)
            self._finish(operation, Outcome.SUCCEEDED, "flushed")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.log.exception("jupyter-suspend: checkpoint crashed")
            if operation.in_progress:
                self._finish(operation, Outcome.FAILED, f"internal error: {exc}")

    # -- reports --------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        last_activity = self.workspace.last_activity()
        now = time.time()
        operation = self.operation
        return {
            "state": self.state.value,
            "since": utc_iso(self.since),
            "seconds_in_state": round(now - self.since, 3),
            "message": self.message,
            "restore": self.restore.value if self.state == State.READY and self.restore else None,
            "failure": self.failure.to_dict() if self.state == State.FAILED and self.failure else None,
            "operation": operation.to_dict() if operation else None,
            "backend": self.backend.describe(),
            "last_activity": utc_iso(last_activity) if last_activity else None,
            "idle_seconds": round(now - last_activity, 3) if last_activity else None,
            "can_suspend": self.state in STEADY_STATES and not (operation and operation.in_progress),
            "can_resume": self.backend.capabilities.resume_from_server
            and self._restore_record is not None
            and self.state in {State.SUSPENDED, State.FAILED}
            and not (operation and operation.in_progress),
            "cold_start": self.cold_start,
            "last_restore": self.last_restore,
            "server": {"boot_id": BOOT_ID},
            "journal": {"path": str(self.journal.path), "problems": self.journal_problems},
        }

    def timeline(self) -> dict[str, Any]:
        return timeline_mod.build(self.journal.read().entries)

    def checkpoint_dir_for(self, record: KernelRecord) -> Path:
        return checkpoint_dir_for(self.settings.checkpoint_dir, record)


def _restore_report(entry: dict[str, Any]) -> dict[str, Any]:
    """What the status says about the last restore, from its journal entry."""
    checkpoints = entry.get("checkpoints_restored") or {}
    return {
        "operation_id": entry.get("operation_id"),
        "cycle_id": entry.get("cycle_id"),
        "restore": entry.get("restore"),
        "time": entry.get("time"),
        "first_cell_runnable_at": utc_iso(entry["first_cell_runnable_at"])
        if entry.get("first_cell_runnable_at")
        else None,
        "kernels": [
            {"kernel_id": k.get("kernel_id"), "path": k.get("path"), "error": k.get("error")}
            for k in entry.get("kernels", [])
        ],
        "checkpoints_restored": checkpoints,
        "checkpoints_restored_count": sum(len(c.get("restored", [])) for c in checkpoints.values()),
        "verification": entry.get("verification"),
    }
