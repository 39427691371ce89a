"""Request bodies: size limit, JSON parsing, JSON-schema validation."""

from __future__ import annotations

import json
import re
from functools import cache
from importlib.resources import files
from typing import Any

from jsonschema import Draft202012Validator

SCHEMA_PACKAGE = "jupyter_suspend.common.schemas"
REQUEST_SCHEMAS = ("suspend", "checkpoint", "resume", "acknowledge", "verify")


#: No request schema nests deeper than a few levels; anything deeper is refused
#: before it reaches the JSON decoder's or the validator's recursion.
MAX_DEPTH = 32
#: Validation messages quote the offending value: keep them short.
MAX_MESSAGE_CHARS = 300


class BadRequest(ValueError):
    """The body is malformed, too large or does not match its schema."""


def _depth(raw: bytes) -> int:
    """More than MAX_DEPTH when brackets and braces outside strings nest deeper (one linear scan, no
    recursion), else 0."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return 0  # the usual small body: nothing to scan
    depth = 0
    for match in _TOKEN.finditer(raw):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > MAX_DEPTH:
                return depth  # deep enough to refuse: stop here
        elif token in (b"]", b"}"):
            depth -= 1
    return 0


#: A whole string (escapes included; an unterminated one runs to the end, so that no match ever fails and
#: backtracks), or one bracket or brace.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\(?:.|\Z))*(?:"|\Z)|[\[\]{}]', re.DOTALL)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _short(text: str) -> str:
    """Cut the middle: jsonschema quotes the value first and says what is wrong with it last."""
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    half = (MAX_MESSAGE_CHARS - 1) // 2
    return text[:half] + "…" + text[-half:]


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
        if _depth(raw) > MAX_DEPTH:
            raise BadRequest(f"request body is nested more than {MAX_DEPTH} levels deep")
        try:
            data = json.loads(raw, parse_constant=_no_constant)
        except RecursionError as exc:  # the scan above should have caught it
            raise BadRequest("request body is nested too deeply") from exc
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(_short(f"request body is not valid JSON: {exc}")) from exc
    try:
        errors = sorted(request_validator(schema_name).iter_errors(data), key=lambda e: list(e.absolute_path))
        messages = []
        for error in errors[:5]:
            where = "/".join(str(p) for p in error.absolute_path) or "body"
            messages.append(_short(f"{where}: {error.message}"))
    except RecursionError as exc:
        raise BadRequest("request body is nested too deeply") from exc
    if errors:
        raise BadRequest("invalid request: " + "; ".join(messages))
    assert isinstance(data, dict)
    return data
