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
     1 GiB -> 3.8 GiB-h; the resume failed -> result failed; GPU count not measured (with
     --gpus-per-node 4: 4 * 3.8 = 15.2 GPU-hours kept allocated, none released: local keeps the node).
Totals: free hours 11.9 + 5.9 + 2 + 3.8 = 23.6; node-hours released 11.9 + 5.9 = 17.8 of
  27 + 3 + 4 = 34 observed -> 16.2 allocated; GPU-hours (--gpus-per-node 4): observed 4*27 (gpu-lab)
  + 0*3 (cpu-small, measured 0) + 4*4 (old, assumed) = 124, released 71.2, allocated 52.8;
  kernel memory 4 + 3.8 = 7.8 GiB-h known, c1 and c2 unknown (no ``released`` figures) -> total null;
  stored 10e9 + 5e9 + 5e8 = 15.5e9 B; 5 + 2.25 + 1/24 = 7.291667 GB-days;
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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_suspend.cli import cost
from jupyter_suspend.cli.report import build_report, journal_files, render_text

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
    assert cycles["d1"]["gpu_hours_released"] == 0  # local: the node (and any GPU) stays...
    assert cycles["d1"]["gpu_hours_kept_allocated"] == 0  # ...and NVML measured none
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
    # old.jsonl is local without NVML: --gpus-per-node 4 is assumed there too, 4 GPUs * 4 h observed.
    assert t["gpu_node_hours"] == {"observed": 124.0, "released": pytest.approx(71.2), "allocated": pytest.approx(52.8)}
    assert t["gpu_hours_unknown_cycles"] == 0
    assert cycles["e1"]["gpu_hours_released"] == 0  # local: nothing given back...
    assert cycles["e1"]["gpu_hours_kept_allocated"] == pytest.approx(4 * 3.8)  # ...the GPUs stayed allocated
    assert t["gpu_hours_kept_allocated"] == pytest.approx(15.2)
    # c1 and c2 journaled no memory figures: the kernel memory total is unknown, 4 + 3.8 of it known.
    assert t["kernel_memory_gib_hours"] is None
    assert t["kernel_memory_gib_hours_known"] == pytest.approx(7.8)
    assert t["kernel_memory_unknown_cycles"] == 2
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
    assert done.stdout.count("1 unreadable line(s); first: line 6") == 1  # said once, in the text
    assert done.stderr == ""
    done = run(str(JOURNALS / "old.jsonl"), "--json")  # the JSON document carries it; stderr says it too
    assert "1 unreadable line(s)" in done.stderr


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
        ((str(JOURNALS), "--max-ongoing=0"), "--max-ongoing: '0' must be more than 0"),
        ((str(JOURNALS), "--max-ongoing=soon"), "--max-ongoing: bad duration 'soon'"),
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


# -- issue 20: journals built for each item; the expected figures worked out by hand in the comments --------------

T0 = 1767225600.0  # 2026-01-01T00:00:00Z; every time below is seconds after it
LOCAL = {"name": "local", "capabilities": {"releases_node": False, "keeps_live_memory": False}}
GKE = {"name": "gke", "capabilities": {"releases_node": True, "keeps_live_memory": True}}
GKE_COLD = {"name": "gke", "capabilities": {"releases_node": True, "keeps_live_memory": False}}


