"""``jupyter suspend release`` (once, ``--wait``, ``--watch``) on the real control plane, acting as deploy/releaser's
ServiceAccount (a TokenRequest token; its Role, rendered from deploy/releaser by kubectl's kustomize, judged by the
real RBAC authorizer).

What is real here and was simulated on the loopback server: the StatefulSet controller replaces the Completed pod at
once (the race the releaser exists for) and deletes the pod when scaled to 0; the API server checks the
``resourceVersion`` the scale carries (a real 409); a refused write is refused by a real ValidatingAdmissionPolicy.
GKE's snapshot controller stays simulated (tests/cluster/gke.py): a manual trigger makes a PodSnapshot (named by a
UUID), the checkpointed pod is stopped (kwok reports it Succeeded), the snapshot turns Ready after its upload, and a
new matching pod is restored from it.
"""

from __future__ import annotations

import os
import signal
import subprocess as sp
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_suspend.cli.release import (
    DEFAULT_SELECTOR,
    RELEASED_ANNOTATION,
    ReleaseKube,
    Watcher,
    connect_release_kube,
)
from tests.cli_helpers import kube_client, run_cli, validate_output
from tests.cluster.calls import granted, recording
from tests.cluster.control_plane import Cluster
from tests.cluster.fixtures import token_kubeconfig
from tests.cluster.gke import GKESnapshotController
from tests.cluster.notebook import REPO, create, get, notebook_statefulset, render, running_pod, wait_for

pytestmark = [pytest.mark.cluster]

FAST = ("--poll-interval=0.2",)
LABEL_KEY, LABEL_VALUE = DEFAULT_SELECTOR.split("=")
GKE = "podsnapshot.gke.io/v1"
RELEASER = "jupyter-suspend-releaser"


@pytest.fixture
def releaser(cluster: Cluster, kube_ns: str, tmp_path: Path) -> str:
    """deploy/releaser applied in the namespace; a kubeconfig with a token of its ServiceAccount."""
    create(cluster, render(cluster, REPO / "deploy" / "releaser", kube_ns))
    token = cluster.kubectl("create", "token", RELEASER, "-n", kube_ns).strip()
    return str(token_kubeconfig(cluster, tmp_path / "releaser.kubeconfig", token, kube_ns))


def gke_controller(cluster: Cluster, ns: str, **kwargs: Any) -> GKESnapshotController:
    return GKESnapshotController(cluster, ns, **kwargs).start()


@pytest.fixture
def gke(cluster: Cluster, kube_ns: str) -> Iterator[GKESnapshotController]:
    controller = gke_controller(cluster, kube_ns)
    yield controller
    controller.stop()
    assert not controller.errors, controller.errors


def stop_policy(ns: str) -> dict[str, Any]:
    """deploy/base's policy shape, for this file's notebooks (``app=notebook``)."""
    return {
        "apiVersion": GKE,
        "kind": "PodSnapshotPolicy",
        "metadata": {"name": "notebook-snapshots", "namespace": ns},
        "spec": {
            "storageConfigName": "jupyter-suspend",
            "selector": {"matchLabels": {"app": "notebook"}},
            "triggerConfig": {"type": "manual", "postCheckpoint": "stop"},
        },
    }


def start(cluster: Cluster, ns: str, *names: str, labelled: bool = True) -> dict[str, str]:
    """Running notebooks (their StatefulSets labelled as deploy/base's, which --watch selects); their pods' uids."""
    labels = {LABEL_KEY: LABEL_VALUE} if labelled else {}
    create(cluster, [notebook_statefulset(name, ns, replicas=1, gpus=0, labels=labels) for name in names])
    return {
        name: wait_for(lambda n=name: running_pod(cluster, ns, f"{n}-0"), 60, f"{name}-0 Running")["metadata"]["uid"]
        for name in names
    }


def suspend(cluster: Cluster, ns: str, name: str) -> None:
    """What the sidecar asks for: a PodSnapshotManualTrigger for the pod."""
    trigger = {
        "apiVersion": GKE,
        "kind": "PodSnapshotManualTrigger",
        "metadata": {"name": f"{name}-suspend", "namespace": ns},
        "spec": {"targetPod": f"{name}-0"},
    }
    create(cluster, [trigger])


