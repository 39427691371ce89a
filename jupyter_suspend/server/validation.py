"""Request bodies: size limit, JSON parsing, JSON-schema validation."""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from typing import Any

from jsonschema import Draft202012Validator

SCHEMA_PACKAGE = "jupyter_suspend.common.schemas"
REQUEST_SCHEMAS = ("suspend", "checkpoint", "resume", "acknowledge", "verify")


class BadRequest(ValueError):
    """The body is malformed, too large or does not match its schema."""


@cache
def request_validator(name: str) -> Draft202012Validator:
    text = files(SCHEMA_PACKAGE).joinpath(f"{name}-request.json").read_text()
    schema = json.loads(text)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def parse_body(raw: bytes, schema_name: str, max_bytes: int) -> dict[str, Any]:
    """Parse and validate a JSON body; an empty body means ``{}``."""
    if len(raw) > max_bytes:
        raise BadRequest(f"request body is {len(raw)} bytes; the limit is {max_bytes}")
    if not raw.strip():
        data: Any = {}
    else:
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    errors = sorted(request_validator(schema_name).iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        messages = []
        for error in errors[:5]:
            where = "/".join(str(p) for p in error.absolute_path) or "body"
            messages.append(f"{where}: {error.message}")
        raise BadRequest("invalid request: " + "; ".join(messages))
    assert isinstance(data, dict)
    return data
