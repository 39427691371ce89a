"""The idle policy: workload classes, the break-even guard, the warning, Keep running.

Real jupyter_server, real kernels, the policy's own timer; thresholds of a
second or two through configuration. Until a notebook names its class the
default class here is patient (an hour), so nothing is suspended before a test
has opened its notebook.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import nbformat
import pytest
from traitlets import TraitError

from jupyter_suspend.server.activity import Reading, Signal
from jupyter_suspend.server.idle_policy import (
    AUTO_SUSPEND_CANCELLED,
    DEFAULT_CLASSES,
    EVENT_SCHEMA_ID,
    WORKLOAD_CLASS_ENV,
    IdlePolicy,
    WorkloadClass,
    break_even,
    decide,
    parse_classes,
)

from .conftest import SuspendClient

CLASSES = {
    "patient": {"idle_seconds": 3600.0},
    "quick": {"idle_seconds": 1.5, "warning_seconds": 1.5},
    "slow-warning": {"idle_seconds": 1.0, "warning_seconds": 60.0},
    "long-training": {"idle_seconds": 1.0, "warning_seconds": 0.5},
    "from-kernelspec": {"idle_seconds": 3000.0},
}


@pytest.fixture
def idle_config(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The policy's configuration; a test changes it with ``parametrize("idle_config", [{...}], indirect=True)``."""
    return {
        "enabled": True,
        "tick_seconds": 0.2,
        "default_cycle_seconds": 0.1,
        "default_workload_class": "patient",
        "workload_classes": CLASSES,
        **getattr(request, "param", {}),
    }


@pytest.fixture
def jp_server_config(state_dir: Path, suspend_config: dict[str, Any], idle_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_suspend": True}, "allow_unauthenticated_access": False},
        "SuspendApp": {"state_dir": str(state_dir), **suspend_config},
        "IdlePolicy": idle_config,
    }


