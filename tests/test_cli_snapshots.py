"""``jupyter suspend snapshots list|delete|prune``: the real command (a subprocess) with a kubeconfig for the loopback
Kubernetes API and the simulated GKE snapshot controller (tests/kubeapi/gke.py), whose finalizer frees a deleted
snapshot's storage only while its policy exists. Every ``--json`` document is validated against cli-snapshots.json."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from jupyter_suspend.cli.base import UsageError
from jupyter_suspend.cli.snapshots import (
    DeleteSnapshotsApp,
    ListSnapshotsApp,
    PruneSnapshotsApp,
    SnapshotsApp,
    choose,
    matches_selector,
    parse_duration,
)
from tests.kubeapi import KubeAPI, condition, wait_until
from tests.kubeapi.gke import GKESnapshotController

GKE = "podsnapshot.gke.io/v1"
NS = "team-b"
ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads(files("jupyter_suspend.common.schemas").joinpath("cli-snapshots.json").read_text())


@dataclass
class Cluster:
    kube: KubeAPI
    gke: GKESnapshotController
    kubeconfig: str

    def run(self, *args: str, own_process: bool = False) -> subprocess.CompletedProcess[str]:
        """The command in this process (importing the Kubernetes client costs seconds per process), or with
        ``own_process`` as the installed executable runs it."""
        argv = ["snapshots", *args, "--kubeconfig", self.kubeconfig]
        if own_process:
            return subprocess.run(
                [sys.executable, "-m", "jupyter_suspend.cli.app", *argv],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=ROOT,
                env={**os.environ, "HOME": str(Path(self.kubeconfig).parent)},
            )
        return in_process(argv[1:])

    def json(self, *args: str, expect: int = 0) -> dict[str, Any]:
        done = self.run(*args, "--json")
        assert done.returncode == expect, (done.returncode, done.stdout, done.stderr)
        document = json.loads(done.stdout)
        Draft202012Validator(SCHEMA).validate(document)
        return dict(document)

    def snapshot_names(self) -> set[str]:
        return {s["metadata"]["name"] for s in self.kube.list(GKE, "podsnapshots", NS)}

    def everything(self) -> list[tuple[str, str, str | None]]:
        """Every snapshot object, trigger and policy with its deletion mark: to show that nothing changed."""
        out = []
        for plural in ("podsnapshots", "podsnapshotmanualtriggers", "podsnapshotpolicies"):
            for obj in self.kube.list(GKE, plural, NS):
                out.append((plural, obj["metadata"]["name"], obj["metadata"].get("deletionTimestamp")))
        return sorted(out, key=str)


def in_process(argv: list[str]) -> subprocess.CompletedProcess[str]:
    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                app = SnapshotsApp()
                app.initialize(argv)
                app.start()
            except SystemExit as exc:
                code = exc.code
    finally:  # the leaves are singletons (traitlets): a fresh one for the next command
        for cls in (SnapshotsApp, ListSnapshotsApp, DeleteSnapshotsApp, PruneSnapshotsApp):
            cls.clear_instance()
    return subprocess.CompletedProcess(["snapshots", *argv], int(code or 0), out.getvalue(), err.getvalue())


def policy(name: str, app: str) -> dict[str, Any]:
    return {
        "apiVersion": GKE,
        "kind": "PodSnapshotPolicy",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": app}}, "triggerConfig": {"type": "manual"}},
    }


def pod(kube: KubeAPI, name: str, app: str) -> None:
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": app}},
            "spec": {"containers": [{"name": "notebook", "image": "jupyter-suspend:0.1.0"}]},
        }
    )
    kube.patch_status("v1", "pods", NS, name, {"phase": "Running"})


def snapshot(cluster: Cluster, pod_name: str, trigger: str) -> str:
    """A snapshot as a suspend makes one: a manual trigger, then GKE's snapshot, once Ready."""
    cluster.kube.create(
        {
            "apiVersion": GKE,
            "kind": "PodSnapshotManualTrigger",
            "metadata": {"name": trigger, "namespace": NS},
            "spec": {"targetPod": pod_name},
        }
    )

    def made() -> str | None:
        current = cluster.kube.get(GKE, "podsnapshotmanualtriggers", NS, trigger) or {}
        name = ((current.get("status") or {}).get("snapshotCreated") or {}).get("name")
        ready = condition(cluster.kube.get(GKE, "podsnapshots", NS, name), "Ready") if name else None
        return name if ready and ready["status"] == "True" else None

    return str(wait_until(made, timeout=10))


