"""``jupyter suspend release``: the StatefulSet scaled to 0 once its pod's snapshot is Ready, on the loopback
Kubernetes API (real client, HTTPS) with the simulated GKE Pod Snapshots and StatefulSet controllers (tests/kubeapi).

Not a real cluster: the simulated GKE stops the pod when the checkpoint is taken (before the upload ends), the
simulated StatefulSet controller replaces a stopped pod and deletes pods when scaled to 0, and the loopback server
does not itself check a resourceVersion sent to the ``scale`` subresource (a real one does): the conflict tests make
the change that causes it and inject the 409, and a unit test checks that the request carries the precondition.
"""

from __future__ import annotations

import os
import signal
import subprocess as sp
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_suspend.cli.release import (
    DEFAULT_SELECTOR,
    RELEASED_ANNOTATION,
    ReleaseKube,
    Watcher,
    connect_release_kube,
    decide,
)
from tests.cli_helpers import kube_client, output_schema, run_cli, validate_output, write_kubeconfig
from tests.kubeapi import KubeAPI
from tests.kubeapi.gke import GKESnapshotController
from tests.kubeapi.rbac import bound_role, called, granted
from tests.kubeapi.server import condition, set_condition, wait_until
from tests.kubeapi.workloads import StatefulSetController

ROOT = Path(__file__).resolve().parent.parent
FAST = ("--poll-interval=0.1",)
LABEL_KEY, LABEL_VALUE = DEFAULT_SELECTOR.split("=")
GKE = "podsnapshot.gke.io/v1"


@pytest.fixture
def kubeconfig(kube_api: KubeAPI, tmp_path: Path) -> str:
    return write_kubeconfig(kube_api, tmp_path)


def notebook_set(name: str, labelled: bool = True, replicas: int = 1) -> dict[str, Any]:
    """A one-pod notebook StatefulSet; ``labelled``: with deploy/base's label, which ``--watch`` selects."""
    pod_labels = {"app": "notebook", "environment": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "default", "labels": {LABEL_KEY: LABEL_VALUE} if labelled else {}},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": dict(pod_labels)},
                "spec": {"containers": [{"name": "notebook", "image": "jupyter/gpu:1"}]},
            },
        },
    }


def stop_policy() -> dict[str, Any]:
    return {
        "apiVersion": GKE,
        "kind": "PodSnapshotPolicy",
        "metadata": {"name": "notebook-snapshots", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "notebook"}},
            "triggerConfig": {"type": "manual", "postCheckpoint": "stop"},
        },
    }


def start(kube: KubeAPI, *names: str, labelled: bool = True) -> None:
    for name in names:
        kube.create(notebook_set(name, labelled))
    for name in names:
        wait_until(partial(lambda pod: pod_phase(kube, pod) == "Running", f"{name}-0"))


def get(kube: KubeAPI, plural: str, name: str) -> dict[str, Any]:
    found = kube.get("apps/v1" if plural == "statefulsets" else "v1", plural, "default", name)
    assert found is not None, f"{plural}/{name} not found"
    return found


def pod_phase(kube: KubeAPI, pod: str) -> str | None:
    found = kube.get("v1", "pods", "default", pod)
    return None if found is None else (found.get("status") or {}).get("phase")


def suspend(kube: KubeAPI, name: str) -> None:
    """What the sidecar asks for: a PodSnapshotManualTrigger for the pod."""
    kube.create(
        {
            "apiVersion": GKE,
            "kind": "PodSnapshotManualTrigger",
            "metadata": {"name": f"{name}-suspend", "namespace": "default"},
            "spec": {"targetPod": f"{name}-0"},
        }
    )


def snapshot_of(kube: KubeAPI, name: str) -> dict[str, Any] | None:
    for snap in kube.list(GKE, "podsnapshots", "default"):
        if snap["metadata"]["annotations"].get("podsnapshot.gke.io/origin-pod") == f"{name}-0":
            return snap
    return None


