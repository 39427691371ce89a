"""The idle policy: workload classes, the break-even guard, the warning, *Keep running*.

In the spirit of Kubeflow's WorkspaceKind ``activityRules``
(``secondsSinceActive``, ``minRunningSeconds``), each *workload class* says when
an idle session may be suspended automatically. The class of a session comes
from configuration: the environment variable ``JUPYTER_SUSPEND_WORKLOAD_CLASS``
(the platform's environment type), else a notebook's metadata
``jupyter_suspend.workload_class``, else its kernel spec's metadata (same key),
else ``IdlePolicy.default_workload_class``.

:func:`decide` is pure: the activity reading, the class and the measured cost
of a cycle in, one decision with its figures out. :class:`IdlePolicy` runs it
on a timer: a decision to suspend first opens a warning (an event, the status,
the plugin's notification with *Keep running*); activity or *Keep running*
during the warning cancels it (journaled); when the warning ends the suspend
starts with ``origin="idle_policy"``, the class, and the reason with its figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from traitlets import Bool, Dict, Float, TraitError, Unicode, validate
from traitlets.config import LoggingConfigurable

from .activity import ActivityMonitor, Reading
from .configuration import CheckedConfigurable, Problem, number_problems
from .journal import JournalWriteError, utc_iso
from .states import Action, IllegalState, State

if TYPE_CHECKING:
    from .lifecycle import Lifecycle

WORKLOAD_CLASS_ENV = "JUPYTER_SUSPEND_WORKLOAD_CLASS"
METADATA_KEY = "jupyter_suspend"
#: Journal entry of a warning that ended without a suspend (Keep running, activity, the state).
AUTO_SUSPEND_CANCELLED = "auto_suspend_cancelled"
ORIGIN = "idle_policy"
EVENT_SCHEMA_ID = "https://schema.jupyter.org/jupyter_suspend/api/v1/idle-event.json"
#: Cycles the break-even guard averages over (the newest).
CYCLES_CONSIDERED = 5


@dataclass(frozen=True)
class WorkloadClass:
    """When a session of this class may be suspended automatically."""

    name: str
    description: str = ""
    #: Seconds without activity before a suspend is considered.
    idle_seconds: float = 1800.0
    #: The environment runs at least this long (since its start or resume) before an automatic suspend.
    min_running_seconds: float = 0.0
    #: Seconds of warning (with Keep running) before the suspend starts.
    warning_seconds: float = 120.0
    #: Suspend even while a cell runs (never by default: a running cell is work).
    suspend_while_busy: bool = False
    #: Keep the memory (snapshot) where the backend can; false: files and checkpoints only.
    keep_memory: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


DEFAULT_CLASSES: dict[str, dict[str, Any]] = {
    "interactive-gpu": {
        "description": "An interactive session on a GPU: suspend after 30 idle minutes, "
        "once it has run 10 minutes; keep the memory.",
        "idle_seconds": 1800.0,
        "min_running_seconds": 600.0,
        "warning_seconds": 120.0,
        "keep_memory": True,
    },
    "long-training": {
        "description": "Long training runs: never while a cell runs; suspend once it has ended and the session "
        "has been idle for 15 minutes.",
        "idle_seconds": 900.0,
        "min_running_seconds": 0.0,
        "warning_seconds": 300.0,
        "keep_memory": True,
    },
    "small-cpu": {
        "description": "A small CPU notebook: stop after 10 idle minutes with files and checkpoints only.",
        "idle_seconds": 600.0,
        "min_running_seconds": 0.0,
        "warning_seconds": 60.0,
        "keep_memory": False,
    },
}

_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "description": (str,),
    "idle_seconds": (int, float),
    "min_running_seconds": (int, float),
    "warning_seconds": (int, float),
    "suspend_while_busy": (bool,),
    "keep_memory": (bool,),
}


def parse_classes(configured: dict[str, Any]) -> dict[str, WorkloadClass]:
    """The default classes, updated and extended by the configured ones (ValueError says what is wrong)."""
    merged: dict[str, dict[str, Any]] = {name: dict(spec) for name, spec in DEFAULT_CLASSES.items()}
    for name, spec in configured.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"workload class name {name!r} is not allowed; allowed: a non-empty string")
        if not isinstance(spec, dict):
            raise ValueError(
                f"workload class {name!r}: expected a dict of settings, got {type(spec).__name__}; "
                f"allowed keys: {', '.join(_FIELD_TYPES)}"
            )
        merged.setdefault(name, {}).update(spec)
    classes = {}
    allowed = {f.name for f in fields(WorkloadClass)} - {"name"}
    for name, spec in merged.items():
        unknown = set(spec) - allowed
        if unknown:
            raise ValueError(
                f"workload class {name!r}: unknown settings {sorted(unknown)}; allowed: {', '.join(sorted(allowed))}"
            )
        for key, value in spec.items():
            types = _FIELD_TYPES[key]
            if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
                raise ValueError(
                    f"workload class {name!r}: {key} must be {types[-1].__name__}, got {value!r}; "
                    f"allowed: {'a number of seconds, 0 or more' if float in types else types[-1].__name__}"
                )
            if isinstance(value, (int, float)) and not isinstance(value, bool) and not value >= 0:
                raise ValueError(
                    f"workload class {name!r}: {key} must not be negative, got {value!r}; allowed: 0 or more"
                )
        classes[name] = WorkloadClass(name=name, **spec)
    return classes


# -- the break-even guard ------------------------------------------------------------
@dataclass
class BreakEven:
    """Would a suspend now pay? The expected idle gap against this environment's own cycle cost."""

    cycle_cost_seconds: float
    cost_source: str
    expected_idle_seconds: float
    expected_source: str
    factor: float

    @property
    def pays(self) -> bool:
        return self.expected_idle_seconds >= self.factor * self.cycle_cost_seconds

    def to_dict(self) -> dict[str, Any]:
        return {
            "pays": self.pays,
            "expected_idle_seconds": round(self.expected_idle_seconds, 3),
            "expected_source": self.expected_source,
            "cycle_cost_seconds": round(self.cycle_cost_seconds, 3),
            "cost_source": self.cost_source,
            "factor": self.factor,
        }


