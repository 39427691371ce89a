"""A workload that asks for a pod and has none: the StatefulSet controller's ``FailedCreate`` event says why.
A full ResourceQuota is capacity (``waiting_for_capacity``, room comes back); any other refusal is ``failed``
with what to do. The messages are the real API server's, as tests/test_cluster_capacity.py saw them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from jupyter_suspend.cli.follow import Observation, assess, failed_pod_creation

NOW = datetime(2026, 12, 4, 10, 0, tzinfo=timezone.utc)
QUOTA = (
    'create Pod nb-0-0 in StatefulSet nb-0 failed error: pods "nb-0-0" is forbidden: exceeded quota: gpus, '
    "requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=10, limited: requests.nvidia.com/gpu=10"
)
RUNTIME_CLASS = (
    'create Pod nb-0-0 in StatefulSet nb-0 failed error: pods "nb-0-0" is forbidden: '
    'pod rejected: RuntimeClass "gvisor" not found'
)


def event(reason: str, message: str, at: str, rv: str) -> dict[str, Any]:
    return {"reason": reason, "message": message, "lastTimestamp": at, "metadata": {"resourceVersion": rv}}


def test_a_full_quota_is_waiting_for_capacity_with_the_quota_words() -> None:
    said = assess(
        Observation(NOW, wanted=True, controller_events=[event("FailedCreate", QUOTA, "2026-12-04T09:59:00Z", "7")])
    )
    assert said.state == "waiting_for_capacity"
    assert "ResourceQuota" in said.message
    assert "exceeded quota: gpus" in said.message
    assert said.scheduling is not None
    assert said.scheduling["reason"] == "FailedCreate"
    assert said.seconds_in_state(NOW) == 60


def test_another_refusal_is_failed_with_a_next_step() -> None:
    said = assess(
        Observation(
            NOW, wanted=True, controller_events=[event("FailedCreate", RUNTIME_CLASS, "2026-12-04T09:59:00Z", "7")]
        )
    )
    assert said.state == "failed"
    assert 'RuntimeClass "gvisor" not found' in said.message
    assert said.failure is not None
    assert "kubectl describe statefulset" in said.failure["next_step"]


def test_a_pod_created_since_the_refusal_makes_it_old_news() -> None:
    events = [
        event("FailedCreate", QUOTA, "2026-12-04T09:58:00Z", "7"),
        event("SuccessfulCreate", "create Pod nb-0-0 in StatefulSet nb-0 successful", "2026-12-04T09:59:00Z", "9"),
    ]
    assert failed_pod_creation(events) is None
    assert assess(Observation(NOW, wanted=True, controller_events=events)).state == "restoring"
    # Same second: the later write (resourceVersion) decides.
    same_second = [
        event("SuccessfulCreate", "created", "2026-12-04T09:59:00Z", "7"),
        event("FailedCreate", QUOTA, "2026-12-04T09:59:00Z", "8"),
    ]
    assert failed_pod_creation(same_second) is not None


def test_a_stopped_workload_is_suspended_whatever_its_old_events_say() -> None:
    said = assess(
        Observation(NOW, wanted=False, controller_events=[event("FailedCreate", QUOTA, "2026-12-04T09:59:00Z", "7")])
    )
    assert said.state == "suspended"