@pytest.fixture
def idle_events(jp_serverapp: Any) -> list[tuple[float, dict[str, Any]]]:
    events: list[tuple[float, dict[str, Any]]] = []

    async def listener(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        events.append((time.time(), data))

    jp_serverapp.event_logger.add_listener(schema_id=EVENT_SCHEMA_ID, listener=listener)
    return events


def journal(state_dir: Path, kind: str | None = None) -> list[dict[str, Any]]:
    entries = [json.loads(line) for line in (state_dir / "journal.jsonl").read_text().splitlines() if line]
    return [e for e in entries if kind is None or e["kind"] == kind]


async def open_classed_notebook(api: SuspendClient, name: str, workload_class: str | None) -> str:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    if workload_class:
        nb.metadata["jupyter_suspend"] = {"workload_class": workload_class}
    nbformat.write(nb, str(api.root_dir / name))
    session = await api.open_notebook_path(name)
    return str(session["kernel"]["id"])


async def wait_status(api: SuspendClient, predicate: Any, timeout: float, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status = await api.status()
        if predicate(status):
            return status
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s: {status}"
        await asyncio.sleep(0.05)


def warned(status: dict[str, Any]) -> bool:
    return status["idle_warning"] is not None


# -- real server ------------------------------------------------------------------------------------------------------
@pytest.mark.slow
async def test_an_idle_kernel_with_a_browser_connected_is_warned_then_suspended(
    suspend_api: SuspendClient, jp_ws_fetch: Any, state_dir: Path, idle_events: list[tuple[float, dict[str, Any]]]
) -> None:
    kernel_id = await open_classed_notebook(suspend_api, "quick.ipynb", "quick")
    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")  # a browser tab, connected and silent
    try:
        warning_status = await wait_status(suspend_api, warned, 30, "the warning")
        answer = await suspend_api.json("GET", "activity")
        assert answer["workload_class"]["name"] == "quick"
        assert answer["workload_class"]["source"] == "notebook"
        assert answer["decision"]["action"] == "suspend"
        assert answer["decision"]["figures"]["idle_seconds"] >= 1.5
        assert answer["decision"]["figures"]["break_even"]["pays"] is True
        assert warning_status["idle_warning"]["workload_class"] == "quick"
        assert warning_status["state"] == "running"
        await suspend_api.wait_state("suspended", timeout=60)
    finally:
        ws.close()
    actions = [data["action"] for _, data in idle_events]
    cancelled = [(e["by"], e["reason"]) for e in journal(state_dir, AUTO_SUSPEND_CANCELLED)]
    assert actions == ["warning", "suspend"], cancelled
    (warned_at, _), (suspended_at, suspend_event) = idle_events
    assert suspended_at - warned_at >= 1.5 - 0.05  # the whole warning, then the suspend
    (requested,) = journal(state_dir, "suspend_requested")
    assert requested["origin"] == "idle_policy"
    assert requested["workload_class"] == "quick"
    assert requested["reason"].startswith("automatic suspend: idle ")
    assert "threshold 1.5 s, class quick" in requested["reason"]
    assert requested["reason"] == suspend_event["reason"]
    # Suspended: the policy does nothing more.
    after = await suspend_api.json("GET", "activity")
    assert after["decision"]["action"] == "not_now"
    assert (await suspend_api.status())["idle_warning"] is None


@pytest.mark.slow
@pytest.mark.parametrize("idle_config", [{"default_workload_class": "slow-warning"}], indirect=True)
async def test_keep_running_cancels_the_warning_and_is_journaled_and_activity_cancels_it_too(
    suspend_api: SuspendClient, state_dir: Path, idle_events: list[tuple[float, dict[str, Any]]]
) -> None:
    kernel_id = await open_classed_notebook(suspend_api, "kept.ipynb", None)
    await wait_status(suspend_api, warned, 30, "the warning")
    before = journal(state_dir)
    kept_at = time.time()
    answer = await suspend_api.json("POST", "activity/keep-running", {})
    assert answer == {"cancelled": True, "workload_class": "slow-warning"}
    status = await suspend_api.status()
    assert status["idle_warning"] is None
    assert status["state"] == "running"
    (cancelled,) = journal(state_dir)[len(before) :]
    assert cancelled["kind"] == AUTO_SUSPEND_CANCELLED
    assert (cancelled["by"], cancelled["workload_class"]) == ("keep_running", "slow-warning")
    activity = await suspend_api.json("GET", "activity")
    assert activity["last_signal"] == "keep_running"

    # No warning pending: Keep running is a conflict; bad bodies are refused. Nothing is journaled.
    after_keep = journal(state_dir)
    await suspend_api.json("POST", "activity/keep-running", {}, expect=409)
    for raw in (b'{"x": 1}', b"not json", b"[]", b'{"reason": 3}', b"{" * 100):
        response = await suspend_api.call("POST", "activity/keep-running", raw=raw)
        assert response.code == 400, raw
    assert journal(state_dir) == after_keep

    # Idle time started again at Keep running: the next warning comes a class threshold later.
    second = await wait_status(suspend_api, warned, 30, "the second warning")
    started = datetime.fromisoformat(second["idle_warning"]["started_at"]).timestamp()
    assert started >= kept_at + 1.0  # the class's idle threshold after Keep running
    # A cell during the warning cancels it as well.
    await suspend_api.run(kernel_id, "y = 2")
    await wait_status(suspend_api, lambda s: not warned(s), 10, "the cancellation by activity")
    by_activity = journal(state_dir, AUTO_SUSPEND_CANCELLED)[-1]
    assert by_activity["by"] == "activity"
    assert journal(state_dir, "suspend_requested") == []
    assert [data.get("by") for _, data in idle_events if data["action"] == "cancelled"] == ["keep_running", "activity"]


@pytest.mark.slow
@pytest.mark.parametrize("idle_config", [{"default_cycle_seconds": 3600.0}], indirect=True)
async def test_the_break_even_guard_refuses_a_suspend_that_would_not_pay(
    suspend_api: SuspendClient, state_dir: Path
) -> None:
    await open_classed_notebook(suspend_api, "short.ipynb", "quick")
    deadline = time.monotonic() + 30
    while (answer := await suspend_api.json("GET", "activity"))["decision"]["action"] != "refused":
        assert answer["decision"]["action"] in ("wait", "active"), answer["decision"]
        assert time.monotonic() < deadline, answer
        await asyncio.sleep(0.1)
    guard = answer["decision"]["figures"]["break_even"]
    assert guard["pays"] is False
    assert guard["cycle_cost_seconds"] == 3600.0
    assert guard["cost_source"].startswith("configured default")
    assert 1.5 <= guard["expected_idle_seconds"] < 3600.0
    assert "would not pay" in answer["decision"]["reason"]
    # Several ticks later: no warning, no suspend.
    await asyncio.sleep(1.0)
    status = await suspend_api.status()
    assert status["idle_warning"] is None
    assert status["state"] == "running"
    assert journal(state_dir, "suspend_requested") == []


@pytest.mark.slow
async def test_long_training_never_suspends_a_running_cell_and_suspends_after_it(
    suspend_api: SuspendClient, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WORKLOAD_CLASS_ENV, "long-training")
    kernel_id = await open_classed_notebook(suspend_api, "train.ipynb", "quick")  # the environment wins
    await suspend_api.run(kernel_id, "pass")  # (the server sees the kernel idle: see test_activity.settled)
    async with suspend_api.busy(kernel_id, 5.0):
        # (Under load the session may have been idle for the class's second before the cell
        # started: a warning opened then ends at the policy's next reading of the running cell.)
        deadline = time.monotonic() + 10
        while (await suspend_api.json("GET", "activity"))["decision"]["action"] != "active":
            assert time.monotonic() < deadline, "the policy never saw the running cell"
            await asyncio.sleep(0.05)
        await wait_status(suspend_api, lambda s: not warned(s), 10, "the running cell seen by the policy")
        ends = time.monotonic() + 3.0
        while time.monotonic() < ends:
            status = await suspend_api.status()
            assert status["idle_warning"] is None
            assert status["state"] == "running"
            await asyncio.sleep(0.1)
        answer = await suspend_api.json("GET", "activity")
        assert answer["workload_class"]["source"] == "environment"
        assert answer["decision"]["action"] == "active"
        assert "never suspends a running cell" in answer["decision"]["reason"]
        assert journal(state_dir, "suspend_requested") == []
        await suspend_api.wait_until_idle(kernel_id, timeout=10)
    cell_ended = time.time()
    await wait_status(suspend_api, warned, 30, "the warning after the cell")
    await suspend_api.wait_state("suspended", timeout=60)
    (requested,) = journal(state_dir, "suspend_requested")
    assert requested["workload_class"] == "long-training"
    assert requested["origin"] == "idle_policy"
    assert requested["wall"] >= cell_ended + 1.0  # the class's idle threshold after the cell ended


@pytest.mark.slow
async def test_the_class_from_a_kernel_specs_metadata(suspend_api: SuspendClient, jp_kernel_dir: Path) -> None:
    spec_dir = jp_kernel_dir / "classed-python"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python (classed)",
                "language": "python",
                "metadata": {"jupyter_suspend": {"workload_class": "from-kernelspec"}},
            }
        )
    )
    nbformat.write(nbformat.v4.new_notebook(), str(suspend_api.root_dir / "plain.ipynb"))
    response = await suspend_api.fetch(
        "api",
        "sessions",
        method="POST",
        body=json.dumps({"path": "plain.ipynb", "type": "notebook", "kernel": {"name": "classed-python"}}),
    )
    await suspend_api.kernel_ready(json.loads(response.body)["kernel"]["id"])
    answer = await suspend_api.json("GET", "activity")
    assert answer["workload_class"]["name"] == "from-kernelspec"
    assert answer["workload_class"]["source"] == "kernelspec"
    assert answer["workload_class"]["idle_seconds"] == 3000.0
    assert (await suspend_api.status())["workload_class"] == "from-kernelspec"


