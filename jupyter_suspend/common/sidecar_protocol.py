"""The wire contract between the server extension and the sidecar container.

The sidecar is a second container of the notebook pod and the only holder of a
Kubernetes service-account token. It listens on a Unix socket in an ``emptyDir``
shared with the notebook container and serves a small HTTP/1.1 + JSON API about
*its own pod* only. Every request except :data:`PATH_HEALTH` carries
``Authorization: Bearer <secret>``, the secret being the content of the secret
file, which the sidecar writes afresh (mode 0600) each time it starts.

Endpoints (``{name}`` is a Kubernetes object name):

``GET  /v1/health``
    No authentication. Answers ``{"ok": true}`` and nothing else.
``GET  /v1/pod``
    :class:`PodView` of the sidecar's own pod, with the snapshot policy that
    applies to it (the sidecar's policy mode and name, and what the policy
    does after the checkpoint).
``POST /v1/snapshot-requests``
    Body :class:`SnapshotRequestBody` (may be ``{}``). Ensures the snapshot
    policy (per the sidecar's policy mode) and creates a
    ``PodSnapshotManualTrigger`` targeting the own pod. 201 + :class:`SnapshotRequested`.
``GET  /v1/snapshot-requests/{trigger}[?wait=S[&since=PHASE]]``
    :class:`SnapshotProgress`. With ``wait`` (0 < S <= :data:`MAX_WAIT_SECONDS`)
    the answer is held until the phase is terminal or differs from ``since``
    (default: the phase when the request arrived), at most S seconds.
``GET  /v1/snapshots``
    :class:`SnapshotList`: the PodSnapshots whose origin is the own pod.
``DELETE /v1/snapshots/{name}``
    Deletes one of the own pod's snapshots and the trigger that made it.
    :class:`SnapshotDeleted`; 404 if missing or another pod's (the same answer:
    nothing about other pods is revealed).
``GET  /v1/workload``
    :class:`WorkloadView`: the Kubeflow Notebook or Workspace that owns the
    own pod, named by the pod's own label (:data:`OWNER_LABELS`), never by the
    request. Only with ``--workload notebook|workspace``.
``POST /v1/workload/stop``
    Body :class:`WorkloadStopBody` (may be ``{}``). Notebook: sets the
    annotation ``kubeflow-resource-stopped`` (RFC 3339 now); Workspace: merge
    patch ``spec.paused: true``. The controller then scales the StatefulSet to
    0 and this pod goes away. 200 + :class:`WorkloadStopped`.

The snapshot endpoints answer 409 ``not_enabled`` on a sidecar started with
``--workload notebook|workspace`` (no snapshots there: its Role has none of
the podsnapshot verbs), the workload endpoints on one started without.

Every authenticated endpoint also accepts ``pod`` and ``namespace`` (body
fields for POST, query parameters otherwise); if given they must name the
sidecar's own pod, or the answer is 403 ``forbidden_target``.

Every name is checked with Kubernetes' own rules before any API call
(:func:`is_dns1123_subdomain` for object names, :func:`is_dns1123_label` for
namespaces, :func:`is_trigger_name` for snapshot requests): 400
``invalid_value`` otherwise.

Errors are ``{"error": <code>, "message": ..., "retryable": bool}`` plus
``next_step`` where there is one (:class:`ErrorBody`), in the sidecar's words
(what the API server said stays in the sidecar's log). Requests refused for
their form (401, 400, 403, 413) never reach the Kubernetes API. A connection
over the sidecar's cap is answered 503 ``too_busy``; a request's headers, and
then its body, must arrive within the sidecar's ``--request-timeout``; a
long-poll whose caller hangs up ends at once.

Standard library only: imported by the server extension and the sidecar.
"""

from __future__ import annotations

import re
from typing import Literal, TypedDict

# -- where ------------------------------------------------------------------

#: The directory is an ``emptyDir`` volume mounted in both containers.
DEFAULT_SOCKET_PATH = "/var/run/jupyter-suspend/sidecar.sock"
DEFAULT_SECRET_PATH = "/var/run/jupyter-suspend/sidecar.secret"

# -- how --------------------------------------------------------------------

AUTH_HEADER = "Authorization"
AUTH_SCHEME = "Bearer"
CONTENT_TYPE = "application/json"
#: Larger request bodies are refused with 413 ``body_too_large``.
MAX_BODY_BYTES = 16 * 1024
#: The longest long-poll a follow request may ask for.
MAX_WAIT_SECONDS = 30.0

