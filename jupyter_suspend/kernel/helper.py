"""The kernel helper: one per kernel process, shared by the magics and the
server's requests (the IPython extension in :mod:`.extension` creates it).

It knows where this kernel's application checkpoints live, saves and restores
them, and answers the server's ``probe``/``checkpoint``/``restore``/``verify``
requests. Kernel-side settings are its configuration section::

    c.KernelHelper.keep = 5
    c.KernelHelper.checkpoint_dir = "/home/jovyan/.checkpoints"

``c.SuspendKernel.*`` (the section's old name) still works; ``KernelHelper`` wins
where both are set.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from traitlets import Float, Integer, Unicode
from traitlets.config import Configurable

from ..common.checkpoints import folder_name
from . import canary, preload, protocol
from .canary import kernel_id_from_connection_file as kernel_id_from_connection_file  # its first home
from .canary import own_kernel_id
from .client import ServerInfo, ServerNotFound, find_server
from .registry import REGISTRY, Registry
from .store import CallbackFolder, CheckpointStore, Generation, LoadResult, ReadAhead, SaveItem, observe
from .tensors import gpu_in_use

ENV_CHECKPOINT_DIR = "JUPYTER_SUSPEND_CHECKPOINT_DIR"

_current: KernelHelper | None = None


def current() -> KernelHelper:
    """The kernel side of this process (created on first use when IPython is not loaded)."""
    global _current
    if _current is None:
        _current = KernelHelper()
    return _current


def set_current(kernel_helper: KernelHelper | None) -> None:
    """The extension sets the helper it created (None when unloaded)."""
    global _current
    _current = kernel_helper


def default_root() -> Path:
    from jupyter_core.paths import jupyter_data_dir

    # The server's default checkpoint_dir (<state_dir>/checkpoints).
    return Path(jupyter_data_dir()) / "jupyter_suspend" / "checkpoints"


class SuspendKernel(Configurable):
    """The old name of :class:`KernelHelper`'s configuration section.

    ``c.SuspendKernel.keep = 5`` still configures the helper (traitlets reads the
    sections of every Configurable base class; the subclass's own section wins).
    """


class KernelHelper(SuspendKernel):
    """Application checkpoints and the live-state canary of one kernel (not a kernel itself)."""

    checkpoint_dir = Unicode(
        "",
        config=True,
        help=f"Root folder of application checkpoints (default: ${ENV_CHECKPOINT_DIR}, else the server's "
        "default <jupyter data dir>/jupyter_suspend/checkpoints). Each notebook gets its own folder inside.",
    )
    keep = Integer(3, config=True, help="Checkpoints kept per name (older generations are deleted).")
    server_timeout = Float(15.0, config=True, help="Seconds the magics wait for the Jupyter server to answer.")

    def __init__(self, shell: Any = None, registry: Registry = REGISTRY, **kwargs: Any):
        super().__init__(parent=shell, **kwargs)
        self.shell = shell
        self.registry = registry
        if shell is not None:
            registry.namespace = shell.user_ns
        #: The folder the server last told this kernel to use (flush or restore).
        self.server_folder: Path | None = None
        #: name -> where it was restored from, in this process.
        self.restored: dict[str, dict[str, Any]] = {}
        #: Why the last %checkpoint save left no live-state record on the server (None when it did).
        self.unrecorded: str | None = None
        self.started = time.time()
        canary.canary_hash()  # the canary exists from the moment the extension loads

    # -- where --------------------------------------------------------------
    def kernel_id(self) -> str | None:
        return own_kernel_id()

    def root(self) -> Path:
        return Path(self.checkpoint_dir or os.environ.get(ENV_CHECKPOINT_DIR) or default_root())

    def folder(self) -> Path:
        """This notebook's checkpoint folder: the one the server uses when it
        told us, else the same name the server derives from the session path."""
        if self.server_folder is not None:
            return self.server_folder
        return self.root() / folder_name(self._folder_key())

    def _folder_key(self) -> str:
        session = os.environ.get("JPY_SESSION_NAME", "")
        if session:
            try:
                info: ServerInfo | None = find_server()
            except ServerNotFound:
                info = None
            root_dir = getattr(info, "root_dir", "") if info else ""
            if root_dir and os.path.isabs(session):
                relative = os.path.relpath(session, root_dir)
                if not relative.startswith(".."):
                    return Path(relative).as_posix()
            return session
        kernel_id = self.kernel_id()
        return f"kernel-{kernel_id}" if kernel_id else f"pid-{os.getpid()}"

    def store(self, folder: str | os.PathLike[str] | None = None, keep: int | None = None) -> CheckpointStore:
        return CheckpointStore(Path(folder) if folder else self.folder(), keep or self.keep)

    # -- save and restore ------------------------------------------------------
    def save(
        self,
        names: list[str] | None = None,
        folder: str | os.PathLike[str] | None = None,
        keep: int | None = None,
        **info: Any,
    ) -> tuple[Generation | None, list[str]]:
        """Save names (default: every registered one). Returns the generation
        (None when there was nothing to save) and the registered names skipped
        because they are not defined."""
        explicit = names is not None
        if names is None:
            names = self.registry.names()
        skipped = []
        items: list[SaveItem] = []
        #: Names this call registers: a save that fails must not leave them behind,
        #: or the next suspend would abort on a name the user never got saved.
        new: list[str] = []
        try:
            for name in names:
                if self.registry.get(name) is None:
                    if self.registry.namespace is not None and name in self.registry.namespace:
                        self.registry.register(name)  # saving a variable by name registers it
                        new.append(name)
                    else:
                        raise NameError(f"{name!r} is neither registered nor defined in the notebook")
                try:
                    items.append(self.registry.save_item(name))
                except NameError:
                    if explicit:
                        raise
                    skipped.append(name)
            if not items:
                return None, skipped
            info.setdefault("kernel_id", self.kernel_id())
            return self.store(folder, keep).save(items, **info), skipped
        except Exception as exc:
            for name in new:
                self.registry.unregister(name)
            exc.unregistered = sorted(new)  # type: ignore[attr-defined]
            raise

    def restore(
        self,
        names: list[str] | None = None,
        folder: str | os.PathLike[str] | None = None,
        generation: str | None = None,
        ahead: dict[str, ReadAhead] | None = None,
    ) -> LoadResult:
        """Load names (default: every name in the folder) back into the namespace
        (``ahead``: what :mod:`.preload` already read and verified of them)."""
        store = self.store(folder)
        result = store.load(names, generation, ahead)
        namespace = self.registry.namespace if self.registry.namespace is not None else {}
        for name in list(result.objects):
            value = result.objects[name]
            registration = self.registry.get(name)
            if isinstance(value, CallbackFolder):
                save = registration.save if registration and registration.save else value.save
                restore = registration.restore if registration and registration.restore else value.restore
                if restore is None or save is None:
                    result.failed[name] = (
                        f"{name!r} was saved by callbacks and {value.problem}: register them again "
                        f"(jupyter_suspend.register({name!r}, save=..., restore=...)) and restore it"
                    )
                    del result.objects[name]
                    continue
                try:
                    value = restore(value.path)
                except Exception as exc:  # noqa: BLE001 - the user's callback, reported by name
                    result.failed[name] = f"the restore callback of {name!r} failed: {type(exc).__name__}: {exc}"
                    del result.objects[name]
                    continue
                self.registry.register(name, save=save, restore=restore)
                result.objects[name] = value
                if value is not None:
                    namespace[name] = value
            else:
                namespace[name] = value
                if registration is None or registration.how == "object":
                    # Follow the variable from now on: it is what the user sees.
                    self.registry.register(name)
            self.restored[name] = {
                "name": name,
                "generation": result.sources[name],
                "folder": str(store.directory),
                "time": time.time(),
            }
        return result

    # -- live state -------------------------------------------------------------
    def observation(self, names: list[str] | None = None) -> dict[str, Any]:
        """What this process says about itself, for the server's comparison."""
        ident = canary.identity()
        observed: dict[str, Any] = {
            "canary_hash": ident["hash"],
            "pid": ident["pid"],
            "process_start": ident["process_start"],
            "hostname": ident["hostname"],
            "boot_id": ident["boot_id"],
            "helper": True,
            "registered": self.registry.names(),
            "restored": sorted(self.restored),
            "names": {},
        }
        for name in names or []:
            try:
                value = self._value_of(name)
            except NameError as exc:
                observed["names"][name] = {"error": str(exc)}
                continue
            try:
                observed["names"][name] = observe(value, self.store().digest_of(name))
            except Exception as exc:  # noqa: BLE001 - unhashable objects are reported, not fatal
                observed["names"][name] = {"error": f"cannot be hashed: {type(exc).__name__}: {exc}"}
        return observed

    def _value_of(self, name: str) -> Any:
        if self.registry.get(name) is not None:
            return self.registry.value(name)
        namespace = self.registry.namespace or {}
        if name in namespace:
            return namespace[name]
        raise NameError(f"{name!r} is not defined in this kernel")

    # -- protocol handlers (the server's flush, resume and verify) --------------
    def on_probe(self, request: dict[str, Any]) -> dict[str, Any]:
        return {
            "registered": self.registry.names(),
            "uses_gpu": gpu_in_use(),
            "canary": canary.identity(),
            "checkpoint_dir": str(self.folder()),
        }

    def on_checkpoint(self, request: dict[str, Any]) -> dict[str, Any]:
        # protocol.handle already dropped a request past its deadline.
        if request.get("checkpoint_dir"):
            self.server_folder = Path(request["checkpoint_dir"])
        started = time.perf_counter()
        generation, skipped = self.save(
            None,
            self.folder(),
            operation_id=request.get("operation_id"),
            notebook_path=request.get("notebook_path"),
            request_id=request.get("request_id"),
        )
        seconds = time.perf_counter() - started
        record = self.checkpoint_record(generation, self.folder())
        checkpoints = record["checkpoints"]
        total = sum(c["bytes"] for c in checkpoints)
        message = f"{len(checkpoints)} checkpoint(s), {human_bytes(total)} in {seconds:.2f} s"
        if skipped:
            message += f"; registered but not defined, skipped: {', '.join(skipped)}"
        return {
            **record,
            "bytes": total,
            "seconds": round(seconds, 6),
            "skipped": skipped,
            "message": message,
        }

    def checkpoint_record(self, generation: Generation | None, folder: str | os.PathLike[str]) -> dict[str, Any]:
        """What the server records about a checkpoint for live-state verification: the
        per-name hashes and this process's canary (the same for the server's flush and
        for ``%checkpoint save``, which sends it to ``POST checkpoint-record``)."""
        return {
            "checkpoints": []
            if generation is None
            else [summary(entry, generation.id) for entry in generation.objects.values()],
            "canary": canary.identity(),
            "generation": generation.id if generation else None,
            "checkpoint_dir": str(folder),
        }

    def on_restore(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("checkpoint_dir"):
            self.server_folder = Path(request["checkpoint_dir"])
        names = list(request.get("names") or [])
        # The read the kernel began at its start (server's resume), when there is one.
        # Waiting for it is never slower than reading again, and never holds two copies.
        ahead, read_ahead = preload.take(self.folder(), names)
        if not names:
            return {"restored": [], "missing": [], "failed": [], "warnings": [], "message": "nothing to restore"}
        result = self.restore(names, self.folder(), ahead=ahead)
        reply = restore_reply(result)
        if read_ahead is not None:
            reply["preload"] = {**read_ahead.report(), "used": ahead is not None}
            if ahead is not None and read_ahead.started_at and read_ahead.finished_at:
                reply["message"] += (
                    f" (read and checked from the kernel's start, in "
                    f"{read_ahead.finished_at - read_ahead.started_at:.2f} s)"
                )
        return reply

    def on_verify(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"observed": self.observation(list(request.get("names") or []))}

    def register_handlers(self) -> None:
        protocol.register_handler("probe", self.on_probe)
        protocol.register_handler("checkpoint", self.on_checkpoint)
        protocol.register_handler("restore", self.on_restore)
        protocol.register_handler("verify", self.on_verify)


def summary(entry: dict[str, Any], generation: str) -> dict[str, Any]:
    """What the server journals about one saved name."""
    return {
        "name": entry["name"],
        "generation": generation,
        "kind": entry.get("kind"),
        "type": entry.get("type"),
        "bytes": entry.get("bytes", 0),
        "content_hash": entry.get("content_hash"),
        "tensors_hash": entry.get("tensors_hash"),
        "tensors": entry.get("tensors", 0),
        "devices": entry.get("devices", []),
        "serializer": entry.get("serializer"),
        "seconds": entry.get("seconds"),
    }


def restore_reply(result: LoadResult) -> dict[str, Any]:
    restored = sorted(result.objects)
    message = f"restored {len(restored)} name(s), {human_bytes(result.bytes)} in {result.seconds:.2f} s"
    if result.failed:
        message += "; failed: " + "; ".join(result.failed.values())
    if result.missing:
        message += "; not in the checkpoints: " + ", ".join(result.missing)
    return {
        "restored": restored,
        "missing": result.missing,
        "failed": [{"name": n, "message": m} for n, m in result.failed.items()],
        "warnings": result.warnings,
        "generations": result.sources,
        "bytes": result.bytes,
        "seconds": round(result.seconds, 6),
        "message": message,
    }


def human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
