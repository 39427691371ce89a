"""``jupyter suspend release``: scale a bare StatefulSet to 0 once its pod's snapshot is ``Ready``, so the node goes.

On GKE with ``postCheckpoint: stop`` the checkpointed pod turns Completed, but its StatefulSet still asks for one
replica: the controller replaces the stopped pod, the replacement restores from the fresh snapshot at once and holds
the GPU again. Something outside the pod must scale the StatefulSet to 0, and only once the snapshot is ``Ready``
(earlier would delete the pod during its checkpoint). The sidecar cannot: it has no rights on the StatefulSet and is
frozen with the pod. This command is that outside piece, once (``release NAME``) or for a namespace (``--watch``).

A StatefulSet is released when the newest PodSnapshot taken from one of its pods (annotation
``podsnapshot.gke.io/origin-pod``) is ``Ready``, was taken after that pod was created, and either

* the pod is stopped (Succeeded or Failed: ``postCheckpoint: stop``), or
* the pod is the controller's replacement: created after the snapshot and at most :data:`REPLACEMENT_WINDOW` seconds
  after it became ``Ready`` (a pod created later is a resume, not a replacement).

The scale goes through the ``scale`` subresource with the resourceVersion read as its precondition: a 409 (someone
changed the StatefulSet meanwhile) reads it again and decides again. The released snapshot is then recorded on the
StatefulSet (annotation :data:`RELEASED_ANNOTATION`): a later resume restores from it, and its pod is a live session
that must never be taken for a replacement. Never released: a running pod with no ``Ready`` snapshot newer than it
(a live session), a pod still running after its snapshot (``postCheckpoint: resume``), a snapshot whose checkpoint
failed.

States: ``released`` (scaled to 0 now), ``already_released`` (at 0), ``waiting_for_snapshot`` (the checkpoint or its
upload is not done), ``waiting_for_pod`` (no pod right now: the controller is replacing it), ``running`` (nothing to
release: refused), ``checkpoint_failed``, ``not_found``, and ``timed_out`` when ``--wait`` runs out of time.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from traitlets import Bool, Float, Unicode

from ..common.times import rfc3339 as parse_time
from ..common.workloads import (
    ORIGIN_POD_ANNOTATION,
    POD_RESTORED_CONDITION,
    PODSNAPSHOT_GROUP,
    PODSNAPSHOT_VERSION,
    TRIGGERED_BY_LABEL,
)
from .base import BASE_FLAGS, EXIT_FAILED, EXIT_OK, UsageError
from .follow import STOPPED_PHASES, condition, is_true, pod_phase
from .kube import KUBE_ALIASES, KubeCommandApp
from .workloads import JSON, MERGE_PATCH, Kube, valid_name

if TYPE_CHECKING:
    from kubernetes import client

log = logging.getLogger(__name__)

#: The label the StatefulSet of deploy/base carries: what ``--watch`` releases by default.
DEFAULT_SELECTOR = "app.kubernetes.io/name=jupyter-suspend-notebook"
#: On the StatefulSet: the PodSnapshot it was last released for (a pod made after it is a resume).
RELEASED_ANNOTATION = "jupyter-suspend/released-snapshot"
#: A pod created up to this many seconds after its snapshot became Ready is the controller's replacement.
REPLACEMENT_WINDOW = 300.0
#: Conflicts (409) in a row before a release gives up for this round.
MAX_CONFLICTS = 5

#: What GKE's PodRestored condition and GKEPodSnapshotting event say: "... from PodSnapshot [<namespace>/]<name>"
#: (platform-facts section 1).
RESTORED_FROM = re.compile(r"PodSnapshot (?:[a-z0-9][-a-z0-9]*/)?([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?)")

FINAL_STATES = frozenset({"released", "already_released", "checkpoint_failed", "not_found", "timed_out"})
OK_STATES = frozenset({"released", "already_released"})
#: A label selector: comma-separated ``key``, ``!key``, ``key=value``, ``key==value``, ``key!=value``.
LABEL_KEY = r"([a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?"
LABEL_VALUE = r"([a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?)?"
REQUIREMENT = re.compile(rf"^(!?{LABEL_KEY}|{LABEL_KEY}\s*(=|==|!=)\s*{LABEL_VALUE})$")


def valid_selector(selector: str) -> bool:
    parts = [part.strip() for part in selector.split(",")]
    return bool(selector.strip()) and all(REQUIREMENT.match(part) for part in parts)


# --- the decision: pure functions on plain dicts ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Decision:
    state: str
    message: str
    release: bool = False
    pod: str | None = None
    snapshot: str | None = None
    #: After a release: whether the snapshot could be recorded on the StatefulSet (:data:`RELEASED_ANNOTATION`).
    marked: bool = True


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _created(obj: Mapping[str, Any]) -> datetime:
    return parse_time(_meta(obj).get("creationTimestamp")) or datetime.min.replace(tzinfo=timezone.utc)


def _rv(obj: Mapping[str, Any]) -> int:
    rv = str(_meta(obj).get("resourceVersion") or "0")
    return int(rv) if rv.isdigit() else 0


def replicas(sts: Mapping[str, Any]) -> int:
    return int((sts.get("spec") or {}).get("replicas", 1) or 0)


def owns(sts: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """The pod is one of the StatefulSet's (owner reference, else name and selector)."""
    name = str(_meta(sts).get("name"))
    refs = _meta(pod).get("ownerReferences") or []
    if refs:
        return any(ref.get("kind") == "StatefulSet" and ref.get("name") == name for ref in refs)
    labels = _meta(pod).get("labels") or {}
    wanted = ((sts.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    pod_name = str(_meta(pod).get("name") or "")
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items()) and pod_name.startswith(f"{name}-")


def decide(
    sts: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], snapshots: Sequence[Mapping[str, Any]]
) -> Decision:
    """Whether ``sts`` can be scaled to 0 now, from its pods and the namespace's PodSnapshots."""
    name = str(_meta(sts).get("name"))
    if replicas(sts) == 0:
        return Decision("already_released", f"StatefulSet {name} is at 0 replicas: nothing holds a node")
    own = [pod for pod in pods if owns(sts, pod) and not _meta(pod).get("deletionTimestamp")]
    pod_names = {f"{name}-{ordinal}" for ordinal in range(max(1, replicas(sts)))}
    pod_names |= {str(_meta(pod).get("name")) for pod in own}
    taken = [
        snap
        for snap in snapshots
        if (_meta(snap).get("annotations") or {}).get(ORIGIN_POD_ANNOTATION) in pod_names
        and not _meta(snap).get("deletionTimestamp")
    ]
    pod = max(own, key=lambda p: (_created(p), _rv(p))) if own else None
    pod_name = str(_meta(pod).get("name")) if pod is not None else None
    snap = max(taken, key=lambda s: (_created(s), _rv(s))) if taken else None
    released_for = (_meta(sts).get("annotations") or {}).get(RELEASED_ANNOTATION)
    if snap is not None and _meta(snap).get("name") == released_for:
        snap = None  # released for it before: a pod now is a resume from it, a live session
    if snap is None:
        if pod is None:
            return Decision("waiting_for_pod", f"StatefulSet {name} has no pod and no snapshot to release for")
        return Decision(
            "running",
            f"pod {pod_name} is {pod_phase(pod)} with no Ready snapshot newer than it: "
            "scaling to 0 would delete a live session; suspend it first",
            pod=pod_name,
        )
    snap_name = str(_meta(snap).get("name"))
    if not is_true(snap, "Ready"):
        checkpoint = condition(snap, "Checkpoint") or {}
        ready = condition(snap, "Ready") or {}
        if checkpoint.get("status") == "False" or ready.get("reason") == "CheckpointFailed":
            reason = checkpoint.get("message") or ready.get("message") or "failed"
            return Decision(
                "checkpoint_failed",
                f"the checkpoint of PodSnapshot {snap_name} failed ({reason}): nothing to release",
                pod=pod_name,
                snapshot=snap_name,
            )
        return Decision(
            "waiting_for_snapshot",
            f"PodSnapshot {snap_name} is not Ready yet ({ready.get('reason') or 'checkpointing'}): "
            "scaling to 0 now would delete the pod during its checkpoint",
            pod=pod_name,
            snapshot=snap_name,
        )
    if pod is None:
        return Decision(
            "waiting_for_pod",
            f"PodSnapshot {snap_name} is Ready and StatefulSet {name} has no pod right now (being replaced)",
            snapshot=snap_name,
        )
    assert pod_name is not None
    ready_at = parse_time((condition(snap, "Ready") or {}).get("lastTransitionTime")) or _created(snap)
    stopped = pod_phase(pod) in STOPPED_PHASES
    if stopped and _created(pod) <= _created(snap):
        return Decision(
            "released",
            f"pod {pod_name} stopped after its checkpoint into PodSnapshot {snap_name} (Ready)",
            release=True,
            pod=pod_name,
            snapshot=snap_name,
        )
    if _created(pod) >= _created(snap):
        if (_created(pod) - ready_at).total_seconds() <= REPLACEMENT_WINDOW:
            return Decision(
                "released",
                f"pod {pod_name} replaced the one checkpointed into PodSnapshot {snap_name} (Ready) "
                "and would hold the node again",
                release=True,
                pod=pod_name,
                snapshot=snap_name,
            )
        return Decision(
            "running",
            f"pod {pod_name} was started well after PodSnapshot {snap_name} was Ready: a resume, a live session; "
            "refused",
            pod=pod_name,
            snapshot=snap_name,
        )
    return Decision(
        "running",
        f"pod {pod_name} is still {pod_phase(pod)} after its PodSnapshot {snap_name} was Ready "
        "(postCheckpoint: resume?): scaling to 0 would delete a live session",
        pod=pod_name,
        snapshot=snap_name,
    )