API_VERSION_PREFIX = "/v1"
PATH_HEALTH = "/v1/health"
PATH_POD = "/v1/pod"
PATH_SNAPSHOT_REQUESTS = "/v1/snapshot-requests"
PATH_SNAPSHOTS = "/v1/snapshots"
PATH_WORKLOAD = "/v1/workload"
PATH_WORKLOAD_STOP = "/v1/workload/stop"


def snapshot_request_path(trigger: str) -> str:
    return f"{PATH_SNAPSHOT_REQUESTS}/{trigger}"


def snapshot_path(name: str) -> str:
    return f"{PATH_SNAPSHOTS}/{name}"


# -- Kubernetes names ---------------------------------------------------------
#
# Exactly Kubernetes' rules (k8s.io/apimachinery/pkg/util/validation/validation.go:
# IsDNS1123Label, IsDNS1123Subdomain, IsValidLabelValue). Go's regexp ``$`` is
# end of text; Python's ``$`` also matches before a final newline, hence
# ``fullmatch`` here and nowhere a ``match`` with ``$``.

_DNS1123_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL)
_DNS1123_SUBDOMAIN_RE = re.compile(rf"{_DNS1123_LABEL}(?:\.{_DNS1123_LABEL})*")
_LABEL_VALUE_RE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_QUALIFIED_NAME_RE = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
LABEL_VALUE_MAX = 63


def is_dns1123_label(value: object) -> bool:
    """A namespace name (and any name Kubernetes validates as a DNS-1123 label): ``a-b``, not ``a.b``."""
    return isinstance(value, str) and len(value) <= DNS1123_LABEL_MAX and bool(_DNS1123_LABEL_RE.fullmatch(value))


def is_dns1123_subdomain(value: object) -> bool:
    """An object name (pods, custom resources): dot-separated DNS-1123 labels, at most 253 characters
    (``a..b``, ``a.-b``, ``-a`` and ``a\n`` are refused)."""
    return (
        isinstance(value, str) and len(value) <= DNS1123_SUBDOMAIN_MAX and bool(_DNS1123_SUBDOMAIN_RE.fullmatch(value))
    )


def is_label_value(value: object) -> bool:
    """A label value: empty, or up to 63 of ``[-A-Za-z0-9_.]`` starting and ending alphanumeric."""
    return isinstance(value, str) and len(value) <= LABEL_VALUE_MAX and bool(_LABEL_VALUE_RE.fullmatch(value))


def is_label_key(value: object) -> bool:
    """A label key: ``[prefix/]name``, the prefix a DNS-1123 subdomain, the name a qualified name (<= 63)."""
    if not isinstance(value, str):
        return False
    prefix, slash, name = value.rpartition("/")
    if slash and not is_dns1123_subdomain(prefix):
        return False
    return len(name) <= 63 and bool(_QUALIFIED_NAME_RE.fullmatch(name))


#: A snapshot request's name becomes the PodSnapshot's label ``gke-pod-snapshot-triggered-by``
#: (platform-facts §1), so it must also be a label value: at most 63 characters.
def is_trigger_name(value: object) -> bool:
    return is_dns1123_subdomain(value) and is_label_value(value)


# -- request fields ---------------------------------------------------------

#: Optional identity check accepted by every authenticated endpoint.
FIELD_POD = "pod"
FIELD_NAMESPACE = "namespace"
#: Query parameters of the follow endpoint.
PARAM_WAIT = "wait"
PARAM_SINCE = "since"


class SnapshotRequestBody(TypedDict, total=False):
    pod: str
    namespace: str


#: Optional checks of ``POST /v1/workload/stop``: if given, the kind and name
#: must be those of the own pod's owner (403 ``forbidden_target`` otherwise).
FIELD_KIND = "kind"
FIELD_NAME = "name"


class WorkloadStopBody(TypedDict, total=False):
    pod: str
    namespace: str
    kind: str
    name: str


# -- Kubeflow workloads (``--workload``) ----------------------------------------

