"""Array and tensor buffers: recognise them, expose their bytes, hash them.

numpy and torch are never imported here unless the user's code imported them
already (an object can only be an ndarray if numpy is in ``sys.modules``), so
loading the extension stays cheap in kernels that use neither.

Hashes are digests over fixed-size chunks of a buffer (one digest per
:data:`CHUNK_BYTES` slice). A buffer smaller than a chunk has exactly one
digest, the plain digest of its bytes; large buffers hash in background
threads while the next chunk is read or written.

The digest guards against corruption (a torn write, a bad block, a truncated
copy), not tampering: the manifest that holds the digests sits beside the
data, so whoever can change the data can change the digest too. New
checkpoints therefore use XXH3-128 (:data:`XXH3_128`, from the ``xxhash``
package), about 10 GiB/s on one core, instead of SHA-256 (about 1 GiB/s per
core, which was most of a resume's CPU time). A manifest names its digest;
one that names none was written with SHA-256 and is still read and checked.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import math
import mmap
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

CHUNK_BYTES = 16 * 2**20

#: numpy dtype name -> safetensors dtype code (little-endian, native layouts only).
NUMPY_DTYPES = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "int16": "I16",
    "uint16": "U16",
    "int32": "I32",
    "uint32": "U32",
    "int64": "I64",
    "uint64": "U64",
    "float16": "F16",
    "float32": "F32",
    "float64": "F64",
}

#: torch dtype name (without "torch.") -> safetensors dtype code.
TORCH_DTYPES = {
    **NUMPY_DTYPES,
    "bfloat16": "BF16",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def hash_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2)), thread_name_prefix="js-hash")
        return _pool


#: The digest of checkpoints written before the manifest named one (format version 1).
SHA256 = "sha256"
#: XXH3, 128-bit variant (xxhash.com; the ``xxhash`` package): the default when installed.
XXH3_128 = "xxh3-128"
DIGESTS = (XXH3_128, SHA256)
#: Set in a kernel's environment to choose the digest of new checkpoints (one of :data:`DIGESTS`).
DIGEST_ENV = "JUPYTER_SUSPEND_CHECKPOINT_DIGEST"


class DigestUnavailable(Exception):
    """A digest is unknown, or its library is not installed here."""


def _xxhash() -> Any:
    try:
        import xxhash
    except ImportError:
        return None
    return xxhash


def digest_function(name: str) -> Callable[[Any], str]:
    """The function that hashes a buffer with the digest ``name`` (hex string)."""
    if name == SHA256:
        return lambda data: hashlib.sha256(data).hexdigest()
    if name == XXH3_128:
        xxhash = _xxhash()
        if xxhash is None:
            raise DigestUnavailable(f"digest {name!r} needs the xxhash package, which is not installed here")
        function: Callable[[Any], str] = xxhash.xxh3_128_hexdigest
        return function
    raise DigestUnavailable(f"unknown digest {name!r} (known: {', '.join(DIGESTS)})")


def incremental_digest(name: str) -> Any:
    """A hash object (``update``, ``hexdigest``) of the digest ``name``, for data read in blocks."""
    if name == SHA256:
        return hashlib.sha256()
    digest_function(name)  # unknown or not installed: DigestUnavailable
    return _xxhash().xxh3_128()


def default_digest() -> str:
    """The digest new checkpoints use: :data:`DIGEST_ENV` when set, else XXH3-128
    when xxhash is installed, else SHA-256."""
    chosen = os.environ.get(DIGEST_ENV, "").strip()
    if chosen:
        if chosen not in DIGESTS:
            raise DigestUnavailable(f"{DIGEST_ENV}={chosen!r} is not a digest (allowed: {', '.join(DIGESTS)})")
        digest_function(chosen)  # its library must be installed
        return chosen
    return XXH3_128 if _xxhash() is not None else SHA256


class ChunkHasher:
    """Hash a buffer chunk by chunk as it is written or read, in background threads."""

    def __init__(self, digest: str) -> None:
        self._hash = digest_function(digest)
        self._futures: list[Future[str]] = []

    def add(self, view: memoryview) -> None:
        self._futures.append(hash_pool().submit(self._hash, view))

    def digests(self) -> list[str]:
        return [f.result() for f in self._futures]


def chunk_digests(view: memoryview, digest: str) -> list[str]:
    """The per-chunk digests of a whole buffer (empty buffer: one digest)."""
    if view.nbytes == 0:
        return [digest_function(digest)(b"")]
    hasher = ChunkHasher(digest)
    for start in range(0, view.nbytes, CHUNK_BYTES):
        hasher.add(view[start : start + CHUNK_BYTES])
    return hasher.digests()


@dataclass
class Buffer:
    """One array or tensor found while pickling an object."""

    library: str  # numpy | torch
    dtype: str  # numpy dtype name or torch dtype name without the "torch." prefix
    st_dtype: str  # safetensors dtype code
    shape: list[int]
    device: str
    nbytes: int
    parameter: bool = False
    requires_grad: bool = False
    obj: Any = None

    def host_view(self) -> memoryview:
        """The bytes in host memory; a device tensor is copied to the host
        (reading model weights back from GPU memory)."""
        return host_bytes(self.obj)


def numpy_module() -> Any:
    return sys.modules.get("numpy")


def torch_module() -> Any:
    return sys.modules.get("torch")


def as_buffer(obj: Any) -> Buffer | None:
    """A :class:`Buffer` when ``obj`` is a plain array or tensor we can write raw."""
    np = numpy_module()
    if np is not None and type(obj) is np.ndarray:
        dtype = obj.dtype
        if dtype.name not in NUMPY_DTYPES or not dtype.isnative or sys.byteorder != "little":
            return None  # object, string, complex, big-endian arrays pickle normally
        return Buffer("numpy", dtype.name, NUMPY_DTYPES[dtype.name], list(obj.shape), "cpu", int(obj.nbytes), obj=obj)
    torch = torch_module()
    if torch is not None and type(obj) in (torch.Tensor, torch.nn.Parameter):
        if obj.layout != torch.strided or obj.is_quantized or obj.device.type == "meta":
            return None
        name = str(obj.dtype).removeprefix("torch.")
        if name not in TORCH_DTYPES or sys.byteorder != "little":
            return None
        return Buffer(
            "torch",
            name,
            TORCH_DTYPES[name],
            list(obj.shape),
            str(obj.device),
            int(obj.numel() * obj.element_size()),
            parameter=isinstance(obj, torch.nn.Parameter),
            requires_grad=bool(obj.requires_grad),
            obj=obj,
        )
    return None


def host_bytes(obj: Any) -> memoryview:
    np = numpy_module()
    if np is not None and isinstance(obj, np.ndarray):
        array = obj if obj.flags.c_contiguous else np.ascontiguousarray(obj)
        return memoryview(array.reshape(-1).view(np.uint8))
    tensor = obj.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    tensor = tensor.contiguous().reshape(-1)
    torch = torch_module()
    return memoryview(tensor.view(torch.uint8).numpy())


#: The size of a transparent huge page (x86-64, and arm64 with 4 KiB base pages).
HUGE_PAGE_BYTES = 2 * 2**20
#: A chunk read into huge pages that took more CPU time than this per MiB (the reader
#: thread's: faults and copy, not waits for a core or the disk) gives them up for the
#: rest of its buffer. Huge pages the host has backed cost about 0.1-0.2 ms per MiB
#: with the copy, 4 KiB pages 0.5-2 ms, huge pages the host must fault in again 7-33 ms
#: (docs/benchmarks.md, "The memory a restore reads into").
HUGE_PAGE_SLOW_SECONDS_PER_MIB = 0.005
#: How the last buffers were backed: (bytes, huge pages kept to the end, offset they
#: were given up at or None), for benchmarks and bug reports.
backing_log: collections.deque[tuple[int, bool, int | None]] = collections.deque(maxlen=32)


class HostMemory:
    """Fresh, writable host memory for a restore to read one tensor into (``array``: numpy ``uint8``).

    An anonymous private mapping (a fork copies on write, never shares the
    user's arrays) that asks for transparent huge pages (``MADV_HUGEPAGE``),
    as numpy and PyTorch do for their own large allocations, but watches what
    they cost: on a VM the same request takes 0.1-0.2 s per GiB when the host
    has the memory backed and 7-33 s when it took the free memory back and
    faults it in again in 4 KiB pieces, both seen on this project's build
    machines, minutes apart. The reader reports each chunk
    (:meth:`chunk_read`); after slow ones the rest of the buffer is made in
    4 KiB pages (``MADV_NOHUGEPAGE``), which never cost more than a few
    seconds per GiB. The arrays and tensors built on it do not own their
    memory (it is freed with the last of them): ``ndarray.resize`` and
    ``Tensor.resize_`` are refused, everything else behaves as usual.
    """

    def __init__(self, nbytes: int) -> None:
        np = _import_numpy()
        self.nbytes = nbytes
        self.huge = False
        self.gave_up_huge_at: int | None = None
        self._slow_chunks = 0
        self._lock = threading.Lock()
        private, anonymous = getattr(mmap, "MAP_PRIVATE", None), getattr(mmap, "MAP_ANONYMOUS", None)
        self._mapping: mmap.mmap | None = None
        if nbytes == 0 or private is None or anonymous is None:  # not a POSIX system: numpy's allocator
            self.array = np.empty(nbytes, dtype=np.uint8)
            return
        self._mapping = mmap.mmap(-1, nbytes, flags=private | anonymous)
        self.array = np.frombuffer(self._mapping, dtype=np.uint8)
        hugepage = getattr(mmap, "MADV_HUGEPAGE", None)
        if hugepage is not None and nbytes >= 2 * HUGE_PAGE_BYTES:
            try:
                self._mapping.madvise(hugepage)
                self.huge = True
            except OSError:  # a kernel without transparent huge pages
                pass

    def chunk_read(self, end: int, nbytes: int, seconds: float) -> None:
        """The reader filled ``nbytes`` ending at offset ``end`` in ``seconds`` of its CPU time.

        Huge pages are given up after two slow chunks in a row, or one four
        times too slow: one chunk is too little to judge the host's memory by
        (a burst of interrupts, a cache miss in the host's page tables)."""
        with self._lock:  # the chunks are read by several threads
            if not self.huge or nbytes < 2**20:
                return
            per_mib = seconds / (nbytes / 2**20)
            if per_mib <= HUGE_PAGE_SLOW_SECONDS_PER_MIB:
                self._slow_chunks = 0
                return
            self._slow_chunks += 1
            if self._slow_chunks < 2 and per_mib <= 4 * HUGE_PAGE_SLOW_SECONDS_PER_MIB:
                return
            self._give_up_huge_pages(end)

    def _give_up_huge_pages(self, end: int) -> None:
        self.huge = False
        self.gave_up_huge_at = end
        start = -(-end // mmap.PAGESIZE) * mmap.PAGESIZE
        if self._mapping is not None and start < self.nbytes:
            with contextlib.suppress(OSError):
                self._mapping.madvise(mmap.MADV_NOHUGEPAGE, start, self.nbytes - start)

    def finished(self) -> None:
        backing_log.append((self.nbytes, self.huge, self.gave_up_huge_at))


def empty_like_manifest(entry: dict[str, Any]) -> tuple[Any, memoryview, HostMemory | None]:
    """Allocate the host object a tensor entry loads into, its writable bytes and their memory."""
    shape = tuple(entry["shape"])
    if entry["library"] == "numpy":
        np = _import_numpy()
        dtype = np.dtype(entry["dtype"])
        memory = HostMemory(math.prod(shape) * dtype.itemsize)
        return memory.array.view(dtype).reshape(shape), memoryview(memory.array), memory
    torch = _import_torch(entry)
    dtype = getattr(torch, entry["dtype"])
    # The tensor is a view of HostMemory's mapping (any dtype, bfloat16
    # included, through a byte view); only resize_() is refused.
    count = math.prod(shape)
    if count == 0:
        return torch.empty(shape, dtype=dtype), memoryview(b""), None
    memory = HostMemory(count * torch.empty((), dtype=dtype).element_size())
    tensor = torch.from_numpy(memory.array).view(dtype).reshape(shape)
    return tensor, memoryview(memory.array), memory


def _import_numpy() -> Any:
    import numpy

    return numpy


def _import_torch(entry: dict[str, Any]) -> Any:
    try:
        import torch
    except ImportError as exc:
        raise CannotLoad(f"tensor {entry.get('key')!r} was saved from torch, which is not installed here") from exc
    return torch


class CannotLoad(Exception):
    """A saved object cannot be loaded in this environment (missing library...)."""


def place(tensor: Any, device: str, parameter: bool, requires_grad: bool) -> tuple[Any, str | None]:
    """Move a loaded CPU tensor back to the device it came from.

    Returns the tensor and a warning when that device is absent here (it
    stays on the CPU: the work can go on, more slowly, rather than fail).
    """
    torch = torch_module()
    warning = None
    if device != "cpu":
        if _device_available(torch, device):
            tensor = tensor.to(device)
        else:
            warning = f"was on {device}, which is not available here: loaded on the CPU"
    if parameter:
        tensor = torch.nn.Parameter(tensor, requires_grad=requires_grad)
    elif requires_grad:
        tensor.requires_grad_(True)
    return tensor, warning


def _device_available(torch: Any, device: str) -> bool:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        return False
    if dev.type == "cuda":
        return bool(torch.cuda.is_available()) and (dev.index or 0) < torch.cuda.device_count()
    if dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        return bool(mps is not None and mps.is_available())
    backend = getattr(torch, dev.type, None)
    is_available = getattr(backend, "is_available", None)
    return bool(is_available()) if callable(is_available) else False


def gpu_in_use() -> bool:
    """Does this process hold accelerator memory? (only asks torch if loaded)"""
    torch = torch_module()
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_initialized() and torch.cuda.memory_allocated() > 0)
    except Exception:  # noqa: BLE001 - a broken driver must not break the probe
        return False
