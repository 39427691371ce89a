"""Kubeflow Notebooks v1 and Kubeflow Workspaces: the workload is stopped, the pod goes away, files stay.

No snapshot: a Kubeflow platform stops a notebook by scaling its StatefulSet
to 0 (Notebook: annotation ``kubeflow-resource-stopped``; Workspace:
``spec.paused: true``) and starts a *new* pod when it is resumed from outside
(``jupyter suspend resume --kind notebook|workspace``, or the platform's own
dashboard). What comes back is what the persistent volume kept: notebooks,
other files and the application checkpoints of the flush -- never kernel
memory. The capabilities say exactly that, and every sentence of the status
and the preflight is derived from them.

Through the sidecar (``--workload notebook|workspace``, the only holder of a
token; it acts on the owner named by its own pod's label):

* ``release``: after a successful flush, read the owner, ask it to stop (a
  failure here aborts: nothing was released, the session keeps running), stop
  the kernels (their checkpoints are written; the pod is going anyway), then
  follow the owner for a short while and journal what is seen (workspace
  ``status.state`` / ``pauseTime``; notebook scaled to 0). The pod -- this
  process with it -- may be gone before any of that; the journal has the stop
  request and the resume plan;
* a new pod's server finds the journal: :meth:`interpret_cold_start` answers
  *suspended*, and as the platform resumes (``resume_from_server`` false) the
  core resumes at once: the recorded sessions restart under their ids and the
  application checkpoints are loaded back (``restore``: COLD).

Journal kinds ``kubeflow_*``; each carries a timeline ``mark``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from traitlets import Float

from ...common import sidecar_protocol as proto
from .. import wording
from ..journal import utc_iso
from ..sidecar_client import SidecarClient, SidecarError, SidecarUnavailable
from ..states import FlushFailed, RestoreKind, State
from .base import (
    Capabilities,
    ColdStartVerdict,
    ReleaseContext,
    RestoreContext,
    RestoreOutcome,
    Suspended,
)
from .local import LocalBackend
from .sidecar import SidecarBackend

EV_STOP_REQUESTED = "kubeflow_stop_requested"
EV_OBSERVED = "kubeflow_workload_observed"
EV_COLD = "kubeflow_cold_start"

#: Seconds a health check or a read of the sidecar may take in a dry run.
HEALTH_TIMEOUT = 3.0
KEEPS_RUNNING = "Nothing was released; the session keeps running."


def _next_step(exc: SidecarError | SidecarUnavailable) -> str:
    if isinstance(exc, SidecarError) and exc.next_step:
        return exc.next_step
    if isinstance(exc, SidecarError) and exc.retryable:
        return "The Kubernetes API did not answer properly; suspend again in a moment."
    return "Check the sidecar's log (container 'sidecar'), then suspend again."


def no_sidecar(socket_path: str, workload_kind: str) -> str:
    """Why nothing can be stopped when the sidecar does not answer: it may simply not be in this pod."""
    return (
        f"the sidecar does not answer at {socket_path}: this pod has no running sidecar (it is added at pod "
        "creation by a PodDefault or jupyter-suspend-injector; a pod labelled for it but created while neither ran "
        "has none, see the pod's annotation jupyter-suspend.io/injection-skipped), or it is not running with "
        f"--workload {workload_kind}"
    )


def workload_note(view: proto.WorkloadView) -> str:
    """One sentence about the owner for the status and the preflight."""
    what = "Kubeflow Notebook" if view["kind"] == proto.WORKLOAD_NOTEBOOK else "Kubeflow Workspace"
    text = f"this pod belongs to the {what} '{view['name']}' in namespace {view['namespace']}"
    if view.get("state"):
        text += f" (state {view['state']}" + (f": {view['state_message']}" if view.get("state_message") else "") + ")"
    if view.get("stopped"):
        text += "; it is being stopped"
    return text


class KubeflowBackend(SidecarBackend):
    """Stop the pod's Kubeflow owner through the sidecar; a new pod restarts the sessions (cold)."""

    name = "kubeflow"
    #: ``notebook`` or ``workspace``: what the sidecar must be started with.
    workload_kind = ""
    pinned_kinds = frozenset({EV_STOP_REQUESTED, EV_OBSERVED, EV_COLD})
    capabilities = Capabilities(
        keeps_files=True,
        keeps_application_checkpoints=True,
        keeps_live_memory=False,
        keeps_gpu_memory=False,
        releases_kernel_memory=True,
        releases_node=True,
        needs_sidecar=True,
        server_survives_suspend=False,
        resume_from_server=False,
    )

    sidecar_timeout = Float(15.0, config=True, help="Seconds for one call to the sidecar (no long-polls here).")
    observe_seconds = Float(
        20.0,
        config=True,
        help="Seconds to follow the workload after the stop request, journaling what is seen (workspace state and "
        "pauseTime, notebook scaled to 0); the pod usually goes away first.",
    )
    observe_interval = Float(0.5, config=True, help="Seconds between two reads of the workload while following it.")

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        #: Stops the kernels at a suspend and restarts them on a cold start, as on one machine.
        self.kernels = LocalBackend(parent=self)
        self._cycle: list[dict[str, Any]] = []
        #: The owner as last read (status ``backend.workload``); None: not read yet.
        self.last_view: proto.WorkloadView | None = None
        #: Why the owner could not be read through the sidecar at the last try (status ``backend.sidecar_problem``:
        #: a pod that should have its sidecar and has none says so); None: read fine, or not tried yet.
        self.last_problem: str | None = None
        self.started_at = time.time()

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        described["text"]["while_suspended"] = (
            f"The Kubeflow {self.workload_kind} is stopped: its pod, this server and the kernels are gone and the "
            "node's resources go back to the pool. Resuming starts a new pod; the sessions restart and load their "
            "application checkpoints. The sidecar beside this server stops the workload."
        )
        view = self.last_view
        return {
            **described,
            "sidecar": self.sidecar_socket,
            "workload": dict(view) if view is not None else None,
            "sidecar_problem": self.last_problem,
        }

    # -- dry run -----------------------------------------------------------------------

    async def _read_owner(self) -> tuple[proto.WorkloadView | None, str | None]:
        """(the owner, why it cannot be stopped); bounded by the health timeout. Remembered for the status."""
        view, problem = await self._read_owner_once()
        self.last_problem = problem
        return view, problem

    async def _read_owner_once(self) -> tuple[proto.WorkloadView | None, str | None]:
        client = self.client(timeout=min(HEALTH_TIMEOUT, self.sidecar_timeout))
        if not await client.healthy():
            return None, no_sidecar(client.socket_path, self.workload_kind)
        try:
            view = await client.workload()
        except SidecarError as exc:
            return None, f"the sidecar cannot name this pod's {self.workload_kind}: {exc.message} ({exc.code})"
        except SidecarUnavailable as exc:
            return None, f"the sidecar cannot be asked: {exc}"
        if view.get("kind") != self.workload_kind:
            return (
                view,
                f"the sidecar serves a {view.get('kind')}, this server is configured for a {self.workload_kind}",
            )
        self.last_view = view
        return view, None

    async def preflight_notes(self, environment: Any) -> list[str]:
        view, problem = await self._read_owner()
        if problem:
            return [f"A suspend would be refused now: {problem}. Nothing would be released."]
        assert view is not None
        return [
            f"Suspend stops the workload: {workload_note(view)}.",
            "No snapshot is taken: kernel memory is lost; notebooks, files and application checkpoints stay on the "
            "persistent volume, and a new pod restarts the sessions from them when the workload is resumed.",
        ]

    async def preflight_blockers(self, environment: Any) -> list[str]:
        _, problem = await self._read_owner()
        return [f"the workload cannot be stopped: {problem}"] if problem else []

    # -- suspend -----------------------------------------------------------------------

    async def release(self, ctx: ReleaseContext) -> Suspended:
        client = self.client()
        try:
            if not await client.healthy():
                raise SidecarUnavailable(no_sidecar(client.socket_path, self.workload_kind))
            view = await client.workload()
            self.last_view = view
            stopped = await self._stop(client, view)
        except (SidecarError, SidecarUnavailable) as exc:
            raise FlushFailed(
                "release.stop",
                f"the {self.workload_kind} could not be stopped: {exc}. {_next_step(exc)} {KEEPS_RUNNING}",
            ) from exc
        requested_at = time.time()
        after = stopped["workload"]
        self.last_view = after
        ctx.record(
            EV_STOP_REQUESTED,
            mark=f"{self.workload_kind}_stop_requested",
            mark_at=requested_at,
            workload=dict(after),
            already_stopped=stopped["already_stopped"],
            annotation_or_patch_at=stopped["requested_at"],
        )
        self.log.info("jupyter-suspend: asked %s %s to stop", self.workload_kind, after["name"])
        # The pod is going: stop the kernels now (checkpoints are on disk), measured as on one machine.
        try:
            outcome = await self.kernels.release(ctx)
        except FlushFailed as exc:  # the stop was asked for: this is no longer "nothing released"
            raise RuntimeError(f"the {self.workload_kind} was asked to stop, then {exc.reason}") from exc
        await self._observe(client, ctx, requested_at)
        # When the node's resources went back is the platform's to tell, not this pod's.
        outcome.node_released_at = None
        outcome.resume_plan = {**outcome.resume_plan, "workload": dict(self.last_view or after)}
        return outcome

    async def _stop(self, client: SidecarClient, view: proto.WorkloadView) -> proto.WorkloadStopped:
        """Ask for the stop. An answer that never came (a timeout, a dropped connection, the API's 5xx) may
        hide a patch that was applied: read the owner again before saying nothing was released."""
        try:
            return await client.stop_workload({"kind": self.workload_kind, "name": view["name"]})
        except (SidecarError, SidecarUnavailable) as exc:
            if isinstance(exc, SidecarError) and not exc.retryable:
                raise  # refused: nothing was written
            try:
                again = await client.workload()
            except (SidecarError, SidecarUnavailable):
                raise exc from None
            if not again["stopped"] or view["stopped"]:
                raise
            self.log.warning("jupyter-suspend: the stop request failed (%s) but the %s is stopping", exc, view["kind"])
            return {"workload": again, "requested_at": again["stopped_at"], "already_stopped": False}

    def _stopped_seen(self, view: proto.WorkloadView) -> bool:
        if view["kind"] == proto.WORKLOAD_WORKSPACE:
            return view.get("state") == "Paused"
        return view.get("ready_replicas") == 0

    async def _observe(self, client: SidecarClient, ctx: ReleaseContext, requested_at: float) -> None:
        """Journal each new state of the owner until it is stopped, the sidecar goes (with the pod), or time ends."""
        deadline = time.monotonic() + max(0.0, self.observe_seconds)
        seen: set[str] = set()
        previous = requested_at  # the time of the last mark
        while True:
            try:
                view = await asyncio.wait_for(
                    client.workload(), max(0.1, min(self.sidecar_timeout, deadline - time.monotonic()))
                )
            except (SidecarError, SidecarUnavailable, asyncio.TimeoutError) as exc:
                self.log.info("jupyter-suspend: stopped following the %s: %s", self.workload_kind, exc)
                return
            self.last_view = view
            if view["kind"] == proto.WORKLOAD_WORKSPACE:
                key = str(view.get("state") or "unknown")
            else:
                key = "scaled_down" if self._stopped_seen(view) else "stopping"
            if key not in seen:
                seen.add(key)
                # A workspace's pauseTime is when the controller paused it, in whole seconds: on the timeline
                # never before the marks it follows.
                pause_time = view.get("pause_time") if key == "Paused" else None
                previous = max(previous, float(pause_time) if pause_time else time.time())
                ctx.record(
                    EV_OBSERVED,
                    mark=f"{self.workload_kind}_{key.lower()}",
                    mark_at=previous,
                    # not ``state``: the journal's own field (a lifecycle state, always a string)
                    workload_state=view.get("state"),
                    workload_state_message=view.get("state_message"),
                    pause_time=view.get("pause_time"),
                    ready_replicas=view.get("ready_replicas"),
                    stopped_at=view.get("stopped_at"),
                )
            if self._stopped_seen(view) or time.monotonic() >= deadline:
                return
            await asyncio.sleep(max(0.05, self.observe_interval))

    # -- a new pod ---------------------------------------------------------------------

    def recall(self, entries: list[dict[str, Any]]) -> None:
        self._cycle = list(entries)

    def _last(self, kind: str) -> dict[str, Any] | None:
        return next((e for e in reversed(self._cycle) if e.get("kind") == kind), None)

    def why_new_pod(self) -> str:
        requested = self._last(EV_STOP_REQUESTED)
        if requested is None:
            return "the previous server stopped before it asked the workload to stop"
        workload = requested.get("workload") or {}
        when = utc_iso(requested["mark_at"]) if isinstance(requested.get("mark_at"), (int, float)) else "?"
        return f"{self.workload_kind} {workload.get('name')} was asked to stop at {when} and has been started again"

    def interpret_cold_start(self, last_state: State, last_entry: dict[str, Any] | None) -> ColdStartVerdict:
        when = last_entry.get("time", "an unknown time") if last_entry else "an unknown time"
        if last_state in (State.SNAPSHOTTING, State.RESTORING, State.SUSPENDED, State.WAITING_FOR_CAPACITY):
            return ColdStartVerdict(
                State.SUSPENDED,
                f"This is a new pod: {self.why_new_pod()}. (The previous server last recorded {last_state.value} at "
                f"{when}.) A Kubeflow {self.workload_kind} keeps files and application checkpoints, not kernel "
                "memory: the recorded sessions are restarted and their application checkpoints restored.",
            )
        if last_state == State.FLUSHING:
            return ColdStartVerdict(
                State.RUNNING, f"The server stopped during a flush at {when}; the workload was not asked to stop."
            )
        if last_state == State.FAILED:
            message, next_step = wording.cold_start_failed(when)
            return ColdStartVerdict(State.FAILED, message, next_step=next_step)
        return ColdStartVerdict(State.RUNNING, "")

    async def restore(self, ctx: RestoreContext) -> RestoreOutcome:
        """Restart the recorded kernels in the new pod (the core then loads their checkpoints): always COLD."""
        outcome = await self.kernels.restore(ctx)
        outcome.restore = RestoreKind.COLD
        outcome.detail["why_cold"] = self.why_new_pod()
        view: proto.WorkloadView | None = None
        try:
            view = await self.client(timeout=min(HEALTH_TIMEOUT, self.sidecar_timeout)).workload()
            self.last_view = view
        except (SidecarError, SidecarUnavailable) as exc:
            self.log.info("jupyter-suspend: the %s could not be read after the start: %s", self.workload_kind, exc)
        ctx.record(
            EV_COLD,
            mark="pod_started_cold",
            mark_at=self.started_at,
            why_cold=outcome.detail["why_cold"],
            kernels_restarted=len(outcome.kernels),
            workload_state=view.get("state") if view else None,
            workload_state_message=view.get("state_message") if view else None,
        )
        if view is not None:
            outcome.detail["workload"] = dict(view)
        return outcome


class KubeflowNotebookBackend(KubeflowBackend):
    """Kubeflow Notebooks v1 (``kubeflow.org/v1`` Notebook): suspend sets ``kubeflow-resource-stopped``."""

    name = "kubeflow-notebook"
    workload_kind = proto.WORKLOAD_NOTEBOOK


class KubeflowWorkspaceBackend(KubeflowBackend):
    """Kubeflow Workspaces (``kubeflow.org/v1beta1`` Workspace): suspend sets ``spec.paused: true``."""

    name = "kubeflow-workspace"
    workload_kind = proto.WORKLOAD_WORKSPACE
