"""``GET status`` and the lifecycle events: the state as the REST API, the event bus and the plugin read it.

Every ``can_*`` comes from :func:`~jupyter_suspend.server.states.allowed`,
the same rule the operations are claimed by, so the plugin never re-derives
the state table.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from . import wording
from .journal import BOOT_ID, utc_iso
from .states import Action, Operation, State

if TYPE_CHECKING:
    from .lifecycle import Lifecycle


def status(lifecycle: Lifecycle) -> dict[str, Any]:
    last_activity = lifecycle.environment.last_activity()
    now = time.time()
    operation = lifecycle.operation
    state = lifecycle.state
    # After a live restore: the kernels restarted or stopped since, whose memory is not the restored one.
    live_lost = lifecycle.live_lost()
    last_restore = {**lifecycle.last_restore, "live_lost": live_lost} if lifecycle.last_restore else None
    return {
        "state": state.value,
        "since": utc_iso(lifecycle.since),
        "seconds_in_state": round(now - lifecycle.since, 3),
        "message": wording.live_lost(lifecycle.message, live_lost) if live_lost else lifecycle.message,
        "restore": lifecycle.restore.value if state == State.READY and lifecycle.restore else None,
        # Failed: why and what next. Otherwise a journal fault that stopped the last call.
        "failure": lifecycle.failure.to_dict() if lifecycle.failure else None,
        "operation": operation.to_dict() if operation else None,
        "backend": lifecycle.backend.describe(),
        "last_activity": utc_iso(last_activity) if last_activity else None,
        "idle_seconds": round(now - last_activity, 3) if last_activity else None,
        "can_suspend": bool(lifecycle.decide(Action.SUSPEND)),
        "can_resume": bool(lifecycle.decide(Action.RESUME)),
        "can_checkpoint": bool(lifecycle.decide(Action.CHECKPOINT)),
        "can_acknowledge": bool(lifecycle.decide(Action.ACKNOWLEDGE)),
        "cold_start": lifecycle.cold_start,
        "last_restore": last_restore,
        "last_suspend": last_suspend(lifecycle.last_suspend),
        "server": {"boot_id": BOOT_ID},
        "journal": {"path": str(lifecycle.journal.path), "problems": lifecycle.journal_problems},
    }


def last_suspend(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """Who suspended last, why, when, and after how long idle (epochs become ISO times)."""
    if record is None:
        return None
    requested, ended = record.get("requested_at"), record.get("active_work_ended")
    suspended = record.get("suspended_at")
    return {
        "operation_id": record.get("operation_id"),
        "origin": record.get("origin") or "user",
        "reason": record.get("reason") or "",
        "workload_class": record.get("workload_class"),
        "requested_at": utc_iso(requested) if requested else None,
        "suspended_at": utc_iso(suspended) if suspended else None,
        "idle_seconds": round(max(0.0, requested - ended), 3) if requested and ended else None,
    }


def event(lifecycle: Lifecycle, previous: State, operation: Operation | None, **extra: Any) -> dict[str, Any]:
    """A lifecycle event (schema ``lifecycle-event.json``): a transition, or an operation's end."""
    data: dict[str, Any] = {
        "state": lifecycle.state.value,
        "previous_state": previous.value,
        "message": lifecycle.message,
        "backend": lifecycle.backend.name,
    }
    if operation is not None:
        data["operation_id"] = operation.id
        data["operation_kind"] = operation.kind.value
    if lifecycle.restore is not None:
        data["restore"] = lifecycle.restore.value
    if lifecycle.failure is not None:
        data["reason"] = lifecycle.failure.reason
        data["next_step"] = lifecycle.failure.next_step
    return {**data, **extra}
