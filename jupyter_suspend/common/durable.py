"""Durability helpers shared by the server and the kernel side (standard
library only: this module is imported inside user kernels)."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_directory(path: str | os.PathLike[str]) -> None:
    """Make a rename or a file creation in ``path`` durable."""
    fd = os.open(Path(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
