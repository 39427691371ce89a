"""``jupyter suspend simulate``: how many hours an idle threshold releases, and what it costs the user.

Two answers (docs/cost.md):

* the worked example: ``--active-hours`` used in a ``--week-hours`` week releases
  at most the difference, before snapshot and restore time (168 - 40 = 128);
* a sweep of idle thresholds over a week of activity, recorded in journals
  (PATH...) or synthetic (``--synthetic --seed N``: ``--active-hours`` of work in a
  ``--week-hours`` week, so it agrees with the worked example), with suspend and resume
  times measured from the journals or given: per threshold the hours released,
  the interruptions (suspends), the waiting added for returning users, and the
  suspends that did not pay; per workload class, so a team can choose a
  threshold per class.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any

from traitlets import Bool, Float, Integer, Unicode

from . import cost
from .base import BASE_FLAGS, EXIT_OK, CommandApp, UsageError
from .report import environments, journal_files, parse_duration

#: Used for synthetic activity when no time is given (and for journals without a measured cycle).
DEFAULT_SUSPEND_SECONDS = 60.0
DEFAULT_RESUME_SECONDS = 120.0
SYNTHETIC_CLASS = "synthetic"


def parse_thresholds(text: str) -> list[float]:
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise UsageError("--thresholds needs at least one duration (5m,15m,1h)")
    return sorted({parse_duration(p, "--thresholds") for p in parts})


def _label(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


class SimulateApp(CommandApp):
    name = "suspend simulate"
    description = (
        "Hours released per idle threshold. Prints the worked example (--active-hours used in a --week-hours week "
        "releases at most the difference, before snapshot and restore time) and, over journals (PATH...) or a "
        "synthetic week of --active-hours work in --week-hours (--synthetic --seed N), a sweep of --thresholds: "
        "hours released, interruptions, waiting added for returning users, per workload class. Suspend and "
        "resume times are measured from the journals (median) unless --suspend-seconds/--resume-seconds are "
        "given. docs/cost.md defines every figure."
    )
    schema_name = "simulate"
    examples = """
