"""The whole benchmark table in one command.

    python bench/run.py [--quick] [--repeat R]

Every row is a ratio against a baseline measured in the same run, on the same
machine, so that a busy machine moves both sides alike:

(a) suspend overhead: ``POST suspend {"dry_run": true}`` (the preflight) plus
    ``POST checkpoint`` (the flush a suspend runs: every session's notebook
    checked and fsynced, every kernel asked to write its application
    checkpoints) with N notebooks on disk and K of them open with a kernel
    (one small registered array each), against saving the same N notebooks
    through the contents API (``PUT /api/contents``, what the frontend does).
(b) checkpoint write and read of one array against the disk's sequential
    bandwidth (``bench/checkpoint_throughput.py``: dd-like write + fsync, read
    into fresh memory, page cache dropped), ratio = ours / disk time.
(c) resume to a runnable cell against the bare path (``bench/resume.py``),
    one row per checkpoint digest: XXH3-128 (now) and SHA-256 (before issue
    17), both in the same rounds; ratio = the median of the rounds' ours / bare.
(d) ``GET jupyter-suspend/api/status`` against ``GET /api/status`` under 8
    concurrent pollers: requests per second, ratio = ours / theirs.
(e) idle server CPU: CPU seconds of a server process with the extension
    against one without it, both idle over the same seconds.
(f) the longest event-loop stall while a kernel writes its checkpoints
    (4 GiB; 1 GiB in quick mode; ``POST checkpoint``, the suspend's flush):
    a 10 ms ticker coroutine in the server (``bench/loop_ticker.py``, a
    benchmark-only server extension) records how late its ticks run; the
    baseline is the same ticker over an idle window of the same length.

``--quick`` runs a CI-sized subset: fewer grid cells, 256 MiB arrays, three
rounds. Every timed row is the **median** of R rounds (default 5; quick 3), its
spread (min-max) in brackets; rounds interleave ours and the baseline so that
a busy machine moves both alike.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import checkpoint_throughput as throughput
import resume
from resume import Stat

from tests.servers import ServerProcess

SMALL_KERNEL = "%load_ext jupyter_suspend\nimport numpy as np\nw = np.ones(2**18, np.float32)\n%checkpoint add w\n"


def session_body(name: str) -> dict[str, Any]:
    return {"path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}}


@dataclass
class Row:
    name: str
    baseline: str
    ours: str
    ratio: float
    target: str
    ok: bool | None  # None: informational, no target

    def markdown(self) -> str:
        verdict = "info" if self.ok is None else "met" if self.ok else "**missed**"
        return f"| {self.name} | {self.baseline} | {self.ours} | {self.ratio:.2f} | {self.target} | {verdict} |"


def start_server(base: Path, extra_config: str = "") -> ServerProcess:
    base.mkdir(parents=True, exist_ok=True)
    return ServerProcess(base, base / "state", "c.SuspendApp.flush_kernel_timeout = 300.0\n" + extra_config).start()


def notebook_json(index: int) -> dict[str, Any]:
    cells: list[dict[str, Any]] = [
        {"cell_type": "code", "execution_count": None, "id": f"c{index}-{i}", "metadata": {}, "outputs": [],
         "source": f"x{i} = {i} * {index}\nprint(x{i})"}
        for i in range(20)
    ]  # fmt: skip
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def wait_done(server: ServerProcess, every: float = 0.01) -> dict[str, Any]:
    while True:
        status = server.api("GET", "status")
        if not (status.get("operation") or {}).get("in_progress"):
            return dict(status)
        time.sleep(every)


# -- (a) suspend overhead -------------------------------------------------------
def suspend_overhead(work: Path, grid: list[tuple[int, int]], repeat: int) -> list[Row]:
    rows = []
    for notebooks, kernels in grid:
        server = start_server(work / f"overhead-{notebooks}-{kernels}")
        try:
            names = [f"nb{i}.ipynb" for i in range(notebooks)]
            for i, name in enumerate(names):
                (server.root_dir / name).write_text(json.dumps(notebook_json(i)))
            for name in names[:kernels]:
                code, session = server.request(
                    "POST",
                    "api/sessions",
                    {"path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}},
                )
                assert code == 201, session
                resume.run_cell(
                    server,
                    session["kernel"]["id"],
                    SMALL_KERNEL,
                )
            ours, base = [], []
            for _ in range(repeat):
                started = time.perf_counter()
                for i, name in enumerate(names):
                    body = {"type": "notebook", "format": "json", "content": notebook_json(i)}
                    code, answer = server.request("PUT", f"api/contents/{name}", body)
                    assert code == 200, answer
                base.append(time.perf_counter() - started)
                started = time.perf_counter()
                server.api("POST", "suspend", {"dry_run": True})
                server.api("POST", "checkpoint", {"reason": "benchmark"}, expect=202)
                status = wait_done(server)
                ours.append(time.perf_counter() - started)
                assert status["operation"]["outcome"] == "succeeded", status["operation"]
        finally:
            server.stop()
        b, o = Stat([t * 1000 for t in base]), Stat([t * 1000 for t in ours])
        rows.append(
            Row(
                f"(a) suspend overhead: {notebooks} notebooks, {kernels} kernels",
                f"save {notebooks} notebooks {b.text(' ms', 0)}",
                f"preflight + flush {o.text(' ms', 0)}",
                o.median / b.median,
                "≤ 1.0 (0 kernels); with kernels: informational",
                (o.median / b.median <= 1.0) if kernels == 0 else None,
            )
        )
        print(rows[-1].markdown(), flush=True)
    return rows


# -- (b) checkpoint throughput ----------------------------------------------------
def checkpoint_rows(work: Path, size_mib: int, repeat: int) -> list[Row]:
    folder = work / "throughput"
    folder.mkdir(parents=True, exist_ok=True)
    nbytes = size_mib * 2**20
    array = np.random.default_rng(0).standard_normal(nbytes // 4, dtype=np.float32)
    base_w, base_r, ours_w, ours_r = [], [], [], []
    for _ in range(repeat):
        gc.collect()
        base_w.append(throughput.baseline_write(folder / "baseline.bin", array))
        base_r.append(throughput.baseline_read(folder / "baseline.bin", nbytes))
        (folder / "baseline.bin").unlink()
        gc.collect()
        ours_w.append(throughput.store_write(folder / "np", array))
        gc.collect()
        ours_r.append(throughput.store_read(folder / "np"))
        shutil.rmtree(folder / "np")
    mib = nbytes / 2**20
    rows = []
    for what, b, o in (("write", base_w, ours_w), ("read", base_r, ours_r)):
        disk, mine = Stat([mib / t for t in b]), Stat([mib / t for t in o])
        ratio = statistics.median(s / d for s, d in zip(o, b, strict=True))
        rows.append(
            Row(
                f"(b) checkpoint {what}, {size_mib} MiB (XXH3-128 per chunk{', fsync' if what == 'write' else ''})",
                f"disk {disk.text(' MiB/s', 0)}",
                mine.text(" MiB/s", 0),
                ratio,
                "≤ 1.25 (≥ 80 % of the disk)",
                ratio <= 1.25,
            )
        )
        print(rows[-1].markdown(), flush=True)
    return rows


# -- (c) resume -------------------------------------------------------------------
def resume_rows(size_mib: int, repeat: int) -> tuple[list[Row], str]:
    bench = resume.measure(size_mib, repeat)
    bare = Stat(bench.times[resume.BARE])
    rows = []
    for digest in resume.DIGESTS:
        name = resume.series_name(digest)
        ours, ratio = Stat(bench.times[name]), Stat(bench.ratios[name])
        when = "now" if digest == resume.DIGESTS[0] else "before issue 17"
        rows.append(
            Row(
                f"(c) resume to runnable cell, {size_mib} MiB array, {resume.DIGEST_NAMES[digest]} ({when}; "
                f"page cache: {bench.cache.split(' ')[0]}; ratio per round {ratio.low:.2f}-{ratio.high:.2f}, "
                f"of the medians {ours.median / bare.median:.2f})",
                f"new kernel + np.load + cell {bare.text()}",
                f"POST resume → cell ran {ours.text()}",
                ratio.median,
                "≤ 1.2 (≤ 1.0 with overlap)",
                ratio.median <= 1.2,
            )
        )
        print(rows[-1].markdown(), flush=True)
    return rows, bench.cache


# -- (d) status throughput --------------------------------------------------------
def poll_rate(server: ServerProcess, path: str, pollers: int, seconds: float) -> float:
    stop = time.monotonic() + seconds
    counts = [0] * pollers

    def poll(i: int) -> None:
        while time.monotonic() < stop:
            code, _ = server.request("GET", path)
            assert code == 200, code
            counts[i] += 1

    with ThreadPoolExecutor(pollers) as pool:
        list(pool.map(poll, range(pollers)))
    return sum(counts) / seconds


def status_row(work: Path, seconds: float, repeat: int) -> Row:
    server = start_server(work / "status")
    try:
        ours, base = [], []
        for _ in range(repeat):
            base.append(poll_rate(server, "api/status", 8, seconds))
            ours.append(poll_rate(server, "jupyter-suspend/api/status", 8, seconds))
    finally:
        server.stop()
    b, o = Stat(base), Stat(ours)
    row = Row(
        "(d) GET status, 8 concurrent pollers",
        f"GET /api/status {b.text(' req/s', 0)}",
        o.text(" req/s", 0),
        o.median / b.median,
        "≥ 0.5 (requests/s ratio)",
        o.median / b.median >= 0.5,
    )
    print(row.markdown(), flush=True)
    return row


# -- (e) idle CPU -------------------------------------------------------------------
def idle_cpu_row(work: Path, seconds: float) -> Row:
    ours = start_server(work / "idle-ours")
    theirs = start_server(work / "idle-theirs", "c.ServerApp.jpserver_extensions = {'jupyter_suspend': False}\n")
    try:
        try:
            code, _ = theirs.request("GET", "jupyter-suspend/api/status")
        except ValueError:  # not JSON: the extension's handlers are absent
            code = 404
        assert code == 404, "the extension is still loaded in the baseline server"
        time.sleep(2.0)  # start-up work done

        def cpu(server: ServerProcess) -> float:
            assert server.process is not None
            times = psutil.Process(server.process.pid).cpu_times()
            return float(times.user + times.system)

        before = cpu(ours), cpu(theirs)
        time.sleep(seconds)
        o, b = cpu(ours) - before[0], cpu(theirs) - before[1]
    finally:
        ours.stop()
        theirs.stop()
    # CPU time is counted in clock ticks (10 ms): a floor keeps the ratio finite.
    tick = 0.01
    ratio = max(o, tick) / max(b, tick)
    row = Row(
        f"(e) idle server CPU over {seconds:.0f} s",
        f"without the extension {b:.2f} CPU-s",
        f"with it {o:.2f} CPU-s",
        ratio,
        "≤ 1.5 or < 1 % of a core",
        ratio <= 1.5 or o / seconds < 0.01,
    )
    print(row.markdown(), flush=True)
    return row


# -- (f) event-loop stall ------------------------------------------------------------
TICKER_CONFIG = "c.ServerApp.jpserver_extensions = {'jupyter_suspend': True, 'bench.loop_ticker': True}\n"


def ticker_window(server: ServerProcess) -> tuple[float, int]:
    """The longest lag of the server's 10 ms ticker since the last call (bench/loop_ticker.py)."""
    code, answer = server.request("GET", "bench-loop-ticker")
    assert code == 200, answer
    return float(answer["max_lag"]), int(answer["ticks"])


