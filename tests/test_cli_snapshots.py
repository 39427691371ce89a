"""``jupyter suspend snapshots list|delete|prune``: the real command on the real API server of tests/cluster/,
acting with a TokenRequest token of a ServiceAccount that holds exactly the Role docs/snapshots.md documents
for the caller (judged by the real RBAC authorizer), beside the simulated GKE snapshot controller
(tests/cluster/gke.py), whose finalizer frees a deleted snapshot's storage only while its policy exists
(platform-facts §1, "Cleanup"). Every ``--json`` document is validated against cli-snapshots.json.

Bad arguments and the pure rules need no API server: their kubeconfig names a listening socket that counts
the connections made to it (none may be)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
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
from tests.cluster.calls import ConnectionCounter
from tests.cluster.control_plane import Cluster
from tests.cluster.fixtures import token_kubeconfig
from tests.cluster.gke import GKESnapshotController
from tests.cluster.notebook import wait_for

GROUP, VERSION = "podsnapshot.gke.io", "v1"
GKE = f"{GROUP}/{VERSION}"
ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads(files("jupyter_suspend.common.schemas").joinpath("cli-snapshots.json").read_text())
PLURALS = ("podsnapshots", "podsnapshotmanualtriggers", "podsnapshotpolicies")

#: docs/snapshots.md, "RBAC for the caller", as a Role: what the command needs, nothing more.
CALLER_RULES: list[dict[str, Any]] = [
    {"apiGroups": [GROUP], "resources": ["podsnapshots"], "verbs": ["list", "delete"]},
    {"apiGroups": [GROUP], "resources": ["podsnapshotmanualtriggers"], "verbs": ["list", "delete"]},
    {"apiGroups": [GROUP], "resources": ["podsnapshotpolicies"], "verbs": ["list", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["list"]},
]


def read_only(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**rule, "verbs": [v for v in rule["verbs"] if v == "list"]} for rule in rules]


def without_snapshot_delete(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "verbs": ["list"]} if r["resources"] == ["podsnapshots"] else r for r in rules]


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


def run(kubeconfig: Path, *args: str, own_process: bool = False) -> subprocess.CompletedProcess[str]:
    """The command in this process (importing the Kubernetes client costs seconds per process), or with
    ``own_process`` as the installed executable runs it."""
    argv = ["snapshots", *args, "--kubeconfig", str(kubeconfig)]
    if own_process:
        return subprocess.run(
            [sys.executable, "-m", "jupyter_suspend.cli.app", *argv],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            env={**os.environ, "HOME": str(kubeconfig.parent)},
        )
    return in_process(argv[1:])


@dataclass
class Env:
    cluster: Cluster
    namespace: str
    gke: GKESnapshotController
    admin: Any  # kubernetes.client.ApiClient with the admin's certificate
    tmp: Path
    kubeconfig: Path = field(init=False)

    def __post_init__(self) -> None:
        self.kubeconfig = self.caller("snapshots-caller", CALLER_RULES)

    def caller(self, name: str, rules: list[dict[str, Any]]) -> Path:
        """A ServiceAccount bound to a Role of ``rules``; a kubeconfig with a TokenRequest token of it."""
        documents = [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name}, "rules": rules},
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": self.namespace}],
            },
        ]
        self.cluster.kubectl(
            "create", "--validate=strict", "-n", self.namespace, "-f", "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": documents}),
        )  # fmt: skip
        token = self.cluster.kubectl("create", "token", name, "-n", self.namespace).strip()
        (self.tmp / name).mkdir(exist_ok=True)
        return token_kubeconfig(self.cluster, self.tmp / name / "kubeconfig", token, self.namespace)

    def run(self, *args: str, own_process: bool = False, kubeconfig: Path | None = None) -> Any:
        return run(kubeconfig or self.kubeconfig, *args, own_process=own_process)

    def json(self, *args: str, expect: int = 0, kubeconfig: Path | None = None) -> dict[str, Any]:
        done = self.run(*args, "--json", kubeconfig=kubeconfig)
        assert done.returncode == expect, (done.returncode, done.stdout, done.stderr)
        document = json.loads(done.stdout)
        Draft202012Validator(SCHEMA).validate(document)
        return dict(document)

    @property
    def custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.admin)

    def objects(self, plural: str) -> list[dict[str, Any]]:
        return list(self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, plural)["items"])

    def get(self, plural: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.rest import ApiException

        try:
            return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, plural: str, body: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, body)

    def delete(self, plural: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name)

    def snapshot_names(self) -> set[str]:
        return {s["metadata"]["name"] for s in self.objects("podsnapshots")}

    def everything(self) -> list[tuple[str, str, str | None, str]]:
        """Every snapshot object, trigger and policy with its deletion mark and resourceVersion (any write the
        API server accepted changes it): to show that nothing changed."""
        out = []
        for plural in PLURALS:
            for obj in self.objects(plural):
                meta = obj["metadata"]
                out.append((plural, meta["name"], meta.get("deletionTimestamp"), meta["resourceVersion"]))
        return sorted(out, key=str)

    def policy(self, name: str, app: str) -> None:
        self.create(
            "podsnapshotpolicies",
            {
                "apiVersion": GKE,
                "kind": "PodSnapshotPolicy",
                "metadata": {"name": name},
                "spec": {
                    "storageConfigName": "jupyter-suspend",
                    "selector": {"matchLabels": {"app": app}},
                    "triggerConfig": {"type": "manual"},
                },
            },
        )

    def pod(self, name: str, app: str) -> None:
        """A pod the real scheduler places on a fake GPU node (it tolerates their taints)."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": {
                "containers": [{"name": "notebook", "image": "jupyter-suspend:0.1.0"}],
                "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
            },
        }
        self.cluster.kubectl("create", "--validate=strict", "-n", self.namespace, "-f", "-", input=json.dumps(pod))

    def snapshot(self, pod_name: str, trigger: str) -> str:
        """A snapshot as a suspend makes one: a manual trigger, then GKE's snapshot, once Ready."""
        self.trigger(pod_name, trigger)

        def made() -> str | None:
            current = self.get("podsnapshotmanualtriggers", trigger) or {}
            name = ((current.get("status") or {}).get("snapshotCreated") or {}).get("name")
            snapshot = self.get("podsnapshots", name) if name else None
            ready = _condition(snapshot, "Ready")
            return name if ready and ready["status"] == "True" else None

        return str(wait_for(made, 30, f"the snapshot of trigger {trigger} Ready"))

    def trigger(self, pod_name: str, trigger: str) -> None:
        body = {"apiVersion": GKE, "kind": "PodSnapshotManualTrigger", "metadata": {"name": trigger}}
        self.create("podsnapshotmanualtriggers", {**body, "spec": {"targetPod": pod_name}})


