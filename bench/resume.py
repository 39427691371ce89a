"""Resume to a runnable cell against the same work done by hand.

    python bench/resume.py [--size-mib N] [--repeat R] [--quick] [--digests D,...]

A real ``jupyter server`` with the extension (``tests/servers.py``) holds one
notebook whose kernel has a registered float32 array ``x`` of N MiB (default
1024; 256 with ``--quick``; ``%load_ext jupyter_suspend``, ``%checkpoint add x``).

* **ours** (one series per checkpoint digest, default XXH3-128 and SHA-256,
  the digest before issue 17): the digest is chosen in the kernel
  (``JUPYTER_SUSPEND_CHECKPOINT_DIGEST``), ``POST suspend`` (checkpoint
  written, kernel stopped; the manifest is checked to name that digest), page
  cache dropped, then the clock runs from ``POST resume`` until the same cell
  (``CELL``, it reads ``x``) has run in the restored kernel.
* **bare**: the same work by hand: the same bytes written again as an
  ``.npy`` file next to the checkpoints (fsynced, as a suspend writes its
  checkpoint just before a resume is timed: a virtual disk whose host caches
  recent writes must favour neither side), page cache dropped, then the
  clock runs from ``POST /api/kernels`` (a new kernel) through
  ``import numpy``, ``np.load`` of that file and the same cell.

Both clocks stop when the cell's ``execute_reply`` arrives, both wait for the
kernel the same way (``kernel_info`` until it answers, then ``execute``).
After the clock stopped, ours' round also asks the restored kernel when its
read ahead (``jupyter_suspend.kernel.preload``) began, ended and was taken,
printed as seconds after ``POST resume`` (absent for code without it).
Every round runs every series once, in an order rotated from round to round,
so that the machine's noise (other processes, a build) spreads over all of
them. The report gives each series' **median and spread** (min-max) over R
rounds (default 5; 3 with ``--quick``), and the ratio ours / bare of each
round (measured seconds apart, under the same load) as a median and spread.
Target: median ratio <= 1.2 (<= 1.0 where the restore overlaps with the
kernel's start-up); the issue measured 1.36-1.74 (median 1.40) with SHA-256.

Page cache: ``echo 3 > /proc/sys/vm/drop_caches`` (root); when that is not
allowed, every file under the work folder is dropped with
``posix_fadvise(POSIX_FADV_DONTNEED)`` after an fsync, and the report says so.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jupyter_client import BlockingKernelClient

from tests.servers import ServerProcess

CELL = "print(x.dtype, x.nbytes, float(x[:1024].sum()))"


def drop_caches(folder: Path) -> str:
    """Drop the page cache; returns how ("drop_caches" or "fadvise")."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "drop_caches"
    except OSError:
        for path in folder.rglob("*"):
            if path.is_file():
                with contextlib.suppress(OSError):
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        os.fsync(fd)
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    finally:
                        os.close(fd)
        return "fadvise (not root: drop_caches refused)"


def connect(server: ServerProcess, kernel_id: str) -> BlockingKernelClient:
    client = BlockingKernelClient(connection_file=str(server.base / "runtime" / f"kernel-{kernel_id}.json"))
    client.load_connection_file()
    client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=False)
    return client


def wait_kernel_info(client: BlockingKernelClient, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg_id = client.kernel_info()
        attempt_ends = min(deadline, time.monotonic() + 0.5)
        while time.monotonic() < attempt_ends:
            try:
                msg = client.get_shell_msg(timeout=max(0.01, attempt_ends - time.monotonic()))
            except Exception:  # noqa: BLE001 - queue.Empty: ask again
                break
            if msg["parent_header"].get("msg_id") == msg_id:
                return
    raise TimeoutError("kernel did not answer kernel_info")


def execute(client: BlockingKernelClient, code: str, timeout: float = 300) -> str:
    """Run ``code``; return its stdout (raises on an error reply)."""
    out: list[str] = []
    reply = client.execute_interactive(code, timeout=timeout, output_hook=_collect(out))
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"cell failed: {reply['content']}\n{''.join(out)}")
    return "".join(out)


def _collect(out: list[str]) -> Any:
    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append("\n".join(msg["content"]["traceback"]))

    return hook


def run_cell(server: ServerProcess, kernel_id: str, code: str) -> str:
    client = connect(server, kernel_id)
    try:
        wait_kernel_info(client)
        return execute(client, code)
    finally:
        client.stop_channels()


def _epoch(iso: str | None) -> float | None:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() if iso else None


