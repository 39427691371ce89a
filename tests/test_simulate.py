"""``jupyter suspend simulate``: the worked example exactly, the sweep against a hand-computed case."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_suspend.cli import cost
from jupyter_suspend.cli.report import build_report, environments, journal_files

from .test_report import GKE_COLD, T0, Journal, gke_journal, local_journal, random_journal

JOURNALS = Path(__file__).parent / "journals"
SCHEMA = json.loads((Path(__file__).parent.parent / "jupyter_suspend/common/schemas/cli-simulate.json").read_text())


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_suspend.cli.app", "simulate", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def run_json(*args: str) -> dict[str, Any]:
    done = run("--json", *args)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    jsonschema.validate(data, SCHEMA)
    return data


@pytest.mark.slow
def test_the_worked_example_is_reproduced_exactly() -> None:
    data = run_json()
    assert data["worked_example"] == {"week_hours": 168.0, "active_hours": 40.0, "released_upper_bound_hours": 128.0}
    assert data["source"] == "none"
    text = run().stdout
    assert "40 active hours in a 168-hour week: at most 128 node-hours released" in text
    assert run_json("--week-hours=100", "--active-hours=30.5")["worked_example"]["released_upper_bound_hours"] == 69.5


# The hand-computed case: active 0-1 h, 1 h 10 min-2 h, 4-5 h in a 6-hour horizon (seconds);
# idle gaps: 3600-4200 (600 s, the user returns), 7200-14400 (7200 s, returns),
# 18000-21600 (3600 s, no return). Suspend takes S = 60 s, resume R = 120 s.
# A gap longer than the threshold T is one suspend: the node is free from end + T + S
# to the gap's end; each return waits R; "not paying" when free < R.
ACTIVITY = [(0.0, 3600.0), (4200.0, 7200.0), (14400.0, 18000.0)]
HORIZON = (0.0, 21600.0)
EXPECTED = {
    # T=5m:  600-360=240, 7200-360=6840, 3600-360=3240 -> 10320 s; 3 suspends; 2 returns, 240 s waited
    300: (10320 / 3600, 3, 2, 240.0, 0),
    # T=8m:  600-540=60 (< R: does not pay), 7200-540=6660, 3600-540=3060 -> 9780 s
    480: (9780 / 3600, 3, 2, 240.0, 1),
    # T=15m: the 600 s gap is too short; 7200-960=6240, 3600-960=2640 -> 8880 s; 1 return
    900: (8880 / 3600, 2, 1, 120.0, 0),
    # T=1h:  7200-3660=3540; the 3600 s gap is not longer than T -> 3540 s
    3600: (3540 / 3600, 1, 1, 120.0, 0),
    # T=2h:  no gap is longer than 2 h
    7200: (0.0, 0, 0, 0.0, 0),
}


@pytest.mark.parametrize("threshold", sorted(EXPECTED))
def test_the_sweep_matches_the_hand_computed_case(threshold: int) -> None:
    row = cost.sweep_one(ACTIVITY, HORIZON, threshold, suspend_seconds=60, resume_seconds=120)
    hours, interruptions, returns, waiting, not_paying = EXPECTED[threshold]
    assert row.released_hours == pytest.approx(hours)
    assert (row.interruptions, row.returns, row.waiting_added_seconds, row.suspends_not_paying) == (
        interruptions,
        returns,
        waiting,
        not_paying,
    )


def test_a_zero_threshold_and_free_suspends_reach_the_upper_bound() -> None:
    # 6 h horizon, 3600 + 3000 + 3600 = 10200 s active: 11400 s idle (600 + 7200 + 3600), all of it with T = S = 0.
    row = cost.sweep_one(ACTIVITY, HORIZON, 0, suspend_seconds=0, resume_seconds=0)
    assert row.released_hours == pytest.approx(11400 / 3600)


@pytest.mark.slow
def test_synthetic_week_is_reproducible_and_shaped_as_expected() -> None:
    args = ("--synthetic", "--seed=7", "--thresholds=1s,5m,15m,30m,1h,2h", "--suspend-seconds=0", "--resume-seconds=90")
    first, again = run_json(*args), run_json(*args)
    assert first == again
    other = run_json("--synthetic", "--seed=8", "--thresholds=1s,5m,15m,30m,1h,2h", "--suspend-seconds=0")
    assert other["classes"][0]["rows"] != first["classes"][0]["rows"]
    [group] = first["classes"]
    assert group["horizon_hours"] == 168.0
    assert group["suspend_source"] == "given"
    rows = group["rows"]
    # The week has the worked example's 40 active hours: at most 128 releasable.
    assert group["active_hours"] == pytest.approx(40.0, abs=1e-6)
    assert group["released_upper_bound_hours"] == pytest.approx(128.0, abs=1e-6)
    # With a 1 s threshold and free suspends nearly everything idle is released: 1 s per gap is not.
    assert group["released_upper_bound_hours"] - rows[0]["released_hours"] == pytest.approx(
        rows[0]["interruptions"] / 3600, abs=1e-5
    )
    # A longer threshold never releases more, never interrupts more, never adds waiting.
    for shorter, longer in itertools.pairwise(rows):
        assert longer["released_hours"] <= shorter["released_hours"]
        assert longer["interruptions"] <= shorter["interruptions"]
        assert longer["waiting_added_seconds"] <= shorter["waiting_added_seconds"]
    assert rows[1]["waiting_added_seconds"] == 90 * rows[1]["returns"]


def test_activity_read_from_a_journal() -> None:
    # cpu-small: active from the start (0) to d1's end of active work (400); back at its
    # runnable cell (8293); d2 was aborted, so work went on to the journal's end (10800).
    entries = [json.loads(line) for line in (JOURNALS / "team/cpu-small/journal.jsonl").read_text().splitlines()]
    t0 = 1767225600
    activity, horizon = cost.activity_from_entries(entries)
    assert horizon == (t0, t0 + 10800)
    assert activity == [(t0, t0 + 400), (t0 + 8293, t0 + 10800)]


@pytest.mark.slow
def test_sweep_over_journals_uses_measured_times_per_class() -> None:
    data = run_json(str(JOURNALS), "--thresholds=5m,1h")
    assert data["source"] == "journals"
    assert len(data["problems"]) == 1  # old.jsonl's corrupt line
    groups = {g["workload_class"]: g for g in data["classes"]}
    assert sorted(groups) == ["interactive_gpu", "small_cpu", "unclassified"]
    gpu = groups["interactive_gpu"]
    # suspend request -> node released: c1 3000 -> 3600, c2 50400 -> 50880: median 540 s;
    # resume request -> runnable: 60 and 600 s: median 330 s.
    assert (gpu["suspend_seconds"], gpu["suspend_source"]) == (540.0, "measured")
    assert (gpu["resume_seconds"], gpu["resume_source"]) == (330.0, "measured")
    # active: 0-2400, 46460-50000, 72300-97200 = 30840 s of 97200 s.
    assert gpu["active_hours"] == pytest.approx(30840 / 3600, abs=1e-6)
    assert gpu["horizon_hours"] == 27.0
    # T=1h: gaps 2400-46460 (44060 s) and 50000-72300 (22300 s), both with a return:
    # free 44060-3600-540 + 22300-3600-540 = 58080 s; 2 returns wait 2 * 330 s.
    row = gpu["rows"][1]
    assert row["released_hours"] == pytest.approx(58080 / 3600, abs=1e-6)
    assert (row["interruptions"], row["returns"], row["waiting_added_seconds"]) == (2, 2, 660.0)
    given = run_json(str(JOURNALS / "team"), "--resume-seconds=10")
    assert {g["resume_source"] for g in given["classes"]} == {"given"}


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--synthetic", "--thresholds=5x"), "bad duration '5x'"),
        (("--synthetic", "--thresholds=,"), "at least one duration"),
        (("--synthetic", "--thresholds=-5m"), "bad duration"),
        (("--synthetic", "--resume-seconds=-1"), "--resume-seconds must be 0 or more"),
        (("--active-hours=200",), "between 0 and the week's 168"),
        (("--synthetic", str(JOURNALS)), "not both"),
        (("/nonexistent/journals",), "no such journal file or directory"),
        (("--seed=abc", "--synthetic"), "abc"),
    ],
)
def test_bad_arguments_exit_2(args: tuple[str, ...], said: str) -> None:
    done = run(*args)
    assert done.returncode == 2, done
    assert said in done.stderr
    assert done.stdout == ""


# -- issue 20 item 3, issue 17 item 10 -----------------------------------------------------------------------------


def failed_then_acknowledged(tmp_path: Path) -> Path:
    """c1: work ends 1000, node released 1200, a resume fails (5000 -> 5100), the user acknowledges (5200)
    and works on; c2: work ends 9000, released 9200, asked 11900, capacity 12000, runnable 12100; ends 15000."""
    j = Journal("boot-ack").start()
    j.suspend("c1", 1100, 1000, GKE_COLD, workload_class="gpu").released("c1", 1200, 1200)
    j.resume("c1", "r1", 5000).resume_failed("r1", 5100).transition(5100, "restoring", "failed")
    j.transition(5200, "failed", "running")
    j.suspend("c2", 9100, 9000, GKE_COLD, workload_class="gpu").released("c2", 9200, 9200)
    j.resume("c2", "r2", 11900).restored("c2", "r2", 12100, 11900, 12000, 12100)
    return j.add("verified", 15000, kernels=[]).write(tmp_path / "ack/journal.jsonl")


def test_item3_after_an_acknowledged_failure_work_is_work_in_simulate_as_in_report(tmp_path: Path) -> None:
    path = failed_then_acknowledged(tmp_path)
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    activity, horizon = cost.activity_from_entries(entries)
    assert horizon == (T0, T0 + 15000)
    assert activity == [(T0, T0 + 1000), (T0 + 5200, T0 + 9000), (T0 + 12100, T0 + 15000)]
    # The report on the same journal: two interruptions, c1 free 1200 -> 5200 (acknowledged), c2 9200 -> 12000.
    data = build_report(journal_files([str(path)]), T0 + 86400, None)
    assert [c["result"] for c in data["cycles"]] == ["failed", "cold"]
    assert data["totals"]["released_hours"] == round((4000 + 2800) / 3600, 6)
    # T = 5 min, S = R = 0: gaps 1000-5200 (free 4200 - 300 = 3900) and 9000-12100 (3100 - 300 = 2800):
    # 6700 s, 2 interruptions, as the report counted; T = 1 h: only the first gap, 4200 - 3600 = 600 s.
    sim = run_json(str(path), "--thresholds=5m,1h", "--suspend-seconds=0", "--resume-seconds=0")
    [group] = sim["classes"]
    assert group["active_hours"] == pytest.approx((1000 + 3800 + 2900) / 3600, abs=1e-6)
    five, hour = group["rows"]
    assert five["released_hours"] == pytest.approx(6700 / 3600, abs=1e-6)
    assert (five["interruptions"], five["returns"]) == (2, 2)
    assert hour["released_hours"] == pytest.approx(600 / 3600, abs=1e-6)
    assert hour["interruptions"] == 1
    # Measured from the same cycles: suspend 1100 -> 1200 and 9100 -> 9200 (100 s); the one return waited 200 s.
    measured = run_json(str(path), "--thresholds=5m")["classes"][0]
    assert (measured["suspend_seconds"], measured["resume_seconds"]) == (100.0, 200.0)


def test_item1_simulate_counts_a_journal_given_twice_or_copied_once(tmp_path: Path) -> None:
    path = failed_then_acknowledged(tmp_path)
    once = run_json(str(path), "--thresholds=5m,1h", "--suspend-seconds=0", "--resume-seconds=0")
    twice = run_json(str(path), str(tmp_path), "--thresholds=5m,1h", "--suspend-seconds=0", "--resume-seconds=0")
    copy = Journal("boot-rewritten")  # the same cycles written again by another process: no entry shared
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    copy.entries = [{**e, "boot_id": "boot-rewritten"} for e in lines]
    rewritten = copy.write(tmp_path / "copy/journal.jsonl")
    copied = run_json(str(path), str(rewritten), "--thresholds=5m,1h", "--suspend-seconds=0", "--resume-seconds=0")
    for data in (twice, copied):
        assert data["classes"] == once["classes"]  # 6700 s and 600 s, 2 and 1 interruptions, 1 environment
    assert [p["kind"] for p in twice["problems"]] == ["duplicate_journal"]
    assert [p["kind"] for p in copied["problems"]] == ["duplicate_cycle", "duplicate_cycle", "duplicate_journal"]


def test_item7_simulate_on_a_local_journal_says_the_node_is_never_released(tmp_path: Path) -> None:
    path = local_journal().write(tmp_path / "local/journal.jsonl")
    [group] = run_json(str(path), "--thresholds=5m")["classes"]
    assert group["node_released"] is False
    assert "never releases the node" in group["notes"][0]
    assert "never releases the node" in run(str(path), "--thresholds=5m").stdout
    gke = gke_journal().write(tmp_path / "gke/journal.jsonl")
    [group] = run_json(str(gke), "--thresholds=5m")["classes"]
    assert group["node_released"] is True
    assert group["notes"] == []


def test_issue17_item10_the_synthetic_week_has_the_worked_examples_hours_and_stays_under_its_bound() -> None:
    data = run_json("--synthetic", "--seed=7", "--thresholds=1s,5m,1h", "--suspend-seconds=0")
    [group] = data["classes"]
    assert data["worked_example"]["released_upper_bound_hours"] == 128.0
    assert group["active_hours"] == pytest.approx(40.0, abs=1e-6)
    assert group["released_upper_bound_hours"] == pytest.approx(128.0, abs=1e-6)
    assert all(row["released_hours"] <= 128.0 + 1e-6 for row in group["rows"])
    busier = run_json("--synthetic", "--seed=7", "--active-hours=60")["classes"][0]
    assert busier["active_hours"] == pytest.approx(60.0, abs=1e-6)
    assert busier["released_upper_bound_hours"] == pytest.approx(108.0, abs=1e-6)
    short = run_json("--synthetic", "--seed=3", "--week-hours=30", "--active-hours=20")["classes"][0]
    assert (short["horizon_hours"], short["active_hours"]) == (30.0, pytest.approx(20.0, abs=1e-6))


@pytest.mark.parametrize(
    ("args", "said", "not_said"),
    [
        (("--week-hours=-1",), "--week-hours must be more than 0, not -1", "--active-hours"),
        (("--week-hours=0",), "--week-hours must be more than 0", "--active-hours"),
        (("--synthetic", "--thresholds=0m"), "--thresholds: '0m' must be more than 0", "bad duration"),
        (("--synthetic", "--thresholds=5m,0"), "'0' must be more than 0", "bad duration"),
    ],
)
def test_issue17_item10_bad_weeks_and_thresholds_blame_the_right_option(
    args: tuple[str, ...], said: str, not_said: str
) -> None:
    done = run(*args)
    assert done.returncode == 2, done
    assert said in done.stderr
    assert not_said not in done.stderr


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property_a_journal_concatenated_with_itself_changes_no_sweep(tmp_path: Path, data: st.DataObject) -> None:
    j = random_journal(data.draw)
    path = j.write(tmp_path / "p/journal.jsonl")
    options = cost.Options(T0 + 40 * 86400, include_suspect=True)
    once, _ = environments(journal_files([str(path)]), options)
    j.write(path, j.text() * 2)
    twice, problems = environments(journal_files([str(path)]), options)
    if j.entries:
        assert "duplicate_entries" in [p["kind"] for p in problems]
    assert [cost.activity(env) for env in twice] == [cost.activity(env) for env in once]
    rows = [cost.sweep([cost.activity(env) for env in envs], [300, 3600], 60, 120) for envs in (once, twice)]
    assert rows[0] == rows[1]
    assert cost.measured_times(twice[0].cycles) == cost.measured_times(once[0].cycles)