def snapshot_of(cluster: Cluster, ns: str, name: str) -> dict[str, Any] | None:
    for snap in (get(cluster, ns, "podsnapshots") or {"items": []})["items"]:
        if snap["metadata"]["annotations"].get("podsnapshot.gke.io/origin-pod") == f"{name}-0":
            return dict(snap)
    return None


def is_ready(snap: dict[str, Any] | None) -> bool:
    conditions = ((snap or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def ready_snapshot(cluster: Cluster, ns: str, name: str) -> str:
    def ready() -> dict[str, Any] | None:
        found = snapshot_of(cluster, ns, name)
        return found if is_ready(found) else None

    snap = wait_for(ready, 60, "a Ready snapshot")
    return str(snap["metadata"]["name"])


def sts(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    found = get(cluster, ns, "statefulset", name)
    assert found is not None, name
    return found


def replicas(cluster: Cluster, ns: str, name: str) -> int:
    return int(sts(cluster, ns, name)["spec"]["replicas"])


def phase(cluster: Cluster, ns: str, pod: str) -> str | None:
    found = get(cluster, ns, "pod", pod)
    return None if found is None else found["status"].get("phase")


def release_json(*args: str, kubeconfig: str) -> tuple[int, dict[str, Any], str]:
    done = run_cli("release", *args, "--json", kubeconfig=kubeconfig)
    return done.code, validate_output(done.json(), "release"), done.stderr


def scales(calls: Any) -> list[str]:
    return [str(c.name) for c in calls.matching("patch", "statefulsets/scale")]


def replaced(cluster: Cluster, ns: str, name: str, uid: str) -> dict[str, Any]:
    """The real StatefulSet controller's replacement of the stopped pod, running."""
    return dict(wait_for(lambda: running_pod(cluster, ns, f"{name}-0", not_uid=uid), 60, "the replacement"))


# --- (1) released: the controller's replacement; then already released; a resume is not released -----------------


@pytest.mark.slow
def test_the_controllers_replacement_is_released_deleted_and_a_resume_is_not(
    cluster: Cluster, kube_ns: str, releaser: str, gke: GKESnapshotController
) -> None:
    create(cluster, [stop_policy(kube_ns)])
    uids = start(cluster, kube_ns, "nb")
    suspend(cluster, kube_ns, "nb")
    snap = ready_snapshot(cluster, kube_ns, "nb")
    # The real controller replaced the stopped pod at once: the GPU is held again (GKE restores the replacement
    # when the snapshot was Ready before it started, else it starts cold: either way it runs).
    replaced(cluster, kube_ns, "nb", uids["nb"])
    assert gke.stopped_pods == ["nb-0"]

    generation = sts(cluster, kube_ns, "nb")["metadata"]["generation"]
    with recording() as calls:
        code, answer, stderr = release_json("nb", kubeconfig=releaser)
    assert code == 0, stderr
    assert (answer["state"], answer["action"], answer["snapshot"], answer["pod"]) == (
        "released",
        "scaled_to_zero",
        snap,
        "nb-0",
    )
    assert answer["replicas"] == 0
    assert "replaced" in answer["message"]
    # Scaled once: one change of the spec. (A scale refused with 409 because the controller wrote the set's status
    # between the read and the write — its precondition — is read again and sent again: a CI run met one.)
    assert set(scales(calls)) == {"nb"}
    assert sts(cluster, kube_ns, "nb")["metadata"]["generation"] == generation + 1
    assert replicas(cluster, kube_ns, "nb") == 0
    wait_for(lambda: get(cluster, kube_ns, "pod", "nb-0") is None, 60, "the controller deleted the pod")
    assert sts(cluster, kube_ns, "nb")["metadata"]["annotations"][RELEASED_ANNOTATION] == snap
    time.sleep(2)
    assert get(cluster, kube_ns, "pod", "nb-0") is None  # not recreated: the set asks for 0

    with recording() as calls:
        code, answer, _ = release_json("nb", kubeconfig=releaser)
    assert (code, answer["state"], answer["action"]) == (0, "already_released", "none")
    assert scales(calls) == []

    # A resume restores from that snapshot: its pod is a live session, never taken for a replacement.
    cluster.kubectl("scale", "statefulset", "nb", "-n", kube_ns, "--replicas=1")
    wait_for(lambda: running_pod(cluster, kube_ns, "nb-0"), 60, "the resumed pod")
    with recording() as calls:
        code, answer, _ = release_json("nb", kubeconfig=releaser)
    assert (code, answer["state"], answer["action"]) == (1, "running", "none")
    assert replicas(cluster, kube_ns, "nb") == 1
    assert scales(calls) == []


# --- (2) refused: a live session --------------------------------------------------------------------------------


def test_a_running_pod_without_a_ready_snapshot_is_refused(cluster: Cluster, kube_ns: str, releaser: str) -> None:
    start(cluster, kube_ns, "nb")
    # The spec and the metadata the release would write (the controller keeps writing the status meanwhile).
    before = sts(cluster, kube_ns, "nb")
    before_view = (before["metadata"]["generation"], before["metadata"].get("annotations"), before["spec"])
    with recording() as calls:
        code, answer, _ = release_json("nb", kubeconfig=releaser)
    assert (code, answer["state"], answer["action"], answer["pod"]) == (1, "running", "none", "nb-0")
    assert "live session" in answer["message"]
    assert calls.writes() == []
    assert replicas(cluster, kube_ns, "nb") == 1
    after = sts(cluster, kube_ns, "nb")
    assert (after["metadata"]["generation"], after["metadata"].get("annotations"), after["spec"]) == before_view

    text = run_cli("release", "nb", kubeconfig=releaser)
    assert text.code == 1
    assert f"statefulset/nb in {kube_ns}: running" in text.stdout


# --- (3) --wait -------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_wait_follows_until_the_snapshot_is_ready_then_releases(cluster: Cluster, kube_ns: str, releaser: str) -> None:
    gke = gke_controller(cluster, kube_ns, upload_seconds=600.0)  # the test ends the upload itself
    try:
        create(cluster, [stop_policy(kube_ns)])
        start(cluster, kube_ns, "nb")
        suspend(cluster, kube_ns, "nb")
        snap = wait_for(lambda: snapshot_of(cluster, kube_ns, "nb"), 60, "the snapshot")["metadata"]["name"]
        outcome: list[tuple[int, dict[str, Any], str]] = []
        with recording() as calls:
            command = threading.Thread(
                target=lambda: outcome.append(release_json("nb", "--wait", "--timeout=60", *FAST, kubeconfig=releaser)),
                daemon=True,
            )
            command.start()
            wait_for(lambda: len(calls.matching("list", "podsnapshots")) >= 3, 30, "three looks at the snapshots")
            # Not scaled while the snapshot uploads (the real controller's replacement runs meanwhile, cold).
            assert replicas(cluster, kube_ns, "nb") == 1
            assert scales(calls) == []
            gke._uploaded(snap, "nb-0")  # the upload ends: StorageReplicated, Ready
            command.join(60)
            assert not command.is_alive()
        assert not gke.errors, gke.errors
    finally:
        gke.stop()
    code, answer, stderr = outcome[0]
    assert code == 0, stderr
    states = [entry["state"] for entry in answer["history"]]
    assert states[0] == "waiting_for_snapshot", states
    assert states[-1] == "released", states
    assert answer["waited"] is True
    assert answer["snapshot"] == snap == gke.snapshots_created[0]
    assert scales(calls) == ["nb"]
    assert "waiting_for_snapshot" in stderr  # progress on stderr
    assert len(calls.matching("list", "podsnapshots")) >= 4  # three looks before Ready, one after
    assert replicas(cluster, kube_ns, "nb") == 0


@pytest.mark.slow
def test_wait_times_out_when_the_snapshot_never_gets_ready(cluster: Cluster, kube_ns: str, releaser: str) -> None:
    gke = gke_controller(cluster, kube_ns, behaviour="never_ready")
    try:
        create(cluster, [stop_policy(kube_ns)])
        start(cluster, kube_ns, "nb")
        suspend(cluster, kube_ns, "nb")
        wait_for(lambda: snapshot_of(cluster, kube_ns, "nb"), 60, "the snapshot")
        started = time.monotonic()
        with recording() as calls:
            code, answer, _ = release_json("nb", "--wait", "--timeout=1.5", *FAST, kubeconfig=releaser)
        assert time.monotonic() - started < 10
        assert (code, answer["state"]) == (1, "timed_out")
        assert "waiting_for_snapshot" in answer["message"]
        assert [entry["state"] for entry in answer["history"]] == ["waiting_for_snapshot", "timed_out"]
        assert calls.writes() == []
        assert replicas(cluster, kube_ns, "nb") == 1

        # Without --wait: says so, exit 1, nothing done.
        code, answer, _ = release_json("nb", kubeconfig=releaser)
        assert (code, answer["state"], answer["action"]) == (1, "waiting_for_snapshot", "none")
        assert not gke.errors, gke.errors
    finally:
        gke.stop()


def test_a_checkpoint_that_failed_is_final_and_a_missing_statefulset_is_not_found(
    cluster: Cluster, kube_ns: str, releaser: str
) -> None:
    gke = gke_controller(cluster, kube_ns, behaviour="checkpoint_fails")
    try:
        create(cluster, [stop_policy(kube_ns)])
        start(cluster, kube_ns, "nb")
        suspend(cluster, kube_ns, "nb")
        wait_for(
            lambda: (s := snapshot_of(cluster, kube_ns, "nb")) and (s.get("status") or {}).get("conditions"),
            60,
            "the failed checkpoint",
        )
        with recording() as calls:
            code, answer, _ = release_json("nb", "--wait", "--timeout=20", *FAST, kubeconfig=releaser)
            assert (code, answer["state"]) == (1, "checkpoint_failed")
            assert answer["elapsed_seconds"] < 5
            code, answer, _ = release_json("gone", kubeconfig=releaser)
            assert (code, answer["state"], answer["replicas"]) == (1, "not_found", None)
        assert calls.writes() == []
        assert replicas(cluster, kube_ns, "nb") == 1
    finally:
        gke.stop()


# --- (4) a resourceVersion conflict: the real API server's 409 ------------------------------------------------------


def completed_with_ready_snapshot(cluster: Cluster, ns: str, gke: GKESnapshotController, name: str = "nb") -> str:
    create(cluster, [stop_policy(ns)])
    uids = start(cluster, ns, name)
    suspend(cluster, ns, name)
    snap = ready_snapshot(cluster, ns, name)
    replaced(cluster, ns, name, uids[name])
    return snap


def meanwhile(monkeypatch: pytest.MonkeyPatch, cluster: Cluster, ns: str, *change: str) -> list[str]:
    """Someone else changes the StatefulSet (``kubectl`` as the admin) while the release reads the snapshots, i.e.
    after it read the StatefulSet and before its scale: the scale then carries a stale resourceVersion, and the
    real API server answers 409. Only the timing is arranged; the conflict is the server's."""
    original = ReleaseKube.list_snapshots
    done: list[str] = []

    def list_snapshots(self: ReleaseKube) -> list[dict[str, Any]]:
        if not done:
            done.append(cluster.kubectl(*change, "-n", ns))
        return original(self)

    monkeypatch.setattr(ReleaseKube, "list_snapshots", list_snapshots)
    return done


@pytest.mark.slow
def test_a_conflict_because_someone_scaled_it_meanwhile_reads_again_and_says_so(
    cluster: Cluster, kube_ns: str, releaser: str, gke: GKESnapshotController, monkeypatch: pytest.MonkeyPatch
) -> None:
    completed_with_ready_snapshot(cluster, kube_ns, gke)
    changed = meanwhile(monkeypatch, cluster, kube_ns, "scale", "statefulset", "nb", "--replicas=0")
    with recording() as calls:
        code, answer, stderr = release_json("nb", kubeconfig=releaser)
    assert changed
    assert (code, answer["state"], answer["action"]) == (0, "already_released", "none"), stderr
    assert scales(calls) == ["nb"]  # the one refused with 409, not sent again
    assert len(calls.matching("get", "statefulsets")) == 2  # read again after the 409
    assert replicas(cluster, kube_ns, "nb") == 0


@pytest.mark.slow
def test_a_conflict_from_an_unrelated_change_reads_again_and_releases(
    cluster: Cluster, kube_ns: str, releaser: str, gke: GKESnapshotController, monkeypatch: pytest.MonkeyPatch
) -> None:
    snap = completed_with_ready_snapshot(cluster, kube_ns, gke)
    changed = meanwhile(monkeypatch, cluster, kube_ns, "label", "statefulset", "nb", "team=ml")
    with recording() as calls:
        code, answer, stderr = release_json("nb", kubeconfig=releaser)
    assert changed
    assert (code, answer["state"], answer["snapshot"]) == (0, "released", snap), stderr
    assert scales(calls) == ["nb", "nb"]  # refused, then sent again at the new resourceVersion
    assert replicas(cluster, kube_ns, "nb") == 0
    assert sts(cluster, kube_ns, "nb")["metadata"]["labels"]["team"] == "ml"


# --- (5) --watch --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_watch_releases_two_environments_ignores_an_unlabelled_one_and_ends_on_sigterm(
    cluster: Cluster, kube_ns: str, releaser: str, gke: GKESnapshotController
) -> None:
    """The real ``jupyter suspend release --watch`` process, as deploy/releaser runs it."""
    create(cluster, [stop_policy(kube_ns)])
    start(cluster, kube_ns, "env-a", "env-b")
    start(cluster, kube_ns, "other", labelled=False)
    jupyter = Path(sys.executable).parent / "jupyter"
    proc = sp.Popen(
        [str(jupyter), "suspend", "release", "--watch", "--poll-interval=0.5", f"--kubeconfig={releaser}"],
        stdout=sp.PIPE,
        stderr=sp.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        for name in ("env-a", "env-b", "other"):
            suspend(cluster, kube_ns, name)
        wait_for(
            lambda: replicas(cluster, kube_ns, "env-a") == 0 and replicas(cluster, kube_ns, "env-b") == 0,
            90,
            "both released",
        )
        ready_snapshot(cluster, kube_ns, "other")
        time.sleep(2)  # more rounds
        assert replicas(cluster, kube_ns, "other") == 1
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    lines = out.splitlines()
    released = [line for line in lines if line.startswith("released ")]
    assert sorted(line.split()[1] for line in released) == ["statefulset/env-a", "statefulset/env-b"], out
    assert lines[0].startswith(f"watching StatefulSets with {DEFAULT_SELECTOR} in {kube_ns}")
    assert lines[-1] == "stopped"
    assert "API error" not in err, err  # its Role allowed every call it made
    for name in ("env-a", "env-b"):
        wait_for(lambda n=name: get(cluster, kube_ns, "pod", f"{n}-0") is None, 60, f"{name}-0 gone")
    assert phase(cluster, kube_ns, "other-0") == "Running"
    assert replicas(cluster, kube_ns, "other") == 1


# --- (8) least privilege: the calls made are exactly the Role's ---------------------------------------------------


class Lines:
    """A Watcher's output, kept."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        self.lines.append(text)

    def flush(self) -> None:
        pass


@pytest.mark.slow
def test_the_releasers_role_grants_exactly_the_calls_it_makes(
    cluster: Cluster, kube_ns: str, releaser: str, gke: GKESnapshotController, monkeypatch: pytest.MonkeyPatch
) -> None:
    completed_with_ready_snapshot(cluster, kube_ns, gke)
    uids = start(cluster, kube_ns, "nb2")
    cluster.kubectl("run", "unrelated", "-n", kube_ns, "--image=busybox", "--restart=Never")
    with recording() as calls:
        # Once, through a conflict (read again) ...
        meanwhile(monkeypatch, cluster, kube_ns, "label", "statefulset", "nb", "team=ml")
        code, answer, stderr = release_json("nb", kubeconfig=releaser)
        assert (code, answer["state"]) == (0, "released"), stderr
        monkeypatch.undo()
        # ... a resume, restored from the released snapshot ...
        used = answer["snapshot"]
        restores = gke.restored.count(("nb-0", used))  # the replacement's, if it was restored
        cluster.kubectl("scale", "statefulset", "nb", "-n", kube_ns, "--replicas=1")
        wait_for(lambda: gke.restored.count(("nb-0", used)) > restores, 60, "the resume restored")
        # ... and --watch's round over the namespace: nb2 suspended meanwhile, nb's used-up snapshot.
        suspend(cluster, kube_ns, "nb2")
        snap2 = ready_snapshot(cluster, kube_ns, "nb2")
        replaced(cluster, kube_ns, "nb2", uids["nb2"])
        watcher = Watcher(connect_release_kube(kube_client(releaser), kube_ns), DEFAULT_SELECTOR, 0.1, out=Lines())
        watcher.round()
    assert watcher.released == [("nb2", snap2)]
    assert replicas(cluster, kube_ns, "nb") == 1  # resumed: left alone
    assert watcher.consumed == [("nb", used)]  # its used-up snapshot deleted (and its trigger)
    wait_for(lambda: get(cluster, kube_ns, "podsnapshot", used) is None, 30, "the used-up snapshot gone")
    assert get(cluster, kube_ns, "podsnapshotmanualtrigger", "nb-suspend") is None

    # Every call was allowed by the real authorizer (the commands succeeded as the releaser), and the Role
    # deploy/releaser applies grants nothing more than those calls.
    role = get(cluster, kube_ns, "role", RELEASER)
    assert role is not None
    used_calls = calls.triples()
    assert ("apps", "statefulsets/scale", "patch") in used_calls
    assert ("apps", "statefulsets", "get") in used_calls  # the read after the conflict
    assert used_calls == granted(role["rules"])


# --- an API error: the real authorizer's 403 ------------------------------------------------------------------------


def test_an_api_error_is_said_on_stderr_and_exits_1(cluster: Cluster, kube_ns: str, tmp_path: Path) -> None:
    """An identity without the releaser's Role (the namespace's default ServiceAccount): the real 403."""
    start(cluster, kube_ns, "nb")
    token = cluster.kubectl("create", "token", "default", "-n", kube_ns).strip()
    kubeconfig = str(token_kubeconfig(cluster, tmp_path / "nobody.kubeconfig", token, kube_ns))
    done = run_cli("release", "nb", "--json", kubeconfig=kubeconfig)
    assert done.code == 1
    assert done.stdout == ""
    assert "403" in done.stderr
    assert "Traceback" not in done.stderr
    assert replicas(cluster, kube_ns, "nb") == 1


# --- a release whose record is refused: a real ValidatingAdmissionPolicy ------------------------------------------


def refuse_the_record(cluster: Cluster, ns: str) -> None:
    """A platform's admission policy (CEL, the real API server's) that refuses the release record on this namespace's
    StatefulSets; the scale subresource is another resource and stays allowed."""
    name = f"refuse-release-record-{ns}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["apps"],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": ["statefulsets"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": f"!has(object.metadata.annotations) || !('{RELEASED_ANNOTATION}' in "
                    "object.metadata.annotations)",
                    "message": "the record is refused here",
                    "reason": "Forbidden",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}},
        },
    }
    create(cluster, [policy, binding])


def record_refused(cluster: Cluster, ns: str, name: str) -> bool:
    """Whether the API server now refuses the record (a server-side dry run: nothing is written)."""
    tried = sp.run(
        [cluster.binary("kubectl"), f"--kubeconfig={cluster.admin_kubeconfig}", "annotate", "statefulset", name,
         "-n", ns, f"{RELEASED_ANNOTATION}=probe", "--dry-run=server", "--overwrite"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return tried.returncode != 0 and "the record is refused here" in tried.stderr


@pytest.mark.slow
def test_watch_never_takes_a_resume_for_a_replacement_when_recording_the_release_failed(
    cluster: Cluster, kube_ns: str, releaser: str, gke: GKESnapshotController
) -> None:
    snap = completed_with_ready_snapshot(cluster, kube_ns, gke)
    refuse_the_record(cluster, kube_ns)
    name = f"refuse-release-record-{kube_ns}"
    try:
        wait_for(lambda: record_refused(cluster, kube_ns, "nb"), 30, "the policy in force")
        watcher = Watcher(connect_release_kube(kube_client(releaser), kube_ns), DEFAULT_SELECTOR, 0.1, out=Lines())
        with recording() as calls:
            watcher.round()
        assert watcher.released == [("nb", snap)]
        assert watcher.unrecorded == {"nb": snap}
        assert replicas(cluster, kube_ns, "nb") == 0
        assert RELEASED_ANNOTATION not in (sts(cluster, kube_ns, "nb")["metadata"].get("annotations") or {})
        assert len(calls.matching("patch", "statefulsets")) == 4  # the record, tried four times, refused

        cluster.kubectl("scale", "statefulset", "nb", "-n", kube_ns, "--replicas=1")  # a resume, at once
        wait_for(lambda: running_pod(cluster, kube_ns, "nb-0"), 60, "the resumed pod")
        with recording() as calls:
            watcher.round()  # the record still fails: the resumed pod is left alone all the same
        assert replicas(cluster, kube_ns, "nb") == 1
        assert scales(calls) == []
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, check=False)
    wait_for(lambda: not record_refused(cluster, kube_ns, "nb"), 30, "the policy gone")
    with recording() as calls:
        watcher.round()
    assert watcher.unrecorded == {}
    assert sts(cluster, kube_ns, "nb")["metadata"]["annotations"][RELEASED_ANNOTATION] == snap
    assert replicas(cluster, kube_ns, "nb") == 1
    assert scales(calls) == []
