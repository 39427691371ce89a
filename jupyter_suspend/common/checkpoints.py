"""Naming of application checkpoints, shared by the server's flush and the kernel's store.

The server and the kernels must agree on where a notebook's checkpoints live, so that anyone
recovering the work finds them under the notebook's name.
"""

from __future__ import annotations

import hashlib
import keyword
import re

# fullmatch, not ``$``: ``$`` also matches before a trailing newline ("x\n" would pass).
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")


def folder_name(key: str) -> str:
    """One flat folder name per notebook (or kernel), free of path tricks."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", key).strip("._-")[:80] or "session"
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    return f"{slug}-{digest}"


def check_name(name: str) -> str:
    """A checkpoint name is an ASCII Python identifier: it goes back into the kernel's namespace."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or keyword.iskeyword(name):
        raise ValueError(f"checkpoint names are ASCII Python identifiers (they go back into the namespace): {name!r}")
    return name