def ago(days: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with KubeAPI() as kube:
        gke = GKESnapshotController(kube, checkpoint_seconds=0.02, upload_seconds=0.02).attach()
        for env in ("nb-a", "nb-b"):
            kube.create(policy(f"pol-{env}", env))
            pod(kube, f"{env}-0", env)
        yield Cluster(kube, gke, kube.kubeconfig(tmp_path / "kubeconfig", namespace=NS))
        assert not kube.controller_errors, kube.controller_errors


@pytest.fixture
def history(cluster: Cluster) -> dict[str, list[str]]:
    """nb-a: three snapshots a second apart (oldest first), nb-b: one; and a trigger that failed."""
    a = []
    for i in range(3):
        if i:
            time.sleep(1.05)  # creationTimestamp has whole seconds: "newest" must be decidable
        a.append(snapshot(cluster, "nb-a-0", f"nb-a-t{i}"))
    b = [snapshot(cluster, "nb-b-0", "nb-b-t0")]
    cluster.gke.behaviour = "trigger_fails"
    cluster.kube.create(
        {
            "apiVersion": GKE,
            "kind": "PodSnapshotManualTrigger",
            "metadata": {"name": "nb-a-failed", "namespace": NS},
            "spec": {"targetPod": "nb-a-0"},
        }
    )
    wait_until(lambda: condition(cluster.kube.get(GKE, "podsnapshotmanualtriggers", NS, "nb-a-failed"), "Triggered"))
    cluster.gke.behaviour = "succeed"
    return {"nb-a": a, "nb-b": b}


@pytest.mark.slow
def test_list_one_environment_and_the_namespace(cluster: Cluster, history: dict[str, list[str]]) -> None:
    one = cluster.json("list", "nb-a")
    assert one["command"] == "list"
    assert one["target"] == {"kind": "statefulset", "name": "nb-a", "all": False}
    assert [s["name"] for s in one["snapshots"]] == history["nb-a"][::-1]  # newest first, nb-b's not listed
    newest = one["snapshots"][0]
    assert newest["origin_pod"] == "nb-a-0"
    assert newest["environment"] == "nb-a"
    assert newest["policy"] == "pol-nb-a"
    assert newest["policy_exists"] is True
    assert newest["ready"] is True
    assert newest["trigger"] == "nb-a-t2"
    assert newest["last_access"] is not None
    assert newest["size_bytes"] is None  # GKE reports no size the command knows of: unknown, not guessed
    assert 0 <= newest["age_seconds"] < 60
    stale = one["stale"]
    assert [t["name"] for t in stale["triggers_without_snapshot"]] == ["nb-a-failed"]
    assert "made no snapshot (Failed)" in stale["triggers_without_snapshot"][0]["why"]
    assert stale["snapshots_without_policy"] == []

    every = cluster.json("list", "--all")
    assert {s["name"] for s in every["snapshots"]} == set(history["nb-a"] + history["nb-b"])
    assert every["target"] == {"kind": None, "name": None, "all": True}

    text = cluster.run("list", "nb-a", own_process=True)  # the command as installed, once
    assert text.returncode == 0, text.stderr
    header, *rows = text.stdout.splitlines()[:4]
    assert header.split() == ["NAME", "POD", "AGE", "SIZE", "POLICY", "READY", "LAST", "ACCESS", "TRIGGER"]
    assert [r.split()[0] for r in rows] == history["nb-a"][::-1]
    assert "stale trigger nb-a-failed" in text.stdout


def test_list_by_owner_kind(cluster: Cluster) -> None:
    """A Workspace's pods belong to the StatefulSet it owns (ws-<name>); a Notebook's to the one named after it."""
    cluster.kube.create(policy("pol-ws", "ws"))
    cluster.kube.create(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": "ws-lab",
                "namespace": NS,
                "labels": {"notebooks.kubeflow.org/workspace-name": "lab"},
            },
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "ws"}}, "template": {}},
        }
    )
    pod(cluster.kube, "ws-lab-0", "ws")
    made = snapshot(cluster, "ws-lab-0", "ws-t0")
    assert [s["name"] for s in cluster.json("list", "lab", "--kind", "workspace")["snapshots"]] == [made]
    assert cluster.json("list", "ws-lab", "--kind", "notebook")["snapshots"][0]["name"] == made
    missing = cluster.run("list", "nope", "--kind", "workspace")
    assert missing.returncode == 1
    assert "no StatefulSet belongs to workspace nope" in missing.stderr


