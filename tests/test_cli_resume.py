"""``jupyter suspend status`` / ``resume`` from outside the pod, on the loopback Kubernetes API (real client, HTTPS).

The StatefulSet controller (tests/kubeapi/workloads.py) plays the scheduler with a capacity the test sets: a pod
over capacity stays Pending with ``PodScheduled=False/Unschedulable`` and the scheduler's (and autoscaler's) events.
"""

from __future__ import annotations

import io
import threading
import time
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from jupyter_suspend.cli import follow
from jupyter_suspend.cli.follow import Assessment, Observation, SnapshotView, assess
from jupyter_suspend.cli.resume import ProgressDisplay, Request, lease_name, resume_environment
from jupyter_suspend.cli.workloads import Kube
from jupyter_suspend.common.workloads import (
    NOTEBOOK_STOPPED_ANNOTATION,
    PIN_SNAPSHOT_ANNOTATION,
    POD_RESTORED_CONDITION,
)
from tests.cli_helpers import kube_client, run_cli, statefulset, validate_output, write_kubeconfig
from tests.kubeapi import KubeAPI
from tests.kubeapi.gke import GKESnapshotController
from tests.kubeapi.kubeflow import (
    KubeflowNotebookController,
    KubeflowWorkspaceController,
    notebook_object,
    workspace_object,
)
from tests.kubeapi.server import now_rfc3339, wait_until
from tests.kubeapi.workloads import UNSCHEDULABLE, StatefulSetController
from tests.servers import ServerProcess

FAST = ("--poll-interval=0.1",)


@pytest.fixture
def kubeconfig(kube_api: KubeAPI, tmp_path: Path) -> str:
    return write_kubeconfig(kube_api, tmp_path)


def scale_patches(kube: KubeAPI, name: str | None = None) -> int:
    return sum(
        1
        for call in kube.calls_matching("patch", "statefulsets")
        if call.subresource == "scale" and name in (None, call.name)
    )


def pod_creations(kube: KubeAPI) -> Counter[str]:
    """Pods ever created per environment, counted by the controller hook installed in ``count_pods``."""
    return kube.pod_creations  # type: ignore[attr-defined,no-any-return]


def count_pods(kube: KubeAPI) -> None:
    counts: Counter[str] = Counter()

    def hook(event_type: str, obj: dict[str, Any], _kube: KubeAPI) -> None:
        if obj.get("kind") == "Pod" and event_type == "ADDED":
            counts[(obj["metadata"].get("labels") or {}).get("environment", "?")] += 1

    kube.add_controller(hook)
    kube.pod_creations = counts  # type: ignore[attr-defined]


def snapshot(name: str, origin_pod: str, ready: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "podsnapshot.gke.io/v1",
        "kind": "PodSnapshot",
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {"podsnapshot.gke.io/origin-pod": origin_pod},
        },
        "spec": {"policyName": "nb-policy"},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "AllSnapshotsAvailable" if ready else "AwaitingCheckpoint",
                    "lastTransitionTime": now_rfc3339(),
                }
            ]
        },
    }


# --- resume to ready --------------------------------------------------------------------------------------------


def test_resume_of_a_scaled_to_zero_statefulset_reaches_ready_cold(kube_api: KubeAPI, kubeconfig: str) -> None:
    StatefulSetController(kube_api).attach()
    count_pods(kube_api)
    kube_api.create(statefulset("nb"))
    status = run_cli("status", "nb", "--json", kubeconfig=kubeconfig)
    assert status.code == 0, status.stderr
    assert validate_output(status.json(), "status")["state"] == "suspended"

    kube_api.reset_calls()
    done = run_cli("resume", "nb", "--wait", "--json", *FAST, kubeconfig=kubeconfig)
    assert done.code == 0, done.stderr
    answer = validate_output(done.json(), "resume")
    assert answer["state"] == "ready"
    assert answer["action"] == "resumed"
    assert (answer["restore"], answer["restore_source"]) == ("cold", "pod")  # no snapshot, no PodRestored
    assert answer["pod"] == "nb-0"
    assert answer["lease"]["mine"] is True
    assert [h["state"] for h in answer["history"]][-1] == "ready"
    assert kube_api.get("apps/v1", "statefulsets", "default", "nb")["spec"]["replicas"] == 1
    assert scale_patches(kube_api) == 1
    assert pod_creations(kube_api)["nb"] == 1
    assert kube_api.get("coordination.k8s.io/v1", "leases", "default", lease_name("statefulset", "nb")) is None

    again = run_cli("resume", "nb", "--wait", "--json", *FAST, kubeconfig=kubeconfig)
    assert again.code == 0
    assert validate_output(again.json(), "resume")["action"] == "already_ready"
    assert scale_patches(kube_api) == 1  # nothing more was asked


