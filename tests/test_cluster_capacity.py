"""The mission's busy-cluster trial on the real control plane: 10 GPU nodes, a
ResourceQuota of 10 ``requests.nvidia.com/gpu``, 50 suspended notebooks resumed
at once (``jupyter suspend resume --wait``'s core in 50 threads; ``status`` as the real command). Exactly 10 restore,
40 say they wait (the real quota admission's words), none restores twice, and
each of the 40 comes up as capacity frees."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from jupyter_suspend.cli.follow import Assessment
from jupyter_suspend.cli.resume import Request, environment_status, resume_environment
from jupyter_suspend.cli.workloads import Kube
from tests.cli_helpers import kube_client, validate_output
from tests.cluster.calls import recording
from tests.cluster.control_plane import Cluster
from tests.cluster.gke import GKESnapshotController
from tests.cluster.notebook import notebook_statefulset, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NOTEBOOKS = 50
GPUS = 10


def _pods(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]


def _running(cluster: Cluster, namespace: str) -> set[str]:
    return {
        p["metadata"]["labels"]["environment"]
        for p in _pods(cluster, namespace)
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }


def _status(namespace: str, name: str, kubeconfig: Path) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter"), "suspend", "status", name, "--kind", "statefulset",
         "--namespace", namespace, f"--kubeconfig={kubeconfig}", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout)


def _wait_wave(cluster: Cluster, namespace: str, done: set[str], size: int) -> set[str]:
    def wave() -> set[str] | None:
        running = _running(cluster, namespace) - done
        return running if len(running) >= size else None

    return set(wait_for(wave, 120, "the next wave"))


def test_fifty_resumes_on_ten_gpus_under_a_quota(cluster: Cluster, kube_ns: str, tmp_path: Path) -> None:
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": kube_ns},
        "spec": {"hard": {"requests.nvidia.com/gpu": str(GPUS)}},
    }
    names = [f"nb-{index:02d}" for index in range(NOTEBOOKS)]
    items = [quota, *(notebook_statefulset(name, kube_ns) for name in names)]
    cluster.kubectl(
        "create", "--validate=strict", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(cluster.admin_kubeconfig.read_text())

    with GKESnapshotController(cluster, kube_ns, restore_seconds=0.2) as gke, contextlib.ExitStack() as stack:
        for name in names:
            template = notebook_statefulset(name, kube_ns)["spec"]["template"]
            gke.seed_snapshot(f"{name}-0", {"spec": template["spec"]})

        # 50 resumes at once: the command's own core (what `jupyter suspend resume NAME --wait --json` runs after
        # parsing its arguments), one thread and one API client each; 50 interpreters would only add imports.
        outcomes: dict[str, tuple[dict[str, Any], int]] = {}
        reports: dict[str, list[Assessment]] = {name: [] for name in names}

        def resume(name: str) -> None:
            kube = Kube(kube_client(str(kubeconfig)), kube_ns)
            request = Request("statefulset", name, wait=True, timeout=600, poll_interval=3)
            outcomes[name] = resume_environment(kube, request, lambda a, _now: reports[name].append(a))

        threads = {name: threading.Thread(target=resume, args=(name,), daemon=True) for name in names}
        calls = stack.enter_context(recording())
        for thread in threads.values():
            thread.start()

        # Wave 1: exactly GPUS come up; the others wait with the quota's own words.
        first = wait_for(lambda: _running(cluster, kube_ns) if len(_running(cluster, kube_ns)) >= GPUS else None,
                         300, f"{GPUS} notebooks running")  # fmt: skip
        time.sleep(5)  # every resume has looked at least once more
        assert len(_running(cluster, kube_ns)) == GPUS
        assert len(_pods(cluster, kube_ns)) == GPUS, "the quota admits no eleventh pod"
        waiting = [n for n in names if n not in first]

        def said_waiting() -> dict[str, Any] | None:
            # The controller-manager writes its FailedCreate events through its own rate-limited client (20 QPS):
            # with 40 refusals at once one may land seconds later; until then the pod is "not created yet".
            code, answer = _status(kube_ns, waiting[0], kubeconfig)
            assert code == 0, answer
            return answer if answer["state"] == "waiting_for_capacity" else None

        answer = wait_for(said_waiting, 60, "the quota's refusal said")
        assert "ResourceQuota" in answer["message"], answer
        assert "exceeded quota" in answer["message"], answer
        # All 40 say it (what `status` reports, read in this process: 40 CLI processes would only add imports).
        # Each gets a deadline of its own: the refusal events of 40 StatefulSets reach the API server through the
        # controller-manager's rate-limited client, so some land seconds after the others.
        status_kube = Kube(kube_client(str(kubeconfig)), kube_ns)
        for name in waiting:

            def waits(name: str = name) -> dict[str, Any] | None:
                answer, code = environment_status(status_kube, Request("statefulset", name))
                assert code == 0, answer
                return answer if answer["state"] == "waiting_for_capacity" else None

            answer = wait_for(waits, 60, f"{name} said it waits")
            assert "exceeded quota" in answer["message"], answer
        assert len(_running(cluster, kube_ns)) == GPUS  # still exactly the first wave
        code, answer = _status(kube_ns, sorted(first)[0], kubeconfig)
        assert (code, answer["state"]) == (0, "ready"), answer

        # Users suspend the running ones; each wave frees the quota for the next GPUS.
        done: set[str] = set()
        current = set(first)
        while True:
            for name in current:
                threads[name].join(120)
                answer, code = outcomes[name]
                validate_output(answer, "resume")
                assert code == 0, answer
                assert (answer["state"], answer["action"]) == ("ready", "resumed"), answer
                assert answer["restore"] == "live", answer  # restored from its snapshot
                cluster.kubectl("scale", "statefulset", name, "-n", kube_ns, "--replicas=0")
            done |= current
            if len(done) == NOTEBOOKS:
                break
            nxt = _wait_wave(cluster, kube_ns, done, min(GPUS, NOTEBOOKS - len(done)))
            assert len(nxt) == min(GPUS, NOTEBOOKS - len(done)), nxt
            current = nxt

        # None restored twice: each notebook's pod was created once and restored once.
        restored = Counter(pod for pod, _ in gke.restored)
        assert sorted(restored) == sorted(f"{n}-0" for n in names)
        assert set(restored.values()) == {1}, restored
        # (Events cannot count pod creations: client-go's spam filter drops an object's events after a burst of
        # 25, and each refused creation records one.)
        uids = Counter(name for name, _ in gke.pods_seen)
        assert uids == Counter({f"{n}-0": 1 for n in names}), uids
        # One scale per notebook (the users' scale-downs are kubectl's, not recorded here).
        assert sorted(str(c.name) for c in calls.matching("patch", "statefulsets/scale")) == names
        # What each `resume --wait` said: waiting only with the quota's words and only while no pod of it existed,
        # never again once its pod was there (restoring/ready), never for one of the first wave. (Whether a given
        # resume's 3 s polls caught its refusal event before capacity freed is timing; that all 40 said they wait
        # is checked above, each with a deadline.)
        for name in names:
            states = [a.state for a in reports[name]]
            if name in first:
                assert "waiting_for_capacity" not in states, (name, states)
                continue
            waits = [a for a in reports[name] if a.state == "waiting_for_capacity"]
            assert all(a.pod is None and a.scheduling and a.scheduling["reason"] == "FailedCreate" for a in waits)
            assert all("exceeded quota" in (a.scheduling or {}).get("message", "") for a in waits)
            came = next(i for i, a in enumerate(reports[name]) if a.pod is not None)
            assert "waiting_for_capacity" not in states[came:], (name, states)


def test_the_schedulers_own_words_are_waiting_for_capacity(cluster: Cluster, kube_ns: str, tmp_path: Path) -> None:
    """No quota, one GPU per node, one more notebook than the nodes can hold: the real scheduler leaves its pod
    Pending and says why; `jupyter suspend status` shows that as waiting_for_capacity (exit 0), not failed."""
    names = [f"nb-{index:02d}" for index in range(cluster.nodes + 1)]
    items = [notebook_statefulset(name, kube_ns) for name in names]
    for item in items:
        item["spec"]["replicas"] = 1
    payload = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    cluster.kubectl("create", "--validate=strict", "-f", "-", input=payload)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(cluster.admin_kubeconfig.read_text())

    def unschedulable() -> str | None:
        for pod in _pods(cluster, kube_ns):
            scheduled = next((c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"), {})
            if scheduled.get("reason") == "Unschedulable":
                return str(pod["metadata"]["labels"]["environment"])
        return None

    left = wait_for(unschedulable, 120, "a pod the scheduler cannot place")

    def waiting() -> dict[str, Any] | None:
        code, answer = _status(kube_ns, left, kubeconfig)
        assert code == 0, answer
        return answer if answer["state"] == "waiting_for_capacity" and answer.get("scheduling") else None

    try:
        answer = wait_for(waiting, 60, "waiting_for_capacity with the scheduler's reason")
        said = json.dumps(answer["scheduling"])
        assert "Insufficient nvidia.com/gpu" in said, answer
    finally:
        # Give the GPUs back before the next test: the namespace's deletion alone would take them back later.
        for name in names:
            cluster.kubectl("scale", "statefulset", name, "-n", kube_ns, "--replicas=0", check=False)
        wait_for(lambda: not _pods(cluster, kube_ns), 60, "the pods gone")
