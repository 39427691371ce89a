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
    :class:`SnapshotDeleted`; 403 for another pod's snapshot, 404 if missing.

Every authenticated endpoint also accepts ``pod`` and ``namespace`` (body
fields for POST, query parameters otherwise); if given they must name the
sidecar's own pod, or the answer is 403 ``forbidden_target``.

Errors are ``{"error": <code>, "message": ..., "retryable": bool}`` plus
``next_step`` where there is one (:class:`ErrorBody`). Requests refused for
their form (401, 400, 403, 413) never reach the Kubernetes API.

Standard library only: imported by the server extension and the sidecar.
"""

from __future__ import annotations

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


def snapshot_request_path(trigger: str) -> str:
    return f"{PATH_SNAPSHOT_REQUESTS}/{trigger}"


def snapshot_path(name: str) -> str:
    return f"{PATH_SNAPSHOTS}/{name}"


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
    #: The trigger deleted with it (None if there was none left).
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
    #: from a snapshot it is the *old* pod's uid: environment variables come
    #: back from memory, so ``uid != started_uid`` means "restored".
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
E_KUBE_TIMEOUT = "kube_timeout"  # 504, retryable
E_INTERNAL = "internal"  # 500
