"""``jupyter suspend status`` / ``resume`` on the real control plane.

The real StatefulSet controller makes the pod when the command scales the set 0 -> 1; the real scheduler places it
on kwok's fake GPU nodes, or leaves it Pending with its own ``PodScheduled=False/Unschedulable`` condition and
``FailedScheduling`` event; Leases, ``resourceVersion`` preconditions and PodSnapshot reads are the real API
server's. Only GKE's snapshot controller is simulated (tests/cluster/gke.py): it restores a new pod from the
newest matching Ready snapshot. The command acts as the user does: with the user's kubeconfig (the cluster's
admin client certificate, as test_cluster_capacity.py), its context's namespace the test's own.

"No capacity" is made with the real scheduler: the StatefulSet's pods ask for a node label (``POOL``) no node
carries until the test labels one (what a node pool scaling up brings). The cluster autoscaler does not run here:
where the old loopback tests showed its pod events (``TriggeredScaleUp``/``NotTriggerScaleUp``), the test writes
them as it does (core/v1 events on the pod, source ``cluster-autoscaler``; kubernetes/autoscaler
cluster-autoscaler/FAQ.md, "What events are emitted by CA?"; message forms as CA prints them, e.g.
``pod didn't trigger scale-up: 1 max node group size reached``) — simulated, said so at each place.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_suspend.cli.follow import Assessment
from jupyter_suspend.cli.resume import Request, lease_name, resume_environment, utcnow
from jupyter_suspend.cli.workloads import Kube
from jupyter_suspend.common.workloads import PIN_SNAPSHOT_ANNOTATION
from tests.cli_helpers import kube_client, run_cli, validate_output
from tests.cluster.calls import granted, recording
from tests.cluster.control_plane import Cluster
from tests.cluster.fixtures import token_kubeconfig
from tests.cluster.gke import GKESnapshotController
from tests.cluster.notebook import create, get, notebook_statefulset, wait_for
from tests.servers import ServerProcess

pytestmark = [pytest.mark.cluster]

FAST = ("--poll-interval=0.2",)
#: The node label a "no capacity" notebook asks for (its value: the test's namespace); no node has it at first.
POOL = "pool.test.jupyter-suspend.io/name"


@pytest.fixture
def kubeconfig(cluster: Cluster, kube_ns: str, tmp_path: Path) -> str:
    """The user's kubeconfig, its context's namespace the test's."""
    config = yaml.safe_load(cluster.admin_kubeconfig.read_text())
    config["contexts"][0]["context"]["namespace"] = kube_ns
    path = tmp_path / "user.kubeconfig"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.fixture
def gke(cluster: Cluster, kube_ns: str) -> Iterator[GKESnapshotController]:
    with GKESnapshotController(cluster, kube_ns, restore_seconds=0.3) as controller:
        yield controller
    assert not controller.errors, controller.errors


@pytest.fixture
def pool(cluster: Cluster, kube_ns: str) -> Iterator[Any]:
    """``pool.grow()`` labels one node for this test's no-capacity notebooks; the label goes afterwards."""

    class Pool:
        selector = {POOL: kube_ns}
        node: str | None = None

        def grow(self) -> None:
            self.node = "gpu-node-0"
            cluster.kubectl("label", "node", self.node, f"{POOL}={kube_ns}", "--overwrite")

    pool = Pool()
    try:
        yield pool
    finally:
        if pool.node:
            cluster.kubectl("label", "node", pool.node, f"{POOL}-", check=False)


def statefulset(cluster: Cluster, ns: str, name: str = "nb", **kwargs: Any) -> dict[str, Any]:
    body = notebook_statefulset(name, ns, gpus=0, **kwargs)
    create(cluster, [body])
    return body


