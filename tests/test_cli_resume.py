"""``jupyter suspend status`` / ``resume``: what needs no cluster — the state logic, the progress display, and bad
arguments refused before any API call (a kubeconfig pointing at a port that counts connections: none is made).

Against the real control plane: tests/test_cluster_resume.py (and the busy-cluster trial,
tests/test_cluster_capacity.py). Nothing here talks to an API server.
"""

from __future__ import annotations

import io
from datetime import datetime
from typing import Any

import pytest

from jupyter_suspend.cli.follow import Assessment, Observation, SnapshotView, assess, newest_scheduling_event
from jupyter_suspend.cli.resume import ProgressDisplay
from jupyter_suspend.common.workloads import POD_RESTORED_CONDITION
from tests.cli_helpers import run_cli
from tests.cluster.calls import ConnectionCounter

# --- bad arguments ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("resume",), "expected NAME"),
        (("status",), "expected NAME"),
        (("resume", "a", "b"), "expected NAME"),
        (("resume", "nb", "--kind=deployment"), "--kind 'deployment'"),
        (("status", "nb", "--kind=pod"), "--kind 'pod'"),
        (("resume", "nb", "--timeout=-1"), "--timeout -1"),
        (("resume", "nb", "--timeout=soon"), "soon"),
        (("resume", "Bad_Name"), "not a Kubernetes object name"),
        (("status", "../etc"), "not a Kubernetes object name"),
        (("resume", "nb", "--snapshot=../x"), "--snapshot"),
        (("resume", "nb", "--kind=notebook", "--snapshot=s"), "cannot be pinned"),
        (("resume", "nb", "--poll-interval=0"), "--poll-interval"),
        (("resume", "nb", "--url=ftp://x"), "--url"),
        (("resume", "nb", "--no-such-flag"), "--no-such-flag"),
    ],
)
def test_bad_arguments_exit_2_and_call_no_api(
    nowhere: tuple[ConnectionCounter, str], args: tuple[str, ...], said: str
) -> None:
    counter, kubeconfig = nowhere
    done = run_cli(*args, kubeconfig=kubeconfig)
    assert done.code == 2, (done.stdout, done.stderr)
    assert said in done.stderr
    assert done.stdout == ""
    assert counter.connections == 0


def test_no_answer_from_the_api_is_one_line_and_exit_1_not_a_traceback(nowhere: tuple[ConnectionCounter, str]) -> None:
    """Also the control for the test above: a valid command does connect. Nothing answers there (the connection is
    closed at once): status and resume say so in one line, exit 1, print no JSON (as release does)."""
    counter, kubeconfig = nowhere
    for command in ("status", "resume"):
        done = run_cli(command, "nb", "--json", "--timeout=2", kubeconfig=kubeconfig)
        assert done.code == 1, done.stderr
        assert done.stdout == ""
        assert "Traceback" not in done.stderr
        (line,) = [line for line in done.stderr.splitlines() if line.startswith(f"jupyter suspend {command}: ")]
        assert "MaxRetryError" in line
    assert counter.connections >= 2


# --- the state logic alone --------------------------------------------------------------------------------------


def _pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "nb-0", "creationTimestamp": "2026-12-03T10:00:00Z"},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running", **status},
    }


READY = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-03T10:00:05Z"}
NOW = datetime.fromisoformat("2026-12-03T10:01:00+00:00")


def test_the_workloads_own_message_is_shown_beside_the_state() -> None:
    said = assess(Observation(NOW, wanted=False, workload_message="Workspace Paused: paused by the culler"))
    assert said.state == "suspended"
    assert said.message.endswith("[Workspace Paused: paused by the culler]")