def test_resume_pinned_snapshot_is_restoring_until_gke_says_podrestored(kube_api: KubeAPI, kubeconfig: str) -> None:
    """Also item 7: ``--snapshot`` names the snapshot GKE restores anyway; the template is never touched."""
    StatefulSetController(kube_api).attach()
    gke = GKESnapshotController(kube_api).attach()
    count_pods(kube_api)
    kube_api.create(statefulset("nb"))
    kube_api.create(snapshot("snap-1", origin_pod="nb-0"))
    template_before = kube_api.get("apps/v1", "statefulsets", "default", "nb")["spec"]["template"]
    seen: list[str] = []

    def restore_when_ready(event_type: str, obj: dict[str, Any], kube: KubeAPI) -> None:
        # GKE's lazy memory restore ends a while after the pod is Ready (platform-facts section 1).
        if (
            obj.get("kind") == "Pod"
            and follow.is_true(obj, "Ready")
            and not follow.is_true(obj, POD_RESTORED_CONDITION)
        ) and obj["metadata"]["name"] not in seen:
            seen.append(obj["metadata"]["name"])
            kube.call_soon(lambda: gke.restore_pod("nb-0", namespace="default"), 0.5)

    kube_api.add_controller(restore_when_ready)
    done = run_cli("resume", "nb", "--snapshot=snap-1", "--wait", "--json", *FAST, kubeconfig=kubeconfig)
    assert done.code == 0, done.stderr
    answer = validate_output(done.json(), "resume")
    assert (answer["state"], answer["restore"], answer["restore_source"]) == ("ready", "live", "pod")
    assert "snap-1" in answer["message"]
    assert answer["snapshot"] == {"name": "snap-1", "pinned": True, "exists": True, "ready": True, "deleting": False}
    # Ready without PodRestored was reported as restoring, not as ready.
    assert "restoring" in [h["state"] for h in answer["history"]]
    # Restored from the newest Ready snapshot without any pin: none on the pod, none on the template, which is
    # exactly as it was (no new revision: nothing for the StatefulSet controller to roll), and one pod was made.
    pod = kube_api.get("v1", "pods", "default", "nb-0")
    assert PIN_SNAPSHOT_ANNOTATION not in (pod["metadata"].get("annotations") or {})
    assert gke.restored == [("nb-0", "snap-1")]
    assert kube_api.get("apps/v1", "statefulsets", "default", "nb")["spec"]["template"] == template_before
    assert pod_creations(kube_api)["nb"] == 1


def test_item7_resume_refuses_a_snapshot_gke_would_not_restore_and_changes_nothing(
    kube_api: KubeAPI, kubeconfig: str
) -> None:
    StatefulSetController(kube_api).attach()
    kube_api.create(statefulset("nb"))
    kube_api.create(snapshot("snap-old", origin_pod="nb-0"))
    time.sleep(1.1)  # creationTimestamp has whole seconds: the second one is the newest
    kube_api.create(snapshot("snap-new", origin_pod="nb-0"))
    kube_api.create(snapshot("snap-other", origin_pod="other-0"))
    for name, said in (
        ("snap-old", "newest Ready snapshot of this pod, snap-new, not snap-old"),
        ("snap-other", "taken from pod other-0"),
    ):
        kube_api.reset_calls()
        done = run_cli("resume", "nb", f"--snapshot={name}", "--json", *FAST, kubeconfig=kubeconfig)
        answer = validate_output(done.json(), "resume")
        assert (answer["state"], answer["action"]) == ("failed", "refused"), answer
        assert said in answer["failure"]["reason"]
        assert "does not pin" in answer["failure"]["next_step"]
        assert [c for c in kube_api.calls if c.verb not in ("get", "list", "watch")] == []
    assert kube_api.get("apps/v1", "statefulsets", "default", "nb")["spec"]["replicas"] == 0