def paused_workspace(
    cluster: Cluster,
    ns: str,
    pod: str,
    message: str,
    last_running: int = 0,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Workspace ``ws``, paused, with the status the workspace controller writes (its CRD requires every field):
    the pod named with a generated suffix (``pod``), times in milliseconds."""
    template: dict[str, Any] = {
        "volumes": {"data": []},
        "options": {"imageConfig": "jupyterlab_scipy_190", "podConfig": "tiny_cpu"},
    }
    if labels:
        template["podMetadata"] = {"labels": labels}
    workspace = {
        "apiVersion": "kubeflow.org/v1beta1",
        "kind": "Workspace",
        "metadata": {"name": "ws", "namespace": ns},
        "spec": {"paused": True, "kind": "jupyterlab", "podTemplate": template},
    }
    create(cluster, [workspace])
    status = {
        "status": {
            "activity": {"lastActivity": 0, "lastUpdate": 0},
            "lastRunningTime": last_running,
            "pauseTime": 1764871800000,
            "pendingRestart": False,
            "podTemplateOptions": {
                "imageConfig": {"desired": "jupyterlab_scipy_190"},
                "podConfig": {"desired": "tiny_cpu"},
            },
            "podTemplatePod": {"name": pod, "nodeName": ""},
            "state": "Paused",
            "stateMessage": message,
        }
    }
    cluster.kubectl(
        "patch", "workspaces.kubeflow.org", "ws", "-n", ns, "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip
    return workspace


def written(obj: dict[str, Any], annotations: bool = True) -> tuple[Any, ...]:
    """What a command could write on a StatefulSet: its spec (generation) and annotations. Not the resourceVersion:
    the real StatefulSet controller writes the status whenever it likes (a run under load met it)."""
    meta = obj["metadata"]
    return (meta["generation"], obj["spec"], meta.get("annotations") if annotations else None)


def sts(cluster: Cluster, ns: str, name: str = "nb") -> dict[str, Any]:
    found = get(cluster, ns, "statefulset", name)
    assert found is not None, name
    return found


def pod(cluster: Cluster, ns: str, name: str = "nb-0") -> dict[str, Any] | None:
    return get(cluster, ns, "pod", name)


def seed(gke: GKESnapshotController, cluster: Cluster, ns: str, origin: str = "nb-0", ready: bool = True) -> str:
    """A snapshot of ``origin`` as an earlier suspend left it, matching nb's pods (restorable)."""
    template = notebook_statefulset("nb", ns, gpus=0)["spec"]["template"]
    return gke.seed_snapshot(origin, {"spec": template["spec"]}, ready=ready)


def resume_json(*args: str, kubeconfig: str) -> tuple[int, dict[str, Any], str]:
    done = run_cli("resume", *args, "--json", kubeconfig=kubeconfig)
    return done.code, validate_output(done.json(), "resume"), done.stderr


def status_json(name: str, kubeconfig: str, *args: str) -> dict[str, Any]:
    done = run_cli("status", name, "--json", *args, kubeconfig=kubeconfig)
    answer: dict[str, Any] = validate_output(done.json(), "status")
    return answer


def follow_in_thread(kubeconfig: str, request: Request) -> tuple[threading.Thread, list[Any], list[Assessment]]:
    """The command's core (what ``resume --wait`` runs after parsing) in a thread, its progress kept."""
    outcome: list[Any] = []
    progress: list[Assessment] = []

    def run() -> None:
        kube = Kube(kube_client(kubeconfig), _namespace(kubeconfig))
        outcome.append(resume_environment(kube, request, lambda a, now: progress.append(a)))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome, progress


def _namespace(kubeconfig: str) -> str:
    return str(yaml.safe_load(Path(kubeconfig).read_text())["contexts"][0]["context"]["namespace"])


def autoscaler_event(cluster: Cluster, ns: str, pod_name: str, reason: str, message: str) -> None:
    """Simulated (no cluster autoscaler runs here): the event CA records on a pending pod, as client-go's
    core/v1 recorder writes it (whole-second timestamps, source ``cluster-autoscaler``)."""
    found = pod(cluster, ns, pod_name)
    assert found is not None
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod_name}.{uuid.uuid4().hex[:12]}", "namespace": ns},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "namespace": ns,
                           "uid": found["metadata"]["uid"]},
        "reason": reason,
        "message": message,
        "type": "Normal",
        "source": {"component": "cluster-autoscaler"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }  # fmt: skip
    cluster.kubectl("create", "-f", "-", input=json.dumps(event))


def unschedulable(cluster: Cluster, ns: str, name: str = "nb-0") -> dict[str, Any] | None:
    found = pod(cluster, ns, name)
    for entry in (found or {}).get("status", {}).get("conditions") or []:
        if entry["type"] == "PodScheduled" and entry.get("reason") == "Unschedulable":
            return dict(entry)
    return None


def creations(gke: GKESnapshotController, name: str = "nb-0") -> int:
    """Pods ever made under ``name`` (each uid the simulated GKE controller's pod watch saw)."""
    return sum(1 for pod_name, _ in gke.pods_seen if pod_name == name)


# --- resume to ready --------------------------------------------------------------------------------------------


def test_resume_of_a_scaled_to_zero_statefulset_reaches_ready_cold(
    cluster: Cluster, kube_ns: str, kubeconfig: str, gke: GKESnapshotController
) -> None:
    statefulset(cluster, kube_ns)
    assert status_json("nb", kubeconfig)["state"] == "suspended"
    generation = sts(cluster, kube_ns)["metadata"]["generation"]

    with recording() as calls:
        code, answer, stderr = resume_json("nb", "--wait", *FAST, kubeconfig=kubeconfig)
    assert code == 0, stderr
    assert answer["state"] == "ready"
    assert answer["action"] == "resumed"
    assert (answer["restore"], answer["restore_source"]) == ("cold", "pod")  # no snapshot, no PodRestored
    assert answer["pod"] == "nb-0"
    assert answer["lease"]["mine"] is True
    assert [h["state"] for h in answer["history"]][-1] == "ready"
    current = sts(cluster, kube_ns)
    assert current["spec"]["replicas"] == 1
    assert current["metadata"]["generation"] == generation + 1  # one change of the spec: the scale
    assert len(calls.matching("patch", "statefulsets/scale")) == 1
    assert creations(gke) == 1
    assert get(cluster, kube_ns, "lease", lease_name("statefulset", "nb")) is None  # released at the end

    with recording() as calls:
        code, again, _ = resume_json("nb", "--wait", *FAST, kubeconfig=kubeconfig)
    assert code == 0
    assert again["action"] == "already_ready"
    assert calls.writes() == []  # nothing more was asked
    assert sts(cluster, kube_ns)["metadata"]["generation"] == generation + 1