def consumed_snapshot(
    sts: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], snapshots: Sequence[Mapping[str, Any]]
) -> tuple[str, Mapping[str, Any]] | None:
    """(pod, snapshot): the PodSnapshot the StatefulSet's current pod was restored from, once GKE says the restore is
    complete (``PodRestored`` True, set after the lazy memory restore). It is used up: the next suspend takes a new
    one, and while it stays, a crash or a node loss would have GKE restore the pod from it again -- memory from
    before everything done since, next to files that moved on. Its storage is billed until it is deleted. The
    sidecar cannot delete it after a restore when its token is the old pod's (refused, 401); the releaser has an
    identity of its own."""
    if replicas(sts) == 0:
        return None
    own = [pod for pod in pods if owns(sts, pod) and not _meta(pod).get("deletionTimestamp")]
    if not own:
        return None
    pod = max(own, key=lambda p: (_created(p), _rv(p)))
    restored = condition(pod, POD_RESTORED_CONDITION) or {}
    if restored.get("status") != "True":
        return None
    found = RESTORED_FROM.search(str(restored.get("message") or ""))
    if found is None:
        return None
    name = found.group(1)
    present = [s for s in snapshots if _meta(s).get("name") == name and not _meta(s).get("deletionTimestamp")]
    return (str(_meta(pod).get("name")), present[0]) if present else None


