"""Did the live session come back? The one comparison behind every verdict.

An *observation* is what a kernel says about itself now (or, for a kernel
without the helper, what the server sees from outside): the hash of its
in-memory canary, its pid and process start time, and per-name content
hashes. A *record* is what the journal holds for that kernel id from the last
suspend (or checkpoint): the canary identity and the per-name hashes written
with the checkpoints. :func:`compare` turns the two, plus the last restore
report, into one of three verdicts:

* ``LIVE``: the canary matches, so this is the same process, memory included;
* ``COLD``: a new process (a restart with the same notebook open); which
  checkpoints were restored into it;
* ``MISMATCH``: something does not add up (an object differs from what was
  saved, a restored name is missing, or the identity is contradictory).

:func:`compare` is pure (no I/O), so the REST endpoint, the magic and the
lifecycle's check after a live restore all say the same thing.

:class:`LiveStateRecords` keeps the records (rebuilt from the journal at
start-up by :func:`~jupyter_suspend.server.replay.replay`) and answers
``POST verify`` by observing a kernel through the
:class:`~jupyter_suspend.server.environment.Environment`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .environment import Environment, KernelProcess

#: Process start times are read from /proc in the kernel and through psutil
#: in the server; both round to clock ticks.
START_TOLERANCE_SECONDS = 1.0


class VerifyError(Exception):
    """Verification cannot run; maps to a 4xx answer."""

    def __init__(self, status_code: int, message: str, kernel_id: str):
        super().__init__(message)
        self.status_code = status_code
        self.kernel_id = kernel_id


def record_from_flush(
    kernel: dict[str, Any], source: str, operation_id: str | None, time: str | None
) -> dict[str, Any]:
    """The record of one kernel from a journal ``flushed``/``checkpointed`` entry."""
    return {
        "kernel_id": kernel.get("kernel_id"),
        "path": kernel.get("path"),
        "source": source,
        "operation_id": operation_id,
        "time": time,
        "canary": kernel.get("canary") or {},
        "checkpoints": list(kernel.get("checkpoints") or []),
        "checkpoint_dir": kernel.get("checkpoint_dir"),
    }


def external_observation(pid: int | None, process_start: float | None, names: list[str] | None) -> dict[str, Any]:
    """What the server can see of a kernel without the helper: pid and start time."""
    return {
        "canary_hash": None,
        "pid": pid,
        "process_start": process_start,
        "helper": False,
        "names": {n: {"error": "the jupyter_suspend helper is not loaded in this kernel"} for n in names or []},
    }


def _restored_from_report(kernel_id: str, report: dict[str, Any] | None, record: dict[str, Any]) -> list[str] | None:
    if not report:
        return None
    if record.get("time") and report.get("time") and str(report["time"]) < str(record["time"]):
        return None  # that restore happened before the record: not about this process
    entry = (report.get("checkpoints_restored") or {}).get(kernel_id)
    return list(entry.get("restored", [])) if entry else None


def _compare_names(
    names: list[str], observed: dict[str, Any], record: dict[str, Any]
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    saved = {c.get("name"): c for c in record.get("checkpoints", []) if c.get("name")}
    results: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    seen = observed.get("names") or {}
    for name in names:
        got = seen.get(name) or {"error": "not observed"}
        rec = saved.get(name)
        info: dict[str, Any] = {
            "recorded": rec.get("content_hash") if rec else None,
            "observed": got.get("content_hash"),
        }
        if rec is None:
            info["status"] = "not_recorded"
            info["note"] = f"no checkpoint of {name!r} was recorded at the {record.get('source')}"
        elif "error" in got:
            not_defined = "not defined" in str(got["error"]) or "not observed" in str(got["error"])
            info["status"] = "missing" if not_defined else "unhashable"
            info["note"] = str(got["error"])
            if not_defined:
                problems.append(f"{name} is not in the kernel")
        elif rec.get("content_hash") is None:
            info["status"] = "not_comparable"
            info["note"] = "saved by callbacks: no content hash"
        elif rec["content_hash"] == got.get("content_hash"):
            info["status"] = "match"
        else:
            info["status"] = "differs"
            same_tensors = rec.get("tensors_hash") and rec.get("tensors_hash") == got.get("tensors_hash")
            info["note"] = (
                "its arrays/tensors are identical; the rest of the object differs"
                if same_tensors
                else "its content differs from the checkpoint"
            )
            problems.append(f"{name} differs from what was saved at the {record.get('source')}")
        results[name] = info
    return results, problems


def _claim_problems(
    kernel_id: str, obs_pid: Any, obs_start: Any, rec_pid: Any, server_view: dict[str, Any]
) -> list[str]:
    """Where an observation a client sent contradicts what the server sees of the kernel's process."""
    seen_pid, seen_start = server_view.get("pid"), server_view.get("process_start")
    if obs_pid != seen_pid:
        return [f"the observation sent names pid {obs_pid}, but kernel {kernel_id} is pid {seen_pid}"]
    if (
        obs_start is not None
        and seen_start is not None
        and abs(float(obs_start) - float(seen_start)) > START_TOLERANCE_SECONDS
    ):
        return [f"the observation sent names a process started at {obs_start}; pid {seen_pid} started at {seen_start}"]
    return []