def _condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def ago(days: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def env(cluster: Cluster, kube_ns: str, admin_api: Any, tmp_path: Path) -> Iterator[Env]:
    # The finalizer takes 1.5 s: a command that deleted a policy without waiting for its snapshots to be gone
    # would delete it while the finalizer still needs it, and orphan the storage.
    with GKESnapshotController(
        cluster, kube_ns, checkpoint_seconds=0.05, upload_seconds=0.05, finalizer_seconds=1.5
    ) as gke:
        the_env = Env(cluster, kube_ns, gke, admin_api, tmp_path)
        for name in ("nb-a", "nb-b"):
            the_env.policy(f"pol-{name}", name)
            the_env.pod(f"{name}-0", name)
        yield the_env
    assert not gke.errors, gke.errors


@pytest.fixture
def history(env: Env) -> dict[str, list[str]]:
    """nb-a: three snapshots a second apart (oldest first), nb-b: one; and a trigger that failed."""
    a = []
    for i in range(3):
        if i:
            time.sleep(1.05)  # creationTimestamp has whole seconds: "newest" must be decidable
        a.append(env.snapshot("nb-a-0", f"nb-a-t{i}"))
    b = [env.snapshot("nb-b-0", "nb-b-t0")]
    env.gke.behaviour = "trigger_fails"
    env.trigger("nb-a-0", "nb-a-failed")
    wait_for(lambda: _condition(env.get("podsnapshotmanualtriggers", "nb-a-failed"), "Triggered"), 30, "failed")
    env.gke.behaviour = "succeed"
    return {"nb-a": a, "nb-b": b}


class Recorder:
    """The order in which objects disappear from the real API server (watch DELETED events), per plural."""

    def __init__(self, cluster: Cluster, namespace: str, plurals: tuple[str, ...]) -> None:
        from kubernetes import client, config

        self.api = config.new_client_from_config(str(cluster.admin_kubeconfig))
        self.custom = client.CustomObjectsApi(self.api)
        self.namespace = namespace
        self.events: list[tuple[float, str, str, str]] = []  # (monotonic time, plural, type, name)
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.threads = [threading.Thread(target=self._watch, args=(p,), daemon=True) for p in plurals]
        for thread in self.threads:
            thread.start()

    def _watch(self, plural: str) -> None:
        from kubernetes import watch

        stream = watch.Watch()
        call = self.custom.list_namespaced_custom_object
        try:
            for event in stream.stream(call, GROUP, VERSION, self.namespace, plural, timeout_seconds=120):
                with self.lock:
                    self.events.append((time.monotonic(), plural, event["type"], event["object"]["metadata"]["name"]))
                if self.stopped.is_set():
                    stream.stop()
        except Exception as exc:  # noqa: BLE001 - the connection closed by stop(); otherwise the test says so
            if not self.stopped.is_set():
                self.errors.append(f"{plural}: {exc!r}")

    def deleted_at(self, plural: str, name: str) -> float | None:
        with self.lock:
            return next((t for t, p, kind, n in self.events if (p, kind, n) == (plural, "DELETED", name)), None)

    def seen(self, plural: str, name: str) -> bool:
        with self.lock:
            return any((p, n) == (plural, name) for _, p, _, n in self.events)

    def stop(self) -> None:
        self.stopped.set()
        self.api.close()


@pytest.mark.cluster
@pytest.mark.slow
def test_list_one_environment_and_the_namespace(env: Env, history: dict[str, list[str]]) -> None:
    one = env.json("list", "nb-a")
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
    assert newest["size_bytes"] is None  # GKE documents no size field: unknown, not guessed
    assert 0 <= newest["age_seconds"] < 120
    stale = one["stale"]
    assert [t["name"] for t in stale["triggers_without_snapshot"]] == ["nb-a-failed"]
    assert "made no snapshot (Failed)" in stale["triggers_without_snapshot"][0]["why"]
    assert stale["snapshots_without_policy"] == []

    every = env.json("list", "--all")
    assert {s["name"] for s in every["snapshots"]} == set(history["nb-a"] + history["nb-b"])
    assert every["target"] == {"kind": None, "name": None, "all": True}

    text = env.run("list", "nb-a", own_process=True)  # the command as installed, once
    assert text.returncode == 0, text.stderr
    header, *rows = text.stdout.splitlines()[:4]
    assert header.split() == ["NAME", "POD", "AGE", "SIZE", "POLICY", "READY", "LAST", "ACCESS", "TRIGGER"]
    assert [r.split()[0] for r in rows] == history["nb-a"][::-1]
    assert "stale trigger nb-a-failed" in text.stdout


@pytest.mark.cluster
def test_list_by_owner_kind(env: Env) -> None:
    """A Workspace's pods belong to the StatefulSet it owns (ws-<name>); a Notebook's to the one named after it."""
    env.policy("pol-ws", "ws")
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "ws-lab", "labels": {"notebooks.kubeflow.org/workspace-name": "lab"}},
        "spec": {
            "replicas": 0,
            "serviceName": "ws-lab",
            # Not the pod's labels: the real StatefulSet controller would adopt the pod and, at 0 replicas, delete it.
            "selector": {"matchLabels": {"statefulset": "ws-lab"}},
            "template": {
                "metadata": {"labels": {"statefulset": "ws-lab"}},
                "spec": {"containers": [{"name": "main", "image": "jupyter-suspend:0.1.0"}]},
            },
        },
    }
    env.cluster.kubectl("create", "--validate=strict", "-n", env.namespace, "-f", "-", input=json.dumps(statefulset))
    env.pod("ws-lab-0", "ws")
    made = env.snapshot("ws-lab-0", "ws-t0")
    assert [s["name"] for s in env.json("list", "lab", "--kind", "workspace")["snapshots"]] == [made]
    assert env.json("list", "ws-lab", "--kind", "notebook")["snapshots"][0]["name"] == made
    missing = env.run("list", "nope", "--kind", "workspace")
    assert missing.returncode == 1
    assert "no StatefulSet belongs to workspace nope" in missing.stderr