def ready_snapshot(kube: KubeAPI, name: str) -> str:
    def ready() -> str | None:
        snap = snapshot_of(kube, name)
        if snap is not None and (condition(snap, "Ready") or {}).get("status") == "True":
            return str(snap["metadata"]["name"])
        return None

    return str(wait_until(ready))


def replicas(kube: KubeAPI, name: str) -> int:
    return int(get(kube, "statefulsets", name)["spec"]["replicas"])


def scale_patches(kube: KubeAPI, name: str | None = None) -> list[str]:
    return [
        str(call.name)
        for call in kube.calls_matching("patch", "statefulsets")
        if call.subresource == "scale" and name in (None, call.name)
    ]


def release_json(*args: str, kubeconfig: str) -> tuple[int, dict[str, Any], str]:
    done = run_cli("release", *args, "--json", kubeconfig=kubeconfig)
    return done.code, validate_output(done.json(), "release"), done.stderr


# --- (1) released: a stopped pod, a replacement ----------------------------------------------------------------


@pytest.mark.slow
def test_a_completed_pod_with_a_ready_snapshot_is_released_and_a_resume_is_not(
    kube_api: KubeAPI, kubeconfig: str
) -> None:
    sts = StatefulSetController(kube_api, replace_after=30.0).attach()  # the stopped pod stays Completed
    GKESnapshotController(kube_api).attach()
    kube_api.create(stop_policy())
    start(kube_api, "nb")
    suspend(kube_api, "nb")
    snap = ready_snapshot(kube_api, "nb")
    assert pod_phase(kube_api, "nb-0") == "Succeeded"

    kube_api.reset_calls()
    code, answer, stderr = release_json("nb", kubeconfig=kubeconfig)
    assert code == 0, stderr
    assert (answer["state"], answer["action"], answer["snapshot"], answer["pod"]) == (
        "released",
        "scaled_to_zero",
        snap,
        "nb-0",
    )
    assert answer["replicas"] == 0
    assert scale_patches(kube_api) == ["nb"]
    assert replicas(kube_api, "nb") == 0
    wait_until(lambda: kube_api.get("v1", "pods", "default", "nb-0") is None)  # the controller deleted it
    marked = get(kube_api, "statefulsets", "nb")["metadata"]["annotations"]
    assert marked[RELEASED_ANNOTATION] == snap

    code, answer, _ = release_json("nb", kubeconfig=kubeconfig)
    assert (code, answer["state"], answer["action"]) == (0, "already_released", "none")
    assert scale_patches(kube_api) == ["nb"]

    # A resume restores from that snapshot: its pod is a live session, never taken for a replacement.
    sts.replace_after = 0.0
    kube_api.patch("apps/v1", "statefulsets", "default", "nb", {"spec": {"replicas": 1}})
    wait_until(lambda: pod_phase(kube_api, "nb-0") == "Running")
    code, answer, _ = release_json("nb", kubeconfig=kubeconfig)
    assert (code, answer["state"], answer["action"]) == (1, "running", "none")
    assert replicas(kube_api, "nb") == 1
    assert scale_patches(kube_api) == ["nb"]


@pytest.mark.slow
def test_the_controllers_replacement_is_released_and_deleted(kube_api: KubeAPI, kubeconfig: str) -> None:
    StatefulSetController(kube_api).attach()  # replaces a stopped pod at once, as the real controller does
    gke = GKESnapshotController(kube_api).attach()
    kube_api.create(stop_policy())
    start(kube_api, "nb")
    first_uid = get(kube_api, "pods", "nb-0")["metadata"]["uid"]
    suspend(kube_api, "nb")
    snap = ready_snapshot(kube_api, "nb")
    replacement = wait_until(lambda: kube_api.get("v1", "pods", "default", "nb-0"))
    assert replacement["metadata"]["uid"] != first_uid
    assert gke.stopped_pods == ["nb-0"]

    code, answer, stderr = release_json("nb", kubeconfig=kubeconfig)
    assert code == 0, stderr
    assert (answer["state"], answer["snapshot"]) == ("released", snap)
    assert "replaced" in answer["message"]
    assert scale_patches(kube_api) == ["nb"]
    wait_until(lambda: kube_api.get("v1", "pods", "default", "nb-0") is None)
    time.sleep(0.2)
    assert kube_api.get("v1", "pods", "default", "nb-0") is None  # not recreated: the set asks for 0


