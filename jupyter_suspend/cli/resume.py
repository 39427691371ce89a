"""``jupyter suspend status NAME`` and ``jupyter suspend resume NAME``: an environment seen and resumed from outside.

Resume asks the workload for its pod again (a StatefulSet scaled 0 -> 1, a Notebook's ``kubeflow-resource-stopped``
removed, a Workspace's ``spec.paused`` cleared) -- never pinning a PodSnapshot on its pod template (``--snapshot``
is accepted only when it names the snapshot GKE restores anyway, the newest Ready one) -- and with ``--wait`` follows it
in plain states (:mod:`.follow`) until ``ready``, ``failed`` or its deadline (``timed_out``).

Never two restores of one environment: only the holder of the environment's ``coordination.k8s.io`` Lease acts,
and it acts only on a workload that does not already ask for a pod. A second resume joins the first (follows, acts
on nothing, says whose it is) or, with ``--no-join``, is refused.
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import IO, TYPE_CHECKING, Any

from traitlets import Bool, Float, Int, Unicode, default

from jupyter_suspend.common.workloads import (
    LEASE_GROUP,
    LEASE_VERSION,
    ORIGIN_POD_ANNOTATION,
    RESUME_LEASE_PREFIX,
    WORKLOAD_KINDS,
)

from .base import BASE_FLAGS, EXIT_FAILED, EXIT_OK, UsageError
from .follow import (
    FALLBACK_STEPS,
    FINAL_STATES,
    Assessment,
    Observation,
    assess,
    current_pod,
    is_true,
    parse_time,
    progress_line,
    snapshot_view,
)
from .kube import KUBE_ALIASES, KubeCommandApp, api_failure
from .server_only import resume_via_server, status_via_server
from .workloads import JSON, Kube, Workload, valid_name, workload

if TYPE_CHECKING:
    from kubernetes import client

ProgressCallback = Callable[[Assessment, datetime], None]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def rfc3339(when: datetime | None, micro: bool = False) -> str | None:
    if when is None:
        return None
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def lease_name(kind: str, name: str) -> str:
    return f"{RESUME_LEASE_PREFIX}{kind}-{name}"[:253].rstrip("-.")


def holder_identity() -> str:
    """Who resumes: user, host and process (and a token: two resumes in one process are two holders)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()} pid {os.getpid()} ({uuid.uuid4().hex[:6]})"


@dataclasses.dataclass(frozen=True)
class Request:
    kind: str
    name: str
    snapshot: str | None = None
    wait: bool = False
    timeout: float = 900.0
    join: bool = True
    poll_interval: float = 2.0
    lease_seconds: int = 30
    url: str = ""
    token: str = ""


def check_request(request: Request) -> None:
    """Bad arguments, found before any API call."""
    if request.kind not in WORKLOAD_KINDS:
        raise UsageError(f"--kind {request.kind!r}: one of {', '.join(WORKLOAD_KINDS)}")
    if not valid_name(request.name):
        raise UsageError(f"NAME {request.name!r} is not a Kubernetes object name (lowercase RFC 1123, at most 253)")
    if request.snapshot is not None and not valid_name(request.snapshot):
        raise UsageError(f"--snapshot {request.snapshot!r} is not a Kubernetes object name")
    if request.timeout < 0:
        raise UsageError(f"--timeout {request.timeout:g}: must be 0 or more seconds")
    if request.poll_interval <= 0:
        raise UsageError(f"--poll-interval {request.poll_interval:g}: must be more than 0 seconds")
    if request.lease_seconds < 1:
        raise UsageError(f"--lease-seconds {request.lease_seconds}: must be at least 1")
    if request.snapshot and request.kind == "notebook":
        raise UsageError(
            "--snapshot cannot be pinned on a Kubeflow Notebook (use --kind statefulset on its StatefulSet)"
        )
    if request.url and not request.url.startswith(("http://", "https://")):
        raise UsageError(f"--url {request.url!r}: an http:// or https:// URL of the notebook server")