def test_resume_pinned_snapshot_is_restoring_until_gke_says_podrestored(
    cluster: Cluster, kube_ns: str, kubeconfig: str
) -> None:
    """Also item 7: ``--snapshot`` names the snapshot GKE restores anyway; the template is never touched. GKE's
    lazy memory restore ends a while after the pod is Ready (platform-facts §1): PodRestored comes 2 s later."""
    with GKESnapshotController(cluster, kube_ns, restore_seconds=2.0) as gke:
        statefulset(cluster, kube_ns)
        snap = seed(gke, cluster, kube_ns)
        template_before = sts(cluster, kube_ns)["spec"]["template"]
        code, answer, stderr = resume_json("nb", f"--snapshot={snap}", "--wait", *FAST, kubeconfig=kubeconfig)
        assert not gke.errors, gke.errors
    assert code == 0, stderr
    assert (answer["state"], answer["restore"], answer["restore_source"]) == ("ready", "live", "pod")
    assert snap in answer["message"]
    assert answer["snapshot"] == {"name": snap, "pinned": True, "exists": True, "ready": True, "deleting": False}
    assert "restoring" in [h["state"] for h in answer["history"]]
    # Restored from the newest Ready snapshot without any pin: none on the pod, none on the template, which is
    # exactly as it was (no new revision: nothing for the real StatefulSet controller to roll), one pod made.
    found = pod(cluster, kube_ns)
    assert found is not None
    assert PIN_SNAPSHOT_ANNOTATION not in (found["metadata"].get("annotations") or {})
    assert gke.restored == [("nb-0", snap)]
    current = sts(cluster, kube_ns)
    assert current["spec"]["template"] == template_before
    assert current["status"].get("currentRevision") == current["status"].get("updateRevision")
    assert creations(gke) == 1


def test_item7_resume_refuses_a_snapshot_gke_would_not_restore_and_changes_nothing(
    cluster: Cluster, kube_ns: str, kubeconfig: str, gke: GKESnapshotController
) -> None:
    statefulset(cluster, kube_ns)
    old = seed(gke, cluster, kube_ns)
    time.sleep(1.1)  # creationTimestamp has whole seconds: the second one is the newest
    new = seed(gke, cluster, kube_ns)
    other = seed(gke, cluster, kube_ns, origin="other-0")
    before = written(sts(cluster, kube_ns))
    for name, said in (
        (old, f"newest Ready snapshot of this pod, {new}, not {old}"),
        (other, "taken from pod other-0"),
    ):
        with recording() as calls:
            code, answer, _ = resume_json("nb", f"--snapshot={name}", *FAST, kubeconfig=kubeconfig)
        assert code == 1
        assert (answer["state"], answer["action"]) == ("failed", "refused"), answer
        assert said in answer["failure"]["reason"]
        assert "does not pin" in answer["failure"]["next_step"]
        assert calls.writes() == []
        assert calls.matching(), "the command read the cluster"
    current = sts(cluster, kube_ns)
    assert current["spec"]["replicas"] == 0
    assert written(current) == before
    assert get(cluster, kube_ns, "lease", lease_name("statefulset", "nb")) is None


def test_item7_a_pin_an_older_version_left_on_the_template_is_removed_while_no_pod_exists(
    cluster: Cluster, kube_ns: str, kubeconfig: str, gke: GKESnapshotController
) -> None:
    pinned = notebook_statefulset("nb", kube_ns, gpus=0)
    pinned["spec"]["template"]["metadata"]["annotations"] = {PIN_SNAPSHOT_ANNOTATION: "snap-gone", "keep": "me"}
    create(cluster, [pinned])
    code, answer, stderr = resume_json("nb", "--wait", *FAST, kubeconfig=kubeconfig)
    assert code == 0, stderr
    assert (answer["state"], answer["pin_removed"]) == ("ready", "snap-gone")
    current = sts(cluster, kube_ns)
    assert current["spec"]["template"]["metadata"]["annotations"] == {"keep": "me"}
    found = pod(cluster, kube_ns)
    assert found is not None
    assert PIN_SNAPSHOT_ANNOTATION not in (found["metadata"].get("annotations") or {})
    assert found["metadata"]["annotations"] == {"keep": "me"}
    # The pin went before the pod existed: one revision, nothing rolled, one pod made.
    assert current["status"].get("currentRevision") == current["status"].get("updateRevision")
    assert creations(gke) == 1