# --- (2) refused: a live session --------------------------------------------------------------------------------


def test_a_running_pod_without_a_ready_snapshot_is_refused(kube_api: KubeAPI, kubeconfig: str) -> None:
    StatefulSetController(kube_api).attach()
    start(kube_api, "nb")
    kube_api.reset_calls()
    code, answer, _ = release_json("nb", kubeconfig=kubeconfig)
    assert (code, answer["state"], answer["action"], answer["pod"]) == (1, "running", "none", "nb-0")
    assert "live session" in answer["message"]
    assert scale_patches(kube_api) == []
    assert not kube_api.calls_matching("patch")
    assert replicas(kube_api, "nb") == 1

    text = run_cli("release", "nb", kubeconfig=kubeconfig)
    assert text.code == 1
    assert "statefulset/nb in default: running" in text.stdout


def test_decide_refuses_a_pod_older_than_its_snapshot_that_still_runs_and_a_late_pod() -> None:
    sts = notebook_set("nb")
    sts["metadata"]["resourceVersion"] = "5"

    def pod(created: str, phase: str) -> dict[str, Any]:
        return {
            "metadata": {
                "name": "nb-0",
                "creationTimestamp": created,
                "labels": {"app": "notebook", "environment": "nb"},
            },
            "status": {"phase": phase},
        }

    snap = {
        "metadata": {
            "name": "nb-0-1",
            "creationTimestamp": "2026-01-01T10:00:00Z",
            "annotations": {"podsnapshot.gke.io/origin-pod": "nb-0"},
        },
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T10:02:00Z"}]},
    }
    # postCheckpoint: resume (or a session that went on): the pod still runs after its snapshot.
    assert decide(sts, [pod("2026-01-01T09:00:00Z", "Running")], [snap]).state == "running"
    # A pod made an hour after the snapshot was Ready is a resume (e.g. after a release by hand), not a replacement.
    assert decide(sts, [pod("2026-01-01T11:02:00Z", "Running")], [snap]).state == "running"
    assert decide(sts, [pod("2026-01-01T10:02:01Z", "Running")], [snap]).release
    assert decide(sts, [pod("2026-01-01T09:00:00Z", "Succeeded")], [snap]).release
    assert decide(sts, [], [snap]).state == "waiting_for_pod"
    failed = {**snap, "status": {"conditions": [{"type": "Checkpoint", "status": "False", "message": "boom"}]}}
    assert decide(sts, [pod("2026-01-01T09:00:00Z", "Succeeded")], [failed]).state == "checkpoint_failed"


# --- (3) --wait -------------------------------------------------------------------------------------------------