class Journal:
    """A journal as a server writes it: one process (``boot``) numbering its entries; ``at`` is
    seconds after ``t0`` and the monotonic clock follows the wall clock unless ``mono`` is given."""

    def __init__(self, boot: str, t0: float = T0) -> None:
        self.boot, self.t0, self.seq = boot, t0, 0
        self.entries: list[dict[str, Any]] = []

    def add(self, kind: str, at: float, mono: float | None = None, **fields: Any) -> Journal:
        self.seq += 1
        entry = {"seq": self.seq, "kind": kind, "wall": self.t0 + at, "monotonic": at if mono is None else mono}
        self.entries.append({**entry, "boot_id": self.boot, "pid": 1, **fields})
        return self

    def start(self, at: float = 0, backend: str = "gke") -> Journal:
        return self.add("server_started", at, backend=backend, state="running")

    def suspend(self, cycle: str, at: float, ended: float, backend: dict[str, Any], **fields: Any) -> Journal:
        when = {"active_work_ended": self.t0 + ended}
        return self.add("suspend_requested", at, operation_id=cycle, kernels=[], backend=backend, **when, **fields)

    def released(self, cycle: str, at: float, free_at: float, mono: float | None = None, **fields: Any) -> Journal:
        when = {"environment_stopped_at": self.t0 + free_at, "node_released_at": self.t0 + free_at}
        return self.add("released", at, mono, operation_id=cycle, kernels=[], **when, **fields)

    def resume(self, cycle: str, op: str, at: float, mono: float | None = None) -> Journal:
        return self.add("resume_requested", at, mono, operation_id=op, cycle_id=cycle)

    def resume_failed(self, op: str, at: float) -> Journal:
        return self.add("operation_finished", at, operation_id=op, operation_kind="resume", outcome="failed",
                        message="no capacity")  # fmt: skip

    def restored(
        self,
        cycle: str,
        op: str,
        at: float,
        asked: float,
        capacity: float | None,
        runnable: float,
        mono: float | None = None,
        **fields: Any,
    ) -> Journal:
        when = {"resume_requested_at": self.t0 + asked, "restored_at": self.t0 + runnable - 1}
        if capacity is not None:
            when["capacity_available_at"] = self.t0 + capacity
        when["first_cell_runnable_at"] = self.t0 + runnable
        fields.setdefault("restore", "cold")
        return self.add("restored", at, mono, operation_id=op, cycle_id=cycle, kernels=[], **when, **fields)

    def transition(self, at: float, frm: str, to: str) -> Journal:
        self.add("transition", at, to=to, kernels=[])
        self.entries[-1]["from"] = frm  # a keyword Python keeps for itself
        return self

    def text(self) -> str:
        return "".join(json.dumps(e) + "\n" for e in self.entries)

    def write(self, path: Path, text: str | None = None) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.text() if text is None else text)
        return path


def gke_journal(boot: str = "boot-gke") -> Journal:
    """One GKE cycle: released 700 -> capacity 7960 = 7260 s = 2.016667 h (2 GPUs assumed: 4.033333 GPU-h);
    resume asked 7900 -> runnable 8000 = 100 s; the journal spans 0 -> 10800 = 3 h."""
    j = Journal(boot).start()
    j.suspend("c-gke", 600, 300, GKE_COLD, workload_class="gpu")
    j.released("c-gke", 700, 700)
    j.resume("c-gke", "r-gke", 7900).restored("c-gke", "r-gke", 8000, 7900, 7960, 8000)
    return j.add("verified", 10800, kernels=[])


def local_journal(boot: str = "boot-local") -> Journal:
    """One local cycle (NVML measured no GPU): memory free 100 -> restored 3699 = 3599 s; resume asked 3680 ->
    runnable 3700 = 20 s; spans 0 -> 3600 + 400 = 4000 s."""
    j = Journal(boot).start(backend="local")
    j.suspend("c-local", 50, 0, LOCAL, workload_class="cpu")
    released = {"kernel_memory_bytes": 2**30, "gpu_memory_bytes": 0, "gpu_devices": [], "gpu_measurement": "nvml"}
    j.released("c-local", 100, 100, released=released)
    j.resume("c-local", "r-local", 3680).restored("c-local", "r-local", 3700, 3680, None, 3700)
    return j.add("verified", 4000, kernels=[])


def figures(data: dict[str, Any]) -> dict[str, Any]:
    """Everything a bill reads (the problems and the file list aside)."""
    return {k: v for k, v in data.items() if k not in ("problems", "journals", "generated_at")}


def report_of(*paths: Path | str, gpus: int | None = 2, now: float = T0 + 86400, **options: Any) -> dict[str, Any]:
    data = build_report(journal_files([str(p) for p in paths]), now, gpus, **options)
    jsonschema.validate(data, SCHEMA)
    return data


