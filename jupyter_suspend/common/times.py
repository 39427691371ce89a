"""Times as the Kubernetes API and our journal write them (RFC 3339), read one way everywhere."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


def rfc3339(value: Any) -> datetime | None:
    """An RFC 3339 time (``...Z`` or an offset) as an aware datetime; None for anything else.

    A time without an offset is taken as UTC (what the API means), never as the reader's local time.
    """
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def rfc3339_epoch(value: Any) -> float | None:
    """:func:`rfc3339` as epoch seconds."""
    parsed = rfc3339(value)
    return parsed.timestamp() if parsed is not None else None


def epoch(value: Any) -> float | None:
    """A datetime (what jupyter_server keeps: ``last_activity``) as epoch seconds; None for anything else.

    ``datetime.timestamp`` as it is: an aware datetime is exact, a naive one is read as local time.
    """
    return value.timestamp() if isinstance(value, datetime) else None
