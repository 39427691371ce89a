"""A backend whose environment "comes back from a snapshot" at once: the
kernels keep running (a live restore) or are restarted under the same ids (a
snapshot that came back cold), so that the lifecycle's check after a live
return runs against real kernels."""

from __future__ import annotations

import time
from typing import Any

from jupyter_core.utils import ensure_async
from traitlets import Bool

from jupyter_suspend.backends.base import (
    Backend,
    Capabilities,
    ColdStartVerdict,
    ReleaseContext,
    RestoreContext,
    RestoreOutcome,
    ReturnedLive,
)
from jupyter_suspend.model import RestoreFailed, State


class SnapshotLikeBackend(Backend):
    name = "snapshot-like"
    capabilities = Capabilities(
        keeps_live_memory=True,
        keeps_gpu_memory=True,
        releases_node=True,
        server_survives_suspend=False,
        resume_from_server=False,
    )
    restart_kernels = Bool(False, config=True, help="Come back with new kernel processes (a cold restore).")

    async def release(self, ctx: ReleaseContext) -> ReturnedLive:
        stopped = time.time()
        if self.restart_kernels:
            for record in ctx.kernels:
                await ensure_async(ctx.workspace.kernel_manager.restart_kernel(record.kernel_id))
                await ctx.workspace.wait_kernel_ready(record.kernel_id, 60)
        return ReturnedLive(snapshot="test-snapshot", environment_stopped_at=stopped, restored_at=time.time())

    async def restore(self, ctx: RestoreContext) -> RestoreOutcome:
        raise RestoreFailed("the platform resumes this backend", "")

    def interpret_cold_start(self, last_state: State, last_entry: dict[str, Any] | None) -> ColdStartVerdict:
        return ColdStartVerdict(State.RUNNING, "")