def test_wait_follows_until_the_snapshot_is_ready_then_releases(kube_api: KubeAPI, kubeconfig: str) -> None:
    StatefulSetController(kube_api, replace_after=30.0).attach()
    gke = GKESnapshotController(kube_api, upload_seconds=60.0).attach()  # the test ends the upload itself
    kube_api.create(stop_policy())
    start(kube_api, "nb")
    suspend(kube_api, "nb")
    wait_until(lambda: snapshot_of(kube_api, "nb"))
    kube_api.reset_calls()

    def upload_ends_after_three_looks() -> None:
        wait_until(lambda: len(kube_api.calls_matching("list", "podsnapshots")) >= 3, timeout=10)
        snap = snapshot_of(kube_api, "nb")
        assert snap is not None
        ready = {"type": "Ready", "status": "True", "reason": "AllSnapshotsAvailable", "message": "snapshot uploaded"}
        conditions = set_condition(snap["status"]["conditions"], ready)
        kube_api.patch_status(GKE, "podsnapshots", "default", snap["metadata"]["name"], {"conditions": conditions})

    uploader = threading.Thread(target=upload_ends_after_three_looks, daemon=True)
    uploader.start()
    ready_when_scaled: list[bool] = []

    def on_scale(event_type: str, obj: dict[str, Any], kube: KubeAPI) -> None:
        if obj.get("kind") == "StatefulSet" and obj["spec"].get("replicas") == 0 and not ready_when_scaled:
            snap = snapshot_of(kube, "nb")
            ready_when_scaled.append((condition(snap, "Ready") or {}).get("status") == "True")

    kube_api.add_controller(on_scale)

    code, answer, stderr = release_json("nb", "--wait", "--timeout=10", *FAST, kubeconfig=kubeconfig)
    assert code == 0, stderr
    states = [entry["state"] for entry in answer["history"]]
    assert states[0] == "waiting_for_snapshot", states
    assert states[-1] == "released", states
    assert answer["waited"] is True
    assert answer["snapshot"] == gke.snapshots_created[0]
    assert scale_patches(kube_api) == ["nb"]
    assert "waiting_for_snapshot" in stderr  # progress on stderr
    uploader.join(5)
    assert ready_when_scaled == [True]  # not scaled while the snapshot uploaded: at 0 only once it was Ready
    assert len(kube_api.calls_matching("list", "podsnapshots")) >= 4  # three looks before Ready, one after


def test_wait_times_out_when_the_snapshot_never_gets_ready(kube_api: KubeAPI, kubeconfig: str) -> None:
    StatefulSetController(kube_api, replace_after=30.0).attach()
    GKESnapshotController(kube_api, behaviour="never_ready").attach()
    kube_api.create(stop_policy())
    start(kube_api, "nb")
    suspend(kube_api, "nb")
    wait_until(lambda: pod_phase(kube_api, "nb-0") == "Succeeded")
    kube_api.reset_calls()

    started = time.monotonic()
    code, answer, _ = release_json("nb", "--wait", "--timeout=0.6", *FAST, kubeconfig=kubeconfig)
    assert time.monotonic() - started < 5
    assert (code, answer["state"]) == (1, "timed_out")
    assert "waiting_for_snapshot" in answer["message"]
    assert [entry["state"] for entry in answer["history"]] == ["waiting_for_snapshot", "timed_out"]
    assert scale_patches(kube_api) == []
    assert replicas(kube_api, "nb") == 1

    # Without --wait: says so, exit 1, nothing done.
    code, answer, _ = release_json("nb", kubeconfig=kubeconfig)
    assert (code, answer["state"], answer["action"]) == (1, "waiting_for_snapshot", "none")


def test_a_checkpoint_that_failed_is_final_and_a_missing_statefulset_is_not_found(
    kube_api: KubeAPI, kubeconfig: str
) -> None:
    StatefulSetController(kube_api).attach()
    GKESnapshotController(kube_api, behaviour="checkpoint_fails").attach()
    kube_api.create(stop_policy())
    start(kube_api, "nb")
    suspend(kube_api, "nb")
    wait_until(lambda: snapshot_of(kube_api, "nb"))
    code, answer, _ = release_json("nb", "--wait", "--timeout=5", *FAST, kubeconfig=kubeconfig)
    assert (code, answer["state"]) == (1, "checkpoint_failed")
    assert answer["elapsed_seconds"] < 2
    code, answer, _ = release_json("gone", kubeconfig=kubeconfig)
    assert (code, answer["state"], answer["replicas"]) == (1, "not_found", None)
    assert scale_patches(kube_api) == []


# --- (4) a resourceVersion conflict ------------------------------------------------------------------------------


