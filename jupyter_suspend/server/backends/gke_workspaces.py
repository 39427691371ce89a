"""GKE Workspaces: pause the Workspace; the platform's snapshot add-on turns the pause into a GKE Pod Snapshot.

GKE Workspaces (public repository gke-labs/workspaces, ``providers/gke/internal/snapshot``) runs Kubeflow Workspaces
with a snapshot add-on. Its Workspace mutating webhook intercepts ``spec.paused: true``: it keeps ``paused`` false,
annotates the Workspace ``podsnapshot.gke.kubeflow.org/checkpoint-state: Checkpointing``, sets the pod's readiness
gate ``podsnapshot.gke.kubeflow.org/active`` to False (the pod leaves its Service: browser connections drop), waits
about 3 s for sockets to settle, then creates ``ws-<name>-policy`` / ``ws-<name>-trigger``; once the PodSnapshot is
Ready it sets ``paused: true``. On resume its Pod webhook pins the new pod to the snapshot
(``podsnapshot.gke.io/ps-name`` on the Pod at creation, never on the StatefulSet template).

So here a suspend is: flush (the core), then ask the sidecar to pause the own Workspace -- exactly what the
``kubeflow-workspace`` backend does -- but the kernels are *not* stopped: they are frozen in the snapshot. This
process then either continues in a restored pod (the in-pod signals of :mod:`..pod_return` tell it; the core then
judges the return by the live-state canary: LIVE or COLD, never assumed), or it never continues and a new pod's
server finds the journal and restarts the sessions from files and application checkpoints (cold).

Which mode applies is read, not assumed: the add-on is taken as active for this pod when its readiness gate is on
the pod or its checkpoint-state annotation is on the Workspace (the sidecar reports both). Without either, a pause
is a plain Kubeflow pause (kernel memory lost), and this backend refuses to suspend rather than surprise the user:
the dry run says so and names the ``kubeflow-workspace`` backend. What the add-on does between the pause request
and the return is the platform's and cannot be observed from a frozen pod: unverified here beyond its public code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from traitlets import Bool, Float, Unicode

from ...common import sidecar_protocol as proto
from ..pod_return import (
    DEFAULT_CLOCK_JUMP_THRESHOLD,
    DEFAULT_POD_UID_ENV,
    DEFAULT_POD_UID_FILE,
    DEFAULT_SPEC_ENVIRON_PATH,
    PodIdentity,
    PodSignals,
    ReturnCheck,
)
from ..sidecar_client import SidecarError, SidecarUnavailable
from ..states import FlushFailed
from .base import Capabilities, ReleaseContext, ReturnedLive
from .gpu_driver import gpu_driver_note, read_driver_version
from .kubeflow import EV_STOP_REQUESTED, KEEPS_RUNNING, KubeflowWorkspaceBackend, _next_step

EV_IDENTITY = "gkews_identity"
EV_ADDON = "gkews_addon_state"
EV_RETURNED = "gkews_returned"

#: What the add-on keeps, in the words every surface uses (status text, dry run, docs).
WHEN_RESTORED = "when the snapshot restores"


def addon_evidence(view: proto.WorkloadView | None) -> list[str]:
    """Why the snapshot add-on is taken as active for this pod (empty: no sign of it)."""
    addon = view.get("snapshot_addon") if view is not None else None
    if not addon:
        return []
    found = []
    if addon.get("pod_readiness_gate"):
        found.append("this pod has the add-on's readiness gate podsnapshot.gke.kubeflow.org/active")
    if addon.get("checkpoint_state"):
        found.append(f"the Workspace's checkpoint-state annotation is {addon['checkpoint_state']}")
    return found


class GKEWorkspacesBackend(KubeflowWorkspaceBackend):
    """Pause the Workspace through the sidecar; GKE Workspaces snapshots the pod; the canary judges the return."""

    name = "gke-workspaces"
    pinned_kinds = KubeflowWorkspaceBackend.pinned_kinds | {EV_IDENTITY, EV_ADDON, EV_RETURNED}
    capabilities = Capabilities(
        keeps_files=True,
        keeps_application_checkpoints=True,
        # When the snapshot restores; the wording says so (describe), and the canary checks it at every return.
        keeps_live_memory=True,
        keeps_gpu_memory=True,
        releases_kernel_memory=True,
        releases_node=True,
        needs_sidecar=True,
        server_survives_suspend=False,
        resume_from_server=False,
        # The add-on owns the snapshots (it deletes the consumed one): not listed or deleted from here.
        keeps_snapshots=False,
    )

    require_addon = Bool(
        True,
        config=True,
        help="Refuse to suspend when no sign of GKE Workspaces' snapshot add-on is found (a pause would then lose "
        "kernel memory). False: suspend anyway (the return is still judged by the live-state canary).",
    )
    return_timeout = Float(
        1800.0,
        config=True,
        help="Seconds (monotonic: a frozen pod does not count them) to wait for the freeze after the pause request "
        "before the suspend is reported failed.",
    )
    return_check_interval = Float(0.5, config=True, help="Seconds between two readings of the in-pod signals.")
    addon_poll_interval = Float(5.0, config=True, help="Seconds between two reads of the Workspace while waiting.")
    pod_uid_env = Unicode(DEFAULT_POD_UID_ENV, config=True, help="Environment variable with this pod's uid.")
    pod_uid_file = Unicode(
        DEFAULT_POD_UID_FILE, config=True, help="Downward-API file with metadata.uid (names the NEW pod after restore)."
    )
    spec_environ_path = Unicode(DEFAULT_SPEC_ENVIRON_PATH, config=True, help="gVisor's view of the pod's environment.")
    clock_jump_threshold = Float(
        DEFAULT_CLOCK_JUMP_THRESHOLD,
        config=True,
        help="Seconds of wall-clock time the monotonic clock did not see that mean the process was frozen.",
    )

    #: Reads the NVIDIA driver version for the preflight (a seam: tests give a version).
    driver_version_reader: Callable[[], str | None] = staticmethod(read_driver_version)

    def signals(self) -> PodSignals:
        return PodSignals(
            pod_uid_env=self.pod_uid_env,
            pod_uid_file=self.pod_uid_file,
            spec_environ_path=self.spec_environ_path,
            clock_jump_threshold=self.clock_jump_threshold,
        )

    # -- what it says ------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        text = described["text"]
        text["keeps"] = [
            f"{item} ({WHEN_RESTORED})" if item in ("variables in kernel memory", "tensors in GPU memory") else item
            for item in text["keeps"]
        ]
        text["while_suspended"] = (
            "GKE Workspaces snapshots the pod (GKE Pod Snapshot) and pauses the Workspace: this server and the "
            "kernels are frozen in the snapshot and the node goes back to the pool. Live memory is kept "
            f"{WHEN_RESTORED}; if GKE starts the pod without it (no compatible snapshot), the sessions restart from "
            "files and application checkpoints. Which one happened is checked at the return, never assumed. The "
            "sidecar beside this server asks for the pause."
        )
        described["mode"] = self.mode()
        return described

    def mode(self) -> dict[str, Any]:
        evidence = addon_evidence(self.last_view)
        if self.last_view is None:
            return {"snapshot_addon": "unknown", "evidence": [], "text": "The Workspace has not been read yet."}
        if evidence:
            return {
                "snapshot_addon": "active",
                "evidence": evidence,
                "text": "GKE Workspaces' snapshot add-on is active for this pod: a pause becomes a Pod Snapshot.",
            }
        return {
            "snapshot_addon": "not detected",
            "evidence": [],
            "text": "No sign of GKE Workspaces' snapshot add-on: a pause would be a plain Kubeflow pause "
            "(kernel memory lost).",
        }

    async def preflight_notes(self, environment: Any) -> list[str]:
        view, problem = await self._read_owner()
        if problem:
            return [f"A suspend would be refused now: {problem}. Nothing would be released."]
        evidence = addon_evidence(view)
        if not evidence:
            return [
                "No sign of GKE Workspaces' snapshot add-on for this pod (no readiness gate "
                "podsnapshot.gke.kubeflow.org/active, no checkpoint-state on the Workspace): a pause would stop the "
                "pod and lose kernel memory. Use the kubeflow-workspace backend for a plain Kubeflow pause."
            ]
        driver = gpu_driver_note(self.driver_version_reader)
        return [
            *([driver] if driver else []),
            "GKE Workspaces' snapshot add-on is active for this pod (" + "; ".join(evidence) + "): the pause becomes "
            f"a GKE Pod Snapshot, and live memory (GPU memory too, with NVIDIA driver 570 or later) is kept "
            f"{WHEN_RESTORED}.",
            "After the return the kernels' canaries tell whether memory came back (live) or the sessions restarted "
            "from files and application checkpoints (cold, e.g. when no compatible snapshot was found).",
        ]

    async def preflight_blockers(self, environment: Any) -> list[str]:
        view, problem = await self._read_owner()
        if problem:
            return [f"the workspace cannot be paused: {problem}"]
        if self.require_addon and not addon_evidence(view):
            return [
                "GKE Workspaces' snapshot add-on is not active for this pod: a pause would lose kernel memory "
                "(use the kubeflow-workspace backend, or enable snapshots for this Workspace)"
            ]
        return []

    # -- suspend -----------------------------------------------------------------------

    async def release(self, ctx: ReleaseContext) -> ReturnedLive:  # type: ignore[override]
        client = self.client()
        view, problem = await self._read_owner()
        if problem or view is None:
            raise FlushFailed("release.sidecar", f"the workspace cannot be paused: {problem}. {KEEPS_RUNNING}")
        evidence = addon_evidence(view)
        if self.require_addon and not evidence:
            raise FlushFailed(
                "release.addon",
                "GKE Workspaces' snapshot add-on is not active for this pod, so a pause would lose kernel memory. "
                f"Use the kubeflow-workspace backend for a plain pause. {KEEPS_RUNNING}",
            )
        signals = self.signals()
        before = signals.identity()
        ctx.record(EV_IDENTITY, identity=before.to_dict(), addon_evidence=evidence)
        try:
            stopped = await self._stop(client, view)
        except (SidecarError, SidecarUnavailable) as exc:
            raise FlushFailed(
                "release.stop", f"the pause could not be requested: {exc}. {_next_step(exc)} {KEEPS_RUNNING}"
            ) from exc
        requested_at = time.time()
        self.last_view = stopped["workload"]
        ctx.record(
            EV_STOP_REQUESTED,
            mark="workspace_pause_requested",
            mark_at=requested_at,
            workload=dict(stopped["workload"]),
            already_stopped=stopped["already_stopped"],
            annotation_or_patch_at=stopped["requested_at"],
        )
        self.log.info("jupyter-suspend: asked GKE Workspaces to pause %s (snapshot)", view["name"])
        check, last_tick = await self._until_return(client, signals, before, ctx, requested_at)
        now = time.time()
        addon = self.last_view["snapshot_addon"] if self.last_view is not None else None
        snapshot = (addon["last_checkpoint"] if addon else None) or "(the snapshot GKE Workspaces took)"
        ctx.record(
            EV_RETURNED,
            mark="pod_returned",
            mark_at=now,
            signals=check.signals,
            clock_jump_seconds=round(check.clock_jump_seconds, 3),
            old_pod_uid=before.pod_uid,
            new_pod_uid=check.new_pod_uid,
            environment_stopped_at=last_tick,
            snapshot=snapshot,
        )
        return ReturnedLive(
            snapshot=snapshot,
            environment_stopped_at=min(last_tick, now),
            restored_at=now,
            detail={"signals": check.signals, "new_pod_uid": check.new_pod_uid, "addon_evidence": evidence},
        )

    async def _until_return(
        self, client: Any, signals: PodSignals, before: PodIdentity, ctx: ReleaseContext, requested_at: float
    ) -> tuple[ReturnCheck, float]:
        """Watch the in-pod signals until this process is back in a (new) pod; journal the add-on's progress."""
        deadline = time.monotonic() + max(0.0, self.return_timeout)
        next_read = 0.0
        last_tick = requested_at
        seen: str | None = None
        while True:
            check = signals.check(before)
            if check.returned:
                return check, last_tick
            last_tick = check.now.wall if check.now else time.time()
            if time.monotonic() >= next_read:
                next_read = time.monotonic() + max(0.1, self.addon_poll_interval)
                try:
                    view = await asyncio.wait_for(client.workload(), max(0.1, self.sidecar_timeout))
                except (SidecarError, SidecarUnavailable, asyncio.TimeoutError):
                    view = None
                if view is not None:
                    self.last_view = view
                    state = ((view.get("snapshot_addon") or {}).get("checkpoint_state")) or "none"
                    if state != seen:
                        seen = state
                        ctx.record(
                            EV_ADDON,
                            mark=f"addon_{state.lower()}",
                            mark_at=time.time(),
                            checkpoint_state=state,
                            workload_state=view.get("state"),
                            paused=view.get("stopped"),
                        )
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"the Workspace was asked to pause at {time.strftime('%H:%M:%S', time.gmtime(requested_at))} UTC "
                    f"but this pod was neither snapshotted nor stopped within {self.return_timeout:g} s (add-on "
                    f"checkpoint-state: {seen}); the kernels are still running. Check the Workspace's events and the "
                    "snapshot add-on's log"
                )
            await asyncio.sleep(max(0.05, self.return_check_interval))

    def why_new_pod(self) -> str:
        requested = self._last(EV_STOP_REQUESTED)
        if requested is None:
            return "the previous server stopped before it asked for the pause"
        return (
            "the Workspace was paused for a GKE Pod Snapshot, and this pod started without it (the snapshot failed, "
            "or GKE found no compatible snapshot and started the pod cold)"
        )
