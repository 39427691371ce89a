"""A Kubernetes API server of our own, on loopback, for tests driven by the real `kubernetes` client.

Tornado over HTTPS (a `trustme` CA), one bearer token, in a background thread with its own event loop. It keeps
objects in memory and speaks the REST protocol the client expects: create (201), get, list, watch (chunked JSON lines
from a resourceVersion, `timeoutSeconds`), update with optimistic concurrency (409 Conflict), merge / JSON / strategic
merge patch, delete honouring finalizers, the `status` subresource isolated from the main object, label and field
selectors, errors as `Status` objects. Every request is recorded as an RBAC-style `Call`; faults and delays can be
injected; controllers (simulated GKE, StatefulSet) react to every change on the server loop and write through direct
helpers that bypass authentication, admission and call recording.

Deliberate simplifications (a real server differs): no namespace existence check, no owner-reference garbage
collection, pods are deleted at once (no graceful termination) unless they carry finalizers, no dryRun, no server-side
apply (415), no deletecollection (405), no pod-spec immutability check, list `resourceVersion` is ignored (lists are
always current), discovery is minimal.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses
import hmac
import json
import logging
import random
import re
import secrets
import shutil
import ssl
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import tornado.httpserver
import tornado.iostream
import tornado.netutil
import tornado.web

log = logging.getLogger(__name__)

JSON = dict[str, Any]
JSONList = list[JSON]


# ==================================================================================================================
# Patch and selector semantics
# ==================================================================================================================


class PatchError(ValueError):
    """A patch that cannot be applied (the server answers 422 Invalid)."""


# --- RFC 7386 merge patch -------------------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` deletes, anything else (lists included) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- strategic merge patch (built-in kinds only) --------------------------------------------------------------------

# patchMergeKey of the list fields a pod, a StatefulSet or an object's metadata carry (k8s.io/api types.go).
MERGE_KEYS: dict[str, str] = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "readinessGates": "conditionType",
}
# primitive lists with patchStrategy "merge": the patch's items are added (set union)
MERGED_PRIMITIVE_LISTS = {"finalizers"}


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A strategic merge patch as the API server applies it to built-in kinds, for the fields in MERGE_KEYS:
    keyed lists merge item by item (`$patch: delete` removes an item), `finalizers` is a set union with
    `$deleteFromPrimitiveList/finalizers`; every other list is replaced, like a merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [item for item in result[field] if item not in value]
            continue
        if key.startswith("$"):
            continue  # $retainKeys, $setElementOrder: ordering directives, ignored
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in MERGE_KEYS and isinstance(result.get(key), list):
            result[key] = _merge_keyed_list(result[key], value, MERGE_KEYS[key])
        elif isinstance(value, list) and key in MERGED_PRIMITIVE_LISTS and isinstance(result.get(key), list):
            result[key] = list(result[key]) + [item for item in value if item not in result[key]]
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def _merge_keyed_list(current: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    merged = list(current)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise PatchError(f"map in list must have the merge key {merge_key!r}")
        index = next(
            (i for i, old in enumerate(merged) if isinstance(old, dict) and old.get(merge_key) == item[merge_key]),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del merged[index]
        elif index is None:
            merged.append(copy.deepcopy(item))
        else:
            merged[index] = strategic_merge_patch(merged[index], item)
    return merged


# --- RFC 6902 JSON patch --------------------------------------------------------------------------------------------


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise PatchError(f"invalid JSON pointer {path!r}")
    if path == "":
        return []
    return [token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if allow_end and token == "-":
        return len(container)
    if not re.fullmatch(r"0|[1-9][0-9]*", token):
        raise PatchError(f"invalid array index {token!r}")
    index = int(token)
    if index > len(container) or (index == len(container) and not allow_end):
        raise PatchError(f"array index {index} out of range")
    return index


def _resolve(doc: Any, tokens: list[str]) -> Any:
    for token in tokens:
        if isinstance(doc, dict):
            if token not in doc:
                raise PatchError(f"path member {token!r} not found")
            doc = doc[token]
        elif isinstance(doc, list):
            doc = doc[_index(doc, token, allow_end=False)]
        else:
            raise PatchError(f"cannot descend into a scalar at {token!r}")
    return doc


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _resolve(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise PatchError("cannot add to a scalar")
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _resolve(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path member {last!r} not found")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, allow_end=False))
    raise PatchError("cannot remove from a scalar")


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902; `test` failing, a missing path or a malformed operation raises PatchError."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"malformed JSON patch operation {op!r}")
        kind, tokens = op["op"], _pointer(op["path"])
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {kind!r} needs a value")
        if kind == "add":
            doc = _add(doc, tokens, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(doc, tokens)
        elif kind == "replace":
            _resolve(doc, tokens)  # must exist
            if tokens:
                _remove(doc, tokens)
            doc = _add(doc, tokens, copy.deepcopy(op["value"]))
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from"))
            value = _remove(doc, source) if kind == "move" else copy.deepcopy(_resolve(doc, source))
            doc = _add(doc, tokens, value)
        elif kind == "test":
            if _resolve(doc, tokens) != op["value"]:
                raise PatchError(f"test operation failed at {op['path']!r}")
        else:
            raise PatchError(f"unknown JSON patch operation {kind!r}")
    return doc


# --- selectors ------------------------------------------------------------------------------------------------------


class SelectorError(ValueError):
    """An unparsable or unsupported selector (the server answers 400 BadRequest)."""


_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
_SET_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*$")
_EQ_RE = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")

LabelPredicate = Callable[[dict[str, str]], bool]


def _split_requirements(selector: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part for part in parts if part.strip()]


def _label_requirement(requirement: tuple[str, str, frozenset[str]], labels: dict[str, str]) -> bool:
    op, key, values = requirement
    if op == "exists":
        return key in labels
    if op == "!exists":
        return key not in labels
    if op == "in":
        return labels.get(key) in values
    return labels.get(key) not in values  # notin, !=


def parse_label_selector(selector: str) -> LabelPredicate:
    """`a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x,y)`; commas are AND."""
    requirements: list[tuple[str, str, frozenset[str]]] = []
    for text in _split_requirements(selector):
        if match := _SET_RE.match(text):
            key, op, values_text = match.groups()
            values = frozenset(value.strip() for value in values_text.split(",") if value.strip())
            requirements.append((op, key, values))
        elif match := _EQ_RE.match(text):
            key, op, value = match.groups()
            requirements.append(("notin" if op == "!=" else "in", key, frozenset([value])))
        elif match := _EXISTS_RE.match(text):
            negate, key = match.groups()
            requirements.append(("!exists" if negate else "exists", key, frozenset()))
        else:
            raise SelectorError(f"unable to parse requirement: {text.strip()!r}")
    return lambda labels: all(_label_requirement(requirement, labels) for requirement in requirements)


def match_label_selector_object(selector: JSON | None, labels: dict[str, str]) -> bool:
    """A `metav1.LabelSelector` object (matchLabels, matchExpressions); an empty selector matches everything."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