def completed_with_ready_snapshot(kube: KubeAPI) -> str:
    StatefulSetController(kube, replace_after=30.0).attach()
    GKESnapshotController(kube).attach()
    kube.create(stop_policy())
    start(kube, "nb")
    suspend(kube, "nb")
    snap = ready_snapshot(kube, "nb")
    wait_until(lambda: pod_phase(kube, "nb-0") == "Succeeded")
    return snap


def meanwhile(kube: KubeAPI, patch: dict[str, Any]) -> threading.Thread:
    """Someone else changes the StatefulSet while the release reads the snapshots (delayed), then the release's scale
    at the old resourceVersion is answered 409 (what a real API server answers; the loopback one does not check)."""
    kube.delay_next("list", "podsnapshots", 0.5)
    kube.fail_next("patch", "statefulsets/scale", 409, reason="Conflict", message="the object has been modified")

    def act() -> None:
        wait_until(lambda: kube.calls_matching("list", "podsnapshots"))
        kube.patch("apps/v1", "statefulsets", "default", "nb", patch)

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    return thread


def test_a_conflict_because_someone_scaled_it_meanwhile_reads_again_and_says_so(
    kube_api: KubeAPI, kubeconfig: str
) -> None:
    completed_with_ready_snapshot(kube_api)
    kube_api.reset_calls()
    thread = meanwhile(kube_api, {"spec": {"replicas": 0}})
    code, answer, stderr = release_json("nb", kubeconfig=kubeconfig)
    thread.join(5)
    assert (code, answer["state"], answer["action"]) == (0, "already_released", "none"), stderr
    assert scale_patches(kube_api) == ["nb"]  # the one refused with 409, not sent again
    assert len(kube_api.calls_matching("get", "statefulsets")) == 2  # read again after the 409
    assert replicas(kube_api, "nb") == 0


def test_a_conflict_from_an_unrelated_change_reads_again_and_releases(kube_api: KubeAPI, kubeconfig: str) -> None:
    snap = completed_with_ready_snapshot(kube_api)
    kube_api.reset_calls()
    thread = meanwhile(kube_api, {"metadata": {"labels": {"team": "ml"}}})
    code, answer, stderr = release_json("nb", kubeconfig=kubeconfig)
    thread.join(5)
    assert (code, answer["state"], answer["snapshot"]) == (0, "released", snap), stderr
    assert scale_patches(kube_api) == ["nb", "nb"]  # refused, then sent again at the new resourceVersion
    assert replicas(kube_api, "nb") == 0
    assert get(kube_api, "statefulsets", "nb")["metadata"]["labels"]["team"] == "ml"


def test_the_scale_carries_the_resource_version_read_as_its_precondition() -> None:
    sent: list[tuple[str, str, Any, dict[str, Any]]] = []

    class Apps:
        def patch_namespaced_stateful_set_scale(self, name: str, namespace: str, body: Any, **opts: Any) -> Any:
            sent.append((name, namespace, body, opts))
            return type("R", (), {"data": b"{}"})()

    kube = ReleaseKube.__new__(ReleaseKube)
    kube.namespace, kube.default_timeout, kube.timeout = "ns", 10.0, 10.0
    kube.apps = Apps()  # type: ignore[assignment]
    kube.scale_to_zero("nb", "42")
    ((name, namespace, body, opts),) = sent
    assert (name, namespace) == ("nb", "ns")
    assert body == {"metadata": {"resourceVersion": "42"}, "spec": {"replicas": 0}}
    assert opts["_content_type"] == "application/merge-patch+json"


