"""REST API v1 under ``{base_url}jupyter-suspend/api/``: thin handlers only.

Every handler is authenticated and authorized against the
``jupyter_suspend`` resource, validates its body, calls the lifecycle core
and serialises the answer. None of them counts as user activity, so that
polling the status never keeps an idle server "active".
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web

from ..common.api import API_PREFIX
from . import openapi, snapshots
from .configuration import MISCONFIGURED, Problem, summary
from .idle_policy import IdlePolicy, NoWarning
from .lifecycle import Lifecycle
from .live_state import VerifyError
from .metrics import CONTENT_TYPE, METRICS_PATH, SuspendMetrics
from .save_requests import SaveRequestClosed, SaveRequests, UnknownSaveRequest
from .states import IllegalState
from .validation import BadRequest, parse_body

AUTH_RESOURCE = "jupyter_suspend"


class SuspendAPIHandler(ExtensionHandlerMixin, APIHandler):
    auth_resource = AUTH_RESOURCE
    # Our own polling must never move /api/status last_activity.
    _track_activity = False

    @property
    def lifecycle(self) -> Lifecycle:
        lifecycle: Lifecycle = self.settings["jupyter_suspend_lifecycle"]
        return lifecycle

    @property
    def idle_policy(self) -> IdlePolicy:
        policy: IdlePolicy = self.settings["jupyter_suspend_idle_policy"]
        return policy

    def status(self) -> dict[str, Any]:
        """The lifecycle's status with the idle policy's class and pending warning."""
        return {**self.lifecycle.status(), **self.idle_policy.status_fields()}

    def body(self, schema_name: str) -> dict[str, Any]:
        try:
            return parse_body(self.request.body, schema_name, self.settings["jupyter_suspend_max_body_bytes"])
        except BadRequest as exc:
            raise web.HTTPError(400, str(exc)) from exc

    def reply(self, data: dict[str, Any], status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(data, default=str))

    def conflict(self, exc: IllegalState) -> None:
        data: dict[str, Any] = {"message": str(exc), "reason": "Conflict", "state": exc.state.value}
        if exc.operation is not None:
            data["operation"] = exc.operation.summary()
        self.reply(data, 409)

    def started(self, operation: Any) -> None:
        self.set_header("Location", self.base_url + API_PREFIX + "/status")
        self.reply({"operation": operation.to_dict(), "status": self.status()}, 202)


class StatusHandler(SuspendAPIHandler):
    @web.authenticated
    @authorized
    def get(self) -> None:
        self.reply(self.status())


class SuspendHandler(SuspendAPIHandler):
    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.body("suspend")
        if body.get("dry_run"):
            self.reply(await self.lifecycle.preflight())
            return
        try:
            operation = self.lifecycle.start_suspend(body.get("reason", ""), force=body.get("force", False))
        except IllegalState as exc:
            self.conflict(exc)
            return
        self.started(operation)


class CheckpointHandler(SuspendAPIHandler):
    @web.authenticated
    @authorized
    def post(self) -> None:
        body = self.body("checkpoint")
        try:
            operation = self.lifecycle.start_checkpoint(body.get("reason", ""))
        except IllegalState as exc:
            self.conflict(exc)
            return
        self.started(operation)


class ResumeHandler(SuspendAPIHandler):
    @web.authenticated
    @authorized
    def post(self) -> None:
        body = self.body("resume")
        try:
            operation = self.lifecycle.start_resume(body.get("reason", ""))
        except IllegalState as exc:
            self.conflict(exc)
            return
        self.started(operation)


class AcknowledgeHandler(SuspendAPIHandler):
    @web.authenticated
    @authorized
    def post(self) -> None:
        self.body("acknowledge")
        try:
            self.lifecycle.acknowledge()
        except IllegalState as exc:
            self.conflict(exc)
            return
        self.reply(self.status())


class TimelineHandler(SuspendAPIHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        # Reading the journal is file I/O: keep it off the event loop.
        self.reply(await asyncio.to_thread(self.lifecycle.timeline))


class VerifyHandler(SuspendAPIHandler):
    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.body("verify")
        try:
            result = await self.lifecycle.verify(body["kernel_id"], body.get("names"), body.get("observed"))
        except VerifyError as exc:
            self.reply({"message": str(exc), "reason": "Verify", "kernel_id": exc.kernel_id}, exc.status_code)
            return
        self.reply(result)


class KernelCheckpointHandler(SuspendAPIHandler):
    """A checkpoint written in the kernel (``%checkpoint save``), recorded for live-state verification."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.body("checkpoint-record")
        try:
            result = await self.lifecycle.record_kernel_checkpoint(body["kernel_id"], body["checkpoint"])
        except VerifyError as exc:
            self.reply({"message": str(exc), "reason": "Verify", "kernel_id": exc.kernel_id}, exc.status_code)
            return
        self.reply(result)