WORKLOAD_NOTEBOOK = "notebook"
WORKLOAD_WORKSPACE = "workspace"
#: The sidecar's ``--workload``: ``none`` serves GKE Pod Snapshots.
WORKLOAD_MODES = ("none", WORKLOAD_NOTEBOOK, WORKLOAD_WORKSPACE)
#: The label Kubeflow's controllers put on the pods of a Notebook / a Workspace.
WORKSPACE_NAME_LABEL = "notebooks.kubeflow.org/workspace-name"
OWNER_LABELS = {WORKLOAD_NOTEBOOK: "notebook-name", WORKLOAD_WORKSPACE: WORKSPACE_NAME_LABEL}


# -- answers ----------------------------------------------------------------

Phase = Literal["pending", "checkpointing", "uploading", "ready", "failed"]
PHASES: tuple[Phase, ...] = ("pending", "checkpointing", "uploading", "ready", "failed")
TERMINAL_PHASES: frozenset[str] = frozenset({"ready", "failed"})


class Health(TypedDict):
    ok: bool


class Condition(TypedDict):
    #: ``trigger`` (PodSnapshotManualTrigger) or ``snapshot`` (PodSnapshot).
    source: str
    type: str
    status: str
    reason: str | None
    message: str | None
    lastTransitionTime: str | None


class SnapshotRequested(TypedDict):
    trigger: str
    pod: str
    namespace: str
    #: The PodSnapshotPolicy that applies.
    policy: str
    #: True if the sidecar created the policy for this request.
    policy_created: bool


class SnapshotProgress(TypedDict):
    trigger: str
    phase: Phase
    #: Why the phase is what it is (the deciding condition's reason/message).
    reason: str | None
    message: str | None
    conditions: list[Condition]
    snapshot: str | None
    gcs_path: str | None
    size_bytes: int | None
    created: str | None


class SnapshotSummary(TypedDict):
    name: str
    created: str | None
    ready: bool
    ready_reason: str | None
    policy: str | None
    last_access: str | None
    gcs_path: str | None
    trigger: str | None
    size_bytes: int | None
    #: Deletion requested; GKE is removing the stored image (finalizer).
    deleting: bool


class SnapshotList(TypedDict):
    pod: str
    namespace: str
    snapshots: list[SnapshotSummary]


class SnapshotDeleted(TypedDict):
    deleted: str
    #: The trigger deleted with it (None if there was none left, or it could not be deleted: the sidecar logs so).
    trigger: str | None


class PodCondition(TypedDict):
    type: str
    status: str
    reason: str | None
    message: str | None
    lastTransitionTime: str | None


class PodView(TypedDict):
    name: str
    namespace: str
    #: The uid the API reports now.
    uid: str | None
    #: The uid the sidecar was started with (downward API). After a restore
    #: from a snapshot it may be the *old* pod's uid (environment variables
    #: come back from memory) or not: informational only, never taken alone
    #: as a sign of a restore -- ``restored`` (the API's PodRestored) is.
    started_uid: str | None
    phase: str | None
    node_name: str | None
    conditions: list[PodCondition]
    #: ``podsnapshot.gke.io/ps-name`` if the pod was pinned to a snapshot.
    pinned_snapshot: str | None
    #: The ``PodRestored`` condition's message if it is True.
    restored: bool
    restored_message: str | None
    #: The pod's ``podsnapshot.gke.io/*`` annotations.
    annotations: dict[str, str]
    #: The sidecar's ``--policy-mode``: ``create`` (it makes the policy for
    #: this pod) or ``require`` (the platform team installed it).
    policy_mode: str
    #: The PodSnapshotPolicy the snapshots of this pod use.
    policy_name: str
    #: The policy exists now (None: it could not be read, see ``policy_problem``).
    policy_exists: bool | None
    #: What the pod does after the checkpoint: ``stop`` (the node can be
    #: released) or ``resume`` (it keeps running: GKE's default when the policy
    #: does not say). In create mode before the policy exists: what the sidecar
    #: will create. None: not known (no policy to read, or it could not be read).
    post_checkpoint: str | None
    #: Why the policy could not be read (None: it was, or it does not exist).
    policy_problem: str | None