def test_item1_the_same_journal_twice_a_folder_and_its_file_or_a_backup_copy_count_once(tmp_path: Path) -> None:
    gke = gke_journal().write(tmp_path / "envs/gke/journal.jsonl")
    local = local_journal().write(tmp_path / "envs/local/journal.jsonl")
    once = report_of(gke, local)
    t = once["totals"]
    assert t["released_hours"] == pytest.approx(7260 / 3600 + 3599 / 3600, abs=1e-6)
    assert t["node_hours"] == {"observed": 3 + round(4000 / 3600, 6), "released": round(7260 / 3600, 6),
                               "allocated": pytest.approx(3 - 7260 / 3600 + 4000 / 3600, abs=2e-6)}  # fmt: skip
    # waits [20, 100]: p50 60, p95 20 + 0.95 * 80 = 96
    assert t["resume_to_runnable_seconds"] == {"count": 2, "p50": 60.0, "p95": 96.0}
    assert once["problems"] == []

    twice = report_of(gke, gke, local)  # the same file twice
    assert figures(twice) == figures(once)
    assert [p["kind"] for p in twice["problems"]] == ["duplicate_journal"]
    assert twice["problems"][0]["excluded"] is True

    inside = report_of(tmp_path / "envs", gke)  # a folder and a file inside it
    assert inside["totals"] == once["totals"]
    assert [p["kind"] for p in inside["problems"]] == ["duplicate_journal"]

    # A backup copy (the journal up to the release) next to the live one: one environment.
    backup = gke_journal()
    backup.entries = backup.entries[:3]
    backup.write(tmp_path / "envs/gke/journal.backup.jsonl")
    copied = report_of(tmp_path / "envs")
    assert copied["totals"] == once["totals"]
    [env] = [e for e in copied["environments"] if "gke" in e["environment"]]
    assert env["environment"] == "gke"  # named after the live journal, the one with the newest entry
    assert env["journals"] == [str(gke), str(tmp_path / "envs/gke/journal.backup.jsonl")]
    assert [p["kind"] for p in copied["problems"]] == ["duplicate_journal"]

    # A copy whose lines were rewritten by another process (no entry shared) still holds cycle c-gke: once.
    rewritten = gke_journal(boot="boot-rewritten").write(tmp_path / "copy/journal.jsonl")
    again = report_of(gke, local, rewritten)
    assert again["totals"]["released_hours"] == once["totals"]["released_hours"]
    assert again["totals"]["resume_to_runnable_seconds"] == once["totals"]["resume_to_runnable_seconds"]
    assert [(p["kind"], p["cycle_id"], p["excluded"]) for p in again["problems"]] == [
        ("duplicate_cycle", "c-gke", True),
        ("duplicate_journal", None, True),  # it holds nothing else: a copy, its 3 hours not observed twice
    ]
    assert again["totals"]["node_hours"] == once["totals"]["node_hours"]
    assert [e["copy_of"] for e in again["environments"]] == [None, None, "gke"]


def test_item2_a_gpu_total_over_an_unknown_count_is_null_never_zero(tmp_path: Path) -> None:
    gke = gke_journal().write(tmp_path / "gke/journal.jsonl")  # GPUs not measured, no --gpus-per-node
    local = local_journal().write(tmp_path / "local/journal.jsonl")  # NVML: 0 GPUs
    done = run(str(gke), str(local), "--json")
    data = json.loads(done.stdout)
    jsonschema.validate(data, SCHEMA)
    t = data["totals"]
    assert t["gpu_node_hours"] == {"observed": None, "released": None, "allocated": None}
    # The part that is known: the local environment, 0 GPUs for 4000 s.
    assert t["gpu_node_hours_known"] == {"environments": 1, "observed": 0.0, "released": 0.0, "allocated": 0.0}
    assert t["gpu_hours_released"] is None
    assert t["gpu_hours_unknown_cycles"] == 1
    assert t["gpu_count_unknown_environments"] == ["gke"]
    assert data["by_class"]["gpu"]["gpu_hours_released"] is None
    assert data["by_class"]["cpu"]["gpu_hours_released"] == 0.0
    # The text says the same: unknown ("-"), the known part, and how to give the count.
    text = run(str(gke), str(local)).stdout
    assert "GPU-hours: observed -, released -, allocated - (GPU count unknown for gke; the 1 environment(s) with " \
           "a known count: observed 0.000, released 0.000, allocated 0.000); pass --gpus-per-node" in text  # fmt: skip
    assert "observed 0.000, released 0.000, allocated 0.000\n" not in text


