"""One API contract: the JSON schemas of every request and answer, the OpenAPI
3.1 document built from them and the route table, and real answers held to it.

Every answer the other tests receive is checked too: ``SuspendClient.call``
(conftest) and ``ServerProcess.request`` (servers) pass each one to
``openapi.check_answer``, which looks its schema up in the OpenAPI document
by path, method and status.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_openapi
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from tornado import web
from tornado.httpclient import HTTPClientError

from jupyter_suspend.common.api import API_PREFIX
from jupyter_suspend.server import openapi
from jupyter_suspend.server.handlers import handlers, metrics_handlers
from jupyter_suspend.server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE

from .conftest import SuspendClient

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "src" / "__tests__" / "fixtures.json"
SCHEMA_BASE = "https://schema.jupyter.org/jupyter_suspend/api/v1/"
#: The answer schemas the contract must have, beside the request schemas.
ANSWER_SCHEMAS = {
    "status.json",
    "preflight.json",
    "operation.json",
    "timeline.json",
    "verify-response.json",
    "error.json",
    "lifecycle-event.json",
}


def registry() -> Registry:
    resources = [
        (schema["$id"], Resource.from_contents(schema, default_specification=DRAFT202012))
        for schema in openapi.schema_files().values()
    ]
    return Registry().with_resources(resources)


def schema_validator(name: str) -> Draft202012Validator:
    """A validator of the schema file itself (not the bundled copy), its $refs resolved by $id."""
    return Draft202012Validator(openapi.schema_files()[name], registry=registry())


def fixture_schema(key: str) -> str | None:
    """The schema of a recorded answer, by its name (as src/__tests__/contract.spec.ts reads them)."""
    for prefix, name in [
        ("status_", "status.json"),
        ("preflight", "preflight.json"),
        ("started_", "operation.json"),
        ("timeline", "timeline.json"),
        ("verify_", "verify-response.json"),
        ("error_", "error.json"),
    ]:
        if key.startswith(prefix):
            return name
    return None


# -- the schemas ------------------------------------------------------------------------------------------------------
def test_every_schema_is_draft_2020_12_with_its_own_id() -> None:
    schemas = openapi.schema_files()
    assert set(schemas) >= ANSWER_SCHEMAS
    for name, schema in schemas.items():
        Draft202012Validator.check_schema(schema)
        if name != "lifecycle-event.json":  # a jupyter_events schema: its $id is the event schema id
            assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema", name
            assert schema["$id"] == SCHEMA_BASE + name


def test_every_reference_resolves() -> None:
    reg = registry()
    for name, schema in openapi.schema_files().items():
        resolver = reg.resolver(base_uri=schema["$id"])

        def walk(node: Any, resolver: Any = resolver, name: str = name) -> None:
            if isinstance(node, dict):
                if isinstance(node.get("$ref"), str):
                    resolver.lookup(node["$ref"])  # raises if it names nothing
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(schema)


# -- the OpenAPI document ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_openapi_document_is_valid() -> None:
    document = openapi.document(handlers(), "/user/someone/")
    validate_openapi(document)  # OpenAPI 3.1, its schemas in the 2020-12 dialect
    assert document["openapi"] == "3.1.0"
    assert document["servers"] == [{"url": f"/user/someone/{API_PREFIX}"}]
    ids = [op["operationId"] for item in document["paths"].values() for m, op in item.items() if m != "servers"]
    assert len(ids) == len(set(ids)), ids


def test_every_route_is_in_the_document_and_nothing_else() -> None:
    document = openapi.document(handlers())
    prefix = f"/{API_PREFIX}/"
    served = {}
    for pattern, handler in handlers():
        methods = {m for m in openapi.HTTP_METHODS if getattr(handler, m) is not getattr(web.RequestHandler, m)}
        path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", pattern[len(prefix) :])  # a named group is {param}
        served["/" + path.replace("\\.", ".")] = methods
    # The Prometheus endpoint, outside the JSON API: described under a server of its own.
    for pattern, handler in metrics_handlers():
        methods = {m for m in openapi.HTTP_METHODS if getattr(handler, m) is not getattr(web.RequestHandler, m)}
        served["/" + pattern.rsplit("/", 1)[1]] = methods | {"servers"}
    assert set(document["paths"]) == set(served)
    for path, methods in served.items():
        assert set(document["paths"][path]) == methods, path


def test_the_metrics_endpoint_is_documented_as_prometheus_text() -> None:
    document = openapi.document(handlers(), "/user/someone/")
    item = document["paths"]["/metrics"]
    assert item["servers"] == [{"url": "/user/someone/jupyter-suspend"}]  # GET {base_url}jupyter-suspend/metrics
    ok = item["get"]["responses"]["200"]["content"]
    assert list(ok) == [METRICS_CONTENT_TYPE]
    assert METRICS_CONTENT_TYPE.startswith("text/plain; version=")
    assert item["get"]["responses"]["403"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorAnswer"
    }
    with pytest.raises(openapi.ContractError, match="no JSON body"):
        openapi.check_answer("GET", "metrics", 200, b"# HELP x\n")


def test_a_handler_method_without_a_description_fails_the_build() -> None:
    from jupyter_suspend.server.handlers import SuspendHandler

    with pytest.raises(ValueError, match="handler methods"):
        openapi.document([*handlers()[:-1], (f"/{API_PREFIX}/openapi\\.json", SuspendHandler)])
    with pytest.raises(ValueError, match="no handler serves"):
        openapi.document(handlers()[:-1])


def test_every_answer_schema_is_used() -> None:
    document = openapi.document(handlers())
    used = {
        response["content"]["application/json"]["schema"].get("$ref", "").rsplit("/", 1)[-1]
        for item in document["paths"].values()
        for method, operation in item.items()
        if method != "servers"
        for response in operation["responses"].values()
        if "application/json" in response["content"]
    }
    assert {"Status", "Preflight", "OperationStarted", "Timeline", "Verification", "ErrorAnswer"} <= used


def test_check_answer_names_what_drifted() -> None:
    status = json.loads(FIXTURES.read_text())["status_running"]
    del status["can_suspend"]
    with pytest.raises(openapi.ContractError, match="'can_suspend' is a required property"):
        openapi.check_answer("GET", "status", 200, status)
    with pytest.raises(openapi.ContractError, match="'surprise' was unexpected"):
        openapi.check_answer("GET", "status", 200, {**status, "can_suspend": True, "surprise": 1})
    with pytest.raises(openapi.ContractError, match="does not list"):
        openapi.check_answer("GET", "status", 418, {})
    with pytest.raises(openapi.ContractError, match="not JSON"):
        openapi.check_answer("GET", "status", 200, b"<html>")


# -- the plugin's fixtures --------------------------------------------------------------------------------------------
def test_the_jest_fixtures_match_the_schemas() -> None:
    """The same check as src/__tests__/contract.spec.ts, here so that pytest alone catches stale fixtures."""
    recorded = json.loads(FIXTURES.read_text())
    for key, answer in recorded.items():
        name = fixture_schema(key)
        assert name is not None, f"fixtures.json: no schema for {key}"
        errors = [e.message for e in schema_validator(name).iter_errors(answer)]
        assert not errors, (key, errors[:5])


# -- real answers -----------------------------------------------------------------------------------------------------
async def test_served_document_equals_the_built_one(suspend_api: SuspendClient, jp_base_url: str) -> None:
    served = await suspend_api.json("GET", "openapi.json")
    assert served == json.loads(json.dumps(openapi.document(handlers(), jp_base_url)))


async def test_the_document_needs_a_login(jp_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("jupyter-suspend", "api", "openapi.json", headers={"Authorization": ""})
    assert info.value.code == 403
    assert info.value.response is not None
    openapi.check_answer("GET", "openapi.json", 403, info.value.response.body)


def _recorder() -> Any:
    spec = importlib.util.spec_from_file_location("record_fixtures", ROOT / "scripts" / "record-fixtures.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_real_answers_in_every_state(tmp_path: Path) -> None:
    """A real server walked through running, suspended, ready (cold) and failed: the walk
    ``scripts/record-fixtures.py`` records the jest fixtures with. ``ServerProcess.request``
    checks each answer against the document as it arrives; here, against the schema files."""
    answers = _recorder().record(tmp_path)
    states = {a["state"] for k, a in answers.items() if k.startswith("status_")}
    assert states == {"running", "suspended", "ready", "failed"}
    assert {a["verdict"] for k, a in answers.items() if k.startswith("verify_")} == {"COLD"}
    assert set(answers) >= {"preflight", "timeline", "started_suspend", "started_resume", "error_conflict"}
    for key, answer in answers.items():
        name = fixture_schema(key)
        assert name is not None, key
        errors = [e.message for e in schema_validator(name).iter_errors(answer)]
        assert not errors, (key, errors[:5])
    # The recorded fixtures have the same answers (not the same values).
    assert set(json.loads(FIXTURES.read_text())) == set(answers)
