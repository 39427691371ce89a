"""Application-checkpoint throughput against the disk's own sequential bandwidth.

    python bench/checkpoint_throughput.py [--size-gib N] [--dir PATH] [--repeat R]

Writes and reads one array of N GiB (default 1) as an application checkpoint
(``CheckpointStore``: raw buffer in a safetensors-layout file, XXH3-128 of every
16 MiB chunk computed while writing and checked while reading, fsync of every
file and folder, atomic rename), and the same bytes with pickle and, when torch
is installed, torch.save, as comparison rows. The baseline is measured in the
same run on the same file system: a dd-like sequential write of N GiB in 64 MiB
blocks followed by fsync, and a sequential read of it into fresh memory.

Page cache: every write ends with fsync, so writes are measured to the device.
Before every read the file's pages are dropped with
``posix_fadvise(POSIX_FADV_DONTNEED)`` (clean after the fsync, so the kernel
really drops them). That is all an unprivileged process can do: a virtual
machine's host may still cache the disk, which then makes the reads faster
than the device. Ratios compare like with like: the baseline reads into fresh
memory too. Each row is the median (and min-max spread) of ``--repeat`` rounds
(default 5), every round running all rows.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jupyter_suspend.kernel.store import CheckpointStore, SaveItem

BLOCK = 64 * 2**20


def drop_cache(path: Path) -> None:
    for file in [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def baseline_write(path: Path, data: np.ndarray) -> float:
    view = memoryview(data.reshape(-1).view(np.uint8))
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for offset in range(0, view.nbytes, BLOCK):
            chunk = view[offset : offset + BLOCK]
            while chunk.nbytes:
                chunk = chunk[os.write(fd, chunk) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def baseline_read(path: Path, nbytes: int) -> float:
    drop_cache(path)
    start = time.perf_counter()
    target = np.empty(nbytes, dtype=np.uint8)
    view = memoryview(target)
    with open(path, "rb", buffering=0) as fh:
        done = 0
        while done < nbytes:
            got = fh.readinto(view[done : done + BLOCK])
            if not got:
                raise EOFError(path)
            done += got
    return time.perf_counter() - start


def store_write(folder: Path, obj: Any) -> float:
    shutil.rmtree(folder, ignore_errors=True)
    start = time.perf_counter()
    CheckpointStore(folder, keep=1).save([SaveItem("x", obj)])
    return time.perf_counter() - start


def store_read(folder: Path) -> float:
    drop_cache(folder)
    start = time.perf_counter()
    result = CheckpointStore(folder).load(["x"])
    elapsed = time.perf_counter() - start
    if result.failed or "x" not in result.objects:
        raise RuntimeError(f"checkpoint did not load: {result.failed}")
    return elapsed


def pickle_write(path: Path, obj: Any) -> float:
    start = time.perf_counter()
    with open(path, "wb") as fh:
        pickle.dump(obj, fh, protocol=5)
        fh.flush()
        os.fsync(fh.fileno())
    return time.perf_counter() - start


def pickle_read(path: Path) -> float:
    drop_cache(path)
    start = time.perf_counter()
    with open(path, "rb") as fh:
        pickle.load(fh)
    return time.perf_counter() - start


def torch_write(path: Path, obj: Any) -> float:
    import torch

    start = time.perf_counter()
    with open(path, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())
    return time.perf_counter() - start


def torch_read(path: Path) -> float:
    import torch

    drop_cache(path)
    start = time.perf_counter()
    torch.load(path, weights_only=True)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gib", type=float, default=1.0, help="checkpoint size in GiB (1-4 is typical)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary folder in the cwd)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds; each row's median and spread is reported")
    args = parser.parse_args(argv)

    nbytes = int(args.size_gib * 2**30) // 4 * 4
    parent = Path(args.dir) if args.dir else Path.cwd()
    work = Path(tempfile.mkdtemp(prefix=".checkpoint-bench-", dir=parent))
    try:
        import torch
    except ImportError:
        torch = None  # type: ignore[assignment]
    array = np.random.default_rng(0).standard_normal(nbytes // 4, dtype=np.float32)
    tensor = torch.from_numpy(array) if torch is not None else None
    base, pkl, pt = work / "baseline.bin", work / "array.pkl", work / "tensor.pt"
    methods: list[tuple[str, Callable[[], float], Callable[[], float]]] = [
        ("disk baseline (dd-like, fsync)", lambda: baseline_write(base, array), lambda: baseline_read(base, nbytes)),
        (
            "jupyter-suspend raw numpy array",
            lambda: store_write(work / "np", array),
            lambda: store_read(work / "np"),
        ),
    ]
    if tensor is not None:
        methods.append(
            (
                "jupyter-suspend raw torch tensor",
                lambda: store_write(work / "pt", {"weight": tensor}),
                lambda: store_read(work / "pt"),
            )
        )
    methods.append(("pickle (protocol 5, no checksum)", lambda: pickle_write(pkl, array), lambda: pickle_read(pkl)))
    if tensor is not None:
        methods.append(
            (
                "torch.save / torch.load (no checksum)",
                lambda: torch_write(pt, {"weight": tensor}),
                lambda: torch_read(pt),
            )
        )
    # Repeats are the outer loop so that the machine's noise spreads over all rows alike.
    writes: dict[str, list[float]] = {name: [] for name, _, _ in methods}
    reads: dict[str, list[float]] = {name: [] for name, _, _ in methods}
    try:
        print(f"checkpoint throughput: {nbytes / 2**30:.2f} GiB in {work} (median of {args.repeat})", flush=True)
        for _ in range(args.repeat):
            for name, write, read in methods:
                gc.collect()
                writes[name].append(write())
                gc.collect()
                reads[name].append(read())
            for leftover in work.iterdir():
                shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [(name, writes[name], reads[name]) for name, _, _ in methods]

    base_w, base_r = statistics.median(rows[0][1]), statistics.median(rows[0][2])
    mib = nbytes / 2**20

    def spread(times: list[float]) -> str:
        return f"{mib / max(times):.0f}-{mib / min(times):.0f}"

    header = (
        f"{'method':40} {'write s':>8} {'MiB/s':>8} {'(min-max)':>11} {'ratio':>6}   "
        f"{'read s':>7} {'MiB/s':>8} {'(min-max)':>11} {'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    for name, ws, rs in rows:
        w, r = statistics.median(ws), statistics.median(rs)
        print(
            f"{name:40} {w:8.2f} {mib / w:8.0f} {spread(ws):>11} {base_w / w:6.2f}   "
            f"{r:7.2f} {mib / r:8.0f} {spread(rs):>11} {base_r / r:6.2f}"
        )
    print("ratio = baseline time / method time (1.00 = the disk's sequential bandwidth; target >= 0.80 for raw)")
    if torch is None:
        print("torch is not installed: torch rows skipped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