def break_even(timeline: dict[str, Any], idle_seconds: float, default_cycle_seconds: float, factor: float) -> BreakEven:
    """The cost of a cycle is its measured suspend plus resume-to-runnable (median of the newest
    cycles that have both; ``default_cycle_seconds`` before the first). The expected idle gap is how
    long the user stayed away after past suspends (median); with no such history, the idle time so
    far (having been idle that long, as long again is the estimate)."""
    cycles = timeline.get("cycles", [])
    costs = []
    away = []
    for cycle in cycles[-CYCLES_CONSIDERED:]:
        durations = cycle.get("durations") or {}
        suspend, resume = durations.get("suspend"), durations.get("resume_to_runnable")
        if suspend is not None and resume is not None:
            costs.append(float(suspend) + float(resume))
        if cycle.get("outcome") == "resumed" and durations.get("suspended") is not None:
            away.append(float(durations["suspended"]))
    if costs:
        cost, cost_source = statistics.median(costs), f"measured: median suspend + resume of {len(costs)} cycle(s)"
    else:
        cost, cost_source = default_cycle_seconds, "configured default (no measured cycle yet)"
    if away:
        expected, expected_source = statistics.median(away), f"median time away after {len(away)} suspend(s)"
    else:
        expected, expected_source = idle_seconds, "idle time so far (no past suspend to learn from)"
    return BreakEven(cost, cost_source, expected, expected_source, factor)


# -- the decision --------------------------------------------------------------------
#: What the policy would do now.
DISABLED, NOT_NOW, ACTIVE, WAIT, REFUSED, SUSPEND = "disabled", "not_now", "active", "wait", "refused", "suspend"


@dataclass
class Decision:
    action: str
    reason: str
    figures: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "reason": self.reason, "figures": self.figures}