def test_item7_a_pin_an_older_version_left_on_the_template_is_removed_while_no_pod_exists(
    kube_api: KubeAPI, kubeconfig: str
) -> None:
    StatefulSetController(kube_api).attach()
    count_pods(kube_api)
    pinned = statefulset("nb")
    pinned["spec"]["template"]["metadata"]["annotations"] = {PIN_SNAPSHOT_ANNOTATION: "snap-gone", "keep": "me"}
    kube_api.create(pinned)
    done = run_cli("resume", "nb", "--wait", "--json", *FAST, kubeconfig=kubeconfig)
    assert done.code == 0, done.stderr
    answer = validate_output(done.json(), "resume")
    assert (answer["state"], answer["pin_removed"]) == ("ready", "snap-gone")
    template = kube_api.get("apps/v1", "statefulsets", "default", "nb")["spec"]["template"]
    assert template["metadata"]["annotations"] == {"keep": "me"}
    pod = kube_api.get("v1", "pods", "default", "nb-0")
    assert PIN_SNAPSHOT_ANNOTATION not in (pod["metadata"].get("annotations") or {})
    assert pod_creations(kube_api)["nb"] == 1  # the pin went before the pod existed: nothing was rolled


# --- waiting for capacity ---------------------------------------------------------------------------------------


def follow_in_thread(kubeconfig: str, request: Request) -> tuple[threading.Thread, list[Any], list[Assessment]]:
    outcome: list[Any] = []
    progress: list[Assessment] = []

    def run() -> None:
        kube = Kube(kube_client(kubeconfig), "default")
        outcome.append(resume_environment(kube, request, lambda a, now: progress.append(a)))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome, progress


@pytest.mark.slow
def test_capacity_unavailable_for_a_while_then_scheduled(kube_api: KubeAPI, kubeconfig: str) -> None:
    workloads = StatefulSetController(kube_api, capacity=0, scheduling_events=True, scale_up="triggered").attach()
    kube_api.create(statefulset("nb"))
    thread, outcome, progress = follow_in_thread(
        kubeconfig, Request("statefulset", "nb", wait=True, timeout=30, poll_interval=0.2)
    )
    wait_until(
        lambda: [a for a in progress if a.state == "waiting_for_capacity" and (a.seconds_in_state(_now()) or 0) >= 2.0],
        10,
    )
    workloads.set_capacity(1)
    thread.join(15)
    assert not thread.is_alive()
    answer, code = outcome[0]
    assert code == 0
    assert answer["state"] == "ready"
    validate_output(answer, "resume")
    waiting = [a for a in progress if a.state == "waiting_for_capacity"]
    assert len(waiting) >= 5
    for entry in waiting:
        assert entry.pod == "nb-0"
        assert entry.scheduling is not None
        assert entry.scheduling["reason"] == "Unschedulable"
        assert entry.scheduling["message"] == UNSCHEDULABLE
    # the newest explaining event: the autoscaler's scale-up after the scheduler's FailedScheduling
    assert waiting[-1].scheduling is not None
    assert waiting[-1].scheduling["event"]["reason"] == "TriggeredScaleUp"
    assert "TriggeredScaleUp" in waiting[-1].message
    assert "Unschedulable" in waiting[-1].message
    assert waiting[0].since == waiting[-1].since  # one wait, measured from the pod's own condition
    assert [h["state"] for h in answer["history"]] == ["suspended", "waiting_for_capacity", "restoring", "ready"] or [
        h["state"] for h in answer["history"]
    ] == ["suspended", "waiting_for_capacity", "ready"]


def _now() -> datetime:
    from jupyter_suspend.cli.resume import utcnow

    return utcnow()


