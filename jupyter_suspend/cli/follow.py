"""From what the API shows (the workload, its pod, the pod's events, a snapshot, the notebook server's own status)
to one plain state a person can act on. Pure functions on plain dicts: no client, no I/O, no clock of its own.

States: ``suspended``, ``waiting_for_capacity``, ``restoring``, ``ready`` (``live`` or ``cold``), ``failed``; the
follower adds ``timed_out`` when its deadline passes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Literal

from jupyter_suspend.common.times import rfc3339 as parse_time
from jupyter_suspend.common.workloads import ORIGIN_POD_ANNOTATION, POD_RESTORED_CONDITION

JSON = dict[str, Any]
State = Literal["suspended", "waiting_for_capacity", "restoring", "ready", "failed", "timed_out"]
FINAL_STATES: frozenset[str] = frozenset({"ready", "failed", "timed_out"})

#: The scheduler's and the cluster autoscaler's events that explain a Pending pod.
SCHEDULING_EVENT_REASONS = ("FailedScheduling", "TriggeredScaleUp", "NotTriggerScaleUp")

#: Container waiting reasons that do not go away by waiting.
STUCK_CONTAINER_REASONS = frozenset(
    {
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CrashLoopBackOff",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)

FALLBACK_STEPS = (
    "The live session may not come back: your work is not lost with it.",
    "Open the notebook files (saved before the suspend) in a fresh session and re-run them.",
    "Reload intermediate state from the application checkpoints: in a notebook, %checkpoint restore.",
    "Check again later with: jupyter suspend status NAME (a resume in progress keeps going on its own).",
)


@dataclasses.dataclass(frozen=True)
class SnapshotView:
    """The PodSnapshot a resume restores from (pinned, or the newest Ready one taken from this pod)."""

    name: str
    pinned: bool
    exists: bool
    ready: bool
    deleting: bool = False


@dataclasses.dataclass(frozen=True)
class Observation:
    """One look at an environment, taken at ``now``."""

    now: datetime
    #: The workload asks for a running pod (replicas > 0, not stopped, not paused).
    wanted: bool
    #: Its pods (any order).
    pods: Sequence[Mapping[str, Any]] = ()
    #: Events whose involvedObject is the current pod.
    events: Sequence[Mapping[str, Any]] = ()
    snapshot: SnapshotView | None = None
    #: ``GET jupyter-suspend/api/status`` of the notebook server, when asked and it answered.
    server: Mapping[str, Any] | None = None
    #: Why the notebook server did not answer, when asked.
    server_error: str | None = None
    #: What the workload's own status says (e.g. a Workspace's ``status.stateMessage``).
    workload_message: str = ""
    #: Events of the controller object that makes the pod (a StatefulSet), read while it asks for a pod and
    #: has none: ``FailedCreate`` says why there is none (e.g. the namespace's ResourceQuota is full).
    controller_events: Sequence[Mapping[str, Any]] = ()


@dataclasses.dataclass(frozen=True)
class Assessment:
    state: State
    message: str
    pod: str | None = None
    #: When the pod entered this state (from its conditions), if known.
    since: datetime | None = None
    scheduling: JSON | None = None
    restore: Literal["live", "cold"] | None = None
    restore_source: Literal["server", "pod"] | None = None
    failure: JSON | None = None

    def seconds_in_state(self, now: datetime) -> float | None:
        return None if self.since is None else max(0.0, (now - self.since).total_seconds())


def condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    for entry in ((obj or {}).get("status") or {}).get("conditions") or []:
        if isinstance(entry, Mapping) and entry.get("type") == kind:
            return entry
    return None


def is_true(obj: Mapping[str, Any] | None, kind: str) -> bool:
    return (condition(obj, kind) or {}).get("status") == "True"


#: Phases of a pod that has finished (a pod stopped by ``postCheckpoint: stop`` is Succeeded).
STOPPED_PHASES = ("Succeeded", "Failed")


def pod_phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def current_pod(pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The pod that counts: the newest one not being deleted and not finished (a pod stopped by a snapshot's
    ``postCheckpoint: stop`` is Succeeded and stands for nothing running)."""
    alive = [
        pod
        for pod in pods
        if not (pod.get("metadata") or {}).get("deletionTimestamp") and pod_phase(pod) not in STOPPED_PHASES
    ]
    failed = [
        pod for pod in pods if pod_phase(pod) == "Failed" and not (pod.get("metadata") or {}).get("deletionTimestamp")
    ]
    candidates = alive or failed
    if not candidates:
        return None
    return max(candidates, key=lambda pod: str((pod.get("metadata") or {}).get("creationTimestamp") or ""))


