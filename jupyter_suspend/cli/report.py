"""``jupyter suspend report PATH...``: what suspending saved and cost, from journals.

Each journal file is one environment; a directory stands for every ``*.jsonl``
file under it. The figures are defined in docs/cost.md and computed in
:mod:`jupyter_suspend.cli.cost`; this module reads the files, prints the text
table, the JSON document (``cli-report.json``) or the HTML page.
"""

from __future__ import annotations

import base64
import html
import io
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from traitlets import Bool, Integer, Unicode

from ..server.journal import read_journal_file
from . import cost
from .base import BASE_FLAGS, EXIT_FAILED, EXIT_OK, CommandApp, UsageError

MATPLOTLIB_MISSING = (
    "the HTML report draws its charts with matplotlib, which is not installed: "
    "pip install 'jupyter-suspend[report]' (or use the text table or --json)"
)


#: State-directory names that say nothing about whose environment it is (the server's default is
#: ``jupyter_suspend``; a pod often mounts its volume at ``state``): a name goes one folder further up.
GENERIC_FOLDERS = frozenset({"state", "jupyter_suspend", ".jupyter_suspend", "jupyter-suspend", "journal", "data"})


def journal_files(paths: list[str]) -> list[tuple[str, Path]]:
    """(environment name, file) for every journal named or found under a named directory, each file once.

    The name is the shortest end of the journal's folder path (its file name too when it is not
    ``journal.jsonl``) that tells it from every other journal given, never only a generic folder
    name such as ``state``: ``/srv/alice/state/journal.jsonl`` is ``alice/state``. Under a named
    directory it is at least the path below it (``team/alice``)."""
    if not paths:
        raise UsageError("expected PATH...: one or more journal files or directories of them")
    found: list[tuple[Path, int]] = []  # (file, the fewest parts its name has)
    for given in paths:
        path = Path(given)
        if path.is_file():
            found.append((path, 1))
        elif path.is_dir():
            inside = sorted(p for p in path.rglob("*.jsonl") if p.is_file())
            if not inside:
                raise UsageError(f"no journal (*.jsonl) under the directory {given}")
            found.extend((p, len(_parts(p.relative_to(path)))) for p in inside)
        else:
            raise UsageError(f"no such journal file or directory: {given}")
    parts = [_parts(p.resolve()) for p, _ in found]
    depth = []
    for (_, fewest), own in zip(found, parts, strict=True):
        k = max(1, fewest)
        while k < len(own) and own[-k].lower() in GENERIC_FOLDERS:
            k += 1
        depth.append(min(k, len(own)))
    while True:
        names = ["/".join(own[-k:]) for own, k in zip(parts, depth, strict=True)]
        clash = Counter(zip(names, [str(p.resolve()) for p, _ in found], strict=True))
        by_name = Counter(name for name, _ in clash)
        grow = [i for i, name in enumerate(names) if by_name[name] > 1 and depth[i] < len(parts[i])]
        if not grow:
            break
        for i in grow:
            depth[i] += 1
    return [(name, path) for name, (path, _) in zip(names, found, strict=True)]


def _parts(path: Path) -> list[str]:
    """``team/alice/journal.jsonl`` -> ``[team, alice]``; ``team/bob.jsonl`` -> ``[team, bob]``."""
    parts = [p for p in path.parts if p not in ("/", "")]
    if path.name == "journal.jsonl":
        return parts[:-1] or [path.name]
    return [*parts[:-1], path.stem]


def read_journals(files: list[tuple[str, Path]]) -> tuple[list[cost.JournalRead], list[cost.Problem]]:
    """Each file read once (the same file named twice is read once and named in ``problems``);
    unreadable lines and empty journals are problems too."""
    reads: list[cost.JournalRead] = []
    problems: list[cost.Problem] = []
    seen: dict[Path, str] = {}
    for name, path in files:
        real = path.resolve()
        if real in seen:
            problems.append(
                cost.Problem(
                    "duplicate_journal", name, str(path), f"the same file as {seen[real]}: read once", excluded=True
                )
            )
            continue
        seen[real] = str(path)
        readout = read_journal_file(path)
        if readout.problems:
            problems.append(
                cost.Problem(
                    "unreadable_lines",
                    name,
                    str(path),
                    f"{len(readout.problems)} unreadable line(s); first: line {readout.problems[0].line} "
                    f"({readout.problems[0].kind}: {readout.problems[0].message})",
                    count=len(readout.problems),
                    first=readout.problems[0].to_dict(),
                )
            )
        if not readout.entries:
            try:
                size = path.stat().st_size
            except OSError:
                size = 0
            problems.append(
                cost.Problem(
                    "empty_journal",
                    name,
                    str(path),
                    "the journal is empty (0 bytes): nothing to count"
                    if size == 0
                    else f"no readable entry in {size} bytes: nothing to count",
                )
            )
            continue
        torn = any(p.kind == "truncated_tail" for p in readout.problems)
        reads.append(cost.JournalRead(name, str(path), readout.entries, torn))
    return reads, problems