#: Untimed, after the timed cell: the kernel's own clock of its read ahead (null before that existed).
READ_AHEAD = (
    "import json as _json\n"
    "try:\n"
    "    from jupyter_suspend.kernel import preload as _preload, tensors as _tensors\n"
    "    _report = _preload.last.report() if _preload.last else None\n"
    "    _backing = list(getattr(_tensors, 'backing_log', []))[-1:]\n"
    "    if _report is not None and _backing:\n"
    "        _report['huge_pages_kept'] = float(_backing[0][1])\n"
    "    print(_json.dumps(_report))\n"
    "except ImportError:\n"
    "    print('null')\n"
)

DIGEST_ENV = "JUPYTER_SUSPEND_CHECKPOINT_DIGEST"  # jupyter_suspend.kernel.tensors.DIGEST_ENV
DIGEST_NAMES = {"xxh3-128": "XXH3-128", "sha256": "SHA-256"}
BARE = "bare"


def series_name(digest: str) -> str:
    return f"ours {DIGEST_NAMES.get(digest, digest)}"


@dataclass
class Stat:
    """The median and the spread (min, max) of a few measurements."""

    values: list[float]

    @property
    def median(self) -> float:
        return float(statistics.median(self.values))

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def text(self, unit: str = " s", digits: int = 2) -> str:
        return f"{self.median:.{digits}f}{unit} ({self.low:.{digits}f}-{self.high:.{digits}f})"