def newest_scheduling_event(events: Sequence[Mapping[str, Any]]) -> JSON | None:
    return _newest(events, SCHEDULING_EVENT_REASONS)


def failed_pod_creation(events: Sequence[Mapping[str, Any]]) -> JSON | None:
    """The StatefulSet controller's newest ``FailedCreate`` if no pod was created since (``SuccessfulCreate``).
    A full ResourceQuota is the common cause: the API server refuses the pod before any scheduler sees it
    (kube-controller-manager's StatefulSet controller records ``FailedCreate`` with the admission message)."""
    newest = _newest(events, ("FailedCreate", "SuccessfulCreate"))
    return newest if newest is not None and newest["reason"] == "FailedCreate" else None


def _newest(events: Sequence[Mapping[str, Any]], reasons: Sequence[str]) -> JSON | None:
    relevant = [e for e in events if e.get("reason") in reasons]
    if not relevant:
        return None

    def when(event: Mapping[str, Any]) -> str:
        # Two writers, two shapes: client-go's core/v1 recorder (cluster-autoscaler, the controller-manager) sets
        # lastTimestamp/count in whole seconds; the events.k8s.io recorder (kube-scheduler's FailedScheduling) sets
        # only eventTime in microseconds, and a repeat goes to series.lastObservedTime/series.count.
        series = event.get("series") or {}
        return str(
            series.get("lastObservedTime")
            or event.get("lastTimestamp")
            or event.get("eventTime")
            or event.get("firstTimestamp")
            or ""
        )

    def order(event: Mapping[str, Any]) -> tuple[datetime, int]:
        # Compared as times, to the whole second (the coarser writer's precision; as strings "…:39Z" would sort
        # after "…:39.35Z"); within one second the resourceVersion says which was written later.
        moment = parse_time(when(event))
        second = moment.replace(microsecond=0) if moment is not None else _EPOCH
        rv = str((event.get("metadata") or {}).get("resourceVersion") or "0")
        return second, int(rv) if rv.isdigit() else 0

    newest = max(relevant, key=order)
    count = (newest.get("series") or {}).get("count") or newest.get("count") or 1
    return {
        "reason": str(newest.get("reason")),
        "message": str(newest.get("message") or ""),
        "count": int(count),
        "time": when(newest) or None,
    }


_EPOCH = datetime.fromtimestamp(0, timezone.utc)


