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
"""

from __future__ import annotations

from typing import Any

VERDICTS = ("LIVE", "COLD", "MISMATCH")

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


def compare(
    kernel_id: str,
    observed: dict[str, Any],
    record: dict[str, Any],
    restore_report: dict[str, Any] | None = None,
    names: list[str] | None = None,
) -> dict[str, Any]:
    """The verdict on one kernel (see the module docstring); the REST reply."""
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