async def test_a_user_suspend_is_journaled_with_its_origin(suspend_api: SuspendClient, state_dir: Path) -> None:
    await suspend_api.suspend(reason="by hand")
    (requested,) = journal(state_dir, "suspend_requested")
    assert (requested["origin"], requested["workload_class"], requested["reason"]) == ("user", None, "by hand")


async def test_the_policy_timer_stops_with_the_extension(jp_serverapp: Any) -> None:
    policy: IdlePolicy = jp_serverapp.web_app.settings["jupyter_suspend_idle_policy"]
    await asyncio.sleep(0.3)  # the timer starts once the loop runs
    task = policy._task
    assert task is not None
    assert not task.done()
    await policy.stop()
    assert task.done()
    assert policy._task is None


@pytest.mark.parametrize("idle_config", [{"enabled": False}], indirect=True)
async def test_a_disabled_policy_has_no_timer_and_decides_nothing(suspend_api: SuspendClient) -> None:
    policy: IdlePolicy = suspend_api.serverapp.web_app.settings["jupyter_suspend_idle_policy"]
    await asyncio.sleep(0.3)
    assert policy._task is None
    answer = await suspend_api.json("GET", "activity")
    assert answer["enabled"] is False
    assert answer["decision"]["action"] == "disabled"
    assert (await suspend_api.status())["idle_policy_enabled"] is False


# -- configuration and the pure parts ---------------------------------------------------------------------------------
def test_the_default_classes_and_configured_ones() -> None:
    classes = parse_classes({"small-cpu": {"idle_seconds": 120}, "tiny": {"idle_seconds": 5, "keep_memory": False}})
    assert set(classes) == {*DEFAULT_CLASSES, "tiny"}
    assert classes["small-cpu"].idle_seconds == 120
    assert classes["small-cpu"].keep_memory is False  # the default's other settings stay
    assert classes["interactive-gpu"].min_running_seconds == 600
    assert classes["long-training"].suspend_while_busy is False
    assert classes["tiny"] == WorkloadClass(name="tiny", idle_seconds=5, keep_memory=False)