# --- (5) --watch --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_watch_releases_two_environments_ignores_an_unlabelled_one_and_ends_on_sigterm(
    kube_api: KubeAPI, kubeconfig: str
) -> None:
    StatefulSetController(kube_api).attach()
    GKESnapshotController(kube_api).attach()
    kube_api.create(stop_policy())
    start(kube_api, "env-a", "env-b")
    start(kube_api, "other", labelled=False)
    kube_api.fail_next("list", "statefulsets", 503, times=2)  # the API falters at first: logged, retried
    jupyter = Path(sys.executable).parent / "jupyter"
    proc = sp.Popen(
        [
            str(jupyter),
            *("suspend", "release", "--watch", "-n", "default", "--poll-interval=0.2"),
            f"--kubeconfig={kubeconfig}",
        ],
        stdout=sp.PIPE,
        stderr=sp.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        for name in ("env-a", "env-b", "other"):
            suspend(kube_api, name)
        wait_until(lambda: replicas(kube_api, "env-a") == 0 and replicas(kube_api, "env-b") == 0, timeout=20)
        ready_snapshot(kube_api, "other")
        wait_until(lambda: len(kube_api.calls_matching("list", "statefulsets")) >= 6, timeout=10)  # more rounds
        assert replicas(kube_api, "other") == 1
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    lines = out.splitlines()
    released = [line for line in lines if line.startswith("released ")]
    assert sorted(line.split()[1] for line in released) == ["statefulset/env-a", "statefulset/env-b"], out
    assert lines[0].startswith(f"watching StatefulSets with {DEFAULT_SELECTOR} in default")
    assert lines[-1] == "stopped"
    assert err.count("API error: ") == err.count(": 503 Service Unavailable; retrying in ") == 2, err
    assert sorted(scale_patches(kube_api)) == ["env-a", "env-b"]
    for name in ("env-a", "env-b"):
        wait_until(partial(lambda pod: kube_api.get("v1", "pods", "default", pod) is None, f"{name}-0"))
    assert pod_phase(kube_api, "other-0") == "Running"


# --- (6) bad arguments ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("a", "b"),
        ("Not_A_Name",),
        ("nb", "--timeout=-1"),
        ("nb", "--poll-interval=0"),
        ("nb", "--selector=app=x"),
        ("nb", "--watch"),
        ("--watch", "--json"),
        ("--watch", "--wait"),
        ("--watch", "--selector=bad selector!"),
        ("nb", "--no-such-flag"),
        ("nb", "--timeout=soon"),
    ],
)
def test_bad_arguments_exit_2_without_an_api_call(args: tuple[str, ...], kube_api: KubeAPI, kubeconfig: str) -> None:
    done = run_cli("release", *args, kubeconfig=kubeconfig)
    assert done.code == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert kube_api.calls == []


# --- (7) the JSON schema -----------------------------------------------------------------------------------------


def test_the_schema_has_its_id_under_the_api_base_and_rejects_a_bad_answer() -> None:
    schema = output_schema("release")
    assert schema["$id"] == "https://schema.jupyter.org/jupyter_suspend/api/v1/cli-release.json"
    good = {
        "command": "release",
        "kind": "statefulset",
        "name": "nb",
        "namespace": "default",
        "state": "released",
        "message": "m",
        "action": "scaled_to_zero",
        "pod": "nb-0",
        "snapshot": "s",
        "replicas": 0,
        "waited": False,
        "elapsed_seconds": 0.1,
        "history": [{"state": "released", "at_seconds": 0.1}],
    }
    validate_output(good, "release")
    with pytest.raises(Exception, match="not one of"):
        validate_output({**good, "state": "done"}, "release")
    with pytest.raises(Exception, match="required"):
        validate_output({k: v for k, v in good.items() if k != "snapshot"}, "release")