class SnapshotsHandler(SuspendAPIHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        try:
            self.reply(await snapshots.listing(self.lifecycle.backend, self.lifecycle.state))
        except snapshots.SnapshotRefused as exc:
            self.reply(exc.to_dict(), exc.status)


class SnapshotHandler(SuspendAPIHandler):
    @web.authenticated
    @authorized
    async def delete(self, name: str) -> None:
        if self.request.body:
            raise web.HTTPError(400, "DELETE snapshots/NAME takes no body")
        try:
            self.reply(await snapshots.delete(self.lifecycle.backend, self.lifecycle.state, name))
        except snapshots.SnapshotRefused as exc:
            self.reply(exc.to_dict(), exc.status)


class ActivityHandler(SuspendAPIHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.reply(await self.idle_policy.answer())


class KeepRunningHandler(SuspendAPIHandler):
    @web.authenticated
    @authorized
    async def post(self) -> None:
        self.body("keep-running")
        try:
            workload_class = await self.idle_policy.keep_running()
        except NoWarning as exc:
            self.reply({"message": str(exc), "reason": "Conflict", "state": self.lifecycle.state.value}, 409)
            return
        self.reply({"cancelled": True, "workload_class": workload_class})


class SaveAnswerHandler(SuspendAPIHandler):
    """A JupyterLab page answers a save request (``save_requests``)."""

    @web.authenticated
    @authorized
    def post(self) -> None:
        body = self.body("save-answer")
        save_requests: SaveRequests = self.settings["jupyter_suspend_save_requests"]
        try:
            self.reply(save_requests.answer(body))
        except UnknownSaveRequest as exc:
            self.reply({"message": str(exc), "reason": "Not Found", "state": self.lifecycle.state.value}, 404)
        except SaveRequestClosed as exc:
            self.reply({"message": str(exc), "reason": "Conflict", "state": self.lifecycle.state.value}, 409)


class OpenAPIHandler(SuspendAPIHandler):
    @web.authenticated
    @authorized
    def get(self) -> None:
        self.reply(openapi.document(handlers(), self.base_url))


def handlers() -> list[tuple[str, type[SuspendAPIHandler]]]:
    return [
        (rf"/{API_PREFIX}/status", StatusHandler),
        (rf"/{API_PREFIX}/suspend", SuspendHandler),
        (rf"/{API_PREFIX}/checkpoint", CheckpointHandler),
        (rf"/{API_PREFIX}/resume", ResumeHandler),
        (rf"/{API_PREFIX}/acknowledge", AcknowledgeHandler),
        (rf"/{API_PREFIX}/timeline", TimelineHandler),
        (rf"/{API_PREFIX}/verify", VerifyHandler),
        (rf"/{API_PREFIX}/checkpoint-record", KernelCheckpointHandler),
        (rf"/{API_PREFIX}/snapshots", SnapshotsHandler),
        (rf"/{API_PREFIX}/snapshots/(?P<name>[^/]+)", SnapshotHandler),
        (rf"/{API_PREFIX}/activity", ActivityHandler),
        (rf"/{API_PREFIX}/activity/keep-running", KeepRunningHandler),
        (rf"/{API_PREFIX}/save-requests", SaveAnswerHandler),
        (rf"/{API_PREFIX}/openapi\.json", OpenAPIHandler),
    ]


class MisconfiguredHandler(SuspendAPIHandler):
    """Every route of the API while a setting is wrong: 503 with the problems (after authentication,
    like every answer of the API), never the HTML 404 of a server without the extension."""

    def misconfigured(self, **_: Any) -> None:
        problems: list[Problem] = self.settings["jupyter_suspend_problems"]
        self.reply(
            {"reason": MISCONFIGURED, "message": summary(problems), "problems": [p.to_dict() for p in problems]},
            503,
        )

    @web.authenticated
    @authorized
    def get(self, **kwargs: Any) -> None:
        self.misconfigured(**kwargs)

    @web.authenticated
    @authorized
    def post(self, **kwargs: Any) -> None:
        self.misconfigured(**kwargs)

    @web.authenticated
    @authorized
    def delete(self, **kwargs: Any) -> None:
        self.misconfigured(**kwargs)


def misconfigured_handlers() -> list[tuple[str, type[SuspendAPIHandler]]]:
    """The API's routes, each answered by :class:`MisconfiguredHandler`."""
    return [(pattern, MisconfiguredHandler) for pattern, _ in handlers()]


class MetricsHandler(SuspendAPIHandler):
    """Prometheus scrapes (text, not JSON); authenticated like the API and never counted as activity."""

    @web.authenticated
    @authorized
    def get(self) -> None:
        metrics: SuspendMetrics = self.settings["jupyter_suspend_metrics"]
        self.set_header("Cache-Control", "no-store")
        self.finish(metrics.exposition(), set_content_type=CONTENT_TYPE)


def metrics_handlers() -> list[tuple[str, type[SuspendAPIHandler]]]:
    """Outside the JSON API (``handlers()``): the Prometheus exposition format (``openapi.METRICS_OPERATION``
    describes it in the OpenAPI document)."""
    return [(rf"/{METRICS_PATH}", MetricsHandler)]