def decide(
    *,
    enabled: bool,
    can_suspend: str | None,
    reading: Reading,
    workload: WorkloadClass,
    running_seconds: float,
    guard: BreakEven,
) -> Decision:
    """``can_suspend``: None when a suspend may start now, else why not."""
    idle = reading.idle_seconds
    figures: dict[str, Any] = {
        "idle_seconds": round(idle, 3),
        "idle_threshold_seconds": workload.idle_seconds,
        "running_seconds": round(running_seconds, 3),
        "min_running_seconds": workload.min_running_seconds,
        "break_even": guard.to_dict(),
    }
    if not enabled:
        return Decision(DISABLED, "the idle policy is off (IdlePolicy.enabled)", figures)
    if can_suspend is not None:
        return Decision(NOT_NOW, f"no suspend can start now: {can_suspend}", figures)
    if reading.cell_running and not workload.suspend_while_busy:
        return Decision(ACTIVE, f"a cell is running; the {workload.name} class never suspends a running cell", figures)
    active = [name for name in reading.active_now if name != "kernel_execution" or not workload.suspend_while_busy]
    if active:
        return Decision(ACTIVE, f"active now: {', '.join(active)}", figures)
    if idle < workload.idle_seconds:
        last = reading.last
        why = f" (last activity: {last.name})" if last else ""
        return Decision(WAIT, f"idle {idle:.0f} s of the {workload.idle_seconds:g} s threshold{why}", figures)
    if running_seconds < workload.min_running_seconds:
        return Decision(
            WAIT,
            f"running {running_seconds:.0f} s of the {workload.min_running_seconds:g} s minimum before a suspend",
            figures,
        )
    if not guard.pays:
        return Decision(
            REFUSED,
            f"a suspend would not pay: expected idle gap {guard.expected_idle_seconds:.0f} s "
            f"({guard.expected_source}) is shorter than {guard.factor:g} x the cycle cost "
            f"{guard.cycle_cost_seconds:.0f} s ({guard.cost_source})",
            figures,
        )
    return Decision(
        SUSPEND,
        f"idle {idle:.0f} s (threshold {workload.idle_seconds:g} s, class {workload.name}); "
        f"expected idle gap {guard.expected_idle_seconds:.0f} s >= cycle cost {guard.cycle_cost_seconds:.0f} s",
        figures,
    )


# -- which class ---------------------------------------------------------------------
@dataclass
class ClassChoice:
    workload: WorkloadClass
    source: str  # environment, notebook, kernelspec, default
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {**self.workload.to_dict(), "source": self.source, "detail": self.detail}


def _named_class(metadata: Any) -> str | None:
    section = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
    name = section.get("workload_class") if isinstance(section, dict) else None
    return name if isinstance(name, str) and name else None


