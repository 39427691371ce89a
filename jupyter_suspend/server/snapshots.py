"""This pod's snapshots for ``GET snapshots`` and ``DELETE snapshots/NAME``: what the handlers answer.

The backend lists and deletes (GKE: through the sidecar, this pod's own snapshots
only); this module decides what may be deleted now and shapes the answers
(schemas ``snapshots.json`` and ``snapshot-deleted.json``). A backend that keeps no
snapshots (``capabilities.keeps_snapshots`` false, e.g. local) answers
``supported: false`` with the reason, never an empty list that looks like "none yet".

Which snapshot a resume needs: GKE restores a new pod from the most recent Ready
snapshot that matches it (platform-facts.md section 1), so that one is
``would_restore``; a snapshot still uploading will become it. While the
environment is suspending, suspended or restoring, deleting either is refused
(409): it would turn the coming restore into a silent cold start.
"""

from __future__ import annotations

import time
from typing import Any

from ..common.sidecar_protocol import is_dns1123_subdomain
from ..common.times import rfc3339_epoch
from .backends.base import Backend, SnapshotError
from .states import State

#: A Kubernetes object name (DNS subdomain, RFC 1123): what a PodSnapshot may be called.

#: States in which the snapshot the resume needs must stay.
RESUME_NEEDS_SNAPSHOT = frozenset(
    {State.FLUSHING, State.SNAPSHOTTING, State.SUSPENDED, State.WAITING_FOR_CAPACITY, State.RESTORING}
)

#: GKE's Ready reason while the snapshot is being uploaded.
UPLOADING = "AwaitingCheckpoint"


class SnapshotRefused(Exception):
    """A 4xx/5xx answer of the snapshots API, in the API's error shape."""

    def __init__(self, status: int, message: str, reason: str, state: State | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason
        self.state = state

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"message": self.message, "reason": self.reason}
        if self.state is not None:
            data["state"] = self.state.value
        return data


def is_object_name(name: str) -> bool:
    """Kubernetes' own rule (DNS-1123 subdomain: ``a..b`` refused), the one check the sidecar applies too."""
    return is_dns1123_subdomain(name)


def unsupported_reason(backend: Backend) -> str:
    """Why this backend lists no snapshots, from its capabilities."""
    caps = backend.capabilities
    kept = "the notebooks and files" + (
        ", and the application checkpoints" if caps.keeps_application_checkpoints else ""
    )
    how = "the kernels stop and are restarted at resume" if caps.server_survives_suspend else "the pod stops"
    return (
        f"The {backend.name} backend keeps no snapshots: at a suspend {how}, and what "
        f"comes back is {kept} on disk. Nothing here is stored by the platform, so there is nothing to delete."
    )


def restore_candidate(snapshots: list[dict[str, Any]]) -> str | None:
    """The snapshot a restore would use now: the most recent Ready one not being deleted."""
    ready = [s for s in snapshots if s.get("ready") and not s.get("deleting")]
    if not ready:
        return None
    return str(max(ready, key=lambda s: (rfc3339_epoch(s.get("created")) or 0.0, s["name"]))["name"])


def protection(snapshot: dict[str, Any], candidate: str | None, state: State) -> str | None:
    """Why deleting ``snapshot`` is refused in ``state`` (None: it may be deleted)."""
    if state not in RESUME_NEEDS_SNAPSHOT or snapshot.get("deleting"):
        return None
    if snapshot["name"] == candidate:
        return f"it is the snapshot a resume restores, and the environment is {state.value}"
    if not snapshot.get("ready") and snapshot.get("ready_reason") == UPLOADING:
        return f"it is being uploaded and a resume will restore it, and the environment is {state.value}"
    return None


def _row(snapshot: dict[str, Any], candidate: str | None, state: State, now: float) -> dict[str, Any]:
    created = rfc3339_epoch(snapshot.get("created"))
    refused = protection(snapshot, candidate, state)
    return {
        "name": snapshot["name"],
        "created": snapshot.get("created"),
        "age_seconds": round(max(0.0, now - created), 3) if created is not None else None,
        "size_bytes": snapshot.get("size_bytes"),
        "policy": snapshot.get("policy"),
        "ready": bool(snapshot.get("ready")),
        "ready_reason": snapshot.get("ready_reason"),
        "last_access": snapshot.get("last_access"),
        "trigger": snapshot.get("trigger"),
        "deleting": bool(snapshot.get("deleting")),
        "would_restore": snapshot["name"] == candidate,
        "deletable": refused is None and not snapshot.get("deleting"),
        "protected_because": refused,
    }


async def _platform_list(backend: Backend) -> dict[str, Any]:
    try:
        return await backend.list_snapshots()
    except SnapshotError as exc:
        raise SnapshotRefused(exc.status, f"the snapshots could not be listed: {exc.message}", "Platform") from exc


async def listing(backend: Backend, state: State) -> dict[str, Any]:
    """The answer of ``GET snapshots`` (schema ``snapshots.json``)."""
    base: dict[str, Any] = {"backend": backend.name, "state": state.value}
    if not backend.capabilities.keeps_snapshots:
        return {**base, "supported": False, "reason": unsupported_reason(backend), "pod": None, "namespace": None,
                "would_restore": None, "snapshots": []}  # fmt: skip
    found = await _platform_list(backend)
    snapshots = [dict(s) for s in found.get("snapshots") or []]
    candidate = restore_candidate(snapshots)
    now = time.time()
    rows = [_row(s, candidate, state, now) for s in snapshots]
    rows.sort(key=lambda r: (r["created"] or "", r["name"]), reverse=True)  # newest first
    return {**base, "supported": True, "reason": None, "pod": found.get("pod"), "namespace": found.get("namespace"),
            "would_restore": candidate, "snapshots": rows}  # fmt: skip


async def delete(backend: Backend, state: State, name: str) -> dict[str, Any]:
    """The answer of ``DELETE snapshots/NAME`` (schema ``snapshot-deleted.json``); raises :class:`SnapshotRefused`."""
    if not is_object_name(name):
        raise SnapshotRefused(400, f"{name[:80]!r} is not a valid Kubernetes object name", "Bad Request")
    if not backend.capabilities.keeps_snapshots:
        raise SnapshotRefused(404, f"no snapshot {name}: {unsupported_reason(backend)}", "Not Found")
    if state in RESUME_NEEDS_SNAPSHOT:
        # A fresh list decides: the resume's snapshot is the newest Ready one *now*.
        snapshots = [dict(s) for s in (await _platform_list(backend)).get("snapshots") or []]
        target = next((s for s in snapshots if s.get("name") == name), None)
        refused = protection(target, restore_candidate(snapshots), state) if target else None
        if refused:
            raise SnapshotRefused(409, f"snapshot {name} is not deleted: {refused}.", "Conflict", state)
    try:
        answer = await backend.delete_snapshot(name)
    except SnapshotError as exc:
        reason = {403: "Forbidden", 404: "Not Found", 400: "Bad Request"}.get(exc.status, "Platform")
        raise SnapshotRefused(exc.status, f"snapshot {name} was not deleted: {exc.message}", reason) from exc
    return {"deleted": str(answer.get("deleted") or name), "trigger": answer.get("trigger")}