@pytest.mark.cluster
@pytest.mark.slow
def test_delete_removes_the_snapshot_and_its_trigger(env: Env, history: dict[str, list[str]]) -> None:
    target = history["nb-a"][0]
    stored = env.get("podsnapshots", target)
    assert stored is not None
    path = stored["status"]["storageStatus"]["gcs"]["observedGCSPath"]
    document = env.json("delete", target)
    assert document["deleted"] == [{"snapshot": target, "trigger": "nb-a-t0", "policy": "pol-nb-a"}]
    wait_for(lambda: target not in env.snapshot_names(), 30, "the deleted snapshot gone")
    assert env.get("podsnapshotmanualtriggers", "nb-a-t0") is None
    assert env.gke.deleted_storage == [path]  # freed through the finalizer
    assert env.gke.orphaned_storage == []
    # A missing one: exit 1, said; the others in the same call are still deleted.
    before = env.everything()
    done = env.json("delete", "nb-a-0-00000000", history["nb-b"][0], expect=1)
    assert done["errors"] == [
        {"name": "nb-a-0-00000000", "message": f"no PodSnapshot nb-a-0-00000000 in namespace {env.namespace}"}
    ]
    assert [d["snapshot"] for d in done["deleted"]] == history["nb-b"]
    assert env.everything() != before