@pytest.mark.slow
def test_delete_removes_the_snapshot_and_its_trigger(cluster: Cluster, history: dict[str, list[str]]) -> None:
    target = history["nb-a"][0]
    stored = cluster.kube.get(GKE, "podsnapshots", NS, target)
    assert stored is not None
    path = stored["status"]["storageStatus"]["gcs"]["observedGCSPath"]
    document = cluster.json("delete", target)
    assert document["deleted"] == [{"snapshot": target, "trigger": "nb-a-t0", "policy": "pol-nb-a"}]
    wait_until(lambda: target not in cluster.snapshot_names(), timeout=10)
    assert cluster.kube.get(GKE, "podsnapshotmanualtriggers", NS, "nb-a-t0") is None
    assert cluster.gke.deleted_storage == [path]  # freed through the finalizer
    assert cluster.gke.orphaned_storage == []
    # A missing one: exit 1, said; the others in the same call are still deleted.
    before = cluster.everything()
    done = cluster.json("delete", "nb-a-0-00000000", history["nb-b"][0], expect=1)
    assert done["errors"] == [
        {"name": "nb-a-0-00000000", "message": f"no PodSnapshot nb-a-0-00000000 in namespace {NS}"}
    ]
    assert [d["snapshot"] for d in done["deleted"]] == history["nb-b"]
    assert cluster.everything() != before


@pytest.mark.slow
def test_prune_by_count_with_a_dry_run_that_changes_nothing(cluster: Cluster, history: dict[str, list[str]]) -> None:
    before = cluster.everything()
    cluster.kube.reset_calls()
    dry = cluster.json("prune", "nb-a", "--keep", "1", "--dry-run")
    assert dry["dry_run"] is True
    assert [d["snapshot"] for d in dry["deleted"]] == history["nb-a"][1::-1]  # all but the newest
    assert dry["kept"] == [{"name": history["nb-a"][2], "why": "one of the 1 newest"}]
    assert cluster.everything() == before
    assert not [c for c in cluster.kube.calls if c.verb != "list"], cluster.kube.calls

    done = cluster.json("prune", "nb-a", "--keep", "1")
    assert [d["snapshot"] for d in done["deleted"]] == history["nb-a"][1::-1]
    assert {d["trigger"] for d in done["deleted"]} == {"nb-a-t0", "nb-a-t1"}
    wait_until(lambda: cluster.snapshot_names() == {history["nb-a"][2], history["nb-b"][0]}, timeout=10)
    assert len(cluster.gke.deleted_storage) == 2
    assert cluster.gke.orphaned_storage == []


