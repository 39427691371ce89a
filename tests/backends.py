"""A platform-shaped backend for testing the lifecycle's capability-driven paths.

It models a platform whose snapshot freezes the whole pod with the server in
it (as GKE Pod Snapshots do): ``release`` returns only after the pod came back,
and the kernels never stopped. It is a test double of the *platform*, used to
check that preflight, status and the live-return path are derived from the
declared capabilities; it does not claim to talk to any real platform.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

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
from jupyter_suspend.model import RestoreKind, State


class FrozenPodBackend(Backend):
    name = "frozen-pod-test"
    capabilities = Capabilities(
        keeps_live_memory=True,
        keeps_gpu_memory=True,
        releases_kernel_memory=True,
        releases_node=True,
        needs_sidecar=True,
        server_survives_suspend=False,
        resume_from_server=False,
    )

    #: Model a snapshot whose pod never comes back: the server stays frozen in
    #: ``release`` until it is killed, and the next server starts cold.
    never_returns = Bool(False, config=True)

    async def release(self, ctx: ReleaseContext) -> ReturnedLive:
        if self.never_returns:
            await asyncio.Event().wait()
        stopped = time.time()
        return ReturnedLive(
            snapshot=f"snapshot-{ctx.operation_id}", environment_stopped_at=stopped, restored_at=time.time()
        )

    async def restore(self, ctx: RestoreContext) -> RestoreOutcome:  # pragma: no cover - platform resumes
        raise AssertionError("the platform resumes this backend, never the server")

    def interpret_cold_start(self, last_state: State, last_entry: dict[str, Any] | None) -> ColdStartVerdict:
        if last_state in {State.SNAPSHOTTING, State.SUSPENDED}:
            return ColdStartVerdict(
                State.READY,
                f"a snapshot was requested at {last_entry.get('time') if last_entry else '?'}; "
                "this is a cold start: recover from checkpoints",
                restore=RestoreKind.COLD,
            )
        return ColdStartVerdict(State.RUNNING, "")