@pytest.mark.cluster
@pytest.mark.slow
def test_prune_by_count_with_a_dry_run_that_changes_nothing(env: Env, history: dict[str, list[str]]) -> None:
    before = env.everything()
    # The dry run acts as an identity that may only list: any write it tried would be a real 403 (exit 1).
    lister = env.caller("snapshots-lister", read_only(CALLER_RULES))
    dry = env.json("prune", "nb-a", "--keep", "1", "--dry-run", kubeconfig=lister)
    assert dry["dry_run"] is True
    assert [d["snapshot"] for d in dry["deleted"]] == history["nb-a"][1::-1]  # all but the newest
    assert dry["kept"] == [{"name": history["nb-a"][2], "why": "one of the 1 newest"}]
    assert env.everything() == before

    done = env.json("prune", "nb-a", "--keep", "1")
    assert [d["snapshot"] for d in done["deleted"]] == history["nb-a"][1::-1]
    assert {d["trigger"] for d in done["deleted"]} == {"nb-a-t0", "nb-a-t1"}
    wait_for(lambda: env.snapshot_names() == {history["nb-a"][2], history["nb-b"][0]}, 30, "two pruned gone")
    assert len(env.gke.deleted_storage) == 2
    assert env.gke.orphaned_storage == []


@pytest.mark.cluster
@pytest.mark.slow
def test_prune_by_age_uses_the_last_access(env: Env, history: dict[str, list[str]]) -> None:
    stale_one, fresh_one = history["nb-a"][0], history["nb-a"][1]
    env.gke.touch(stale_one, ago(10))
    env.gke.touch(fresh_one, ago(3))
    done = env.json("prune", "--all", "--older-than", "7d")
    assert [d["snapshot"] for d in done["deleted"]] == [stale_one]
    # Both rules: older than 2 days AND beyond the newest one; the newest stays whatever its age.
    env.gke.touch(history["nb-a"][2], ago(30))
    done = env.json("prune", "nb-a", "--older-than", "2d", "--keep", "1")
    assert [d["snapshot"] for d in done["deleted"]] == [fresh_one]
    assert history["nb-a"][2] in env.snapshot_names()