# --- waiting for capacity ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_capacity_unavailable_for_a_while_then_scheduled(
    cluster: Cluster, kube_ns: str, kubeconfig: str, pool: Any
) -> None:
    statefulset(cluster, kube_ns, node_selector=pool.selector)
    thread, outcome, progress = follow_in_thread(
        kubeconfig, Request("statefulset", "nb", wait=True, timeout=120, poll_interval=0.2)
    )
    wait_for(
        lambda: [a for a in progress if a.state == "waiting_for_capacity" and (a.seconds_in_state(utcnow()) or 0) >= 2],
        60,
        "waiting_for_capacity for 2 s",
    )
    # Simulated: the autoscaler decides to add a node for the pod (CA's TriggeredScaleUp), then the node comes.
    autoscaler_event(
        cluster, kube_ns, "nb-0", "TriggeredScaleUp", "pod triggered scale-up: [{gpu-pool 0->1 (max: 10)}]"
    )
    wait_for(
        lambda: any(((a.scheduling or {}).get("event") or {}).get("reason") == "TriggeredScaleUp" for a in progress),
        30,
        "the autoscaler's event seen",
    )
    pool.grow()
    thread.join(90)
    assert not thread.is_alive()
    answer, code = outcome[0]
    assert code == 0, answer
    assert answer["state"] == "ready"
    validate_output(answer, "resume")
    waiting = [a for a in progress if a.state == "waiting_for_capacity"]
    # Before the real scheduler's first look the pod is Pending without a PodScheduled condition (reason
    # "Pending"); from its verdict on, every look carries it.
    verdicts = [a.scheduling is not None and a.scheduling["reason"] == "Unschedulable" for a in waiting]
    assert verdicts == sorted(verdicts), [a.scheduling for a in waiting]
    assert all(
        a.scheduling and a.scheduling["reason"] == "Pending" for a, v in zip(waiting, verdicts, strict=True) if not v
    )
    waiting = [a for a, verdict in zip(waiting, verdicts, strict=True) if verdict]
    assert len(waiting) >= 5
    for entry in waiting:
        assert entry.pod == "nb-0"
        assert entry.scheduling is not None
        assert entry.scheduling["reason"] == "Unschedulable"
        # the real scheduler's own words
        assert "0/10 nodes are available" in entry.scheduling["message"], entry.scheduling
        assert "didn't match Pod's node affinity/selector" in entry.scheduling["message"], entry.scheduling
    assert any(((a.scheduling or {}).get("event") or {}).get("reason") == "FailedScheduling" for a in waiting)
    # the newest explaining event: the autoscaler's scale-up after the scheduler's FailedScheduling
    assert waiting[-1].scheduling is not None
    assert waiting[-1].scheduling["event"]["reason"] == "TriggeredScaleUp"
    assert "TriggeredScaleUp" in waiting[-1].message
    assert "Unschedulable" in waiting[-1].message
    assert waiting[0].since == waiting[-1].since  # one wait, measured from the pod's own condition
    # A pod the real scheduler has not looked at yet (no PodScheduled condition) reads as restoring for a moment.
    states = [h["state"] for h in answer["history"] if h["state"] != "restoring"]
    assert states == ["suspended", "waiting_for_capacity", "ready"], answer["history"]


@pytest.mark.slow
def test_status_shows_waiting_for_capacity_with_a_growing_duration(
    cluster: Cluster, kube_ns: str, kubeconfig: str, pool: Any
) -> None:
    statefulset(cluster, kube_ns, replicas=1, node_selector=pool.selector)
    wait_for(lambda: unschedulable(cluster, kube_ns), 60, "the scheduler's Unschedulable")
    # Simulated: the autoscaler has no node group to grow (CA's NotTriggerScaleUp).
    autoscaler_event(
        cluster, kube_ns, "nb-0", "NotTriggerScaleUp", "pod didn't trigger scale-up: 1 max node group size reached"
    )
    first = wait_for(
        lambda: (s := status_json("nb", kubeconfig))["state"] == "waiting_for_capacity" and s, 30, "waiting"
    )
    time.sleep(2.1)
    later = run_cli("status", "nb", kubeconfig=kubeconfig)  # the text form
    second = status_json("nb", kubeconfig)
    assert first["state"] == second["state"] == "waiting_for_capacity"
    assert second["seconds_in_state"] >= first["seconds_in_state"] + 2
    assert second["scheduling"]["event"]["reason"] == "NotTriggerScaleUp"
    assert "max node group size reached" in second["message"]
    assert "didn't match Pod's node affinity/selector" in second["scheduling"]["message"]
    assert later.code == 0
    assert "waiting_for_capacity" in later.stdout
    assert "NotTriggerScaleUp" in later.stdout


@pytest.mark.slow
def test_capacity_never_ends_timed_out_within_the_deadline_with_fallback(
    cluster: Cluster, kube_ns: str, kubeconfig: str, pool: Any
) -> None:
    """The real ``jupyter suspend`` executable, as a subprocess; the real scheduler's FailedScheduling."""
    statefulset(cluster, kube_ns, node_selector=pool.selector)
    started = time.monotonic()
    done = run_cli(
        "resume", "nb", "--wait", "--timeout=6", "--json", "--poll-interval=0.5", kubeconfig=kubeconfig,
        subprocess=True, timeout=90,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.code == 1, done.stderr
    answer = validate_output(done.json(), "resume")
    assert answer["state"] == "timed_out"
    assert 6.0 <= answer["elapsed_seconds"] <= 7.0  # the deadline holds (a poll never overshoots it)
    assert took < 60  # the process ends (its start, imports included, is slow on a loaded machine)
    assert "waiting_for_capacity" in answer["message"]
    assert answer["scheduling"]["event"]["reason"] == "FailedScheduling"
    assert "didn't match Pod's node affinity/selector" in answer["scheduling"]["event"]["message"]
    assert any("%checkpoint restore" in step for step in answer["fallback"])
    assert "notebook files" in answer["failure"]["next_step"]
    assert "waiting_for_capacity" in done.stderr  # the progress display (plain lines: not a TTY)
    # The text form says the same.
    text = run_cli("resume", "nb", "--wait", "--timeout=1", "--poll-interval=0.3", kubeconfig=kubeconfig)
    assert text.code == 1
    assert "timed_out" in text.stdout
    assert "%checkpoint restore" in text.stdout
    pods = get(cluster, kube_ns, "pods")
    assert pods is not None
    assert [p["metadata"]["name"] for p in pods["items"]] == ["nb-0"]


# --- one restore per environment --------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_concurrent_resumes_of_one_environment_make_one_restore(
    cluster: Cluster, kube_ns: str, kubeconfig: str, pool: Any, gke: GKESnapshotController
) -> None:
    statefulset(cluster, kube_ns, node_selector=pool.selector)
    generation = sts(cluster, kube_ns)["metadata"]["generation"]
    request = Request("statefulset", "nb", wait=True, timeout=90, poll_interval=0.2)
    with recording() as calls:
        first = follow_in_thread(kubeconfig, request)
        second = follow_in_thread(kubeconfig, request)
        wait_for(lambda: first[2] and second[2] and unschedulable(cluster, kube_ns), 60, "both following a Pending pod")
        time.sleep(0.5)
        pool.grow()
        for thread, _, _ in (first, second):
            thread.join(60)
            assert not thread.is_alive()
    answers = sorted((first[1][0][0], second[1][0][0]), key=lambda a: a["action"])
    assert [a["action"] for a in answers] == ["joined", "resumed"]
    joined, resumed = answers
    assert all(a["state"] == "ready" for a in answers)
    assert joined["lease"]["holder"] == resumed["lease"]["holder"]
    assert joined["lease"]["mine"] is False
    assert resumed["lease"]["holder"] in joined["joined"]
    assert len(calls.matching("patch", "statefulsets/scale")) == 1
    assert sts(cluster, kube_ns)["metadata"]["generation"] == generation + 1
    assert creations(gke) == 1
    for answer in answers:
        validate_output(answer, "resume")