def compare(
    kernel_id: str,
    observed: dict[str, Any],
    record: dict[str, Any],
    restore_report: dict[str, Any] | None = None,
    names: list[str] | None = None,
    server_view: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The verdict on one kernel (see the module docstring); the REST reply.

    ``server_view`` (``pid``, ``process_start``: what the server itself sees of the kernel's process) is
    given when ``observed`` is a client's claim: the claim must agree with it, and only the server's own
    view of the process can make it the recorded one (a claimed canary confirms, never decides).
    """
    names = list(names or [])
    canary = record.get("canary") or {}
    rec_hash, rec_pid, rec_start = canary.get("hash"), canary.get("pid"), canary.get("process_start")
    obs_hash, obs_pid, obs_start = observed.get("canary_hash"), observed.get("pid"), observed.get("process_start")
    same_pid = rec_pid is not None and rec_pid == obs_pid
    starts_known = rec_start is not None and obs_start is not None
    same_start = False
    if rec_start is not None and obs_start is not None:
        same_start = abs(float(rec_start) - float(obs_start)) <= START_TOLERANCE_SECONDS
    since = f"the {record.get('source', 'suspend')} at {record.get('time') or 'an unrecorded time'}"
    notes: list[str] = []
    problems: list[str] = []

    if obs_hash and rec_hash:
        canary_state = "match" if obs_hash == rec_hash else "differs"
        if canary_state == "match":
            process = "same"
            if not same_pid:
                notes.append(f"pid is {obs_pid}, was {rec_pid}, yet the in-memory canary matches")
            if starts_known and not same_start:
                notes.append("process start time moved (expected after a snapshot restore: the clock jumps)")
        elif same_pid and same_start:
            process = "same"
            problems.append("same pid and start time but a different canary (was the extension state reset?)")
        else:
            process = "new"
    else:
        canary_state = "unavailable"
        process = "same" if same_pid and (same_start or not starts_known) else "new"
        if not rec_hash:
            notes.append(f"no canary was recorded at {since}: judged by pid and start time only")
        else:
            notes.append("the jupyter_suspend helper is not loaded in this kernel: judged by pid and start time only")

    if server_view is not None:
        problems += _claim_problems(kernel_id, obs_pid, obs_start, rec_pid, server_view)
        if process == "same" and rec_pid != server_view.get("pid"):
            problems.append(
                f"the observation sent claims the recorded process, but kernel {kernel_id} is pid "
                f"{server_view.get('pid')} and pid {rec_pid} was recorded"
            )

    name_results, name_problems = _compare_names(names, observed, record)
    problems += name_problems

    # The kernel knows what it restored itself; without the helper, the last
    # restore report says what the server put back into it.
    if observed.get("restored") is not None:
        restored = list(observed["restored"])
    else:
        restored = _restored_from_report(kernel_id, restore_report, record) or []

    if problems:
        verdict = "MISMATCH"
        message = "MISMATCH: " + "; ".join(problems)
    elif process == "same":
        verdict = "LIVE"
        message = f"LIVE: same kernel process (pid {obs_pid}) survived since {since}"
        message += "; canary matches" if canary_state == "match" else "; pid and start time match"
        matched = [n for n, i in name_results.items() if i["status"] == "match"]
        if matched:
            message += f"; unchanged: {', '.join(matched)}"
    else:
        verdict = "COLD"
        message = f"COLD: new kernel process (pid {obs_pid}; pid {rec_pid} recorded at {since})"
        message += f"; checkpoints restored: {', '.join(restored)}" if restored else "; no checkpoints restored"
        matched = [n for n, i in name_results.items() if i["status"] == "match"]
        if matched:
            message += f"; identical to the saved objects: {', '.join(matched)}"

    return {
        "verdict": verdict,
        "kernel_id": kernel_id,
        "message": message,
        "details": {
            "process": process,
            "canary": canary_state,
            "recorded": {
                "source": record.get("source"),
                "operation_id": record.get("operation_id"),
                "time": record.get("time"),
                "pid": rec_pid,
                "process_start": rec_start,
                "canary_hash": rec_hash,
                "path": record.get("path"),
            },
            "observed": {
                "pid": obs_pid,
                "process_start": obs_start,
                "canary_hash": obs_hash,
                "helper": observed.get("helper", obs_hash is not None),
            },
            "names": name_results,
            "notes": notes,
        },
        "checkpoints_restored": restored,
    }


def record_live_state(
    records: dict[str, dict[str, Any]], kernels: list[dict[str, Any]], source: str, entry: dict[str, Any]
) -> None:
    """Keep in ``records`` what identifies each kernel's process at a suspend or
    checkpoint (``kernels`` as in a ``flushed``/``checkpointed`` entry): its
    canary when the helper answered, else the pid and start time the server saw
    (enough to prove a restart, never enough to claim LIVE)."""
    for kernel in kernels:
        kernel_id = kernel.get("kernel_id")
        if not kernel_id:
            continue
        if kernel.get("status") == "checkpointed" and kernel.get("canary"):
            records[kernel_id] = record_from_flush(kernel, source, entry.get("operation_id"), entry.get("time"))
            continue
        if kernel.get("pid") is None:
            continue
        known = records.get(kernel_id, {}).get("canary", {})
        if known.get("hash") and known.get("pid") == kernel["pid"]:
            continue  # the same process's canary from an earlier checkpoint says more
        identity = {"pid": kernel["pid"], "process_start": kernel.get("process_start")}
        records[kernel_id] = record_from_flush(
            {**kernel, "canary": identity}, source, entry.get("operation_id"), entry.get("time")
        )


def live_lost(
    verification: list[dict[str, Any]] | None, process_now: Callable[[str], KernelProcess | None]
) -> list[dict[str, Any]]:
    """The kernels a restore verified LIVE whose process is not the verified one any more: their memory
    is not the restored one. Pure.

    ``verification``: the restore's verdicts (``last_restore.verification``). ``process_now(kernel_id)``:
    what the server sees of that kernel's process now, without asking the kernel
    (:meth:`Environment.kernel_process`), or None when the server has no such kernel. A new
    pid is a restart; no kernel, or the verified pid no longer running, is gone. What the server cannot read
    is not judged. (The process start is not compared: a snapshot restore moves it, see :func:`compare`.)
    """
    lost = []
    for result in verification or []:
        kernel_id = result.get("kernel_id")
        if result.get("verdict") != "LIVE" or not kernel_id:
            continue
        details = result.get("details") or {}
        verified_pid = (details.get("observed") or {}).get("pid")
        now = process_now(kernel_id)
        pid = now.pid if now else None
        if now is None:
            reason = "gone"
        elif pid is not None and verified_pid is not None and pid != verified_pid:
            reason = "restarted"
        elif now.running is False:
            reason = "gone"
        else:
            continue
        lost.append(
            {
                "kernel_id": kernel_id,
                "path": (details.get("recorded") or {}).get("path"),
                "reason": reason,
                "verified_pid": verified_pid,
                "pid": pid if reason == "restarted" else None,
            }
        )
    return lost


class LiveStateRecords:
    """The live-state record of every kernel, and the verdicts against them."""

    def __init__(self, environment: Environment, records: dict[str, dict[str, Any]] | None = None):
        self.environment = environment
        #: kernel id -> the record of its last suspend or checkpoint
        self.records: dict[str, dict[str, Any]] = dict(records or {})

    def record(self, kernels: list[dict[str, Any]], source: str, entry: dict[str, Any]) -> None:
        record_live_state(self.records, kernels, source, entry)

    async def observe(self, kernel_id: str, names: list[str], timeout: float, state: str) -> dict[str, Any]:
        """Ask a kernel for its observation (or look at it from outside when it
        has no helper); VerifyError when it cannot answer within ``timeout``."""
        record = {k.kernel_id: k for k in await self.environment.kernels()}.get(kernel_id)
        if record is None:
            raise VerifyError(409, f"kernel {kernel_id} is not running (state {state}): nothing to observe", kernel_id)
        reply = await self.environment.kernel_request(kernel_id, "verify", timeout, names=names)
        if reply.busy:
            raise VerifyError(
                409, f"kernel {kernel_id} is busy: run %verify_live_state in it, or retry when it is idle", kernel_id
            )
        if reply.ok and isinstance(reply.content.get("observed"), dict):
            observed: dict[str, Any] = reply.content["observed"]
            return observed
        if reply.no_helper:
            return external_observation(record.pid, record.process_start, names)
        raise VerifyError(409, f"kernel {kernel_id} could not be observed: {reply.message}", kernel_id)

    async def verify(
        self,
        kernel_id: str,
        names: list[str] | None,
        observed: dict[str, Any] | None,
        *,
        last_restore: dict[str, Any] | None,
        state: str,
        timeout: float,
    ) -> dict[str, Any]:
        """The verdict on one kernel against its last suspend or checkpoint record.

        With ``observed`` (what %verify_live_state sends: the kernel is busy running the magic) compare
        that claim, held to what the server itself sees of the kernel's process (any client may send
        one); otherwise ask the kernel. The caller journals the verdict.
        """
        record = self.records.get(kernel_id)
        if record is None:
            running = self.environment.has_kernel(kernel_id)
            raise VerifyError(
                404,
                f"no suspend or checkpoint recorded for kernel {kernel_id}: nothing to compare with"
                + (" (suspend or checkpoint first)" if running else ""),
                kernel_id,
            )
        if observed is None:
            # The state the server tracks can lag; a busy-looking kernel gets a short chance.
            busy = any(k.kernel_id == kernel_id and k.reported_busy for k in await self.environment.kernels())
            observed = await self.observe(kernel_id, list(names or []), min(2.0 if busy else 10.0, timeout), state)
            return compare(kernel_id, observed, record, last_restore, names)
        seen = next((k for k in await self.environment.kernels() if k.kernel_id == kernel_id), None)
        if seen is None or seen.pid is None:
            raise VerifyError(
                409,
                f"kernel {kernel_id} is not a running process this server can see (state {state}): "
                "an observation sent for it cannot be checked",
                kernel_id,
            )
        server_view = {"pid": seen.pid, "process_start": seen.process_start}
        return compare(kernel_id, observed, record, last_restore, names, server_view)

    async def verify_canaries(self, flushed_kernels: list[dict[str, Any]], timeout: float) -> list[dict[str, Any]]:
        """Compare each kernel's live-state canary with the one recorded at the suspend."""
        results = []
        for flushed in flushed_kernels:
            kernel_id = flushed["kernel_id"]
            if not flushed.get("canary"):
                continue
            record = self.records.get(kernel_id) or record_from_flush(flushed, "suspend", None, None)
            try:
                observed = await self.observe(kernel_id, [], timeout, "restoring")
            except VerifyError as exc:
                # Unproven is not live.
                results.append({"kernel_id": kernel_id, "verdict": "COLD", "message": f"not verified: {exc}"})
                continue
            result = compare(kernel_id, observed, record, None, [])
            results.append({k: result[k] for k in ("kernel_id", "verdict", "message", "details")})
        return results