class Environment:
    """Looks at one environment: its workload, pod, the pod's events, its snapshot, the notebook server."""

    def __init__(self, kube: Kube, request: Request) -> None:
        self.kube = kube
        self.request = request
        self.workload: Workload = workload(request.kind, kube, request.name)

    def observe(self, obj: JSON | None = None) -> tuple[Assessment, Observation]:
        if obj is None:
            obj = self.workload.read()
            if obj is None:
                raise LookupError(
                    f"{self.workload.title} {self.request.name} not found in namespace {self.kube.namespace}"
                )
        pods = self.kube.list_pods(self.workload.pod_selector(obj))
        pod = current_pod(pods)
        pod_name = str(pod["metadata"]["name"]) if pod is not None else None
        events: list[JSON] = []
        if pod_name is not None and not (pod or {}).get("spec", {}).get("nodeName"):
            events = self.kube.list_pod_events(pod_name)
        controller_events: list[JSON] = []
        controller = self.workload.pod_controller(obj)
        if pod is None and controller is not None and self.workload.wanted(obj):
            controller_events = self.kube.list_object_events("StatefulSet", controller)
        pinned = self.request.snapshot or self.workload.pinned(obj)
        snapshot = None
        # A pinned snapshot is watched all along (it may be deleted under us); others matter once the pod is Ready.
        if pinned:
            found = self.kube.get_snapshot(pinned)
            snapshot = snapshot_view([found] if found else [], pinned=pinned, pod_names=[])
        elif pod is None or is_true(pod, "Ready"):
            names = [*self.workload.pod_names(obj), *([pod_name] if pod_name else [])]
            snapshot = snapshot_view(self.kube.list_snapshots(), pinned=None, pod_names=names)
        server, server_error = None, None
        if self.request.url and pod is not None and is_true(pod, "Ready"):
            server, server_error = self.server_status()
        observation = Observation(
            now=utcnow(),
            wanted=self.workload.wanted(obj),
            pods=pods,
            events=events,
            snapshot=snapshot,
            server=server,
            server_error=server_error,
            workload_message=self.workload.message(obj),
            controller_events=controller_events,
        )
        return assess(observation), observation

    def server_status(self) -> tuple[JSON | None, str | None]:
        """The notebook server's own ``GET jupyter-suspend/api/status`` (it does not count as user activity)."""
        url = self.request.url.rstrip("/") + "/jupyter-suspend/api/status"
        headers = {"Accept": "application/json"}
        if self.request.token:
            headers["Authorization"] = f"token {self.request.token}"
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=self.kube.timeout) as r:
                answer = json.loads(r.read(1_000_000))
        except urllib.error.HTTPError as exc:
            return None, f"HTTP {exc.code} from {url}"
        except (OSError, ValueError) as exc:
            return None, f"{url}: {exc}"
        if not isinstance(answer, dict):
            return None, f"{url}: not a status object"
        return answer, None