def environments(
    files: list[tuple[str, Path]], options: cost.Options
) -> tuple[list[cost.EnvironmentCost], list[dict[str, Any]]]:
    """The environments of these journals, each entry and each cycle counted once, and every problem."""
    reads, problems = read_journals(files)
    combined, more = cost.combine_journals(reads)
    problems += more
    envs = []
    for env in combined:
        priced = cost.environment_cost(
            env.name,
            env.entries,
            options.now,
            options.gpus_per_node,
            include_suspect=options.include_suspect,
            max_ongoing=options.max_ongoing,
            torn=env.torn,
            journals=env.journals,
        )
        problems += priced.problems
        envs.append(priced)
    problems += cost.drop_repeated_cycles(envs)
    return envs, [p.to_dict() for p in problems]


def build_report(
    files: list[tuple[str, Path]],
    now: float,
    gpus_per_node: int | None,
    *,
    include_suspect: bool = False,
    max_ongoing: float = cost.DEFAULT_MAX_ONGOING,
) -> dict[str, Any]:
    options = cost.Options(now, gpus_per_node, include_suspect, max_ongoing)
    envs, problems = environments(files, options)
    return {
        "generated_at": now,
        "journals": [str(path) for _, path in files],
        "gpus_per_node": gpus_per_node,
        "include_suspect": include_suspect,
        "max_ongoing_hours": round(max_ongoing / cost.HOUR, 6),
        "problems": problems,
        **cost.report(envs),
    }


