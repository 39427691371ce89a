"""The dry run: what a suspend would keep and lose, per kernel, without doing it.

Each kernel is asked (``probe``) what it registered for application
checkpoints; the lists of what is kept and lost come from
:mod:`~jupyter_suspend.server.wording`, derived from the backend's capabilities.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from . import wording
from .environment import Environment, KernelRecord, KernelReply, ReplyOutcome

if TYPE_CHECKING:
    from .backends.base import Backend

#: How long a preflight waits for a kernel the server reports busy.
PREFLIGHT_BUSY_GRACE_SECONDS = 1.0
#: How long it waits for any other kernel.
PREFLIGHT_PROBE_SECONDS = 5.0


async def probe(environment: Environment, record: KernelRecord, timeout: float) -> KernelReply:
    """Ask one kernel what it registered; a busy one gets a short chance only."""
    timeout = min(PREFLIGHT_PROBE_SECONDS, timeout)
    if record.reported_busy:
        # A busy kernel could only answer after its cell ends (and the
        # kernel that runs %suspend --dry-run is busy running it), so it
        # gets a short chance only. Short, not none: the server's
        # execution_state lags a moment behind a cell that just ended.
        timeout = min(timeout, PREFLIGHT_BUSY_GRACE_SECONDS)
    try:
        reply = await environment.kernel_request(record.kernel_id, "probe", timeout)
    except Exception as exc:  # noqa: BLE001 - a kernel starting or stopping meanwhile: report, never 500
        return KernelReply(record.kernel_id, ReplyOutcome.DEAD, f"could not be asked: {type(exc).__name__}: {exc}")
    if record.reported_busy and reply.busy:
        return KernelReply(record.kernel_id, ReplyOutcome.TIMEOUT, "kernel is busy running a cell")
    return reply


def kernel_preflight(backend: Backend, record: KernelRecord, reply: KernelReply) -> dict[str, Any]:
    registered = list(reply.content.get("registered", [])) if reply.ok else []
    uses_gpu = bool(reply.content.get("uses_gpu", False))
    keeps, loses = wording.kernel_keeps_loses(backend.capabilities, record, registered, uses_gpu)
    return {
        "kernel_id": record.kernel_id,
        "kernel_name": record.kernel_name,
        "path": record.path,
        "session_id": record.session_id,
        "execution_state": record.execution_state,
        "helper": reply.helper_status,
        "helper_message": reply.message,
        "registered": registered,
        "keeps": keeps,
        "loses": loses,
    }


async def _backend_says(hook: Awaitable[list[str]], what: str) -> list[str]:
    """A backend's preflight hook; one that fails says so instead of failing the dry run."""
    try:
        return list(await hook)
    except Exception as exc:  # noqa: BLE001 - a dry run answers, never 500
        return [wording.backend_check_failed(what, f"{type(exc).__name__}: {exc}")]


async def preflight(
    environment: Environment, backend: Backend, *, state: str, can_suspend: bool, timeout: float
) -> dict[str, Any]:
    """The answer of ``POST suspend`` with ``dry_run``."""
    caps = backend.capabilities
    kernels = await environment.kernels()
    # The kernels and the backend's own checks (the sidecar...) are asked at once.
    replies, backend_notes, backend_blockers = await asyncio.gather(
        asyncio.gather(*(probe(environment, k, timeout) for k in kernels)),
        _backend_says(backend.preflight_notes(environment), "notes"),
        _backend_says(backend.preflight_blockers(environment), "blockers"),
    )
    per_kernel = [kernel_preflight(backend, r, reply) for r, reply in zip(kernels, replies, strict=True)]
    blocking = [r for r, k in zip(kernels, per_kernel, strict=True) if k["helper"] == "busy"]
    busy = [] if caps.keeps_live_memory else [wording.would_abort(r) for r in blocking]
    return {
        "state": state,
        "backend": backend.describe(),
        "keeps": {
            "files": caps.keeps_files,
            "application_checkpoints": caps.keeps_application_checkpoints,
            "live_memory": caps.keeps_live_memory,
            "gpu_memory": caps.keeps_gpu_memory,
        },
        "releases": {"kernel_memory": caps.releases_kernel_memory, "node": caps.releases_node},
        "kernels": per_kernel,
        "notes": wording.preflight_notes(caps) + backend_notes,
        "would_abort": busy + backend_blockers,
        "can_suspend": can_suspend,
    }