class Lease:
    """The environment's resume Lease: created (409 = held), taken over only when expired and only at the
    resourceVersion read (409 = lost the race), renewed while following, deleted at the end."""

    def __init__(self, kube: Kube, request: Request) -> None:
        self.kube = kube
        self.name = lease_name(request.kind, request.name)
        self.target = f"{request.kind}/{request.name}"
        self.seconds = request.lease_seconds
        self.identity = holder_identity()
        self.version: str | None = None  # our lease's resourceVersion while we hold it
        self.acquired_at: datetime | None = None
        self.renewed = time.monotonic()
        self.lost = False

    def _body(self, now: datetime, version: str | None = None, transitions: int = 0) -> JSON:
        metadata: JSON = {
            "name": self.name,
            "labels": {"app.kubernetes.io/managed-by": "jupyter-suspend"},
            "annotations": {"jupyter-suspend/target": self.target},
        }
        if version is not None:
            metadata["resourceVersion"] = version
        return {
            "apiVersion": f"{LEASE_GROUP}/{LEASE_VERSION}",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "acquireTime": rfc3339(self.acquired_at or now, micro=True),
                "renewTime": rfc3339(now, micro=True),
                "leaseDurationSeconds": self.seconds,
                "leaseTransitions": transitions,
            },
        }

    def _create(self, now: datetime) -> bool:
        """Create our Lease: True when it went through (we hold it now), False when one exists already (409)."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.version = self.kube.create_lease(self._body(now))["metadata"]["resourceVersion"]
        except ApiException as exc:
            if exc.status != 409:
                raise
            return False
        self.renewed = time.monotonic()
        return True

    def acquire(self) -> JSON | None:
        """None when we hold it now; else the holder's Lease."""
        from kubernetes.client.exceptions import ApiException

        now = utcnow()
        self.acquired_at = now
        if self._create(now):
            return None
        current = self.kube.get_lease(self.name)
        if current is None:  # released between our create and our read: try once more
            if self._create(now):
                return None
            return self.kube.get_lease(self.name) or {}
        if not lease_expired(current, now):
            return current
        spec = current.get("spec") or {}
        body = self._body(now, current["metadata"]["resourceVersion"], int(spec.get("leaseTransitions") or 0) + 1)
        try:
            self.version = self.kube.replace_lease(self.name, body)["metadata"]["resourceVersion"]
            self.renewed = time.monotonic()
            return None
        except ApiException as exc:
            if exc.status != 409:
                raise
            return self.kube.get_lease(self.name) or current  # someone else took it over first

    def renew_if_due(self) -> None:
        from kubernetes.client.exceptions import ApiException

        if self.version is None or self.lost or time.monotonic() - self.renewed < self.seconds / 3:
            return
        try:
            self.version = self.kube.replace_lease(self.name, self._body(utcnow(), self.version))["metadata"][
                "resourceVersion"
            ]
            self.renewed = time.monotonic()
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
            self.lost = True  # expired and taken over (or deleted): we no longer speak for this environment

    def release(self) -> None:
        from kubernetes.client.exceptions import ApiException

        if self.version is None or self.lost:
            return
        try:
            self.kube.delete_lease(self.name, self.version)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
        self.version = None

    def describe(self, lease: JSON | None, mine: bool) -> JSON:
        spec = (lease or {}).get("spec") or {}
        return {
            "name": self.name,
            "holder": self.identity if mine else str(spec.get("holderIdentity") or "unknown"),
            "acquired_at": rfc3339(self.acquired_at) if mine else rfc3339(parse_time(spec.get("acquireTime"))),
            "mine": mine,
        }


def lease_expired(lease: JSON, now: datetime) -> bool:
    spec = lease.get("spec") or {}
    if not spec.get("holderIdentity"):
        return True
    last = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
    if last is None:
        return True
    return now > last + timedelta(seconds=int(spec.get("leaseDurationSeconds") or 0))


