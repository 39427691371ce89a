"""Every Kubernetes API call the sidecar makes, and nothing else.

The official ``kubernetes`` client is synchronous: each call runs in a worker
thread (:meth:`PodSnapshots._call`), carries a client-side ``_request_timeout``
and has its failures turned into :class:`Fault` answers in one place. The
complete list of calls (what ``deploy/base/role.yaml`` must grant, and only
that):

=====================  ============================  ======================================
API group              resource                      verbs
=====================  ============================  ======================================
(core)                 pods                          get (own pod only)
podsnapshot.gke.io     podsnapshotpolicies           get; create (``--policy-mode create``)
podsnapshot.gke.io     podsnapshotmanualtriggers     create, get, watch, delete
podsnapshot.gke.io     podsnapshots                  get, list, watch, delete
=====================  ============================  ======================================

Responses are read raw (``_preload_content=False``) and parsed as JSON: the
views below work on the objects as the API serves them (camelCase), and the
client's model classes (slow to build on first use) are never involved.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import json
import logging
import math
import os
import re
import secrets
import string
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from typing import Any, NoReturn, TypedDict

import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.incluster_config import InClusterConfigLoader

from ..common import sidecar_protocol as proto
from .config import POLICY_OFF, Config
from .errors import Conflict, Fault, NotFound

log = logging.getLogger("jupyter_suspend.sidecar")

GROUP = "podsnapshot.gke.io"
POLICIES = "podsnapshotpolicies"
TRIGGERS = "podsnapshotmanualtriggers"
SNAPSHOTS = "podsnapshots"

ORIGIN_POD_ANNOTATION = "podsnapshot.gke.io/origin-pod"
PINNED_SNAPSHOT_ANNOTATION = "podsnapshot.gke.io/ps-name"
TRIGGERED_BY_LABEL = "gke-pod-snapshot-triggered-by"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "jupyter-suspend-sidecar"
POD_UID_LABEL = "jupyter-suspend/pod-uid"
POD_LABEL = "jupyter-suspend/pod"


# -- pure views -----------------------------------------------------------------


class PolicyView(TypedDict):
    """The policy part of :class:`~jupyter_suspend.common.sidecar_protocol.PodView`."""

    policy_mode: str
    policy_name: str
    policy_exists: bool | None
    post_checkpoint: str | None
    policy_problem: str | None


def _conditions(obj: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    if not obj:
        return []
    conds = (obj.get("status") or {}).get("conditions") or []
    return [c for c in conds if isinstance(c, dict)]


def _find(conds: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    return next((c for c in conds if c.get("type") == kind), None)


def _condition_view(source: str, c: Mapping[str, Any]) -> proto.Condition:
    return {
        "source": source,
        "type": str(c.get("type", "")),
        "status": str(c.get("status", "Unknown")),
        "reason": c.get("reason"),
        "message": c.get("message"),
        "lastTransitionTime": c.get("lastTransitionTime"),
    }


_FAILED_REASONS = frozenset({"Failed", "Error"})


def _failed(c: Mapping[str, Any] | None) -> bool:
    return c is not None and c.get("reason") in _FAILED_REASONS and c.get("status") != "True"


def _succeeded(c: Mapping[str, Any] | None) -> bool:
    return c is not None and (c.get("status") == "True" or c.get("reason") == "Succeeded")


def _parse_size(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|K|M|G|T)?", value.strip())
        if m:
            factor = {
                None: 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
                "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
            }[m.group(2)]  # fmt: skip
            return int(m.group(1)) * factor
    return None


def snapshot_gcs_path(snapshot: Mapping[str, Any]) -> str | None:
    gcs = ((snapshot.get("status") or {}).get("storageStatus") or {}).get("gcs") or {}
    path = gcs.get("observedGCSPath")
    return path if isinstance(path, str) else None


def snapshot_size(snapshot: Mapping[str, Any]) -> int | None:
    """The stored size if GKE reports one (the field is not documented; several spellings are tried)."""
    status = snapshot.get("status") or {}
    storage = status.get("storageStatus") or {}
    for holder in (storage.get("gcs") or {}, storage, status):
        for key in ("sizeBytes", "totalSizeBytes", "size"):
            if key in holder:
                size = _parse_size(holder[key])
                if size is not None:
                    return size
    return None


def progress_view(
    trigger: Mapping[str, Any], snapshot: Mapping[str, Any] | None, missing: bool
) -> proto.SnapshotProgress:
    """Normalize a trigger and its snapshot into one phase.

    ``missing``: the trigger names a snapshot the API does not show.
    """
    t_conds = _conditions(trigger)
    s_conds = _conditions(snapshot)
    created_name = ((trigger.get("status") or {}).get("snapshotCreated") or {}).get("name")
    triggered = _find(t_conds, "Triggered")
    checkpoint = _find(s_conds, "Checkpoint")
    ready = _find(s_conds, "Ready")

    phase: proto.Phase
    deciding: Mapping[str, Any] | None
    reason: str | None = None
    message: str | None = None
    if _failed(triggered):
        phase, deciding = "failed", triggered
    elif _failed(checkpoint):
        phase, deciding = "failed", checkpoint
    elif ready is not None and ready.get("status") == "True":
        phase, deciding = "ready", ready
    elif snapshot is not None and _succeeded(checkpoint):
        phase, deciding = "uploading", ready or checkpoint
    elif snapshot is not None:
        phase, deciding = "checkpointing", ready or checkpoint
    elif missing:
        # Not yet visible, or deleted since: which one cannot be told from here, and
        # calling it failed too early would abort a checkpoint that is happening.
        # The caller's own deadline ends the wait.
        phase, deciding = "checkpointing", None
        reason = "SnapshotNotFound"
        message = f"the trigger names PodSnapshot {created_name}, which the API does not show (yet)"
    elif triggered is not None:
        phase, deciding = "checkpointing", triggered
    else:
        phase, deciding = "pending", None
        message = "waiting for GKE to accept the trigger"
    if deciding is not None:
        reason, message = deciding.get("reason"), deciding.get("message")
    return {
        "trigger": str((trigger.get("metadata") or {}).get("name", "")),
        "phase": phase,
        "reason": reason,
        "message": message,
        "conditions": [_condition_view("trigger", c) for c in t_conds]
        + [_condition_view("snapshot", c) for c in s_conds],
        "snapshot": created_name if isinstance(created_name, str) else None,
        "gcs_path": snapshot_gcs_path(snapshot) if snapshot else None,
        "size_bytes": snapshot_size(snapshot) if snapshot else None,
        "created": (snapshot.get("metadata") or {}).get("creationTimestamp") if snapshot else None,
    }


def snapshot_summary(snapshot: Mapping[str, Any]) -> proto.SnapshotSummary:
    meta = snapshot.get("metadata") or {}
    ready = _find(_conditions(snapshot), "Ready")
    return {
        "name": str(meta.get("name", "")),
        "created": meta.get("creationTimestamp"),
        "ready": bool(ready and ready.get("status") == "True"),
        "ready_reason": ready.get("reason") if ready else None,
        "policy": (snapshot.get("spec") or {}).get("policyName"),
        "last_access": (snapshot.get("status") or {}).get("lastAccessTime"),
        "gcs_path": snapshot_gcs_path(snapshot),
        "trigger": (meta.get("labels") or {}).get(TRIGGERED_BY_LABEL),
        "size_bytes": snapshot_size(snapshot),
        "deleting": bool(meta.get("deletionTimestamp")),
    }


def pod_view(pod: Mapping[str, Any], started_uid: str | None, policy: PolicyView) -> proto.PodView:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    annotations = {k: str(v) for k, v in (meta.get("annotations") or {}).items() if k.startswith(GROUP + "/")}
    conds: list[proto.PodCondition] = [
        {
            "type": str(c.get("type", "")),
            "status": str(c.get("status", "Unknown")),
            "reason": c.get("reason"),
            "message": c.get("message"),
            "lastTransitionTime": c.get("lastTransitionTime"),
        }
        for c in _conditions(pod)
    ]
    restored = next((c for c in conds if c["type"] == "PodRestored"), None)
    is_restored = bool(restored and restored["status"] == "True")
    return {
        "name": str(meta.get("name", "")),
        "namespace": str(meta.get("namespace", "")),
        "uid": meta.get("uid"),
        "started_uid": started_uid,
        "phase": status.get("phase"),
        "node_name": (pod.get("spec") or {}).get("nodeName"),
        "conditions": conds,
        "pinned_snapshot": annotations.get(PINNED_SNAPSHOT_ANNOTATION),
        "restored": is_restored,
        "restored_message": restored["message"] if restored and is_restored else None,
        "annotations": annotations,
        "policy_mode": policy["policy_mode"],
        "policy_name": policy["policy_name"],
        "policy_exists": policy["policy_exists"],
        "post_checkpoint": policy["post_checkpoint"],
        "policy_problem": policy["policy_problem"],
    }


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels + matchExpressions) against labels."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def trigger_name(pod: str) -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(6))
    tail = f"-{stamp}-{suffix}"
    return pod[: 253 - len(tail)].rstrip("-.") + tail


# -- the calls ------------------------------------------------------------------


def api_client_from_files(config: Config) -> client.ApiClient:
    """In-cluster configuration from the configured token and CA files (re-read every minute)."""
    cfg = client.Configuration()
    InClusterConfigLoader(
        token_filename=config.token_file, cert_filename=config.ca_file, environ=os.environ
    ).load_and_set(cfg)
    # Retry only what cannot have reached the API: a failed connect (after a
    # restore every pooled connection is gone). Read errors and error statuses
    # are not retried -- a create must not be sent twice, and the time bound
    # stays one timeout; the caller is told whether to retry (``retryable``).
    cfg.retries = urllib3.Retry(
        total=2, connect=2, read=0, redirect=0, status=0, other=0, backoff_factor=0.1, raise_on_status=False
    )
    return client.ApiClient(cfg)


class PodSnapshots:
    """Pod Snapshots of the sidecar's own pod; async methods, blocking calls in threads."""

    def __init__(self, config: Config, api_client: client.ApiClient, executor: Executor | None = None):
        self.config = config
        #: Worker threads for the blocking client (None: the loop's default executor).
        self.executor = executor
        self.pod = config.pod_name
        self.namespace = config.namespace
        self.version = config.api_version
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.timeout = config.kube_timeout

    # -- plumbing ----------------------------------------------------------------

    async def _call(
        self, verb: str, resource: str, fn: Callable[..., Any], *args: Any, timed: bool = True, **kwargs: Any
    ) -> Any:
        """Run one blocking API call in a worker thread; failures become :class:`Fault`.

        ``timed``: add the client-side ``_request_timeout`` (``fn`` is a client method).
        """
        if timed:
            kwargs.setdefault("_request_timeout", (min(5.0, self.timeout), self.timeout))
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self.executor, functools.partial(fn, *args, **kwargs)
            )
        except ApiException as exc:
            self._api_fault(exc, verb, resource)
        except urllib3.exceptions.MaxRetryError as exc:
            self._transport_fault(exc.reason or exc, verb, resource)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._transport_fault(exc, verb, resource)

    def _api_fault(self, exc: ApiException, verb: str, resource: str) -> NoReturn:
        status = exc.status or 0
        detail = _status_message(exc)
        if status == 404:
            raise NotFound(detail)
        if status == 409:
            raise Conflict(detail)
        if status == 403:
            raise Fault(
                502,
                proto.E_KUBE_FORBIDDEN,
                f"the sidecar's Role does not allow '{verb}' on {resource} in namespace {self.namespace} ({detail})",
                next_step="apply deploy/base/role.yaml (Role and RoleBinding jupyter-suspend-sidecar) "
                "in this namespace",
            )
        if status == 401:
            raise Fault(
                502,
                proto.E_KUBE_UNAUTHORIZED,
                f"the API server refused the sidecar's service-account token ({detail})",
                retryable=True,
                next_step="check the service account jupyter-suspend-sidecar and its token mount",
            )
        if status == 0:  # TLS and other transport errors the client wraps
            raise Fault(502, proto.E_KUBE_UNAVAILABLE, f"cannot reach the Kubernetes API: {exc.reason}", retryable=True)
        if status == 429 or status >= 500:
            raise Fault(
                502,
                proto.E_KUBE_UNAVAILABLE,
                f"the Kubernetes API answered {status} to '{verb}' on {resource}: {detail}",
                retryable=True,
            )
        raise Fault(
            502, proto.E_KUBE_ERROR, f"the Kubernetes API answered {status} to '{verb}' on {resource}: {detail}"
        )

    def _transport_fault(self, exc: BaseException, verb: str, resource: str) -> NoReturn:
        if isinstance(exc, (urllib3.exceptions.TimeoutError, TimeoutError)):
            raise Fault(
                504,
                proto.E_KUBE_TIMEOUT,
                f"the Kubernetes API did not answer '{verb}' on {resource} within {self.timeout:g} s",
                retryable=True,
            )
        raise Fault(
            502,
            proto.E_KUBE_UNAVAILABLE,
            f"cannot reach the Kubernetes API ({type(exc).__name__}: {exc})",
            retryable=True,
        )

    async def _get(self, plural: str, name: str) -> dict[str, Any]:
        resp = await self._call(
            "get",
            f"{GROUP}/{plural}",
            self.custom.get_namespaced_custom_object,
            GROUP,
            self.version,
            self.namespace,
            plural,
            name,
            _preload_content=False,
        )
        return _json(resp)

    async def _create(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        resp = await self._call(
            "create",
            f"{GROUP}/{plural}",
            self.custom.create_namespaced_custom_object,
            GROUP,
            self.version,
            self.namespace,
            plural,
            body,
            _preload_content=False,
        )
        return _json(resp)

    async def _delete(self, plural: str, name: str) -> None:
        await self._call(
            "delete",
            f"{GROUP}/{plural}",
            self.custom.delete_namespaced_custom_object,
            GROUP,
            self.version,
            self.namespace,
            plural,
            name,
            _preload_content=False,
        )

    def _watch_once(self, plural: str, name: str, resource_version: str | None, seconds: int) -> bool:
        """Block until the named object changes (True) or ``seconds`` pass (False). Runs in a thread."""
        w = watch.Watch()
        kwargs: dict[str, Any] = {
            "field_selector": f"metadata.name={name}",
            "timeout_seconds": seconds,
            "_request_timeout": (min(5.0, self.timeout), seconds + self.timeout),
        }
        if resource_version:
            kwargs["resource_version"] = resource_version
        try:
            for event in w.stream(
                self.custom.list_namespaced_custom_object, GROUP, self.version, self.namespace, plural, **kwargs
            ):
                if isinstance(event, dict) and event.get("type") == "BOOKMARK":
                    continue
                return True
            return False
        finally:
            w.stop()

    async def _watch(self, plural: str, name: str, resource_version: str | None, seconds: int) -> None:
        try:
            await self._call(
                "watch",
                f"{GROUP}/{plural}",
                self._watch_once,
                plural,
                name,
                resource_version,
                seconds,
                timed=False,  # _watch_once sets its own _request_timeout
            )
        except (NotFound, Conflict):
            pass
        except Fault as fault:
            if fault.code != proto.E_KUBE_ERROR:  # 410 Gone and the like: re-read instead
                raise

    # -- own pod -----------------------------------------------------------------

    async def read_pod(self) -> dict[str, Any]:
        try:
            resp = await self._call(
                "get",
                "pods",
                self.core.read_namespaced_pod,
                self.pod,
                self.namespace,
                _preload_content=False,
            )
        except NotFound:
            raise Fault(
                502,
                proto.E_KUBE_ERROR,
                f"the sidecar's own pod {self.namespace}/{self.pod} is not known to the API",
                next_step="check POD_NAME / POD_NAMESPACE (downward API) of the sidecar container",
            ) from None
        return _json(resp)

    async def pod_view(self) -> proto.PodView:
        """The own pod and the policy that applies to it (read with the verbs the snapshot needs: ``get``)."""
        pod = await self.read_pod()
        return pod_view(pod, self.config.pod_uid, await self.policy_view())

    async def policy_view(self) -> PolicyView:
        """The policy part of :class:`~proto.PodView`; a policy that cannot be read is said, never raised."""
        name, mode = self.config.policy_name, self.config.policy_mode
        exists: bool | None
        post: str | None
        problem: str | None = None
        if mode == POLICY_OFF:  # --workload: no snapshots, and no podsnapshot verbs in the Role to read one
            return {
                "policy_mode": mode,
                "policy_name": name,
                "policy_exists": None,
                "post_checkpoint": None,
                "policy_problem": f"this sidecar does not take snapshots (--workload {self.config.workload})",
            }
        try:
            policy = await self._get(POLICIES, name)
        except NotFound:
            exists = False
            post = self.config.post_checkpoint if mode == "create" else None
        except Fault as fault:
            exists, post, problem = None, None, fault.message
        else:
            exists = True
            trigger = (policy.get("spec") or {}).get("triggerConfig") or {}
            post = str(trigger.get("postCheckpoint") or proto.POST_CHECKPOINT_DEFAULT)
        return {
            "policy_mode": mode,
            "policy_name": name,
            "policy_exists": exists,
            "post_checkpoint": post,
            "policy_problem": problem,
        }

    # -- policy ------------------------------------------------------------------

    def policy_body(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "selector": {"matchLabels": dict(self.config.policy_selector)},
            "storageConfigName": self.config.storage_config,
            "triggerConfig": {"type": "manual", "postCheckpoint": self.config.post_checkpoint},
        }
        if self.config.retention:
            spec["retentionConfig"] = {"lastAccessTimeout": self.config.retention}
        return {
            "apiVersion": f"{GROUP}/{self.version}",
            "kind": "PodSnapshotPolicy",
            "metadata": {
                "name": self.config.policy_name,
                "namespace": self.namespace,
                "labels": _labels({MANAGED_BY_LABEL: MANAGED_BY, POD_LABEL: self.pod}),
            },
            "spec": spec,
        }

    async def ensure_policy(self, pod_labels: Mapping[str, str]) -> tuple[str, bool]:
        """The policy that applies to this pod per the policy mode; (name, created now)."""
        name = self.config.policy_name
        created = False
        try:
            policy = await self._get(POLICIES, name)
        except NotFound:
            if self.config.policy_mode == "require":
                raise Fault(
                    409,
                    proto.E_POLICY_MISSING,
                    f"PodSnapshotPolicy {name} does not exist in namespace {self.namespace}",
                    next_step=(
                        f"ask the platform team to install PodSnapshotPolicy {name} (triggerConfig.type manual, "
                        f"a selector matching pod {self.pod}) in namespace {self.namespace}, "
                        "or run the sidecar with --policy-mode create"
                    ),
                ) from None
            try:
                policy = await self._create(POLICIES, self.policy_body())
                created = True
                log.info("created PodSnapshotPolicy %s", name)
            except Conflict:  # created meanwhile
                policy = await self._get(POLICIES, name)
        spec = policy.get("spec") or {}
        kind = (spec.get("triggerConfig") or {}).get("type")
        if kind != "manual":
            raise Fault(
                409,
                proto.E_POLICY_CONFLICT,
                f"PodSnapshotPolicy {name} has trigger type {kind!r}; the sidecar needs 'manual'",
                next_step=f"set spec.triggerConfig.type: manual on PodSnapshotPolicy {name}, or name another policy",
            )
        if not selector_matches(spec.get("selector") or {}, pod_labels):
            raise Fault(
                409,
                proto.E_POLICY_CONFLICT,
                f"PodSnapshotPolicy {name} does not select pod {self.pod} (selector {spec.get('selector')})",
                next_step="make the policy's selector match this pod's labels (and the pod that replaces it)",
            )
        return name, created

    # -- requests ----------------------------------------------------------------

    async def request_snapshot(self) -> proto.SnapshotRequested:
        pod = await self.read_pod()
        meta = pod.get("metadata") or {}
        policy, created = await self.ensure_policy(meta.get("labels") or {})
        uid = meta.get("uid") or self.config.pod_uid or ""
        name = trigger_name(self.pod)
        body = {
            "apiVersion": f"{GROUP}/{self.version}",
            "kind": "PodSnapshotManualTrigger",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": _labels({MANAGED_BY_LABEL: MANAGED_BY, POD_UID_LABEL: uid, POD_LABEL: self.pod}),
            },
            "spec": {"targetPod": self.pod},
        }
        try:
            await self._create(TRIGGERS, body)
        except Conflict:
            raise Fault(
                409, proto.E_KUBE_ERROR, f"a trigger named {name} exists already; ask again", retryable=True
            ) from None
        log.info("created PodSnapshotManualTrigger %s for pod %s (uid %s)", name, self.pod, uid)
        return {
            "trigger": name,
            "pod": self.pod,
            "namespace": self.namespace,
            "policy": policy,
            "policy_created": created,
        }

    async def _own_trigger(self, name: str) -> dict[str, Any]:
        try:
            trigger = await self._get(TRIGGERS, name)
        except NotFound:
            raise Fault(404, proto.E_NOT_FOUND, f"no snapshot request {name} in namespace {self.namespace}") from None
        target = (trigger.get("spec") or {}).get("targetPod")
        if target != self.pod:
            raise Fault(403, proto.E_FORBIDDEN_TARGET, f"snapshot request {name} targets pod {target}, not this pod")
        return trigger

    async def _progress(self, name: str) -> tuple[proto.SnapshotProgress, str | None, str | None]:
        """(view, trigger resourceVersion, snapshot resourceVersion)."""
        trigger = await self._own_trigger(name)
        snapshot_name = ((trigger.get("status") or {}).get("snapshotCreated") or {}).get("name")
        snapshot = None
        missing = False
        if isinstance(snapshot_name, str) and snapshot_name:
            try:
                snapshot = await self._get(SNAPSHOTS, snapshot_name)
            except NotFound:
                missing = True
        view = progress_view(trigger, snapshot, missing)
        return (
            view,
            (trigger.get("metadata") or {}).get("resourceVersion"),
            (snapshot.get("metadata") or {}).get("resourceVersion") if snapshot else None,
        )

    async def follow(self, name: str, wait: float = 0.0, since: str | None = None) -> proto.SnapshotProgress:
        view, trigger_rv, snapshot_rv = await self._progress(name)
        if wait <= 0:
            return view
        deadline = time.monotonic() + min(wait, proto.MAX_WAIT_SECONDS)
        baseline = since or view["phase"]
        while view["phase"] not in proto.TERMINAL_PHASES and view["phase"] == baseline:
            remaining = deadline - time.monotonic()
            if remaining < 0.5:
                break
            seconds = max(1, math.floor(remaining))
            if view["snapshot"] is None:
                await self._watch(TRIGGERS, name, trigger_rv, seconds)
            else:
                await self._watch(SNAPSHOTS, view["snapshot"], snapshot_rv, seconds)
            view, trigger_rv, snapshot_rv = await self._progress(name)
        return view

    # -- snapshots ---------------------------------------------------------------

    async def list_snapshots(self) -> proto.SnapshotList:
        resp = await self._call(
            "list",
            f"{GROUP}/{SNAPSHOTS}",
            self.custom.list_namespaced_custom_object,
            GROUP,
            self.version,
            self.namespace,
            SNAPSHOTS,
            _preload_content=False,
        )
        items = _json(resp).get("items") or []
        own = [
            snapshot_summary(s)
            for s in items
            if ((s.get("metadata") or {}).get("annotations") or {}).get(ORIGIN_POD_ANNOTATION) == self.pod
        ]
        own.sort(key=lambda s: s["created"] or "")
        return {"pod": self.pod, "namespace": self.namespace, "snapshots": own}

    async def delete_snapshot(self, name: str) -> proto.SnapshotDeleted:
        try:
            snapshot = await self._get(SNAPSHOTS, name)
        except NotFound:
            raise Fault(404, proto.E_NOT_FOUND, f"no PodSnapshot {name} in namespace {self.namespace}") from None
        meta = snapshot.get("metadata") or {}
        origin = (meta.get("annotations") or {}).get(ORIGIN_POD_ANNOTATION)
        if origin != self.pod:
            raise Fault(
                403, proto.E_FORBIDDEN_TARGET, f"PodSnapshot {name} is a snapshot of pod {origin}, not of this pod"
            )
        with contextlib.suppress(NotFound):  # deleted meanwhile
            await self._delete(SNAPSHOTS, name)
        log.info("deleted PodSnapshot %s", name)
        trigger_name_ = (meta.get("labels") or {}).get(TRIGGERED_BY_LABEL)
        deleted_trigger = None
        if trigger_name_:
            try:
                trigger = await self._get(TRIGGERS, trigger_name_)
                if (trigger.get("spec") or {}).get("targetPod") == self.pod:
                    await self._delete(TRIGGERS, trigger_name_)
                    deleted_trigger = trigger_name_
                    log.info("deleted PodSnapshotManualTrigger %s", trigger_name_)
            except NotFound:
                pass
        return {"deleted": name, "trigger": deleted_trigger}


def _labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Drop values Kubernetes would refuse as label values (e.g. a pod name over 63 characters)."""
    ok = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
    return {k: v for k, v in labels.items() if ok.match(v)}


def _json(resp: Any) -> dict[str, Any]:
    data = resp.data if hasattr(resp, "data") else resp
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    obj = json.loads(data) if isinstance(data, str) and data else {}
    return obj if isinstance(obj, dict) else {}


def _status_message(exc: ApiException) -> str:
    """The ``message`` of a Kubernetes ``Status`` body, else the HTTP reason."""
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        body = {}
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return str(exc.reason or exc.status)