@pytest.mark.slow
def test_prune_by_age_uses_the_last_access(cluster: Cluster, history: dict[str, list[str]]) -> None:
    stale_one, fresh_one = history["nb-a"][0], history["nb-a"][1]
    cluster.kube.patch_status(GKE, "podsnapshots", NS, stale_one, {"lastAccessTime": ago(10)})
    cluster.kube.patch_status(GKE, "podsnapshots", NS, fresh_one, {"lastAccessTime": ago(3)})
    done = cluster.json("prune", "--all", "--older-than", "7d")
    assert [d["snapshot"] for d in done["deleted"]] == [stale_one]
    # Both rules: older than 2 days AND beyond the newest one; the newest stays whatever its age.
    cluster.kube.patch_status(GKE, "podsnapshots", NS, history["nb-a"][2], {"lastAccessTime": ago(30)})
    done = cluster.json("prune", "nb-a", "--older-than", "2d", "--keep", "1")
    assert [d["snapshot"] for d in done["deleted"]] == [fresh_one]
    assert history["nb-a"][2] in cluster.snapshot_names()


def test_prune_never_orphans_storage(cluster: Cluster) -> None:
    """Snapshots first, their policy only once a fresh list shows none referring to it; a snapshot whose policy
    is already gone is left and reported, since deleting it could never free its storage."""
    # What the finalizer does when the order is wrong (the simulation's rule): policy first -> orphaned.
    cluster.kube.create(policy("pol-wrong", "wrong"))
    pod(cluster.kube, "wrong-0", "wrong")
    wrong = snapshot(cluster, "wrong-0", "wrong-t0")
    cluster.kube.delete(GKE, "podsnapshotpolicies", NS, "pol-wrong")
    cluster.kube.delete(GKE, "podsnapshots", NS, wrong)
    wait_until(lambda: cluster.gke.orphaned_storage, timeout=10)
    cluster.gke.orphaned_storage.clear()

    # An environment that has gone (no pod): its snapshots and its policy are what prune --policies cleans up.
    cluster.kube.create(policy("pol-gone", "gone"))
    pod(cluster.kube, "gone-0", "gone")
    made = [snapshot(cluster, "gone-0", f"gone-t{i}") for i in range(2)]
    cluster.kube.delete("v1", "pods", NS, "gone-0")
    # And one whose policy someone already deleted (the finalizer cannot free it).
    cluster.kube.create(policy("pol-lost", "lost"))
    pod(cluster.kube, "lost-0", "lost")
    lost = snapshot(cluster, "lost-0", "lost-t0")
    cluster.kube.delete(GKE, "podsnapshotpolicies", NS, "pol-lost")

    cluster.kube.reset_calls()
    done = cluster.json("prune", "--all", "--keep", "0", "--policies")
    assert sorted(d["snapshot"] for d in done["deleted"]) == sorted(made)
    assert done["policies_deleted"] == ["pol-gone"]
    assert {"name": "pol-nb-a", "why": "it matches pod nb-a-0"} in done["policies_kept"]
    kept = {k["name"]: k["why"] for k in done["kept"]}
    assert "its policy pol-lost is gone" in kept[lost]
    assert cluster.gke.orphaned_storage == []
    assert len(cluster.gke.deleted_storage) == 2  # the two pruned
    assert cluster.kube.get(GKE, "podsnapshotpolicies", NS, "pol-gone") is None
    assert lost in cluster.snapshot_names()
    # The order on the wire: the snapshots' deletes, then lists until they were gone, then the policy's delete.
    calls = [(c.verb, c.resource, c.name) for c in cluster.kube.calls]
    policy_delete = calls.index(("delete", "podsnapshotpolicies", "pol-gone"))
    snapshot_deletes = [i for i, c in enumerate(calls) if c[:2] == ("delete", "podsnapshots")]
    assert len(snapshot_deletes) == 2
    assert max(snapshot_deletes) < policy_delete
    assert ("list", "podsnapshots", None) in calls[max(snapshot_deletes) + 1 : policy_delete]
    # What remains is reported: the snapshot without its policy, and the triggers of snapshots now gone.
    stale = done["stale"]
    assert stale["snapshots_without_policy"][0]["name"] == lost
    assert stale["snapshots_without_policy"][0]["gcs_path"]
    assert "pol-gone" not in stale["policies_matching_no_pod"]
    text = cluster.run("prune", "--all", "--keep", "0", "--dry-run")
    assert f"snapshot {lost} has lost its policy pol-lost" in text.stdout
    # delete refuses it as well, and says what to do.
    refused = cluster.json("delete", lost, expect=1)
    assert refused["deleted"] == []
    assert "recreate the policy" in refused["errors"][0]["message"]


