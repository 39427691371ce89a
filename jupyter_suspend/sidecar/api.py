"""The sidecar's HTTP surface (see :mod:`jupyter_suspend.common.sidecar_protocol`).

Every request is checked -- bearer secret, body size, JSON form, fields and
types, every name by Kubernetes' rules, target pod and namespace -- before
anything reaches the Kubernetes API: a refused request makes no API call at all.
Errors are said in the sidecar's words with a next step; the access log names
the endpoint (its route), never the raw URI, headers or body.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tornado import httputil, web

from ..common import sidecar_protocol as proto
from .config import Config
from .errors import Fault

if TYPE_CHECKING:
    from .kube import PodSnapshots
    from .workload import OwnerWorkload

log = logging.getLogger("jupyter_suspend.sidecar")
access_log = logging.getLogger("jupyter_suspend.sidecar.access")

#: Bodies up to this size are read and answered 413 with a JSON error; larger
#: ones make tornado close the connection (the HTTPServer's max_body_size).
DRAIN_LIMIT = 1024 * 1024

_IDENTITY = {proto.FIELD_POD: str, proto.FIELD_NAMESPACE: str}
_STOP_FIELDS = {**_IDENTITY, proto.FIELD_KIND: str, proto.FIELD_NAME: str}


@dataclass
class Context:
    config: Config
    kube: PodSnapshots
    secret: bytes
    #: The own pod's Kubeflow owner (``--workload notebook|workspace``); None: snapshots.
    workload: OwnerWorkload | None = None


@web.stream_request_body
class BaseHandler(web.RequestHandler):
    auth_required = True
    #: Query parameters (name -> type) a GET or DELETE accepts besides the identity check.
    query_fields: Mapping[str, type] = {}

    #: The route, as the access log names it (never the raw URI: it may hold anything).
    route = "?"

    def initialize(self, ctx: Context) -> None:
        self.ctx = ctx
        self._chunks: list[bytes] = []
        self._received = 0
        self._too_large = False
        #: Set when the client hangs up: a long-poll stops at once.
        self.gone = asyncio.Event()

    def on_connection_close(self) -> None:
        self.gone.set()

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", proto.CONTENT_TYPE)
        self.set_header("Cache-Control", "no-store")
        self.clear_header("Server")

    # -- checks before anything else ---------------------------------------------

    def prepare(self) -> None:
        if self.auth_required and not self._authorized():
            raise Fault(401, proto.E_UNAUTHORIZED, "missing or wrong bearer secret (read it from the secret file)")
        length = self.request.headers.get("Content-Length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                raise Fault(400, proto.E_MALFORMED, "Content-Length is not a number") from None
            if declared > proto.MAX_BODY_BYTES:
                self._too_large = True

    def _authorized(self) -> bool:
        header = self.request.headers.get(proto.AUTH_HEADER, "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != proto.AUTH_SCHEME.lower():
            # Compare anyway, so that the answer takes the same time.
            hmac.compare_digest(b"", self.ctx.secret)
            return False
        return hmac.compare_digest(token.strip().encode("utf-8", "replace"), self.ctx.secret)

    def data_received(self, chunk: bytes) -> None:
        self._received += len(chunk)
        if self._received > proto.MAX_BODY_BYTES:
            self._too_large = True
            self._chunks.clear()  # drained, not kept
        elif not self._too_large:
            self._chunks.append(chunk)

    def _raw_body(self) -> bytes:
        if self._too_large:
            raise Fault(413, proto.E_BODY_TOO_LARGE, f"request body over {proto.MAX_BODY_BYTES} bytes", retryable=False)
        return b"".join(self._chunks)

    def json_body(self, fields: Mapping[str, type]) -> dict[str, Any]:
        """The body as a JSON object with only ``fields`` (name -> type); empty body = ``{}``."""
        raw = self._raw_body()
        if self.request.query_arguments:
            names = ", ".join(_shown(key) for key in sorted(self.request.query_arguments))
            raise Fault(400, proto.E_UNKNOWN_FIELD, f"{self.request.method} takes its fields in the body, not {names}")
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise Fault(400, proto.E_MALFORMED, f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise Fault(400, proto.E_NOT_AN_OBJECT, "the body must be a JSON object")
        for key, value in body.items():
            if key not in fields:
                allowed = ", ".join(sorted(fields)) or "none"
                raise Fault(400, proto.E_UNKNOWN_FIELD, f"unknown field {_shown(key)} (allowed: {allowed})")
            _check_type(key, value, fields[key])
        return body

    def query(self) -> dict[str, str]:
        """Query parameters, each at most once, only the known ones; a GET/DELETE body is refused."""
        if self._raw_body().strip():
            raise Fault(400, proto.E_UNEXPECTED_BODY, f"{self.request.method} takes no body")
        allowed = {**_IDENTITY, **self.query_fields}
        out: dict[str, str] = {}
        for key, values in self.request.query_arguments.items():
            if key not in allowed:
                names = ", ".join(sorted(allowed))
                raise Fault(400, proto.E_UNKNOWN_FIELD, f"unknown query parameter {_shown(key)} (allowed: {names})")
            if len(values) != 1:
                raise Fault(400, proto.E_INVALID_VALUE, f"query parameter {key!r} given more than once")
            out[key] = values[0].decode("utf-8", "replace")
        return out

    def check_target(self, fields: Mapping[str, Any]) -> None:
        """An explicit pod or namespace must be a valid name, and this pod's own."""
        pod = fields.get(proto.FIELD_POD)
        namespace = fields.get(proto.FIELD_NAMESPACE)
        if pod is not None:
            self.check_name(pod, "pod")
        if namespace is not None and not proto.is_dns1123_label(namespace):
            raise Fault(
                400,
                proto.E_INVALID_VALUE,
                "namespace is not a valid Kubernetes namespace name (a DNS-1123 label)",
                next_step="omit namespace: the sidecar acts in its own pod's namespace",
            )
        if pod is not None and pod != self.ctx.config.pod_name:
            raise Fault(
                403, proto.E_FORBIDDEN_TARGET, f"this sidecar acts on pod {self.ctx.config.pod_name} only, not {pod}"
            )
        if namespace is not None and namespace != self.ctx.config.namespace:
            raise Fault(
                403,
                proto.E_FORBIDDEN_TARGET,
                f"this sidecar acts in namespace {self.ctx.config.namespace} only, not {namespace}",
            )

    def check_name(self, name: str, what: str) -> str:
        """An object name by Kubernetes' rules (a snapshot request's also a label value); the name is not echoed."""
        if what == "snapshot request":
            if not proto.is_trigger_name(name):
                raise Fault(
                    400,
                    proto.E_INVALID_VALUE,
                    "the snapshot request name is not valid (a DNS-1123 subdomain of at most 63 characters)",
                    next_step="use the trigger name POST /v1/snapshot-requests answered",
                )
        elif not proto.is_dns1123_subdomain(name):
            raise Fault(
                400,
                proto.E_INVALID_VALUE,
                f"the {what} name is not a valid Kubernetes object name (a DNS-1123 subdomain)",
                next_step="use a name as the API lists it: lower-case letters, digits, '-' and '.', at most 253",
            )
        return name

    def snapshots_enabled(self) -> None:
        if self.ctx.workload is not None:
            raise Fault(
                409,
                proto.E_NOT_ENABLED,
                f"this sidecar stops the pod's Kubeflow {self.ctx.workload.kind} (--workload) and takes no snapshots",
                next_step="use POST /v1/workload/stop, or run a sidecar without --workload for GKE Pod Snapshots",
            )

    def owner_workload(self) -> OwnerWorkload:
        if self.ctx.workload is None:
            raise Fault(
                409,
                proto.E_NOT_ENABLED,
                "this sidecar takes GKE Pod Snapshots; it was not started with --workload notebook|workspace",
                next_step="run the sidecar with --workload notebook or --workload workspace (and the matching "
                "deploy/overlays/kubeflow-* Role)",
            )
        return self.ctx.workload

    def answer(self, body: Mapping[str, Any], status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(body))

    # -- errors ------------------------------------------------------------------

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, Fault):
            self.set_status(exc.status)
            body: Mapping[str, Any] = exc.body()
        elif isinstance(exc, web.HTTPError) or exc is None:
            code = {
                404: proto.E_NOT_FOUND,
                405: proto.E_METHOD,
                413: proto.E_BODY_TOO_LARGE,
            }.get(status_code, proto.E_MALFORMED if 400 <= status_code < 500 else proto.E_INTERNAL)
            message = httputil.responses.get(status_code, "error")
            if status_code == 404:
                message = "no such endpoint"
            body = {"error": code, "message": message, "retryable": False}
        else:  # the exception itself is in the log (log_exception), never in the answer
            body = {
                "error": proto.E_INTERNAL,
                "message": "the sidecar failed unexpectedly",
                "retryable": True,
                "next_step": "try again; if it persists, the sidecar container's log has the details",
            }
        self.finish(json.dumps(body))

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, (Fault, web.HTTPError)):
            return  # the access line says enough
        log.error("unexpected error in %s %s", self.request.method, self.route, exc_info=(typ, value, tb))