class Run:
    """One ``status`` or ``resume``: observations, transitions, the answer."""

    def __init__(self, kube: Kube, request: Request, command: str, on_progress: ProgressCallback | None = None) -> None:
        self.kube = kube
        self.request = request
        self.command = command
        self.environment = Environment(kube, request)
        self.on_progress = on_progress
        self.started = time.monotonic()
        self.deadline = self.started + request.timeout
        self.history: list[JSON] = []
        self.last: Assessment | None = None
        self.observed_at = utcnow()
        self.snapshot: JSON | None = None

    def observe(self, obj: JSON | None = None) -> Assessment:
        self.kube.timeout = max(0.5, self.deadline - time.monotonic())
        assessment, observation = self.environment.observe(obj)
        self.observed_at = observation.now
        snap = observation.snapshot
        self.snapshot = None if snap is None else dataclasses.asdict(snap)
        if self.last is None or assessment.state != self.last.state:
            self.history.append({"state": assessment.state, "at_seconds": self.elapsed()})
        self.last = assessment
        if self.on_progress is not None:
            self.on_progress(assessment, observation.now)
        return assessment

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def answer(self, assessment: Assessment) -> JSON:
        fallback = list(FALLBACK_STEPS) if assessment.state in ("failed", "timed_out") else []
        seconds = assessment.seconds_in_state(self.observed_at)
        return {
            "command": self.command,
            "kind": self.request.kind,
            "name": self.request.name,
            "namespace": self.kube.namespace,
            "state": assessment.state,
            "message": assessment.message,
            "pod": assessment.pod,
            "since": rfc3339(assessment.since),
            "seconds_in_state": None if seconds is None else round(seconds, 3),
            "scheduling": assessment.scheduling,
            "restore": assessment.restore,
            "restore_source": assessment.restore_source,
            "snapshot": self.snapshot,
            "failure": assessment.failure,
            "fallback": fallback,
            "elapsed_seconds": self.elapsed(),
            "history": self.history,
        }

    def timed_out(self, last: Assessment) -> Assessment:
        state = dataclasses.replace(
            last,
            state="timed_out",
            message=f"not ready after {self.request.timeout:g}s; last seen {last.state}: {last.message}",
            failure={
                "reason": f"timed out after {self.request.timeout:g}s while {last.state}",
                "next_step": "recover from the notebook files and application checkpoints (%checkpoint restore); "
                "the resume itself goes on: check with jupyter suspend status",
            },
        )
        self.history.append({"state": "timed_out", "at_seconds": self.elapsed()})
        self.last = state
        return state


def exit_code(state: str) -> int:
    return EXIT_FAILED if state in ("failed", "timed_out") else EXIT_OK


def environment_status(kube: Kube, request: Request, on_progress: ProgressCallback | None = None) -> tuple[JSON, int]:
    """``status``: one look."""
    run = Run(kube, request, "status", on_progress)
    try:
        assessment = run.observe()
    except LookupError as exc:
        assessment = _not_found(str(exc))
    return run.answer(assessment), exit_code(assessment.state)


def _not_found(message: str) -> Assessment:
    return Assessment(
        "failed",
        message,
        failure={"reason": message, "next_step": "check NAME, --kind and --namespace (kubectl get it)"},
    )


def resume_environment(kube: Kube, request: Request, on_progress: ProgressCallback | None = None) -> tuple[JSON, int]:
    """``resume``: act (once per environment, under its Lease) and with ``wait`` follow to a final state."""
    run = Run(kube, request, "resume", on_progress)
    extra: JSON = {"action": "none", "lease": None, "waited": request.wait}

    def done(assessment: Assessment) -> tuple[JSON, int]:
        return {**run.answer(assessment), **extra}, exit_code(assessment.state)

    target = run.environment.workload
    obj = target.read()
    if obj is None:
        return done(_not_found(f"{target.title} {request.name} not found in namespace {kube.namespace}"))
    first = run.observe(obj)
    if first.state == "ready":
        extra["action"] = "already_ready"
        return done(first)
    if request.snapshot:
        refused = _unusable_snapshot(kube, request.snapshot) or _not_what_gke_restores(run.environment, obj)
        if refused is not None:
            extra["action"] = "refused"
            return done(refused)
    lease = Lease(kube, request)
    holder = lease.acquire()
    if holder is not None:
        extra["lease"] = lease.describe(holder, mine=False)
        who = f"{extra['lease']['holder']} (since {extra['lease']['acquired_at']})"
        if not request.join:
            extra["action"] = "refused"
            message = f"a resume of {request.kind}/{request.name} is already running, started by {who}"
            return done(
                Assessment(
                    "failed",
                    message,
                    pod=first.pod,
                    failure={"reason": message, "next_step": "wait for it: jupyter suspend resume NAME --wait (joins)"},
                )
            )
        extra["action"] = "joined"
        extra["joined"] = who
        return done(_follow(run, obj, lease=None, joined=lease))
    extra["lease"] = lease.describe(None, mine=True)
    try:
        obj = target.read() or obj  # read again under the lease: another resume may have acted meanwhile
        if target.wanted(obj):
            extra["action"] = "already_resuming"
        else:
            left = target.pinned(obj)
            target.resume(obj, remove_pin=bool(left))
            if left:
                extra["pin_removed"] = left
            extra["action"] = "resumed"
        return done(_follow(run, None, lease=lease))
    finally:
        lease.release()