def test_item4_the_wait_runs_from_the_first_resume_request_failed_attempts_counted(tmp_path: Path) -> None:
    # Asked at 09:00 (32400), failed at 09:05, asked again at 09:15, runnable at 09:20 (33600): waited 1200 s.
    j = Journal("boot-wait").start()
    j.suspend("c-wait", 3600, 3000, GKE_COLD).released("c-wait", 3700, 3700)
    j.resume("c-wait", "r1", 32400).resume_failed("r1", 32700).transition(32700, "restoring", "failed")
    j.resume("c-wait", "r2", 33300).restored("c-wait", "r2", 33600, 33300, 33500, 33600)
    path = j.write(tmp_path / "wait/journal.jsonl")
    local = local_journal().write(tmp_path / "local/journal.jsonl")  # a clean 20 s wait beside it
    data = report_of(path, local)
    cycle = by_id(data)["c-wait"]
    assert cycle["resume_to_runnable_seconds"] == 1200.0  # not 33600 - 33300 = 300
    assert (cycle["resume_attempts"], cycle["resume_attempts_failed"]) == (2, 1)
    assert cycle["result"] == "cold"
    # The node was free from 3700 until capacity came back for the second attempt (33500).
    assert cycle["released_hours"] == round((33500 - 3700) / 3600, 6)
    t = data["totals"]
    # waits [20, 1200]: p50 610, p95 20 + 0.95 * 1180 = 1141
    assert t["resume_to_runnable_seconds"] == {"count": 2, "p50": 610.0, "p95": 1141.0}
    assert t["resume_attempts_failed"] == 1
    assert "(1 failed)" in render_text(data)


def test_item5_a_torn_last_line_does_not_leave_a_cycle_ongoing_for_months(tmp_path: Path) -> None:
    j = Journal("boot-torn").start()
    j.suspend("c-torn", 600, 300, GKE_COLD).released("c-torn", 700, 700)
    text = j.text() + json.dumps({"seq": 4, "kind": "restored", "wall": T0 + 9000})[:30]  # torn: no newline
    path = j.write(tmp_path / "torn/journal.jsonl", text)
    now = T0 + 337 * 86400  # the journal is 337 days old
    data = report_of(path, now=now)
    [cycle] = data["cycles"]
    assert cycle["released_ongoing"] is True
    assert cycle["excluded"] is True
    assert cycle["suspect"]
    assert data["totals"]["released_hours"] == 0
    assert data["totals"]["excluded_cycles"] == 1
    assert data["totals"]["node_hours"]["observed"] == round(700 / 3600, 6)  # the journal's span, not to now
    kinds = [p["kind"] for p in data["problems"]]
    assert kinds == ["unreadable_lines", "suspect_clock"]
    # Counted on request: from the release (700) to now.
    done = run(str(path), "--include-suspect", "--json")
    assert json.loads(done.stdout)["include_suspect"] is True
    assert json.loads(done.stdout)["cycles"][0]["excluded"] is False
    counted = report_of(path, now=now, include_suspect=True)
    assert counted["totals"]["released_hours"] == round((337 * 86400 - 700) / 3600, 6)  # 8087.805556 h
    # Without the torn line, an ongoing cycle whose journal's last entry is older than the bound is suspect too.
    quiet = Journal("boot-quiet").start()
    quiet.suspend("c-quiet", 600, 300, GKE_COLD).released("c-quiet", 700, 700)
    path = quiet.write(tmp_path / "quiet/journal.jsonl")
    assert report_of(path, now=T0 + 3 * 86400)["cycles"][0]["excluded"] is False  # a weekend: believed
    # 3 days - 700 s = 71.805556 h free so far
    assert report_of(path, now=T0 + 3 * 86400)["totals"]["released_hours"] == round((3 * 86400 - 700) / 3600, 6)
    assert report_of(path, now=T0 + 8 * 86400)["cycles"][0]["excluded"] is True  # 8 days > the 7-day bound
    assert report_of(path, now=T0 + 8 * 86400, max_ongoing=9 * 86400)["cycles"][0]["excluded"] is False


