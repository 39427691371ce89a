"""Answers other than success, shared by the HTTP layer and the Kubernetes layer (no kubernetes import)."""

from __future__ import annotations

from ..common import sidecar_protocol as proto


class Fault(Exception):
    """An answer other than success, ready to be sent to the caller."""

    def __init__(self, status: int, code: str, message: str, *, retryable: bool = False, next_step: str = ""):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retryable = retryable
        self.next_step = next_step

    def body(self) -> proto.ErrorBody:
        body: proto.ErrorBody = {"error": self.code, "message": self.message, "retryable": self.retryable}
        if self.next_step:
            body["next_step"] = self.next_step
        return body


class NotFound(Exception):
    """The API answered 404 (callers decide what that means)."""


class Conflict(Exception):
    """The API answered 409."""
