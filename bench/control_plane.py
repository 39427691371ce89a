"""The tests' Kubernetes control plane (tests/cluster/): time from start to ready and what it holds.

    python bench/control_plane.py [--rounds 5]

Each round starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok from the build cache
(building first if this pin is not built), waits until the API server is ready and kwok's 10 fake nodes are
Ready, reads every component's resident memory, and stops it. Printed: the median and spread (min-max) of the
rounds, against the target of 30 s from the cache (issue 16), and the baseline of this machine in the same run:
how long ``kubectl version --client`` (one process start of a Go binary of the same build) takes, so a busy
machine shows up in both columns.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.cluster import build
from tests.cluster.control_plane import Cluster


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    started = time.monotonic()
    bin_dir = build.build()
    print(f"build (or cache check): {time.monotonic() - started:.1f} s -> {bin_dir}")
    ready, memory, baseline = [], [], []
    for index in range(args.rounds):
        t0 = time.monotonic()
        subprocess.run([str(bin_dir / "kubectl"), "version", "--client"], check=True, capture_output=True)
        baseline.append(time.monotonic() - t0)
        with tempfile.TemporaryDirectory() as work:
            cluster = Cluster(Path(work) / "plane", bin_dir=bin_dir)
            with cluster:
                ready.append(cluster.ready_seconds)
                sizes = cluster.rss_bytes()
                memory.append(sum(sizes.values()))
                print(
                    f"round {index + 1}: ready in {cluster.ready_seconds:.1f} s; resident "
                    + ", ".join(f"{name} {size / 2**20:.0f} MiB" for name, size in sorted(sizes.items()))
                )
    print(
        f"ready: median {statistics.median(ready):.1f} s (spread {min(ready):.1f}-{max(ready):.1f}) over "
        f"{len(ready)} rounds; target <= 30 s; ratio median/target {statistics.median(ready) / 30:.2f}"
    )
    print(f"resident memory: median {statistics.median(memory) / 2**20:.0f} MiB (spread "
          f"{min(memory) / 2**20:.0f}-{max(memory) / 2**20:.0f})")  # fmt: skip
    print(f"baseline (kubectl version --client): median {statistics.median(baseline) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
