"""``jupyter suspend release``: what needs no cluster — the decision, the scale's precondition, the JSON schema,
bad arguments refused before any API call (a kubeconfig pointing at a port that counts connections: none is made).

Against the real control plane, as deploy/releaser's ServiceAccount: tests/test_cluster_release.py (and
tests/test_cluster_gke.py, tests/test_cluster_faults.py), and here the faults a real API server does not make on
demand: ``--watch`` meeting 503s and 429s (with and without ``Retry-After``), injected by tests/cluster/faults.py's
proxy in front of the real API server (the releaser's token, judged by the real RBAC authorizer).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess as sp
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_suspend.cli.release import DEFAULT_SELECTOR, ReleaseKube, decide
from tests.cli_helpers import output_schema, run_cli, validate_output
from tests.cluster.calls import ConnectionCounter
from tests.cluster.control_plane import Cluster
from tests.cluster.faults import FaultProxy
from tests.cluster.fixtures import token_kubeconfig
from tests.cluster.notebook import REPO, create, notebook_statefulset, render, wait_for

LABEL_KEY, LABEL_VALUE = DEFAULT_SELECTOR.split("=")
RELEASER = "jupyter-suspend-releaser"


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


# --- the decision alone -------------------------------------------------------------------------------------


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


# --- the scale's precondition ---------------------------------------------------------------------------------


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


# --- --watch meeting 503s: the real control plane, the faults from tests/cluster/faults.py's proxy ------------------


@pytest.fixture
def releaser_behind_proxy(cluster: Cluster, kube_ns: str, tmp_path: Path) -> Iterator[tuple[FaultProxy, str]]:
    """deploy/releaser applied in the namespace, one labelled StatefulSet (no pod: nothing to release), and a
    kubeconfig with a token of the releaser's ServiceAccount whose server is the fault proxy."""
    create(cluster, render(cluster, REPO / "deploy" / "releaser", kube_ns))
    labels = {LABEL_KEY: LABEL_VALUE}
    create(cluster, [notebook_statefulset("env-a", kube_ns, replicas=0, gpus=0, labels=labels)])
    token = cluster.kubectl("create", "token", RELEASER, "-n", kube_ns).strip()
    path = token_kubeconfig(cluster, tmp_path / "releaser.kubeconfig", token, kube_ns)
    with FaultProxy(cluster) as proxy:
        config = json.loads(path.read_text())
        config["clusters"][0]["cluster"]["server"] = proxy.server
        path.write_text(json.dumps(config))
        yield proxy, str(path)


def watch_until(proxy: FaultProxy, kubeconfig: str, rounds: int) -> tuple[str, str]:
    """``release --watch`` until ``rounds`` rounds got through (each lists the pods and the snapshots after the
    StatefulSets), then SIGTERM; (stdout, stderr)."""
    jupyter = Path(sys.executable).parent / "jupyter"
    proc = sp.Popen(
        [str(jupyter), "suspend", "release", "--watch", "--poll-interval=0.2", f"--kubeconfig={kubeconfig}"],
        stdout=sp.PIPE,
        stderr=sp.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        wait_for(
            lambda: len([c for c in proxy.calls if (c.resource, c.verb) == ("podsnapshots", "list")]) >= rounds,
            60,
            f"{rounds} rounds of the watch",
        )
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"watching StatefulSets with {DEFAULT_SELECTOR} in "), out
    assert lines[-1] == "stopped", out
    return out, err


def statefulset_lists(proxy: FaultProxy) -> list[str | None]:
    """How each list of StatefulSets was answered: the injected fault or the real API server (None)."""
    return [c.injected for c in proxy.calls if (c.resource, c.verb) == ("statefulsets", "list")]


@pytest.mark.cluster
def test_watch_logs_two_503s_and_goes_on(releaser_behind_proxy: tuple[FaultProxy, str]) -> None:
    """Two 503s on the list of StatefulSets: each said on stderr, retried with a growing delay, the watch goes
    on (and its Role let every call through: the real authorizer refused nothing)."""
    proxy, kubeconfig = releaser_behind_proxy
    proxy.fail("GET", r"/statefulsets$", 503, times=2)
    _, err = watch_until(proxy, kubeconfig, rounds=2)
    assert err.count(": 503 Service Unavailable; retrying in ") == 2, err
    # Any other error line is the real API server's own throttling (API Priority and Fairness answers 429 on a
    # loaded machine: a CI run met one), said and retried the same way, never hidden.
    others = [line for line in err.splitlines() if line.startswith("API error: ") and ": 503 " not in line]
    assert all(": 429 Too Many Requests; retrying in " in line for line in others), err
    assert len(others) <= len([c for c in proxy.calls if c.injected is None and c.status == 429]), proxy.calls
    assert "retrying in 0.4s" in err, err
    assert "retrying in 0.8s" in err, err  # the delay grows
    # Each 503 was a round of the watch's own (no hidden retry in between), then rounds that got through.
    assert statefulset_lists(proxy)[:3] == ["fail", "fail", None], proxy.calls
    assert proxy.rejected() == []
    assert not [c for c in proxy.calls if c.verb not in ("list", "get")]  # nothing written


@pytest.mark.cluster
@pytest.mark.parametrize("code", [503, 429])
def test_watch_logs_answers_with_retry_after_itself_and_waits_as_long_as_told(
    releaser_behind_proxy: tuple[FaultProxy, str], code: int
) -> None:
    """A 503 or 429 with ``Retry-After`` (as kube-apiserver's priority-and-fairness filter answers a throttled
    request): the kubernetes client's urllib3 would retry it by itself, unseen, when the CLI sets no ``retries``
    (urllib3 Retry.DEFAULT honours Retry-After on 413/429/503). The watch's own policy acts instead: each
    answer said on stderr, and the next round waits at least the delay the server asked for."""
    proxy, kubeconfig = releaser_behind_proxy
    proxy.fail("GET", r"/statefulsets$", code, times=2, retry_after=1)
    _, err = watch_until(proxy, kubeconfig, rounds=2)
    assert err.count("API error: ") == 2, err
    assert f": {code} " in err, err
    assert "retrying in 1s" in err, err  # the server's 1 s ...
    assert "retrying in 2s" in err, err  # ... then growing from it
    assert statefulset_lists(proxy)[:3] == ["fail", "fail", None], proxy.calls


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
def test_bad_arguments_exit_2_without_an_api_call(
    args: tuple[str, ...], nowhere: tuple[ConnectionCounter, str]
) -> None:
    counter, kubeconfig = nowhere
    done = run_cli("release", *args, kubeconfig=kubeconfig)
    assert done.code == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert counter.connections == 0


def test_no_answer_from_the_api_is_one_line_and_exit_1(nowhere: tuple[ConnectionCounter, str]) -> None:
    """The control for the test above (a valid release connects); and no answer is said in one line, exit 1."""
    counter, kubeconfig = nowhere
    done = run_cli("release", "nb", "--json", kubeconfig=kubeconfig)
    assert done.code == 1, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("jupyter suspend release: MaxRetryError: ")
    assert counter.connections >= 1


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
