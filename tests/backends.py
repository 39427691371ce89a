"""A platform-shaped backend for testing the lifecycle's capability-driven paths.

It models a platform whose snapshot freezes the whole pod with the server in
it (as GKE Pod Snapshots do): ``release`` returns only once the pod is back.
The kernels keep running (a live restore), are restarted under the same ids
(a snapshot that came back cold), or the pod never comes back and the next
server starts cold from the journal. It is a test double of the *platform*,
used to check that preflight, status, the live-return verification and the
cold-start reading are derived from the declared capabilities; it does not
claim to talk to any real platform.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from traitlets import Bool

from jupyter_suspend.server.backends.base import (
    Backend,
    ColdStartVerdict,
    ReleaseContext,
    RestoreContext,
    RestoreOutcome,
    ReturnedLive,
)
from jupyter_suspend.server.states import RestoreFailed, RestoreKind, State

from .fakes import GKE_LIKE


class SnapshotLikeBackend(Backend):
    name = "snapshot-like"
    capabilities = GKE_LIKE
    restart_kernels = Bool(False, config=True, help="Come back with new kernel processes (a cold restore).")
    never_returns = Bool(
        False,
        config=True,
        help="The pod never comes back: the server stays frozen in release until it is killed.",
    )

    async def release(self, ctx: ReleaseContext) -> ReturnedLive:
        if self.never_returns:
            await asyncio.Event().wait()
        stopped = time.time()
        if self.restart_kernels:
            for record in ctx.kernels:
                await ctx.environment.restart_kernel(record.kernel_id)
                await ctx.environment.wait_kernel_ready(record.kernel_id, 60)
        return ReturnedLive(
            snapshot=f"snapshot-{ctx.operation_id}", environment_stopped_at=stopped, restored_at=time.time()
        )

    async def restore(self, ctx: RestoreContext) -> RestoreOutcome:
        raise RestoreFailed("the platform resumes this backend, never the server", "")

    def interpret_cold_start(self, last_state: State, last_entry: dict[str, Any] | None) -> ColdStartVerdict:
        if last_state in {State.SNAPSHOTTING, State.SUSPENDED}:
            return ColdStartVerdict(
                State.READY,
                f"a snapshot was requested at {last_entry.get('time') if last_entry else '?'}; "
                "this is a cold start: recover from checkpoints",
                restore=RestoreKind.COLD,
            )
        return ColdStartVerdict(State.RUNNING, "")