def _f(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
    return "\n".join(lines)


def render_text(data: dict[str, Any]) -> str:
    """The text table: the same figures as the JSON document ("-" where it says null: unknown)."""
    out: list[str] = [f"! {problem['journal']}: {problem['message']}" for problem in data["problems"]]
    cycles = data["cycles"]
    excluded = sum(1 for c in cycles if c["excluded"])
    out.append(
        f"{len(cycles)} cycle(s) in {len(data['environments'])} environment(s)"
        + (f", {excluded} left out of the totals (see the problems above)" if excluded else "")
        + "\n"
    )
    if cycles:
        out.append(
            _table(
                [
                    "environment",
                    "cycle",
                    "class",
                    "origin",
                    "result",
                    "free h",
                    "node h",
                    "GPU h released",
                    "GPU h kept",
                    "stored MB",
                    "GB-days",
                    "resume s",
                    "other work",
                ],
                [
                    [
                        c["environment"],
                        c["cycle_id"][:12],
                        c["workload_class"],
                        c["origin"],
                        c["result"]
                        + (" (ongoing)" if c["released_ongoing"] else "")
                        + (" (left out)" if c["excluded"] else ""),
                        _f(c["released_hours"]),
                        _f(c["node_hours_released"]),
                        _f(c["gpu_hours_released"]),
                        _f(c["gpu_hours_kept_allocated"]),
                        _f(c["data_stored_bytes"] / 1e6, 1),
                        _f(c["storage_gb_days"], 4),
                        _f(c["resume_to_runnable_seconds"], 1)
                        + (f" ({c['resume_attempts_failed']} failed)" if c["resume_attempts_failed"] else ""),
                        c["node_other_workloads"],
                    ]
                    for c in cycles
                ],
            )
        )
    t = data["totals"]
    out.append("\nTotals")
    out.append(
        f"  node-hours: observed {_f(t['node_hours']['observed'])}, released {_f(t['node_hours']['released'])}, "
        f"allocated {_f(t['node_hours']['allocated'])}"
    )
    g, known = t["gpu_node_hours"], t["gpu_node_hours_known"]
    line = f"  GPU-hours: observed {_f(g['observed'])}, released {_f(g['released'])}, allocated {_f(g['allocated'])}"
    unknown = t["gpu_count_unknown_environments"]
    if unknown:
        line += f" (GPU count unknown for {', '.join(unknown)}"
        if known["environments"]:
            line += (
                f"; the {known['environments']} environment(s) with a known count: observed "
                f"{_f(known['observed'])}, released {_f(known['released'])}, allocated {_f(known['allocated'])}"
            )
        line += ")"
        if data["gpus_per_node"] is None:
            line += "; pass --gpus-per-node to assume a count"
    out.append(line)
    if t["gpu_hours_kept_allocated"] != 0:
        out.append(
            f"  GPU-hours kept allocated by suspends that keep the node: {_known(t, 'gpu_hours_kept_allocated')}"
        )
    out.append(
        f"  memory released: {_known(t, 'kernel_memory_gib_hours', 'kernel_memory_unknown_cycles')} GiB-h kernel, "
        f"{_known(t, 'gpu_memory_gib_hours', 'gpu_memory_unknown_cycles')} GiB-h GPU"
    )
    out.append(f"  storage: {_f(t['data_stored_bytes'] / 1e9, 3)} GB stored, {_f(t['storage_gb_days'], 4)} GB-days")
    r = t["resume_to_runnable_seconds"]
    out.append(
        f"  resume to runnable cell (from the first request): p50 {_f(r['p50'], 1)} s, p95 {_f(r['p95'], 1)} s "
        f"({r['count']} return(s)); failed resume attempts: {t['resume_attempts_failed']}"
    )
    out.append("  " + _rates(t))
    if data["by_class"]:
        out.append("\nPer workload class")
        out.append(
            _table(
                ["class", "cycles", "live", "cold", "failed", "node h", "GPU h", "p50 s", "p95 s"],
                [
                    [
                        name,
                        str(s["cycles"]),
                        str(s["results"]["live"]),
                        str(s["results"]["cold"]),
                        str(s["results"]["failed"]),
                        _f(s["node_hours_released"]),
                        _f(s["gpu_hours_released"]),
                        _f(s["resume_to_runnable_seconds"]["p50"], 1),
                        _f(s["resume_to_runnable_seconds"]["p95"], 1),
                    ]
                    for name, s in data["by_class"].items()
                ],
            )
        )
    auto = data["auto_suspends"]
    if auto["suspended"] or auto["cancelled"]:
        out.append("\nAutomatic suspends")
        for name, count in auto["suspended"].items():
            out.append(f"  {name}: {count} suspended")
        for row in auto["cancelled"]:
            out.append(f"  {row['workload_class']}: {row['count']} cancelled ({row['reason'] or 'no reason'})")
    return "\n".join(out)


def _known(totals: dict[str, Any], name: str, unknown_name: str | None = None) -> str:
    """A total, or "-" with the known part and how many cycles are unknown."""
    unknown = totals[unknown_name or f"{name}_unknown_cycles"]
    if totals[name] is not None:
        return _f(totals[name])
    known = totals[f"{name}_known"]
    return f"- ({unknown} cycle(s) unknown" + (f"; {_f(known)} known)" if known is not None else ")")


def _rates(totals: dict[str, Any]) -> str:
    rates = totals["rates"]
    parts = [f"{name} {rates[name] * 100:.0f}%" for name in ("live", "cold", "failed") if rates[name] is not None]
    return "resumes: " + (", ".join(parts) if parts else "none ended")


def _png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode()


def charts(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, base64 PNG) of each chart; ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    from matplotlib import pyplot as plt

    out = []
    cycles = data["cycles"]
    labels = [f"{c['environment']}\n{c['cycle_id'][:8]}" for c in cycles]

    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.bar(labels, [c["released_hours"] for c in cycles], color="#4c78a8", label="released (free) hours")
    # An unknown GPU count draws no bar (never a bar of 0); the text table says "-".
    known = [(label, c["gpu_hours_released"]) for label, c in zip(labels, cycles, strict=True)]
    known = [(label, hours) for label, hours in known if hours is not None]
    if known:
        ax.bar(
            [label for label, _ in known],
            [hours for _, hours in known],
            color="#f58518",
            alpha=0.7,
            label="GPU-hours released",
        )
    ax.set_ylabel("hours")
    ax.legend()
    ax.tick_params(axis="x", labelsize=7)
    out.append(("Hours released per cycle", _png(fig)))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 3.5))
    waits = [c["resume_to_runnable_seconds"] for c in cycles if c["resume_to_runnable_seconds"] is not None]
    ax.hist(waits or [0], bins=min(20, max(1, len(waits))), color="#54a24b")
    ax.set_xlabel("seconds from resume request to runnable cell")
    ax.set_ylabel("resumes")
    out.append(("Resume to runnable cell", _png(fig)))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 3.5))
    classes = list(data["by_class"])
    bottom = [0] * len(classes)
    for result, color in (("live", "#54a24b"), ("cold", "#4c78a8"), ("failed", "#e45756")):
        counts = [data["by_class"][name]["results"][result] for name in classes]
        ax.bar(classes, counts, bottom=bottom, color=color, label=result)
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    ax.set_ylabel("cycles")
    ax.legend()
    out.append(("Live, cold and failed resumes per workload class", _png(fig)))
    plt.close(fig)
    return out