def stall_row(work: Path, size_mib: int) -> Row:
    server = start_server(work / "stall", TICKER_CONFIG)
    try:
        (server.root_dir / "big.ipynb").write_text(json.dumps(notebook_json(0)))
        code, session = server.request("POST", "api/sessions", session_body("big.ipynb"))
        assert code == 201, session
        count = size_mib * 2**20 // 4
        resume.run_cell(
            server,
            session["kernel"]["id"],
            f"%load_ext jupyter_suspend\nimport numpy as np\nx = np.ones({count}, np.float32)\n%checkpoint add x\n",
        )
        ticker_window(server)  # starts the ticker
        started = time.perf_counter()
        server.api("POST", "checkpoint", {"reason": "benchmark"}, expect=202)
        status = wait_done(server, every=0.1)
        seconds = time.perf_counter() - started
        busy, ticks = ticker_window(server)
        assert status["operation"]["outcome"] == "succeeded", status["operation"]
        time.sleep(seconds)  # the same window, idle
        idle, _ = ticker_window(server)
    finally:
        server.stop()
    row = Row(
        f"(f) longest event-loop stall while {size_mib / 1024:g} GiB of checkpoints are written "
        f"({seconds:.1f} s, {ticks} ticks of 10 ms)",
        f"idle, same window {idle * 1000:.0f} ms",
        f"{busy * 1000:.0f} ms",
        busy / max(idle, 0.001),
        "< 50 ms",
        busy < 0.05,
    )
    print(row.markdown(), flush=True)
    return row