def _unusable_snapshot(kube: Kube, name: str) -> Assessment | None:
    found = kube.get_snapshot(name)
    problem = None
    if found is None:
        problem = "does not exist"
    elif (found.get("metadata") or {}).get("deletionTimestamp"):
        problem = "is being deleted"
    elif not is_true(found, "Ready"):
        problem = "is not Ready (still uploading, or its checkpoint failed)"
    if problem is None:
        return None
    return Assessment(
        "failed",
        f"PodSnapshot {name} {problem}: nothing was changed",
        failure={
            "reason": f"PodSnapshot {name} {problem}",
            "next_step": "pick a Ready one (jupyter suspend snapshots list) or resume without --snapshot",
        },
    )


class CreateRetry:
    """While the pod cannot be created (``FailedCreate``: e.g. the ResourceQuota is full), the StatefulSet
    controller retries with a per-object exponential backoff that grows to many minutes, and nothing it watches
    changes when another notebook frees the quota. The resume's holder touches an annotation of the StatefulSet
    (not of its template: no new revision, no rollout) every ``every`` seconds, which makes the controller try
    again at once, so a waiting notebook comes up soon after capacity frees."""

    every = 10.0

    def __init__(self, run: Run) -> None:
        self.run = run
        self.last = time.monotonic()

    def maybe(self, assessment: Assessment) -> None:
        if assessment.state != "waiting_for_capacity" or (assessment.scheduling or {}).get("reason") != "FailedCreate":
            return
        if time.monotonic() - self.last < self.every:
            return
        self.last = time.monotonic()
        self.run.environment.workload.retry_create()


def _not_what_gke_restores(environment: Environment, obj: JSON) -> Assessment | None:
    """``--snapshot`` names a snapshot GKE would not pick. GKE restores a new pod from the newest Ready snapshot
    that matches it (platform-facts section 1); jupyter suspend never pins another one on the workload's template
    (see :meth:`Workload.resume`), so a resume can only restore that newest one. Anything else is refused,
    with the way to get it, and nothing is changed."""
    name = environment.request.snapshot or ""
    names = environment.workload.pod_names(obj)
    newest = snapshot_view(environment.kube.list_snapshots(), pinned=None, pod_names=names)
    if newest is not None and newest.name == name:
        return None
    found = environment.kube.get_snapshot(name) or {}
    origin = ((found.get("metadata") or {}).get("annotations") or {}).get(ORIGIN_POD_ANNOTATION)
    if origin not in names:
        reason = f"PodSnapshot {name} was taken from pod {origin}, not from {' or '.join(names)}"
    else:
        reason = (
            f"GKE restores the newest Ready snapshot of this pod, {newest.name if newest else '(none)'}, not {name}"
        )
    return Assessment(
        "failed",
        f"{reason}: nothing was changed",
        failure={
            "reason": reason,
            "next_step": "jupyter suspend does not pin a snapshot on the pod template (the pin would stay behind "
            "and a later edit would roll the restored pod). To restore this one, delete the newer snapshots "
            "(jupyter suspend snapshots delete NAME) and resume again, or resume without --snapshot.",
        },
    )