@pytest.mark.slow
def test_status_shows_waiting_for_capacity_with_a_growing_duration(kube_api: KubeAPI, kubeconfig: str) -> None:
    StatefulSetController(kube_api, capacity=0, scheduling_events=True, scale_up="not_triggered").attach()
    kube_api.create(statefulset("nb", replicas=1))
    wait_until(lambda: kube_api.get("v1", "pods", "default", "nb-0"))
    first = validate_output(run_cli("status", "nb", "--json", kubeconfig=kubeconfig).json(), "status")
    time.sleep(2.1)
    later = run_cli("status", "nb", kubeconfig=kubeconfig)  # the text form
    second = validate_output(run_cli("status", "nb", "--json", kubeconfig=kubeconfig).json(), "status")
    assert first["state"] == second["state"] == "waiting_for_capacity"
    assert second["seconds_in_state"] >= first["seconds_in_state"] + 2
    assert second["scheduling"]["event"]["reason"] == "NotTriggerScaleUp"
    assert "max node group size reached" in second["message"]
    assert later.code == 0
    assert "waiting_for_capacity" in later.stdout
    assert "NotTriggerScaleUp" in later.stdout


@pytest.mark.slow
def test_capacity_never_ends_timed_out_within_the_deadline_with_fallback(kube_api: KubeAPI, kubeconfig: str) -> None:
    """The real ``jupyter suspend`` executable, as a subprocess."""
    StatefulSetController(kube_api, capacity=0, scheduling_events=True).attach()
    kube_api.create(statefulset("nb"))
    started = time.monotonic()
    done = run_cli(
        "resume", "nb", "--wait", "--timeout=3", "--json", "--poll-interval=0.5", kubeconfig=kubeconfig, subprocess=True
    )
    took = time.monotonic() - started
    assert done.code == 1, done.stderr
    answer = validate_output(done.json(), "resume")
    assert answer["state"] == "timed_out"
    assert 3.0 <= answer["elapsed_seconds"] <= 4.0  # the deadline holds (a poll never overshoots it)
    assert took < 40  # the process ends (its start, imports included, is slow on a loaded machine)
    assert "waiting_for_capacity" in answer["message"]
    assert answer["scheduling"]["event"]["reason"] == "FailedScheduling"
    assert any("%checkpoint restore" in step for step in answer["fallback"])
    assert "notebook files" in answer["failure"]["next_step"]
    assert "waiting_for_capacity" in done.stderr  # the progress display (plain lines: not a TTY)
    # The text form says the same.
    text = run_cli("resume", "nb", "--wait", "--timeout=1", "--poll-interval=0.3", kubeconfig=kubeconfig)
    assert text.code == 1
    assert "timed_out" in text.stdout
    assert "%checkpoint restore" in text.stdout
    assert pod_count(kube_api, "nb") == 1


def pod_count(kube: KubeAPI, environment: str) -> int:
    return len(kube.list("v1", "pods", "default", label_selector=f"environment={environment}"))


# --- many users at once -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_fifty_environments_resumed_together_against_capacity_ten(kube_api: KubeAPI, kubeconfig: str) -> None:
    workloads = StatefulSetController(kube_api, capacity=10, start_seconds=0.05, scheduling_events=True).attach()
    count_pods(kube_api)
    names = [f"env-{index:02d}" for index in range(50)]
    for name in names:
        kube_api.create(statefulset(name))
    scheduled_at: dict[str, float] = {}

    def record_scheduling(event_type: str, obj: dict[str, Any], _kube: KubeAPI) -> None:
        if obj.get("kind") == "Pod" and (obj.get("spec") or {}).get("nodeName"):
            scheduled_at.setdefault(obj["metadata"]["labels"]["environment"], time.monotonic())

    kube_api.add_controller(record_scheduling)
    reports: dict[str, list[tuple[float, Assessment]]] = defaultdict(list)
    outcomes: dict[str, tuple[dict[str, Any], int]] = {}
    lock = threading.Lock()

    def user(name: str) -> None:
        kube = Kube(kube_client(kubeconfig), "default")
        request = Request("statefulset", name, wait=True, timeout=50, poll_interval=0.5)

        def progress(assessment: Assessment, now: datetime) -> None:
            reports[name].append((time.monotonic(), assessment))

        answer = resume_environment(kube, request, progress)
        with lock:
            outcomes[name] = answer
        # The user leaves once ready: the node goes back to the pool (capacity frees for the next one).
        kube_api.patch("apps/v1", "statefulsets", "default", name, {"spec": {"replicas": 0}})

    threads = [threading.Thread(target=user, args=(name,), daemon=True) for name in names]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.1, 55 - (time.monotonic() - started)))
    assert not any(thread.is_alive() for thread in threads)
    assert workloads.capacity == 10
    assert sorted(outcomes) == names
    for name, (answer, code) in outcomes.items():
        assert (code, answer["state"]) == (0, "ready"), (name, answer["message"])
        assert answer["action"] == "resumed"
        validate_output(answer, "resume")
    assert pod_creations(kube_api) == Counter(dict.fromkeys(names, 1))  # none restored twice
    assert scale_patches(kube_api) == 50
    waited = [name for name in names if any(a.state == "waiting_for_capacity" for _, a in reports[name])]
    assert len(waited) >= 30  # at most 10 fit at first; the rest waited and said so
    for name in names:
        for at, assessment in reports[name]:
            if assessment.state == "waiting_for_capacity":
                # truthful: reported only before the pod got its node, with the scheduler's reason and event
                # (a report is read at most one poll (0.5 s) before it is made; a loaded machine adds to that)
                assert at <= scheduled_at[name] + 2.0, name
                assert assessment.scheduling is not None
                assert assessment.scheduling["reason"] == "Unschedulable"
            if assessment.state == "ready":
                assert at >= scheduled_at[name]
    print(f"50 environments, capacity 10: all ready in {time.monotonic() - started:.1f}s; {len(waited)} waited")


