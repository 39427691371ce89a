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
import sys
import time
from pathlib import Path
from typing import Any

from traitlets import Integer, Unicode

from ..server.journal import read_journal_file
from . import cost
from .base import BASE_FLAGS, EXIT_FAILED, EXIT_OK, CommandApp, UsageError

MATPLOTLIB_MISSING = (
    "the HTML report draws its charts with matplotlib, which is not installed: "
    "pip install 'jupyter-suspend[report]' (or use the text table or --json)"
)


def journal_files(paths: list[str]) -> list[tuple[str, Path]]:
    """(environment name, file) for every journal named or found under a named directory."""
    if not paths:
        raise UsageError("expected PATH...: one or more journal files or directories of them")
    found: list[tuple[str, Path]] = []
    for given in paths:
        path = Path(given)
        if path.is_file():
            found.append((_name(path, path.parent), path))
        elif path.is_dir():
            inside = sorted(p for p in path.rglob("*.jsonl") if p.is_file())
            if not inside:
                raise UsageError(f"no journal (*.jsonl) under the directory {given}")
            found.extend((_name(p, path), p) for p in inside)
        else:
            raise UsageError(f"no such journal file or directory: {given}")
    return found


def _name(path: Path, root: Path) -> str:
    """``team/alice/journal.jsonl`` -> ``team/alice``; ``bob.jsonl`` -> ``bob``."""
    relative = path.relative_to(root) if path.is_relative_to(root) else Path(path.name)
    if relative.name == "journal.jsonl" and relative.parent != Path("."):
        return str(relative.parent)
    if relative.name == "journal.jsonl":
        return path.resolve().parent.name
    return str(relative.with_suffix(""))


def build_report(files: list[tuple[str, Path]], now: float, gpus_per_node: int | None) -> dict[str, Any]:
    environments = []
    problems = []
    for name, path in files:
        readout = read_journal_file(path)
        if readout.problems:
            problems.append(
                {
                    "environment": name,
                    "journal": str(path),
                    "count": len(readout.problems),
                    "first": readout.problems[0].to_dict(),
                }
            )
        environments.append(cost.environment_cost(name, readout.entries, now, gpus_per_node))
    return {
        "generated_at": now,
        "journals": [str(path) for _, path in files],
        "gpus_per_node": gpus_per_node,
        "problems": problems,
        **cost.report(environments),
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
    out: list[str] = []
    for problem in data["problems"]:
        first = problem["first"]
        out.append(
            f"! {problem['journal']}: {problem['count']} unreadable line(s); first: line {first['line']} "
            f"({first['kind']}: {first['message']})"
        )
    cycles = data["cycles"]
    out.append(f"{len(cycles)} cycle(s) in {len(data['environments'])} environment(s)\n")
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
                    "GPU h",
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
                        c["result"] + (" (ongoing)" if c["released_ongoing"] else ""),
                        _f(c["released_hours"]),
                        _f(c["node_hours_released"]),
                        _f(c["gpu_hours_released"]),
                        _f(c["data_stored_bytes"] / 1e6, 1),
                        _f(c["storage_gb_days"], 4),
                        _f(c["resume_to_runnable_seconds"], 1),
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
    g = t["gpu_node_hours"]
    out.append(
        f"  GPU-hours: observed {_f(g['observed'])}, released {_f(g['released'])}, allocated {_f(g['allocated'])}"
        + ("" if g["observed"] is not None else " (GPU count unknown: pass --gpus-per-node)")
    )
    out.append(
        f"  memory released: {_f(t['kernel_memory_gib_hours'])} GiB-h kernel, {_f(t['gpu_memory_gib_hours'])} GiB-h GPU"
    )
    out.append(f"  storage: {_f(t['data_stored_bytes'] / 1e9, 3)} GB stored, {_f(t['storage_gb_days'], 4)} GB-days")
    r = t["resume_to_runnable_seconds"]
    out.append(f"  resume to runnable cell: p50 {_f(r['p50'], 1)} s, p95 {_f(r['p95'], 1)} s ({r['count']} resume(s))")
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
    ax.bar(labels, [c["gpu_hours_released"] or 0 for c in cycles], color="#f58518", alpha=0.7, label="GPU-hours")
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
        "What suspending saved and cost, from journals (files, or directories of *.jsonl files; each journal is "
        "one environment): per cycle and in total the node- and GPU-hours released, memory released x time, "
        "data stored (GB-days), time from resume request to runnable cell (p50/p95), live/cold/failed rates, "
        "per workload class. Unreadable journal lines are reported. docs/cost.md defines every figure."
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
        help="GPUs of a released node when the journal did not measure them (GKE: the node pool's count).",
    ).tag(config=True)
    html_file = Unicode("", help="Also write an HTML page with charts here (needs matplotlib: extra 'report').").tag(
        config=True
    )

    flags = BASE_FLAGS
    aliases = {"gpus-per-node": "ReportApp.gpus_per_node", "html": "ReportApp.html_file"}

    def run(self) -> int:
        if self.gpus_per_node is not None and self.gpus_per_node < 0:
            raise UsageError(f"--gpus-per-node must be 0 or more, not {self.gpus_per_node}")
        files = journal_files(list(self.extra_args))
        if self.html_file and Path(self.html_file).is_dir():
            raise UsageError(f"--html {self.html_file} is a directory, not a file")
        if self.html_file and not Path(self.html_file).resolve().parent.is_dir():
            raise UsageError(f"--html {self.html_file}: its folder does not exist")
        data = build_report(files, time.time(), self.gpus_per_node)
        for problem in data["problems"]:
            print(
                f"jupyter suspend report: {problem['journal']}: {problem['count']} unreadable line(s), "
                f"first at line {problem['first']['line']}: {problem['first']['message']}",
                file=sys.stderr,
            )
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