class WorkloadView(TypedDict):
    #: ``notebook`` (kubeflow.org/v1 Notebook) or ``workspace`` (kubeflow.org/v1beta1 Workspace).
    kind: str
    name: str
    namespace: str
    #: The own pod, whose label named the workload.
    pod: str
    #: Asked to stop: the notebook's ``kubeflow-resource-stopped`` annotation is
    #: set, or the workspace's ``spec.paused`` is true.
    stopped: bool
    #: The annotation's value (notebook) or ``status.pauseTime`` as RFC 3339 (workspace).
    stopped_at: str | None
    #: Workspace ``status.state`` (Running, Pending, Paused, Terminating, Error, Unknown); None for a notebook.
    state: str | None
    state_message: str | None
    #: Workspace ``status.pauseTime`` in epoch seconds (written in ms or s, read by magnitude; None when unset or odd).
    pause_time: int | None
    #: Notebook ``status.readyReplicas``; None for a workspace.
    ready_replicas: int | None
    #: Workspace: the signs of GKE Workspaces' snapshot add-on; None for a notebook.
    snapshot_addon: SnapshotAddonView | None


class SnapshotAddonView(TypedDict):
    """What GKE Workspaces' snapshot add-on leaves on the Workspace and on the pod it configured (gke-labs/workspaces
    providers/gke/internal/snapshot/snapshot.go, webhook.go)."""

    #: Workspace annotation ``podsnapshot.gke.kubeflow.org/checkpoint-state``: Checkpointing, Ready, Restoring.
    checkpoint_state: str | None
    #: Workspace annotation ``podsnapshot.gke.kubeflow.org/last-checkpoint-name``.
    last_checkpoint: str | None
    #: The own pod has the add-on's readiness gate ``podsnapshot.gke.kubeflow.org/active``.
    pod_readiness_gate: bool
    #: The own pod's ``runtimeClassName`` (the add-on sets ``gvisor``).
    pod_runtime_class: str | None


class WorkloadStopped(TypedDict):
    workload: WorkloadView
    #: When the sidecar made the request (RFC 3339), or None if it was stopped already.
    requested_at: str | None
    #: It was stopped before this request: nothing was changed.
    already_stopped: bool


POST_CHECKPOINT_STOP = "stop"
POST_CHECKPOINT_RESUME = "resume"
#: What GKE does when a policy does not set ``triggerConfig.postCheckpoint``.
POST_CHECKPOINT_DEFAULT = POST_CHECKPOINT_RESUME


class ErrorBody(TypedDict, total=False):
    error: str
    message: str
    retryable: bool
    next_step: str


# -- error codes --------------------------------------------------------------

E_UNAUTHORIZED = "unauthorized"  # 401
E_BODY_TOO_LARGE = "body_too_large"  # 413
E_MALFORMED = "malformed_json"  # 400
E_NOT_AN_OBJECT = "not_an_object"  # 400
E_UNKNOWN_FIELD = "unknown_field"  # 400 (a body field or a query parameter)
E_UNEXPECTED_BODY = "unexpected_body"  # 400 (GET and DELETE take no body)
E_WRONG_TYPE = "wrong_type"  # 400
E_INVALID_VALUE = "invalid_value"  # 400 (a bad name, a wait out of range)
E_FORBIDDEN_TARGET = "forbidden_target"  # 403: another pod or namespace
E_NOT_FOUND = "not_found"  # 404
E_METHOD = "method_not_allowed"  # 405
E_POLICY_MISSING = "policy_missing"  # 409 (require mode)
E_POLICY_CONFLICT = "policy_conflict"  # 409 (policy not usable with a manual trigger)
E_KUBE_FORBIDDEN = "kube_forbidden"  # 502: the Role does not allow a call
E_KUBE_UNAUTHORIZED = "kube_unauthorized"  # 502: the token was refused
E_KUBE_ERROR = "kube_error"  # 502: any other API answer
E_KUBE_UNAVAILABLE = "kube_unavailable"  # 502, retryable: 5xx / 429 / connection
E_KUBE_TIMEOUT = "kube_timeout"  # 504, retryable: no connection, or no answer, in time
E_KUBE_REFUSED = "kube_refused"  # 502, retryable: the API server's address refused the connection
E_KUBE_DNS = "kube_dns"  # 502, retryable: the API server's host name does not resolve
E_KUBE_TLS = "kube_tls"  # 502: the API server's certificate is not trusted (CA file, host name)
E_TOO_BUSY = "too_busy"  # 503, retryable: the sidecar holds its maximum of connections
E_INTERNAL = "internal"  # 500
E_NOT_ENABLED = "not_enabled"  # 409: snapshot endpoint with --workload, or workload endpoint without
E_OWNER_UNKNOWN = "owner_unknown"  # 409: the own pod has no owner label of the configured kind