# --- one restore per environment --------------------------------------------------------------------------------


def test_two_concurrent_resumes_of_one_environment_make_one_restore(kube_api: KubeAPI, kubeconfig: str) -> None:
    workloads = StatefulSetController(kube_api, capacity=0).attach()
    count_pods(kube_api)
    kube_api.create(statefulset("nb"))
    request = Request("statefulset", "nb", wait=True, timeout=20, poll_interval=0.1)
    first = follow_in_thread(kubeconfig, request)
    second = follow_in_thread(kubeconfig, request)
    wait_until(lambda: first[2] and second[2] and pod_count(kube_api, "nb") == 1, 10)
    time.sleep(0.3)
    workloads.set_capacity(1)
    for thread, _, _ in (first, second):
        thread.join(15)
    answers = sorted((first[1][0][0], second[1][0][0]), key=lambda a: a["action"])
    assert [a["action"] for a in answers] == ["joined", "resumed"]
    joined, resumed = answers
    assert all(a["state"] == "ready" for a in answers)
    assert joined["lease"]["holder"] == resumed["lease"]["holder"]
    assert joined["lease"]["mine"] is False
    assert resumed["lease"]["holder"] in joined["joined"]
    assert scale_patches(kube_api) == 1
    assert pod_creations(kube_api)["nb"] == 1
    for answer in answers:
        validate_output(answer, "resume")


@pytest.mark.slow
def test_no_join_refuses_naming_who_started_it(kube_api: KubeAPI, kubeconfig: str) -> None:
    StatefulSetController(kube_api, capacity=0).attach()
    kube_api.create(statefulset("nb"))
    thread, outcome, progress = follow_in_thread(
        kubeconfig, Request("statefulset", "nb", wait=True, timeout=3, poll_interval=0.1)
    )
    wait_until(lambda: any(a.state == "waiting_for_capacity" for a in progress), 10)
    kube_api.reset_calls()
    refused = run_cli("resume", "nb", "--no-join", "--wait", "--timeout=5", "--json", kubeconfig=kubeconfig)
    assert refused.code == 1
    answer = validate_output(refused.json(), "resume")
    assert answer["action"] == "refused"
    assert answer["state"] == "failed"
    assert answer["lease"]["holder"] in answer["message"]
    assert "pid" in answer["lease"]["holder"]
    assert not [c for c in kube_api.calls if c.verb in ("patch", "update", "delete")]  # nothing acted on
    thread.join(10)
    assert outcome[0][0]["state"] == "timed_out"


