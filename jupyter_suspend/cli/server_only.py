"""``status``, ``resume`` and ``snapshots list`` through the notebook server alone (``--url``, no Kubernetes).

On the ``local`` backend (and wherever the caller has no Kubernetes credentials) the notebook server is the
only thing to ask: its own ``jupyter-suspend/api/status``, ``resume`` and ``snapshots``. The answers have
the same schemas as the Kubernetes path (``cli-status.json``, ``cli-resume.json``), with ``kind: "server"``,
``namespace: null`` and ``restore_source: "server"``; nothing is read from or written to a cluster.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .base import EXIT_FAILED, EXIT_OK
from .follow import FALLBACK_STEPS
from .jupyter_client import JupyterServerClient, ServerError, ServerUnreachable

if TYPE_CHECKING:
    from .resume import Request

JSON = dict[str, Any]
SERVER_KIND = "server"

#: The server's lifecycle state -> the plain state seen from outside (cli-status.json ``state``).
STATES = {
    "running": "ready",
    "ready": "ready",
    "flushing": "suspended",  # on its way down: no new work should start there
    "snapshotting": "suspended",
    "suspended": "suspended",
    "waiting_for_capacity": "waiting_for_capacity",
    "restoring": "restoring",
    "failed": "failed",
}
UNREACHABLE_NEXT_STEP = "check --url (with the server's base_url) and --token, and that the server runs"


class ServerRun:
    """One ``status`` or ``resume`` against the server: looks, the states seen, the answer."""

    def __init__(self, request: Request, command: str) -> None:
        self.request = request
        self.command = command
        self.client = JupyterServerClient(request.url, request.token, timeout=min(30.0, max(1.0, request.timeout)))
        self.started = time.monotonic()
        self.history: list[JSON] = []
        self.last: JSON = {}

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def look(self) -> JSON:
        """One ``GET status``, as an outside view: state, message, restore, failure."""
        try:
            status = self.client.status()
        except ServerUnreachable as exc:
            view = self._failed(f"the notebook server did not answer: {exc}", UNREACHABLE_NEXT_STEP)
        except ServerError as exc:
            answer = exc.answer if isinstance(exc.answer, dict) else {}
            reason = answer.get("message") or f"HTTP {exc.code}"
            view = self._failed(f"the notebook server answered {exc.code}: {reason}", _next_step(exc.code, answer))
        else:
            state = STATES.get(str(status.get("state")), "failed")
            message = str(status.get("message") or status.get("state"))
            if status.get("state") in ("flushing", "snapshotting"):
                message = f"suspending now ({status['state']}): {message}"
            view = {
                "state": state,
                "message": message,
                "since": status.get("since"),
                "seconds_in_state": status.get("seconds_in_state"),
                "restore": status.get("restore") if state == "ready" else None,
                "failure": status.get("failure") if state == "failed" else None,
                "server_state": status.get("state"),
                "operation": status.get("operation"),
            }
            if state == "failed" and view["failure"] is None:
                view["failure"] = {"reason": message, "next_step": "see the notebook server's status and log"}
        if not self.history or self.history[-1]["state"] != view["state"]:
            self.history.append({"state": view["state"], "at_seconds": self.elapsed()})
        self.last = view
        return view

    def _failed(self, reason: str, next_step: str) -> JSON:
        return {
            "state": "failed",
            "message": reason,
            "since": None,
            "seconds_in_state": None,
            "restore": None,
            "failure": {"reason": reason, "next_step": next_step},
            "server_state": None,
            "operation": None,
        }

    def answer(self, view: JSON) -> JSON:
        return {
            "command": self.command,
            "kind": SERVER_KIND,
            "name": self.request.name,
            "namespace": None,
            "state": view["state"],
            "message": view["message"],
            "pod": None,
            "since": view["since"],
            "seconds_in_state": view["seconds_in_state"],
            "scheduling": None,
            "restore": view["restore"],
            "restore_source": SERVER_KIND if view["restore"] else None,
            "snapshot": None,
            "failure": view["failure"],
            # The fallback is for an environment that may not come back, not for a server we could not ask.
            "fallback": list(FALLBACK_STEPS)
            if view["state"] in ("failed", "timed_out") and view["server_state"] is not None
            else [],
            "elapsed_seconds": self.elapsed(),
            "history": self.history,
        }


def exit_code(state: str) -> int:
    return EXIT_FAILED if state in ("failed", "timed_out") else EXIT_OK


def _next_step(code: int, answer: JSON) -> str:
    if code == 503 and answer.get("reason") == "Misconfigured":
        return "fix the settings listed by the server (its log, GET …/jupyter-suspend/api/status) and restart it"
    if code in (401, 403):
        return "give the server's token (--token or $JUPYTER_TOKEN)"
    if code == 404:
        return "check --url: jupyter-suspend is not loaded at that URL (wrong base_url, or the extension is off)"
    return "see the notebook server's log"


def status_via_server(request: Request) -> tuple[JSON, int]:
    run = ServerRun(request, "status")
    view = run.look()
    return run.answer(view), exit_code(view["state"])


def resume_via_server(request: Request) -> tuple[JSON, int]:
    """``POST resume`` (a resume already running on the server is joined, never started twice), then with
    ``wait`` follow ``GET status`` until ready, failed or the timeout."""
    run = ServerRun(request, "resume")
    extra: JSON = {"action": "none", "lease": None, "waited": request.wait}
    first = run.look()
    if first["server_state"] is None:  # unreachable or refused: nothing was done
        return {**run.answer(first), **extra}, exit_code(first["state"])
    if first["state"] == "ready":
        extra["action"] = "already_ready"
        return {**run.answer(first), **extra}, exit_code(first["state"])
    operation = first.get("operation") or {}
    if first["state"] in ("waiting_for_capacity", "restoring") and operation.get("in_progress"):
        extra["action"] = "joined"
        extra["joined"] = f"the server's resume {operation.get('id')} (started {operation.get('started_at')})"
    else:
        try:
            run.client.api("POST", "resume", {"reason": "jupyter suspend resume"}, expect=(202,))
            extra["action"] = "resumed"
        except ServerError as exc:
            answer = exc.answer if isinstance(exc.answer, dict) else {}
            view = run._failed(
                f"the notebook server refused the resume ({exc.code}): {answer.get('message', '')}".rstrip(": "),
                _next_step(exc.code, answer),
            )
            extra["action"] = "refused"
            return {**run.answer(view), **extra}, exit_code(view["state"])
        except ServerUnreachable as exc:
            view = run._failed(f"the notebook server did not answer: {exc}", UNREACHABLE_NEXT_STEP)
            return {**run.answer(view), **extra}, exit_code(view["state"])
    view = run.look()
    deadline = run.started + request.timeout
    while request.wait and view["state"] not in ("ready", "failed"):
        if time.monotonic() >= deadline:
            last = view
            view = {
                **last,
                "state": "timed_out",
                "message": f"not ready after {request.timeout:g}s; last seen {last['state']}: {last['message']}",
                "failure": {
                    "reason": f"timed out after {request.timeout:g}s while {last['state']}",
                    "next_step": "recover from the notebook files and application checkpoints (%checkpoint restore); "
                    "the resume itself goes on: check with jupyter suspend status",
                },
            }
            run.history.append({"state": "timed_out", "at_seconds": run.elapsed()})
            break
        time.sleep(min(request.poll_interval, max(0.05, deadline - time.monotonic())))
        view = run.look()
    return {**run.answer(view), **extra}, exit_code(view["state"])


def snapshot_row(row: JSON, pod: str | None) -> JSON:
    """A row of the server's ``GET snapshots`` as ``cli-snapshots.json`` lists it (what only the cluster knows,
    the policy's existence and the owning StatefulSet, is null)."""
    return {
        "name": row["name"],
        "origin_pod": pod,
        "environment": None,
        "created": row.get("created"),
        "age_seconds": row.get("age_seconds"),
        "idle_seconds": None,
        "size_bytes": row.get("size_bytes"),
        "policy": row.get("policy"),
        "policy_exists": None,
        "ready": bool(row.get("ready")),
        "ready_reason": row.get("ready_reason"),
        "last_access": row.get("last_access"),
        "trigger": row.get("trigger"),
        "deleting": bool(row.get("deleting")),
        "gcs_path": None,
    }