@pytest.mark.slow
def test_an_api_refusal_is_said_and_exits_1(cluster: Cluster, history: dict[str, list[str]]) -> None:
    cluster.kube.fail_next("delete", "podsnapshots", 403, reason="Forbidden", message="no delete for you")
    done = cluster.run("prune", "nb-a", "--keep", "2")
    assert done.returncode == 1, done.stderr
    assert "refused a call (403 Forbidden): no delete for you" in done.stderr
    assert "Traceback" not in done.stderr
    assert cluster.snapshot_names() >= set(history["nb-a"])  # the refused delete deleted nothing


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("list",), "a target is needed"),
        (("list", "nb-a", "--all"), "not both"),
        (("list", "Bad_Name"), "not a Kubernetes object name"),
        (("list", "nb-a", "--kind", "deployment"), "--kind 'deployment'"),
        (("prune", "--keep", "1"), "a target is needed"),
        (("prune", "nb-a"), "nothing to prune by"),
        (("prune", "nb-a", "--keep", "-1"), "--keep -1"),
        (("prune", "nb-a", "--keep", "two"), "two"),
        (("prune", "nb-a", "--older-than", "7x"), "not a duration"),
        (("prune", "nb-a", "--older-than=-7d"), "not a duration"),
        (("delete",), "at least one snapshot"),
        (("delete", "ok-name", "../etc"), "not Kubernetes object names"),
        (("bogus",), "unknown command"),
    ],
)
def test_bad_arguments_exit_2_and_touch_nothing(cluster: Cluster, args: tuple[str, ...], said: str) -> None:
    cluster.kube.reset_calls()
    done = cluster.run(
        *args, own_process=True
    )  # nothing imports the Kubernetes client before the arguments are checked
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert said in done.stderr
    assert done.stdout == ""
    assert cluster.kube.calls == []


def test_pure_rules() -> None:
    assert parse_duration("7d") == 7 * 86400
    assert parse_duration("90s") == 90
    assert parse_duration("1.5h") == 5400
    for bad in ("", "7", "d", "7 days", "-1d"):
        with pytest.raises(UsageError):
            parse_duration(bad)
    labels = {"app": "nb", "tier": "gpu"}
    assert matches_selector({"matchLabels": {"app": "nb"}}, labels)
    assert not matches_selector({"matchLabels": {"app": "other"}}, labels)
    assert matches_selector({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]}, labels)
    assert not matches_selector({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]}, labels)
    assert not matches_selector({"matchExpressions": [{"key": "x", "operator": "Exists"}]}, labels)
    row = {"environment": "e", "ready": False, "ready_reason": "AwaitingCheckpoint", "deleting": False}
    rows = [
        {**row, "name": "up", "created": "2026-01-03T00:00:00Z", "idle_seconds": 1.0, "policy_exists": True},
        {**row, "name": "pinned", "created": "2026-01-02T00:00:00Z", "idle_seconds": 1.0, "policy_exists": True,
         "ready": True},
        {**row, "name": "old", "created": "2026-01-01T00:00:00Z", "idle_seconds": 1.0, "policy_exists": True,
         "ready": True},
    ]  # fmt: skip
    chosen, kept = choose(rows, 0, None, {"pinned": "e-0"})
    assert chosen == ["old"]
    assert {k["name"]: k["why"] for k in kept} == {"up": "still being uploaded", "pinned": "pod e-0 is pinned to it"}