class Lines:
    """A Watcher's output, kept."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        self.lines.append(text)

    def flush(self) -> None:
        pass


# --- (8) least privilege ----------------------------------------------------------------------------------------


def releaser_role_triples() -> set[tuple[str, str, str]]:
    documents = yaml.safe_load_all((ROOT / "deploy/releaser/role.yaml").read_text())
    return granted(bound_role(documents, "jupyter-suspend-releaser"))


@pytest.mark.slow
def test_the_releasers_role_grants_exactly_the_calls_it_makes(kube_api: KubeAPI, kubeconfig: str) -> None:
    completed_with_ready_snapshot(kube_api)
    kube_api.create(notebook_set("nb2"))
    wait_until(lambda: pod_phase(kube_api, "nb2-0") == "Running")
    kube_api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "unrelated", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }
    )
    kube_api.reset_calls()
    # Once, through a conflict (read again), and --watch's round over the namespace.
    thread = meanwhile(kube_api, {"metadata": {"labels": {"team": "ml"}}})
    code, answer, stderr = release_json("nb", kubeconfig=kubeconfig)
    thread.join(5)
    assert (code, answer["state"]) == (0, "released"), stderr
    kube_api.patch("apps/v1", "statefulsets", "default", "nb", {"spec": {"replicas": 1}})  # a resume
    wait_until(lambda: pod_phase(kube_api, "nb-0") == "Running")
    used_up = kube_api.gke.restore_pod("nb-0", namespace="default")  # ... restored from the released snapshot
    suspend_again = {
        "apiVersion": GKE,
        "kind": "PodSnapshotManualTrigger",
        "metadata": {"name": "nb2-suspend", "namespace": "default"},
        "spec": {"targetPod": "nb2-0"},
    }
    kube_api.create(suspend_again)
    ready_snapshot(kube_api, "nb2")
    wait_until(lambda: pod_phase(kube_api, "nb2-0") == "Succeeded")
    watcher = Watcher(connect_release_kube(kube_client(kubeconfig), "default"), DEFAULT_SELECTOR, 0.1, out=Lines())
    watcher.round()
    assert watcher.released == [("nb2", ready_snapshot(kube_api, "nb2"))]
    assert replicas(kube_api, "nb") == 1  # resumed: left alone
    assert watcher.consumed == [("nb", used_up)]  # its used-up snapshot deleted

    used = called(kube_api)
    assert ("apps", "statefulsets/scale", "patch") in used
    assert ("apps", "statefulsets", "get") in used  # the read after the conflict
    assert used == releaser_role_triples()


def test_an_api_error_is_said_on_stderr_and_exits_1(kube_api: KubeAPI, kubeconfig: str) -> None:
    StatefulSetController(kube_api).attach()
    start(kube_api, "nb")
    kube_api.fail_next("get", "statefulsets", 500)
    done = run_cli("release", "nb", "--json", kubeconfig=kubeconfig)
    assert done.code == 1
    assert done.stdout == ""
    assert "500" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_watch_never_takes_a_resume_for_a_replacement_when_recording_the_release_failed(
    kube_api: KubeAPI, kubeconfig: str
) -> None:
    snap = completed_with_ready_snapshot(kube_api)
    refuse = {"on": True}

    def admission(verb: str, obj: dict[str, Any], user: str) -> str | None:
        annotations = obj.get("metadata", {}).get("annotations") or {}
        if refuse["on"] and obj.get("kind") == "StatefulSet" and RELEASED_ANNOTATION in annotations:
            return "simulated: the record is refused"
        return None

    kube_api.add_admission(admission)
    watcher = Watcher(connect_release_kube(kube_client(kubeconfig), "default"), DEFAULT_SELECTOR, 0.1, out=Lines())
    watcher.round()
    assert watcher.released == [("nb", snap)]
    assert watcher.unrecorded == {"nb": snap}
    assert replicas(kube_api, "nb") == 0
    assert RELEASED_ANNOTATION not in (get(kube_api, "statefulsets", "nb")["metadata"].get("annotations") or {})

    kube_api.patch("apps/v1", "statefulsets", "default", "nb", {"spec": {"replicas": 1}})  # a resume, at once
    wait_until(lambda: pod_phase(kube_api, "nb-0") == "Running")
    watcher.round()  # the record still fails: the resumed pod is left alone all the same
    assert replicas(kube_api, "nb") == 1
    refuse["on"] = False
    watcher.round()
    assert watcher.unrecorded == {}
    assert get(kube_api, "statefulsets", "nb")["metadata"]["annotations"][RELEASED_ANNOTATION] == snap
    assert replicas(kube_api, "nb") == 1
    assert scale_patches(kube_api) == ["nb"]
