"""``GET {base_url}jupyter-suspend/metrics``: a real server, a real suspend/resume, Prometheus' own parser."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tornado.httpclient import HTTPClientError

from jupyter_suspend.server.journal import read_journal_file
from jupyter_suspend.server.metrics import SuspendMetrics

from .conftest import SuspendClient, checkpoint_handler_code

JOURNALS = Path(__file__).parent / "journals"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample by (name, sorted labels), through prometheus_client's parser."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def scrape(jp_fetch: Any) -> tuple[Samples, Any]:
    response = await jp_fetch("jupyter-suspend", "metrics")
    assert response.code == 200
    return parse(response.body.decode()), response


@pytest.fixture
def journal_before() -> str | None:
    """A journal under tests/journals/ the server finds at start (parametrize to set one)."""
    return None


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], state_dir: Path, journal_before: str | None) -> dict[str, Any]:
    """The conftest's server, finding the journal a previous server left (for the restart test)."""
    if journal_before is not None:
        state_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(JOURNALS / journal_before, state_dir / "journal.jsonl")
    return jp_server_config


@pytest.mark.slow
async def test_metrics_after_a_real_suspend_and_resume(suspend_api: SuspendClient, jp_fetch: Any) -> None:
    session = await suspend_api.open_notebook("model.ipynb")
    await suspend_api.run(session["kernel"]["id"], checkpoint_handler_code())
    before, response = await scrape(jp_fetch)
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    assert value(before, "jupyter_suspend_suspends_total", outcome="succeeded", backend="local") == 0

    status = await suspend_api.suspend(reason="end of day")
    assert status["state"] == "suspended", status
    await asyncio.sleep(0.1)
    status = await suspend_api.resume()
    assert status["state"] == "ready", status
    after, _ = await scrape(jp_fetch)

    assert value(after, "jupyter_suspend_suspends_total", outcome="succeeded", backend="local") == 1
    assert value(after, "jupyter_suspend_resumes_total", outcome="succeeded", backend="local", restore="cold") == 1
    for step in ("flush", "release", "restore", "resume_to_runnable"):
        assert value(after, "jupyter_suspend_step_seconds_count", step=step) == 1, step
    # The kernel's checkpoint handler answers one checkpoint of 8 bytes.
    assert value(after, "jupyter_suspend_checkpointed_bytes_total") == 8
    # Released for at least the 0.1 s slept between suspend and resume.
    assert value(after, "jupyter_suspend_suspended_seconds_total", backend="local") >= 0.1
    assert value(after, "jupyter_suspend_idle_seconds") >= 0
    # A user's suspend is no automatic suspend.
    assert not [key for key in after if key[0].startswith("jupyter_suspend_auto_suspends")]
    # Same answer as the timeline's own measure (both from the journal's marks).
    timeline = await suspend_api.json("GET", "timeline")
    runnable = timeline["cycles"][-1]["durations"]["resume_to_runnable"]
    assert value(after, "jupyter_suspend_step_seconds_sum", step="resume_to_runnable") == pytest.approx(
        runnable, abs=0.01
    )


@pytest.mark.slow
async def test_an_automatic_suspend_is_counted_with_a_bounded_reason(suspend_api: SuspendClient, jp_fetch: Any) -> None:
    await suspend_api.open_notebook()
    lifecycle = suspend_api.serverapp.web_app.settings["jupyter_suspend_lifecycle"]
    # The idle policy's own wording: figures in the sentence must not become label values.
    for idle in (903, 1207):
        lifecycle.start_suspend(
            f"automatic suspend: idle {idle} s (threshold 900 s, class interactive_gpu); expected idle gap "
            f"{idle} s >= cycle cost 12 s",
            origin="idle_policy",
            workload_class="interactive_gpu",
        )
        assert (await suspend_api.wait_done())["state"] == "suspended"
        assert (await suspend_api.resume())["state"] == "ready"
    samples, _ = await scrape(jp_fetch)
    assert value(samples, "jupyter_suspend_auto_suspends_total", workload_class="interactive_gpu", reason="idle") == 2
    assert len([key for key in samples if key[0] == "jupyter_suspend_auto_suspends_total"]) == 1


async def test_scraping_is_no_user_activity(suspend_api: SuspendClient, jp_fetch: Any) -> None:
    await suspend_api.open_notebook()
    await jp_fetch("api", "contents")  # a user action moves last_activity
    before = json.loads((await jp_fetch("api", "status")).body)["last_activity"]
    await asyncio.sleep(0.05)
    for _ in range(3):
        await scrape(jp_fetch)
    assert json.loads((await jp_fetch("api", "status")).body)["last_activity"] == before