def snapshots_via_server(url: str, token: str, name: str, timeout: float = 30.0) -> tuple[JSON, str, int]:
    """``snapshots list`` through the server's ``GET snapshots``: (document, text, exit code)."""
    document: JSON = {
        "command": "list",
        "namespace": "",
        "target": {"kind": SERVER_KIND, "name": name or None, "all": False},
        "snapshots": [],
        "deleted": [],
        "kept": [],
        "policies_deleted": [],
        "policies_kept": [],
        "dry_run": False,
        "stale": None,
        "errors": [],
    }
    client = JupyterServerClient(url, token, timeout=timeout)
    try:
        answer = client.api("GET", "snapshots")
    except ServerUnreachable as exc:
        message = f"the notebook server did not answer: {exc}; {UNREACHABLE_NEXT_STEP}"
        document["errors"].append({"name": "server", "message": message})
        return document, message, EXIT_FAILED
    except ServerError as exc:
        body = exc.answer if isinstance(exc.answer, dict) else {}
        message = f"the notebook server answered {exc.code}: {body.get('message', '')}; {_next_step(exc.code, body)}"
        document["errors"].append({"name": "server", "message": message})
        return document, message, EXIT_FAILED
    document["namespace"] = answer.get("namespace") or ""
    if not answer.get("supported"):
        reason = str(answer.get("reason") or f"the {answer.get('backend')} backend keeps no snapshots")
        document["errors"].append({"name": "server", "message": reason})
        return document, f"no snapshots ({reason})", EXIT_OK
    rows = [snapshot_row(r, answer.get("pod")) for r in answer.get("snapshots", [])]
    document["snapshots"] = rows
    lines = [f"{r['name']}  ready={r['ready']}  created={r['created']}  policy={r['policy']}" for r in rows]
    if answer.get("would_restore"):
        lines.append(f"a resume would restore {answer['would_restore']}")
    return document, "\n".join(lines) if rows else "no snapshots", EXIT_OK
