"""Prometheus metrics of the suspend lifecycle, folded from journal entries.

Served at ``GET {base_url}jupyter-suspend/metrics`` (authenticated, like the
REST API; a scrape never counts as user activity). The metrics live in a
registry of their own (never ``prometheus_client``'s global one: two servers
in one process, as in the tests, stay apart) and are written by
``prometheus_client`` itself.

Every figure comes from the journal: :meth:`SuspendMetrics.observe` folds one
entry, the journal calls it for each entry it appends (``Journal.listeners``),
and at server start :meth:`SuspendMetrics.rebuild` folds the whole journal, so
a restarted server (a pod replaced after a restore) does not start its
counters from zero (what journal rotation had dropped by then is missing from them).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..common.api import API_PREFIX
from .replay import EntryKind

#: Beside the JSON API, not in it (``jupyter-suspend/metrics``): a scrape target answers in Prometheus' format.
METRICS_PATH = API_PREFIX.rsplit("/", 1)[0] + "/metrics"
#: Content type of the exposition format prometheus_client writes.
CONTENT_TYPE: str = CONTENT_TYPE_LATEST
#: Step latencies range from a fraction of a second (a local flush) to many minutes (a GPU wait).
STEP_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, float("inf"))
STEPS = ("flush", "release", "restore", "resume_to_runnable")
#: Label values are cut here: a reason is written by people and must not grow the series without bound.
MAX_LABEL = 60

HELP_SUFFIX = " Rebuilt from the journal when the server starts: a restart does not reset it."


def _label(value: Any, default: str) -> str:
    text = value if isinstance(value, str) and value else default
    return text[:MAX_LABEL]


def reason_label(entry: dict[str, Any]) -> str:
    """A bounded label for why an automatic suspend happened or was cancelled.

    The journal's ``reason`` is a sentence with figures ("automatic suspend: idle 903 s (threshold 900 s...")
    that would make a new series per suspend; a cancel's ``by`` (activity, state, keep_running) is bounded
    already. Otherwise the words before the first figure ("idle")."""
    by = entry.get("by")
    if entry.get("kind") == "auto_suspend_cancelled" and isinstance(by, str) and by:
        return by[:MAX_LABEL]
    reason = entry.get("reason")
    text = re.sub(r"^automatic suspend:\s*", "", reason) if isinstance(reason, str) else ""
    head = re.split(r"[\d(;:,]", text, maxsplit=1)[0].strip()
    return (head or "unspecified")[:MAX_LABEL]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


@dataclass
class _Pending:
    """What an unfinished suspend cycle has told so far."""

    backend: str
    requested_at: float
    flushed_at: float | None = None
    released_at: float | None = None
    restores: dict[str, str] = field(default_factory=dict)


class _IdleCollector(Collector):
    """``jupyter_suspend_idle_seconds``, read at scrape time; absent while no activity was ever seen."""

    def __init__(self, read: Callable[[], float | None]):
        self.read = read

    def collect(self) -> Iterator[Metric]:
        try:
            last = self.read()
        except Exception:  # noqa: BLE001 - a scrape must not fail on the server's own activity reading
            last = None
        if last is None:
            return
        yield GaugeMetricFamily(
            "jupyter_suspend_idle_seconds",
            "Seconds since the server last saw user activity (our own endpoints never count).",
            value=max(0.0, time.time() - last),
        )


class SuspendMetrics:
    """The counters and histograms, and the fold of journal entries into them."""

    def __init__(self, backend: str, last_activity: Callable[[], float | None] | None = None):
        self.backend = backend
        self.registry = CollectorRegistry()
        r = self.registry
        self.suspends = Counter(
            "jupyter_suspend_suspends",
            "Suspends that ended, by outcome (succeeded, aborted, failed) and backend." + HELP_SUFFIX,
            ["outcome", "backend"],
            registry=r,
        )
        self.resumes = Counter(
            "jupyter_suspend_resumes",
            "Resumes that ended, by outcome (succeeded, failed), backend and restore (live, cold; none when "
            "it failed)." + HELP_SUFFIX,
            ["outcome", "backend", "restore"],
            registry=r,
        )
        self.steps = Histogram(
            "jupyter_suspend_step_seconds",
            "Latency of each step from the journal's marks: flush (suspend requested to flushed), release "
            "(flushed to node or memory released), restore (capacity available, else resume requested, to "
            "restored), resume_to_runnable (resume requested to first runnable cell)." + HELP_SUFFIX,
            ["step"],
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.checkpointed_bytes = Counter(
            "jupyter_suspend_checkpointed_bytes",
            "Bytes of application checkpoints written by suspends (the kernels' answers)." + HELP_SUFFIX,
            registry=r,
        )
        self.suspended_seconds = Counter(
            "jupyter_suspend_suspended_seconds",
            "Seconds the environment was released (node or memory released until capacity came back), counted "
            "when the cycle ends." + HELP_SUFFIX,
            ["backend"],
            registry=r,
        )
        self.auto_suspends = Counter(
            "jupyter_suspend_auto_suspends",
            "Automatic suspends requested by the idle policy, by workload class and reason." + HELP_SUFFIX,
            ["workload_class", "reason"],
            registry=r,
        )
        self.auto_suspends_cancelled = Counter(
            "jupyter_suspend_auto_suspends_cancelled",
            "Automatic suspends cancelled before they started (Keep running), by workload class and reason."
            + HELP_SUFFIX,
            ["workload_class", "reason"],
            registry=r,
        )
        if last_activity is not None:
            r.register(_IdleCollector(last_activity))
        self.misconfigured_settings = Gauge(
            "jupyter_suspend_misconfigured",
            "1 per setting that is wrong: the extension runs misconfigured (its API answers 503, no suspend, "
            'no idle policy) until the configuration is fixed and the server restarted; setting="" is 0 '
            "when every setting is right.",
            ["setting"],
            registry=r,
        )
        self.misconfigured_settings.labels("").set(0)
        self._pending: dict[str, _Pending] = {}
        self._last_cycle: str | None = None
        # Entries are appended from the event loop and from worker threads.
        self._lock = threading.Lock()

    def misconfigured(self, settings: Iterable[str]) -> None:
        """The extension runs misconfigured: one series at 1 per wrong setting (for alerting)."""
        self.misconfigured_settings.remove("")
        for setting in settings:
            self.misconfigured_settings.labels(_label(setting, "unknown")).set(1)

    # -- the fold ----------------------------------------------------------------------------
    def rebuild(self, entries: Iterable[dict[str, Any]]) -> None:
        """Fold a journal read at start-up (oldest first)."""
        for entry in entries:
            self.observe(entry)

    def observe(self, entry: dict[str, Any]) -> None:
        """Fold one journal entry (a listener of :class:`~jupyter_suspend.server.journal.Journal`)."""
        with self._lock:
            self._fold(entry)

    def _fold(self, entry: dict[str, Any]) -> None:
        kind, wall, op = entry.get("kind"), _number(entry.get("wall")), entry.get("operation_id")
        if kind == EntryKind.SERVER_STARTED.value and isinstance(entry.get("backend"), str):
            self.backend = entry["backend"]
        elif kind == EntryKind.SUSPEND_REQUESTED.value and isinstance(op, str) and wall is not None:
            backend = entry.get("backend")
            name = backend.get("name") if isinstance(backend, dict) else None
            self._pending[op] = _Pending(_label(name, self.backend), wall)
            self._last_cycle = op
            if entry.get("origin") == "idle_policy":
                self.auto_suspends.labels(
                    _label(entry.get("workload_class"), "unclassified"), reason_label(entry)
                ).inc()
        elif kind == "auto_suspend_cancelled":
            self.auto_suspends_cancelled.labels(
                _label(entry.get("workload_class"), "unclassified"), reason_label(entry)
            ).inc()
        elif kind == EntryKind.FLUSHED.value and (pending := self._cycle(op)) and wall is not None:
            pending.flushed_at = wall
            self._step("flush", pending.requested_at, wall)
            self.checkpointed_bytes.inc(_checkpoint_bytes(entry))
        elif kind == EntryKind.RELEASED.value and (pending := self._cycle(op)):
            released = _number(entry.get("node_released_at")) or _number(entry.get("environment_stopped_at"))
            if released is not None and not entry.get("partial"):
                pending.released_at = released
                self._step("release", pending.flushed_at or pending.requested_at, released)
        elif kind == EntryKind.RESTORED.value:
            self._restored(entry)
        elif kind == EntryKind.OPERATION_FINISHED.value:
            self._finished(entry)

    def _cycle(self, cycle_id: Any) -> _Pending | None:
        return self._pending.get(cycle_id) if isinstance(cycle_id, str) else None

    def _step(self, step: str, start: float | None, end: float | None) -> None:
        if start is not None and end is not None and end >= start:
            self.steps.labels(step).observe(end - start)

    def _restored(self, entry: dict[str, Any]) -> None:
        cycle_id = entry.get("cycle_id") or entry.get("operation_id")
        pending = self._cycle(cycle_id)
        restore = _label(entry.get("restore"), "cold")
        requested = _number(entry.get("resume_requested_at"))
        capacity = _number(entry.get("capacity_available_at"))
        restored = _number(entry.get("restored_at"))
        self._step("restore", capacity or requested, restored)
        self._step("resume_to_runnable", requested, _number(entry.get("first_cell_runnable_at")))
        backend = pending.backend if pending else self.backend
        self.resumes.labels("succeeded", backend, restore).inc()
        if pending is not None and pending.released_at is not None:
            back = capacity or restored
            if back is not None and back >= pending.released_at:
                self.suspended_seconds.labels(backend).inc(back - pending.released_at)
        if isinstance(cycle_id, str):
            self._pending.pop(cycle_id, None)

    def _finished(self, entry: dict[str, Any]) -> None:
        op, kind = entry.get("operation_id"), entry.get("operation_kind")
        outcome = _label(entry.get("outcome"), "unknown")
        if kind == "suspend":
            pending = self._cycle(op)
            self.suspends.labels(outcome, pending.backend if pending else self.backend).inc()
            if outcome != "succeeded" and isinstance(op, str):
                self._pending.pop(op, None)  # nothing released: no resume will follow
        elif kind == "resume" and outcome != "succeeded":
            # A succeeded resume was counted at its ``restored`` entry (a live return has no resume operation).
            pending = self._cycle(self._last_cycle)
            self.resumes.labels(outcome, pending.backend if pending else self.backend, "none").inc()

    # -- the exposition ----------------------------------------------------------------------
    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _checkpoint_bytes(entry: dict[str, Any]) -> float:
    total = 0.0
    for kernel in entry.get("kernels") or []:
        checkpoints = kernel.get("checkpoints") if isinstance(kernel, dict) else None
        for checkpoint in checkpoints or []:
            size = _number(checkpoint.get("bytes")) if isinstance(checkpoint, dict) else None
            if size is not None and size > 0:
                total += size
    return total