class ClassResolver:
    """The class of the session, from the environment, the notebooks' or the kernel specs' metadata."""

    def __init__(self, lifecycle: Lifecycle, kernel_spec_manager: Any, environ: dict[str, str] | None = None):
        self.lifecycle = lifecycle
        self.kernel_spec_manager = kernel_spec_manager
        self.environ = os.environ if environ is None else environ
        # path -> (mtime_ns, class name or None): a notebook is read again only when it changed.
        self._notebooks: dict[str, tuple[int, str | None]] = {}

    def _notebook_class(self, path: str) -> str | None:
        os_path = self.lifecycle.environment.os_path(path)
        if os_path is None:
            return None
        try:
            mtime = os.stat(os_path).st_mtime_ns
            cached = self._notebooks.get(path)
            if cached is not None and cached[0] == mtime:
                return cached[1]
            with open(os_path, encoding="utf-8") as f:
                name = _named_class(json.load(f).get("metadata"))
        except (OSError, ValueError, AttributeError):
            return None  # unreadable or not a notebook: it names no class
        self._notebooks[path] = (mtime, name)
        return name

    def _kernelspec_class(self, kernel_name: str) -> str | None:
        try:
            spec = self.kernel_spec_manager.get_kernel_spec(kernel_name)
        except Exception:  # noqa: BLE001 - a kernel spec that is gone names no class
            return None
        return _named_class(getattr(spec, "metadata", None))

    async def resolve(self, classes: dict[str, WorkloadClass], default: str) -> ClassChoice:
        unknown: list[str] = []

        def known(name: str | None, where: str) -> bool:
            if name is None:
                return False
            if name not in classes:
                unknown.append(f"{where} names unknown class {name!r}")
                return False
            return True

        name = self.environ.get(WORKLOAD_CLASS_ENV)
        if known(name, WORKLOAD_CLASS_ENV):
            assert name is not None
            return ClassChoice(classes[name], "environment", f"{WORKLOAD_CLASS_ENV}={name}")
        named: list[tuple[WorkloadClass, str, str]] = []
        kernels = await self.lifecycle.environment.kernels()
        for kernel in kernels:
            if kernel.path and kernel.path.endswith(".ipynb"):
                name = await asyncio.to_thread(self._notebook_class, kernel.path)
                if known(name, kernel.path):
                    assert name is not None
                    named.append((classes[name], "notebook", f"{kernel.path} metadata"))
                    continue
            name = self._kernelspec_class(kernel.kernel_name)
            if known(name, f"kernel spec {kernel.kernel_name}"):
                assert name is not None
                named.append((classes[name], "kernelspec", f"kernel spec {kernel.kernel_name}"))
        if named:
            # Sessions that disagree: the most patient class wins (never suspended earlier than any asks).
            workload, source, detail = max(named, key=lambda n: (n[0].idle_seconds, n[0].min_running_seconds))
            return ClassChoice(workload, source, detail + ("; " + "; ".join(unknown) if unknown else ""))
        if default not in classes:
            raise ValueError(f"IdlePolicy.default_workload_class {default!r} is not a class: {sorted(classes)}")
        detail = "no environment variable or metadata names a class"
        return ClassChoice(classes[default], "default", "; ".join([detail, *unknown]))


# -- the warning and the timer ------------------------------------------------------
@dataclass
class Warning_:
    started_at: float
    ends_at: float
    workload_class: str
    reason: str

    def to_dict(self, now: float) -> dict[str, Any]:
        return {
            "started_at": utc_iso(self.started_at),
            "ends_at": utc_iso(self.ends_at),
            "seconds_left": round(max(0.0, self.ends_at - now), 3),
            "workload_class": self.workload_class,
            "reason": self.reason,
        }


class NoWarning(Exception):
    """Keep running was asked while no automatic suspend was announced."""


EventSink = Callable[[dict[str, Any]], None]