@pytest.mark.slow
def test_no_join_refuses_naming_who_started_it(cluster: Cluster, kube_ns: str, kubeconfig: str, pool: Any) -> None:
    statefulset(cluster, kube_ns, node_selector=pool.selector)
    thread, outcome, progress = follow_in_thread(
        kubeconfig, Request("statefulset", "nb", wait=True, timeout=8, poll_interval=0.2)
    )
    wait_for(lambda: any(a.state == "waiting_for_capacity" for a in progress), 60, "the first one waiting")
    lease = get(cluster, kube_ns, "lease", lease_name("statefulset", "nb"))
    assert lease is not None
    # The holder in the other thread may nudge the set's annotations meanwhile (its create retry): the spec only.
    spec_before = written(sts(cluster, kube_ns), annotations=False)
    with recording() as calls:
        refused = run_cli("resume", "nb", "--no-join", "--wait", "--timeout=5", "--json", kubeconfig=kubeconfig)
    assert refused.code == 1
    answer = validate_output(refused.json(), "resume")
    assert answer["action"] == "refused"
    assert answer["state"] == "failed"
    assert answer["lease"]["holder"] in answer["message"]
    assert answer["lease"]["holder"] == lease["spec"]["holderIdentity"]
    assert "pid" in answer["lease"]["holder"]
    # nothing acted on: no write by the refused command (its own calls only: the first runs in another thread)
    assert [c for c in calls.writes() if c.resource != "leases" or c.verb == "create"] == calls.matching(
        "create", "leases"
    )
    assert written(sts(cluster, kube_ns), annotations=False) == spec_before
    thread.join(20)
    assert outcome[0][0]["state"] == "timed_out"


def test_an_expired_lease_is_taken_over(
    cluster: Cluster, kube_ns: str, kubeconfig: str, gke: GKESnapshotController
) -> None:
    statefulset(cluster, kube_ns)
    name = lease_name("statefulset", "nb")
    dead = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": kube_ns},
        "spec": {
            "holderIdentity": "someone@laptop pid 1 (dead)",
            "acquireTime": "2026-01-01T00:00:00.000000Z",
            "renewTime": "2026-01-01T00:00:00.000000Z",
            "leaseDurationSeconds": 30,
        },
    }
    create(cluster, [dead])
    with recording() as calls:
        code, answer, stderr = resume_json("nb", "--wait", *FAST, kubeconfig=kubeconfig)
    assert code == 0, stderr
    assert answer["action"] == "resumed"
    assert answer["state"] == "ready"
    assert answer["lease"]["mine"] is True
    assert answer["lease"]["holder"] != "someone@laptop pid 1 (dead)"
    # created (409: it exists), read, taken over by an update at the resourceVersion read, and deleted at the end
    assert [c.verb for c in calls.matching(resource="leases")][:3] == ["create", "get", "update"]
    assert calls.matching(resource="leases")[-1].verb == "delete"
    assert get(cluster, kube_ns, "lease", name) is None


@pytest.mark.slow
def test_the_lease_is_renewed_while_following_and_released_at_the_end(
    cluster: Cluster, kube_ns: str, kubeconfig: str, pool: Any
) -> None:
    statefulset(cluster, kube_ns, node_selector=pool.selector)
    name = lease_name("statefulset", "nb")
    thread, outcome, _ = follow_in_thread(
        kubeconfig, Request("statefulset", "nb", wait=True, timeout=6, poll_interval=0.2, lease_seconds=3)
    )
    first = wait_for(lambda: get(cluster, kube_ns, "lease", name), 30, "the Lease")
    assert first["spec"]["leaseDurationSeconds"] == 3
    assert first["spec"]["holderIdentity"].count("pid") == 1
    renewed = wait_for(
        lambda: (
            (lease := get(cluster, kube_ns, "lease", name))
            and lease["spec"]["renewTime"] != first["spec"]["renewTime"]
            and lease
        ),
        10,
        "a renewal",
    )
    assert renewed["spec"]["holderIdentity"] == first["spec"]["holderIdentity"]
    assert renewed["spec"]["acquireTime"] == first["spec"]["acquireTime"]
    thread.join(20)
    assert outcome[0][0]["state"] == "timed_out"
    assert get(cluster, kube_ns, "lease", name) is None  # released