@pytest.mark.cluster
def test_prune_never_orphans_storage(env: Env) -> None:
    """Snapshots first, their policy only once a fresh list shows none referring to it; a snapshot whose policy
    is already gone is left and reported, since deleting it could never free its storage."""
    # What the finalizer does when the order is wrong (the simulation's rule): policy first -> orphaned.
    env.policy("pol-wrong", "wrong")
    env.pod("wrong-0", "wrong")
    wrong = env.snapshot("wrong-0", "wrong-t0")
    env.delete("podsnapshotpolicies", "pol-wrong")
    env.delete("podsnapshots", wrong)
    wait_for(lambda: env.gke.orphaned_storage, 30, "the storage orphaned")
    env.gke.orphaned_storage.clear()

    # An environment that has gone (no pod): its snapshots and its policy are what prune --policies cleans up.
    env.policy("pol-gone", "gone")
    env.pod("gone-0", "gone")
    made = [env.snapshot("gone-0", f"gone-t{i}") for i in range(2)]
    env.cluster.kubectl("delete", "pod", "gone-0", "-n", env.namespace, "--grace-period=0", "--force")
    # And one whose policy someone already deleted (the finalizer cannot free it).
    env.policy("pol-lost", "lost")
    env.pod("lost-0", "lost")
    lost = env.snapshot("lost-0", "lost-t0")
    env.delete("podsnapshotpolicies", "pol-lost")

    recorder = Recorder(env.cluster, env.namespace, ("podsnapshots", "podsnapshotpolicies"))
    try:
        wait_for(lambda: recorder.seen("podsnapshotpolicies", "pol-gone") and recorder.seen("podsnapshots", lost),
                 30, "the watches started")  # fmt: skip
        done = env.json("prune", "--all", "--keep", "0", "--policies")
        assert sorted(d["snapshot"] for d in done["deleted"]) == sorted(made)
        assert done["policies_deleted"] == ["pol-gone"]
        assert {"name": "pol-nb-a", "why": "it matches pod nb-a-0"} in done["policies_kept"]
        kept = {k["name"]: k["why"] for k in done["kept"]}
        assert "its policy pol-lost is gone" in kept[lost]
        assert env.gke.orphaned_storage == []
        assert len(env.gke.deleted_storage) == 2  # the two pruned
        assert env.get("podsnapshotpolicies", "pol-gone") is None
        assert lost in env.snapshot_names()
        # The order on the real API server: both snapshots were gone (their finalizer done, 1.5 s after their
        # deletes) before the policy was deleted.
        policy_gone = wait_for(lambda: recorder.deleted_at("podsnapshotpolicies", "pol-gone"), 30, "policy event")
        snapshots_gone = [recorder.deleted_at("podsnapshots", name) for name in made]
        assert None not in snapshots_gone, recorder.events
        assert max(t for t in snapshots_gone if t is not None) < policy_gone, recorder.events
        assert recorder.errors == []
    finally:
        recorder.stop()
    # What remains is reported: the snapshot without its policy, and the triggers of snapshots now gone.
    stale = done["stale"]
    assert stale["snapshots_without_policy"][0]["name"] == lost
    assert stale["snapshots_without_policy"][0]["gcs_path"]
    assert "pol-gone" not in stale["policies_matching_no_pod"]
    text = env.run("prune", "--all", "--keep", "0", "--dry-run")
    assert f"snapshot {lost} has lost its policy pol-lost" in text.stdout
    # delete refuses it as well, and says what to do.
    refused = env.json("delete", lost, expect=1)
    assert refused["deleted"] == []
    assert "recreate the policy" in refused["errors"][0]["message"]


@pytest.mark.cluster
@pytest.mark.slow
def test_an_api_refusal_is_said_and_exits_1(env: Env, history: dict[str, list[str]]) -> None:
    """A caller whose Role lacks delete on podsnapshots: the real authorizer's 403, said in one line."""
    no_delete = env.caller("snapshots-no-delete", without_snapshot_delete(CALLER_RULES))
    done = env.run("prune", "nb-a", "--keep", "2", kubeconfig=no_delete)
    assert done.returncode == 1, done.stderr
    assert "refused a call (403 Forbidden)" in done.stderr, done.stderr
    assert 'cannot delete resource "podsnapshots" in API group "podsnapshot.gke.io"' in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert env.snapshot_names() >= set(history["nb-a"])  # the refused delete deleted nothing


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
def test_bad_arguments_exit_2_and_touch_nothing(
    nowhere: tuple[ConnectionCounter, str], args: tuple[str, ...], said: str
) -> None:
    counter, kubeconfig = nowhere
    done = run(Path(kubeconfig), *args, own_process=True)  # nothing imports the Kubernetes client before the arguments
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert said in done.stderr
    assert done.stdout == ""
    assert counter.connections == 0  # not one connection to the API server named in the kubeconfig


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