def _follow(run: Run, obj: JSON | None, lease: Lease | None, joined: Lease | None = None) -> Assessment:
    """Observe until a final state, the deadline, or (without --wait) once. ``lease``: ours (we acted);
    ``joined``: the one whose holder acts."""
    request = run.request
    nudge = CreateRetry(run)
    while True:
        try:
            assessment = run.observe(obj)
        except LookupError as exc:
            return _not_found(str(exc))
        obj = None
        if assessment.state == "suspended" and lease is not None:
            # We asked for the pod; suspended now means someone stopped it again.
            message = "the workload was stopped again while resuming"
            return dataclasses.replace(
                assessment,
                state="failed",
                message=message,
                failure={"reason": message, "next_step": "ask who stopped it; resume again when it should run"},
            )
        if assessment.state == "suspended" and joined is not None and request.wait:
            current = run.kube.get_lease(joined.name)
            if current is None or lease_expired(current, utcnow()):
                # The holder may not have acted yet while its lease stands; once it is gone, nobody will.
                message = "the resume this one joined ended and the workload is still stopped"
                return dataclasses.replace(
                    assessment,
                    state="failed",
                    message=message,
                    failure={"reason": message, "next_step": "resume again: jupyter suspend resume NAME --wait"},
                )
        if assessment.state in FINAL_STATES or not request.wait:
            return assessment
        remaining = run.deadline - time.monotonic()
        if remaining <= 0:
            return run.timed_out(assessment)
        if lease is not None:
            lease.renew_if_due()
            nudge.maybe(assessment)
        remaining = run.deadline - time.monotonic()
        if remaining <= 0:
            return run.timed_out(assessment)
        time.sleep(min(request.poll_interval, remaining))
        if time.monotonic() >= run.deadline:
            return run.timed_out(assessment)


# --- display ---------------------------------------------------------------------------------------------------