jupyter suspend simulate                      # the worked example: 168 - 40 = 128
jupyter suspend simulate /srv/journals --thresholds 5m,15m,30m,1h,2h
jupyter suspend simulate --synthetic --seed 7 --suspend-seconds 90 --resume-seconds 240
"""

    week_hours = Float(168.0, help="Hours of the worked example's week.").tag(config=True)
    active_hours = Float(40.0, help="Hours worked in the worked example's week.").tag(config=True)
    thresholds = Unicode("5m,15m,30m,1h,2h", help="Idle thresholds to sweep, comma-separated (s, m, h, d).").tag(
        config=True
    )
    synthetic = Bool(False, help="Sweep over a synthetic week of activity instead of journals.").tag(config=True)
    seed = Integer(0, help="Seed of the synthetic week (the same seed gives the same week).").tag(config=True)
    suspend_seconds = Float(
        None, allow_none=True, help="Seconds from suspend request to node released (default: measured)."
    ).tag(config=True)
    resume_seconds = Float(
        None, allow_none=True, help="Seconds from resume request to runnable cell (default: measured)."
    ).tag(config=True)

    flags = {
        **BASE_FLAGS,
        "synthetic": ({"SimulateApp": {"synthetic": True}}, "Sweep over a synthetic week (see --seed)."),
        "include-suspect": (
            {"SimulateApp": {"include_suspect": True}},
            "Sweep environments whose journals have odd clocks too.",
        ),
    }
    aliases = {
        "week-hours": "SimulateApp.week_hours",
        "active-hours": "SimulateApp.active_hours",
        "thresholds": "SimulateApp.thresholds",
        "seed": "SimulateApp.seed",
        "suspend-seconds": "SimulateApp.suspend_seconds",
        "resume-seconds": "SimulateApp.resume_seconds",
    }

    include_suspect = Bool(
        False, help="Sweep environments whose journals have cycles with odd clocks too (left out by default)."
    ).tag(config=True)

    def run(self) -> int:
        thresholds = parse_thresholds(self.thresholds)
        for name in ("suspend_seconds", "resume_seconds"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise UsageError(f"--{name.replace('_', '-')} must be 0 or more, not {value:g}")
        if not self.week_hours > 0:
            raise UsageError(f"--week-hours must be more than 0, not {self.week_hours:g}")
        if not 0 <= self.active_hours <= self.week_hours:
            raise UsageError(
                f"--active-hours must be between 0 and the week's {self.week_hours:g} hours, not {self.active_hours:g}"
            )
        bound = cost.upper_bound(self.week_hours, self.active_hours)
        if self.synthetic and self.extra_args:
            raise UsageError("give journals (PATH...) or --synthetic, not both")
        result: dict[str, Any] = {
            "worked_example": {
                "week_hours": self.week_hours,
                "active_hours": self.active_hours,
                "released_upper_bound_hours": bound,
            },
            "source": "none",
            "seed": None,
            "journals": [],
            "problems": [],
            "thresholds_seconds": thresholds,
            "classes": [],
        }
        if self.synthetic:
            result.update(source="synthetic", seed=self.seed)
            # The synthetic week is the worked example's: --week-hours long, --active-hours of work,
            # so its sweep never releases more than the bound printed above it.
            activity = cost.synthetic_week(self.seed, self.week_hours, self.active_hours)
            times = self._times(None, None)
            result["classes"] = [self._sweep(SYNTHETIC_CLASS, 1, [activity], thresholds, times, None)]
        elif self.extra_args:
            result["source"] = "journals"
            result["classes"] = self._from_journals(result, thresholds)
        self.emit(result, render_text(result))
        return EXIT_OK

    def _times(self, suspend: float | None, resume: float | None) -> dict[str, Any]:
        """The suspend and resume seconds to use, and where each came from."""
        out: dict[str, Any] = {}
        for name, given, measured, default in (
            ("suspend", self.suspend_seconds, suspend, DEFAULT_SUSPEND_SECONDS),
            ("resume", self.resume_seconds, resume, DEFAULT_RESUME_SECONDS),
        ):
            if given is not None:
                out[f"{name}_seconds"], out[f"{name}_source"] = given, "given"
            elif measured is not None:
                out[f"{name}_seconds"], out[f"{name}_source"] = round(measured, 3), "measured"
            else:
                out[f"{name}_seconds"], out[f"{name}_source"] = default, "default"
        return out

    def _from_journals(self, result: dict[str, Any], thresholds: list[float]) -> list[dict[str, Any]]:
        """The sweep over journals, read exactly as ``report`` reads them (the same cycles, each once)."""
        files = journal_files(list(self.extra_args))
        result["journals"] = [str(path) for _, path in files]
        envs, problems = environments(files, cost.Options(time.time(), include_suspect=self.include_suspect))
        result["problems"] = problems
        if self.json_output:  # the text carries them already
            for problem in problems:
                print(f"jupyter suspend simulate: {problem['journal']}: {problem['message']}", file=sys.stderr)
        groups: dict[str, list[tuple[list[cost.Interval], cost.Interval]]] = {}
        measured: dict[str, list[cost.CycleCost]] = {}
        keeps_node: dict[str, set[bool]] = {}
        for env in envs:
            if env.copy_of is not None or any(c.excluded and c.suspect for c in env.cycles):
                continue  # a copy of another environment, or odd clocks (named in problems)
            counted = env.counted
            # An environment belongs to the class most of its suspends had.
            classes = Counter(c.workload_class for c in counted)
            klass = classes.most_common(1)[0][0] if classes else cost.DEFAULT_CLASS
            groups.setdefault(klass, []).append(cost.activity(env))
            measured.setdefault(klass, []).extend(counted)
            keeps_node.setdefault(klass, set()).update(c.node_released for c in counted if c.released_from is not None)
        everyone = [c for cycles in measured.values() for c in cycles]
        out = []
        for klass in sorted(groups):
            suspend, resume = cost.measured_times(measured[klass])
            fallback = cost.measured_times(everyone)
            times = self._times(
                suspend if suspend is not None else fallback[0], resume if resume is not None else fallback[1]
            )
            released = keeps_node[klass]
            node = None if not released or len(released) > 1 else released.pop()
            out.append(self._sweep(klass, len(groups[klass]), groups[klass], thresholds, times, node))
        return out

    def _sweep(
        self,
        klass: str,
        environments: int,
        activities: list[tuple[list[cost.Interval], cost.Interval]],
        thresholds: list[float],
        times: dict[str, Any],
        node_released: bool | None,
    ) -> dict[str, Any]:
        horizon = sum(h[1] - h[0] for _, h in activities) / cost.HOUR
        active = sum(b - a for intervals, _ in activities for a, b in intervals) / cost.HOUR
        rows = cost.sweep(activities, thresholds, times["suspend_seconds"], times["resume_seconds"])
        notes = []
        if node_released is False:
            notes.append(
                "these environments' backend never releases the node (local): the hours are the kernels' "
                "memory freed; the node and its GPUs stay allocated"
            )
        return {
            "workload_class": klass,
            "environments": environments,
            "horizon_hours": round(horizon, 6),
            "active_hours": round(active, 6),
            "released_upper_bound_hours": round(horizon - active, 6),
            "node_released": node_released,
            **times,
            "rows": [row.to_dict() for row in rows],
            "notes": notes,
        }


def render_text(result: dict[str, Any]) -> str:
    w = result["worked_example"]
    out = [
        f"Worked example: {w['active_hours']:g} active hours in a {w['week_hours']:g}-hour week: at most "
        f"{w['released_upper_bound_hours']:g} node-hours released, before snapshot and restore time.",
    ]
    for problem in result["problems"]:
        out.append(f"! {problem['journal']}: {problem['message']}")
    if result["source"] == "none":
        out.append("(no sweep: give journals as PATH... or --synthetic --seed N)")
        return "\n".join(out)
    source = f"synthetic week, seed {result['seed']}" if result["source"] == "synthetic" else "journals"
    for group in result["classes"]:
        out.append(
            f"\nClass {group['workload_class']} ({source}, {group['environments']} environment(s)): "
            f"{group['active_hours']:.2f} active of {group['horizon_hours']:.2f} hours, at most "
            f"{group['released_upper_bound_hours']:.2f} releasable; suspend {group['suspend_seconds']:g} s "
            f"({group['suspend_source']}), resume {group['resume_seconds']:g} s ({group['resume_source']})"
        )
        out.extend(f"  {note}" for note in group["notes"])
        header = ["threshold", "hours released", "interruptions", "returns", "waiting added", "not paying"]
        rows = [
            [
                _label(r["threshold_seconds"]),
                f"{r['released_hours']:.3f}",
                str(r["interruptions"]),
                str(r["returns"]),
                f"{r['waiting_added_seconds'] / 60:.1f} min",
                str(r["suspends_not_paying"]),
            ]
            for r in group["rows"]
        ]
        widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
        out.append("  ".join(h.rjust(wd) for h, wd in zip(header, widths, strict=True)))
        out.extend("  ".join(c.rjust(wd) for c, wd in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(out)