# --- snapshots --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("problem", ["missing", "not_ready"])
def test_resume_with_an_unusable_snapshot_changes_nothing(
    cluster: Cluster, kube_ns: str, kubeconfig: str, gke: GKESnapshotController, problem: str
) -> None:
    statefulset(cluster, kube_ns)
    snap = seed(gke, cluster, kube_ns, ready=False) if problem == "not_ready" else "no-such-snapshot"
    before = written(sts(cluster, kube_ns))
    with recording() as calls:
        code, answer, _ = resume_json("nb", f"--snapshot={snap}", "--wait", kubeconfig=kubeconfig)
    assert code == 1
    assert (answer["state"], answer["action"]) == ("failed", "refused")
    assert snap in answer["failure"]["reason"]
    assert "nothing was changed" in answer["message"]
    assert calls.writes() == []
    assert sts(cluster, kube_ns)["spec"]["replicas"] == 0
    assert written(sts(cluster, kube_ns)) == before


@pytest.mark.slow
def test_a_snapshot_deleted_under_a_running_resume_ends_it_failed(
    cluster: Cluster, kube_ns: str, kubeconfig: str, pool: Any, gke: GKESnapshotController
) -> None:
    statefulset(cluster, kube_ns, node_selector=pool.selector)
    snap = seed(gke, cluster, kube_ns)
    thread, outcome, progress = follow_in_thread(
        kubeconfig, Request("statefulset", "nb", snapshot=snap, wait=True, timeout=60, poll_interval=0.2)
    )
    wait_for(lambda: any(a.state == "waiting_for_capacity" for a in progress), 60, "waiting")
    deleted = time.monotonic()
    # GKE's finalizer frees the storage first (the simulated controller), then the object goes.
    cluster.kubectl("delete", "podsnapshot", snap, "-n", kube_ns, "--wait=false")
    thread.join(20)
    assert not thread.is_alive()
    assert time.monotonic() - deleted < 10
    answer, code = outcome[0]
    assert code == 1
    assert answer["state"] == "failed"
    # Seen while GKE's finalizer still holds it (deletionTimestamp set), or once it is gone: both end the resume.
    reason = answer["failure"]["reason"]
    assert f"{snap} does not exist" in reason or f"PodSnapshot {snap} is being deleted" in reason, reason
    assert "%checkpoint restore" in answer["failure"]["next_step"]
    validate_output(answer, "resume")
    # No pin was written (item 7): a later `status` sees a pod waiting for a node, no snapshot of its own.
    status = status_json("nb", kubeconfig)
    assert status["state"] == "waiting_for_capacity"
    assert status["snapshot"] is None


# --- Kubeflow kinds (their real CRDs; no Kubeflow controller runs: the patch is checked) ------------------------


def test_notebook_resume_removes_the_stopped_annotation(cluster: Cluster, kube_ns: str, kubeconfig: str) -> None:
    stopped = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "Notebook",
        "metadata": {
            "name": "nb",
            "namespace": kube_ns,
            "annotations": {"kubeflow-resource-stopped": "2026-12-01T18:00:00Z", "keep": "me"},
        },
        "spec": {"template": {"spec": {"containers": [{"name": "nb", "image": "jupyter:1"}]}}},
    }
    create(cluster, [stopped])
    assert status_json("nb", kubeconfig, "--kind=notebook")["state"] == "suspended"
    done = run_cli("resume", "nb", "--kind=notebook", "--json", kubeconfig=kubeconfig)
    assert done.code == 0, done.stderr
    answer = validate_output(done.json(), "resume")
    assert answer["action"] == "resumed"
    assert answer["state"] == "restoring"
    notebook = get(cluster, kube_ns, "notebooks.kubeflow.org", "nb")
    assert notebook is not None
    assert notebook["metadata"]["annotations"] == {"keep": "me"}
    # What Kubeflow's notebook controller then makes: a pod labelled with the notebook's name (made here by hand),
    # which the real scheduler places and kwok runs.
    spec = notebook_statefulset("nb", kube_ns, gpus=0)["spec"]["template"]["spec"]
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nb-0", "namespace": kube_ns, "labels": {"notebook-name": "nb"}},
        "spec": spec,
    }
    create(cluster, [bare])
    after = wait_for(
        lambda: (s := status_json("nb", kubeconfig, "--kind=notebook"))["state"] == "ready" and s, 60, "ready"
    )
    assert (after["pod"], after["restore"], after["restore_source"]) == ("nb-0", "cold", "pod")


def test_item7_workspace_resume_unpauses_and_pins_nothing(
    cluster: Cluster, kube_ns: str, kubeconfig: str, gke: GKESnapshotController
) -> None:
    workspace = paused_workspace(
        cluster, kube_ns, "ws-ws-x7k2p-0", "paused by the culler", last_running=1764870000000, labels={"a": "b"}
    )
    snap = seed(gke, cluster, kube_ns, origin="ws-ws-x7k2p-0")
    done = run_cli("resume", "ws", "--kind=workspace", f"--snapshot={snap}", "--json", kubeconfig=kubeconfig)
    assert done.code == 0, done.stderr
    assert validate_output(done.json(), "resume")["action"] == "resumed"
    found = get(cluster, kube_ns, "workspaces.kubeflow.org", "ws")
    assert found is not None
    assert found["spec"]["paused"] is False
    # podMetadata is copied into the StatefulSet's template by the workspace controller: no pin goes there.
    assert found["spec"]["podTemplate"]["podMetadata"] == {"labels": {"a": "b"}}
    assert found["spec"]["podTemplate"]["options"] == workspace["spec"]["podTemplate"]["options"]