@pytest.mark.parametrize(
    ("observation", "state", "restore", "source"),
    [
        (Observation(NOW, wanted=False), "suspended", None, None),
        (Observation(NOW, wanted=True), "restoring", None, None),
        (Observation(NOW, wanted=True, pods=[_pod(conditions=[])]), "restoring", None, None),
        (Observation(NOW, wanted=True, pods=[_pod(conditions=[READY])]), "ready", "cold", "pod"),
        (
            Observation(
                NOW,
                wanted=True,
                pods=[_pod(conditions=[READY])],
                snapshot=SnapshotView("s", pinned=False, exists=True, ready=True),
            ),
            "restoring",
            None,
            None,
        ),
        (
            Observation(
                NOW,
                wanted=True,
                pods=[
                    _pod(conditions=[READY, {"type": POD_RESTORED_CONDITION, "status": "True", "message": "from s"}])
                ],
                snapshot=SnapshotView("s", pinned=True, exists=True, ready=True),
            ),
            "ready",
            "live",
            "pod",
        ),
        (
            Observation(
                NOW, wanted=True, pods=[_pod(conditions=[READY])], server={"state": "ready", "restore": "live"}
            ),
            "ready",
            "live",
            "server",
        ),
        (
            Observation(
                NOW, wanted=True, pods=[_pod(conditions=[READY])], server={"state": "ready", "restore": "cold"}
            ),
            "ready",
            "cold",
            "server",
        ),
        (
            Observation(NOW, wanted=True, pods=[_pod(conditions=[READY])], server_error="connection refused"),
            "restoring",
            None,
            None,
        ),
        (
            Observation(
                NOW,
                wanted=True,
                pods=[_pod(conditions=[READY])],
                server={"state": "failed", "failure": {"reason": "kernel lost", "next_step": "acknowledge"}},
            ),
            "failed",
            None,
            None,
        ),
        (
            Observation(
                NOW,
                wanted=True,
                pods=[_pod(containerStatuses=[{"name": "nb", "state": {"waiting": {"reason": "ImagePullBackOff"}}}])],
            ),
            "failed",
            None,
            None,
        ),
        (Observation(NOW, wanted=True, pods=[_pod(phase="Failed", reason="Evicted")]), "failed", None, None),
        (Observation(NOW, wanted=True, pods=[_pod(phase="Succeeded")]), "restoring", None, None),
        (Observation(NOW, wanted=False, pods=[_pod(phase="Succeeded")]), "suspended", None, None),
    ],
)
def test_assess(observation: Observation, state: str, restore: str | None, source: str | None) -> None:
    assessment = assess(observation)
    assert (assessment.state, assessment.restore, assessment.restore_source) == (state, restore, source)
    if state == "failed":
        assert assessment.failure
        assert assessment.failure["next_step"]


def test_the_newest_scheduling_event_across_both_event_shapes() -> None:
    """kube-scheduler writes FailedScheduling through events.k8s.io: on the core/v1 read only ``eventTime`` (µs), no
    ``lastTimestamp``/``count``, a repeat in ``series`` (seen on the real control plane); cluster-autoscaler writes
    core/v1 events in whole seconds. The newer is the one written later, not the one whose string sorts last."""
    scheduler = {
        "metadata": {"resourceVersion": "100"},
        "reason": "FailedScheduling",
        "message": "0/10 nodes are available: 10 node(s) didn't match Pod's node affinity/selector.",
        "eventTime": "2026-12-04T13:00:39.353880Z",
        "count": None,
        "lastTimestamp": None,
    }
    autoscaler = {
        "metadata": {"resourceVersion": "99"},  # written earlier in that same second
        "reason": "TriggeredScaleUp",
        "message": "pod triggered scale-up: [{gpu-pool 0->1 (max: 10)}]",
        "lastTimestamp": "2026-12-04T13:00:39Z",
        "count": 1,
    }
    assert newest_scheduling_event([autoscaler, scheduler])["reason"] == "FailedScheduling"  # type: ignore[index]
    later = {**autoscaler, "metadata": {"resourceVersion": "101"}}
    assert newest_scheduling_event([scheduler, later])["reason"] == "TriggeredScaleUp"  # type: ignore[index]
    next_second = {**autoscaler, "lastTimestamp": "2026-12-04T13:00:40Z"}
    assert newest_scheduling_event([scheduler, next_second])["reason"] == "TriggeredScaleUp"  # type: ignore[index]
    repeated = {**scheduler, "series": {"count": 4, "lastObservedTime": "2026-12-04T13:05:00.100000Z"}}
    newest = newest_scheduling_event([next_second, repeated])
    assert newest == {
        "reason": "FailedScheduling",
        "message": scheduler["message"],
        "count": 4,
        "time": "2026-12-04T13:05:00.100000Z",
    }


# --- the progress display ---------------------------------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_one_updating_line_on_a_terminal_and_plain_lines_otherwise() -> None:
    waiting = Assessment(
        "waiting_for_capacity",
        "pod nb-0 is waiting for a node (Unschedulable)",
        pod="nb-0",
        since=datetime.fromisoformat("2026-12-03T10:00:00+00:00"),
    )
    ready = Assessment("ready", "pod nb-0 is Ready", pod="nb-0", restore="live", restore_source="pod")
    times = [datetime.fromisoformat(f"2026-12-03T10:0{m}:05+00:00") for m in (0, 1, 2)]
    terminal, plain = _Terminal(), io.StringIO()
    for stream in (terminal, plain):
        display = ProgressDisplay(stream)
        for when in times:
            display(waiting, when)
        display(ready, times[-1])
        display.close()
    assert terminal.getvalue().count("\r") == 4
    assert terminal.getvalue().count("\n") == 1
    assert "waiting_for_capacity 2m05s:" in terminal.getvalue()  # the duration moves on the one line
    assert plain.getvalue().splitlines() == [
        "waiting_for_capacity 5s: pod nb-0 is waiting for a node (Unschedulable)",
        "ready (live, per the pod): pod nb-0 is Ready",
    ]