class HealthHandler(BaseHandler):
    auth_required = False
    route = proto.PATH_HEALTH

    def get(self) -> None:
        self.answer({"ok": True})


class PodHandler(BaseHandler):
    route = proto.PATH_POD

    async def get(self) -> None:
        self.check_target(self.query())
        self.answer(await self.ctx.kube.pod_view())


class SnapshotRequestsHandler(BaseHandler):
    route = proto.PATH_SNAPSHOT_REQUESTS

    async def post(self) -> None:
        body = self.json_body(_IDENTITY)
        self.check_target(body)
        self.snapshots_enabled()
        self.answer(await self.ctx.kube.request_snapshot(), status=201)


class SnapshotRequestHandler(BaseHandler):
    route = proto.PATH_SNAPSHOT_REQUESTS + "/{trigger}"
    query_fields = {proto.PARAM_WAIT: float, proto.PARAM_SINCE: str}

    async def get(self, trigger: str) -> None:
        params = self.query()
        self.check_target(params)
        self.check_name(trigger, "snapshot request")
        wait = 0.0
        if proto.PARAM_WAIT in params:
            try:
                wait = float(params[proto.PARAM_WAIT])
            except ValueError:
                raise Fault(400, proto.E_WRONG_TYPE, "wait must be a number of seconds") from None
            if not 0 <= wait <= proto.MAX_WAIT_SECONDS:  # also refuses nan
                raise Fault(400, proto.E_INVALID_VALUE, f"wait must be between 0 and {proto.MAX_WAIT_SECONDS:g} s")
        since = params.get(proto.PARAM_SINCE)
        if since is not None and since not in proto.PHASES:
            raise Fault(400, proto.E_INVALID_VALUE, f"since must be one of {', '.join(proto.PHASES)}")
        self.snapshots_enabled()
        view = await self.ctx.kube.follow(trigger, wait=wait, since=since, gone=self.gone)
        if not self.gone.is_set():
            self.answer(view)