class KubeflowStand:
    """Simulated, for want of Kubeflow's own controllers (their Go modules are not served): what their notebook and
    workspace controllers do with a workload's StatefulSet, from platform-facts §3 — a Notebook's StatefulSet is
    ``<name>`` (pods labelled ``notebook-name=<name>``), at 0 replicas while ``kubeflow-resource-stopped`` is set;
    a Workspace's has a generated name (pods labelled ``notebooks.kubeflow.org/workspace-name=<name>``), at 0 while
    ``spec.paused``, and the status says ``Paused``/``Running`` and names the pod. Everything downstream (the pod, its
    scheduling, Ready) is the real StatefulSet controller's, scheduler's and kwok's."""

    def __init__(self, cluster: Cluster, ns: str, plural: str, version: str, name: str, statefulset: str) -> None:
        from kubernetes import client, config

        self.api = config.new_client_from_config(str(cluster.admin_kubeconfig))
        self.apps, self.custom = client.AppsV1Api(self.api), client.CustomObjectsApi(self.api)
        self.ns, self.plural, self.version, self.name, self.statefulset = ns, plural, version, name, statefulset
        label = "notebook-name" if plural == "notebooks" else "notebooks.kubeflow.org/workspace-name"
        body = notebook_statefulset(statefulset, ns, gpus=0)
        body["spec"]["selector"] = {"matchLabels": {label: name}}
        body["spec"]["template"]["metadata"]["labels"] = {label: name}
        create(cluster, [body])
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def wanted(self, obj: dict[str, Any]) -> bool:
        if self.plural == "notebooks":
            return "kubeflow-resource-stopped" not in (obj["metadata"].get("annotations") or {})
        return not obj["spec"].get("paused", False)

    def _loop(self) -> None:
        while not self.stopping.wait(0.2):
            obj = self.custom.get_namespaced_custom_object(
                "kubeflow.org", self.version, self.ns, self.plural, self.name
            )
            replicas = 1 if self.wanted(obj) else 0
            current = self.apps.read_namespaced_stateful_set(self.statefulset, self.ns)
            if current.spec.replicas != replicas:
                self.apps.patch_namespaced_stateful_set_scale(
                    self.statefulset, self.ns, {"spec": {"replicas": replicas}}
                )
            if self.plural == "workspaces":
                state, said = ("Running", "Workspace is running") if replicas else ("Paused", "Workspace is paused")
                status = {**(obj.get("status") or {}), "state": state, "stateMessage": said}
                status["podTemplatePod"] = {"name": f"{self.statefulset}-0", "nodeName": ""}
                if (obj.get("status") or {}) != status:
                    self.custom.patch_namespaced_custom_object_status(
                        "kubeflow.org", self.version, self.ns, self.plural, self.name, {"status": status}
                    )

    def __enter__(self) -> KubeflowStand:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(5)
        self.api.close()


def test_notebook_resumed_to_ready_through_its_statefulset(
    cluster: Cluster, kube_ns: str, kubeconfig: str, gke: GKESnapshotController
) -> None:
    stopped = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "Notebook",
        "metadata": {
            "name": "nb",
            "namespace": kube_ns,
            "annotations": {"kubeflow-resource-stopped": "2026-12-01T18:00:00Z"},
        },
        "spec": {"template": {"spec": notebook_statefulset("nb", kube_ns, gpus=0)["spec"]["template"]["spec"]}},
    }
    create(cluster, [stopped])
    with KubeflowStand(cluster, kube_ns, "notebooks", "v1", "nb", "nb"):
        assert status_json("nb", kubeconfig, "--kind=notebook")["state"] == "suspended"
        code, answer, stderr = resume_json("nb", "--kind=notebook", "--wait", *FAST, kubeconfig=kubeconfig)
    assert code == 0, stderr
    assert (answer["state"], answer["pod"], answer["action"]) == ("ready", "nb-0", "resumed")
    assert sts(cluster, kube_ns)["spec"]["replicas"] == 1
    assert creations(gke) == 1


def test_workspace_resumed_to_ready_through_its_statefulset(
    cluster: Cluster, kube_ns: str, kubeconfig: str, gke: GKESnapshotController
) -> None:
    paused_workspace(cluster, kube_ns, "ws-ws-q8z4d-0", "Workspace is paused")
    with KubeflowStand(cluster, kube_ns, "workspaces", "v1beta1", "ws", "ws-ws-q8z4d"):
        before = status_json("ws", kubeconfig, "--kind=workspace")
        assert before["state"] == "suspended"
        assert "[Workspace Paused: Workspace is paused]" in before["message"]
        code, answer, stderr = resume_json("ws", "--kind=workspace", "--wait", *FAST, kubeconfig=kubeconfig)
    assert code == 0, stderr
    assert (answer["state"], answer["action"]) == ("ready", "resumed")
    assert answer["pod"] == "ws-ws-q8z4d-0"
    found = get(cluster, kube_ns, "workspaces.kubeflow.org", "ws")
    assert found is not None
    assert found["spec"]["paused"] is False
    assert creations(gke, "ws-ws-q8z4d-0") == 1


# --- a missing environment ---------------------------------------------------------------------------------------


def test_a_missing_environment_is_a_clear_failure(cluster: Cluster, kube_ns: str, kubeconfig: str) -> None:
    for command in ("status", "resume"):
        done = run_cli(command, "nope", "--json", kubeconfig=kubeconfig)
        assert done.code == 1
        answer = validate_output(done.json(), command)
        assert answer["state"] == "failed"
        assert "StatefulSet nope not found" in answer["message"]


