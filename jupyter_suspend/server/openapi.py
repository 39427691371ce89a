"""The OpenAPI 3.1 document of the REST API, built from the route table and the JSON schemas.

Nothing here is written twice: the paths and their methods come from the
handlers list (``handlers.handlers()``), the request and answer bodies from
``jupyter_suspend/common/schemas/*.json``; this module only says which schema
answers which method with which status. Building the document fails if a
handler has a method this table does not describe, or the other way round.
The Prometheus scrape endpoint (``handlers.metrics_handlers()``), outside the
JSON API, is described too: ``/metrics`` with a server of its own, its path
and content type from :mod:`~jupyter_suspend.server.metrics`.

The schemas are bundled into ``components.schemas`` (each file and each of its
``$defs`` becomes one component, its references rewritten to
``#/components/schemas/...``), so the document stands on its own.
:func:`check_answer` validates one answer against it, which is how the tests
hold the server to its contract.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from functools import cache
from importlib.resources import files
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from .. import __version__
from ..common.api import API_PREFIX
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .metrics import METRICS_PATH

SCHEMA_PACKAGE = "jupyter_suspend.common.schemas"
HTTP_METHODS = ("get", "post", "put", "patch", "delete")

_FORBIDDEN = ("Not authenticated, or not authorized for the jupyter_suspend resource.", "ErrorAnswer")
_BAD_REQUEST = ("The body is not JSON, too large, or does not match its request schema.", "ErrorAnswer")
#: Every JSON operation may answer this (handlers.MisconfiguredHandler); an operation's own 503 says both.
MISCONFIGURED_ANSWER = (
    "The extension is misconfigured (reason Misconfigured): a setting is wrong, listed in problems with what it "
    "allows; every call answers this until the configuration is fixed and the server restarted.",
    "ErrorAnswer",
)
_CONFLICT = ("Not allowed in this state, or another operation runs (state and operation say which).", "ErrorAnswer")

#: endpoint -> method -> what it does, its request schema and its answers (status -> (description, component)).
OPERATIONS: dict[str, dict[str, dict[str, Any]]] = {
    "status": {
        "get": {
            "summary": "The lifecycle state, the current or last operation, and what may start now.",
            "answers": {"200": ("The status.", "Status"), "403": _FORBIDDEN},
        }
    },
    "suspend": {
        "post": {
            "summary": "Flush, then release the environment; with dry_run, only the preflight report.",
            "request": "SuspendRequest",
            "answers": {
                "200": ("dry_run: what a suspend would keep and lose.", "Preflight"),
                "202": ("The suspend started; follow it with GET status.", "OperationStarted"),
                "400": _BAD_REQUEST,
                "403": _FORBIDDEN,
                "409": _CONFLICT,
            },
        }
    },
    "checkpoint": {
        "post": {
            "summary": "Flush only: notebooks and application checkpoints; nothing is released.",
            "request": "CheckpointRequest",
            "answers": {
                "202": ("The checkpoint started; follow it with GET status.", "OperationStarted"),
                "400": _BAD_REQUEST,
                "403": _FORBIDDEN,
                "409": _CONFLICT,
            },
        }
    },
    "resume": {
        "post": {
            "summary": "Bring the suspended environment back (backends that resume from the server).",
            "request": "ResumeRequest",
            "answers": {
                "202": ("The resume started; follow it with GET status.", "OperationStarted"),
                "400": _BAD_REQUEST,
                "403": _FORBIDDEN,
                "409": _CONFLICT,
            },
        }
    },
    "acknowledge": {
        "post": {
            "summary": "Leave the failed state without resuming.",
            "request": "AcknowledgeRequest",
            "answers": {
                "200": ("The status after leaving the failed state.", "Status"),
                "400": _BAD_REQUEST,
                "403": _FORBIDDEN,
                "409": _CONFLICT,
            },
        }
    },
    "timeline": {
        "get": {
            "summary": "Every suspend/resume cycle measured from the journal.",
            "answers": {"200": ("The cycles and their totals.", "Timeline"), "403": _FORBIDDEN},
        }
    },
    "verify": {
        "post": {
            "summary": "Compare a kernel's live state with its last suspend or checkpoint record.",
            "request": "VerifyRequest",
            "answers": {
                "200": ("The verdict.", "Verification"),
                "400": _BAD_REQUEST,
                "403": _FORBIDDEN,
                "404": ("Nothing recorded for this kernel to compare with.", "ErrorAnswer"),
                "409": ("The kernel is not running, busy, or could not be observed.", "ErrorAnswer"),
            },
        }
    },
    "checkpoint-record": {
        "post": {
            "summary": "Record a checkpoint a kernel wrote itself (%checkpoint save) for live-state verification.",
            "request": "CheckpointRecordRequest",
            "answers": {
                "200": ("The record was kept (journaled as 'checkpointed').", "CheckpointRecorded"),
                "400": _BAD_REQUEST,
                "403": _FORBIDDEN,
                "404": ("The kernel is not running on this server.", "ErrorAnswer"),
                "409": ("The canary is not the kernel's own process.", "ErrorAnswer"),
            },
        }
    },
    "snapshots": {
        "get": {
            "summary": "This pod's snapshots (supported: false with the reason on a backend that keeps none).",
            "answers": {
                "200": ("The snapshots, newest first, and the one a resume would restore.", "Snapshots"),
                "403": _FORBIDDEN,
                "502": ("The platform answered the list with an error.", "ErrorAnswer"),
                "503": ("The platform (the sidecar) could not be reached.", "ErrorAnswer"),
            },
        }
    },
    "snapshots/{name}": {
        "delete": {
            "summary": "Delete one of this pod's snapshots and the trigger that made it.",
            "parameters": [
                {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "description": "The PodSnapshot's name (a Kubernetes object name).",
                    "schema": {"type": "string"},
                }
            ],
            "answers": {
                "200": ("The snapshot is being deleted (its storage is freed by the platform).", "SnapshotDeleted"),
                "400": ("Not a Kubernetes object name, or a body was sent.", "ErrorAnswer"),
                "403": ("Not authorized, or another pod's snapshot.", "ErrorAnswer"),
                "404": ("No such snapshot (or the backend keeps none).", "ErrorAnswer"),
                "409": ("The snapshot a coming resume needs, while suspending, suspended or restoring.", "ErrorAnswer"),
                "502": ("The platform answered the delete with an error.", "ErrorAnswer"),
                "503": ("The platform (the sidecar) could not be reached.", "ErrorAnswer"),
            },
        }
    },
    "activity": {
        "get": {
            "summary": "Every activity signal, the idle time, the workload class, the idle policy's decision "
            "(break-even figures included) and a pending automatic-suspend warning.",
            "answers": {"200": ("The activity reading.", "Activity"), "403": _FORBIDDEN},
        }
    },
    "activity/keep-running": {
        "post": {
            "summary": "Cancel the announced automatic suspend (journaled); idle time starts again.",
            "request": "KeepRunningRequest",
            "answers": {
                "200": ("The warning was cancelled.", "KeepRunningAnswer"),
                "400": _BAD_REQUEST,
                "403": _FORBIDDEN,
                "409": ("No automatic suspend is announced.", "ErrorAnswer"),
            },
        }
    },
    "save-requests": {
        "post": {
            "summary": "A JupyterLab page's answer to a save request (the save-requested event sent before every "
            "suspend's flush): saving, then done with what was saved and what could not be.",
            "request": "SaveAnswerRequest",
            "answers": {
                "200": ("The answer counts for the request.", "SaveAnswerAccepted"),
                "400": _BAD_REQUEST,
                "403": _FORBIDDEN,
                "404": ("No such save request on this server.", "ErrorAnswer"),
                "409": ("The request is over (the suspend went on), or the page already answered done.", "ErrorAnswer"),
            },
        }
    },
    "openapi.json": {
        "get": {
            "summary": "This document.",
            "answers": {"200": ("The OpenAPI 3.1 document of this API.", None), "403": _FORBIDDEN},
        }
    },
}

#: ``GET {base_url}jupyter-suspend/metrics``: outside the JSON API (not in ``handlers()``), Prometheus text.
METRICS_OPERATION: dict[str, Any] = {
    "summary": "Lifecycle counters and histograms for Prometheus (rebuilt from the journal at start-up); "
    "a scrape is never user activity.",
    "media_type": METRICS_CONTENT_TYPE,
    "answers": {"200": ("The metrics, in the Prometheus text exposition format.", None), "403": _FORBIDDEN},
}


class ContractError(AssertionError):
    """An answer does not match the schema of its endpoint, method and status."""


def _pascal(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[-_.]", name) if part)


@cache
def schema_files() -> dict[str, dict[str, Any]]:
    """Every schema file of the package, by file name."""
    folder = files(SCHEMA_PACKAGE)
    out: dict[str, dict[str, Any]] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            out[entry.name] = json.loads(entry.read_text())
    return out


def _type_name(title: Any) -> str | None:
    return title if isinstance(title, str) and re.fullmatch(r"[A-Z][A-Za-z0-9]*", title) else None


def component_names() -> dict[tuple[str, str], str]:
    """(file, ``$defs`` key or "") -> component name: the schema's title when that is a type name,
    else from the file name (``verify-request.json`` -> ``VerifyRequest``) or the file's name plus
    the key. ``scripts/schema-types.mjs`` names the TypeScript types by the same rule."""
    names: dict[tuple[str, str], str] = {}
    for file_name, schema in schema_files().items():
        top = _type_name(schema.get("title")) or _pascal(file_name.removesuffix(".json"))
        names[(file_name, "")] = top
        for key, sub in schema.get("$defs", {}).items():
            names[(file_name, key)] = _type_name(sub.get("title")) or top + _pascal(key)
    if len(set(names.values())) != len(names):
        raise ValueError(f"two schemas have the same component name: {sorted(names.values())}")
    return names


@cache
def components() -> dict[str, Any]:
    """The schema files bundled into OpenAPI components (one per file and per ``$defs`` entry)."""
    sources = schema_files()
    names = component_names()

    def rewrite(node: Any, file_name: str) -> Any:
        if isinstance(node, list):
            return [rewrite(n, file_name) for n in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                target, _, pointer = value.partition("#")
                target = target or file_name
                match = re.fullmatch(r"/\$defs/([^/]+)", pointer)
                if pointer and not match:
                    raise ValueError(f"{file_name}: only refs to a file or to its $defs are bundled: {value}")
                out[key] = "#/components/schemas/" + names[(target, match.group(1) if match else "")]
            else:
                out[key] = rewrite(value, file_name)
        return out

    bundled: dict[str, Any] = {}
    for file_name, schema in sources.items():
        top = {k: v for k, v in schema.items() if k not in {"$schema", "$id", "$defs", "version", "personal-data"}}
        bundled[names[(file_name, "")]] = rewrite(top, file_name)
        for key, sub in schema.get("$defs", {}).items():
            bundled[names[(file_name, key)]] = rewrite(sub, file_name)
    return bundled


def routes(handler_list: Iterable[tuple[str, Any]]) -> dict[str, list[str]]:
    """Endpoint (``status``, ...) -> the HTTP methods its handler implements, from the handlers list."""
    from tornado import web

    prefix = f"/{API_PREFIX}/"
    out: dict[str, list[str]] = {}
    for pattern, handler in handler_list:
        if not pattern.startswith(prefix):
            raise ValueError(f"route {pattern!r} is not under {prefix}")
        # A named group is a path parameter: (?P<name>[^/]+) -> {name}.
        endpoint = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", pattern[len(prefix) :]).replace(r"\.", ".")
        out[endpoint] = [m for m in HTTP_METHODS if getattr(handler, m) is not getattr(web.RequestHandler, m)]
    return out


def _operation(endpoint: str, method: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One operation of the document from its line in :data:`OPERATIONS` (or :data:`METRICS_OPERATION`)."""
    operation: dict[str, Any] = {
        "operationId": method + "_" + re.sub(r"\W+", "_", endpoint.removesuffix(".json")).strip("_"),
        "summary": spec["summary"],
        "responses": {},
    }
    if "parameters" in spec:
        operation["parameters"] = spec["parameters"]
    if "request" in spec:
        operation["requestBody"] = {
            "required": False,
            "description": "An empty body means {}.",
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{spec['request']}"}}},
        }
    for status, (description, component) in spec["answers"].items():
        if status.startswith("2") and "media_type" in spec:  # not JSON: the body is text
            content = {spec["media_type"]: {"schema": {"type": "string"}}}
        else:
            schema = {"$ref": f"#/components/schemas/{component}"} if component else {"type": "object"}
            content = {"application/json": {"schema": schema}}
        operation["responses"][status] = {"description": description, "content": content}
    return operation


