"""``%suspend``, ``%suspend_status``, ``%checkpoint``, ``%verify_live_state``.

Output contracts (the JupyterLab plugin relies on them):

* ``%verify_live_state`` publishes ONE ``display_data`` whose ``text/plain``
  starts with the verdict (``LIVE``, ``COLD`` or ``MISMATCH``) and whose
  ``application/vnd.jupyter-suspend.verdict+json`` is the REST reply of
  ``POST jupyter-suspend/api/verify``; it returns None (no ``Out[]``).
* the other magics print plain text; problems go to stderr as one clear
  sentence, never a traceback.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from IPython.core.magic import Magics, line_magic, magics_class

from .client import ApiError, ServerNotFound, SuspendAPI
from .helper import KernelHelper, human_bytes, restore_reply
from .registry import NotRegistered
from .store import CorruptCheckpoint, Generation, SaveError

VERDICT_MIME = "application/vnd.jupyter-suspend.verdict+json"


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that reports instead of exiting the kernel."""

    def error(self, message: str) -> NoReturn:
        raise _Usage(f"{self.prog}: {message}\n{self.format_usage().strip()}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise _Usage(message or self.format_help())


def _suspend_parser() -> _Parser:
    p = _Parser(prog="%suspend", description="Suspend this notebook environment (after flushing everything).")
    p.add_argument("--reason", default="", help="recorded in the journal and the timeline")
    p.add_argument("--dry-run", action="store_true", help="only show what a suspend would keep and lose")
    p.add_argument("--force", action="store_true", help="suspend even if another kernel is busy (its cell is lost)")
    return p


def _checkpoint_parser() -> _Parser:
    p = _Parser(prog="%checkpoint", description="Application checkpoints of this kernel.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    save = sub.add_parser("save", help="save registered names (or the names given, registering them)")
    save.add_argument("names", nargs="*")
    save.add_argument("--dir", help="checkpoint folder (default: this notebook's)")
    save.add_argument("--keep", type=int, help="checkpoints kept per name")
    restore = sub.add_parser("restore", help="load names (default: all) back into the namespace")
    restore.add_argument("names", nargs="*")
    restore.add_argument("--dir", help="checkpoint folder (default: this notebook's)")
    restore.add_argument("--generation", help="a generation id from %%checkpoint list (default: the newest)")
    listing = sub.add_parser("list", help="registered names and checkpoints on disk")
    listing.add_argument("--dir", help="checkpoint folder (default: this notebook's)")
    listing.add_argument("--verify", action="store_true", help="check every checkpoint's SHA-256")
    add = sub.add_parser("add", help="register variables by name")
    add.add_argument("names", nargs="+")
    remove = sub.add_parser("remove", help="unregister names (their checkpoints stay on disk)")
    remove.add_argument("names", nargs="+")
    return p


def _err(message: str) -> None:
    print(f"jupyter-suspend: {message}", file=sys.stderr)


def _unregistered_note(exc: BaseException) -> str:
    """What a failed save took back: names it had registered are unregistered again."""
    names = getattr(exc, "unregistered", None) or []
    if not names:
        return ""
    listed = ", ".join(repr(n) for n in names)
    verb = "is" if len(names) == 1 else "are"
    return f"; {listed} {verb} not registered (its first save failed)"


@magics_class
class SuspendMagics(Magics):
    def __init__(self, shell: Any, kernel_helper: KernelHelper):
        super().__init__(shell=shell)
        self.kernel_helper = kernel_helper

    def _api(self) -> SuspendAPI:
        return SuspendAPI.discover(timeout=self.kernel_helper.server_timeout)

    # -- %suspend -------------------------------------------------------------
    @line_magic
    def suspend(self, line: str) -> None:
        """%suspend [--reason TEXT] [--dry-run] [--force]: suspend this environment.

        Prints the preflight, asks the server to suspend and returns at once:
        this kernel writes its checkpoints as soon as the cell ends (the server
        waits for it), so keep %suspend the last line of its cell.
        """
        try:
            args = _suspend_parser().parse_args(shlex.split(line))
            api = self._api()
            me = self.kernel_helper.kernel_id()
            if me:
                api.wait_seen_busy(me)
            preflight = api.post("suspend", {"dry_run": True})
            preflight = fill_own_line(preflight, me, self.kernel_helper.registry.names())
            print(format_preflight(preflight, me))
            if args.dry_run:
                return
            body: dict[str, Any] = {"reason": args.reason}
            if args.force:
                body["force"] = True
            try:
                accepted = api.post("suspend", body)
            except ApiError as exc:
                _err(f"suspend not started: {exc}")
                return
            operation = accepted.get("operation", {})
            names = self.kernel_helper.registry.names()
            saving = f"its checkpoints ({', '.join(names)})" if names else "no checkpoints (nothing registered)"
            print(
                f"Suspend requested: operation {operation.get('id')}. This kernel writes {saving} as soon as this "
                "cell ends; then the environment is released. Follow it with %suspend_status or the status bar."
            )
        except _Usage as exc:
            print(str(exc), file=sys.stderr)
        except (ServerNotFound, ApiError) as exc:
            _err(str(exc))

    # -- %suspend_status ------------------------------------------------------
    @line_magic
    def suspend_status(self, line: str) -> None:
        """%suspend_status: state, last restore and the last suspend cycle."""
        try:
            api = self._api()
            status = api.get("status")
            timeline = api.get("timeline")
        except (ServerNotFound, ApiError) as exc:
            _err(str(exc))
            return
        print(format_status(status, timeline, self.kernel_helper.kernel_id()))

    # -- %checkpoint ----------------------------------------------------------
    @line_magic
    def checkpoint(self, line: str) -> None:
        """%checkpoint save|restore|list|add|remove ... (see %checkpoint --help)."""
        ks = self.kernel_helper
        try:
            args = _checkpoint_parser().parse_args(shlex.split(line))
            if args.command == "add":
                for name in args.names:
                    ks.registry.register(name)
                print(f"registered for checkpoints: {', '.join(ks.registry.names())}")
            elif args.command == "remove":
                for name in args.names:
                    ks.registry.unregister(name)
                print(f"registered for checkpoints: {', '.join(ks.registry.names()) or '(none)'}")
            elif args.command == "save":
                started = time.perf_counter()
                generation, skipped = ks.save(args.names or None, args.dir, args.keep)
                seconds = time.perf_counter() - started
                if generation is None:
                    print("nothing to save: register names with %checkpoint add NAME or jupyter_suspend.register()")
                else:
                    folder = ks.store(args.dir).directory
                    print(format_saved(generation.objects, generation.id, str(folder), seconds))
                    self._record_checkpoint(generation, folder)
                if skipped:
                    _err(f"registered but not defined, not saved: {', '.join(skipped)}")
            elif args.command == "restore":
                result = ks.restore(args.names or None, args.dir, args.generation)
                print(format_restored(restore_reply(result)))
            else:
                print(format_list(ks, args.dir, args.verify))
        except _Usage as exc:
            print(str(exc), file=sys.stderr)
        except (SaveError, NameError, ValueError, TypeError, FileNotFoundError, CorruptCheckpoint) as exc:
            _err(str(exc) + _unregistered_note(exc))
        except NotRegistered as exc:
            _err(f"{exc.args[0]!r} is not registered")
        except OSError as exc:
            _err(f"checkpoint folder problem: {exc}" + _unregistered_note(exc))

    def _record_checkpoint(self, generation: Generation, folder: Path) -> None:
        """Leave the live-state record a server-side checkpoint leaves, so that
        %verify_live_state can compare with this save; say exactly what is missing
        when the server cannot take it."""
        ks = self.kernel_helper
        when = time.strftime("%H:%M:%S")
        kernel_id = ks.kernel_id()
        if kernel_id is None:
            why = "this kernel cannot tell its id (no kernel-<id>.json connection file; set JUPYTER_SUSPEND_KERNEL_ID)"
        else:
            body = {"kernel_id": kernel_id, "checkpoint": ks.checkpoint_record(generation, folder)}
            try:
                self._api().post("checkpoint-record", body)
            except (ServerNotFound, ApiError) as exc:
                why = str(exc)
            else:
                ks.unrecorded = None
                print("  recorded for %verify_live_state (this process's canary and the hashes above)")
                return
        ks.unrecorded = f"the %checkpoint save at {when} was not recorded: {why}"
        _err(
            f"saved, but not recorded for %verify_live_state: {why}. The record lives on the Jupyter server; "
            "until one is recorded (%checkpoint save with the server reachable, or a suspend or checkpoint "
            "from JupyterLab), %verify_live_state has nothing to compare with."
        )

    # -- %verify_live_state ---------------------------------------------------
    @line_magic
    def verify_live_state(self, line: str) -> None:
        """%verify_live_state [NAME ...]: did the live session come back (LIVE), is this a new
        process (COLD), or does something not add up (MISMATCH)?"""
        names = shlex.split(line)
        ks = self.kernel_helper
        kernel_id = ks.kernel_id()
        if kernel_id is None:
            _err("cannot tell this kernel's id (no kernel-<id>.json connection file); set JUPYTER_SUSPEND_KERNEL_ID")
            return
        # This kernel is busy running the magic: it observes itself and the
        # server only compares (it must not send us a request now).
        observed = ks.observation(names)
        try:
            reply = self._api().post("verify", {"kernel_id": kernel_id, "names": names, "observed": observed})
        except ApiError as exc:
            if exc.status == 404:
                print(f"NO RECORD: {exc.body.get('message', exc)}")
                if ks.unrecorded:
                    print(f"  {ks.unrecorded}")
                return
            _err(str(exc))
            return
        except ServerNotFound as exc:
            _err(str(exc))
            return
        from IPython.display import publish_display_data

        publish_display_data({"text/plain": format_verdict(reply), VERDICT_MIME: reply})


# -- formatting (pure functions) --------------------------------------------------


def fill_own_line(preflight: dict[str, Any], kernel_id: str | None, registered: list[str]) -> dict[str, Any]:
    """The server reports the kernel running %suspend as busy (it is); say what
    it will really do: it writes its checkpoints when the cell ends."""
    keeps = preflight.get("keeps", {})
    for k in preflight.get("kernels", []):
        if k.get("kernel_id") != kernel_id:
            continue
        k["helper"] = "loaded"
        k["registered"] = registered
        kept = [x for x in k.get("keeps", []) if not x.startswith("application checkpoints")]
        if registered and keeps.get("application_checkpoints"):
            kept.append("application checkpoints: " + ", ".join(registered))
        k["keeps"] = kept
        if not keeps.get("live_memory"):
            lost = [x for x in k.get("loses", []) if "variables" not in x]
            lost.insert(
                0, "variables not registered for checkpoints" if registered else "all variables in kernel memory"
            )
            k["loses"] = lost
    preflight["would_abort"] = [w for w in preflight.get("would_abort", []) if not kernel_id or kernel_id not in w]
    return preflight


def format_preflight(preflight: dict[str, Any], kernel_id: str | None) -> str:
    backend = preflight.get("backend", {})
    keeps = preflight.get("keeps", {})
    lines = [f"jupyter-suspend preflight: backend {backend.get('name')}, state {preflight.get('state')}"]
    kept = [k.replace("_", " ") for k, v in keeps.items() if v]
    lost = [k.replace("_", " ") for k, v in keeps.items() if not v]
    lines.append(f"  a suspend keeps: {', '.join(kept) or 'nothing'}; loses: {', '.join(lost) or 'nothing'}")
    for k in preflight.get("kernels", []):
        who = "this kernel" if k.get("kernel_id") == kernel_id else f"kernel {str(k.get('kernel_id'))[:8]}"
        lines.append(f"  - {k.get('path') or '(no notebook)'} [{who}, helper {k.get('helper')}]")
        if k.get("keeps"):
            lines.append(f"      keeps: {'; '.join(k['keeps'])}")
        if k.get("loses"):
            lines.append(f"      loses: {'; '.join(k['loses'])}")
    for note in preflight.get("notes", []):
        lines.append(f"  note: {note}")
    for warning in preflight.get("would_abort", []):
        lines.append(f"  would abort: {warning}")
    if not preflight.get("can_suspend", True):
        lines.append(f"  cannot suspend now (state {preflight.get('state')})")
    return "\n".join(lines)


def format_status(status: dict[str, Any], timeline: dict[str, Any], kernel_id: str | None) -> str:
    lines = [f"state: {status.get('state')}" + (f" ({status['restore']} restore)" if status.get("restore") else "")]
    if status.get("message"):
        lines.append(f"  {status['message']}")
    if status.get("failure"):
        lines.append(f"  failed: {status['failure'].get('reason')}")
        lines.append(f"  next step: {status['failure'].get('next_step')}")
    operation = status.get("operation")
    if operation and operation.get("in_progress"):
        lines.append(f"  operation in progress: {operation.get('kind')} {operation.get('id')}")
    last = status.get("last_restore")
    if last:
        lines.append(
            f"last restore: {last.get('restore')} at {last.get('time')} (operation {last.get('operation_id')})"
        )
        for kid, report in (last.get("checkpoints_restored") or {}).items():
            who = " (this kernel)" if kid == kernel_id else ""
            restored = ", ".join(report.get("restored", [])) or "none"
            lines.append(f"  {report.get('path') or kid}{who}: checkpoints restored: {restored}")
            for failure in report.get("failed", []) or []:
                lines.append(f"    failed: {failure.get('message') if isinstance(failure, dict) else failure}")
            if report.get("missing"):
                lines.append(f"    missing: {', '.join(report['missing'])}")
    else:
        lines.append("last restore: none recorded")
    cycles = timeline.get("cycles", [])
    if not cycles:
        lines.append("last cycle: none recorded")
        return "\n".join(lines)
    cycle = cycles[-1]
    lines.append(
        f"last cycle: {cycle.get('id')} - {cycle.get('outcome')}"
        + (f", {cycle['restore']} restore" if cycle.get("restore") else "")
    )
    if cycle.get("reason"):
        lines.append(f"  reason: {cycle['reason']}")
    for mark, when in (cycle.get("times") or {}).items():
        if when:
            lines.append(f"  {mark.replace('_', ' ')}: {when}")
    durations = {k: v for k, v in (cycle.get("durations") or {}).items() if v is not None}
    if durations:
        lines.append("  durations: " + ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in durations.items()))
    totals = cycle.get("released_totals") or {}
    if totals:
        # Without NVML the GPUs were not measured: say so, never "0.0000 GPU-hours".
        measured = totals.get("gpu_measured", True) and totals.get("gpu_hours") is not None
        released = cycle.get("released") or {}
        why = f" ({released['gpu_measurement']})" if isinstance(released.get("gpu_measurement"), str) else ""
        gpu = f"{totals['gpu_hours']:.4f} GPU-hours" if measured else f"GPU-hours not measured{why}"
        lines.append(
            f"  released: {gpu}, "
            f"{totals.get('kernel_memory_gib_hours', 0):.4f} GiB-hours of kernel memory"
            + (" (still suspended)" if totals.get("ongoing") else "")
        )
    for note in cycle.get("notes", []):
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def format_saved(objects: dict[str, dict[str, Any]], generation: str, folder: str, seconds: float) -> str:
    total = sum(int(o.get("bytes", 0)) for o in objects.values())
    rate = f", {human_bytes(total / seconds)}/s" if seconds > 0 and total > 2**20 else ""
    lines = [f"saved {len(objects)} name(s), {human_bytes(total)} in {seconds:.2f} s{rate}"]
    lines.append(f"  generation {generation} in {folder}")
    for name, entry in objects.items():
        on = [d for d in entry.get("devices", []) if d != "cpu"]
        devices = f" from {', '.join(on)}" if on else ""
        what = entry.get("type") or entry.get("kind")
        lines.append(f"  {name}: {human_bytes(entry.get('bytes', 0))} ({what}{devices})")
    return "\n".join(lines)


def format_restored(reply: dict[str, Any]) -> str:
    lines = [reply["message"].split(";")[0]]
    for name in reply["restored"]:
        lines.append(f"  {name}: from generation {reply['generations'][name]}")
    for failure in reply["failed"]:
        lines.append(f"  NOT restored: {failure['message']}")
    if reply["missing"]:
        lines.append(f"  not in the checkpoints: {', '.join(reply['missing'])}")
    for warning in reply["warnings"]:
        lines.append(f"  warning: {warning}")
    return "\n".join(lines)


def format_list(ks: KernelHelper, folder: str | None, verify: bool) -> str:
    registry = ks.registry
    lines = ["registered:" + ("" if registry.names() else " (none)")]
    for reg in registry.items():
        try:
            value = registry.value(reg.name) if reg.how != "callbacks" else None
            shown = type(value).__name__ if reg.how != "callbacks" else "save/restore callbacks"
        except NameError:
            shown = "not defined"
        lines.append(f"  {reg.name}: {reg.how} ({shown})")
    store = ks.store(folder)
    generations = store.generations()
    lines.append(f"checkpoints in {store.directory} (keep {store.keep} per name):" + ("" if generations else " none"))
    for gen in generations:
        total = sum(int(o.get("bytes", 0)) for o in gen.objects.values())
        lines.append(f"  {gen.id}  {gen.manifest.get('created')}  {human_bytes(total)}")
        for name, entry in gen.objects.items():
            state = ""
            if verify:
                problem = store.check(gen, name)
                state = "  CORRUPT: " + problem if problem else "  intact"
            lines.append(f"    {name}: {human_bytes(entry.get('bytes', 0))}{state}")
    for problem in store.problems:
        lines.append(f"  problem: {problem}")
    return "\n".join(lines)


def format_verdict(reply: dict[str, Any]) -> str:
    lines = [str(reply.get("message", reply.get("verdict")))]
    names = (reply.get("details") or {}).get("names") or {}
    for name, info in names.items():
        lines.append(f"  {name}: {info.get('status')}" + (f" ({info['note']})" if info.get("note") else ""))
    for note in (reply.get("details") or {}).get("notes", []):
        lines.append(f"  note: {note}")
    return "\n".join(lines)