def machine() -> str:
    memory = psutil.virtual_memory()
    disk = psutil.disk_usage(str(Path.cwd()))
    load = os.getloadavg()
    return (
        f"{platform.node()}: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
        f"{memory.total / 2**30:.0f} GiB memory ({memory.available / 2**30:.0f} GiB available), "
        f"disk {disk.total / 2**30:.0f} GiB ({disk.free / 2**30:.0f} GiB free), "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a CI-sized run")
    parser.add_argument("--repeat", type=int, default=None, help="rounds, median of (default 5; quick 3)")
    parser.add_argument("--only", default="abcdef", help="rows to run (letters), e.g. --only c")
    args = parser.parse_args(argv)
    quick = args.quick
    repeat = args.repeat or (3 if quick else 5)
    grid = [(1, 0), (10, 1), (50, 4)] if quick else [(n, k) for n in (1, 10, 50) for k in (0, 1, 4)]
    grid = [(n, k) for n, k in grid if k <= n]
    size = 256 if quick else 1024
    before = machine()
    print(f"machine: {before}", flush=True)
    work = Path(tempfile.mkdtemp(prefix=".bench-run-", dir=Path.cwd()))
    rows: list[Row] = []
    cache = ""
    started = time.monotonic()
    try:
        if "a" in args.only:
            rows += suspend_overhead(work, grid, 1 if quick else repeat)
        if "b" in args.only:
            rows += checkpoint_rows(work, size, repeat)
        if "c" in args.only:
            resumed, cache = resume_rows(size, repeat)
            rows += resumed
        if "d" in args.only:
            rows.append(status_row(work, 2.0 if quick else 5.0, repeat))
        if "e" in args.only:
            rows.append(idle_cpu_row(work, 10.0 if quick else 30.0))
        if "f" in args.only:
            rows.append(stall_row(work, 1024 if quick else 4096))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(
        f"{'quick' if quick else 'full'} run, median (min-max) of {repeat} rounds, "
        f"{time.monotonic() - started:.0f} s; before: {before}; after: {machine()}"
    )
    if cache:
        print(f"page cache before each resume and bare start: {cache}")
    print()
    print("| row | baseline | ours | ratio | target | verdict |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(row.markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