def test_an_expired_lease_is_taken_over(kube_api: KubeAPI, kubeconfig: str) -> None:
    StatefulSetController(kube_api).attach()
    kube_api.create(statefulset("nb"))
    kube_api.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": lease_name("statefulset", "nb"), "namespace": "default"},
            "spec": {
                "holderIdentity": "someone@laptop pid 1 (dead)",
                "acquireTime": "2026-01-01T00:00:00.000000Z",
                "renewTime": "2026-01-01T00:00:00.000000Z",
                "leaseDurationSeconds": 30,
            },
        }
    )
    done = run_cli("resume", "nb", "--wait", "--json", *FAST, kubeconfig=kubeconfig)
    assert done.code == 0, done.stderr
    answer = validate_output(done.json(), "resume")
    assert answer["action"] == "resumed"
    assert answer["state"] == "ready"
    assert [c.verb for c in kube_api.calls_matching(resource="leases")][:3] == ["create", "get", "update"]


@pytest.mark.slow
def test_the_lease_is_renewed_while_following_and_released_at_the_end(kube_api: KubeAPI, kubeconfig: str) -> None:
    StatefulSetController(kube_api, capacity=0).attach()
    kube_api.create(statefulset("nb"))
    name = lease_name("statefulset", "nb")
    thread, outcome, _ = follow_in_thread(
        kubeconfig, Request("statefulset", "nb", wait=True, timeout=2.5, poll_interval=0.1, lease_seconds=1)
    )
    first = wait_until(lambda: kube_api.get("coordination.k8s.io/v1", "leases", "default", name), 5)
    assert first["spec"]["leaseDurationSeconds"] == 1
    assert first["spec"]["holderIdentity"].count("pid") == 1
    renewed = wait_until(
        lambda: (
            (lease := kube_api.get("coordination.k8s.io/v1", "leases", "default", name))
            and lease["spec"]["renewTime"] != first["spec"]["renewTime"]
            and lease
        ),
        3,
    )
    assert renewed["spec"]["holderIdentity"] == first["spec"]["holderIdentity"]
    assert renewed["spec"]["acquireTime"] == first["spec"]["acquireTime"]
    thread.join(5)
    assert outcome[0][0]["state"] == "timed_out"
    assert kube_api.get("coordination.k8s.io/v1", "leases", "default", name) is None  # released


# --- snapshots --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("problem", ["missing", "not_ready"])
def test_resume_with_an_unusable_snapshot_changes_nothing(kube_api: KubeAPI, kubeconfig: str, problem: str) -> None:
    StatefulSetController(kube_api).attach()
    kube_api.create(statefulset("nb"))
    if problem == "not_ready":
        kube_api.create(snapshot("snap-1", origin_pod="nb-0", ready=False))
    kube_api.reset_calls()
    done = run_cli("resume", "nb", "--snapshot=snap-1", "--wait", "--json", kubeconfig=kubeconfig)
    assert done.code == 1
    answer = validate_output(done.json(), "resume")
    assert (answer["state"], answer["action"]) == ("failed", "refused")
    assert "snap-1" in answer["failure"]["reason"]
    assert "nothing was changed" in answer["message"]
    assert not [c for c in kube_api.calls if c.verb in ("create", "patch", "update", "delete")]
    assert kube_api.get("apps/v1", "statefulsets", "default", "nb")["spec"]["replicas"] == 0


def test_a_snapshot_deleted_under_a_running_resume_ends_it_failed(kube_api: KubeAPI, kubeconfig: str) -> None:
    StatefulSetController(kube_api, capacity=0).attach()
    kube_api.create(statefulset("nb"))
    kube_api.create(snapshot("snap-1", origin_pod="nb-0"))
    thread, outcome, progress = follow_in_thread(
        kubeconfig, Request("statefulset", "nb", snapshot="snap-1", wait=True, timeout=20, poll_interval=0.1)
    )
    wait_until(lambda: any(a.state == "waiting_for_capacity" for a in progress), 10)
    deleted = time.monotonic()
    kube_api.delete("podsnapshot.gke.io/v1", "podsnapshots", "default", "snap-1")
    thread.join(5)
    assert not thread.is_alive()
    assert time.monotonic() - deleted < 3
    answer, code = outcome[0]
    assert code == 1
    assert answer["state"] == "failed"
    assert "snap-1 does not exist" in answer["failure"]["reason"]
    assert "%checkpoint restore" in answer["failure"]["next_step"]
    validate_output(answer, "resume")
    # No pin was written (item 7): a later `status` sees a pod waiting for a node, no snapshot of its own.
    status = validate_output(run_cli("status", "nb", "--json", kubeconfig=kubeconfig).json(), "status")
    assert status["state"] == "waiting_for_capacity"
    assert status["snapshot"] is None