def _stuck_container(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    status = pod.get("status") or {}
    for entry in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = ((entry or {}).get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK_CONTAINER_REASONS:
            return f"{entry.get('name', '?')}: {waiting['reason']}", str(waiting.get("message") or "")
    return None


def assess(obs: Observation) -> Assessment:
    """The plain state of the environment in ``obs``."""
    assessment = _assess(obs)
    if obs.workload_message and assessment.state in ("suspended", "restoring", "failed"):
        # What the workload's own controller says (a Workspace's state message) belongs beside ours.
        return dataclasses.replace(assessment, message=f"{assessment.message} [{obs.workload_message}]")
    return assessment


def _assess(obs: Observation) -> Assessment:
    snap = obs.snapshot
    pod = current_pod(obs.pods)
    restored = pod is not None and is_true(pod, POD_RESTORED_CONDITION)
    if snap is not None and snap.pinned and obs.wanted and not restored and (not snap.exists or snap.deleting):
        gone = "does not exist" if not snap.exists else "is being deleted"
        return Assessment(
            "failed",
            f"the pinned PodSnapshot {snap.name} {gone}: the live session cannot be restored from it",
            pod=_name(pod),
            failure={
                "reason": f"PodSnapshot {snap.name} {gone}",
                "next_step": "resume without --snapshot (the newest Ready snapshot, or a cold start), then recover "
                "from the notebook files and application checkpoints (%checkpoint restore)",
            },
        )
    if pod is None:
        if not obs.wanted:
            return Assessment("suspended", _suspended_message(snap))
        refused = failed_pod_creation(obs.controller_events)
        if refused is not None and "exceeded quota" in refused["message"]:
            # The ResourceQuota admission's words: room comes back when other pods of the namespace stop.
            return Assessment(
                "waiting_for_capacity",
                f"the pod is not created yet: the namespace's ResourceQuota has no room for it "
                f"(FailedCreate: {refused['message']})",
                since=parse_time(refused["time"]),
                scheduling={"reason": "FailedCreate", "message": refused["message"], "event": refused},
            )
        if refused is not None:
            # Any other refusal (a missing RuntimeClass, a policy, a bad template) does not go away by waiting.
            return Assessment(
                "failed",
                f"the pod cannot be created: {refused['message']}",
                failure={
                    "reason": f"FailedCreate: {refused['message']}",
                    "next_step": "kubectl describe statefulset (its events); ask the platform team to fix what the "
                    "API server refused, then resume again",
                },
            )
        return Assessment("restoring", "the workload is scaled up; waiting for its pod to be created")
    name = _name(pod)
    if not obs.wanted and not is_true(pod, "Ready"):
        return Assessment("suspended", _suspended_message(snap) + f" (pod {name} is going away)", pod=name)
    if pod_phase(pod) == "Failed":
        reason = str((pod.get("status") or {}).get("reason") or "Failed")
        return Assessment(
            "failed",
            f"pod {name} failed: {(pod.get('status') or {}).get('message') or reason}",
            pod=name,
            failure={
                "reason": f"pod {name} failed ({reason})",
                "next_step": f"kubectl describe pod {name}; then recover from the notebook files and application "
                "checkpoints (%checkpoint restore)",
            },
        )
    stuck = _stuck_container(pod)
    if stuck is not None:
        return Assessment(
            "failed",
            f"pod {name} cannot start: {stuck[0]} {stuck[1]}".rstrip(),
            pod=name,
            failure={
                "reason": stuck[0],
                "next_step": f"kubectl describe pod {name} (image, configuration); ask the platform team if the "
                "image or node pool changed",
            },
        )
    scheduled = condition(pod, "PodScheduled")
    if not (pod.get("spec") or {}).get("nodeName") and (scheduled is None or scheduled.get("status") != "True"):
        since = parse_time((scheduled or {}).get("lastTransitionTime")) or parse_time(
            (pod.get("metadata") or {}).get("creationTimestamp")
        )
        event = newest_scheduling_event(obs.events)
        reason = str((scheduled or {}).get("reason") or "Pending")
        detail = str((scheduled or {}).get("message") or "")
        said = f"{reason}: {detail}" if detail else reason
        if event is not None:
            said += f"; {event['reason']}: {event['message']}"
        return Assessment(
            "waiting_for_capacity",
            f"pod {name} is waiting for a node ({said})",
            pod=name,
            since=since,
            scheduling={"reason": reason, "message": detail, "event": event},
        )
    if not is_true(pod, "Ready"):
        since = parse_time((scheduled or {}).get("lastTransitionTime"))
        return Assessment("restoring", f"pod {name} is scheduled and starting", pod=name, since=since)
    return _ready(obs, pod, snap)


def _ready(obs: Observation, pod: Mapping[str, Any], snap: SnapshotView | None) -> Assessment:
    name = _name(pod)
    ready_since = parse_time((condition(pod, "Ready") or {}).get("lastTransitionTime"))
    if obs.server is not None:
        state = obs.server.get("state")
        if state == "ready" or state == "running":
            restore = obs.server.get("restore")
            kind: Literal["live", "cold"] | None = restore if restore in ("live", "cold") else None
            said = f"{kind} per the notebook server" if kind else "running (the server reports no restore)"
            return Assessment(
                "ready",
                f"pod {name} is Ready; {said}",
                pod=name,
                since=ready_since,
                restore=kind,
                restore_source="server",
            )
        if state == "failed":
            failure = obs.server.get("failure") or {}
            return Assessment(
                "failed",
                f"the notebook server in pod {name} reports a failed resume: {failure.get('reason', '?')}",
                pod=name,
                failure={
                    "reason": str(failure.get("reason") or "the notebook server reports failed"),
                    "next_step": str(failure.get("next_step") or "open JupyterLab and acknowledge the failure"),
                },
            )
        return Assessment(
            "restoring",
            f"pod {name} is Ready; the notebook server says {state}: {obs.server.get('message', '')}".rstrip(": "),
            pod=name,
            since=ready_since,
        )
    if obs.server_error is not None:
        return Assessment(
            "restoring",
            f"pod {name} is Ready; waiting for the notebook server to answer ({obs.server_error})",
            pod=name,
            since=ready_since,
        )
    restored = condition(pod, POD_RESTORED_CONDITION)
    if restored is not None and restored.get("status") == "True":
        return Assessment(
            "ready",
            f"pod {name} is Ready; live per GKE ({restored.get('message') or 'PodRestored'})",
            pod=name,
            since=parse_time(restored.get("lastTransitionTime")) or ready_since,
            restore="live",
            restore_source="pod",
        )
    if snap is not None and snap.exists and not snap.deleting and (snap.pinned or snap.ready):
        return Assessment(
            "restoring",
            f"pod {name} is Ready; waiting for GKE's {POD_RESTORED_CONDITION} (memory restore from {snap.name})",
            pod=name,
            since=ready_since,
        )
    return Assessment(
        "ready",
        f"pod {name} is Ready; cold start per the pod (no snapshot to restore from, no {POD_RESTORED_CONDITION})",
        pod=name,
        since=ready_since,
        restore="cold",
        restore_source="pod",
    )


def _name(pod: Mapping[str, Any] | None) -> str | None:
    return None if pod is None else str((pod.get("metadata") or {}).get("name") or "")


def _suspended_message(snap: SnapshotView | None) -> str:
    if snap is None or not snap.exists:
        return "nothing is running (no snapshot to restore from: a resume starts cold)"
    return f"nothing is running; PodSnapshot {snap.name} is {'Ready' if snap.ready else 'not Ready yet'}"


def snapshot_view(
    snapshots: Sequence[Mapping[str, Any]], *, pinned: str | None, pod_names: Sequence[str]
) -> SnapshotView | None:
    """The pinned snapshot (present or not), else the newest Ready one taken from one of ``pod_names``."""
    if pinned:
        found = next((s for s in snapshots if (s.get("metadata") or {}).get("name") == pinned), None)
        if found is None:
            return SnapshotView(pinned, pinned=True, exists=False, ready=False)
        return _view(found, pinned=True)
    mine = [
        s
        for s in snapshots
        if ((s.get("metadata") or {}).get("annotations") or {}).get(ORIGIN_POD_ANNOTATION) in pod_names
        and is_true(s, "Ready")
        and not (s.get("metadata") or {}).get("deletionTimestamp")
    ]
    if not mine:
        return None
    newest = max(mine, key=lambda s: str((s.get("metadata") or {}).get("creationTimestamp") or ""))
    return _view(newest, pinned=False)


def _view(snapshot: Mapping[str, Any], *, pinned: bool) -> SnapshotView:
    meta = snapshot.get("metadata") or {}
    return SnapshotView(
        str(meta.get("name")),
        pinned=pinned,
        exists=True,
        ready=is_true(snapshot, "Ready"),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def progress_line(assessment: Assessment, now: datetime) -> str:
    """One line for the live display: the state, for how long, what it means."""
    state: str = assessment.state
    if state == "ready" and assessment.restore:
        state = f"ready ({assessment.restore}, per the {assessment.restore_source})"
    took = format_duration(assessment.seconds_in_state(now))
    return f"{state}{' ' + took if took else ''}: {assessment.message}"