def _with_misconfigured(spec: dict[str, Any]) -> dict[str, Any]:
    """The operation's answers with the 503 of a misconfigured extension (beside its own 503, if any)."""
    answers = dict(spec["answers"])
    own = answers.get("503")
    description = MISCONFIGURED_ANSWER[0] if own is None else f"{own[0]} Or: {MISCONFIGURED_ANSWER[0]}"
    answers["503"] = (description, "ErrorAnswer")
    return {**spec, "answers": answers}


def document(handler_list: Iterable[tuple[str, Any]], base_url: str = "/") -> dict[str, Any]:
    """The OpenAPI 3.1 document of the routes in ``handler_list``, served under ``base_url``."""
    paths: dict[str, Any] = {}
    table = routes(handler_list)
    missing = set(OPERATIONS) - set(table)
    if missing:
        raise ValueError(f"openapi.OPERATIONS describes endpoints no handler serves: {sorted(missing)}")
    for endpoint, methods in table.items():
        described = OPERATIONS.get(endpoint, {})
        if sorted(described) != sorted(methods):
            raise ValueError(f"{endpoint}: handler methods {methods}, described {sorted(described)}")
        paths[f"/{endpoint}"] = {
            method: _operation(endpoint, method, _with_misconfigured(described[method])) for method in methods
        }
    metrics_prefix, _, metrics_endpoint = METRICS_PATH.rpartition("/")
    if f"/{metrics_endpoint}" in paths:
        raise ValueError(f"an API endpoint is named like the metrics endpoint: /{metrics_endpoint}")
    paths[f"/{metrics_endpoint}"] = {
        "servers": [{"url": base_url.rstrip("/") + "/" + metrics_prefix}],
        "get": _operation(metrics_endpoint, "get", METRICS_OPERATION),
    }
    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "jupyter-suspend REST API",
            "version": __version__,
            "description": (
                "Suspend a notebook environment safely and resume it. Every endpoint needs an authenticated "
                "user authorized for the jupyter_suspend resource (read for GET, write for POST). "
                "Lifecycle events are emitted on jupyter_server's event bus with the schema LifecycleEvent."
            ),
        },
        "servers": [{"url": base_url.rstrip("/") + "/" + API_PREFIX}],
        "security": [{"token": []}, {"cookie": []}],
        "paths": paths,
        "components": {
            "schemas": components(),
            "securitySchemes": {
                "token": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "description": "'token <server token>', as jupyter_server accepts it.",
                },
                "cookie": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "_xsrf",
                    "description": "The browser's login cookie; a POST or DELETE also needs the X-XSRFToken header.",
                },
            },
        },
    }


