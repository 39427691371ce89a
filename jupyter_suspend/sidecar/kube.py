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
podsnapshot.gke.io     podsnapshotpolicies           get (own policy only); create (``--policy-mode create``)
podsnapshot.gke.io     podsnapshotmanualtriggers     create, get, watch, delete
podsnapshot.gke.io     podsnapshots                  get, list, watch, delete
=====================  ============================  ======================================

Errors reach the caller in the sidecar's own words with a next step; what the
API server said (which may name webhooks, addresses, the service account or
other objects) goes to the sidecar's log at DEBUG only.

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
import socket
import string
import threading
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
from .redact import REDACTOR

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


#: The PodSnapshot GKE makes from a trigger carries the trigger's name as the label value
#: ``gke-pod-snapshot-triggered-by`` (platform-facts §1): a label value is at most 63 characters.
TRIGGER_NAME_MAX = proto.LABEL_VALUE_MAX


def trigger_name(pod: str) -> str:
    """``<pod, cut>-<UTC stamp>-<6 random>``: a DNS-1123 subdomain and a label value (<= 63 characters)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(6))
    tail = f"-{stamp}-{suffix}"
    name = pod[: TRIGGER_NAME_MAX - len(tail)].rstrip("-.") + tail
    assert proto.is_trigger_name(name), name
    return name


# -- the calls ------------------------------------------------------------------


#: The client re-reads the token file this often anyway (as the kubernetes client's own loader does);
#: a 401 makes it re-read at once (:meth:`Credentials.reread`).
TOKEN_REFRESH_SECONDS = 60.0


class Credentials:
    """The service-account token of ``config.token_file`` in a client configuration.

    Re-read every :data:`TOKEN_REFRESH_SECONDS` (the kubelet rotates projected tokens) and at once
    after a 401: a pod restored from a snapshot may start with the deleted pod's token in its
    files until the kubelet writes the new one (unverified: no public source says whether GKE
    re-projects it at restore). Every token read is handed to the log redactor.
    """

    def __init__(self, token_file: str, cfg: client.Configuration) -> None:
        self.token_file = token_file
        self.cfg = cfg
        self._lock = threading.Lock()
        self._read_at = -math.inf
        self.token = ""
        self.read()
        cfg.refresh_api_key_hook = self._refresh  # type: ignore[assignment]  # annotated None in the client

    def read(self) -> str:
        with open(self.token_file, encoding="utf-8") as f:
            token = f.read().strip()
        REDACTOR.add(token)
        with self._lock:
            self.token = token
            self._read_at = time.monotonic()
            self.cfg.api_key["BearerToken"] = f"bearer {token}"
        return token

    def reread(self) -> bool:
        """Read the file again now; True if the token changed. A file that cannot be read keeps the old one."""
        before = self.token
        try:
            return self.read() != before
        except OSError as exc:
            log.warning("cannot re-read the service-account token file %s: %s", self.token_file, exc.strerror)
            return False

    def _refresh(self, cfg: client.Configuration) -> None:
        if time.monotonic() - self._read_at >= TOKEN_REFRESH_SECONDS:
            self.reread()
        with self._lock:
            cfg.api_key["BearerToken"] = f"bearer {self.token}"


def api_client_from_files(config: Config) -> client.ApiClient:
    """In-cluster configuration from the configured token and CA files (the token re-read every minute and on a 401)."""
    cfg = client.Configuration()
    InClusterConfigLoader(
        token_filename=config.token_file, cert_filename=config.ca_file, environ=os.environ
    ).load_and_set(cfg)
    cfg.refresh_api_key_hook = None
    Credentials(config.token_file, cfg)
    # Retry only what cannot have reached the API: a failed connect (after a
    # restore every pooled connection is gone). Read errors and error statuses
    # are not retried -- a create must not be sent twice, and the time bound
    # stays one timeout; the caller is told whether to retry (``retryable``).
    cfg.retries = urllib3.Retry(
        total=2, connect=2, read=0, redirect=0, status=0, other=0, backoff_factor=0.1, raise_on_status=False
    )
    return client.ApiClient(cfg)


#: A watch is opened for at most this long, then re-opened: an abandoned long-poll that was not
#: noticed (see :meth:`PodSnapshots.follow`'s ``gone``) holds its thread no longer than this.
WATCH_CHUNK_SECONDS = 5
#: Long-polls that may hold a watch (and a thread of the watch pool) at once; the others wait for
#: a free slot without a thread and are answered at their deadline.
WATCH_SLOTS = 8


class PodSnapshots:
    """Pod Snapshots of the sidecar's own pod; async methods, blocking calls in threads."""

    def __init__(
        self,
        config: Config,
        api_client: client.ApiClient,
        executor: Executor | None = None,
        watch_executor: Executor | None = None,
    ):
        self.config = config
        #: Worker threads for the blocking client (None: the loop's default executor).
        self.executor = executor
        #: Threads for long-poll watches only, so that abandoned long-polls cannot take the threads
        #: every other request needs (None: ``executor``).
        self.watch_executor = watch_executor or executor
        self._watch_slots: asyncio.Semaphore | None = None
        self._pod_view: asyncio.Future[proto.PodView] | None = None
        #: The token source api_client_from_files installed (its refresh hook); None: a client made otherwise.
        hook_owner = getattr(api_client.configuration.refresh_api_key_hook, "__self__", None)
        self.credentials = hook_owner if isinstance(hook_owner, Credentials) else None
        self.pod = config.pod_name
        self.namespace = config.namespace
        self.version = config.api_version
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.timeout = config.kube_timeout

    # -- plumbing ----------------------------------------------------------------

    async def _call(
        self,
        verb: str,
        resource: str,
        fn: Callable[..., Any],
        *args: Any,
        timed: bool = True,
        executor: Executor | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run one blocking API call in a worker thread; failures become :class:`Fault`.

        ``timed``: add the client-side ``_request_timeout`` (``fn`` is a client method).
        A 401 makes the token be read again from its file at once and the call be sent once more
        (a 401 is answered before the API server does anything, so even a create is safe to resend).
        """
        if timed:
            kwargs.setdefault("_request_timeout", (min(5.0, self.timeout), self.timeout))
        loop = asyncio.get_running_loop()
        call = functools.partial(fn, *args, **kwargs)
        if kwargs.get("_preload_content") is False:
            # A raw answer's body is read here too, in the worker thread and under the fault mapping below. Read
            # later in the event loop, a connection cut mid-body escaped as an unexpected 500 (and a slow body
            # stalled every other request): found with tests/cluster/faults.py's hang_up.
            call = functools.partial(_read_body, call)
        for attempt in (1, 2):
            try:
                return await loop.run_in_executor(executor or self.executor, call)
            except ApiException as exc:
                if exc.status == 401 and attempt == 1 and self.credentials is not None:
                    changed = await loop.run_in_executor(self.executor, self.credentials.reread)
                    log.info(
                        "the API refused the token for '%s' on %s; read it again (%s), retrying once",
                        verb,
                        resource,
                        "changed" if changed else "unchanged",
                    )
                    continue
                self._api_fault(exc, verb, resource, retried=attempt == 2)
            except urllib3.exceptions.MaxRetryError as exc:
                self._transport_fault(exc.reason or exc, verb, resource)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                self._transport_fault(exc, verb, resource)
        raise AssertionError("unreachable")  # pragma: no cover

    def _api_fault(self, exc: ApiException, verb: str, resource: str, retried: bool = False) -> NoReturn:
        status = exc.status or 0
        detail = _status_message(exc)
        reason = _reason(exc)
        # What the API server said may name webhooks, addresses, the service account or other
        # objects: the sidecar's log only, at DEBUG; the caller gets our words.
        log.debug("API answer to '%s' on %s: %d %s: %s", verb, resource, status, reason, detail)
        if status == 404:
            raise NotFound(detail)
        if status == 409:
            raise Conflict(detail)
        if status != 0:
            log.warning("the Kubernetes API answered %d %s to '%s' on %s", status, reason, verb, resource)
        if status == 403:
            raise Fault(
                502,
                proto.E_KUBE_FORBIDDEN,
                f"the sidecar's Role does not allow '{verb}' on {resource} in namespace {self.namespace} "
                "(or an admission webhook refused it; the sidecar's log has the API server's answer at DEBUG)",
                # The identity is the pod's own service account, which differs by platform: on Kubeflow
                # Workspaces it is the controller's ws-<workspace> (kubeflow/notebooks notebooks-v2
                # workspace_controller.go generateServiceAccountName), bound by deploy/overlays/kubeflow-workspace.
                # Named generically: the identity itself stays in the log (see above).
                next_step="apply deploy/base/role.yaml (or your overlay's Role and RoleBinding "
                "jupyter-suspend-sidecar, with this pod's, its policy's or its owner's names in resourceNames) "
                "in this namespace, bound to the pod's service account (jupyter-suspend-sidecar; on Kubeflow "
                "Workspaces the workspace's own ws-<workspace>, deploy/overlays/kubeflow-workspace); "
                "kubectl auth can-i --list --as=system:serviceaccount:<namespace>:<that account> "
                "shows what it may do",
            )
        if status == 401:
            raise Fault(
                502,
                proto.E_KUBE_UNAUTHORIZED,
                "the Kubernetes API refused the sidecar's service-account token"
                + (f", also after reading it again from {self.config.token_file}" if retried else ""),
                retryable=True,
                next_step="if this pod was restored from a snapshot, its token may still be the deleted pod's: "
                "ask again after the kubelet refreshes the projected token; otherwise check the service account "
                "jupyter-suspend-sidecar and the token mount of the sidecar container. Deleting the consumed "
                "snapshot is left to the releaser (deploy/releaser), which has its own identity",
            )
        if status == 0:  # the kubernetes client turns a TLS failure into ApiException(status=0)
            log.warning("TLS with the Kubernetes API failed for '%s' on %s: %s", verb, resource, exc.reason)
            raise Fault(
                502,
                proto.E_KUBE_TLS,
                f"the TLS handshake with the Kubernetes API at {self._api_host()} failed: its certificate is "
                f"not signed by the CA in {self.config.ca_file}, or does not name that host",
                retryable=False,
                next_step="check the sidecar's --ca-file (the service account's ca.crt) and KUBERNETES_SERVICE_HOST",
            )
        if status == 429 or status >= 500:
            raise Fault(
                502,
                proto.E_KUBE_UNAVAILABLE,
                f"the Kubernetes API answered {status} ({reason}) to '{verb}' on {resource}",
                retryable=True,  # the next step is "again, in a moment": the caller words it for its own context
            )
        raise Fault(
            502,
            proto.E_KUBE_ERROR,
            f"the Kubernetes API refused '{verb}' on {resource}: {status} ({reason})",
            next_step="the sidecar's log has the API server's answer (at DEBUG)",
        )

    def _api_host(self) -> str:
        return str(self.api_client.configuration.host)

    def _transport_fault(self, exc: BaseException, verb: str, resource: str) -> NoReturn:
        """Each transport failure named as what it is. urllib3's NewConnectionError (and its subclass
        NameResolutionError) is a subclass of ConnectTimeoutError: it is tested for first."""
        errors = urllib3.exceptions
        host = self._api_host()
        log.warning("no answer from the Kubernetes API to '%s' on %s: %s: %s", verb, resource, type(exc).__name__, exc)
        if isinstance(exc, (errors.NameResolutionError, socket.gaierror)):
            raise Fault(
                502,
                proto.E_KUBE_DNS,
                f"the Kubernetes API's host name in {host} cannot be resolved",
                retryable=True,
                next_step="check KUBERNETES_SERVICE_HOST of the sidecar container and the cluster's DNS",
            )
        if isinstance(exc, (errors.NewConnectionError, ConnectionRefusedError)):
            refused = isinstance(exc, ConnectionRefusedError) or "refused" in str(exc).lower()
            raise Fault(
                502,
                proto.E_KUBE_REFUSED if refused else proto.E_KUBE_UNAVAILABLE,
                f"the Kubernetes API at {host} " + ("refused the connection" if refused else "cannot be connected to"),
                retryable=True,
                next_step="check KUBERNETES_SERVICE_HOST/PORT of the sidecar container and that the API "
                "server is up; try again shortly",
            )
        if isinstance(exc, errors.SSLError):
            raise Fault(
                502,
                proto.E_KUBE_TLS,
                f"the TLS handshake with the Kubernetes API at {host} failed: its certificate is not signed by "
                f"the CA in {self.config.ca_file}, or does not name that host",
                next_step="check the sidecar's --ca-file (the service account's ca.crt) and KUBERNETES_SERVICE_HOST",
            )
        if isinstance(exc, errors.ConnectTimeoutError):
            raise Fault(
                504,
                proto.E_KUBE_TIMEOUT,
                f"no connection to the Kubernetes API at {host} within {min(5.0, self.timeout):g} s",
                retryable=True,
                next_step="try again shortly; if it persists, check the network path to the API server",
            )
        if isinstance(exc, (errors.TimeoutError, TimeoutError)):
            raise Fault(
                504,
                proto.E_KUBE_TIMEOUT,
                f"the Kubernetes API did not answer '{verb}' on {resource} within {self.timeout:g} s",
                retryable=True,
                next_step="try again shortly; the API server is slow or overloaded",
            )
        raise Fault(
            502,
            proto.E_KUBE_UNAVAILABLE,
            f"the connection to the Kubernetes API at {host} failed during '{verb}' on {resource}",
            retryable=True,
            next_step="try again shortly; the sidecar's log says how it failed",
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

    def _watch_once(self, plural: str, name: str, resource_version: str | None, seconds: int, holder: _Stream) -> bool:
        """Block until the named object changes (True) or ``seconds`` pass (False). Runs in a thread.

        One watch of one object (``fieldSelector=metadata.name=<name>``); the open response is put in
        ``holder`` so that the event loop can shut it down when the caller goes away.
        """
        kwargs: dict[str, Any] = {
            "field_selector": f"metadata.name={name}",
            "watch": True,
            "allow_watch_bookmarks": False,
            "timeout_seconds": seconds,
            "_request_timeout": (min(5.0, self.timeout), seconds + self.timeout),
            "_preload_content": False,
        }
        if resource_version:
            kwargs["resource_version"] = resource_version
        resp = self.custom.list_namespaced_custom_object(GROUP, self.version, self.namespace, plural, **kwargs)
        try:
            if not holder.hold(resp):
                return False  # the caller left while the watch was opened
            for line in watch.watch.iter_resp_lines(resp):
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if isinstance(event, dict) and event.get("type") == "BOOKMARK":
                        continue
                return True  # any other event (ERROR, e.g. 410 Gone, included): read the object again
            return False
        except (urllib3.exceptions.HTTPError, OSError):
            if holder.cancelled:
                return False
            raise
        finally:
            holder.release()

    async def _watch(
        self, plural: str, name: str, resource_version: str | None, seconds: int, gone: asyncio.Event | None
    ) -> None:
        holder = _Stream()
        watching = asyncio.ensure_future(
            self._call(
                "watch",
                f"{GROUP}/{plural}",
                self._watch_once,
                plural,
                name,
                resource_version,
                seconds,
                holder,
                timed=False,  # _watch_once sets its own _request_timeout
                executor=self.watch_executor,
            )
        )
        waiters: set[asyncio.Future[Any]] = {watching}
        left = asyncio.ensure_future(gone.wait()) if gone is not None else None
        if left is not None:
            waiters.add(left)
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if not watching.done():
                holder.cancel()  # the caller went away: free the thread now
            await watching
        except (NotFound, Conflict):
            pass
        except Fault as fault:
            if fault.code != proto.E_KUBE_ERROR:  # 410 Gone and the like: re-read instead
                raise
        finally:
            if left is not None:
                left.cancel()

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
        """The own pod and the policy that applies to it (read with the verbs the snapshot needs: ``get``).

        Requests that arrive while a read is under way share it (one pair of API calls for a burst of
        callers, not one per caller): what a flood of ``GET /v1/pod`` costs is bounded.
        """
        if self._pod_view is None or self._pod_view.done():
            self._pod_view = asyncio.ensure_future(self._read_pod_view())
        return await asyncio.shield(self._pod_view)

    async def _read_pod_view(self) -> proto.PodView:
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
        except Fault as fault:
            # The answer may be lost after the API server created the trigger (a connection cut mid-answer, a
            # 5xx from something in between): told "retryable", the caller would ask again and a second
            # snapshot be taken. The name is ours and unique: if the trigger exists, it was this request's.
            if not fault.retryable or not await self._created_anyway(name):
                raise
            log.info("the answer to creating PodSnapshotManualTrigger %s was lost (%s); it exists", name, fault.code)
        log.info("created PodSnapshotManualTrigger %s for pod %s (uid %s)", name, self.pod, uid)
        return {
            "trigger": name,
            "pod": self.pod,
            "namespace": self.namespace,
            "policy": policy,
            "policy_created": created,
        }

    async def _deleted_anyway(self, plural: str, name: str) -> bool:
        """Gone, or being deleted (a finalizer such as GKE's storage cleanup still holds it)."""
        try:
            obj = await self._get(plural, name)
        except NotFound:
            return True
        except Fault:
            return False
        return bool((obj.get("metadata") or {}).get("deletionTimestamp"))

    async def _created_anyway(self, name: str) -> bool:
        try:
            trigger = await self._get(TRIGGERS, name)
        except (NotFound, Fault):
            return False
        return (trigger.get("spec") or {}).get("targetPod") == self.pod

    def _not_ours(self, what: str, name: str, other: object = None) -> Fault:
        """ "Not found" and "not this pod's" get the same answer: nothing about other pods is revealed."""
        if other is not None:
            log.debug("%s %s belongs to pod %s, not to %s: answered as not found", what, name, other, self.pod)
        return Fault(
            404,
            proto.E_NOT_FOUND,
            f"pod {self.pod} has no {what} {name}",
            next_step="list this pod's snapshots with GET /v1/snapshots (jupyter suspend snapshots)",
        )

    async def _own_trigger(self, name: str) -> dict[str, Any]:
        try:
            trigger = await self._get(TRIGGERS, name)
        except NotFound:
            raise self._not_ours("snapshot request", name) from None
        target = (trigger.get("spec") or {}).get("targetPod")
        if target != self.pod:
            raise self._not_ours("snapshot request", name, target)
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

    async def follow(
        self, name: str, wait: float = 0.0, since: str | None = None, gone: asyncio.Event | None = None
    ) -> proto.SnapshotProgress:
        """The request's progress; with ``wait``, held until the phase is terminal or leaves ``since``.

        Bounded: ``gone`` (the caller hung up) ends the wait at once and frees its thread; each
        watch lasts at most :data:`WATCH_CHUNK_SECONDS`; at most :data:`WATCH_SLOTS` long-polls
        hold a watch, the others wait for a slot without a thread.
        """
        view, trigger_rv, snapshot_rv = await self._progress(name)
        if wait <= 0:
            return view
        if self._watch_slots is None:
            self._watch_slots = asyncio.Semaphore(WATCH_SLOTS)
        slots = self._watch_slots
        deadline = time.monotonic() + min(wait, proto.MAX_WAIT_SECONDS)
        baseline = since or view["phase"]
        while view["phase"] not in proto.TERMINAL_PHASES and view["phase"] == baseline:
            remaining = deadline - time.monotonic()
            if remaining < 0.5 or (gone is not None and gone.is_set()):
                break
            if not await _acquire(slots, remaining, gone):
                break  # no slot before the deadline (or the caller left): answer what is known
            try:
                seconds = max(1, min(WATCH_CHUNK_SECONDS, math.floor(deadline - time.monotonic())))
                if view["snapshot"] is None:
                    await self._watch(TRIGGERS, name, trigger_rv, seconds, gone)
                else:
                    await self._watch(SNAPSHOTS, view["snapshot"], snapshot_rv, seconds, gone)
            finally:
                slots.release()
            if gone is not None and gone.is_set():
                break
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
            raise self._not_ours("snapshot", name) from None
        meta = snapshot.get("metadata") or {}
        origin = (meta.get("annotations") or {}).get(ORIGIN_POD_ANNOTATION)
        if origin != self.pod:
            raise self._not_ours("snapshot", name, origin)
        with contextlib.suppress(NotFound):  # deleted meanwhile
            try:
                await self._delete(SNAPSHOTS, name)
            except Fault as fault:
                # An answer lost after the API server took the delete: a retry would find no snapshot (404).
                if not fault.retryable or not await self._deleted_anyway(SNAPSHOTS, name):
                    raise
                log.info("the answer to deleting PodSnapshot %s was lost (%s); it is deleted", name, fault.code)
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
            except Fault as fault:
                # The snapshot is deleted: that is the answer. A failure now must not turn it into a retryable
                # error -- the retry would find no snapshot and answer 404 (found against the real API server
                # with tests/cluster/faults.py). The trigger is left; the answer says so ("trigger": null).
                log.warning(
                    "PodSnapshot %s deleted; PodSnapshotManualTrigger %s was left (%s): delete it by hand "
                    "(kubectl delete podsnapshotmanualtrigger %s)",
                    name,
                    trigger_name_,
                    fault.code,
                    trigger_name_,
                )
        return {"deleted": name, "trigger": deleted_trigger}


class _Stream:
    """The open watch response of one long-poll, shared by its thread and the event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._resp: Any = None
        self.cancelled = False

    def hold(self, resp: Any) -> bool:
        with self._lock:
            if self.cancelled:
                resp.close()
                resp.release_conn()
                return False
            self._resp = resp
            return True

    def release(self) -> None:
        with self._lock:
            resp, self._resp = self._resp, None
        if resp is not None:  # a watch answered early still streams: close it, never pool it
            with contextlib.suppress(Exception):
                resp.close()
                resp.release_conn()

    def cancel(self) -> None:
        """Unblock the thread reading the watch (urllib3's ``shutdown`` interrupts a blocked read)."""
        with self._lock:
            self.cancelled = True
            resp = self._resp
        if resp is not None:
            with contextlib.suppress(Exception):
                resp.shutdown()


async def _acquire(slots: asyncio.Semaphore, timeout: float, gone: asyncio.Event | None) -> bool:
    """A watch slot within ``timeout`` unless the caller leaves first; True if acquired."""
    acquiring = asyncio.ensure_future(slots.acquire())
    waiters: set[asyncio.Future[Any]] = {acquiring}
    left = asyncio.ensure_future(gone.wait()) if gone is not None else None
    if left is not None:
        waiters.add(left)
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if left is not None:
            left.cancel()
    if acquiring.done() and not acquiring.cancelled():
        if gone is not None and gone.is_set():
            slots.release()
            return False
        return True
    acquiring.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await acquiring
    if acquiring.done() and not acquiring.cancelled():  # acquired while being cancelled
        slots.release()
    return False


def _labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Drop values Kubernetes would refuse as label values (e.g. a pod name over 63 characters)."""
    return {k: v for k, v in labels.items() if proto.is_label_value(v)}


def _read_body(call: Callable[[], Any]) -> Any:
    """Call, and read the raw answer's whole body (urllib3 keeps it: ``resp.data`` answers from memory after)."""
    resp = call()
    if hasattr(resp, "data"):
        resp.data  # noqa: B018 - the read is the point
    return resp


def _json(resp: Any) -> dict[str, Any]:
    data = resp.data if hasattr(resp, "data") else resp
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    obj = json.loads(data) if isinstance(data, str) and data else {}
    return obj if isinstance(obj, dict) else {}


def _reason(exc: ApiException) -> str:
    """The ``reason`` of a Kubernetes ``Status`` body (a CamelCase word), else the HTTP reason; nothing else."""
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        body = {}
    reason = body.get("reason") if isinstance(body, dict) else None
    if not isinstance(reason, str) or not re.fullmatch(r"[A-Za-z]{1,40}", reason):
        reason = str(exc.reason or "")
    return reason if re.fullmatch(r"[A-Za-z ]{1,40}", reason) else "error"


def _status_message(exc: ApiException) -> str:
    """The ``message`` of a Kubernetes ``Status`` body, else the HTTP reason."""
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        body = {}
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return str(exc.reason or exc.status)