def test_item5_a_wall_clock_jump_the_monotonic_clock_contradicts_is_flagged(tmp_path: Path) -> None:
    # Local: the server runs through the suspend. Its wall clock jumps 30 days while monotonic moves 3600 s.
    j = Journal("boot-jump").start(backend="local")
    j.suspend("c-jump", 600, 300, LOCAL).released("c-jump", 700, 700)
    jump = 30 * 86400
    j.resume("c-jump", "r-jump", jump + 3600, mono=3600)
    j.restored("c-jump", "r-jump", jump + 3700, jump + 3600, None, jump + 3691, mono=3700)  # restored at + 3690
    path = j.write(tmp_path / "jump/journal.jsonl")
    data = report_of(path, now=T0 + 40 * 86400)
    [cycle] = data["cycles"]
    assert cycle["excluded"] is True
    assert "wall clock moved 720.0 h apart from the monotonic clock" in cycle["suspect"][0]
    assert data["totals"]["released_hours"] == 0
    # The period is the time that passed by the monotonic clock: the span 30 d + 3700 s less the 30-day jump.
    assert data["environments"][0]["period_hours"] == round(3700 / 3600, 6)  # 1.027778
    assert data["environments"][0]["clock_adjustment_hours"] == 720.0
    # With --include-suspect: 700 -> 30 d + 3690 = 720.747222 h, the figure the monotonic clock contradicts.
    counted = report_of(path, now=T0 + 40 * 86400, include_suspect=True)
    assert counted["totals"]["released_hours"] == round((jump + 3690 - 700) / 3600, 6)

    # A live return on GKE: the process was checkpointed while the node was away; where gVisor's best-effort
    # monotonic adjustment falls short, the gap within the released interval is the freeze, no contradiction.
    live = Journal("boot-live").start()
    live.suspend("c-live", 600, 300, GKE).add("flushed", 650, operation_id="c-live", kernels=[])
    live.released("c-live", 7800, 700, mono=760)  # written after the thaw: monotonic barely moved
    live.restored("c-live", "c-live", 7810, 7700, 7750, 7800, mono=770, restore="live")
    data = report_of(live.write(tmp_path / "live/journal.jsonl"))
    assert data["cycles"][0]["suspect"] == []
    assert data["problems"] == []
    assert data["totals"]["released_hours"] == round((7750 - 700) / 3600, 6)  # 1.958333 h


def test_item5_a_journal_dated_in_the_future_is_flagged_not_priced_at_zero(tmp_path: Path) -> None:
    j = Journal("boot-future", t0=T0 + 30 * 86400).start()  # its clock is 30 days ahead of the report
    j.suspend("c-future", 600, 300, GKE_COLD).released("c-future", 700, 700)
    j.add("gke_snapshot_ready", 700, operation_id="c-future", mark="snapshot_ready", size_bytes=8_000_000_000)
    data = report_of(j.write(tmp_path / "future/journal.jsonl"), now=T0 + 86400)
    [cycle] = data["cycles"]
    assert cycle["excluded"] is True
    assert "after the report's time" in cycle["suspect"][0]
    assert [p["kind"] for p in data["problems"]] == ["future_timestamp", "suspect_clock"]
    assert data["totals"]["storage_gb_days"] == 0
    assert data["totals"]["excluded_cycles"] == 1


def test_item6_on_local_gpu_hours_are_kept_allocated_and_the_hint_only_when_it_applies(tmp_path: Path) -> None:
    # Local without NVML: memory free 100 -> restored 3699 = 3599 s; with --gpus-per-node 2 the GPUs stayed allocated.
    j = Journal("boot-local-gpu").start(backend="local")
    j.suspend("c-lg", 50, 0, LOCAL)
    j.released("c-lg", 100, 100, released={"kernel_memory_bytes": 2**31, "gpu_measurement": "not installed"})
    j.resume("c-lg", "r-lg", 3680).restored("c-lg", "r-lg", 3700, 3680, None, 3700)
    path = j.add("verified", 7200, kernels=[]).write(tmp_path / "lab/state/journal.jsonl")
    data = report_of(path, gpus=2)
    [cycle] = data["cycles"]
    assert cycle["gpu_hours_released"] == 0.0
    assert cycle["node_hours_released"] == 0.0
    assert cycle["gpu_hours_kept_allocated"] == round(2 * round(3599 / 3600, 6), 6)  # 1.999444
    assert cycle["gpu_count_source"] == "assumed"
    env = data["environments"][0]
    assert env["gpus"] == 2
    assert env["gpu_node_hours"] == {"observed": 4.0, "released": 0.0, "allocated": 4.0}  # 2 GPUs * 2 h, all kept
    text = run(str(path), "--gpus-per-node=2").stdout  # issue 17 item 8: given, so never asked for
    assert "--gpus-per-node" not in text
    assert "GPU-hours kept allocated by suspends that keep the node: 1.999" in text
    # Without the flag the count is unknown: the kept GPU-hours are null, the hint is given.
    bare = report_of(path, gpus=None)
    assert bare["cycles"][0]["gpu_hours_kept_allocated"] is None
    assert bare["cycles"][0]["gpu_hours_released"] == 0.0  # nothing was given back, whatever the count
    assert "pass --gpus-per-node" in run(str(path)).stdout


