"""Application checkpoints on disk: atomic, verified, kept for a while.

Layout of one checkpoint folder (one per notebook)::

    <folder>/
        20261202T180000.123456Z-3f9a1c/     one *generation*: one save of some names
            manifest.json                   written last; its presence marks the generation complete
            model.pkl                       the object graph, arrays/tensors replaced by references
            model.safetensors               the arrays/tensors as raw little-endian buffers
            db.files/...                    files written by a save callback
        .tmp-<generation>-<host>-<pid>/     a save in progress (or killed mid-way: ignored)

A generation is written in a temporary folder (every file fsynced, the
manifest last), then renamed into place and the parent folder fsynced: a
reader sees a complete generation or none, so a save killed mid-write never
replaces a good checkpoint. Retention keeps, per name, the newest ``keep``
copies and deletes a generation only when none of its names needs it.

The ``.safetensors`` files follow the safetensors layout (8-byte header
length, JSON header with dtype/shape/offsets, raw data), so the tensors can be
read without jupyter-suspend; the manifest adds what safetensors does not
carry: the device each tensor lived on, whether it was a Parameter, and the
per-chunk digests checked on every load.

Digests: the manifest's ``digest`` names the algorithm of every checksum in it
(``xxh3-128`` by default: see :mod:`.tensors` for why not SHA-256), in the
fields ``digest`` (a file) and ``chunk_digests`` (a tensor). A manifest of
format version 1 names none: its fields are ``sha256`` and ``sha256_chunks``,
SHA-256, and it is read and checked as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pickle
import re
import shutil
import socket
import struct
import sys
import time
import types
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.checkpoints import check_name
from ..common.durable import fsync_directory
from .tensors import (
    CHUNK_BYTES,
    SHA256,
    Buffer,
    CannotLoad,
    ChunkHasher,
    DigestUnavailable,
    HostMemory,
    as_buffer,
    chunk_digests,
    default_digest,
    digest_function,
    empty_like_manifest,
    hash_pool,
    incremental_digest,
    place,
    torch_module,
)

FORMAT = "jupyter-suspend-checkpoint"
#: 2: the manifest names its ``digest``; 1: SHA-256 in ``sha256``/``sha256_chunks`` fields.
FORMAT_VERSION = 2
PICKLE_PROTOCOL = 5
MANIFEST = "manifest.json"
_TMP_PREFIX = ".tmp-"
_TRASH_PREFIX = ".trash-"
#: ASCII identifiers: they become variables again and file names on any file system.
#: Matched with ``fullmatch`` (``$`` would also accept a trailing newline).
_GENERATION_RE = re.compile(r"\d{8}T\d{6}\.\d{6}Z-[0-9a-f]{6}")


class SaveError(Exception):
    """An object could not be saved; nothing of this save was committed."""

    def __init__(self, name: str, message: str):
        super().__init__(f"cannot save {name!r}: {message}")
        self.name = name


# -- serialisation -------------------------------------------------------------


@dataclass
class Serialized:
    """An object as pickle bytes plus the raw buffers the pickle refers to."""

    pickle_bytes: bytes
    serializer: str
    buffers: list[tuple[str, Buffer]]


def _preferred_keys(obj: Any) -> dict[int, str]:
    """Readable keys for the tensors of a state dict or a module (else t0, t1...)."""
    keys: dict[int, str] = {}
    torch = torch_module()
    items: Iterable[tuple[Any, Any]] = ()
    if torch is not None and isinstance(obj, torch.nn.Module):
        items = obj.state_dict(keep_vars=True).items()
    elif isinstance(obj, Mapping):
        items = obj.items()
    for key, value in items:
        if isinstance(key, str) and id(value) not in keys:
            keys[id(value)] = key
    return keys


def _pickler_base() -> tuple[type[pickle.Pickler], str]:
    # cloudpickle saves functions and classes defined in the notebook by
    # value, so they come back in a new process where that cell never ran.
    try:
        import cloudpickle
    except ImportError:
        return pickle.Pickler, "pickle"
    return cloudpickle.Pickler, "cloudpickle"


def serialize(obj: Any) -> Serialized:
    base, serializer = _pickler_base()
    buffers: list[tuple[str, Buffer]] = []
    seen: dict[int, str] = {}
    preferred = _preferred_keys(obj)
    top = as_buffer(obj)
    if top is not None:
        preferred[id(obj)] = "value"

    class Pickler(base):  # type: ignore[misc,valid-type]
        def persistent_id(self, value: Any) -> Any:
            if isinstance(value, io.IOBase):
                # cloudpickle would save a file's content and reopen nothing
                # useful: refuse, as the message about open files promises.
                raise TypeError(f"it holds an open file object ({type(value).__module__}.{type(value).__qualname__})")
            key = seen.get(id(value))
            if key is not None:
                return ("jupyter_suspend.tensor", key)
            buffer = as_buffer(value)
            if buffer is None:
                return None
            key = preferred.get(id(value)) or f"t{len(buffers)}"
            if key in {k for k, _ in buffers}:
                key = f"{key}#{len(buffers)}"
            seen[id(value)] = key
            buffers.append((key, buffer))
            return ("jupyter_suspend.tensor", key)

    out = io.BytesIO()
    Pickler(out, protocol=PICKLE_PROTOCOL).dump(obj)
    return Serialized(out.getvalue(), serializer, buffers)


def structure_digest(obj: Any, ser: Serialized) -> str:
    """SHA-256 of an object's structure (everything but its arrays/tensors),
    the same for equal objects in different processes.

    The pickle that is stored is not canonical: its memo records which
    *string objects* happen to be shared, set order follows the per-process
    string hash seed, and cloudpickle writes notebook classes by value. So
    the structure is hashed from a second pickle without a memo (``fast``
    mode), with sets sorted, classes and functions by name, and tensors by
    key. Cyclic objects cannot be pickled that way: their stored pickle bytes
    are hashed instead (then only a same-process comparison is meaningful).
    """
    keys = {id(b.obj): key for key, b in ser.buffers}

    class Canonical(pickle.Pickler):
        def persistent_id(self, value: Any) -> Any:
            if id(value) in keys and as_buffer(value) is not None:
                return ("tensor", keys[id(value)])
            if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType)):
                name = getattr(value, "__qualname__", getattr(value, "__name__", ""))
                return ("ref", getattr(value, "__module__", None), name)
            if type(value) in (set, frozenset):
                return (type(value).__name__, tuple(sorted(value, key=lambda e: (type(e).__name__, repr(e)))))
            return None

    out = io.BytesIO()
    pickler = Canonical(out, protocol=PICKLE_PROTOCOL)
    pickler.fast = True  # no memo: identity sharing of equal values must not matter
    try:
        pickler.dump(obj)
    except (ValueError, RecursionError, pickle.PicklingError, TypeError, AttributeError):
        return "pickle:" + hashlib.sha256(ser.pickle_bytes).hexdigest()
    return hashlib.sha256(out.getvalue()).hexdigest()


def _tensor_line(t: dict[str, Any], digest: str) -> bytes:
    # SHA-256 chunks hash exactly as in format version 1, so that a content hash
    # recorded before the digest changed still compares equal.
    chunks = ",".join(t["chunk_digests"])
    return f"\n{t['key']}|{t['dtype']}|{t['shape']}|{chunks if digest == SHA256 else f'{digest}:{chunks}'}".encode()


def content_hash(structure: str, tensors: list[dict[str, Any]], digest: str) -> str:
    """The hash of an object that verification compares: its structure plus
    every tensor's key, dtype, shape and content (never its device), the
    content as the chunk digests of ``digest``."""
    h = hashlib.sha256(b"jupyter-suspend-content-v1\n")
    h.update(structure.encode())
    for t in tensors:
        h.update(_tensor_line(t, digest))
    return "sha256:" + h.hexdigest()


def tensors_hash(tensors: list[dict[str, Any]], digest: str) -> str | None:
    if not tensors:
        return None
    h = hashlib.sha256(b"jupyter-suspend-tensors-v1")
    for t in tensors:
        h.update(_tensor_line(t, digest))
    return "sha256:" + h.hexdigest()


def observe(obj: Any, digest: str | None = None) -> dict[str, Any]:
    """Hash an object as it is in memory now (tensors read back from their
    device), the same way a save with ``digest`` (default: the one new saves
    use) hashes it; compare with a checkpoint using that checkpoint's digest
    (:meth:`CheckpointStore.digest_of`)."""
    digest = digest or default_digest()
    ser = serialize(obj)
    tensors = [
        {
            "key": key,
            "dtype": b.dtype,
            "shape": b.shape,
            "device": b.device,
            "chunk_digests": chunk_digests(b.host_view(), digest),
        }
        for key, b in ser.buffers
    ]
    structure = structure_digest(obj, ser)
    return {
        "content_hash": content_hash(structure, tensors, digest),
        "tensors_hash": tensors_hash(tensors, digest),
        "structure_sha256": structure.removeprefix("pickle:"),
        "tensors": len(tensors),
        "devices": sorted({t["device"] for t in tensors}),
    }


# -- manifests -----------------------------------------------------------------


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_objects(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


def manifest_problem(manifest: Any) -> str | None:
    """What makes a parsed ``manifest.json`` unusable (None when every field the
    store reads has the right type). Checked on every read: a manifest that is
    valid JSON of the wrong shape must cost one generation, not the folder."""
    if not isinstance(manifest, dict):
        return f"not an object but {type(manifest).__name__}"
    if manifest.get("format") != FORMAT:
        return "not a jupyter-suspend manifest"
    objects = manifest.get("objects")
    if not isinstance(objects, dict):
        return "'objects' is not an object"
    for key, value in (
        ("created_epoch", manifest.get("created_epoch", 0.0)),
        ("chunk_bytes", manifest.get("chunk_bytes", 1)),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{key!r} is not a number"
    if not _is_str(manifest.get("digest", SHA256)):
        return "'digest' is not a string"
    file_sum, chunk_sums = _checksum_fields(manifest)
    for name, entry in objects.items():
        where = f"objects[{name!r}]"
        if not isinstance(entry, dict):
            return f"{where} is not an object"
        if entry.get("name") != name:
            return f"{where} names {entry.get('name')!r}"
        if entry.get("kind") == "callback":
            if not _is_str(entry.get("folder")) or not _is_objects(entry.get("files")):
                return f"{where} lacks its folder or files"
            if not all(_is_str(f.get("file")) and _is_str(f.get(file_sum)) for f in entry["files"]):
                return f"{where} has a file without name or checksum"
            continue
        pickled = entry.get("pickle")
        if not isinstance(pickled, dict) or not _is_str(pickled.get("file")) or not _is_str(pickled.get(file_sum)):
            return f"{where}.pickle is not a file with a checksum"
        data = entry.get("data")
        if data is not None and (
            not isinstance(data, dict) or not _is_str(data.get("file")) or not _is_objects(data.get("tensors"))
        ):
            return f"{where}.data is not a data file with tensors"
        if data is not None and not all(
            isinstance(t.get(chunk_sums), list) and all(_is_str(c) for c in t[chunk_sums]) for t in data["tensors"]
        ):
            return f"{where}.data has a tensor without its chunk checksums"
    return None


def _checksum_fields(manifest: dict[str, Any]) -> tuple[str, str]:
    """The fields a manifest keeps a file's checksum and a tensor's chunk checksums in."""
    if "digest" in manifest:
        return "digest", "chunk_digests"
    return "sha256", "sha256_chunks"  # format version 1: SHA-256 only


# -- file helpers --------------------------------------------------------------


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _write_checked(path: Path, data: bytes, digest: str) -> str:
    """Write a small file (fsynced); its checksum. ``_write_file`` is looked up at
    each call: tests replace it to fail or block a write (tests/crash_points.py)."""
    _write_file(path, data)
    return digest_function(digest)(data)


def _write_all(fd: int, view: memoryview) -> None:
    while view.nbytes:
        written = os.write(fd, view)
        view = view[written:]


def _read_into(fd: int, view: memoryview, offset: int) -> None:
    """Fill ``view`` from the file at ``offset`` (``pread``: no shared file position); EOFError when it is shorter."""
    while view.nbytes:
        got = os.preadv(fd, [view], offset)
        if not got:
            raise EOFError("file is shorter than its manifest says")
        view, offset = view[got:], offset + got


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _new_generation_id() -> str:
    now = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    return f"{stamp}.{int((now % 1) * 1e6):06d}Z-{uuid.uuid4().hex[:6]}"


# -- the store -----------------------------------------------------------------


@dataclass
class SaveItem:
    name: str
    obj: Any = None
    save: Callable[[Path], Any] | None = None
    restore: Callable[[Path], Any] | None = None


@dataclass
class Generation:
    id: str
    path: Path
    manifest: dict[str, Any]

    @property
    def objects(self) -> dict[str, dict[str, Any]]:
        objects: dict[str, dict[str, Any]] = self.manifest.get("objects", {})
        return objects

    @property
    def created(self) -> float:
        return float(self.manifest.get("created_epoch", 0.0))

    @property
    def digest(self) -> str:
        """The algorithm of this generation's checksums (format version 1: SHA-256)."""
        return str(self.manifest.get("digest", SHA256))

    def file_sum(self, info: dict[str, Any]) -> str:
        return str(info[_checksum_fields(self.manifest)[0]])

    def chunk_sums(self, tensor: dict[str, Any]) -> list[str]:
        return list(tensor[_checksum_fields(self.manifest)[1]])

    def hasher(self, where: str) -> Callable[[Any], str]:
        """The function that checks this generation's checksums; :class:`CannotLoad`
        when its digest is unknown or its library is not installed here."""
        try:
            return digest_function(self.digest)
        except DigestUnavailable as exc:
            raise CannotLoad(f"{where} cannot be checked: {exc}") from exc


