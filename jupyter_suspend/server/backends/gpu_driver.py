"""The NVIDIA driver version, read at preflight: a GPU's memory is kept in a GKE Pod Snapshot only with driver 570
or later (GKE's Pod Snapshots requirements; a node pool created with the default 535 driver installs fine and then
silently cannot checkpoint GPU memory -- platform-facts section 1). Read with nvidia-ml-py (``pynvml``) when it is
installed and a driver answers; otherwise nothing is claimed either way.
"""

from __future__ import annotations

from collections.abc import Callable

#: The first driver major version whose GPU memory a Pod Snapshot keeps.
MIN_DRIVER_MAJOR = 570


def read_driver_version() -> str | None:
    """The driver version NVML reports (``"570.86.15"``), or None: no nvidia-ml-py, no driver, no GPU."""
    try:
        import pynvml  # from nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - NVMLError and anything a broken driver raises: no claim
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


def driver_major(version: str | None) -> int | None:
    if not version:
        return None
    head = version.strip().split(".", 1)[0]
    return int(head) if head.isdigit() else None


def gpu_driver_note(read: Callable[[], str | None] = read_driver_version) -> str | None:
    """One preflight sentence about the driver, or None when no driver was read."""
    version = read()
    major = driver_major(version)
    if major is None:
        return None
    if major < MIN_DRIVER_MAJOR:
        return (
            f"GPU memory will not be kept: the NVIDIA driver is {version}, and a Pod Snapshot keeps GPU memory only "
            f"with driver {MIN_DRIVER_MAJOR} or later (tensors in GPU memory come back only from application "
            "checkpoints). Ask the platform team for a GPU node pool with driver "
            f"{MIN_DRIVER_MAJOR}+ (gpu-driver-version=latest)."
        )
    return f"NVIDIA driver {version}: GPU memory can be kept in the snapshot (driver {MIN_DRIVER_MAJOR} or later)."