# --- Kubeflow kinds ---------------------------------------------------------------------------------------------


def test_notebook_resume_removes_the_stopped_annotation(kube_api: KubeAPI, kubeconfig: str) -> None:
    """No simulated notebook controller here: the patch is checked, and a pod with the notebook's label is found."""
    kube_api.create(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "Notebook",
            "metadata": {
                "name": "nb",
                "namespace": "default",
                "annotations": {NOTEBOOK_STOPPED_ANNOTATION: "2026-12-01T18:00:00Z", "keep": "me"},
            },
            "spec": {"template": {"spec": {"containers": [{"name": "nb", "image": "jupyter:1"}]}}},
        }
    )
    before = validate_output(
        run_cli("status", "nb", "--kind=notebook", "--json", kubeconfig=kubeconfig).json(), "status"
    )
    assert before["state"] == "suspended"
    done = run_cli("resume", "nb", "--kind=notebook", "--json", kubeconfig=kubeconfig)
    assert done.code == 0, done.stderr
    answer = validate_output(done.json(), "resume")
    assert answer["action"] == "resumed"
    assert answer["state"] == "restoring"
    annotations = kube_api.get("kubeflow.org/v1", "notebooks", "default", "nb")["metadata"]["annotations"]
    assert annotations == {"keep": "me"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nb-0", "labels": {"notebook-name": "nb"}}}
    kube_api.create({**pod, "spec": {"nodeName": "n1"}, "status": {"phase": "Running", "conditions": []}})
    after = validate_output(
        run_cli("status", "nb", "--kind=notebook", "--json", kubeconfig=kubeconfig).json(), "status"
    )
    assert (after["state"], after["pod"]) == ("restoring", "nb-0")


def test_item7_workspace_resume_unpauses_and_pins_nothing(kube_api: KubeAPI, kubeconfig: str) -> None:
    """No simulated workspace controller here: the patch is checked."""
    kube_api.create(
        {
            "apiVersion": "kubeflow.org/v1beta1",
            "kind": "Workspace",
            "metadata": {"name": "ws", "namespace": "default"},
            "spec": {"paused": True, "kind": "jupyterlab", "podTemplate": {"podMetadata": {"labels": {"a": "b"}}}},
            # The controller names the pod with a generated suffix and says so in the status.
            "status": {
                "state": "Paused",
                "stateMessage": "paused by the culler",
                "podTemplatePod": {"name": "ws-ws-x7k2p-0", "nodeName": ""},
            },
        }
    )
    kube_api.create(snapshot("snap-ws", origin_pod="ws-ws-x7k2p-0"))
    done = run_cli("resume", "ws", "--kind=workspace", "--snapshot=snap-ws", "--json", kubeconfig=kubeconfig)
    assert done.code == 0, done.stderr
    assert validate_output(done.json(), "resume")["action"] == "resumed"
    spec = kube_api.get("kubeflow.org/v1beta1", "workspaces", "default", "ws")["spec"]
    assert spec["paused"] is False
    # podMetadata is copied into the StatefulSet's template by the workspace controller: no pin goes there.
    assert spec["podTemplate"]["podMetadata"] == {"labels": {"a": "b"}}


def test_notebook_resumed_to_ready_through_the_simulated_notebook_controller(
    kube_api: KubeAPI, kubeconfig: str
) -> None:
    KubeflowNotebookController(kube_api).attach()
    count_pods(kube_api)
    stopped = notebook_object("nb")
    stopped["metadata"]["annotations"] = {NOTEBOOK_STOPPED_ANNOTATION: "2026-12-01T18:00:00Z"}
    kube_api.create(stopped)
    wait_until(lambda: kube_api.get("apps/v1", "statefulsets", "default", "nb"))
    status = validate_output(
        run_cli("status", "nb", "--kind=notebook", "--json", kubeconfig=kubeconfig).json(), "status"
    )
    assert status["state"] == "suspended"
    done = run_cli("resume", "nb", "--kind=notebook", "--wait", "--json", *FAST, kubeconfig=kubeconfig)
    assert done.code == 0, done.stderr
    answer = validate_output(done.json(), "resume")
    assert (answer["state"], answer["pod"], answer["action"]) == ("ready", "nb-0", "resumed")
    assert kube_api.get("apps/v1", "statefulsets", "default", "nb")["spec"]["replicas"] == 1
    assert sum(pod_creations(kube_api).values()) == 1


def test_workspace_resumed_to_ready_through_the_simulated_workspace_controller(
    kube_api: KubeAPI, kubeconfig: str
) -> None:
    KubeflowWorkspaceController(kube_api).attach()
    kube_api.create(workspace_object("ws", paused=True))
    wait_until(
        lambda: (
            (kube_api.get("kubeflow.org/v1beta1", "workspaces", "default", "ws").get("status") or {}).get("state")
            == "Paused"
        )
    )
    status = validate_output(
        run_cli("status", "ws", "--kind=workspace", "--json", kubeconfig=kubeconfig).json(), "status"
    )
    assert status["state"] == "suspended"
    assert "[Workspace Paused: Workspace is paused]" in status["message"]
    done = run_cli("resume", "ws", "--kind=workspace", "--wait", "--json", *FAST, kubeconfig=kubeconfig)
    assert done.code == 0, done.stderr
    answer = validate_output(done.json(), "resume")
    assert (answer["state"], answer["action"]) == ("ready", "resumed")
    assert answer["pod"] == f"{KubeflowWorkspaceController.statefulset_name('ws')}-0"
    assert kube_api.get("kubeflow.org/v1beta1", "workspaces", "default", "ws")["spec"]["paused"] is False


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
    kube_api: KubeAPI, kubeconfig: str, args: tuple[str, ...], said: str
) -> None:
    done = run_cli(*args, kubeconfig=kubeconfig)
    assert done.code == 2, (done.stdout, done.stderr)
    assert said in done.stderr
    assert done.stdout == ""
    assert kube_api.calls == []
    assert kube_api.rejected == []


