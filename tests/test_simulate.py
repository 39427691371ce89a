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

from jupyter_suspend.cli import cost

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
    args = ("--synthetic", "--seed=7", "--thresholds=0s,5m,15m,30m,1h,2h", "--suspend-seconds=0", "--resume-seconds=90")
    first, again = run_json(*args), run_json(*args)
    assert first == again
    other = run_json("--synthetic", "--seed=8", "--thresholds=0s,5m,15m,30m,1h,2h")
    assert other["classes"][0]["active_hours"] != first["classes"][0]["active_hours"]
    [group] = first["classes"]
    assert group["horizon_hours"] == 168.0
    assert group["suspend_source"] == "given"
    rows = group["rows"]
    # With a zero threshold and free suspends everything idle is released: the upper bound.
    assert rows[0]["released_hours"] == pytest.approx(group["released_upper_bound_hours"], abs=1e-5)
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
        (("--synthetic", "--thresholds=5x"), "bad threshold '5x'"),
        (("--synthetic", "--thresholds=,"), "at least one duration"),
        (("--synthetic", "--thresholds=-5m"), "bad threshold"),
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