class ProgressDisplay:
    """One updating line on a terminal; on anything else a plain line per change of state or message."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last = ""
        self.drawn = False

    def __call__(self, assessment: Assessment, now: datetime) -> None:
        line = progress_line(assessment, now)
        if self.tty:
            width = 200
            self.stream.write("\r" + line[: width - 1] + "\x1b[K")
            self.drawn = True
        else:
            key = f"{assessment.state}: {assessment.message}"
            if key == self.last:
                return
            self.last = key
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


def text_report(result: JSON) -> str:
    where = f"in {result['namespace']}" if result["namespace"] else "(asked the notebook server alone)"
    lines = [f"{result['kind']}/{result['name']} {where}: {result['state']}"]
    if result.get("restore"):
        lines[0] += f" ({result['restore']}, per the {result['restore_source']})"
    lines.append(f"  {result['message']}")
    scheduling = result.get("scheduling")
    if scheduling:
        lines.append(
            f"  waiting {result.get('seconds_in_state') or 0:.0f}s: {scheduling['reason']}: {scheduling['message']}"
        )
        if scheduling.get("event"):
            event = scheduling["event"]
            lines.append(f"  newest event: {event['reason']}: {event['message']} (x{event['count']})")
    if result.get("action") == "joined":
        lines.append(f"  joined the resume started by {result.get('joined')}")
    if result.get("failure"):
        lines.append(f"  reason: {result['failure']['reason']}")
        lines.append(f"  next step: {result['failure']['next_step']}")
    if result.get("fallback"):
        lines.append("  If the live session does not come back:")
        lines.extend(f"    - {step}" for step in result["fallback"])
    return "\n".join(lines)


# --- the commands ----------------------------------------------------------------------------------------------

ENVIRONMENT_ALIASES: dict[Any, Any] = {
    **KUBE_ALIASES,
    "kind": "EnvironmentCommandApp.kind",
    "url": "EnvironmentCommandApp.url",
    "token": "EnvironmentCommandApp.token",
}


class EnvironmentCommandApp(KubeCommandApp):
    """What ``status`` and ``resume`` share: one environment named by NAME and --kind."""

    kind = Unicode("statefulset", help="What NAME is: statefulset, notebook (Kubeflow v1) or workspace.").tag(
        config=True
    )
    url = Unicode(
        "",
        help="The notebook server's URL (with its base_url): ready live/cold is read from its own status. "
        "Without Kubernetes credentials (the local backend) the server alone is asked.",
    ).tag(config=True)
    token = Unicode(help="The notebook server's token (default: $JUPYTER_TOKEN).").tag(config=True)

    @default("token")
    def _token_default(self) -> str:
        return os.environ.get("JUPYTER_TOKEN", "")

    aliases = ENVIRONMENT_ALIASES

    def request(self, **extra: Any) -> Request:
        (name,) = self.positional(1, "NAME (the environment)")
        request = Request(kind=self.kind, name=name, url=self.url, token=self.token, **extra)
        check_request(request)
        return request

    def kube(self, request: Request) -> Kube:
        return Kube(self.api_client(), self.target_namespace(), default_timeout=min(10.0, max(0.5, request.timeout)))

    def api_failed(self, exc: Exception) -> int:
        """An API error (refused by RBAC, no server; any other exception is a bug, raised by the caller): one line on
        stderr, exit 1, nothing on stdout (as ``release``)."""
        print(f"jupyter {self.name}: {api_failure(exc)}", file=sys.stderr)
        return EXIT_FAILED


class StatusApp(EnvironmentCommandApp):
    name = "suspend status"
    description = "The state of one environment: suspended, waiting_for_capacity, restoring, ready (live/cold), failed."
    schema_name = "status"

    def run(self) -> int:
        request = self.request(timeout=30.0)
        if self.server_only(request.url):
            result, code = status_via_server(request)
            self.emit(result, text_report(result))
            return code
        try:
            result, code = environment_status(self.kube(request), request)
        except Exception as exc:
            if api_failure(exc) is None:
                raise
            return self.api_failed(exc)
        self.emit(result, text_report(result))
        return code


class ResumeApp(EnvironmentCommandApp):
    name = "suspend resume"
    description = (
        "Resume an environment from outside (scale up / unstop / unpause, optionally pinning a PodSnapshot) and, "
        "with --wait, follow it until ready, failed or the timeout. A resume already running is joined."
    )
    schema_name = "resume"

    snapshot = Unicode(
        "",
        help="Expect a restore from this PodSnapshot: accepted only when it is the newest Ready snapshot of the pod "
        "(the one GKE restores); nothing is pinned on the workload's template.",
    ).tag(config=True)
    wait = Bool(False, help="Follow until ready, failed or the timeout.").tag(config=True)
    timeout = Float(900.0, help="Seconds --wait follows before ending timed_out.").tag(config=True)
    join = Bool(True, help="Join a resume already running (False: refuse, exit 1).").tag(config=True)
    poll_interval = Float(2.0, help="Seconds between looks while following.").tag(config=True)
    lease_seconds = Int(30, help="The resume Lease's duration (renewed every third of it while following).").tag(
        config=True
    )

    aliases = {
        **ENVIRONMENT_ALIASES,
        "snapshot": "ResumeApp.snapshot",
        "timeout": "ResumeApp.timeout",
        "poll-interval": "ResumeApp.poll_interval",
        "lease-seconds": "ResumeApp.lease_seconds",
    }
    flags = {
        **BASE_FLAGS,
        "wait": ({"ResumeApp": {"wait": True}}, "Follow until ready, failed or the timeout."),
        "no-join": ({"ResumeApp": {"join": False}}, "Refuse (exit 1) when another resume of it is running."),
    }

    def run(self) -> int:
        request = self.request(
            snapshot=self.snapshot or None,
            wait=self.wait,
            timeout=self.timeout,
            join=self.join,
            poll_interval=self.poll_interval,
            lease_seconds=self.lease_seconds,
        )
        if self.server_only(request.url):
            if request.snapshot:
                raise UsageError("--snapshot needs Kubernetes (a PodSnapshot is pinned on the workload)")
            result, code = resume_via_server(request)
            self.emit(result, text_report(result))
            return code
        display = ProgressDisplay(sys.stderr)
        try:
            result, code = resume_environment(self.kube(request), request, display)
        except Exception as exc:
            if api_failure(exc) is None:
                raise
            display.close()
            return self.api_failed(exc)  # the Lease, if taken, was released on the way out
        finally:
            display.close()
        self.emit(result, text_report(result))
        return code


def connect_kube(api: client.ApiClient, namespace: str, timeout: float = 10.0) -> Kube:
    """A :class:`Kube` for callers that have their own API client (tests, other commands)."""
    return Kube(api, namespace, default_timeout=timeout)