_FIELD_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9.]*)\s*(==|=|!=)\s*([^,]*?)\s*$")
COMMON_FIELDS = {"metadata.name", "metadata.namespace"}
FIELDS_BY_KIND: dict[str, set[str]] = {
    "Pod": {"status.phase", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "status.podIP"},
    "Event": {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    },
}

ObjectPredicate = Callable[[JSON], bool]


def _field_value(obj: JSON, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if path == "source" and isinstance(value, dict):
        value = value.get("component")
    return "" if value is None else str(value)


def parse_field_selector(selector: str, kind: str) -> ObjectPredicate:
    """Field selectors the real server supports for `kind`; any other field is an error, as on a real server."""
    requirements: list[tuple[str, bool, str]] = []  # field, equal, value
    allowed = COMMON_FIELDS | FIELDS_BY_KIND.get(kind, set())
    for text in (part for part in selector.split(",") if part.strip()):
        match = _FIELD_RE.match(text)
        if not match:
            raise SelectorError(f"invalid field selector: {text.strip()!r}")
        field, op, value = match.groups()
        if field not in allowed:
            raise SelectorError(f'field label not supported: "{field}"')
        requirements.append((field, op != "!=", value))
    return lambda obj: all((_field_value(obj, f) == v) == equal for f, equal, v in requirements)


# ==================================================================================================================
# Resource types, calls, errors
# ==================================================================================================================


@dataclasses.dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status: bool = True  # has the status subresource
    custom: bool = False  # a custom resource: rejects strategic merge patch, update needs a resourceVersion
    scale: bool = False  # has the scale subresource

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How a real server names the resource in messages: `pods`, `podsnapshots.podsnapshot.gke.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _builtin_types() -> list[ResourceType]:
    types = [
        ResourceType("", "v1", "pods", "Pod"),
        ResourceType("", "v1", "events", "Event", status=False),
        ResourceType("", "v1", "services", "Service"),
        ResourceType("", "v1", "configmaps", "ConfigMap", status=False),
        ResourceType("", "v1", "secrets", "Secret", status=False),
        ResourceType("", "v1", "serviceaccounts", "ServiceAccount", status=False),
        ResourceType("", "v1", "namespaces", "Namespace", namespaced=False),
        ResourceType("", "v1", "nodes", "Node", namespaced=False),
        ResourceType("apps", "v1", "statefulsets", "StatefulSet", scale=True),
        ResourceType("apps", "v1", "deployments", "Deployment", scale=True),
        ResourceType("coordination.k8s.io", "v1", "leases", "Lease", status=False),
        ResourceType("kubeflow.org", "v1", "notebooks", "Notebook", custom=True),
        ResourceType("kubeflow.org", "v1beta1", "workspaces", "Workspace", custom=True),
        ResourceType("kubeflow.org", "v1beta1", "workspacekinds", "WorkspaceKind", namespaced=False, custom=True),
    ]
    for version in ("v1", "v1alpha1"):
        types += [
            ResourceType(
                "podsnapshot.gke.io",
                version,
                "podsnapshotstorageconfigs",
                "PodSnapshotStorageConfig",
                False,
                True,
                True,
            ),
            ResourceType("podsnapshot.gke.io", version, "podsnapshotpolicies", "PodSnapshotPolicy", custom=True),
            ResourceType(
                "podsnapshot.gke.io", version, "podsnapshotmanualtriggers", "PodSnapshotManualTrigger", custom=True
            ),
            ResourceType("podsnapshot.gke.io", version, "podsnapshots", "PodSnapshot", custom=True),
            ResourceType(
                "podsnapshot.gke.io", version, "podsnapshottokenrequests", "PodSnapshotTokenRequest", custom=True
            ),
        ]
    return types


@dataclasses.dataclass(frozen=True)
class Call:
    """One request, in RBAC terms: verb get/list/watch/create/update/patch/delete; group "" is the core group;
    subresource, namespace and name are None when absent. `allowed` is False for requests refused at authentication
    (those land in `KubeAPI.rejected`). `user` is not part of equality."""

    verb: str
    group: str
    version: str
    resource: str
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None
    allowed: bool = True
    user: str = dataclasses.field(default="", compare=False)


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Gone",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class KubeError(Exception):
    """An error answer; `status()` is the Kubernetes `Status` object. Direct helpers raise it too."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        rtype: ResourceType | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASONS.get(code, "Unknown")
        self.rtype = rtype
        self.name = name

    def status(self) -> JSON:
        details: JSON = {}
        if self.rtype is not None or self.name is not None:
            details = {
                "name": self.name or "",
                "group": self.rtype.group if self.rtype else "",
                "kind": self.rtype.plural if self.rtype else "",
            }
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": details,
            "code": self.code,
        }


def not_found(rtype: ResourceType, name: str) -> KubeError:
    return KubeError(404, f'{rtype.qualified} "{name}" not found', "NotFound", rtype, name)


def conflict(rtype: ResourceType, name: str) -> KubeError:
    message = (
        f'Operation cannot be fulfilled on {rtype.qualified} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    return KubeError(409, message, "Conflict", rtype, name)


def invalid(rtype: ResourceType, name: str, detail: str) -> KubeError:
    return KubeError(422, f'{rtype.kind} "{name}" is invalid: {detail}', "Invalid", rtype, name)


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_PROTECTED_METADATA = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")

Controller = Callable[[str, JSON, "KubeAPI"], None]
Admission = Callable[[str, JSON, str], "str | None"]


@dataclasses.dataclass
class _Fault:
    verb: str
    resource: str
    times: int
    code: int = 0
    reason: str | None = None
    message: str | None = None
    delay: float = 0.0

    def matches(self, verb: str, resource: str, subresource: str | None) -> bool:
        full = f"{resource}/{subresource}" if subresource else resource
        return self.verb in ("*", verb) and self.resource in ("*", resource, full)


@dataclasses.dataclass
class _Event:
    rv: int
    rtype_key: tuple[str, str]
    namespace: str | None
    type: str
    obj: JSON
    old: JSON | None  # the object before a MODIFIED change (to move objects in and out of a selector)


class _Watcher:
    def __init__(
        self,
        key: tuple[str, str],
        namespace: str | None,
        predicate: Callable[[JSON], bool],
        after_rv: int,
    ) -> None:
        self.key = key
        self.namespace = namespace
        self.predicate = predicate
        self.last_rv = after_rv
        self.queue: asyncio.Queue[tuple[str, JSON] | None] = asyncio.Queue()

    def translate(self, event: _Event) -> tuple[str, JSON] | None:
        """The event as this watcher sees it (selectors move objects in and out), or None."""
        if event.rv <= self.last_rv or event.rtype_key != self.key:
            return None
        if self.namespace is not None and event.namespace != self.namespace:
            return None
        now_matches = self.predicate(event.obj)
        if event.type == "MODIFIED" and event.old is not None:
            was_matching = self.predicate(event.old)
            if was_matching and not now_matches:
                return "DELETED", event.obj
            if now_matches and not was_matching:
                return "ADDED", event.obj
        return (event.type, event.obj) if now_matches else None

    def offer(self, event: _Event) -> None:
        translated = self.translate(event)
        self.last_rv = max(self.last_rv, event.rv)
        if translated is not None:
            self.queue.put_nowait(translated)

    def close(self) -> None:
        self.queue.put_nowait(None)


class Timer:
    """A callback scheduled with `KubeAPI.call_soon`; `cancel()` before it runs to drop it."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


# ==================================================================================================================
# TLS
# ==================================================================================================================

_TLS_LOCK = threading.Lock()
_TLS: tuple[bytes, bytes, bytes] | None = None  # CA PEM, server cert chain PEM, server key PEM (one per process)


def _tls_material() -> tuple[bytes, bytes, bytes]:
    global _TLS
    with _TLS_LOCK:
        if _TLS is None:
            import trustme

            ca = trustme.CA()
            cert = ca.issue_cert("127.0.0.1", "localhost")
            chain = b"".join(blob.bytes() for blob in cert.cert_chain_pems)
            _TLS = (ca.cert_pem.bytes(), chain, cert.private_key_pem.bytes())
        return _TLS


# ==================================================================================================================
# The server
# ==================================================================================================================


class _Handler(tornado.web.RequestHandler):
    def initialize(self, kube: KubeAPI) -> None:
        self.kube = kube
        self.watcher: _Watcher | None = None

    async def get(self, path: str) -> None:
        await self.kube._handle(self, "GET", path)

    async def post(self, path: str) -> None:
        await self.kube._handle(self, "POST", path)

    async def put(self, path: str) -> None:
        await self.kube._handle(self, "PUT", path)

    async def patch(self, path: str) -> None:
        await self.kube._handle(self, "PATCH", path)

    async def delete(self, path: str) -> None:
        await self.kube._handle(self, "DELETE", path)

    def on_connection_close(self) -> None:
        if self.watcher is not None:
            self.watcher.close()

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        log.error("kubeapi handler error", exc_info=(typ, value, tb))


@dataclasses.dataclass
class _Route:
    group: str
    version: str
    plural: str
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    rtype: ResourceType | None = None


def _at(parts: list[str], index: int) -> str | None:
    return parts[index] if index < len(parts) else None


class KubeAPI:
    """The server. `start()` / `stop()` or use as a context manager; see the module docstring."""

    def __init__(self, *, history: int = 10000, user: str = "system:serviceaccount:default:test-client") -> None:
        self.host = "127.0.0.1"
        self.port = 0
        self.token = secrets.token_urlsafe(24)
        self.user = user
        self._tokens: dict[str, str] = {self.token: user}
        self._dir = Path(tempfile.mkdtemp(prefix="kubeapi-"))
        self.ca_path = str(self._dir / "ca.crt")
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        for rtype in _builtin_types():
            self.register(rtype)
        self._lock = threading.RLock()
        self._store: dict[tuple[str, str], dict[tuple[str | None, str], JSON]] = {}
        self._rv = 0
        self._history: deque[_Event] = deque(maxlen=history)
        self._dropped_upto = 0  # events with rv <= this one may have left the history
        self._watchers: set[_Watcher] = set()
        self._calls: list[Call] = []
        self._rejected: list[Call] = []
        self._faults: list[_Fault] = []
        self._controllers: list[Controller] = []
        self._admissions: list[Admission] = []
        self.controller_errors: list[BaseException] = []
        self.max_watch_seconds = 1800.0
        self.gke: Any = None  # the GKE snapshot controller, once attached
        self.workloads: Any = None  # the StatefulSet controller, once attached
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._loop_thread_id: int | None = None
        self._stopping: asyncio.Event | None = None
        self._server: tornado.httpserver.HTTPServer | None = None

    # --- lifecycle ----------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def start(self) -> KubeAPI:
        ca_pem, chain_pem, key_pem = _tls_material()
        Path(self.ca_path).write_bytes(ca_pem)
        (self._dir / "server.crt").write_bytes(chain_pem)
        (self._dir / "server.key").write_bytes(key_pem)
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="kubeapi", daemon=True)
        self._thread.start()
        if not ready.wait(10) or self._loop is None:
            raise RuntimeError("the Kubernetes test API server did not start")
        return self

    def _run(self, ready: threading.Event) -> None:
        asyncio.run(self._main(ready))

    async def _main(self, ready: threading.Event) -> None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self._dir / "server.crt"), str(self._dir / "server.key"))
        app = tornado.web.Application([(r"(/.*)", _Handler, {"kube": self})], log_function=lambda handler: None)
        sockets = tornado.netutil.bind_sockets(0, self.host)
        self.port = sockets[0].getsockname()[1]
        self._server = tornado.httpserver.HTTPServer(app, ssl_options=context, decompress_request=True)
        self._server.add_sockets(sockets)
        self._loop = asyncio.get_running_loop()
        self._loop_thread_id = threading.get_ident()
        self._stopping = asyncio.Event()
        ready.set()
        await self._stopping.wait()
        self._server.stop()
        for watcher in list(self._watchers):
            watcher.close()
        await asyncio.sleep(0)
        try:
            await asyncio.wait_for(self._server.close_all_connections(), 5)
        except asyncio.TimeoutError:
            log.warning("kubeapi: connections still open at stop")

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            stopping = self._stopping
            assert stopping is not None
            loop.call_soon_threadsafe(stopping.set)
            thread.join(10)
        self._loop = None
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> KubeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- configuration for clients ------------------------------------------------------------------------------

    def add_token(self, user: str) -> str:
        """A further bearer token for another identity (the admission hooks see `user`)."""
        token = secrets.token_urlsafe(24)
        self._tokens[token] = user
        return token

    def incluster_files(self, directory: str | Path, namespace: str = "default") -> dict[str, str]:
        """Writes `token`, `ca.crt`, `namespace` into `directory` (a service account's files) and returns the
        environment `load_incluster_config` reads (`InClusterConfigLoader(token_filename=..., cert_filename=...,
        environ=...)`)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "token").write_text(self.token)
        (directory / "ca.crt").write_bytes(Path(self.ca_path).read_bytes())
        (directory / "namespace").write_text(namespace)
        return {"KUBERNETES_SERVICE_HOST": self.host, "KUBERNETES_SERVICE_PORT": str(self.port)}

    def kubeconfig(self, path: str | Path, namespace: str = "default", token: str | None = None) -> str:
        """Writes a kubeconfig (server, CA, token, namespace) for `load_kube_config(config_file=...)`."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kubeapi", "cluster": {"server": self.url, "certificate-authority": self.ca_path}}],
            "users": [{"name": "kubeapi", "user": {"token": token or self.token}}],
            "contexts": [
                {"name": "kubeapi", "context": {"cluster": "kubeapi", "user": "kubeapi", "namespace": namespace}}
            ],
            "current-context": "kubeapi",
        }
        Path(path).write_text(json.dumps(config, indent=2))  # JSON is YAML
        return str(path)

    # --- types --------------------------------------------------------------------------------------------------

    def register(self, rtype: ResourceType) -> None:
        """Serve a further kind (e.g. another custom resource)."""
        self._types[(rtype.group, rtype.version, rtype.plural)] = rtype

    def resource_type(self, api_version: str, kind_or_plural: str) -> ResourceType:
        group, _, version = api_version.rpartition("/")
        for rtype in self._types.values():
            if (rtype.group, rtype.version) == (group, version) and kind_or_plural.lower() in (
                rtype.plural,
                rtype.kind.lower(),
            ):
                return rtype
        raise KeyError(f"no resource {kind_or_plural!r} in {api_version!r}")

    # --- recording, faults, hooks -------------------------------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._calls)

    @property
    def rejected(self) -> list[Call]:
        with self._lock:
            return list(self._rejected)

    def reset_calls(self) -> None:
        with self._lock:
            self._calls.clear()
            self._rejected.clear()

    def calls_matching(self, verb: str | None = None, resource: str | None = None) -> list[Call]:
        return [c for c in self.calls if verb in (None, c.verb) and resource in (None, c.resource)]

    def fail_next(
        self,
        verb: str,
        resource: str,
        code: int = 500,
        times: int = 1,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        """The next `times` requests with this RBAC verb on this resource (`pods`, `pods/status`, `*`) fail with
        `code`; they are still recorded."""
        with self._lock:
            self._faults.append(_Fault(verb, resource, times, code, reason, message))

    def delay_next(self, verb: str, resource: str, seconds: float, times: int = 1) -> None:
        with self._lock:
            self._faults.append(_Fault(verb, resource, times, delay=seconds))

    def add_controller(self, fn: Controller) -> None:
        """`fn(event_type, obj, kube)` runs on the server loop after every committed change."""
        self._controllers.append(fn)

    def add_admission(self, fn: Admission) -> None:
        """`fn(verb, obj, user)` for API requests that write (create/update/patch/delete); a returned message is a
        403 Forbidden and nothing is stored. Raise KubeError(422, ...) for an Invalid answer instead."""
        self._admissions.append(fn)

    def call_soon(self, fn: Callable[[], object], delay: float = 0.0) -> Timer:
        """Run `fn()` on the server loop after `delay` seconds (thread-safe); errors go to `controller_errors`."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("the server is not running")
        timer = Timer()

        def run() -> None:
            if not timer.cancelled:
                self._guarded(fn)

        def schedule() -> None:
            if delay > 0:
                loop.call_later(delay, run)
            else:
                run()

        if threading.get_ident() == self._loop_thread_id:
            loop.call_soon(schedule)
        else:
            loop.call_soon_threadsafe(schedule)
        return timer

    def _guarded(self, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception as error:  # reported through controller_errors
            log.exception("kubeapi controller error")
            self.controller_errors.append(error)

    # --- the store (all under self._lock) -----------------------------------------------------------------------

    def _bucket(self, rtype: ResourceType) -> dict[tuple[str | None, str], JSON]:
        return self._store.setdefault((rtype.group, rtype.plural), {})

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _emit(self, rtype: ResourceType, event_type: str, obj: JSON, old: JSON | None = None) -> None:
        event = _Event(self._rv, (rtype.group, rtype.plural), obj["metadata"].get("namespace"), event_type, obj, old)
        if len(self._history) == self._history.maxlen:
            self._dropped_upto = self._history[0].rv
        self._history.append(event)
        loop = self._loop
        if loop is None:
            return
        if threading.get_ident() == self._loop_thread_id:
            loop.call_soon(self._dispatch, event)
        else:
            loop.call_soon_threadsafe(self._dispatch, event)

    def _dispatch(self, event: _Event) -> None:
        for watcher in list(self._watchers):
            watcher.offer(event)
        for controller in list(self._controllers):
            self._guarded(lambda c=controller: c(event.type, copy.deepcopy(event.obj), self))  # type: ignore[misc]

    def _create(
        self,
        rtype: ResourceType,
        namespace: str | None,
        body: Any,
        *,
        keep_status: bool,
        admit: Callable[[JSON], None] | None = None,
    ) -> JSON:
        """Default and store a new object; `admit(obj)` sees the defaulted object before it is stored."""
        if not isinstance(body, dict):
            raise KubeError(400, "the request body must be a JSON object", "BadRequest")
        obj = copy.deepcopy(body)
        if obj.get("kind") not in (None, rtype.kind):
            raise KubeError(400, f"the kind in the data ({obj.get('kind')}) does not match {rtype.kind}", "BadRequest")
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise KubeError(400, "metadata must be an object", "BadRequest")
        if rtype.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise KubeError(
                    400,
                    "the namespace of the provided object does not match the namespace sent on the request",
                    "BadRequest",
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise invalid(rtype, "", "metadata.name: Required value: name or generateName is required")
            meta["name"] = prefix + "".join(random.choices(_GENERATE_ALPHABET, k=5))
        name = meta["name"]
        if not isinstance(name, str) or len(name) > 253 or not _NAME_RE.match(name):
            raise invalid(rtype, str(name), "metadata.name: Invalid value: a lowercase RFC 1123 subdomain must be used")
        obj["apiVersion"] = rtype.api_version
        obj["kind"] = rtype.kind
        for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        meta["generation"] = 1
        if not keep_status and rtype.status:
            obj.pop("status", None)
            if rtype.kind == "Pod":
                obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        if admit is not None:
            admit(obj)
        with self._lock:
            bucket = self._bucket(rtype)
            key = (meta.get("namespace"), name)
            if key in bucket:
                raise KubeError(409, f'{rtype.qualified} "{name}" already exists', "AlreadyExists", rtype, name)
            meta["resourceVersion"] = self._next_rv()
            bucket[key] = obj
            self._emit(rtype, "ADDED", obj)
        return obj

    def _current(self, rtype: ResourceType, namespace: str | None, name: str) -> JSON:
        obj = self._bucket(rtype).get((namespace if rtype.namespaced else None, name))
        if obj is None:
            raise not_found(rtype, name)
        return obj

    def _commit(self, rtype: ResourceType, old: JSON, new: JSON) -> JSON:
        """Store `new` in place of `old` (under the lock): protected metadata kept, a no-op changes nothing,
        generation follows the spec, the last finalizer gone from a deleting object removes it."""
        meta = new.setdefault("metadata", {})
        old_meta = old["metadata"]
        for field in ("name", "namespace", *_PROTECTED_METADATA):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
        name = old_meta["name"]
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise invalid(
                    rtype,
                    name,
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted",
                )
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if new == old:
            return old
        spec_old = {k: v for k, v in old.items() if k not in ("metadata", "status")}
        spec_new = {k: v for k, v in new.items() if k not in ("metadata", "status")}
        if spec_old != spec_new:
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        meta["resourceVersion"] = self._next_rv()
        bucket = self._bucket(rtype)
        key = (old_meta.get("namespace"), name)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del bucket[key]
            self._emit(rtype, "DELETED", new)
        else:
            bucket[key] = new
            self._emit(rtype, "MODIFIED", new, old)
        return new

    def _delete(self, rtype: ResourceType, namespace: str | None, name: str, *, force: bool = False) -> JSON:
        with self._lock:
            old = self._current(rtype, namespace, name)
            if old["metadata"].get("finalizers") and not force:
                if old["metadata"].get("deletionTimestamp"):
                    return old
                new = copy.deepcopy(old)
                new["metadata"]["deletionTimestamp"] = now_rfc3339()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                new["metadata"]["resourceVersion"] = self._next_rv()
                self._bucket(rtype)[(old["metadata"].get("namespace"), name)] = new
                self._emit(rtype, "MODIFIED", new, old)
                return new
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = self._next_rv()
            del self._bucket(rtype)[(old["metadata"].get("namespace"), name)]
            self._emit(rtype, "DELETED", gone)
            return gone

    def _select(
        self,
        rtype: ResourceType,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
    ) -> Callable[[JSON], bool]:
        try:
            labels = parse_label_selector(label_selector) if label_selector else None
            fields = parse_field_selector(field_selector, rtype.kind) if field_selector else None
        except SelectorError as error:
            raise KubeError(400, str(error), "BadRequest") from error

        def predicate(obj: JSON) -> bool:
            if namespace is not None and obj["metadata"].get("namespace") != namespace:
                return False
            if labels is not None and not labels(obj["metadata"].get("labels") or {}):
                return False
            return fields is None or fields(obj)

        return predicate

    def _list(self, rtype: ResourceType, predicate: Callable[[JSON], bool]) -> JSONList:
        bucket = self._bucket(rtype)
        return [bucket[key] for key in sorted(bucket, key=lambda k: (k[0] or "", k[1])) if predicate(bucket[key])]

    # --- direct helpers (no auth, no admission, not recorded; thread-safe) ---------------------------------------

    def create(self, obj: JSON) -> JSON:
        """Store `obj` as given (status kept); namespaced kinds default to namespace "default"."""
        rtype = self.resource_type(obj["apiVersion"], obj["kind"])
        namespace = (obj.get("metadata") or {}).get("namespace") or "default" if rtype.namespaced else None
        return copy.deepcopy(self._create(rtype, namespace, obj, keep_status=True))

    def get(self, api_version: str, kind_or_plural: str, namespace: str | None, name: str) -> JSON | None:
        rtype = self.resource_type(api_version, kind_or_plural)
        with self._lock:
            obj = self._bucket(rtype).get((namespace if rtype.namespaced else None, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(
        self,
        api_version: str,
        kind_or_plural: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> JSONList:
        rtype = self.resource_type(api_version, kind_or_plural)
        predicate = self._select(rtype, namespace, label_selector, field_selector)
        with self._lock:
            return copy.deepcopy(self._list(rtype, predicate))

    def objects(self, plural: str) -> JSONList:
        """Every stored object of this plural (any group, any namespace)."""
        with self._lock:
            found = [obj for (_, p), bucket in self._store.items() if p == plural for obj in bucket.values()]
            return copy.deepcopy(found)

    def patch(self, api_version: str, kind_or_plural: str, namespace: str | None, name: str, patch: JSON) -> JSON:
        """A merge patch of the whole object, status included (removing the last finalizer of a deleting
        object removes it)."""
        rtype = self.resource_type(api_version, kind_or_plural)
        with self._lock:
            old = self._current(rtype, namespace, name)
            return copy.deepcopy(self._commit(rtype, old, merge_patch(copy.deepcopy(old), patch)))

    def patch_status(
        self, api_version: str, kind_or_plural: str, namespace: str | None, name: str, status: JSON
    ) -> JSON:
        """A merge patch of `.status` only."""
        return self.patch(api_version, kind_or_plural, namespace, name, {"status": status})

    def update(self, obj: JSON) -> JSON:
        """Replace the whole object (status included), no resourceVersion check."""
        rtype = self.resource_type(obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        with self._lock:
            old = self._current(rtype, meta.get("namespace"), meta["name"])
            return copy.deepcopy(self._commit(rtype, old, copy.deepcopy(obj)))

    def delete(
        self, api_version: str, kind_or_plural: str, namespace: str | None, name: str, force: bool = False
    ) -> JSON | None:
        """Delete as the API does (finalizers: only deletionTimestamp is set); `force` ignores finalizers.
        None if there is no such object."""
        rtype = self.resource_type(api_version, kind_or_plural)
        try:
            return copy.deepcopy(self._delete(rtype, namespace if rtype.namespaced else None, name, force=force))
        except KubeError as error:
            if error.code == 404:
                return None
            raise

    def remove_finalizer(
        self, api_version: str, kind_or_plural: str, namespace: str | None, name: str, finalizer: str
    ) -> JSON | None:
        with self._lock:
            obj = self.get(api_version, kind_or_plural, namespace, name)
            if obj is None:
                return None
            rest = [f for f in obj["metadata"].get("finalizers") or [] if f != finalizer]
            return self.patch(api_version, kind_or_plural, namespace, name, {"metadata": {"finalizers": rest or None}})

    # --- request handling ---------------------------------------------------------------------------------------

    def _route(self, path: str) -> _Route | None:
        parts = [part for part in path.split("/") if part]
        if len(parts) >= 3 and parts[0] == "api" and parts[1] == "v1":
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 4 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        if rest[0] == "namespaces" and len(rest) >= 3 and not (group == "" and rest[2] in ("status", "finalize")):
            if len(rest) > 5:
                return _Route(group, version, rest[2])
            route = _Route(group, version, rest[2], rest[1], _at(rest, 3), _at(rest, 4))
        else:
            if len(rest) > 3:
                return _Route(group, version, rest[0])
            route = _Route(group, version, rest[0], None, _at(rest, 1), _at(rest, 2))
        route.rtype = self._types.get((group, version, route.plural))
        return route

    @staticmethod
    def _verb(method: str, route: _Route | None, watch: bool) -> str:
        if method == "GET":
            if route is not None and route.name is not None:
                return "get"
            return "watch" if watch else "list"
        if method == "DELETE" and route is not None and route.name is None:
            return "deletecollection"
        return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())

    def _authenticate(self, handler: _Handler) -> str | None:
        scheme, _, token = handler.request.headers.get("Authorization", "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return None
        token = token.strip()
        for known, user in list(self._tokens.items()):
            if hmac.compare_digest(known.encode(), token.encode()):
                return user
        return None

    async def _handle(self, handler: _Handler, method: str, path: str) -> None:
        handler.set_header("Content-Type", "application/json")
        if path in ("/version", "/healthz", "/livez", "/readyz"):
            body: Any = {"major": "1", "minor": "33", "gitVersion": "v1.33.0-kubeapi"} if path == "/version" else "ok"
            handler.finish(json.dumps(body) if path == "/version" else body)
            return
        watch = handler.get_query_argument("watch", "").lower() in ("true", "1")
        route = self._route(path)
        verb = self._verb(method, route, watch)
        call = Call(
            verb,
            route.group if route else "",
            route.version if route else "",
            route.plural if route else "",
            route.subresource if route else None,
            route.namespace if route else None,
            route.name if route else None,
        )
        user = self._authenticate(handler)
        if user is None:
            with self._lock:
                self._rejected.append(dataclasses.replace(call, allowed=False))
            self._write_error(handler, KubeError(401, "Unauthorized", "Unauthorized"))
            return
        if route is None:
            self._write(handler, 200, self._discovery(path))
            return
        with self._lock:
            self._calls.append(dataclasses.replace(call, user=user))
            fault = next((f for f in self._faults if f.matches(verb, route.plural, route.subresource)), None)
            if fault is not None:
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
        try:
            if fault is not None and fault.delay:
                await asyncio.sleep(fault.delay)
            if fault is not None and fault.code:
                raise KubeError(fault.code, fault.message or f"injected failure ({fault.code})", fault.reason)
            rtype = route.rtype
            if rtype is None or (rtype.namespaced is False and route.namespace is not None):
                raise KubeError(404, "the server could not find the requested resource", "NotFound")
            if rtype.namespaced and route.namespace is None and route.name is not None:
                raise KubeError(404, "the server could not find the requested resource", "NotFound")
            if route.subresource not in (None, "status", "scale") or (
                (route.subresource == "status" and not rtype.status)
                or (route.subresource == "scale" and not rtype.scale)
            ):
                raise KubeError(404, "the server could not find the requested resource", "NotFound")
            if verb == "watch":
                await self._watch(handler, rtype, route)
                return
            code, answer = self._serve(handler, verb, rtype, route, user)
            self._write(handler, code, answer)
        except KubeError as error:
            if not handler._finished:
                self._write_error(handler, error)

    def _write(self, handler: _Handler, code: int, body: Any) -> None:
        handler.set_status(code)
        handler.finish(json.dumps(body, separators=(",", ":")))

    def _write_error(self, handler: _Handler, error: KubeError) -> None:
        handler.set_status(error.code)
        handler.set_header("Content-Type", "application/json")
        handler.finish(json.dumps(error.status()))

    def _body(self, handler: _Handler, required: bool = True) -> Any:
        raw = handler.request.body
        if not raw:
            if required:
                raise KubeError(400, "the request body is empty", "BadRequest")
            return None
        try:
            return json.loads(raw)
        except ValueError as error:
            raise KubeError(400, f"the request body is not valid JSON: {error}", "BadRequest") from error

    def _admit(self, verb: str, obj: JSON, user: str, rtype: ResourceType, name: str) -> None:
        for admission in self._admissions:
            denial = admission(verb, copy.deepcopy(obj), user)
            if denial:
                raise KubeError(403, f'{rtype.qualified} "{name}" is forbidden: {denial}', "Forbidden", rtype, name)

    @staticmethod
    def _present(rtype: ResourceType, obj: JSON) -> JSON:
        if obj.get("apiVersion") == rtype.api_version:
            return obj
        return {**obj, "apiVersion": rtype.api_version}

    def _serve(self, handler: _Handler, verb: str, rtype: ResourceType, route: _Route, user: str) -> tuple[int, Any]:
        namespace, name, sub = route.namespace, route.name, route.subresource
        if verb == "get":
            assert name is not None
            with self._lock:
                obj = self._current(rtype, namespace, name)
            return 200, self._scale(obj) if sub == "scale" else self._present(rtype, obj)
        if verb == "list":
            return 200, self._serve_list(handler, rtype, namespace)
        if verb == "create":
            if name is not None:
                raise KubeError(405, "POST to a named object is not allowed", "MethodNotAllowed")
            body = self._body(handler)
            if rtype.namespaced and namespace is None:
                raise KubeError(404, "the server could not find the requested resource", "NotFound")
            created = self._create(
                rtype,
                namespace,
                body,
                keep_status=False,
                admit=lambda obj: self._admit("create", obj, user, rtype, obj["metadata"]["name"]),
            )
            return 201, self._present(rtype, created)
        if verb in ("update", "patch"):
            assert name is not None
            return 200, self._serve_write(handler, verb, rtype, route, user)
        if verb == "delete":
            assert name is not None
            options = self._body(handler, required=False) or {}
            with self._lock:
                old = self._current(rtype, namespace, name)
                preconditions = options.get("preconditions") or {} if isinstance(options, dict) else {}
                if preconditions.get("resourceVersion") not in (None, old["metadata"]["resourceVersion"]):
                    raise conflict(rtype, name)
                if preconditions.get("uid") not in (None, old["metadata"]["uid"]):
                    raise conflict(rtype, name)
                self._admit("delete", old, user, rtype, name)
                return 200, self._present(rtype, self._delete(rtype, namespace, name))
        raise KubeError(405, f"the server does not allow this method on {rtype.qualified} ({verb})", "MethodNotAllowed")

    def _serve_list(self, handler: _Handler, rtype: ResourceType, namespace: str | None) -> JSON:
        predicate = self._select(
            rtype,
            namespace,
            handler.get_query_argument("labelSelector", None),
            handler.get_query_argument("fieldSelector", None),
        )
        limit = int(handler.get_query_argument("limit", "0") or 0)
        token = handler.get_query_argument("continue", "")
        with self._lock:
            items = self._list(rtype, predicate)
            rv = str(self._rv)
        meta: JSON = {"resourceVersion": rv}
        if token:
            try:
                start = json.loads(base64.urlsafe_b64decode(token.encode()))
            except ValueError as error:
                raise KubeError(400, "invalid continue token", "BadRequest") from error
            items = [i for i in items if [i["metadata"].get("namespace") or "", i["metadata"]["name"]] > start]
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps([last.get("namespace") or "", last["name"]]).encode()
            ).decode()
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        return {
            "apiVersion": rtype.api_version,
            "kind": f"{rtype.kind}List",
            "metadata": meta,
            "items": [self._present(rtype, item) for item in items],
        }

    def _serve_write(self, handler: _Handler, verb: str, rtype: ResourceType, route: _Route, user: str) -> JSON:
        namespace, name, sub = route.namespace, route.name, route.subresource
        assert name is not None
        body = self._body(handler)
        with self._lock:
            old = self._current(rtype, namespace, name)
            if sub == "scale":
                current_scale = self._scale(old)
                scale = body if verb == "update" else self._apply_patch(handler, rtype, name, current_scale, body)
                replicas = (scale.get("spec") or {}).get("replicas") if isinstance(scale, dict) else None
                if not isinstance(replicas, int) or replicas < 0:
                    raise invalid(rtype, name, "spec.replicas: Invalid value: must be a non-negative integer")
                # The Scale's resourceVersion is the object's: a stale one is a precondition that fails.
                wanted_rv = (scale.get("metadata") or {}).get("resourceVersion")
                if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
                    raise conflict(rtype, name)
                new = copy.deepcopy(old)
                new.setdefault("spec", {})["replicas"] = replicas
                self._admit(verb, new, user, rtype, name)
                return self._scale(self._commit(rtype, old, new))
            if verb == "update":
                if not isinstance(body, dict):
                    raise KubeError(400, "the request body must be a JSON object", "BadRequest")
                candidate = copy.deepcopy(body)
                meta = candidate.get("metadata") or {}
                if meta.get("name") not in (None, name):
                    raise KubeError(400, "the name of the object does not match the name on the URL", "BadRequest")
                wanted_rv = meta.get("resourceVersion")
                if not wanted_rv and rtype.custom:
                    raise invalid(
                        rtype, name, "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
                    )
            else:
                candidate = self._apply_patch(handler, rtype, name, old, body)
                wanted_rv = (candidate.get("metadata") or {}).get("resourceVersion")
                if wanted_rv == old["metadata"]["resourceVersion"]:
                    wanted_rv = None
            if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
                raise conflict(rtype, name)
            if not isinstance(candidate, dict):
                raise invalid(rtype, name, "the patched object is not an object")
            if sub == "status":
                new = copy.deepcopy(old)
                if candidate.get("status") is None:
                    new.pop("status", None)
                else:
                    new["status"] = candidate["status"]
            else:
                new = candidate
                if rtype.status:
                    if "status" in old:
                        new["status"] = copy.deepcopy(old["status"])
                    else:
                        new.pop("status", None)
            new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
            self._admit(verb, new, user, rtype, name)
            return self._present(rtype, self._commit(rtype, old, new))

    def _apply_patch(self, handler: _Handler, rtype: ResourceType, name: str, old: JSON, body: Any) -> Any:
        content_type = handler.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        try:
            if content_type == "application/merge-patch+json":
                if not isinstance(body, dict):
                    raise KubeError(400, "a merge patch must be a JSON object", "BadRequest")
                return merge_patch(copy.deepcopy(old), body)
            if content_type == "application/strategic-merge-patch+json":
                if rtype.custom:
                    raise KubeError(
                        415,
                        f"the body of the request was in an unknown format - accepted media types include: "
                        f"application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml "
                        f"(strategic merge patch is not supported for custom resource {rtype.qualified})",
                        "UnsupportedMediaType",
                    )
                if not isinstance(body, dict):
                    raise KubeError(400, "a strategic merge patch must be a JSON object", "BadRequest")
                return strategic_merge_patch(copy.deepcopy(old), body)
            if content_type == "application/json-patch+json":
                if not isinstance(body, list):
                    raise KubeError(
                        400, "json: cannot unmarshal object into Go value of type jsonpatch.Patch", "BadRequest"
                    )
                return json_patch(old, body)
        except PatchError as error:
            raise invalid(rtype, name, str(error)) from error
        raise KubeError(
            415, f"the body of the request was in an unknown format: {content_type}", "UnsupportedMediaType"
        )

    def _scale(self, obj: JSON) -> JSON:
        meta = obj["metadata"]
        status = obj.get("status") or {}
        selector = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {
                k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta
            },
            "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 1)},
            "status": {
                "replicas": status.get("replicas", 0),
                "selector": ",".join(f"{k}={v}" for k, v in selector.items()),
            },
        }

    async def _watch(self, handler: _Handler, rtype: ResourceType, route: _Route) -> None:
        predicate = self._select(
            rtype,
            route.namespace,
            handler.get_query_argument("labelSelector", None),
            handler.get_query_argument("fieldSelector", None),
        )
        try:  # an integer, as on a real server
            timeout = float(int(handler.get_query_argument("timeoutSeconds", "") or self.max_watch_seconds))
        except ValueError as error:
            raise KubeError(400, "timeoutSeconds must be an integer", "BadRequest") from error
        since = handler.get_query_argument("resourceVersion", "")
        key = (rtype.group, rtype.plural)
        initial: list[tuple[str, JSON]] = []
        with self._lock:
            watcher = _Watcher(key, route.namespace, predicate, self._rv)
            if since in ("", "0"):
                initial = [("ADDED", obj) for obj in self._list(rtype, predicate)]
            else:
                try:
                    after = int(since)
                except ValueError as error:
                    raise KubeError(400, f"invalid resourceVersion {since!r}", "BadRequest") from error
                if after < self._dropped_upto:
                    gone = KubeError(410, f"too old resource version: {after} ({self._dropped_upto + 1})", "Expired")
                    initial = [("ERROR", gone.status())]
                else:
                    for event in self._history:
                        if event.rv > after:
                            watcher.last_rv = after
                            translated = watcher.translate(event)
                            if translated is not None:
                                initial.append(translated)
                    watcher.last_rv = self._rv
            if not initial or initial[0][0] != "ERROR":
                self._watchers.add(watcher)
        handler.watcher = watcher
        handler.set_status(200)
        handler.set_header("Content-Type", "application/json")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            for event_type, obj in initial:
                handler.write(self._event_line(rtype, event_type, obj))
            await handler.flush()
            if initial and initial[0][0] == "ERROR":
                return
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    item = await asyncio.wait_for(watcher.queue.get(), remaining)
                except asyncio.TimeoutError:
                    break
                if item is None:
                    break
                handler.write(self._event_line(rtype, *item))
                while not watcher.queue.empty():
                    more = watcher.queue.get_nowait()
                    if more is None:
                        break
                    handler.write(self._event_line(rtype, *more))
                await handler.flush()
        except tornado.iostream.StreamClosedError:
            return
        finally:
            with self._lock:
                self._watchers.discard(watcher)
        if not handler._finished:
            handler.finish()

    def _event_line(self, rtype: ResourceType, event_type: str, obj: JSON) -> bytes:
        presented = obj if event_type == "ERROR" else self._present(rtype, obj)
        return json.dumps({"type": event_type, "object": presented}, separators=(",", ":")).encode() + b"\n"

    def _discovery(self, path: str) -> JSON:
        parts = [part for part in path.split("/") if part]
        versions: dict[str, set[str]] = {}
        for rtype in self._types.values():
            versions.setdefault(rtype.group, set()).add(rtype.version)
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if parts == ["apis"]:
            groups = []
            for group in sorted(g for g in versions if g):
                entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in sorted(versions[group])]
                groups.append({"name": group, "versions": entries, "preferredVersion": entries[0]})
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        if parts == ["api", "v1"] or (len(parts) == 3 and parts[0] == "apis"):
            group, version = ("", "v1") if parts[0] == "api" else (parts[1], parts[2])
            resources = []
            for rtype in self._types.values():
                if (rtype.group, rtype.version) == (group, version):
                    verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
                    resources.append(
                        {
                            "name": rtype.plural,
                            "singularName": rtype.kind.lower(),
                            "namespaced": rtype.namespaced,
                            "kind": rtype.kind,
                            "verbs": verbs,
                        }
                    )
                    if rtype.status:
                        resources.append(
                            {
                                "name": f"{rtype.plural}/status",
                                "singularName": "",
                                "namespaced": rtype.namespaced,
                                "kind": rtype.kind,
                                "verbs": ["get", "patch", "update"],
                            }
                        )
            gv = f"{group}/{version}" if group else version
            return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}
        raise_error = KubeError(404, "the server could not find the requested resource", "NotFound")
        return raise_error.status()


def start_kube_api(**kwargs: Any) -> KubeAPI:
    """A started KubeAPI (stop it yourself, or use `with KubeAPI() as kube:`)."""
    return KubeAPI(**kwargs).start()


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.01) -> Any:
    """Poll `predicate` until it returns something truthy (returned) or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        time.sleep(interval)


def condition(obj: JSON | None, condition_type: str) -> JSON | None:
    """The status condition of that type, or None."""
    for entry in ((obj or {}).get("status") or {}).get("conditions") or []:
        if entry.get("type") == condition_type:
            return dict(entry)
    return None


def set_condition(conditions: list[JSON] | None, entry: JSON) -> JSONList:
    """`conditions` with `entry` replacing the one of the same type (lastTransitionTime set when the status
    changes)."""
    result = [dict(c) for c in conditions or []]
    entry = dict(entry)
    for index, existing in enumerate(result):
        if existing.get("type") == entry["type"]:
            if existing.get("status") == entry.get("status") and "lastTransitionTime" in existing:
                entry.setdefault("lastTransitionTime", existing["lastTransitionTime"])
            entry.setdefault("lastTransitionTime", now_rfc3339())
            result[index] = entry
            return result
    entry.setdefault("lastTransitionTime", now_rfc3339())
    result.append(entry)
    return result