@pytest.mark.parametrize(
    ("configured", "message"),
    [
        ({"x": {"idle": 5}}, "unknown settings"),
        ({"x": {"idle_seconds": "5"}}, "idle_seconds must be float"),
        ({"x": {"idle_seconds": True}}, "idle_seconds must be float"),
        ({"x": {"warning_seconds": -1}}, "must not be negative"),
        ({"x": {"keep_memory": 1}}, "keep_memory must be bool"),
        ({"x": 5}, "expected a dict"),
    ],
)
def test_a_bad_class_is_refused_with_the_reason(configured: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_classes(configured)
    with pytest.raises(TraitError, match=message):
        IdlePolicy(workload_classes=configured)


def cycle(suspend: float | None, resume: float | None, away: float | None, outcome: str = "resumed") -> dict[str, Any]:
    return {"outcome": outcome, "durations": {"suspend": suspend, "resume_to_runnable": resume, "suspended": away}}


def test_break_even_uses_this_environments_measured_cycles() -> None:
    # No cycle yet: the configured default, and the idle time so far as the expected gap.
    first = break_even({"cycles": []}, 400.0, 300.0, 1.0)
    assert (first.cycle_cost_seconds, first.expected_idle_seconds, first.pays) == (300.0, 400.0, True)
    # Measured: median of suspend + resume (10+20, 30+50, 5+5 -> 30), median time away (100, 7200 -> 3650).
    timeline = {"cycles": [cycle(10, 20, 100), cycle(30, 50, 7200), cycle(5, 5, None, "aborted")]}
    measured = break_even(timeline, 1.0, 300.0, 1.0)
    assert measured.cycle_cost_seconds == 30.0
    assert measured.cost_source == "measured: median suspend + resume of 3 cycle(s)"
    assert measured.expected_idle_seconds == 3650.0
    assert measured.pays
    assert not break_even(timeline, 1.0, 300.0, 200.0).pays  # 3650 < 200 x 30


def reading(idle: float, *, running: bool = False) -> Reading:
    now = 1000.0
    return Reading(
        now,
        [
            Signal("kernel_execution", True, True, running, now if running else now - idle, ""),
            Signal("gpu", False, False, False, None, "not measured"),
        ],
    )


def test_decide_in_order_state_running_cell_threshold_min_running_guard() -> None:
    cls = WorkloadClass(name="c", idle_seconds=60, min_running_seconds=600)
    guard = break_even({"cycles": []}, 100.0, 10.0, 1.0)
    kwargs: dict[str, Any] = {"enabled": True, "can_suspend": None, "workload": cls, "guard": guard}
    assert decide(**{**kwargs, "enabled": False}, reading=reading(100), running_seconds=900).action == "disabled"
    assert decide(**{**kwargs, "can_suspend": "suspended"}, reading=reading(100), running_seconds=900).action == (
        "not_now"
    )
    assert decide(**kwargs, reading=reading(0, running=True), running_seconds=900).action == "active"
    assert decide(**kwargs, reading=reading(30), running_seconds=900).action == "wait"
    too_early = decide(**kwargs, reading=reading(100), running_seconds=300)
    assert too_early.action == "wait"
    assert "600 s minimum" in too_early.reason
    assert decide(**kwargs, reading=reading(100), running_seconds=900).action == "suspend"
    costly = break_even({"cycles": []}, 100.0, 1000.0, 1.0)
    refused = decide(**{**kwargs, "guard": costly}, reading=reading(100), running_seconds=900)
    assert refused.action == "refused"
    assert refused.figures["break_even"]["cycle_cost_seconds"] == 1000.0
    busy_ok = WorkloadClass(name="b", idle_seconds=60, suspend_while_busy=True)
    assert decide(**{**kwargs, "workload": busy_ok}, reading=reading(0, running=True), running_seconds=9).action == (
        "wait"
    )


@pytest.mark.slow  # seconds: the fast loop (README, Development) leaves it to the full suite
async def test_item10_an_automatic_suspends_idle_before_is_the_idle_time_its_reason_names(
    suspend_api: SuspendClient, jp_ws_fetch: Any, state_dir: Path
) -> None:
    """One figure for one cycle: the timeline's "idle before" is the policy's own reading, not the
    environment's last activity (which the policy's probing and the warning moved)."""
    import re

    kernel_id = await open_classed_notebook(suspend_api, "quick.ipynb", "quick")
    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    try:
        await suspend_api.wait_state("suspended", timeout=60)
    finally:
        ws.close()
    (requested,) = journal(state_dir, "suspend_requested")
    match = re.search(r"idle (\d+) s \(threshold", requested["reason"])
    assert match, requested["reason"]
    cycle = (await suspend_api.json("GET", "timeline"))["cycles"][-1]
    idle_before = cycle["durations"]["idle_before_suspend"]
    assert abs(idle_before - int(match.group(1))) < 1.0, (idle_before, requested["reason"])
    last = (await suspend_api.status())["last_suspend"]
    assert last["origin"] == "idle_policy"
    assert last["workload_class"] == "quick"
    assert abs(last["idle_seconds"] - idle_before) < 0.5