class IdlePolicy(CheckedConfigurable, LoggingConfigurable):
    """Automatic suspend of an idle session, per workload class, after a warning."""

    enabled = Bool(False, config=True, help="Suspend idle sessions automatically (after a warning).")
    workload_classes = Dict(
        config=True,
        help="Workload classes by name, each a dict of idle_seconds, min_running_seconds, warning_seconds, "
        "suspend_while_busy, keep_memory, description; they update and extend the defaults "
        "(interactive-gpu, long-training, small-cpu).",
    )
    default_workload_class = Unicode(
        "interactive-gpu",
        config=True,
        help="The class of a session when neither JUPYTER_SUSPEND_WORKLOAD_CLASS nor notebook or kernel spec "
        "metadata (jupyter_suspend.workload_class) names one.",
    )
    tick_seconds = Float(5.0, config=True, help="Seconds between two readings of the activity by the policy.")
    default_cycle_seconds = Float(
        300.0,
        config=True,
        help="Suspend + resume time the break-even guard assumes before this environment has measured a cycle.",
    )
    break_even_factor = Float(
        1.0,
        config=True,
        help="A suspend pays when the expected idle gap is at least this many times the suspend + resume time.",
    )
    gpu_busy_percent = Float(5.0, config=True, help="GPU utilisation (NVML, percent) that counts as activity.")

    @validate("workload_classes")
    def _valid_classes(self, proposal: Any) -> dict[str, Any]:
        value: dict[str, Any] = proposal["value"]
        try:
            parse_classes(value)
        except ValueError as exc:  # the server does not start, and says why
            raise TraitError(str(exc)) from exc
        return value

    def configuration_problems(self) -> list[Problem]:
        """Every setting of the policy that is wrong (the server runs misconfigured and the policy never runs)."""
        problems = [*self.config_problems, *number_problems(self)]
        try:
            classes = parse_classes(self.workload_classes)
        except ValueError as exc:  # set after start-up, past the validator
            problems.append(Problem("IdlePolicy.workload_classes", str(exc)))
            classes = parse_classes({})
        if self.default_workload_class not in classes:
            problems.append(
                Problem(
                    "IdlePolicy.default_workload_class",
                    f"{self.default_workload_class!r} is not a workload class; allowed: {', '.join(sorted(classes))}",
                )
            )
        return problems

    def setup(self, lifecycle: Lifecycle, monitor: ActivityMonitor, resolver: ClassResolver, emit: EventSink) -> None:
        self.lifecycle = lifecycle
        self.monitor = monitor
        self.resolver = resolver
        self._emit = emit
        self.classes = parse_classes(self.workload_classes)
        if self.default_workload_class not in self.classes:
            raise ValueError(
                f"IdlePolicy.default_workload_class {self.default_workload_class!r} "
                f"is not one of {sorted(self.classes)}"
            )
        self.warning: Warning_ | None = None
        self.last_choice: ClassChoice | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._lock = asyncio.Lock()
        # (journal file identity, size, mtime) -> its timeline: read again only when the journal changed.
        self._timeline_cache: tuple[tuple[int, int, int] | None, dict[str, Any]] | None = None

    # -- the timer ---------------------------------------------------------------
    def start(self) -> None:
        """Tick once the event loop runs (extensions load before it starts)."""
        if not self.enabled:
            return
        from tornado.ioloop import IOLoop

        IOLoop.current().add_callback(self._begin)

    def _begin(self) -> None:
        if not self._stopped and self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.tick_seconds)
            try:
                await self.tick()
            except Exception:  # a failed tick must not end the policy: say so, try again
                self.log.exception("jupyter-suspend: the idle policy's tick failed")

    async def stop(self) -> None:
        self._stopped = True
        task, self._task = getattr(self, "_task", None), None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        monitor = getattr(self, "monitor", None)
        if monitor is not None:
            monitor.stop()

    # -- one reading -------------------------------------------------------------
    def _running_since(self) -> tuple[float, float]:
        """(when the environment started running, seconds since)."""
        since = self.lifecycle.since
        return since, max(0.0, time.time() - since)

    async def evaluate(self) -> tuple[Reading, ClassChoice, Decision]:
        since, running_seconds = self._running_since()
        # The class first: every kernel of a session it saw is listed by then, so the reading
        # below listens to it (read first, a kernel started meanwhile would be missing from the
        # reading while its notebook's class already applied: idle since the server started).
        choice = await self.resolver.resolve(self.classes, self.default_workload_class)
        self.last_choice = choice
        reading = self.monitor.read(since)
        timeline = await asyncio.to_thread(self._timeline)
        guard = break_even(timeline, reading.idle_seconds, self.default_cycle_seconds, self.break_even_factor)
        refusal = self.lifecycle.decide(Action.SUSPEND)
        can_suspend = None if refusal else (refusal.reason or "an operation is in progress")
        if can_suspend is None and self.lifecycle.state not in (State.RUNNING, State.READY):
            can_suspend = f"the environment is {self.lifecycle.state.value}"
        decision = decide(
            enabled=self.enabled,
            can_suspend=can_suspend,
            reading=reading,
            workload=choice.workload,
            running_seconds=running_seconds,
            guard=guard,
        )
        return reading, choice, decision

    def _timeline(self) -> dict[str, Any]:
        """The measured cycles; the journal is read again only when it changed (each tick asks)."""
        try:
            st = os.stat(self.lifecycle.journal.path)
            key: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            key = None
        cached = self._timeline_cache
        if key is not None and cached is not None and cached[0] == key:
            return cached[1]
        timeline = self.lifecycle.timeline()
        self._timeline_cache = (key, timeline)
        return timeline

    async def tick(self) -> Decision:
        """Read, decide, and act: open, cancel or end the warning."""
        async with self._lock:
            reading, choice, decision = await self.evaluate()
            now = reading.at
            warning = self.warning
            if warning is not None and decision.action != SUSPEND:
                self._cancel("activity" if decision.action in (ACTIVE, WAIT) else "state", decision.reason)
            elif warning is None and decision.action == SUSPEND:
                workload = choice.workload
                self.warning = Warning_(now, now + workload.warning_seconds, workload.name, decision.reason)
                self._emit({"action": "warning", **self.warning.to_dict(now)})
                self.log.info("jupyter-suspend: suspend in %gs: %s", workload.warning_seconds, decision.reason)
                if workload.warning_seconds <= 0:
                    self._suspend(decision, choice, reading.at - reading.idle_seconds)
            elif warning is not None and now >= warning.ends_at:
                self._suspend(decision, choice, reading.at - reading.idle_seconds)
            return decision

    def _suspend(self, decision: Decision, choice: ClassChoice, active_work_ended: float) -> None:
        """``active_work_ended``: when the activity this decision measured ended, so that the
        cycle's "idle before" is the idle time the reason names (issue 17 item 10)."""
        self.warning = None
        reason = f"automatic suspend: {decision.reason}"
        if not choice.workload.keep_memory:
            reason += "; the class asks for files only, which this backend's suspend does not distinguish"
        try:
            self.lifecycle.start_suspend(
                reason[:500], origin=ORIGIN, workload_class=choice.workload.name, active_work_ended=active_work_ended
            )
        except IllegalState as exc:
            self.log.warning("jupyter-suspend: the automatic suspend did not start: %s", exc)
            self._emit(
                {"action": "cancelled", "by": "state", "workload_class": choice.workload.name, "reason": str(exc)}
            )
            return
        self._emit({"action": "suspend", "workload_class": choice.workload.name, "reason": reason[:500]})

    def _cancel(self, by: str, reason: str) -> None:
        warning = self.warning
        if warning is None:
            return
        self.warning = None
        try:
            self.lifecycle.journal.append(
                AUTO_SUSPEND_CANCELLED, by=by, workload_class=warning.workload_class, reason=reason
            )
        except JournalWriteError as exc:
            self.log.error("jupyter-suspend: %s not journaled: %s", AUTO_SUSPEND_CANCELLED, exc)
        self._emit({"action": "cancelled", "by": by, "workload_class": warning.workload_class, "reason": reason})

    async def keep_running(self) -> str:
        """The user saw the warning and keeps working: cancel it; idle time starts again now.
        Returns the class whose suspend was cancelled."""
        async with self._lock:
            warning = self.warning
            if warning is None:
                raise NoWarning("no automatic suspend is announced: nothing to keep running")
            self.monitor.keep_running()
            self._cancel("keep_running", "the user chose Keep running")
            return warning.workload_class

    # -- answers -----------------------------------------------------------------
    async def answer(self) -> dict[str, Any]:
        """``GET activity``: the signals, the class, the decision with its figures, the warning."""
        reading, choice, decision = await self.evaluate()
        return {
            "enabled": self.enabled,
            "state": self.lifecycle.state.value,
            **reading.to_dict(),
            "workload_class": choice.to_dict(),
            "decision": decision.to_dict(),
            "warning": self.warning.to_dict(reading.at) if self.warning else None,
        }

    def status_fields(self) -> dict[str, Any]:
        """What ``GET status`` adds: the session's class and a pending warning."""
        choice = self.last_choice
        return {
            "workload_class": choice.workload.name if choice else None,
            "idle_policy_enabled": self.enabled,
            "idle_warning": self.warning.to_dict(time.time()) if self.warning else None,
        }
