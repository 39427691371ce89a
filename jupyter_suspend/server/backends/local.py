"""The embedded default: one machine, the server stays up, kernels stop.

Suspend records which sessions and kernels ran, measures what they hold and
shuts them down so that their memory and GPU memory go back to the machine.
Resume starts the same kernels under the same kernel and session ids (so an
open notebook reconnects), waits until each can run a cell, and reports a
*cold* restore: live state only comes back through application checkpoints.
While the kernels start, their newest checkpoint files are read into the page
cache in a background thread (:class:`~jupyter_suspend.server.flush.CheckpointPrefetch`),
so that the disk reads overlap with the kernels' start-up; the kernels still
read and verify every chunk themselves, and an IPython kernel begins that as it
starts (:mod:`jupyter_suspend.kernel.preload`, ``preload_in_kernel``): the
restore request after ``kernel_info`` then only waits for that read.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from traitlets import Bool, Float, Integer

from ...common.kernel_protocol import PRELOAD_ENV, PRELOAD_TICKET_VERSION
from .. import wording
from ..environment import Environment, KernelRecord
from ..flush import CheckpointPrefetch, checkpoint_dir_for
from ..resources import GpuProbe, measure, wait_until_gone
from ..states import CapacityUnavailable, FlushFailed, RestoreFailed, RestoreKind, State
from .base import (
    Backend,
    Capabilities,
    ColdStartVerdict,
    ReleaseContext,
    ResourceReport,
    RestoreContext,
    RestoredKernel,
    RestoreOutcome,
    Suspended,
)

#: Seconds a kernel holds a read ahead after the kernel-ready deadline, waiting for the restore request.
PRELOAD_HOLD_SECONDS = 120.0


class PreloadTickets:
    """The tickets of one resume's restarted kernels (:mod:`jupyter_suspend.kernel.preload`):
    one JSON file per kernel, in a folder only this user can read, removed after the start."""

    def __init__(self, hold_seconds: float):
        self.hold_seconds = hold_seconds
        self.folder: Path | None = None

    def write(self, kernel_id: str, wanted: dict[str, Any]) -> str:
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="jupyter-suspend-preload-"))  # mode 0700
        ticket = {
            "version": PRELOAD_TICKET_VERSION,
            "kernel_id": kernel_id,
            "folder": str(wanted["checkpoint_dir"]),
            "names": [str(n) for n in wanted["names"]],
            "deadline": time.time() + self.hold_seconds,
        }
        path = self.folder / f"{kernel_id}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(ticket))
        os.replace(tmp, path)  # the kernel never reads half a ticket
        return str(path)

    def remove(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


class LocalBackend(Backend):
    name = "local"
    capabilities = Capabilities(
        keeps_files=True,
        keeps_application_checkpoints=True,
        keeps_live_memory=False,
        keeps_gpu_memory=False,
        releases_kernel_memory=True,
        releases_node=False,
        needs_sidecar=False,
        server_survives_suspend=True,
        resume_from_server=True,
    )

    release_timeout = Float(
        30.0, config=True, help="Seconds to wait for stopped kernels' processes (and GPU memory) to be freed."
    )
    kernel_ready_timeout = Float(
        120.0, config=True, help="Seconds to wait for a restarted kernel to answer kernel_info."
    )
    capacity_headroom_bytes = Integer(
        0,
        config=True,
        help="Free host memory (bytes) a resume needs before it restarts kernels; "
        "below it the environment waits for capacity. 0 disables the check.",
    )
    capacity_retry_seconds = Float(5.0, config=True, help="Seconds between capacity checks while waiting.")
    prefetch_checkpoints = Bool(
        True,
        config=True,
        help="Read the kernels' newest checkpoint files into the page cache while a resume "
        "restarts the kernels, when the kernels do not read them themselves as they start "
        "(preload_in_kernel off); skipped when they would not fit in half the available memory.",
    )
    preload_in_kernel = Bool(
        True,
        config=True,
        help="Have each restarted IPython kernel begin reading and verifying its application "
        "checkpoints as it starts (jupyter_suspend.kernel.preload), so that the restore after "
        "kernel_info only waits for that read; the names are bound when the restore runs.",
    )

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.gpu = GpuProbe()
        self._prefetch: CheckpointPrefetch | None = None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "gpu_measurement": self.gpu.reason}

    async def preflight_notes(self, environment: Environment) -> list[str]:
        return [] if self.gpu.available else [wording.gpu_not_measured(self.gpu.reason)]

    async def release(self, ctx: ReleaseContext) -> Suspended:
        report = ResourceReport(gpu_measurement=self.gpu.reason)
        pids: list[int] = []
        for record in ctx.kernels:
            usage = await asyncio.to_thread(measure, record.pid, self.gpu)
            report.per_kernel[record.kernel_id] = {
                "path": record.path,
                "kernel_name": record.kernel_name,
                "pids": usage.pids,
                "rss_bytes": usage.rss_bytes,
                "gpu_memory_bytes": usage.gpu_memory_bytes,
                "gpu_devices": usage.gpu_devices,
            }
            report.kernel_memory_bytes += usage.rss_bytes
            report.gpu_memory_bytes += usage.gpu_memory_bytes
            report.gpu_devices += [d for d in usage.gpu_devices if d not in report.gpu_devices]
            pids += usage.pids

        stopped: list[str] = []
        for record in ctx.kernels:
            try:
                await ctx.environment.stop_kernel(record)
            except Exception as exc:
                if not stopped:
                    # Nothing released yet: abort, the session keeps running.
                    raise FlushFailed("release", f"kernel {record.kernel_id} could not be stopped: {exc}") from exc
                raise
            stopped.append(record.kernel_id)
        environment_stopped_at = time.time()

        node_released_at, holding = await asyncio.to_thread(wait_until_gone, pids, self.gpu, self.release_timeout)
        plan: dict[str, Any] = {"kernels": [k.to_dict() for k in ctx.kernels]}
        if holding:
            plan["still_running_pids"] = holding
        return Suspended(
            environment_stopped_at=environment_stopped_at,
            node_released_at=node_released_at,
            released=report,
            resume_plan=plan,
        )

    def _check_capacity(self) -> None:
        needed = self.capacity_headroom_bytes
        if needed <= 0:
            return
        available = psutil.virtual_memory().available
        if available < needed:
            raise CapacityUnavailable(
                f"{available / 2**30:.1f} GiB memory available, {needed / 2**30:.1f} GiB required to restore",
                retry_after=self.capacity_retry_seconds,
            )

    async def restore(self, ctx: RestoreContext) -> RestoreOutcome:
        self._check_capacity()
        capacity_available_at = time.time()
        records = [KernelRecord.from_dict(k) for k in ctx.resume_plan.get("kernels", [])]
        if not self.preload_in_kernel:
            # A kernel's own read ahead starts within a second of POST resume; a warm-up beside it
            # only competes with the kernel's start for the cores (0.3 s later on 2 cores, and a
            # slower resume: docs/benchmarks.md).
            self._start_prefetch(ctx, records)
        tickets = PreloadTickets(self.kernel_ready_timeout + PRELOAD_HOLD_SECONDS) if self.preload_in_kernel else None

        async def start(record: KernelRecord) -> RestoredKernel:
            result = RestoredKernel(record.kernel_id, record.session_id, record.path, record.kernel_name, None)
            try:
                if ctx.environment.has_kernel(record.kernel_id):
                    result.error = "a kernel with this id is already running; left as it is"
                    return result
                env, arguments = ctx.kernel_env, []
                wanted = ctx.checkpoints.get(record.kernel_id)
                if tickets is not None and wanted and wanted.get("names") and wanted.get("checkpoint_dir"):
                    arguments = await ctx.environment.preload_arguments(record.kernel_name)
                    if arguments:
                        env = {**env, PRELOAD_ENV: tickets.write(record.kernel_id, wanted)}
                if arguments:
                    await ctx.environment.start_kernel(record, env, arguments)
                else:
                    await ctx.environment.start_kernel(record, env)
                result.runnable_at = await ctx.environment.wait_kernel_ready(
                    record.kernel_id, self.kernel_ready_timeout
                )
            except Exception as exc:  # noqa: BLE001 - reported per kernel
                result.error = f"{type(exc).__name__}: {exc}"
            return result

        try:
            kernels = list(await asyncio.gather(*(start(r) for r in records)))
        finally:
            # A kernel claims its ticket before it answers kernel_info: one left now was
            # never claimed (the kernel failed), and no later process may find it.
            if tickets is not None:
                tickets.remove()
        failed = [k for k in kernels if k.error and k.runnable_at is None and "already running" not in k.error]
        if failed and len(failed) == len(kernels):
            names = ", ".join(f"{k.path or k.kernel_id} ({k.error})" for k in failed)
            raise RestoreFailed(
                f"no kernel could be restarted: {names}",
                "Open the notebook and start a kernel by hand, then run it from the top or restore "
                "the application checkpoints with %checkpoint restore. POST resume retries.",
            )
        runnable = [k.runnable_at for k in kernels if k.runnable_at is not None]
        return RestoreOutcome(
            restore=RestoreKind.COLD,
            restored_at=time.time(),
            first_cell_runnable_at=max(runnable) if runnable else None,
            kernels=kernels,
            capacity_available_at=capacity_available_at,
        )

    def _start_prefetch(self, ctx: RestoreContext, records: list[KernelRecord]) -> None:
        """Warm the page cache with the checkpoints the kernels will read once started."""
        from ..app import KERNEL_CHECKPOINT_DIR_ENV  # the app imports its backends by name

        root = ctx.kernel_env.get(KERNEL_CHECKPOINT_DIR_ENV)
        if not self.prefetch_checkpoints or not root or not records:
            return
        if self._prefetch is not None:
            self._prefetch.stop()
        folders = [checkpoint_dir_for(Path(root), r) for r in records]
        try:
            available = int(psutil.virtual_memory().available)
        except Exception:  # noqa: BLE001 - unknown memory: do not warm
            return
        self._prefetch = CheckpointPrefetch(folders, available).start()

    async def stop(self) -> None:
        if self._prefetch is not None:
            self._prefetch.stop()
        await super().stop()

    def interpret_cold_start(self, last_state: State, last_entry: dict[str, Any] | None) -> ColdStartVerdict:
        when = last_entry.get("time", "an unknown time") if last_entry else "an unknown time"
        if last_state in {State.SUSPENDED, State.WAITING_FOR_CAPACITY, State.RESTORING, State.SNAPSHOTTING}:
            state = State.SUSPENDED
        elif last_state == State.FAILED:
            state = State.FAILED
        else:
            state = State.RUNNING
        message, next_step = wording.cold_start(self.capabilities, last_state, state, when)
        return ColdStartVerdict(state, message, next_step=next_step)
