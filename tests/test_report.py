"""``jupyter suspend report``: figures checked against hand-written journals (tests/journals/).

The expected figures are computed by hand below, from the journals' own
times (offsets in seconds from T0 = 2026-01-01T00:00:00Z); none comes from
running the code. docs/cost.md defines each figure.

tests/journals/team/gpu-lab.jsonl (GKE-like: releases the node, GPU count not
measured, so --gpus-per-node 4), class interactive_gpu, period 0 -> 97200 = 27 h:
  c1 (origin idle_policy): node released 3600, capacity available 46440
     -> 42840 s = 11.9 h free; GPU-h 4 * 11.9 = 47.6; result live;
     resume requested 46400 -> runnable 46460 = 60 s;
     checkpoint 2e9 B stored from the flush (3240) to capacity (46440) = 0.5 d -> 1 GB-day;
     snapshot 8e9 B from Ready (3600) to deleted (46800) = 0.5 d -> 4 GB-days; c1: 5 GB-days.
  c2 (origin user): released 50880 -> capacity 72120 = 21240 s = 5.9 h; GPU-h 23.6; cold;
     resume 71700 -> runnable 72300 = 600 s; checkpoint 1e9 B, 50520 -> 72120 = 0.25 d -> 0.25;
     snapshot 4e9 B, 50880 -> deleted 94080 = 0.5 d -> 2; c2: 2.25 GB-days.
tests/journals/team/cpu-small/journal.jsonl (local: the node stays), class small_cpu, 0 -> 10800 = 3 h:
  d1 (idle_policy): memory free 1090 -> restored 8290 = 7200 s = 2 h; 2 GiB -> 4 GiB-h; node-h 0;
     GPUs measured (NVML): 0 -> 0 GPU-h; resume 8280 -> runnable 8293 = 13 s; cold;
     checkpoint 5e8 B, 1090 -> 8290 = 1/12 d -> 0.0416667 GB-days.
  d2 (idle_policy): aborted, nothing released. One automatic suspend cancelled ("keep running").
tests/journals/old.jsonl (local, no class/origin: "unclassified"/"user"), 0 -> 14400 = 4 h,
  a corrupt 6th line:
  e1: memory free 720 -> acknowledged (transition failed -> running) 14400 = 13680 s = 3.8 h,
     1 GiB -> 3.8 GiB-h; the resume failed -> result failed; GPU count unknown.
Totals: free hours 11.9 + 5.9 + 2 + 3.8 = 23.6; node-hours released 11.9 + 5.9 = 17.8 of
  27 + 3 + 4 = 34 observed -> 16.2 allocated; GPU-hours: observed 4*27 (gpu-lab) + 0*3 (cpu-small,
  measured 0) = 108, released 71.2, allocated 36.8 (old: unknown, left out);
  kernel memory 4 + 3.8 = 7.8 GiB-h; stored 10e9 + 5e9 + 5e8 = 15.5e9 B; 5 + 2.25 + 1/24 = 7.291667 GB-days;
  resume-to-runnable [13, 60, 600]: p50 60, p95 60 + 0.9 * 540 = 546;
  results live 1, cold 2, failed 1, aborted 1 -> rates over 4 ended: 0.25 / 0.5 / 0.25.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from jupyter_suspend.cli import cost
from jupyter_suspend.cli.report import build_report, journal_files

from .conftest import SuspendClient, checkpoint_handler_code

JOURNALS = Path(__file__).parent / "journals"
SCHEMA = json.loads((Path(__file__).parent.parent / "jupyter_suspend/common/schemas/cli-report.json").read_text())
NOW = 1767225600 + 10 * 86400  # later than every journal: nothing is ongoing


def run(*args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    command = ["-c", code] if code else ["-m", "jupyter_suspend.cli.app"]
    return subprocess.run([sys.executable, *command, "report", *args], capture_output=True, text=True, timeout=60)


def by_id(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["cycle_id"]: c for c in data["cycles"]}


def test_one_journal_matches_the_hand_computed_figures() -> None:
    data = build_report(journal_files([str(JOURNALS / "team/gpu-lab.jsonl")]), NOW, gpus_per_node=4)
    cycles = by_id(data)
    c1, c2 = cycles["c1"], cycles["c2"]
    assert c1["released_hours"] == pytest.approx(11.9)
    assert c1["node_hours_released"] == pytest.approx(11.9)
    assert c1["gpu_hours_released"] == pytest.approx(47.6)
    assert c1["gpu_count_source"] == "assumed"
    assert c1["result"] == "live"
    assert c1["origin"] == "idle_policy"
    assert c1["resume_to_runnable_seconds"] == pytest.approx(60)
    assert c1["data_stored_bytes"] == 10_000_000_000
    assert c1["storage_gb_days"] == pytest.approx(5.0)
    assert c1["node_other_workloads"] == "unknown"  # GKE does not tell: never guessed
    assert c2["released_hours"] == pytest.approx(5.9)
    assert c2["gpu_hours_released"] == pytest.approx(23.6)
    assert c2["result"] == "cold"
    assert c2["resume_to_runnable_seconds"] == pytest.approx(600)
    assert c2["storage_gb_days"] == pytest.approx(2.25)
    env = data["environments"][0]
    assert env["environment"] == "gpu-lab"
    assert env["period_hours"] == pytest.approx(27)
    assert env["node_hours"] == {"observed": 27.0, "released": pytest.approx(17.8), "allocated": pytest.approx(9.2)}
    assert data["totals"]["resume_to_runnable_seconds"] == {"count": 2, "p50": 330.0, "p95": 573.0}
    assert data["problems"] == []


def test_without_a_gpu_count_the_gpu_hours_are_unknown_not_zero() -> None:
    data = build_report(journal_files([str(JOURNALS / "team/gpu-lab.jsonl")]), NOW, gpus_per_node=None)
    assert by_id(data)["c1"]["gpu_hours_released"] is None
    assert data["totals"]["gpu_hours_released"] is None
    assert data["totals"]["gpu_node_hours"] == {"observed": None, "released": None, "allocated": None}
    assert data["totals"]["node_hours_released"] == pytest.approx(17.8)  # the node itself is known


def test_a_directory_of_environments_and_classes() -> None:
    data = build_report(journal_files([str(JOURNALS)]), NOW, gpus_per_node=4)
    jsonschema.validate(data, SCHEMA)
    assert [e["environment"] for e in data["environments"]] == ["old", "team/cpu-small", "team/gpu-lab"]
    cycles = by_id(data)
    assert cycles["d1"]["kernel_memory_gib_hours"] == pytest.approx(4)
    assert cycles["d1"]["node_hours_released"] == 0  # local: the node is never released...
    assert cycles["d1"]["node_other_workloads"] == "yes"  # ...this server keeps running on it
    assert cycles["d1"]["gpu_hours_released"] == 0  # measured: no GPU
    assert cycles["d1"]["storage_gb_days"] == pytest.approx(0.5 / 12, abs=1e-6)  # rounded to 6 digits
    assert cycles["d2"]["result"] == "aborted"
    assert cycles["d2"]["released_hours"] == 0
    assert cycles["e1"]["result"] == "failed"
    assert cycles["e1"]["workload_class"] == "unclassified"
    assert cycles["e1"]["origin"] == "user"
    assert cycles["e1"]["released_hours"] == pytest.approx(3.8)
    assert cycles["e1"]["released_ongoing"] is False
    t = data["totals"]
    assert t["released_hours"] == pytest.approx(23.6)
    assert t["node_hours"] == {"observed": 34.0, "released": pytest.approx(17.8), "allocated": pytest.approx(16.2)}
    assert t["gpu_node_hours"] == {"observed": 108.0, "released": pytest.approx(71.2), "allocated": pytest.approx(36.8)}
    assert t["gpu_hours_unknown_cycles"] == 2
    assert t["kernel_memory_gib_hours"] == pytest.approx(7.8)
    assert t["data_stored_bytes"] == 15_500_000_000
    assert t["storage_gb_days"] == pytest.approx(7.291667)
    assert t["resume_to_runnable_seconds"] == {"count": 3, "p50": 60.0, "p95": 546.0}
    assert t["results"] == {"live": 1, "cold": 2, "failed": 1, "aborted": 1, "suspended": 0}
    assert t["rates"] == {"live": 0.25, "cold": 0.5, "failed": 0.25}
    assert sorted(data["by_class"]) == ["interactive_gpu", "small_cpu", "unclassified"]
    assert data["by_class"]["interactive_gpu"]["node_hours_released"] == pytest.approx(17.8)
    assert data["by_class"]["small_cpu"]["results"]["aborted"] == 1
    assert data["auto_suspends"] == {
        "suspended": {"interactive_gpu": 1, "small_cpu": 2},
        "cancelled": [{"workload_class": "small_cpu", "reason": "keep running", "count": 1}],
    }


def test_a_corrupt_line_is_reported_with_its_count_and_first_problem() -> None:
    data = build_report(journal_files([str(JOURNALS / "old.jsonl")]), NOW, gpus_per_node=None)
    [problem] = data["problems"]
    assert problem["count"] == 1
    assert problem["first"]["line"] == 6
    assert problem["first"]["kind"] == "corrupt"
    assert data["cycles"][0]["cycle_id"] == "e1"  # the lines around it are read

    done = run(str(JOURNALS / "old.jsonl"))
    assert done.returncode == 0, done.stderr
    assert "1 unreadable line(s)" in done.stderr
    assert "line 6" in done.stdout


def test_a_cycle_still_suspended_runs_until_now() -> None:
    entries = [json.loads(line) for line in (JOURNALS / "team/cpu-small/journal.jsonl").read_text().splitlines()]
    cut = [e for e in entries if e["seq"] <= 5]  # released, never resumed
    env = cost.environment_cost("x", cut, now=1767225600 + 1090 + 3600, gpus_per_node=None)
    [cycle] = env.cycles
    assert cycle.result == "suspended"
    assert cycle.released_ongoing is True
    assert cycle.released_hours == pytest.approx(1.0)
    assert env.period_hours == pytest.approx((1090 + 3600) / 3600)


def test_json_output_is_valid_against_its_schema() -> None:
    done = run(str(JOURNALS / "team"), "--json", "--gpus-per-node=4")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["totals"]["node_hours_released"] == pytest.approx(17.8)
    assert data["gpus_per_node"] == 4


def test_text_table_has_a_row_per_cycle_and_the_totals() -> None:
    done = run(str(JOURNALS), "--gpus-per-node=4")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith(("old ", "team/"))]
    assert len(rows) == 5
    assert "node-hours: observed 34.000, released 17.800, allocated 16.200" in done.stdout
    assert "p50 60.0 s, p95 546.0 s" in done.stdout


@pytest.mark.slow
def test_html_page_has_the_charts(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    done = run(str(JOURNALS), f"--html={page}")
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    images = text.split('src="data:image/png;base64,')[1:]
    assert len(images) == 3
    for image in images:
        assert base64.b64decode(image.split('"', 1)[0]).startswith(b"\x89PNG\r\n\x1a\n")
    assert "Resume to runnable cell" in text
    assert "team/gpu-lab" in text


def test_html_without_matplotlib_says_so_and_exits_1(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from jupyter_suspend.cli.app import main\n"
        "sys.argv = ['jupyter-suspend', *sys.argv[1:]]\n"
        "main()"
    )
    done = run(str(JOURNALS), f"--html={page}", code=code)
    assert done.returncode == 1
    assert "matplotlib, which is not installed" in done.stderr
    assert not page.exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "expected PATH"),
        (("/nonexistent/journal.jsonl",), "no such journal file or directory"),
        (("{empty}",), "no journal (*.jsonl)"),
        ((str(JOURNALS), "--gpus-per-node=-1"), "--gpus-per-node must be 0 or more"),
        ((str(JOURNALS), "--gpus-per-node=many"), "many"),
        ((str(JOURNALS), "--html={empty}"), "is a directory"),
        ((str(JOURNALS), "--html={empty}/missing/report.html"), "its folder does not exist"),
    ],
)
def test_bad_arguments_exit_2(tmp_path: Path, args: tuple[str, ...], said: str) -> None:
    done = run(*(a.replace("{empty}", str(tmp_path)) for a in args))
    assert done.returncode == 2, done
    assert said in done.stderr
    assert done.stdout == ""


@pytest.mark.slow
async def test_the_journal_of_a_real_suspend_and_resume(suspend_api: SuspendClient, state_dir: Path) -> None:
    session = await suspend_api.open_notebook("model.ipynb")
    await suspend_api.run(session["kernel"]["id"], checkpoint_handler_code())
    assert (await suspend_api.suspend(reason="end of day"))["state"] == "suspended"
    assert (await suspend_api.resume())["state"] == "ready"
    timeline = await suspend_api.json("GET", "timeline")

    data = build_report(journal_files([str(state_dir / "journal.jsonl")]), time.time(), gpus_per_node=None)
    jsonschema.validate(data, SCHEMA)
    [cycle] = data["cycles"]
    measured = timeline["cycles"][0]
    assert cycle["result"] == "cold"
    assert cycle["backend"] == "local"
    assert cycle["node_released"] is False
    assert cycle["node_hours_released"] == 0
    assert cycle["node_other_workloads"] == "yes"
    assert cycle["checkpoint_bytes"] == 8  # the checkpoint handler's answer
    assert cycle["resume_to_runnable_seconds"] == measured["durations"]["resume_to_runnable"]
    assert cycle["kernel_memory_gib_hours"] > 0
    assert data["problems"] == []