def test_a_missing_environment_is_a_clear_failure(kube_api: KubeAPI, kubeconfig: str) -> None:
    for command in ("status", "resume"):
        done = run_cli(command, "nope", "--json", kubeconfig=kubeconfig)
        assert done.code == 1
        answer = validate_output(done.json(), command)
        assert answer["state"] == "failed"
        assert "StatefulSet nope not found" in answer["message"]


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


# --- ready live/cold from the notebook server's own status -------------------------------------------------------


@pytest.mark.slow
def test_url_reads_ready_and_cold_from_the_notebook_servers_own_status(
    kube_api: KubeAPI, kubeconfig: str, tmp_path: Path
) -> None:
    """A real jupyter server (local backend) stands in for the notebook in the pod the loopback API shows Ready."""
    StatefulSetController(kube_api).attach()
    kube_api.create(statefulset("nb", replicas=1))
    wait_until(lambda: follow.is_true(kube_api.get("v1", "pods", "default", "nb-0"), "Ready"))
    server = ServerProcess(tmp_path / "server", tmp_path / "state").start()
    try:
        server.api("POST", "suspend", {"reason": "overnight"}, expect=202)
        server.wait(lambda s: s["state"] == "suspended")
        env = {"JUPYTER_TOKEN": server.token}
        args = ("status", "nb", f"--url={server.url}", "--json")
        suspended = validate_output(run_cli(*args, kubeconfig=kubeconfig, env=env).json(), "status")
        # The pod is Ready but the server has not resumed its kernels: not ready yet.
        assert suspended["state"] == "restoring"
        assert "the notebook server says suspended" in suspended["message"]
        wrong = validate_output(run_cli(*args, kubeconfig=kubeconfig, env={"JUPYTER_TOKEN": "wrong"}).json(), "status")
        assert wrong["state"] == "restoring"
        assert "HTTP 403" in wrong["message"]

        server.api("POST", "resume", {}, expect=202)
        server.wait(lambda s: s["state"] == "ready")
        done = run_cli("resume", "nb", f"--url={server.url}", "--wait", "--json", *FAST, kubeconfig=kubeconfig, env=env)
        assert done.code == 0, done.stderr
        answer = validate_output(done.json(), "resume")
        assert (answer["state"], answer["restore"], answer["restore_source"]) == ("ready", "cold", "server")
        assert answer["action"] == "already_ready"
    finally:
        server.stop()