# --- the API calls --------------------------------------------------------------------------------------------------


class ReleaseKube(Kube):
    """The calls a release makes, beside :class:`Kube`'s (every one is in deploy/releaser/role.yaml)."""

    def list_statefulsets(self, selector: str) -> list[JSON]:
        answer = self._json(
            self.apps.list_namespaced_stateful_set(self.namespace, label_selector=selector, **self._opts())
        )
        return list(answer.get("items") or [])

    def list_all_pods(self) -> list[JSON]:
        answer = self._json(self.core.list_namespaced_pod(self.namespace, **self._opts()))
        return list(answer.get("items") or [])

    def scale_to_zero(self, name: str, resource_version: str) -> JSON:
        """PATCH statefulsets/scale, only at ``resource_version`` (409 Conflict when it moved)."""
        body = {"metadata": {"resourceVersion": resource_version}, "spec": {"replicas": 0}}
        return self._json(
            self.apps.patch_namespaced_stateful_set_scale(
                name, self.namespace, body, _content_type=MERGE_PATCH, **self._opts()
            )
        )

    def delete_snapshot(self, snapshot: Mapping[str, Any]) -> None:
        """Delete a listed PodSnapshot (GKE's finalizer frees its storage; its policy stays) and the trigger that
        made it (its label)."""
        from kubernetes.client.exceptions import ApiException

        name = str(_meta(snapshot).get("name"))
        trigger = (_meta(snapshot).get("labels") or {}).get(TRIGGERED_BY_LABEL)
        self.custom.delete_namespaced_custom_object(
            PODSNAPSHOT_GROUP, PODSNAPSHOT_VERSION, self.namespace, "podsnapshots", name, **self._opts()
        )
        if trigger:
            try:
                self.custom.delete_namespaced_custom_object(
                    PODSNAPSHOT_GROUP, PODSNAPSHOT_VERSION, self.namespace, "podsnapshotmanualtriggers", trigger,
                    **self._opts(),
                )  # fmt: skip
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def mark_released(self, name: str, snapshot: str) -> JSON:
        return self.patch_statefulset(name, {"metadata": {"annotations": {RELEASED_ANNOTATION: snapshot}}})