async def test_metrics_need_a_login(jp_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("jupyter-suspend", "metrics", headers={"Authorization": ""})
    assert info.value.code in (401, 403)


@pytest.mark.parametrize("journal_before", ["team/cpu-small/journal.jsonl"])
async def test_a_restarted_server_rebuilds_its_counters_from_the_journal(jp_fetch: Any) -> None:
    # tests/journals/team/cpu-small: d1 suspended (idle_policy, small_cpu, reason "idle") and resumed cold after
    # 1090 -> 8290 = 7200 s released, 5e8 checkpoint bytes; d2 (idle_policy) aborted; one "keep running" cancel.
    samples, _ = await scrape(jp_fetch)
    assert value(samples, "jupyter_suspend_suspends_total", outcome="succeeded", backend="local") == 1
    assert value(samples, "jupyter_suspend_suspends_total", outcome="aborted", backend="local") == 1
    assert value(samples, "jupyter_suspend_resumes_total", outcome="succeeded", backend="local", restore="cold") == 1
    assert value(samples, "jupyter_suspend_suspended_seconds_total", backend="local") == 7200
    assert value(samples, "jupyter_suspend_checkpointed_bytes_total") == 5e8
    assert value(samples, "jupyter_suspend_auto_suspends_total", workload_class="small_cpu", reason="idle") == 2
    assert (
        value(
            samples, "jupyter_suspend_auto_suspends_cancelled_total", workload_class="small_cpu", reason="keep running"
        )
        == 1
    )
    # resume requested 8280 -> runnable 8293; flush 1000 -> 1090; release 1090 -> 1090 (node_released_at).
    assert value(samples, "jupyter_suspend_step_seconds_sum", step="resume_to_runnable") == 13
    assert value(samples, "jupyter_suspend_step_seconds_sum", step="flush") == 90


def test_the_fold_of_hand_written_journals() -> None:
    # gpu-lab (GKE-like): c1 released 3600 -> capacity 46440 (42840 s) returned live, c2 50880 -> 72120
    # (21240 s) cold; checkpoints 2e9 + 1e9 bytes; c1 was automatic ("idle 10 min": reason label "idle").
    metrics = SuspendMetrics("unknown")
    metrics.rebuild(read_journal_file(JOURNALS / "team/gpu-lab.jsonl").entries)
    samples = parse(metrics.exposition().decode())
    assert value(samples, "jupyter_suspend_suspends_total", outcome="succeeded", backend="gke") == 2
    assert value(samples, "jupyter_suspend_resumes_total", outcome="succeeded", backend="gke", restore="live") == 1
    assert value(samples, "jupyter_suspend_resumes_total", outcome="succeeded", backend="gke", restore="cold") == 1
    assert value(samples, "jupyter_suspend_suspended_seconds_total", backend="gke") == 42840 + 21240
    assert value(samples, "jupyter_suspend_checkpointed_bytes_total") == 3e9
    assert value(samples, "jupyter_suspend_auto_suspends_total", workload_class="interactive_gpu", reason="idle") == 1
    # resume to runnable: 60 s (bucket 60) and 600 s (bucket 600).
    assert value(samples, "jupyter_suspend_step_seconds_bucket", step="resume_to_runnable", le="60.0") == 1
    assert value(samples, "jupyter_suspend_step_seconds_bucket", step="resume_to_runnable", le="600.0") == 2
    # old.jsonl: its resume failed (the corrupt line is not the metrics' business: the journal reports it).
    old = SuspendMetrics("local")
    old.rebuild(read_journal_file(JOURNALS / "old.jsonl").entries)
    samples = parse(old.exposition().decode())
    assert value(samples, "jupyter_suspend_resumes_total", outcome="failed", backend="local", restore="none") == 1
    assert value(samples, "jupyter_suspend_suspended_seconds_total", backend="local") == 0  # never came back


def test_two_servers_in_one_process_keep_their_own_registries() -> None:
    first, second = SuspendMetrics("local"), SuspendMetrics("local")
    first.rebuild(read_journal_file(JOURNALS / "team/cpu-small/journal.jsonl").entries)
    assert value(parse(second.exposition().decode()), "jupyter_suspend_checkpointed_bytes_total") == 0
    assert value(parse(first.exposition().decode()), "jupyter_suspend_checkpointed_bytes_total") == 5e8