def test_item7_rounded_figures_add_up_an_empty_journal_is_flagged_and_notes_are_not_repeated(tmp_path: Path) -> None:
    # Released 700 -> 23440 = 22740 s = 6.3166666... h; the span 0 -> 36000 = 10 h.
    j = Journal("boot-round").start()
    j.suspend("c-round", 600, 300, GKE_COLD).released("c-round", 700, 700)
    for at in (800, 900, 1000):
        j.add("capacity_wait", at, operation_id="r-round", reason="no GPU node free")
    j.resume("c-round", "r-round", 23400).restored("c-round", "r-round", 23500, 23400, 23440, 23500)
    path = j.add("verified", 36000, kernels=[]).write(tmp_path / "round/journal.jsonl")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty/journal.jsonl").write_bytes(b"")
    data = report_of(path, tmp_path / "empty/journal.jsonl")
    released = round(22740 / 3600, 6)  # 6.316667
    assert data["cycles"][0]["released_hours"] == released
    for hours in (data["environments"][0]["node_hours"], data["totals"]["node_hours"]):
        assert hours == {"observed": 10.0, "released": released, "allocated": round(10 - released, 6)}
        assert hours["observed"] - hours["released"] == pytest.approx(hours["allocated"], abs=1e-9)
    assert data["totals"]["gpu_node_hours"]["allocated"] == round(20 - 2 * released, 6)  # 7.366666
    notes = data["cycles"][0]["notes"]
    assert notes.count("waited for capacity: no GPU node free (3 times)") == 1
    assert len(notes) == len(set(notes))
    [empty] = data["problems"]
    assert empty["kind"] == "empty_journal"
    assert "0 bytes" in empty["message"]


def test_issue17_item10_journals_are_named_by_more_than_their_state_folder(tmp_path: Path) -> None:
    alice = local_journal("boot-alice").write(tmp_path / "alice/state/journal.jsonl")
    bob = local_journal("boot-bob").write(tmp_path / "bob/state/journal.jsonl")
    assert [name for name, _ in journal_files([str(alice), str(bob)])] == ["alice/state", "bob/state"]
    assert [name for name, _ in journal_files([str(alice)])] == ["alice/state"]
    assert [name for name, _ in journal_files([str(tmp_path)])] == ["alice/state", "bob/state"]
    assert [name for name, _ in journal_files([str(tmp_path / "alice/state")])] == ["alice/state"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property_a_journal_concatenated_with_itself_changes_no_figure(tmp_path: Path, data: st.DataObject) -> None:
    j = random_journal(data.draw)
    path = j.write(tmp_path / "p/journal.jsonl")
    now = T0 + 40 * 86400
    once = build_report(journal_files([str(path)]), now, 2)
    doubled = j.write(tmp_path / "p/journal.jsonl", j.text() * 2)
    twice = build_report(journal_files([str(doubled)]), now, 2)
    assert figures(twice) == figures(once)
    if j.entries:
        kinds = sorted(p["kind"] for p in once["problems"])
        assert sorted(p["kind"] for p in twice["problems"]) == sorted([*kinds, "duplicate_entries"])


def random_journal(draw: Any) -> Journal:
    """Cycles of random length and fate: released or aborted, resumed (after failed attempts), acknowledged or not."""
    backend = draw(st.sampled_from([LOCAL, GKE, GKE_COLD]))
    j = Journal(draw(st.sampled_from(["b1", "b2"]))).start(backend=backend["name"])
    at = 0.0
    for index in range(draw(st.integers(0, 4))):
        cycle = f"c{index}"
        at += draw(st.floats(1, 50_000))
        j.suspend(cycle, at + 60, at, backend, workload_class=draw(st.sampled_from(["a", "b"])))
        if draw(st.booleans()) and index:
            j.add("operation_finished", at + 70, operation_id=cycle, operation_kind="suspend", outcome="aborted")
            continue
        at += 60 + draw(st.floats(1, 5000))
        j.released(cycle, at, at, released={"kernel_memory_bytes": draw(st.integers(0, 2**34))})
        for attempt in range(draw(st.integers(0, 2))):
            at += draw(st.floats(1, 90_000))
            j.resume(cycle, f"{cycle}-f{attempt}", at).resume_failed(f"{cycle}-f{attempt}", at + 30)
            at += 30
        fate = draw(st.sampled_from(["restored", "acknowledged", "open"]))
        if fate == "restored":
            asked = at + draw(st.floats(1, 90_000))
            j.resume(cycle, f"{cycle}-r", asked)
            at = asked + draw(st.floats(1, 900))
            j.restored(cycle, f"{cycle}-r", at, asked, asked + 1, at)
        elif fate == "acknowledged":
            at += draw(st.floats(1, 9000))
            j.transition(at, "failed", "running")
        else:
            break
    return j
