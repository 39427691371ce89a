"""GKE Pod Snapshots: the whole pod is checkpointed, stopped, and restored in a new pod.

The server process is frozen with its pod. Through the sidecar (the only
holder of a Kubernetes token, :mod:`jupyter_suspend.server.sidecar_client`)
``release`` asks GKE for a snapshot of this pod and follows it; with the
policy's ``postCheckpoint: stop`` the pod then stops *while the server is
inside* ``release``. Two endings:

* **live**: GKE restores the pod from the snapshot and this very process
  simply continues in the new pod. ``release`` notices from in-pod signals
  (:mod:`~jupyter_suspend.server.pod_return`: a new pod uid, a wall-clock
  jump) and returns :class:`~.base.ReturnedLive` at once; the live-state
  canary then proves (or refutes) that the kernels are the same processes.
  The late ``PodRestored`` condition is only recorded when it arrives;
* **cold**: no compatible snapshot existed (the pod spec changed, the snapshot
  expired or never completed), GKE starts the pod from scratch, silently. A new
  server process finds the journal: :meth:`GKEBackend.interpret_cold_start`
  says why a live restore was not possible, as far as the journal tells
  (:meth:`GKEBackend.recall` gets the last cycle's entries, this backend's
  ``gke_*`` events included), and answers *suspended*; since nobody resumes
  this backend by request (``resume_from_server`` false), the core resumes at
  once: :meth:`GKEBackend.restore` restarts the recorded kernels (by the local
  backend's code) and the core puts the application checkpoints back; the
  status ends *ready*, *cold*. Never a second snapshot restore.

The timeline events are journaled through ``ctx.record`` (kinds ``gke_*``):
identity before the trigger, snapshot requested, checkpoint done and snapshot
Ready (the conditions' own times), pod stopped, returned (the signals),
pod restored (``PodRestored``), consumed snapshot deleted, cold start. Each but
the identity carries a timeline ``mark`` (and ``mark_at``, the time it
happened), which ``GET timeline`` lists in the cycle's ``events``.

Anything that fails before the pod is stopped (sidecar down, the API
refusing, a failed trigger or checkpoint, a snapshot never Ready) raises
:class:`~jupyter_suspend.server.states.FlushFailed`: the suspend is aborted,
nothing was released, the session keeps running, and the message says why and
what to do next.

This server process never talks to the Kubernetes API itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from traitlets import Bool, Float, Int, Unicode

from ...common import sidecar_protocol as proto
from ...common.times import rfc3339_epoch
from .. import wording
from ..journal import BOOT_ID, utc_iso
from ..pod_return import (
    DEFAULT_CLOCK_JUMP_THRESHOLD,
    DEFAULT_POD_UID_ENV,
    DEFAULT_POD_UID_FILE,
    DEFAULT_SPEC_ENVIRON_PATH,
    PodIdentity,
    PodSignals,
    ReturnCheck,
)
from ..sidecar_client import SidecarClient, SidecarError, SidecarUnavailable
from ..states import FlushFailed, RestoreKind, State
from .base import (
    Capabilities,
    ColdStartVerdict,
    ReleaseContext,
    RestoreContext,
    RestoreOutcome,
    ReturnedLive,
    SnapshotError,
)
from .gpu_driver import gpu_driver_note, read_driver_version
from .local import LocalBackend
from .readiness import ReadinessServer
from .sidecar import SidecarBackend

#: Journal entry kinds of this backend (the ``gke_`` prefix keeps them apart from the core's).
EV_IDENTITY = "gke_identity"
EV_REQUESTED = "gke_snapshot_requested"
EV_CHECKPOINTED = "gke_checkpoint_done"
EV_READY = "gke_snapshot_ready"
EV_STOPPED = "gke_pod_stopped"
EV_ABORTED = "gke_snapshot_aborted"
EV_RETURNED = "gke_returned"
EV_POD_RESTORED = "gke_pod_restored"
EV_DELETED = "gke_snapshot_deleted"
EV_COLD = "gke_cold_start"

#: Seconds a new server waits for a silent sidecar before it stops waiting for the predecessor's snapshot.
PREDECESSOR_SIDECAR_SILENCE = 30.0
#: Seconds a health check of the sidecar may take.
HEALTH_TIMEOUT = 3.0
#: The next step of every abort: the session was never interrupted.
KEEPS_RUNNING = "Nothing was released; the session keeps running."

Recorder = Callable[..., Any]


class _Abort(Exception):
    """The snapshot will not happen; ``release`` turns it into FlushFailed."""

    def __init__(self, step: str, reason: str, next_step: str, snapshot: str | None = None):
        super().__init__(reason)
        self.step = step
        self.reason = reason
        self.next_step = next_step
        self.snapshot = snapshot


@dataclass
class _Progress:
    """What this process learned about its snapshot request so far."""

    trigger: str
    requested_at: float
    snapshot: str | None = None
    phase: str = "pending"
    checkpoint_at: float | None = None
    ready_at: float | None = None
    stopped_at: float | None = None
    #: The last wall-clock time the return watcher saw no return (the freeze began after it).
    last_tick: float | None = None
    noted: set[str] = field(default_factory=set)

    def times(self) -> list[float]:
        """The times known of the steps before the freeze."""
        steps = (self.requested_at, self.checkpoint_at, self.ready_at, self.stopped_at)
        return [t for t in steps if t is not None]


@dataclass
class _SidecarFacts:
    """What a dry run learns from the sidecar."""

    #: Why the sidecar cannot serve a suspend (None: it answers).
    problem: str | None = None
    #: Its view of the pod and the snapshot policy (None: not read).
    pod: proto.PodView | None = None
    pod_error: str | None = None


def _policy_note(facts: _SidecarFacts) -> str:
    """The preflight's sentence about the snapshot policy, from the sidecar's pod view."""
    pod = facts.pod
    if pod is None or not pod.get("policy_name"):
        why = f" (its view of the pod could not be read: {facts.pod_error})" if facts.pod_error else ""
        return f"the pod's snapshot policy is the sidecar's (see its --policy-mode){why}."
    name, mode, exists = pod["policy_name"], pod.get("policy_mode"), pod.get("policy_exists")
    if mode == "require":
        origin = "installed by the platform team"
    elif exists:
        origin = "created by the sidecar for this pod"
    else:
        origin = "the sidecar creates it for this pod at the first suspend"
    policy = f"the snapshot policy '{name}' ({origin})"
    if exists is None:
        return f"{policy} could not be read: {pod.get('policy_problem') or 'no reason given'}."
    if mode == "require" and not exists:
        return (
            f"the snapshot policy '{name}' does not exist yet: the platform team installs it; "
            "until then a suspend is refused."
        )
    post = pod.get("post_checkpoint")
    if post == proto.POST_CHECKPOINT_STOP:
        return f"{policy} stops the pod after the checkpoint: the node can go back to the pool."
    if post == proto.POST_CHECKPOINT_RESUME:
        return (
            f"{policy} has postCheckpoint: resume: the pod keeps running after the checkpoint, so nothing would "
            "be released; a suspend aborts (set postCheckpoint: stop on the policy)."
        )
    return f"{policy} does not say what the pod does after the checkpoint ({post!r})."


def _condition(progress: proto.SnapshotProgress, source: str, kind: str) -> proto.Condition | None:
    return next((c for c in progress.get("conditions", []) if c["source"] == source and c["type"] == kind), None)


def _passed_on(status: int) -> int:
    """The sidecar's refusals about the request (400 bad name, 403 another pod's, 404 missing) are the
    caller's; anything else is the platform's failure (502)."""
    return status if status in (400, 403, 404) else 502


def _kube_next_step(exc: SidecarError) -> str:
    if exc.next_step:
        return exc.next_step
    if exc.retryable:
        return "The Kubernetes API did not answer properly; suspend again in a moment."
    return "Check the sidecar's log (container 'sidecar'), then suspend again."


class GKEBackend(SidecarBackend):
    """Suspend into a GKE Pod Snapshot through the sidecar; return live, or cold from the journal."""

    name = "gke"
    #: What :meth:`why_cold` and the last cycle's timeline read (all but the identity).
    pinned_kinds = frozenset(
        {EV_REQUESTED, EV_CHECKPOINTED, EV_READY, EV_STOPPED, EV_ABORTED, EV_RETURNED, EV_POD_RESTORED}
        | {EV_DELETED, EV_COLD}
    )
    capabilities = Capabilities(
        keeps_files=True,
        keeps_application_checkpoints=True,
        keeps_live_memory=True,
        keeps_gpu_memory=True,
        releases_kernel_memory=True,
        releases_node=True,
        needs_sidecar=True,
        server_survives_suspend=False,
        resume_from_server=False,
        keeps_snapshots=True,
    )

    settle_seconds = Float(
        3.0,
        config=True,
        help="Seconds to let the kernels' sockets settle after the flush, before the snapshot is "
        "triggered (sockets frozen mid-close are unstable after a restore; GKE Workspaces waits about 3 s).",
    )
    snapshot_timeout = Float(
        1800.0,
        config=True,
        help="Seconds to wait for the snapshot to become Ready before the suspend is aborted "
        "(counted on the monotonic clock, which does not advance while the pod is frozen).",
    )
    follow_interval = Float(
        10.0,
        config=True,
        help=f"Seconds the sidecar holds one progress request (a long-poll, at most {proto.MAX_WAIT_SECONDS:g}).",
    )
    return_check_interval = Float(
        0.5, config=True, help="Seconds between two readings of the in-pod signals that tell a return."
    )
    pod_uid_env = Unicode(
        DEFAULT_POD_UID_ENV,
        config=True,
        help="Environment variable with this pod's uid (downward API). After a restore it still holds "
        "the OLD pod's uid (the environment comes back from memory).",
    )
    pod_uid_file = Unicode(
        DEFAULT_POD_UID_FILE,
        config=True,
        help="A downward-API volume file with metadata.uid, read afresh: after a restore it names the NEW "
        "pod. Missing file: this signal is not used. Empty: never read.",
    )
    spec_environ_path = Unicode(
        DEFAULT_SPEC_ENVIRON_PATH,
        config=True,
        help="gVisor's view of the new pod's environment after a restore (GKE Sandbox); "
        "missing: this signal is not used. Empty: never read.",
    )
    clock_jump_threshold = Float(
        DEFAULT_CLOCK_JUMP_THRESHOLD,
        config=True,
        help="Seconds of wall-clock time the monotonic clock did not see that mean the process was frozen "
        "and restored.",
    )
    pod_restored_timeout = Float(
        900.0,
        config=True,
        help="Seconds after a live return to wait for the pod's PodRestored condition (recorded on the timeline).",
    )
    pod_restored_poll = Float(
        5.0, config=True, help="Seconds between two reads of the pod's conditions after a return."
    )
    predecessor_wait_seconds = Float(
        1800.0,
        config=True,
        help="At start-up, when the journal shows a snapshot request whose end it never saw: seconds to wait, "
        "writing nothing, for the sidecar to say that snapshot is Ready or failed (a pod started while its "
        "predecessor's snapshot uploads must not write the volume). 0: do not wait.",
    )
    delete_consumed_snapshot = Bool(
        True,
        config=True,
        help="After a live return, once PodRestored is True, delete the snapshot (and its trigger): otherwise a "
        "later restart of this pod would silently restore that older state.",
    )

    readiness_port = Int(
        0,
        config=True,
        help="Port of a readiness endpoint (GET, any path) that answers 503 from just before the settle until the "
        "return: the pod's readinessProbe points at it, so Kubernetes drops the pod from its Service before the "
        "freeze. 0: off.",
    )
    readiness_host = Unicode(
        "0.0.0.0", config=True, help="Address of the readiness endpoint (the kubelet probes the pod IP)."
    )

    #: Reads the NVIDIA driver version for the preflight (a seam: tests give a version).
    driver_version_reader: Callable[[], str | None] = staticmethod(read_driver_version)

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        #: Restarts the recorded kernels on a cold start, as on one machine.
        self.cold_restart = LocalBackend(parent=self)
        #: Journal entries of the last suspend cycle a previous process wrote (see :meth:`recall`).
        self._cycle: list[dict[str, Any]] = []
        self._background: set[asyncio.Task[None]] = set()
        #: The read of the sidecar facts in flight (the notes and the blockers of a dry run share it).
        self._facts: asyncio.Future[_SidecarFacts] | None = None
        #: At start-up: the previous pod's snapshot this process waited for (see :meth:`recall`); None: none.
        self.predecessor: dict[str, Any] | None = None
        self.readiness = (
            ReadinessServer(self.readiness_host, self.readiness_port).start() if self.readiness_port else None
        )
        #: When this server process (in a cold pod: the pod) started, as near as the backend knows: when it
        #: was loaded (a process's start time from /proc has whole-second error: the boot time's).
        self.started_at = time.time()

    # -- parts -------------------------------------------------------------------------

    def signals(self) -> PodSignals:
        """The in-pod signals (a seam: tests replace the clocks)."""
        return PodSignals(
            pod_uid_env=self.pod_uid_env,
            pod_uid_file=self.pod_uid_file,
            spec_environ_path=self.spec_environ_path,
            clock_jump_threshold=self.clock_jump_threshold,
        )

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "sidecar": self.sidecar_socket}

    async def sidecar_problem(self) -> str | None:
        """Why the sidecar cannot serve a suspend now (None: it answers).

        A short timeout: a preflight must not hang on a sidecar that does not answer."""
        client = self.client(timeout=min(HEALTH_TIMEOUT, self.sidecar_timeout))
        if not await client.healthy():
            return (
                f"the sidecar does not answer at {client.socket_path} (is the 'sidecar' container running, "
                "and its volume mounted in this container?)"
            )
        if not os.path.exists(client.secret_path):
            return f"the sidecar's secret {client.secret_path} is missing (is the sidecar starting?)"
        return None

    async def _preflight_facts(self) -> _SidecarFacts:
        """The sidecar's health and its view of the pod and policy, read once for the notes and the
        blockers of one dry run (a read in flight is shared), each call bounded by the health timeout."""
        if self._facts is None or self._facts.done():
            self._facts = asyncio.ensure_future(self._read_facts())
        return await asyncio.shield(self._facts)

    async def _read_facts(self) -> _SidecarFacts:
        problem = await self.sidecar_problem()
        if problem:
            return _SidecarFacts(problem=problem)
        try:
            pod = await self.client(timeout=min(HEALTH_TIMEOUT, self.sidecar_timeout)).pod()
        except (SidecarError, SidecarUnavailable) as exc:
            return _SidecarFacts(pod_error=str(exc))
        return _SidecarFacts(pod=pod)

    async def preflight_notes(self, environment: Any) -> list[str]:
        facts = await self._preflight_facts()
        if facts.problem:
            return [f"A suspend would be refused now: {facts.problem}. Nothing would be released."]
        notes = [
            f"The sidecar answers at {self.sidecar_socket}; {_policy_note(facts)}",
            "The whole pod is snapshotted, stopped and restored by the platform; "
            "if no compatible snapshot exists the pod starts cold and the application checkpoints are restored.",
        ]
        driver = gpu_driver_note(self.driver_version_reader)
        return [*notes, driver] if driver else notes

    async def preflight_blockers(self, environment: Any) -> list[str]:
        """What would make a suspend abort now: the sidecar, a missing required policy, ``postCheckpoint: resume``."""
        facts = await self._preflight_facts()
        if facts.problem:
            return [f"the snapshot cannot be requested: {facts.problem}"]
        pod = facts.pod
        if pod is None:
            return []  # the sidecar answers; what it could not read is in the notes
        name = pod.get("policy_name")
        if pod.get("policy_mode") == "require" and pod.get("policy_exists") is False:
            return [
                f"the snapshot policy '{name}' does not exist: the platform team installs it "
                "(the sidecar runs with --policy-mode require), and until then a suspend is refused"
            ]
        if pod.get("post_checkpoint") == proto.POST_CHECKPOINT_RESUME:
            return [
                f"the snapshot policy '{name}' has postCheckpoint: resume: the pod keeps running after the "
                "checkpoint, so a suspend would release nothing and abort (set postCheckpoint: stop)"
            ]
        return []

    # -- snapshots (GET/DELETE snapshots) --------------------------------------------------

    async def list_snapshots(self) -> dict[str, Any]:
        try:
            return dict(await self.client().snapshots())
        except SidecarError as exc:
            raise SnapshotError(_passed_on(exc.status), f"{exc.message} ({exc.code})") from exc
        except SidecarUnavailable as exc:
            raise SnapshotError(503, str(exc)) from exc

    async def delete_snapshot(self, name: str) -> dict[str, Any]:
        try:
            return dict(await self.client().delete_snapshot(name))
        except SidecarError as exc:
            raise SnapshotError(_passed_on(exc.status), f"{exc.message} ({exc.code})") from exc
        except SidecarUnavailable as exc:
            raise SnapshotError(503, str(exc)) from exc

    # -- suspend -----------------------------------------------------------------------

    async def release(self, ctx: ReleaseContext) -> ReturnedLive:
        record = _recorder(ctx, self.log)
        problem = await self.sidecar_problem()
        if problem:
            raise FlushFailed("release.sidecar", f"{problem}. {KEEPS_RUNNING}")
        # Out of the Service until the suspend ends (aborted, or back in a restored pod), whatever happens.
        if self.readiness is not None:
            self.readiness.suspending()
        try:
            return await self._release(ctx, record)
        finally:
            if self.readiness is not None:
                self.readiness.ready()

    async def _release(self, ctx: ReleaseContext, record: Recorder) -> ReturnedLive:
        client = self.client()
        # Quiet: the flush is done and the pod is leaving its Service (readiness fails); let the kernels' and the
        # browser's sockets settle before the freeze.
        await asyncio.sleep(max(0.0, self.settle_seconds))
        signals = self.signals()
        before = signals.identity()
        record(EV_IDENTITY, identity=before.to_dict(), server_boot_id=BOOT_ID, settle_seconds=self.settle_seconds)

        try:
            requested = await client.request_snapshot()
        except SidecarError as exc:
            raise FlushFailed(
                "release.request",
                f"the snapshot could not be requested: {exc.message} ({exc.code}). {_kube_next_step(exc)} "
                + KEEPS_RUNNING,
            ) from exc
        except SidecarUnavailable as exc:
            raise FlushFailed(
                "release.request", f"the snapshot could not be requested: {exc}. {KEEPS_RUNNING}"
            ) from exc
        progress = _Progress(trigger=requested["trigger"], requested_at=time.time())
        record(
            EV_REQUESTED,
            mark="snapshot_requested",
            mark_at=progress.requested_at,
            trigger=progress.trigger,
            policy=requested.get("policy"),
            policy_created=requested.get("policy_created"),
            pod=requested.get("pod"),
            namespace=requested.get("namespace"),
            requested_at=progress.requested_at,
        )
        self.log.info("jupyter-suspend: snapshot requested (trigger %s)", progress.trigger)

        check = await self._until_return(client, signals, before, progress, record)
        return self._returned(ctx, client, check, before, progress, record)

    async def _until_return(
        self,
        client: SidecarClient,
        signals: PodSignals,
        before: PodIdentity,
        progress: _Progress,
        record: Recorder,
    ) -> ReturnCheck:
        """Follow the snapshot and watch for the return, whichever decides first."""
        follow = asyncio.ensure_future(self._follow(client, progress, record))
        back = asyncio.ensure_future(self._watch_return(signals, before, progress))
        try:
            done, _ = await asyncio.wait({follow, back}, return_when=asyncio.FIRST_COMPLETED)
            if back in done:
                return back.result()
            try:
                follow.result()
                # Ready. With postCheckpoint: stop the pod stops now and this
                # process continues only in the restored pod.
                await self._after_ready(client, progress, record)
            except _Abort as failure:
                # A return (seen only now) beats a failure read afterwards.
                check = signals.check(before)
                if check.returned:
                    return check
                await self._abort(client, progress, failure, record)
            return await back
        finally:
            for task in (follow, back):
                task.cancel()
            await asyncio.gather(follow, back, return_exceptions=True)

    async def _follow(self, client: SidecarClient, progress: _Progress, record: Recorder) -> None:
        """Return when the snapshot is Ready; raise :class:`_Abort` when it will not be."""
        deadline = time.monotonic() + self.snapshot_timeout
        since: str | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Abort(
                    "release.snapshot",
                    f"snapshot {progress.snapshot or '(not created yet)'} of trigger {progress.trigger} was not "
                    f"Ready within {self.snapshot_timeout:g} s (last phase: {progress.phase})",
                    "Check the PodSnapshotManualTrigger and PodSnapshot (kubectl describe) and GKE's snapshot "
                    "controller; then suspend again.",
                    progress.snapshot,
                )
            wait = max(0.0, min(self.follow_interval, proto.MAX_WAIT_SECONDS, remaining))
            try:
                view = await client.follow(progress.trigger, wait=wait, since=since)
            except SidecarError as exc:
                if not exc.retryable:
                    raise _Abort(
                        "release.follow",
                        f"the snapshot's progress could not be read: {exc.message} ({exc.code})",
                        _kube_next_step(exc),
                        progress.snapshot,
                    ) from exc
                self.log.warning("jupyter-suspend: following the snapshot: %s (retrying)", exc)
                await asyncio.sleep(min(1.0, max(0.0, remaining)))
                continue
            except SidecarUnavailable as exc:
                self.log.warning("jupyter-suspend: following the snapshot: %s (retrying)", exc)
                await asyncio.sleep(min(1.0, max(0.0, remaining)))
                continue
            since = view["phase"]
            self._learn(view, progress, record)
            if view["phase"] == "ready":
                return
            if view["phase"] == "failed":
                raise self._failure(view, progress)

    def _learn(self, view: proto.SnapshotProgress, progress: _Progress, record: Recorder) -> None:
        """Note the checkpoint and Ready times once each (the conditions' own times).

        Condition times have whole seconds: on the timeline (``mark_at``) a
        step never comes before the one it follows (``condition_time`` keeps
        what the API said)."""
        progress.phase = view["phase"]
        progress.snapshot = view.get("snapshot") or progress.snapshot
        checkpoint = _condition(view, "snapshot", "Checkpoint")
        done = checkpoint is not None and (checkpoint["status"] == "True" or checkpoint["reason"] == "Succeeded")
        if checkpoint is not None and done and EV_CHECKPOINTED not in progress.noted:
            progress.noted.add(EV_CHECKPOINTED)
            progress.checkpoint_at = rfc3339_epoch(checkpoint["lastTransitionTime"]) or time.time()
            record(
                EV_CHECKPOINTED,
                mark="checkpoint_done",
                mark_at=max(progress.checkpoint_at, progress.requested_at),
                trigger=progress.trigger,
                snapshot=progress.snapshot,
                checkpoint_at=progress.checkpoint_at,
                condition_time=checkpoint["lastTransitionTime"],
            )
        ready = _condition(view, "snapshot", "Ready")
        if view["phase"] == "ready" and EV_READY not in progress.noted:
            progress.noted.add(EV_READY)
            condition_time = ready["lastTransitionTime"] if ready else None
            progress.ready_at = rfc3339_epoch(condition_time) or time.time()
            record(
                EV_READY,
                mark="snapshot_ready",
                mark_at=max(progress.ready_at, progress.checkpoint_at or 0.0, progress.requested_at),
                trigger=progress.trigger,
                snapshot=progress.snapshot,
                ready_at=progress.ready_at,
                condition_time=condition_time,
                ready_reason=ready["reason"] if ready else None,
                gcs_path=view.get("gcs_path"),
                size_bytes=view.get("size_bytes"),
            )

    def _failure(self, view: proto.SnapshotProgress, progress: _Progress) -> _Abort:
        triggered = _condition(view, "trigger", "Triggered")
        checkpoint = _condition(view, "snapshot", "Checkpoint")
        detail = f"{view.get('reason') or 'no reason'}: {view.get('message') or 'no message'}"
        if triggered and triggered["status"] != "True" and triggered["reason"] in ("Failed", "Error"):
            return _Abort(
                "release.trigger",
                f"GKE could not trigger the snapshot (trigger {progress.trigger}, {detail})",
                f"Check the PodSnapshotPolicy that selects this pod and its storage config "
                f"(kubectl describe podsnapshotmanualtrigger {progress.trigger}); then suspend again.",
                progress.snapshot,
            )
        if checkpoint is not None:
            return _Abort(
                "release.checkpoint",
                f"the checkpoint of snapshot {progress.snapshot} failed ({detail})",
                "GKE Sandbox could not checkpoint this pod (see kubectl describe podsnapshot "
                f"{progress.snapshot}); then suspend again.",
                progress.snapshot,
            )
        return _Abort(
            "release.snapshot",
            f"the snapshot failed ({detail})",
            f"See kubectl describe podsnapshotmanualtrigger {progress.trigger}; then suspend again.",
            progress.snapshot,
        )

    async def _abort(self, client: SidecarClient, progress: _Progress, failure: _Abort, record: Recorder) -> None:
        """A snapshot that will not be used must not be restored later: delete it (best effort)."""
        deleted: str | None = None
        if failure.snapshot:
            try:
                await client.delete_snapshot(failure.snapshot)
                deleted = failure.snapshot
            except (SidecarError, SidecarUnavailable) as exc:
                self.log.warning("jupyter-suspend: could not delete snapshot %s: %s", failure.snapshot, exc)
        record(
            EV_ABORTED,
            mark="snapshot_aborted",
            trigger=progress.trigger,
            snapshot=failure.snapshot,
            step=failure.step,
            failure_reason=failure.reason,
            deleted=deleted,
        )
        cleanup = f" The unfinished snapshot {deleted} was deleted." if deleted else ""
        raise FlushFailed(failure.step, f"{failure.reason}.{cleanup} {failure.next_step} {KEEPS_RUNNING}")

    async def _after_ready(self, client: SidecarClient, progress: _Progress, record: Recorder) -> None:
        """Seen Ready while still running: is the pod stopping (``postCheckpoint: stop``)?"""
        try:
            pod = await client.pod()
        except (SidecarError, SidecarUnavailable) as exc:
            self.log.warning("jupyter-suspend: snapshot Ready; the pod could not be read: %s", exc)
            return
        if pod.get("phase") in ("Succeeded", "Failed"):
            progress.stopped_at = time.time()
            record(
                EV_STOPPED,
                mark="pod_stopped",
                mark_at=progress.stopped_at,
                trigger=progress.trigger,
                snapshot=progress.snapshot,
                phase=pod.get("phase"),
            )
            self.log.info("jupyter-suspend: snapshot %s Ready, pod stopped; waiting to return", progress.snapshot)
            return
        # The pod keeps running: its policy says postCheckpoint: resume.
        # Nothing was released, and a Ready snapshot left behind would be
        # restored by the next restart of this pod (_abort deletes it).
        raise _Abort(
            "release.policy",
            f"snapshot {progress.snapshot} is Ready but the pod kept running (phase {pod.get('phase')}): the "
            "PodSnapshotPolicy has postCheckpoint: resume, so nothing was released",
            "Set spec.triggerConfig.postCheckpoint: stop on the pod's PodSnapshotPolicy, then suspend again.",
            progress.snapshot,
        )

    async def _watch_return(self, signals: PodSignals, before: PodIdentity, progress: _Progress) -> ReturnCheck:
        interval = max(0.05, self.return_check_interval)
        while True:
            check = signals.check(before)
            if check.returned:
                return check
            progress.last_tick = check.now.wall if check.now else time.time()
            await asyncio.sleep(interval)

    # -- the return in a new pod -------------------------------------------------------

    def _returned(
        self,
        ctx: ReleaseContext,
        client: SidecarClient,
        check: ReturnCheck,
        before: PodIdentity,
        progress: _Progress,
        record: Recorder,
    ) -> ReturnedLive:
        now = time.time()
        # When the pod stopped: the checkpoint froze it; else the last tick before the jump.
        if progress.checkpoint_at is not None:
            stopped_at, stopped_from = progress.checkpoint_at, "Checkpoint condition"
        elif progress.stopped_at is not None:
            stopped_at, stopped_from = progress.stopped_at, "pod seen stopped"
        elif progress.last_tick is not None:
            stopped_at, stopped_from = progress.last_tick, "last in-pod reading before the freeze"
        else:
            stopped_at, stopped_from = progress.requested_at, "snapshot request"
        stopped_at = min(stopped_at, now)
        detail: dict[str, Any] = {
            "trigger": progress.trigger,
            "snapshot": progress.snapshot,
            "signals": check.signals,
            "clock_jump_seconds": round(check.clock_jump_seconds, 3),
            "old_pod_uid": before.pod_uid,
            "new_pod_uid": check.new_pod_uid,
            "identity_before": before.to_dict(),
            "identity_after": check.now.to_dict() if check.now else None,
            "environment_stopped_from": stopped_from,
            "checkpoint_at": progress.checkpoint_at,
            "ready_at": progress.ready_at,
        }
        record(
            EV_RETURNED,
            mark="pod_returned_live",
            mark_at=now,
            trigger=progress.trigger,
            snapshot=progress.snapshot,
            signals=check.signals,
            clock_jump_seconds=detail["clock_jump_seconds"],
            old_pod_uid=before.pod_uid,
            new_pod_uid=check.new_pod_uid,
            environment_stopped_at=stopped_at,
            environment_stopped_from=stopped_from,
            returned_at=now,
        )
        self.log.info("jupyter-suspend: back from snapshot %s: %s", progress.snapshot, "; ".join(check.signals))
        self._spawn(self._after_return(client, progress, record))
        return ReturnedLive(
            snapshot=progress.snapshot or f"(of trigger {progress.trigger})",
            environment_stopped_at=stopped_at,
            restored_at=now,
            detail=detail,
        )

    async def stop(self) -> None:
        """Shutting down: stop following the pod after a return (``PodRestored``), close the readiness endpoint."""
        if self.readiness is not None:
            self.readiness.close()
            self.readiness = None
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _after_return(self, client: SidecarClient, progress: _Progress, record: Recorder) -> None:
        """In the background, after the return: what the old pod could not see (frozen), then PodRestored."""
        try:
            # The checkpoint and Ready times, unseen if the checkpoint froze us first.
            if EV_READY not in progress.noted:
                with contextlib.suppress(SidecarError, SidecarUnavailable, asyncio.TimeoutError):
                    view = await asyncio.wait_for(client.follow(progress.trigger), self.sidecar_timeout)
                    self._learn(view, progress, record)
            deadline = time.monotonic() + self.pod_restored_timeout
            while time.monotonic() < deadline:
                try:
                    pod = await client.pod()
                except (SidecarError, SidecarUnavailable) as exc:
                    self.log.debug("jupyter-suspend: reading the pod after the return: %s", exc)
                    pod = None
                if pod is not None and pod.get("restored"):
                    condition = next((c for c in pod.get("conditions", []) if c["type"] == "PodRestored"), None)
                    seen_at = time.time()
                    condition_time = condition["lastTransitionTime"] if condition else None
                    record(
                        EV_POD_RESTORED,
                        mark="pod_restored",
                        # Whole seconds: never before what happened in the old pod.
                        mark_at=max(rfc3339_epoch(condition_time) or seen_at, *progress.times()),
                        trigger=progress.trigger,
                        snapshot=progress.snapshot,
                        pod_restored_message=pod.get("restored_message"),
                        condition_time=condition_time,
                        pod_uid=pod.get("uid"),
                        seen_at=seen_at,
                    )
                    await self._delete_consumed(client, progress, record)
                    return
                await asyncio.sleep(max(0.05, self.pod_restored_poll))
            self.log.warning(
                "jupyter-suspend: no PodRestored condition within %g s of the return", self.pod_restored_timeout
            )
        except asyncio.CancelledError:
            raise
        except Exception:  # a background nicety must never hurt the session
            self.log.exception("jupyter-suspend: following the pod after the return failed")

    async def _delete_consumed(self, client: SidecarClient, progress: _Progress, record: Recorder) -> None:
        if not self.delete_consumed_snapshot or not progress.snapshot:
            return
        try:
            answer = await client.delete_snapshot(progress.snapshot)
        except (SidecarError, SidecarUnavailable) as exc:
            self.log.warning("jupyter-suspend: could not delete the consumed snapshot %s: %s", progress.snapshot, exc)
            return
        record(
            EV_DELETED,
            mark="snapshot_deleted",
            snapshot=answer.get("deleted"),
            trigger=answer.get("trigger"),
            why="consumed",
        )

    # -- a new server process ----------------------------------------------------------

    def recall(self, entries: list[dict[str, Any]]) -> None:
        """The journal entries of the last suspend cycle a previous process wrote
        (called by the core at start-up, before :meth:`interpret_cold_start` and before its first journal write).

        If that cycle requested a snapshot whose end this journal never saw, the snapshot may still be uploading:
        this pod was then started by the StatefulSet controller while its predecessor's snapshot is not Ready, and
        GKE warns that volume writes after a checkpoint risk a failed or inconsistent restore. So nothing is
        written (the core writes only after this returns) until the sidecar says the snapshot is Ready or failed
        -- the releaser scales the StatefulSet to 0 once it is Ready, which usually ends this pod first."""
        self._cycle = list(entries)
        self.predecessor = self._hold_while_predecessor_uploads()

    def _unfinished_trigger(self) -> str | None:
        """The trigger of the last cycle's snapshot request, if no later entry says how it ended."""
        ended = {EV_READY, EV_ABORTED, EV_RETURNED, EV_COLD, EV_STOPPED}
        for entry in reversed(self._cycle):
            if entry.get("kind") in ended:
                return None
            if entry.get("kind") == EV_REQUESTED:
                trigger = entry.get("trigger")
                return trigger if isinstance(trigger, str) and trigger else None
        return None

    def _hold_while_predecessor_uploads(self) -> dict[str, Any] | None:
        trigger = self._unfinished_trigger()
        if trigger is None or self.predecessor_wait_seconds <= 0:
            return None
        if self.readiness is not None:
            self.readiness.suspending()  # not serving yet: stay out of the Service
        started = time.monotonic()
        self.log.warning(
            "jupyter-suspend: the previous pod's snapshot (trigger %s) may still be uploading; this server writes "
            "nothing until it is Ready or failed (at most %g s)",
            trigger,
            self.predecessor_wait_seconds,
        )
        with ThreadPoolExecutor(max_workers=1) as pool:  # recall() is synchronous; the client is not
            phase = pool.submit(asyncio.run, self._predecessor_phase(trigger)).result()
        waited = round(time.monotonic() - started, 3)
        self.log.info("jupyter-suspend: the previous pod's snapshot is %s (waited %.1f s)", phase, waited)
        if self.readiness is not None:
            self.readiness.ready()
        return {"trigger": trigger, "phase": phase, "waited_seconds": waited}

    async def _predecessor_phase(self, trigger: str) -> str:
        """``ready`` / ``failed`` / ``gone`` (the trigger no longer exists) / ``unknown`` (no answer in time)."""
        deadline = time.monotonic() + self.predecessor_wait_seconds
        client = self.client()
        silent_since: float | None = None
        while time.monotonic() < deadline:
            # A sidecar that never answers (not in this pod) cannot tell: do not hold the server for long.
            if silent_since is not None and time.monotonic() - silent_since > PREDECESSOR_SIDECAR_SILENCE:
                return "unknown"
            try:
                wait = max(0.0, min(self.follow_interval, deadline - time.monotonic(), proto.MAX_WAIT_SECONDS))
                view = await client.follow(trigger, wait=wait)
                if view["phase"] in proto.TERMINAL_PHASES:
                    return str(view["phase"])
                silent_since = None
            except SidecarError as exc:
                if exc.status == 404:
                    return "gone"
                silent_since = None
                await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            except SidecarUnavailable:  # the sidecar may still be starting
                silent_since = silent_since if silent_since is not None else time.monotonic()
                await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        return "unknown"

    def _last(self, kind: str) -> dict[str, Any] | None:
        return next((e for e in reversed(self._cycle) if e.get("kind") == kind), None)

    def why_cold(self) -> str:
        """Why this pod did not come back live, as far as the journal tells."""
        requested = self._last(EV_REQUESTED)
        ready = self._last(EV_READY)
        aborted = self._last(EV_ABORTED)
        if ready is not None:
            when = _when(ready.get("ready_at"))
            return (
                f"snapshot {ready.get('snapshot')} was Ready at {when}, but this pod did not start from it: "
                "the pod spec probably changed (image, command, environment, volumes, security context: "
                "GKE then starts the pod cold), or the snapshot expired or was deleted"
            )
        if aborted is not None:
            return f"the last snapshot was abandoned ({aborted.get('failure_reason')})"
        if requested is not None:
            when = _when(requested.get("requested_at"))
            return (
                f"the snapshot requested at {when} (trigger {requested.get('trigger')}) was never seen Ready: "
                "the checkpoint or its upload did not complete, or the pod was replaced before it could be restored"
            )
        return "the previous server stopped before it requested a snapshot"

    def interpret_cold_start(self, last_state: State, last_entry: dict[str, Any] | None) -> ColdStartVerdict:
        when = last_entry.get("time", "an unknown time") if last_entry else "an unknown time"
        if last_state in (State.SNAPSHOTTING, State.RESTORING, State.SUSPENDED, State.WAITING_FOR_CAPACITY):
            # The previous process was inside the snapshot (or verifying its
            # return) and this one started from scratch: the pod came back
            # cold. Suspended with the resume plan journaled before the
            # release; as nobody resumes this backend by request, the core
            # resumes at once (restore() below), and says ready, cold.
            return ColdStartVerdict(
                State.SUSPENDED,
                f"The pod started cold, not from the snapshot: {self.why_cold()}. "
                f"(The previous server last recorded {last_state.value} at {when}.) "
                "The recorded sessions are restarted and their application checkpoints restored.",
            )
        if last_state == State.FLUSHING:
            return ColdStartVerdict(
                State.RUNNING,
                f"The server stopped during a flush at {when}; no snapshot was requested.",
            )
        if last_state == State.FAILED:
            message, next_step = wording.cold_start_failed(when)
            return ColdStartVerdict(State.FAILED, message, next_step=next_step)
        return ColdStartVerdict(State.RUNNING, "")

    async def restore(self, ctx: RestoreContext) -> RestoreOutcome:
        """The cold path only: restart the recorded kernels (never a second snapshot restore)."""
        outcome = await self.cold_restart.restore(ctx)
        outcome.restore = RestoreKind.COLD
        outcome.detail["why_cold"] = self.why_cold()
        record = _recorder(ctx, self.log)
        # The pod (this process) started cold before the kernels came back.
        record(
            EV_COLD,
            mark="pod_started_cold",
            mark_at=self.started_at,
            why_cold=outcome.detail["why_cold"],
            kernels_restarted=len(outcome.kernels),
        )
        return outcome


def _when(epoch: Any) -> str:
    return utc_iso(epoch) if isinstance(epoch, (int, float)) and not isinstance(epoch, bool) else "an unknown time"


def _recorder(ctx: ReleaseContext | RestoreContext, log: Any) -> Recorder:
    """The core's journal hook of this operation (``ctx.record``), logged too."""

    def record(kind: str, **detail: Any) -> None:
        log.debug("jupyter-suspend: %s %s", kind, detail)
        ctx.record(kind, **detail)

    return record
