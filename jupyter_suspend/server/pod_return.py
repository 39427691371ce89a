"""In-pod signals that tell a process it came back from a GKE Pod Snapshot in a new pod.

A process restored from a Pod Snapshot simply continues; nothing tells it that
it was frozen, uploaded and started again somewhere else. It can tell from
what it reads now against what it recorded just before the snapshot was
requested (:class:`PodIdentity`):

* **a different pod uid**: environment variables come back from memory (the
  process's ``POD_UID`` stays the old pod's), but the new pod's own values are
  readable in a downward-API volume file (e.g. ``/etc/podinfo/uid``) and, on
  GKE Sandbox, in ``/proc/gvisor/spec_environ`` (the new pod's environment);
* **a wall-clock jump**: the wall clock moved on while the pod was frozen,
  stored and restored, but the monotonic clock did not (gVisor continues it
  from where it stopped). Wall-clock time elapsed minus monotonic time elapsed
  above a threshold means the process was frozen for that long.

Either is enough. The late ``PodRestored`` condition (only after the lazy
memory restore finished, many seconds later) is not needed to decide.

The host's kernel boot id and the hostname are recorded as facts, never used
as signals: under gVisor they come back from the snapshot too, and a
StatefulSet pod keeps its hostname.

Pure and synchronous (a few tiny file reads); no Jupyter, no tornado.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

#: Where a Linux kernel (and gVisor) tells its boot id.
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
#: The new pod's environment after a gVisor restore (GKE Sandbox only).
DEFAULT_SPEC_ENVIRON_PATH = "/proc/gvisor/spec_environ"
#: A downward-API volume file with ``metadata.uid`` (read afresh, unlike the environment).
DEFAULT_POD_UID_FILE = "/etc/podinfo/uid"
DEFAULT_POD_UID_ENV = "POD_UID"
#: Seconds of wall-clock time unseen by the monotonic clock that mean "frozen".
#: A snapshot freezes the pod for at least its checkpoint and upload (tens of
#: seconds for a CPU-only session); NTP corrections are far below a second.
DEFAULT_CLOCK_JUMP_THRESHOLD = 5.0


def read_text(path: str) -> str | None:
    """The stripped content of a small file, or None (missing, unreadable, empty, or no path)."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(64 * 1024).strip()
    except OSError:
        return None
    return text or None


def parse_environ(text: str) -> dict[str, str]:
    """``KEY=VALUE`` entries separated by NUL (as ``/proc/<pid>/environ``) or by newlines."""
    separator = "\0" if "\0" in text else "\n"
    env: dict[str, str] = {}
    for item in text.split(separator):
        key, sep, value = item.partition("=")
        if sep and key:
            env[key.strip()] = value.strip()
    return env


@dataclass(frozen=True)
class PodIdentity:
    """What this process sees of its pod at one moment."""

    wall: float
    monotonic: float
    #: From this process's environment: the pod it *started* in (never changes).
    pod_uid_env: str | None
    #: From the downward-API file: the pod it runs in *now*.
    pod_uid_file: str | None
    #: From ``/proc/gvisor/spec_environ``: the pod it runs in *now* (gVisor only).
    pod_uid_spec: str | None
    hostname: str
    boot_id: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def pod_uid(self) -> str | None:
        """The best knowledge of the current pod's uid."""
        return self.pod_uid_file or self.pod_uid_spec or self.pod_uid_env


@dataclass
class ReturnCheck:
    """The outcome of comparing now with the identity recorded before the snapshot."""

    returned: bool
    #: Plain sentences, one per signal that fired.
    signals: list[str] = field(default_factory=list)
    #: Wall-clock seconds the monotonic clock did not see (the freeze).
    clock_jump_seconds: float = 0.0
    #: The pod uid now, where a signal knows it.
    new_pod_uid: str | None = None
    now: PodIdentity | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "returned": self.returned,
            "signals": list(self.signals),
            "clock_jump_seconds": round(self.clock_jump_seconds, 3),
            "new_pod_uid": self.new_pod_uid,
            "now": self.now.to_dict() if self.now else None,
        }


class PodSignals:
    """Reads the in-pod signals; every source is configurable (and a test seam)."""

    def __init__(
        self,
        *,
        pod_uid_env: str = DEFAULT_POD_UID_ENV,
        pod_uid_file: str = DEFAULT_POD_UID_FILE,
        spec_environ_path: str = DEFAULT_SPEC_ENVIRON_PATH,
        clock_jump_threshold: float = DEFAULT_CLOCK_JUMP_THRESHOLD,
        boot_id_path: str = BOOT_ID_PATH,
        environ: Mapping[str, str] | None = None,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pod_uid_env = pod_uid_env
        self.pod_uid_file = pod_uid_file
        self.spec_environ_path = spec_environ_path
        self.clock_jump_threshold = clock_jump_threshold
        self.boot_id_path = boot_id_path
        self.environ = os.environ if environ is None else environ
        self.wall = wall
        self.monotonic = monotonic

    def identity(self) -> PodIdentity:
        spec_text = read_text(self.spec_environ_path)
        spec = parse_environ(spec_text) if spec_text else {}
        return PodIdentity(
            wall=self.wall(),
            monotonic=self.monotonic(),
            pod_uid_env=self.environ.get(self.pod_uid_env) or None,
            pod_uid_file=read_text(self.pod_uid_file),
            pod_uid_spec=spec.get(self.pod_uid_env) or None,
            hostname=socket.gethostname(),
            boot_id=read_text(self.boot_id_path),
        )

    def check(self, before: PodIdentity) -> ReturnCheck:
        """Has this process come back in another pod since ``before`` was recorded?

        Exactly these signals, any one of them is enough:

        1. the downward-API uid file names a uid other than the one recorded
           before (or, if there was no file then, other than ``$POD_UID``);
        2. ``POD_UID`` in ``/proc/gvisor/spec_environ`` differs the same way;
        3. wall-clock time elapsed exceeds monotonic time elapsed by more than
           the threshold.
        """
        now = self.identity()
        signals: list[str] = []
        new_uid: str | None = None
        started_as = before.pod_uid_env
        if now.pod_uid_file and now.pod_uid_file != (before.pod_uid_file or started_as):
            new_uid = now.pod_uid_file
            signals.append(
                f"the downward-API file {self.pod_uid_file} names pod uid {now.pod_uid_file}, "
                f"not {before.pod_uid_file or started_as}"
            )
        if now.pod_uid_spec and now.pod_uid_spec != (before.pod_uid_spec or started_as):
            new_uid = new_uid or now.pod_uid_spec
            signals.append(
                f"{self.spec_environ_path} names pod uid {now.pod_uid_spec}, not {before.pod_uid_spec or started_as}"
            )
        jump = (now.wall - before.wall) - (now.monotonic - before.monotonic)
        if jump > self.clock_jump_threshold:
            signals.append(
                f"the wall clock moved {jump:.1f} s more than the monotonic clock "
                f"(threshold {self.clock_jump_threshold:g} s): the process was frozen"
            )
        return ReturnCheck(
            returned=bool(signals), signals=signals, clock_jump_seconds=jump, new_pod_uid=new_uid, now=now
        )
