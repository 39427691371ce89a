"""Build the pinned control plane from Go modules, once per machine.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl come
from ``tests/cluster/go.mod`` (k8s.io/kubernetes at one release, its staging
modules replaced by the published versions of that release, etcd's server at
the version Kubernetes itself requires); kwok (fake nodes) from
``tests/cluster/kwok/go.mod``. The binaries go to a cache folder named by a
digest of everything that decides them (the Go version, go.mod, go.sum, our
Go sources), so a rebuild happens only when a pin changes. Nothing is
downloaded but Go modules through the module proxy.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

HERE = Path(__file__).resolve().parent

#: The Kubernetes release of every component, and of the Python client the
#: product pins (kubernetes>=37,<38 is generated from Kubernetes 1.37's API).
KUBERNETES_VERSION = "v1.37.2"

#: binary -> (module folder, Go package)
BINARIES: dict[str, tuple[Path, str]] = {
    "etcd": (HERE, "./etcd"),
    "kube-apiserver": (HERE, "k8s.io/kubernetes/cmd/kube-apiserver"),
    "kube-controller-manager": (HERE, "k8s.io/kubernetes/cmd/kube-controller-manager"),
    "kube-scheduler": (HERE, "k8s.io/kubernetes/cmd/kube-scheduler"),
    "kubectl": (HERE, "k8s.io/kubernetes/cmd/kubectl"),
    "kwok": (HERE / "kwok", "sigs.k8s.io/kwok/cmd/kwok"),
}

_INPUTS = ["go.mod", "go.sum", "etcd/main.go", "kwok/go.mod", "kwok/go.sum"]


class BuildError(RuntimeError):
    """The control plane could not be built; the message says what and how to retry by hand."""


def _ldflags() -> str:
    # Kubernetes' own build stamps its version with -X; without it the binaries
    # say v0.0.0-master, which the components' version checks do not expect.
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    flags = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={KUBERNETES_VERSION}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
        ]
    return "-s -w " + " ".join(flags)


def go_version() -> str:
    try:
        return subprocess.run(["go", "version"], check=True, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"Go is needed to build the test control plane and `go version` failed: {exc}") from exc


def cache_root() -> Path:
    explicit = os.environ.get("JUPYTER_SUSPEND_CLUSTER_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "jupyter-suspend" / "cluster"


def build_key() -> str:
    digest = hashlib.sha256(go_version().encode())
    # The recipe (flags, packages, stages) decides the binaries too; comments in this file do not.
    # Relative module folders: a clone elsewhere (CI's) reuses the same build.
    recipe = sorted((name, str(module.relative_to(HERE)), package) for name, (module, package) in BINARIES.items())
    digest.update(repr((_ldflags(), recipe, _KWOK_STAGES)).encode())
    for name in _INPUTS:
        digest.update(name.encode() + b"\0" + (HERE / name).read_bytes())
    return digest.hexdigest()[:16]


def bin_dir() -> Path:
    return cache_root() / build_key() / "bin"


def is_built() -> bool:
    directory = bin_dir()
    return (directory.parent / "kwok-stages").is_dir() and all((directory / name).is_file() for name in BINARIES)


#: kwok's published stages, read from its module as served (not copied into
#: this repository): nodes initialised and kept alive by leases, pods made
#: Running at once, deleted when asked, Job pods completed.
_KWOK_STAGES = [
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
]


def _copy_kwok_stages(target: Path, log: IO[str]) -> None:
    found = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok"],
        cwd=HERE / "kwok",
        capture_output=True,
        text=True,
    )
    if found.returncode != 0 or not found.stdout.strip():
        raise BuildError(f"cannot find the kwok module's folder: {found.stderr.strip()}")
    module = Path(found.stdout.strip())
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for index, name in enumerate(_KWOK_STAGES):
        shutil.copyfile(module / name, target / f"{index:02d}-{Path(name).name}")
    print(f"kwok stages from {module}", file=log)


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build(log: Path | None = None, quiet: bool = False) -> Path:
    """The folder of the built binaries; builds them if this pin has none yet.
    Two concurrent callers build once (a file lock)."""
    target = bin_dir()
    if is_built():
        return target
    with _lock(cache_root() / "build.lock"):
        if is_built():
            return target
        staging = target.parent / f"bin.partial-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        log = log or target.parent / "build.log"
        groups: dict[Path, list[str]] = {}
        for module, package in BINARIES.values():
            groups.setdefault(module, []).append(package)
        started = time.monotonic()
        with open(log, "w") as out:
            for module, packages in groups.items():
                # Kubernetes' version stamp only on Kubernetes' own binaries (kwok has its own).
                ldflags = _ldflags() if module == HERE else "-s -w"
                command = ["go", "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(staging) + "/", *packages]
                if not quiet:
                    print(f"building the test control plane: (cd {module} && {' '.join(command)})", file=sys.stderr)
                result = subprocess.run(
                    command,
                    cwd=module,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "GOFLAGS": "-buildvcs=false"},
                )
                if result.returncode != 0:
                    raise BuildError(
                        f"building the test control plane failed (go build exited {result.returncode}); "
                        f"the log is {log}; to retry by hand: cd {module} && {' '.join(command)}"
                    )
            _copy_kwok_stages(target.parent / "kwok-stages", out)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
        (target.parent / "build-seconds").write_text(f"{time.monotonic() - started:.0f}\n")
        # Older pins' builds (about 0.5 GB each) are not kept.
        for other in cache_root().iterdir():
            if other.is_dir() and other != target.parent and (other / "bin").is_dir():
                shutil.rmtree(other, ignore_errors=True)
        return target


if __name__ == "__main__":
    try:
        print(build())
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