@cache
def _default_document() -> dict[str, Any]:
    from .handlers import handlers

    return document(handlers())


@cache
def answer_validator(endpoint: str, method: str, status: int) -> Draft202012Validator:
    """The validator of one answer, looked up in the document by path, method and status."""
    doc = _default_document()
    operation = doc["paths"].get(f"/{endpoint}", {}).get(method.lower())
    if operation is None:
        raise ContractError(f"{method} {endpoint} is not in the OpenAPI document")
    response = operation["responses"].get(str(status))
    if response is None:
        raise ContractError(f"{method} {endpoint} answered {status}, which the OpenAPI document does not list")
    if "application/json" not in response.get("content", {}):
        raise ContractError(f"{method} {endpoint} answers {status} with no JSON body to check")
    schema = response["content"]["application/json"]["schema"]
    return Draft202012Validator({**schema, "components": doc["components"]})


def _deepest(error: ValidationError) -> ValidationError:
    """For a oneOf ("an object or null"), the error of the branch that came closest, recursively."""
    while error.context:
        error = max(error.context, key=lambda e: (len(e.absolute_path), -len(e.context or [])))
    return error


def check_answer(method: str, endpoint: str, status: int, body: bytes | str | Any) -> None:
    """Raise :class:`ContractError` unless ``body`` is what ``method endpoint`` may answer with ``status``."""
    validator = answer_validator(endpoint, method, status)
    if isinstance(body, bytes | str):
        try:
            body = json.loads(body)
        except ValueError as exc:
            raise ContractError(f"{method} {endpoint} answered {status} with a body that is not JSON") from exc
    errors = sorted(validator.iter_errors(body), key=lambda e: list(e.path))
    if errors:
        errors = [_deepest(e) for e in errors]
        lines = [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:300]}" for e in errors[:5]]
        raise ContractError(f"{method} {endpoint} {status} does not match its schema:\n  " + "\n  ".join(lines))