@dataclass
class LoadResult:
    objects: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # name -> generation id
    missing: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # name -> why (corrupt, cannot load...)
    warnings: list[str] = field(default_factory=list)
    bytes: int = 0
    seconds: float = 0.0


@dataclass
class EntryRead:
    """One name's bytes, read and verified, not yet unpickled."""

    data: bytes
    tensors: dict[str, Any]
    warnings: list[str]
    size: int


@dataclass
class ReadAhead:
    """What :meth:`CheckpointStore.read_ahead` found for one name: its read, or
    the error :meth:`CheckpointStore.load` reports for it."""

    generation: str
    read: EntryRead | None
    error: Exception | None = None


class CheckpointStore:
    """The generations of one checkpoint folder."""

    def __init__(self, directory: str | os.PathLike[str], keep: int = 3):
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.directory = Path(directory)
        self.keep = keep
        self.problems: list[str] = []

    # -- reading the folder ------------------------------------------------
    def generations(self) -> list[Generation]:
        """Complete generations, newest first; unreadable ones go to :attr:`problems`."""
        self.problems = []
        if not self.directory.is_dir():
            return []
        found = []
        for child in self.directory.iterdir():
            if not _GENERATION_RE.fullmatch(child.name) or not child.is_dir():
                continue
            manifest_path = child / MANIFEST
            if not manifest_path.exists():
                self.problems.append(f"generation {child.name} has no manifest (incomplete); ignored")
                continue
            try:
                manifest = json.loads(manifest_path.read_text())
            except (OSError, ValueError, RecursionError) as exc:
                self.problems.append(f"generation {child.name}: unreadable manifest ({exc}); ignored")
                continue
            problem = manifest_problem(manifest)
            if problem is not None:
                self.problems.append(f"generation {child.name}: corrupt manifest ({problem}); ignored")
                continue
            found.append(Generation(child.name, child, manifest))
        found.sort(key=lambda g: g.id, reverse=True)
        return found

    def latest_with(self, name: str, generations: list[Generation] | None = None) -> Generation | None:
        for gen in generations if generations is not None else self.generations():
            if name in gen.objects:
                return gen
        return None

    def digest_of(self, name: str) -> str:
        """The digest of the newest checkpoint of ``name`` (the one a server's
        record holds), else the one new saves use: what :func:`observe` must use
        for its content hash to compare with that checkpoint's."""
        gen = self.latest_with(name)
        return gen.digest if gen is not None else default_digest()

    def names(self) -> list[str]:
        seen: dict[str, None] = {}
        for gen in self.generations():
            for name in gen.objects:
                seen.setdefault(name, None)
        return sorted(seen)

    # -- saving --------------------------------------------------------------
    def save(self, items: list[SaveItem], **info: Any) -> Generation:
        """Write one generation holding ``items``; all of them or none."""
        for item in items:
            check_name(item.name)
        self.directory.mkdir(parents=True, exist_ok=True)
        gen_id = _new_generation_id()
        tmp = self.directory / f"{_TMP_PREFIX}{gen_id}-{socket.gethostname()}-{os.getpid()}"
        try:
            digest = default_digest()
        except DigestUnavailable as exc:
            raise SaveError(items[0].name if items else "", str(exc)) from exc
        tmp.mkdir()
        started = time.perf_counter()
        try:
            objects = {}
            for item in items:
                objects[item.name] = self._save_item(tmp, item, digest)
            manifest = {
                "format": FORMAT,
                "version": FORMAT_VERSION,
                "digest": digest,
                "generation": gen_id,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "created_epoch": time.time(),
                "pid": os.getpid(),
                "hostname": socket.gethostname(),
                "python": sys.version.split()[0],
                "chunk_bytes": CHUNK_BYTES,
                "seconds": round(time.perf_counter() - started, 6),
                **info,
                "objects": objects,
            }
            _write_file(tmp / MANIFEST, json.dumps(manifest, indent=1, default=str).encode())
            fsync_directory(tmp)
            final = self.directory / gen_id
            os.rename(tmp, final)
            fsync_directory(self.directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        generation = Generation(gen_id, final, manifest)
        self.prune()
        return generation

    def _save_item(self, tmp: Path, item: SaveItem, digest: str) -> dict[str, Any]:
        started = time.perf_counter()
        if item.save is not None:
            return self._save_callback(tmp, item, started, digest)
        try:
            ser = serialize(item.obj)
        except Exception as exc:
            raise SaveError(
                item.name,
                f"{type(item.obj).__module__}.{type(item.obj).__qualname__} cannot be pickled "
                f"({type(exc).__name__}: {exc}). Open files, sockets, locks, generators and database "
                "connections cannot be checkpointed: register save/restore callbacks for it "
                f"(jupyter_suspend.register({item.name!r}, save=..., restore=...)) or unregister it.",
            ) from exc
        pickle_file = f"{item.name}.pkl"
        pickle_sum = _write_checked(tmp / pickle_file, ser.pickle_bytes, digest)
        entry: dict[str, Any] = {
            "name": item.name,
            "kind": "object",
            "type": f"{type(item.obj).__module__}.{type(item.obj).__qualname__}",
            "serializer": ser.serializer,
            "pickle": {"file": pickle_file, "bytes": len(ser.pickle_bytes), "digest": pickle_sum},
            "bytes": len(ser.pickle_bytes),
        }
        tensors: list[dict[str, Any]] = []
        if ser.buffers:
            data_file = f"{item.name}.safetensors"
            tensors, size = _write_safetensors(tmp / data_file, ser.buffers, item.name, digest)
            entry["data"] = {"file": data_file, "bytes": size, "format": "safetensors", "tensors": tensors}
            entry["bytes"] += size
        entry["content_hash"] = content_hash(structure_digest(item.obj, ser), tensors, digest)
        entry["tensors_hash"] = tensors_hash(tensors, digest)
        entry["tensors"] = len(tensors)
        entry["devices"] = sorted({t["device"] for t in tensors})
        entry["seconds"] = round(time.perf_counter() - started, 6)
        return entry

    def _save_callback(self, tmp: Path, item: SaveItem, started: float, digest: str) -> dict[str, Any]:
        assert item.save is not None
        folder = tmp / f"{item.name}.files"
        folder.mkdir()
        try:
            item.save(folder)
        except Exception as exc:
            raise SaveError(item.name, f"its save callback failed: {type(exc).__name__}: {exc}") from exc
        files = []
        total = 0
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            with open(path, "rb") as fh:
                file_sum = _file_digest(fh, digest)
                os.fsync(fh.fileno())
            size = path.stat().st_size
            total += size
            files.append({"file": str(path.relative_to(folder)), "bytes": size, "digest": file_sum})
        for directory in sorted({p.parent for p in folder.rglob("*")} | {folder}):
            fsync_directory(directory)
        entry: dict[str, Any] = {
            "name": item.name,
            "kind": "callback",
            "folder": folder.name,
            "files": files,
            "bytes": total,
            "content_hash": None,
            "callbacks": None,
        }
        # Keep the callbacks with the files (by value, with cloudpickle) so that
        # a new process can restore before the cell that defines them ran again.
        try:
            data = serialize((item.save, item.restore))
            if data.buffers:
                raise TypeError("the callbacks hold arrays or tensors")
        except Exception as exc:  # noqa: BLE001 - optional: the registered callbacks are used instead
            entry["callbacks_error"] = f"{type(exc).__name__}: {exc}"
        else:
            file = f"{item.name}.callbacks.pkl"
            entry["callbacks"] = {
                "file": file,
                "digest": _write_checked(tmp / file, data.pickle_bytes, digest),
                "serializer": data.serializer,
            }
        entry["seconds"] = round(time.perf_counter() - started, 6)
        return entry

    # -- retention and clean-up --------------------------------------------
    def prune(self) -> list[str]:
        """Delete generations no name needs (each name keeps its newest ``keep``)."""
        counts: dict[str, int] = {}
        removed = []
        for gen in self.generations():
            needed = False
            for name in gen.objects:
                counts[name] = counts.get(name, 0) + 1
                needed = needed or counts[name] <= self.keep
            if not needed:
                self._remove(gen.path)
                removed.append(gen.id)
        self._clean_stale_tmp()
        return removed

    def _remove(self, path: Path) -> None:
        # Rename first: a half-deleted generation must never look complete.
        trash = path.with_name(f"{_TRASH_PREFIX}{path.name}-{uuid.uuid4().hex[:6]}")
        os.rename(path, trash)
        shutil.rmtree(trash, ignore_errors=True)

    def _clean_stale_tmp(self) -> None:
        host = socket.gethostname()
        for child in self.directory.iterdir():
            if child.name.startswith(_TRASH_PREFIX):
                shutil.rmtree(child, ignore_errors=True)
                continue
            if not child.name.startswith(_TMP_PREFIX):
                continue
            parts = child.name.rsplit("-", 2)
            try:
                pid = int(parts[-1])
            except ValueError:
                continue
            abandoned = parts[-2] == host and not _pid_alive(pid)
            very_old = time.time() - child.stat().st_mtime > 24 * 3600
            if abandoned or very_old:
                shutil.rmtree(child, ignore_errors=True)

    # -- loading -------------------------------------------------------------
    def read_ahead(self, names: list[str]) -> dict[str, ReadAhead]:
        """Read and verify what :meth:`load` of ``names`` would read (the pickle
        bytes and the tensors of each name's newest generation), without
        unpickling anything: :meth:`load` with ``ahead=`` finishes the work.
        A name that fails its checks keeps the error :meth:`load` would report;
        missing names and names saved by callbacks are left to :meth:`load`."""
        ahead: dict[str, ReadAhead] = {}
        generations = self.generations()
        for name in names:
            gen = self.latest_with(name, generations)
            if gen is None or gen.objects[name].get("kind") == "callback":
                continue
            try:
                ahead[name] = ReadAhead(gen.id, self._read_entry(gen, gen.objects[name]))
            except (CorruptCheckpoint, CannotLoad) as exc:
                ahead[name] = ReadAhead(gen.id, None, exc)
        return ahead

    def load(
        self,
        names: list[str] | None = None,
        generation: str | None = None,
        ahead: dict[str, ReadAhead] | None = None,
    ) -> LoadResult:
        """Load names (default: every name on disk) from their newest generation,
        or from ``generation``; anything that fails its checksum is reported, never loaded.

        ``ahead`` (from :meth:`read_ahead`, consumed): what was already read and
        verified; a name's read is used only when it is of the generation this
        load picks, else the name is read again (and the stale read dropped first)."""
        started = time.perf_counter()
        ahead = ahead if ahead is not None else {}
        result = LoadResult()
        generations = self.generations()
        result.warnings += self.problems
        if generation is not None:
            generations = [g for g in generations if g.id == generation]
            if not generations:
                raise FileNotFoundError(f"no complete checkpoint generation {generation!r} in {self.directory}")
        wanted = names if names is not None else sorted({n for g in generations for n in g.objects})
        for name in wanted:
            gen = self.latest_with(name, generations)
            if gen is None:
                result.missing.append(name)
                continue
            early = ahead.pop(name, None)
            if early is not None and early.generation != gen.id:
                early = None  # a newer generation appeared since: drop that read before reading again
            try:
                if early is not None and early.error is not None:
                    raise early.error
                read = early.read if early is not None else None
                obj, warnings, size = self._load_entry(gen, gen.objects[name], read)
            except (CorruptCheckpoint, CannotLoad) as exc:
                message = str(exc)
                if isinstance(exc, CorruptCheckpoint):
                    older = self.latest_with(name, [g for g in generations if g.id < gen.id])
                    if older is not None:
                        message += f"; an older copy exists (%checkpoint restore {name} --generation {older.id})"
                result.failed[name] = message
                continue
            result.objects[name] = obj
            result.sources[name] = gen.id
            result.warnings += [f"{name}: {w}" for w in warnings]
            result.bytes += size
        ahead.clear()  # reads of names not asked for: freed now
        result.seconds = time.perf_counter() - started
        return result

    def _load_entry(
        self, gen: Generation, entry: dict[str, Any], read: EntryRead | None = None
    ) -> tuple[Any, list[str], int]:
        name = entry["name"]
        where = f"checkpoint {name!r} (generation {gen.id})"
        if entry.get("kind") == "callback":
            return self._load_callback(gen, entry, where)
        if read is None:
            read = self._read_entry(gen, entry)
        data, tensors, warnings, size = read.data, read.tensors, read.warnings, read.size

        class Unpickler(pickle.Unpickler):
            def persistent_load(self, pid: Any) -> Any:
                if not (isinstance(pid, tuple) and len(pid) == 2 and pid[0] == "jupyter_suspend.tensor"):
                    raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
                return tensors[pid[1]]

        try:
            obj = Unpickler(io.BytesIO(data)).load()
        except Exception as exc:
            hint = ""
            if isinstance(exc, AttributeError) and "__main__" in str(exc):
                hint = " (define that class or function first - run the cell that defines it - then restore again)"
            raise CannotLoad(f"{where} could not be unpickled: {type(exc).__name__}: {exc}{hint}") from exc
        return obj, warnings, size

    def _read_entry(self, gen: Generation, entry: dict[str, Any]) -> EntryRead:
        """Read one name's pickle bytes and tensors, every checksum checked."""
        where = f"checkpoint {entry['name']!r} (generation {gen.id})"
        pickle_info = entry["pickle"]
        hasher = gen.hasher(where)
        try:
            data = (gen.path / pickle_info["file"]).read_bytes()
        except OSError as exc:
            raise CorruptCheckpoint(
                f"{where} is corrupt: {pickle_info['file']} unreadable ({exc}); not loaded"
            ) from exc
        if hasher(data) != gen.file_sum(pickle_info):
            raise CorruptCheckpoint(f"{where} is corrupt: {pickle_info['file']} {_fails(gen)}; not loaded")
        tensors: dict[str, Any] = {}
        warnings: list[str] = []
        size = len(data)
        if "data" in entry:
            chunk = int(gen.manifest.get("chunk_bytes", CHUNK_BYTES))
            tensors, warnings = _read_safetensors(gen, entry["data"], where, chunk)
            size += entry["data"]["bytes"]
        return EntryRead(data, tensors, warnings, size)

    def _load_callback(self, gen: Generation, entry: dict[str, Any], where: str) -> tuple[Any, list[str], int]:
        folder = gen.path / entry["folder"]
        hasher = gen.hasher(where)
        for info in entry["files"]:
            path = folder / info["file"]
            try:
                with open(path, "rb") as fh:
                    file_sum = _file_digest(fh, gen.digest)
            except OSError as exc:
                raise CorruptCheckpoint(f"{where} is corrupt: {info['file']} unreadable ({exc}); not loaded") from exc
            if file_sum != gen.file_sum(info):
                raise CorruptCheckpoint(f"{where} is corrupt: {info['file']} {_fails(gen)}; not loaded")
        callbacks: tuple[Any, Any] | None = None
        problem = entry.get("callbacks_error") or "its callbacks were not saved with it"
        saved = entry.get("callbacks")
        if saved:
            data = (gen.path / saved["file"]).read_bytes()
            if hasher(data) != gen.file_sum(saved):
                raise CorruptCheckpoint(f"{where} is corrupt: {saved['file']} {_fails(gen)}; not loaded")
            try:
                callbacks = pickle.loads(data)
            except Exception as exc:  # noqa: BLE001 - the registered callbacks may still do
                problem = f"its saved callbacks cannot be loaded here ({type(exc).__name__}: {exc})"
        save, restore = callbacks if callbacks else (None, None)
        return CallbackFolder(folder, save, restore, problem), [], int(entry.get("bytes", 0))

    def check(self, gen: Generation, name: str) -> str | None:
        """Verify one saved name's checksums without loading it; None when intact."""
        entry = gen.objects[name]
        where = f"checkpoint {name!r} (generation {gen.id})"
        try:
            if entry.get("kind") == "callback":
                self._load_callback(gen, entry, where)
                return None
            data = (gen.path / entry["pickle"]["file"]).read_bytes()
            if gen.hasher(where)(data) != gen.file_sum(entry["pickle"]):
                return f"{where}: {entry['pickle']['file']} {_fails(gen)}"
            if "data" in entry:
                chunk = int(gen.manifest.get("chunk_bytes", CHUNK_BYTES))
                _check_safetensors(gen, entry["data"], where, chunk)
        except (CorruptCheckpoint, CannotLoad) as exc:
            return str(exc)
        except OSError as exc:
            return f"{where}: unreadable ({exc})"
        return None


@dataclass
class CallbackFolder:
    """A name saved by callbacks: the folder its save callback wrote, and the
    callbacks saved with it (when they could be pickled)."""

    path: Path
    save: Callable[[Path], Any] | None = None
    restore: Callable[[Path], Any] | None = None
    problem: str = ""


class CorruptCheckpoint(Exception):
    """A checkpoint failed its checksum (or is truncated): it is not loaded."""


_DIGEST_NAMES = {SHA256: "SHA-256", "xxh3-128": "XXH3-128"}


def _fails(gen: Generation) -> str:
    return f"fails its {_DIGEST_NAMES.get(gen.digest, gen.digest)} check"


def _file_digest(fh: Any, digest: str) -> str:
    """The digest of a whole open file, read block by block."""
    hasher = incremental_digest(digest)
    while block := fh.read(CHUNK_BYTES):
        hasher.update(block)
    return str(hasher.hexdigest())


# -- the safetensors data file ----------------------------------------------------


def _safetensors_header(buffers: list[tuple[str, Buffer]]) -> bytes:
    header: dict[str, Any] = {
        "__metadata__": {"format": "pt" if any(b.library == "torch" for _, b in buffers) else "np", "writer": FORMAT}
    }
    offset = 0
    for key, b in buffers:
        header[key] = {"dtype": b.st_dtype, "shape": b.shape, "data_offsets": [offset, offset + b.nbytes]}
        offset += b.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors aligns the data to 8 bytes
    return struct.pack("<Q", len(raw)) + raw


def _write_safetensors(
    path: Path, buffers: list[tuple[str, Buffer]], name: str, digest: str
) -> tuple[list[dict[str, Any]], int]:
    header = _safetensors_header(buffers)
    entries: list[dict[str, Any]] = []
    hashers: list[tuple[ChunkHasher, memoryview]] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        _write_all(fd, memoryview(header))
        offset = len(header)
        for key, b in buffers:
            try:
                view = b.host_view()
            except Exception as exc:
                raise SaveError(name, f"tensor {key!r} could not be read from {b.device}: {exc}") from exc
            hasher = ChunkHasher(digest)
            # Hash each chunk in the background while the next one is written.
            for start in range(0, view.nbytes, CHUNK_BYTES):
                chunk = view[start : start + CHUNK_BYTES]
                hasher.add(chunk)
                _write_all(fd, chunk)
            hashers.append((hasher, view))
            entries.append(
                {
                    "key": key,
                    "library": b.library,
                    "dtype": b.dtype,
                    "shape": b.shape,
                    "device": b.device,
                    "parameter": b.parameter,
                    "requires_grad": b.requires_grad,
                    "offset": offset,
                    "nbytes": b.nbytes,
                }
            )
            offset += b.nbytes
        # The device writes back while the last chunks are still being hashed.
        os.fsync(fd)
    finally:
        os.close(fd)
    for entry, (hasher, view) in zip(entries, hashers, strict=True):
        entry["chunk_digests"] = hasher.digests() if view.nbytes else chunk_digests(view, digest)
    return entries, offset


def _open_data(path: Path, where: str) -> Any:
    try:
        fh = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by the caller
    except OSError as exc:
        raise CorruptCheckpoint(f"{where} is corrupt: {path.name} unreadable ({exc}); not loaded") from exc
    with contextlib.suppress(AttributeError, OSError):
        os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
    return fh


def _read_safetensors(
    gen: Generation, data: dict[str, Any], where: str, chunk_bytes: int
) -> tuple[dict[str, Any], list[str]]:
    """Read every tensor into fresh host memory, checking each chunk's digest;
    move tensors back to their device only after everything checked out.

    The chunks are read (``pread``, no shared file position) and hashed by the
    hash pool's threads, several at once: a restore's cost is mostly making
    fresh memory (page faults) and the copy, which two cores do in about half
    the time of one (docs/benchmarks.md)."""
    path, entries = gen.path / data["file"], data["tensors"]
    hasher = gen.hasher(where)  # an unknown digest is refused before anything is read
    loaded: dict[str, Any] = {}
    warnings: list[str] = []
    checks: list[tuple[dict[str, Any], list[Future[str]], HostMemory | None]] = []
    with _open_data(path, where) as fh:
        try:
            for entry in entries:
                obj, view, memory = empty_like_manifest(entry)
                if view.nbytes != entry["nbytes"]:
                    raise CorruptCheckpoint(
                        f"{where} is corrupt: tensor {entry['key']!r} size disagrees with its shape"
                    )
                reads = [
                    hash_pool().submit(
                        _read_chunk, fh.fileno(), view, start, chunk_bytes, entry["offset"], hasher, memory
                    )
                    for start in range(0, view.nbytes, chunk_bytes)
                ]
                checks.append((entry, reads, memory))
                loaded[entry["key"]] = obj
        finally:
            # Every read ends before the file is closed (a closed descriptor's number can be reused).
            futures_wait([read for _, reads, _ in checks for read in reads])
    for entry, reads, memory in checks:
        if memory is not None:
            memory.finished()
        try:
            digests = [read.result() for read in reads] if reads else chunk_digests(memoryview(b""), gen.digest)
        except EOFError as exc:
            raise CorruptCheckpoint(f"{where} is corrupt: {path.name} is truncated; not loaded") from exc
        if digests != gen.chunk_sums(entry):
            raise CorruptCheckpoint(f"{where} is corrupt: tensor {entry['key']!r} {_fails(gen)}; not loaded")
    for entry in entries:
        if entry["library"] == "torch":
            tensor, warning = place(loaded[entry["key"]], entry["device"], entry["parameter"], entry["requires_grad"])
            loaded[entry["key"]] = tensor
            if warning:
                warnings.append(f"tensor {entry['key']!r} {warning}")
    return loaded, warnings


def _read_chunk(
    fd: int,
    view: memoryview,
    start: int,
    chunk_bytes: int,
    file_offset: int,
    hasher: Callable[[Any], str],
    memory: HostMemory | None,
) -> str:
    """Read one chunk of a tensor at its place in the file and return its digest (EOFError: truncated)."""
    chunk = view[start : start + chunk_bytes]
    # This thread's CPU time: the page faults and the copy (a host's slow faults included),
    # not the time it waited for a core or the disk, which says nothing of the memory.
    began = time.thread_time()
    _read_into(fd, chunk, file_offset + start)
    if memory is not None:
        memory.chunk_read(start + chunk.nbytes, chunk.nbytes, time.thread_time() - began)
    return hasher(chunk)


def _check_safetensors(gen: Generation, data: dict[str, Any], where: str, chunk_bytes: int) -> None:
    path, entries = gen.path / data["file"], data["tensors"]
    hasher = gen.hasher(where)
    with _open_data(path, where) as fh:
        for entry in entries:
            digests = []
            offset, remaining = entry["offset"], entry["nbytes"]
            if remaining == 0:
                digests.append(hasher(b""))
            while remaining > 0:
                block = bytearray(min(chunk_bytes, remaining))
                try:
                    _read_into(fh.fileno(), memoryview(block), offset)
                except EOFError as exc:
                    raise CorruptCheckpoint(f"{where} is corrupt: {path.name} is truncated") from exc
                digests.append(hasher(block))
                offset += len(block)
                remaining -= len(block)
            if digests != gen.chunk_sums(entry):
                raise CorruptCheckpoint(f"{where} is corrupt: tensor {entry['key']!r} {_fails(gen)}")
