"""Kernel side of the server -> kernel request protocol.

The server asks a kernel to act (probe, write application checkpoints,
restore them, report its live-state canary) with a *silent*
``execute_request`` whose only content is one ``user_expression``::

    __import__('jupyter_suspend.kernel.protocol', fromlist=['handle']).handle('<json>')

The reply travels back on the shell channel inside ``execute_reply``, so it
cannot be lost to the IOPub slow-joiner problem, and a kernel busy with a long
cell simply answers later (the request carries a ``deadline`` after which it
is ignored, so a late answer never starts a surprise checkpoint).

Kernels that do not have the helper loaded (other languages, or IPython
without ``%load_ext jupyter_suspend``) answer with an error or with
``helper: false``; the server treats both as "files only".

This module is imported inside user kernels: it must stay cheap (standard
library only, nothing from jupyter_server).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from ..common.kernel_protocol import ACTIONS, PROTOCOL_VERSION

Handler = Callable[[dict[str, Any]], dict[str, Any]]

#: Filled by the IPython extension when it loads (``%load_ext jupyter_suspend``).
_handlers: dict[str, Handler] = {}


def register_handler(action: str, handler: Handler) -> None:
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; expected one of {ACTIONS}")
    _handlers[action] = handler


def unregister_all() -> None:
    _handlers.clear()


def helper_loaded() -> bool:
    return bool(_handlers)


def handle(payload: str) -> str:
    """Entry point evaluated in the kernel; returns a JSON string."""
    try:
        request = json.loads(payload)
        action = request["action"]
    except (ValueError, KeyError, TypeError) as exc:
        return _reply({"status": "error", "message": f"malformed request: {exc}"})
    base = {"action": action, "request_id": request.get("request_id")}
    if request.get("protocol") != PROTOCOL_VERSION:
        return _reply({**base, "status": "error", "message": f"unsupported protocol {request.get('protocol')!r}"})
    deadline = request.get("deadline")
    if isinstance(deadline, (int, float)) and time.time() > deadline:
        # The server gave up waiting (the kernel was busy); acting now would
        # surprise the user with a checkpoint nobody is waiting for.
        return _reply({**base, "status": "expired", "message": "request arrived after its deadline"})
    handler = _handlers.get(action)
    if handler is None:
        return _reply(
            {
                **base,
                "helper": False,
                "status": "ok",
                "message": "jupyter_suspend is installed but not loaded in this kernel (%load_ext jupyter_suspend)",
            }
        )
    try:
        result = handler(request)
    except Exception as exc:  # noqa: BLE001 - report every failure to the server
        return _reply({**base, "helper": True, "status": "error", "message": f"{type(exc).__name__}: {exc}"})
    return _reply({**base, "helper": True, "status": "ok", **result})


def _reply(content: dict[str, Any]) -> str:
    return json.dumps({"protocol": PROTOCOL_VERSION, **content}, default=str)