class SnapshotsHandler(BaseHandler):
    route = proto.PATH_SNAPSHOTS

    async def get(self) -> None:
        self.check_target(self.query())
        self.snapshots_enabled()
        self.answer(await self.ctx.kube.list_snapshots())


class SnapshotHandler(BaseHandler):
    route = proto.PATH_SNAPSHOTS + "/{name}"

    async def delete(self, name: str) -> None:
        self.check_target(self.query())
        self.check_name(name, "snapshot")
        self.snapshots_enabled()
        self.answer(await self.ctx.kube.delete_snapshot(name))


class WorkloadHandler(BaseHandler):
    route = proto.PATH_WORKLOAD

    async def get(self) -> None:
        self.check_target(self.query())
        self.answer(await self.owner_workload().view())


class WorkloadStopHandler(BaseHandler):
    route = proto.PATH_WORKLOAD_STOP

    async def post(self) -> None:
        body = self.json_body(_STOP_FIELDS)
        self.check_target(body)
        workload = self.owner_workload()
        kind = body.get(proto.FIELD_KIND)
        if kind is not None and kind != workload.kind:
            raise Fault(403, proto.E_FORBIDDEN_TARGET, f"this sidecar acts on a {workload.kind} only")
        name = body.get(proto.FIELD_NAME)
        if name is not None:
            self.check_name(name, workload.kind)
        self.answer(await workload.stop(name))


class NotFoundHandler(BaseHandler):
    """Unknown paths: 401 without the secret (nothing is revealed), 404 with it."""

    route = "(no such endpoint)"

    def prepare(self) -> None:
        super().prepare()
        raise web.HTTPError(404)


_SHOWN = re.compile(r"[A-Za-z0-9_.-]{1,32}")


def _shown(key: str) -> str:
    """A caller's field name as an answer may quote it: short and plain, or not at all (it may be anything,
    the secret included, and answers end up in the server's log)."""
    return repr(key) if _SHOWN.fullmatch(key) else "(a name not shown)"


def _check_type(key: str, value: Any, kind: type) -> None:
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        raise Fault(400, proto.E_WRONG_TYPE, f"field {key!r} must be a {kind.__name__}, not {type(value).__name__}")


def _log_request(handler: web.RequestHandler) -> None:
    """One line per request: the method, the route (never the URI: a query string or a path may hold
    anything, the secret included), the status, the time. Never headers, never bodies."""
    request = handler.request
    status = handler.get_status()
    ms = 1000.0 * request.request_time()
    level = logging.INFO if status < 500 else logging.WARNING
    route = getattr(handler, "route", "?")
    method = request.method if request.method in _METHODS else "?"
    access_log.log(level, "%s %s %d %.1fms", method, route, status, ms)


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def make_app(ctx: Context) -> web.Application:
    name = r"([^/]+)"
    kwargs = {"ctx": ctx}
    return web.Application(
        [
            (proto.PATH_HEALTH, HealthHandler, kwargs),
            (proto.PATH_POD, PodHandler, kwargs),
            (proto.PATH_SNAPSHOT_REQUESTS, SnapshotRequestsHandler, kwargs),
            (proto.PATH_SNAPSHOT_REQUESTS + "/" + name, SnapshotRequestHandler, kwargs),
            (proto.PATH_SNAPSHOTS, SnapshotsHandler, kwargs),
            (proto.PATH_SNAPSHOTS + "/" + name, SnapshotHandler, kwargs),
            (proto.PATH_WORKLOAD, WorkloadHandler, kwargs),
            (proto.PATH_WORKLOAD_STOP, WorkloadStopHandler, kwargs),
        ],
        default_handler_class=NotFoundHandler,
        default_handler_args=kwargs,
        log_function=_log_request,
        compress_response=False,
        xsrf_cookies=False,
    )