def render_html(data: dict[str, Any], images: list[tuple[str, str]]) -> str:
    text = html.escape(render_text(data))
    figures = "\n".join(
        f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{png}">'
        f"<figcaption>{html.escape(title)}</figcaption></figure>"
        for title, png in images
    )
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'><title>jupyter suspend report</title></head>\n"
        f"<body><h1>What suspending saved</h1>\n{figures}\n<h2>Figures</h2>\n<pre>{text}</pre>\n"
        "<p>Definitions: docs/cost.md of jupyter-suspend.</p></body></html>\n"
    )


class ReportApp(CommandApp):
    name = "suspend report"
    description = (
        "What suspending saved and cost, from journals (files, or directories of *.jsonl files): per cycle and in "
        "total the node- and GPU-hours released (or kept allocated, on a backend that keeps the node), memory "
        "released x time, data stored (GB-days), time from the first resume request to a runnable cell "
        "(p50/p95), live/cold/failed rates, per workload class. Journals are told apart by what they hold: a "
        "journal given twice, or a copy, is counted once. Unreadable lines, duplicates and odd clocks are "
        "reported; cycles with odd clocks are left out of the totals unless --include-suspect. "
        "docs/cost.md defines every figure."
    )
    schema_name = "report"
    examples = """
jupyter suspend report /srv/journals --gpus-per-node 8
jupyter suspend report alice/journal.jsonl bob/journal.jsonl --json
jupyter suspend report /srv/journals --html report.html
"""

    gpus_per_node = Integer(
        None,
        allow_none=True,
        help="GPUs of an environment's node when its journal did not measure them (GKE: the node pool's count).",
    ).tag(config=True)
    html_file = Unicode("", help="Also write an HTML page with charts here (needs matplotlib: extra 'report').").tag(
        config=True
    )
    include_suspect = Bool(
        False, help="Count cycles whose clocks look wrong in the totals (they are always listed and flagged)."
    ).tag(config=True)
    max_ongoing = Unicode(
        "7d",
        help="How old the journal's last entry may be while a cycle it shows still suspended is believed "
        "(s, m, h, d); older: the cycle is suspect.",
    ).tag(config=True)

    flags = {
        **BASE_FLAGS,
        "include-suspect": (
            {"ReportApp": {"include_suspect": True}},
            "Count cycles with odd clocks in the totals.",
        ),
    }
    aliases = {
        "gpus-per-node": "ReportApp.gpus_per_node",
        "html": "ReportApp.html_file",
        "max-ongoing": "ReportApp.max_ongoing",
    }

    def run(self) -> int:
        if self.gpus_per_node is not None and self.gpus_per_node < 0:
            raise UsageError(f"--gpus-per-node must be 0 or more, not {self.gpus_per_node}")
        max_ongoing = parse_duration(self.max_ongoing, "--max-ongoing")
        files = journal_files(list(self.extra_args))
        if self.html_file and Path(self.html_file).is_dir():
            raise UsageError(f"--html {self.html_file} is a directory, not a file")
        if self.html_file and not Path(self.html_file).resolve().parent.is_dir():
            raise UsageError(f"--html {self.html_file}: its folder does not exist")
        data = build_report(
            files, time.time(), self.gpus_per_node, include_suspect=self.include_suspect, max_ongoing=max_ongoing
        )
        if self.json_output:  # the text carries them already: said once, not twice on a terminal
            for problem in data["problems"]:
                print(f"jupyter suspend report: {problem['journal']}: {problem['message']}", file=sys.stderr)
        if self.html_file:
            try:
                images = charts(data)
            except ImportError:
                print(f"jupyter suspend report: {MATPLOTLIB_MISSING}", file=sys.stderr)
                return EXIT_FAILED
            try:
                Path(self.html_file).write_text(render_html(data, images))
            except OSError as exc:
                print(f"jupyter suspend report: --html {self.html_file} not written: {exc}", file=sys.stderr)
                return EXIT_FAILED
        self.emit(data, render_text(data))
        return EXIT_OK


DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
UNIT_SECONDS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, option: str = "--thresholds") -> float:
    """``90s``, ``15m``, ``1.5h``, ``1d`` or plain seconds, more than 0; a :class:`UsageError` otherwise."""
    match = DURATION.fullmatch(text.strip())
    if not match:
        raise UsageError(f"{option}: bad duration {text!r}: use a number with s, m, h or d (15m, 1h)")
    seconds = float(match.group(1)) * UNIT_SECONDS[match.group(2)]
    if seconds <= 0:
        raise UsageError(f"{option}: {text!r} must be more than 0")
    return seconds