class TreeServer(ServerProcess):
    """A server (and so its kernels) running the jupyter_suspend of another
    source tree, e.g. ``git archive <commit> jupyter_suspend | tar -x -C DIR``."""

    def __init__(self, tree: Path, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tree = tree

    def env(self) -> dict[str, str]:
        env = super().env()
        env["PYTHONPATH"] = os.pathsep.join([str(self.tree), env.get("PYTHONPATH", "")])
        return env


@dataclass
class ResumeBench:
    size_mib: int
    base: Path
    extra_config: str = ""
    tree: Path | None = None
    server: ServerProcess | None = None
    kernel_id: str = ""
    npy: Path = Path()
    expected: str = ""
    cache: str = ""
    times: dict[str, list[float]] = field(default_factory=dict)
    #: series -> the ratio ours / bare of each round (bare of the same round)
    ratios: dict[str, list[float]] = field(default_factory=dict)
    profiles: dict[str, list[dict[str, float]]] = field(default_factory=dict)

    def start(self) -> None:
        state_dir = self.base / "state"
        config = "c.SuspendApp.flush_kernel_timeout = 300.0\n" + self.extra_config
        if self.tree is not None:
            self.server = TreeServer(self.tree, self.base, state_dir, config).start()
        else:
            self.server = ServerProcess(self.base, state_dir, config).start()
        nb = self.server.root_dir / "resume.ipynb"
        nb.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
        code, session = self.server.request(
            "POST",
            "api/sessions",
            {"path": "resume.ipynb", "name": "resume.ipynb", "type": "notebook", "kernel": {"name": "python3"}},
        )
        assert code == 201, (code, session)
        self.kernel_id = session["kernel"]["id"]
        self.npy = self.base / "bare" / "x.npy"
        self.npy.parent.mkdir(parents=True, exist_ok=True)
        count = self.size_mib * 2**20 // 4
        setup = (
            "%load_ext jupyter_suspend\n"
            "import numpy as np\n"
            f"x = np.random.default_rng(0).standard_normal({count}, dtype=np.float32)\n"
            f"np.save({str(self.npy)!r}, x)\n"
            "%checkpoint add x\n"
        )
        run_cell(self.server, self.kernel_id, setup)
        self.expected = run_cell(self.server, self.kernel_id, CELL)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def wait_state(self, states: set[str], timeout: float = 600, every: float = 0.02) -> dict[str, Any]:
        assert self.server is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.server.api("GET", "status")
            if status["state"] in states and not (status.get("operation") or {}).get("in_progress"):
                return dict(status)
            time.sleep(every)
        raise TimeoutError(f"state not in {states}")

    def newest_manifest(self) -> dict[str, Any]:
        manifests = sorted(self.base.rglob("manifest.json"), key=lambda p: p.parent.name)
        assert manifests, "no checkpoint was written"
        return dict(json.loads(manifests[-1].read_text()))

    def round_ours(self, digest: str | None = None) -> float:
        """One suspend (untimed) and resume (timed); ``digest`` is set in the kernel first."""
        assert self.server is not None
        name = series_name(digest) if digest else "ours"
        if digest:
            run_cell(self.server, self.kernel_id, f"import os\nos.environ[{DIGEST_ENV!r}] = {digest!r}\n")
        self.server.api("POST", "suspend", {"reason": "benchmark"}, expect=202)
        status = self.wait_state({"suspended", "running", "failed"}, every=0.2)
        assert status["state"] == "suspended", status
        if digest:
            written = self.newest_manifest().get("digest", "sha256")
            assert written == digest, f"the checkpoint was written with {written}, not {digest}"
        self.cache = drop_caches(self.base)
        started = time.time()
        self.server.api("POST", "resume", {}, expect=202)
        status = self.wait_state({"ready", "failed", "running"})
        ready = time.time()
        out = run_cell(self.server, self.kernel_id, CELL)
        elapsed = time.time() - started
        assert status["state"] == "ready", status
        assert out == self.expected, (out, self.expected)
        self.times.setdefault(name, []).append(elapsed)
        profile = self._profile(status, started, ready, elapsed)
        profile.update(self._read_ahead(started))
        self.profiles.setdefault(name, []).append(profile)
        return elapsed

    def _read_ahead(self, started: float) -> dict[str, float]:
        """When the restarted kernel's read ahead (jupyter_suspend.kernel.preload) began,
        ended and was taken, seconds after POST resume (untimed; empty without one)."""
        assert self.server is not None
        out = run_cell(self.server, self.kernel_id, READ_AHEAD)
        report = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
        if not isinstance(report, dict):
            return {}
        marks = {"read ahead start": "started_at", "read ahead end": "finished_at", "read ahead taken": "taken_at"}
        profile = {mark: float(report[key]) - started for mark, key in marks.items() if report.get(key)}
        if "huge_pages_kept" in report:  # 1.0: the read's memory stayed in huge pages to the end
            profile["huge pages kept"] = float(report["huge_pages_kept"])
        return profile

    def _profile(self, status: dict[str, Any], started: float, ready: float, elapsed: float) -> dict[str, float]:
        steps = {s["name"]: s for s in (status.get("operation") or {}).get("steps", [])}
        profile = {"ready_seen": ready - started, "cell_after_ready": elapsed - (ready - started)}
        for name in ("restore", "restore.checkpoints"):
            step = steps.get(name)
            if step:
                begin, end = _epoch(step["started"]), _epoch(step["finished"])
                if begin and end:
                    profile[f"{name} start"] = begin - started
                    profile[f"{name} took"] = end - begin
        kernels = (status.get("last_restore") or {}).get("checkpoints_restored") or {}
        for report in kernels.values():
            if isinstance(report, dict) and "seconds" in report:
                profile["kernel load"] = float(report["seconds"])
        return profile

    def write_npy(self) -> None:
        """The kernel's ``x`` (same generator, same seed) as a fresh, fsynced ``.npy`` file."""
        import numpy as np

        x = np.random.default_rng(0).standard_normal(self.size_mib * 2**20 // 4, dtype=np.float32)
        with open(self.npy, "wb") as fh:
            np.save(fh, x)
            fh.flush()
            os.fsync(fh.fileno())

    def round_bare(self) -> float:
        assert self.server is not None
        self.write_npy()
        self.cache = drop_caches(self.base)
        started = time.time()
        code, kernel = self.server.request("POST", "api/kernels", {"name": "python3"})
        assert code == 201, (code, kernel)
        try:
            out = run_cell(self.server, kernel["id"], f"import numpy as np\nx = np.load({str(self.npy)!r})\n{CELL}")
            elapsed = time.time() - started
        finally:
            self.server.request("DELETE", f"api/kernels/{kernel['id']}")
        assert out == self.expected, (out, self.expected)
        self.times.setdefault(BARE, []).append(elapsed)
        return elapsed


@contextlib.contextmanager
def resume_bench(
    size_mib: int, parent: Path | None = None, extra_config: str = "", tree: Path | None = None
) -> Iterator[ResumeBench]:
    base = Path(tempfile.mkdtemp(prefix=".resume-bench-", dir=parent or Path.cwd()))
    bench = ResumeBench(size_mib, base, extra_config, tree)
    try:
        bench.start()
        yield bench
    finally:
        bench.stop()
        shutil.rmtree(base, ignore_errors=True)


NO_READ_AHEAD = "c.LocalBackend.preload_in_kernel = False\n"
DIGESTS = ("xxh3-128", "sha256")
BEFORE = "ours, code before (tree)"


def measure(
    size_mib: int,
    repeat: int,
    digests: tuple[str, ...] = DIGESTS,
    verbose: bool = True,
    without_read_ahead: bool = False,
    before_tree: Path | None = None,
) -> ResumeBench:
    """``repeat`` rounds; each runs bare and ours with every digest once, in an
    order rotated from round to round. ``without_read_ahead`` adds a series from
    a second server with ``LocalBackend.preload_in_kernel = False`` (its kernels
    do not read ahead, the server warms the page cache instead; default
    digest); ``before_tree``
    one from a server running the jupyter_suspend of that source tree (the
    code before a change, timed in the same rounds)."""
    with contextlib.ExitStack() as stack:
        bench = stack.enter_context(resume_bench(size_mib))
        others: list[tuple[str, ResumeBench]] = []
        if without_read_ahead:
            others.append(
                (
                    "ours, warm-up, no read ahead",
                    stack.enter_context(resume_bench(size_mib, extra_config=NO_READ_AHEAD)),
                )
            )
        if before_tree is not None:
            others.append((BEFORE, stack.enter_context(resume_bench(size_mib, tree=before_tree))))
        steps: list[tuple[str, Any]] = [(BARE, bench.round_bare)]
        steps += [(series_name(d), lambda d=d: bench.round_ours(d)) for d in digests]
        steps += [(name, other.round_ours) for name, other in others]
        for i in range(repeat):
            order = steps[i % len(steps) :] + steps[: i % len(steps)]
            took = {name: run() for name, run in order}
            for name, other in others:
                bench.times.setdefault(name, []).append(other.times["ours"][-1])
                bench.profiles.setdefault(name, []).append(other.profiles["ours"][-1])
                if i == 0 and verbose:
                    manifest = other.newest_manifest()
                    print(
                        f"  {name} writes manifest version {manifest.get('version')}, "
                        f"digest {manifest.get('digest', 'sha256')}"
                    )
            for name, seconds in took.items():
                if name != BARE:
                    bench.ratios.setdefault(name, []).append(seconds / took[BARE])
            if verbose:
                parts = ", ".join(
                    f"{n} {t:.2f}s" + ("" if n == BARE else f" ({t / took[BARE]:.2f})") for n, t in took.items()
                )
                print(f"  round {i + 1} ({' > '.join(n for n, _ in order)}): {parts}", flush=True)
                for name in took:
                    if name in bench.profiles and name != BARE:
                        profile = ", ".join(f"{k} {v:.2f}" for k, v in bench.profiles[name][-1].items())
                        print(f"      {name}: {profile}", flush=True)
        return bench


def report(bench: ResumeBench) -> list[str]:
    """One line per series: median and spread of its seconds, of its per-round ratio
    to bare, and the ratio of its median to bare's median."""
    lines = [
        f"{'series':26} {'seconds: median (min-max)':>28}   {'ours / bare, per round: median (min-max)':>42}"
        f"   {'median / bare median':>20}"
    ]
    bare = Stat(bench.times[BARE]).median
    for name, values in bench.times.items():
        ratio = Stat(bench.ratios[name]).text(unit="") if name in bench.ratios else "-"
        of_medians = f"{Stat(values).median / bare:.2f}" if name != BARE else "-"
        lines.append(f"{name:26} {Stat(values).text():>28}   {ratio:>42}   {of_medians:>20}")
    return lines


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=None, help="array size (default 1024; 256 with --quick)")
    parser.add_argument("--repeat", type=int, default=None, help="rounds (default 5; 3 with --quick)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--digests",
        default=",".join(DIGESTS),
        help="checkpoint digests to time, one series each (default: xxh3-128,sha256)",
    )
    parser.add_argument(
        "--without-read-ahead",
        action="store_true",
        help="also time a server whose kernels do not read ahead (the server warms the page cache instead)",
    )
    parser.add_argument(
        "--before-tree",
        type=Path,
        default=None,
        help="also time a server running the jupyter_suspend package found in this folder "
        "(e.g. git archive <commit> jupyter_suspend | tar -x -C DIR)",
    )
    args = parser.parse_args(argv)
    size = args.size_mib or (256 if args.quick else 1024)
    repeat = args.repeat or (3 if args.quick else 5)
    digests = tuple(d for d in args.digests.split(",") if d)
    print(f"resume to runnable cell: {size} MiB array, {repeat} rounds; {load_average()}", flush=True)
    bench = measure(size, repeat, digests, without_read_ahead=args.without_read_ahead, before_tree=args.before_tree)
    print(f"page cache: {bench.cache}; after the run: {load_average()}")
    print("\n".join(report(bench)))
    print("target: median ratio <= 1.2 (<= 1.0 where the read overlaps with the kernel start)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
