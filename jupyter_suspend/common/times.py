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


#: Epoch values at or above this are read as milliseconds: 1e11 s is the year 5138, 1e11 ms is March 1973.
MILLISECONDS_FROM = 100_000_000_000
#: Nothing we read lies beyond the year 5138 in seconds once milliseconds are divided out (a value in µs or ns).
LATEST_EPOCH = 100_000_000_000


def epoch_by_magnitude(value: Any) -> float | None:
    """A Kubeflow Workspace's epoch time (``status.pauseTime``, ``activity.lastActivity``, ``lastUpdate``) in
    seconds, whichever unit it was written in; None for 0 (unset), negatives, non-numbers and absurd values.

    kubeflow/notebooks ``notebooks-v2`` writes ``metav1.Now().UnixMilli()`` (workspace_controller.go,
    workspace_activity.go); ``v2.0-alpha-branch`` wrote ``Unix()`` seconds. The magnitude tells them apart:
    no real time is both before 1973 in milliseconds and after the year 5138 in seconds.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    if number != number or number <= 0:  # NaN, unset, negative
        return None
    if number >= MILLISECONDS_FROM:
        number /= 1000.0
    return number if number < LATEST_EPOCH else None