# --- an identity RBAC refuses: the real authorizer's 403 ------------------------------------------------------------


def test_a_refused_identity_gets_one_line_and_exit_1_and_nothing_changes(
    cluster: Cluster, kube_ns: str, tmp_path: Path
) -> None:
    """The namespace's default ServiceAccount (no Role): the real 403 with the authorizer's own words, on one line;
    before the fix, status and resume ended in a traceback (release already said it in one line)."""
    statefulset(cluster, kube_ns)
    before = written(sts(cluster, kube_ns))
    token = cluster.kubectl("create", "token", "default", "-n", kube_ns).strip()
    kubeconfig = str(token_kubeconfig(cluster, tmp_path / "nobody.kubeconfig", token, kube_ns))
    for command in ("status", "resume"):
        done = run_cli(command, "nb", "--json", kubeconfig=kubeconfig)
        assert done.code == 1, done.stderr
        assert done.stdout == ""
        assert "Traceback" not in done.stderr
        (line,) = [line for line in done.stderr.splitlines() if line.startswith(f"jupyter suspend {command}: ")]
        assert "403 Forbidden" in line
        assert f'User "system:serviceaccount:{kube_ns}:default" cannot get resource "statefulsets"' in line
    assert written(sts(cluster, kube_ns)) == before
    assert get(cluster, kube_ns, "lease", lease_name("statefulset", "nb")) is None


#: docs/cli.md, "RBAC for the caller" of status and resume, as a Role: what the commands need, nothing more (the
#: Kubeflow rule only where Notebooks or Workspaces are resumed).
CALLER_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "patch"]},
    {"apiGroups": ["apps"], "resources": ["statefulsets/scale"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["list"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update", "delete"]},
    {"apiGroups": ["podsnapshot.gke.io"], "resources": ["podsnapshots"], "verbs": ["get", "list"]},
]


def test_the_documented_caller_role_is_enough_to_resume_and_nothing_more(
    cluster: Cluster, kube_ns: str, tmp_path: Path, gke: GKESnapshotController
) -> None:
    """status and resume --wait (a pinned snapshot restored live) as a ServiceAccount holding exactly the caller
    Role docs/cli.md documents, with a TokenRequest token: the real authorizer allows every call they make, and
    each call is one the Role grants; the same identity on a neighbour namespace gets the real 403, on one line."""
    statefulset(cluster, kube_ns)
    snap = seed(gke, cluster, kube_ns)
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "jupyter-suspend-caller", "namespace": kube_ns},
        "rules": CALLER_RULES,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "jupyter-suspend-caller", "namespace": kube_ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jupyter-suspend-caller"},
        "subjects": [{"kind": "ServiceAccount", "name": "researcher", "namespace": kube_ns}],
    }
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "researcher", "namespace": kube_ns}}
    create(cluster, [account, role, binding])
    token = cluster.kubectl("create", "token", "researcher", "-n", kube_ns).strip()
    kubeconfig = str(token_kubeconfig(cluster, tmp_path / "researcher.kubeconfig", token, kube_ns))
    wait_for(
        lambda: cluster.kubectl(
            "auth", "can-i", "patch", "statefulsets/scale", "-n", kube_ns,
            f"--as=system:serviceaccount:{kube_ns}:researcher", check=False,
        ).strip() == "yes",
        30, "the RoleBinding in force",
    )  # fmt: skip

    with recording() as calls:
        assert status_json("nb", kubeconfig)["state"] == "suspended"
        code, answer, stderr = resume_json("nb", f"--snapshot={snap}", "--wait", *FAST, kubeconfig=kubeconfig)
        assert code == 0, stderr
        assert (answer["state"], answer["restore"]) == ("ready", "live"), answer
        assert status_json("nb", kubeconfig)["state"] == "ready"
    made = calls.triples()
    assert made <= granted(CALLER_RULES), made - granted(CALLER_RULES)
    assert ("apps", "statefulsets/scale", "patch") in made
    assert ("coordination.k8s.io", "leases", "create") in made

    neighbour = f"{kube_ns}-nb"[-63:]
    cluster.kubectl("create", "namespace", neighbour)
    try:
        statefulset(cluster, neighbour)
        done = run_cli("resume", "nb", "--namespace", neighbour, "--json", kubeconfig=kubeconfig)
        assert done.code == 1, done.stderr
        (line,) = [line for line in done.stderr.splitlines() if line.startswith("jupyter suspend resume: ")]
        assert "403 Forbidden" in line
        assert f'User "system:serviceaccount:{kube_ns}:researcher" cannot get resource "statefulsets"' in line
        assert sts(cluster, neighbour)["spec"]["replicas"] == 0
    finally:
        cluster.kubectl("delete", "namespace", neighbour, "--wait=false", check=False)


# --- ready live/cold from the notebook server's own status -------------------------------------------------------


@pytest.mark.slow
def test_url_reads_ready_and_cold_from_the_notebook_servers_own_status(
    cluster: Cluster, kube_ns: str, kubeconfig: str, tmp_path: Path
) -> None:
    """A real jupyter server (local backend) stands in for the notebook in the pod kwok runs Ready."""
    statefulset(cluster, kube_ns, replicas=1)
    wait_for(
        lambda: any(c["type"] == "Ready" and c["status"] == "True"
                    for c in ((pod(cluster, kube_ns) or {}).get("status") or {}).get("conditions") or []),
        60, "nb-0 Ready",
    )  # fmt: skip
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