def api_error(exc: BaseException) -> bool:
    """An error worth a retry: the API answered with an error or could not be reached."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    return isinstance(exc, (ApiException, HTTPError, OSError))


def release_one(
    kube: ReleaseKube,
    sts: JSON,
    pods: Sequence[JSON] | None = None,
    snapshots: Sequence[JSON] | None = None,
) -> tuple[Decision, JSON]:
    """Decide and, when it holds, scale to 0 and record the snapshot. A 409 reads everything again and decides
    again. Returns the decision and the StatefulSet as last read."""
    from kubernetes.client.exceptions import ApiException

    name = str(sts["metadata"]["name"])
    for _ in range(MAX_CONFLICTS):
        if pods is None:
            pods = kube.list_all_pods()
        if snapshots is None:
            snapshots = kube.list_snapshots()
        decision = decide(sts, pods, snapshots)
        if not decision.release:
            return decision, sts
        try:
            kube.scale_to_zero(name, str(sts["metadata"]["resourceVersion"]))
        except ApiException as exc:
            if exc.status != 409:
                raise
            log.info("statefulset/%s changed while releasing it (409): reading it again", name)
            fresh = kube.get_statefulset(name)
            if fresh is None:
                return Decision("not_found", f"StatefulSet {name} was deleted meanwhile"), sts
            sts, pods, snapshots = fresh, None, None
            continue
        assert decision.snapshot is not None
        problem = _mark(kube, name, decision.snapshot)
        if problem is not None:
            decision = dataclasses.replace(
                decision,
                marked=False,
                message=f"{decision.message}; recording {RELEASED_ANNOTATION} on it failed ({problem}): "
                "a resume soon after could be taken for a replacement by another releaser",
            )
        return decision, sts
    raise RuntimeError(f"StatefulSet {name} kept changing: {MAX_CONFLICTS} conflicts in a row")


def _mark(kube: ReleaseKube, name: str, snapshot: str) -> str | None:
    """Record the released snapshot, retried (a missing mark could take a later resume for a replacement); what went
    wrong when it could not."""
    delay = 0.2
    for attempt in range(4):
        try:
            kube.mark_released(name, snapshot)
            return None
        except Exception as exc:
            if not api_error(exc):
                raise
            if attempt == 3:
                return f"{exc.__class__.__name__}: {_short(exc)}"
            log.warning("statefulset/%s: recording the release failed (%s), retrying in %.1fs", name, exc, delay)
            time.sleep(delay)
            delay *= 2
    return None


# --- once: release NAME [--wait] -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Request:
    name: str
    wait: bool = False
    timeout: float = 300.0
    poll_interval: float = 2.0


def release_statefulset(
    kube: ReleaseKube, request: Request, on_state: Callable[[Decision], None] | None = None
) -> tuple[JSON, int]:
    started = time.monotonic()
    deadline = started + request.timeout
    history: list[JSON] = []
    sts: JSON | None = None

    def elapsed() -> float:
        return round(time.monotonic() - started, 3)

    def note(decision: Decision) -> None:
        if not history or history[-1]["state"] != decision.state:
            history.append({"state": decision.state, "at_seconds": elapsed()})
            if on_state is not None:
                on_state(decision)

    while True:
        kube.timeout = max(0.5, deadline - time.monotonic())
        sts = kube.get_statefulset(request.name)
        if sts is None:
            decision = Decision("not_found", f"StatefulSet {request.name} not found in namespace {kube.namespace}")
        else:
            decision, sts = release_one(kube, sts)
        note(decision)
        if decision.state in FINAL_STATES or not request.wait:
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            decision = Decision(
                "timed_out",
                f"not released after {request.timeout:g}s; last seen {decision.state}: {decision.message}",
                pod=decision.pod,
                snapshot=decision.snapshot,
            )
            note(decision)
            break
        time.sleep(min(request.poll_interval, remaining))
    result: JSON = {
        "command": "release",
        "kind": "statefulset",
        "name": request.name,
        "namespace": kube.namespace,
        "state": decision.state,
        "message": decision.message,
        "action": "scaled_to_zero" if decision.state == "released" else "none",
        "pod": decision.pod,
        "snapshot": decision.snapshot,
        "replicas": None if sts is None else (0 if decision.state == "released" else replicas(sts)),
        "waited": request.wait,
        "elapsed_seconds": elapsed(),
        "history": history,
    }
    return result, EXIT_OK if decision.state in OK_STATES else EXIT_FAILED


def text_report(result: JSON) -> str:
    return f"statefulset/{result['name']} in {result['namespace']}: {result['state']}\n  {result['message']}"


# --- a namespace: release --watch ------------------------------------------------------------------------------------


class Watcher:
    """Poll the namespace's StatefulSets (by label), pods and PodSnapshots; release each that qualifies. One line per
    release on ``out``; API errors are logged and retried with a growing delay; :meth:`stop` ends it."""

    def __init__(
        self,
        kube: ReleaseKube,
        selector: str,
        poll_interval: float = 2.0,
        max_backoff: float = 60.0,
        out: Any = None,
    ) -> None:
        self.kube = kube
        self.selector = selector
        self.poll_interval = poll_interval
        self.max_backoff = max_backoff
        self.out = out if out is not None else sys.stdout
        self.stopping = threading.Event()
        self.released: list[tuple[str, str]] = []
        #: (StatefulSet, snapshot) of every consumed snapshot deleted.
        self.consumed: list[tuple[str, str]] = []
        #: StatefulSet -> the snapshot this watcher released it for, while the record on it is missing.
        self.unrecorded: dict[str, str] = {}

    def stop(self) -> None:
        self.stopping.set()

    def say(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def round(self) -> None:
        statefulsets = self.kube.list_statefulsets(self.selector)
        if not statefulsets:
            return
        pods = self.kube.list_all_pods()
        snapshots = self.kube.list_snapshots()
        for sts in statefulsets:
            if self.stopping.is_set():
                return
            name = str(sts["metadata"]["name"])
            if name in self.unrecorded:
                # Decide as if the record were there (this watcher knows it released for that snapshot), write it.
                snapshot = self.unrecorded[name]
                sts = {**sts, "metadata": {**sts["metadata"]}}
                sts["metadata"]["annotations"] = {
                    **(sts["metadata"].get("annotations") or {}),
                    RELEASED_ANNOTATION: snapshot,
                }
                if _mark(self.kube, name, snapshot) is None:
                    del self.unrecorded[name]
            decision, _ = release_one(self.kube, sts, pods, snapshots)
            if decision.release:
                self.released.append((name, str(decision.snapshot)))
                if not decision.marked:
                    self.unrecorded[name] = str(decision.snapshot)
                    print(f"statefulset/{name}: {decision.message}", file=sys.stderr)
                self.say(
                    f"released statefulset/{name} in {self.kube.namespace}: scaled to 0 "
                    f"(PodSnapshot {decision.snapshot} Ready, pod {decision.pod})"
                )
                continue
            used = consumed_snapshot(sts, pods, snapshots)
            if used is not None:
                self.kube.delete_snapshot(used[1])
                snapshot_name = str(_meta(used[1]).get("name"))
                self.consumed.append((name, snapshot_name))
                self.say(
                    f"deleted PodSnapshot {snapshot_name} in {self.kube.namespace}: pod {used[0]} of "
                    f"statefulset/{name} was restored from it (used up; its storage is freed)"
                )

    def run(self) -> None:
        self.say(f"watching StatefulSets with {self.selector} in {self.kube.namespace} (every {self.poll_interval:g}s)")
        delay = self.poll_interval
        while not self.stopping.is_set():
            try:
                self.round()
                delay = self.poll_interval
            except Exception as exc:
                if not api_error(exc) and not isinstance(exc, RuntimeError):
                    raise
                # Never sooner than the server asked (its Retry-After), however small our own delay still is.
                delay = max(min(self.max_backoff, max(delay * 2, self.poll_interval)), retry_after(exc))
                print(f"API error: {exc.__class__.__name__}: {_short(exc)}; retrying in {delay:g}s", file=sys.stderr)
                sys.stderr.flush()
            self.stopping.wait(delay)
        self.say("stopped")


def retry_after(exc: BaseException) -> float:
    """The delay an error answer asks for in seconds (its ``Retry-After`` header, which kube-apiserver writes
    as whole seconds: k8s.io/apiserver pkg/endpoints/handlers/responsewriters/writers.go), 0 when none."""
    headers = getattr(exc, "headers", None)
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return max(0.0, float(value)) if value is not None else 0.0
    except (TypeError, ValueError):
        return 0.0  # an HTTP date: kube-apiserver does not write one (unverified for proxies in between)


def _short(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if status is not None:
        return f"{status} {reason or ''}".strip()
    return str(exc).splitlines()[0][:200] if str(exc) else exc.__class__.__name__


# --- the command ----------------------------------------------------------------------------------------------------


class ReleaseApp(KubeCommandApp):
    name = "suspend release"
    description = (
        "Release the node after a suspend: scale a StatefulSet to 0 once its pod's PodSnapshot is Ready and the pod "
        "stopped (or was replaced). NAME once (--wait: until it holds), or --watch: every matching StatefulSet "
        "of the namespace until stopped. Never scales a running session without a Ready snapshot."
    )
    schema_name = "release"

    wait = Bool(False, help="Follow until it can be released, or the timeout.").tag(config=True)
    timeout = Float(300.0, help="Seconds --wait follows before ending timed_out.").tag(config=True)
    poll_interval = Float(2.0, help="Seconds between looks (--wait and --watch).").tag(config=True)
    watch = Bool(False, help="Release every matching StatefulSet of the namespace until stopped (SIGTERM).").tag(
        config=True
    )
    selector = Unicode(DEFAULT_SELECTOR, help="--watch: the label selector of the StatefulSets to release.").tag(
        config=True
    )

    aliases = {
        **KUBE_ALIASES,
        "timeout": "ReleaseApp.timeout",
        "poll-interval": "ReleaseApp.poll_interval",
        "selector": "ReleaseApp.selector",
        "l": "ReleaseApp.selector",
    }
    flags = {
        **BASE_FLAGS,
        "wait": ({"ReleaseApp": {"wait": True}}, "Follow until it can be released, or the timeout."),
        "watch": ({"ReleaseApp": {"watch": True}}, "Release every matching StatefulSet until stopped."),
    }

    def check(self) -> Request | None:
        """Bad arguments, found before any API call. A Request for NAME, None for --watch."""
        if self.timeout < 0:
            raise UsageError(f"--timeout {self.timeout:g}: must be 0 or more seconds")
        if self.poll_interval <= 0:
            raise UsageError(f"--poll-interval {self.poll_interval:g}: must be more than 0 seconds")
        if self.namespace and not valid_name(self.namespace):
            raise UsageError(f"--namespace {self.namespace!r} is not a namespace name")
        if self.watch:
            if self.extra_args:
                raise UsageError("--watch takes no NAME (it releases every StatefulSet matching --selector)")
            if self.wait or self.json_output:
                raise UsageError("--watch runs until stopped: --wait and --json are for one NAME")
            if not valid_selector(self.selector):
                raise UsageError(f"--selector {self.selector!r} is not a label selector (key=value,...)")
            return None
        if self.selector != DEFAULT_SELECTOR:
            raise UsageError("--selector is for --watch; give NAME alone to release one StatefulSet")
        (name,) = self.positional(1, "NAME (the StatefulSet) or --watch")
        if not valid_name(name):
            raise UsageError(f"NAME {name!r} is not a Kubernetes object name (lowercase RFC 1123, at most 253)")
        return Request(name=name, wait=self.wait, timeout=self.timeout, poll_interval=self.poll_interval)

    def kube(self) -> ReleaseKube:
        return ReleaseKube(self.api_client(), self.target_namespace(), default_timeout=10.0)

    def url_retries(self) -> Any:
        """``--watch`` retries by itself and says so: urllib3 may retry only what got no answer (a refused
        connection, a read error), never an answer. Otherwise urllib3's default ``Retry`` retries a 429/503 with
        ``Retry-After`` (kube-apiserver's answer to a throttled request: k8s.io/apiserver pkg/server/filters/
        priority-and-fairness.go and maxinflight.go, ``tooManyRequests``) unseen, and the
        watch's own log and backoff never hear of it (urllib3 src/urllib3/util/retry.py, ``is_retry``:
        ``respect_retry_after_header`` and ``RETRY_AFTER_STATUS_CODES``; kubernetes-client/python
        kubernetes/client/rest.py passes ``Configuration.retries`` to the pool manager)."""
        if not self.watch:
            return None
        from urllib3.util.retry import Retry

        return Retry(total=3, status=0, respect_retry_after_header=False)

    def run(self) -> int:
        request = self.check()
        if request is None:
            return self.run_watch()

        def progress(decision: Decision) -> None:
            if request.wait and decision.state not in FINAL_STATES:
                print(f"{decision.state}: {decision.message}", file=sys.stderr)
                sys.stderr.flush()

        kube = self.kube()
        try:
            result, code = release_statefulset(kube, request, progress)
        except Exception as exc:
            if not api_error(exc) and not isinstance(exc, RuntimeError):
                raise
            # Nothing half-done to report: a failed scale changed nothing, a failed mark is retried and said here.
            print(f"jupyter {self.name}: {exc.__class__.__name__}: {_short(exc)}", file=sys.stderr)
            return EXIT_FAILED
        self.emit(result, text_report(result))
        return code

    def run_watch(self) -> int:
        watcher = Watcher(self.kube(), self.selector, self.poll_interval)
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def stop(signum: int, _frame: Any) -> None:
            watcher.stop()

        in_main = threading.current_thread() is threading.main_thread()
        if in_main:
            for sig in previous:
                signal.signal(sig, stop)
        try:
            watcher.run()
        finally:
            if in_main:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
        return EXIT_OK


def connect_release_kube(api: client.ApiClient, namespace: str, timeout: float = 10.0) -> ReleaseKube:
    """A :class:`ReleaseKube` for callers with their own API client (tests)."""
    return ReleaseKube(api, namespace, default_timeout=timeout)
