"""``python -m tests.cluster build|up|down|status``: the tests' control plane by hand.

``up`` starts it in the background and prints where its kubeconfig is, so a
developer can watch with ``kubectl get pods,podsnapshots -w``; ``down`` stops
every process it started. (``scripts/cluster.sh`` is the same.)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import build as cluster_build
from .control_plane import Cluster, ClusterError
from .resources import install_crds, install_platform_defaults

REPO = Path(__file__).resolve().parents[2]
DEFAULT_WORKDIR = REPO / ".cluster"


def _state_file(workdir: Path) -> Path:
    return workdir.parent / f"{workdir.name}.state.json"


def _serve(workdir: Path, nodes: int) -> int:
    cluster = Cluster(workdir, nodes=nodes)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        cluster.start()
        install_crds(cluster)
        install_platform_defaults(cluster)
    except (ClusterError, cluster_build.BuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _state_file(workdir).write_text(json.dumps({"supervisor": os.getpid(), **cluster.describe()}, indent=1))
    try:
        while not stopping:
            time.sleep(0.5)
    finally:
        cluster.stop()
        _state_file(workdir).unlink(missing_ok=True)
    return 0


def _up(workdir: Path, nodes: int) -> int:
    state = _state_file(workdir)
    if state.exists():
        print(f"already up: {json.loads(state.read_text())['kubeconfig']} (scripts/cluster.sh down first)")
        return 0
    cluster_build.build()
    workdir.parent.mkdir(parents=True, exist_ok=True)
    log = workdir.parent / f"{workdir.name}.supervisor.log"
    with open(log, "w") as out:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "tests.cluster", "serve", "--workdir", str(workdir), "--nodes", str(nodes)],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if state.exists():
            info = json.loads(state.read_text())
            print(f"control plane up in {info['ready_seconds']} s: {info['server']}")
            print(f"export KUBECONFIG={info['kubeconfig']}")
            print(f"kubectl: {info['bin']}/kubectl   (e.g. kubectl get pods,podsnapshots -A -w)")
            return 0
        if supervisor.poll() is not None:
            print(f"error: the control plane did not start; {log}:\n{log.read_text()[-3000:]}", file=sys.stderr)
            return 1
        time.sleep(0.3)
    supervisor.terminate()
    print(f"error: the control plane was not ready in 180 s; see {log}", file=sys.stderr)
    return 1


def _down(workdir: Path) -> int:
    state = _state_file(workdir)
    if not state.exists():
        print("not running")
        return 0
    pid = json.loads(state.read_text())["supervisor"]
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        state.unlink(missing_ok=True)
        return 0
    for _ in range(150):
        if not state.exists():
            print("stopped")
            return 0
        time.sleep(0.2)
    print(f"error: the supervisor {pid} did not stop; kill it by hand", file=sys.stderr)
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/cluster.sh", description=__doc__)
    parser.add_argument("command", choices=["build", "up", "down", "status", "serve"])
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--nodes", type=int, default=10)
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    try:
        if args.command == "build":
            started = time.monotonic()
            print(cluster_build.build())
            print(f"({time.monotonic() - started:.0f} s)")
            return 0
        if args.command == "up":
            return _up(workdir, args.nodes)
        if args.command == "down":
            return _down(workdir)
        if args.command == "serve":
            return _serve(workdir, args.nodes)
        state = _state_file(workdir)
        print(state.read_text() if state.exists() else "not running")
        return 0
    except cluster_build.BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
