"""Every sentence the server says about what a suspend does and did.

Built from the backend's :class:`~jupyter_suspend.server.backends.base.Capabilities`
(and, where there is one, its report), never spelled per backend elsewhere:
the status messages, the preflight's keeps/loses, the cold-start reading and
``backend.text`` of ``GET status``, which the plugin shows as it is. A new
backend with other capabilities gets true sentences without touching this
module; a capability that changes what can honestly be said is read here.
Pure: no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .states import State

if TYPE_CHECKING:
    from .backends.base import Capabilities, Suspended
    from .environment import KernelRecord

# -- fixed step messages (the same on every backend) -------------------------------------
FLUSHING = "saving notebooks and application checkpoints"
RELEASING = "releasing the environment"
ACKNOWLEDGED = "failure acknowledged by the user"
CAPACITY_BACK = "capacity available; restarting"


JOURNAL_NEXT_STEP = "Free disk space or fix the permissions of the state directory, then try again."


def journal_failed(error: Exception) -> str:
    return f"the journal cannot be written: {error}"


def gpu_not_measured(reason: str) -> str:
    return f"GPU memory is not measured here ({reason})."


def abort(reason: str) -> str:
    return f"suspend aborted, nothing was released: {reason}"


def ready(restore: str, errors: list[str] | None = None) -> str:
    message = f"ready ({restore} restore)"
    if errors:
        message += "; " + "; ".join(errors)
    return message


def returned_live(snapshot: str) -> str:
    return f"restored from snapshot {snapshot}; verifying"


def live_lost(message: str, kernels: list[dict[str, Any]]) -> str:
    """The status message after a live restore once kernels it verified LIVE are not that process any
    more (:func:`~jupyter_suspend.server.live_state.live_lost`): ``message`` plus what each lost."""
    parts = [message] if message else []
    for kernel in kernels:
        name = kernel.get("path") or kernel.get("kernel_id")
        if kernel.get("reason") == "restarted":
            parts.append(f"kernel {name} was restarted since the live restore: its memory is not the restored one")
        else:
            parts.append(f"kernel {name} has stopped since the live restore: its restored memory is lost")
    return "; ".join(parts)


# -- derived from the capabilities ------------------------------------------------------
def release_step(caps: Capabilities) -> str:
    """What the release does, as a step label."""
    parts = []
    if caps.releases_node:
        parts.append("snapshotting the pod" if caps.keeps_live_memory else "stopping the pod")
        parts.append("releasing the node")
    elif caps.releases_kernel_memory:
        parts.append("stopping the kernels")
        parts.append("releasing their memory")
    return " and ".join(parts) or RELEASING


def restore_step(caps: Capabilities) -> str:
    """What the resume does, as a step label."""
    if caps.keeps_live_memory:
        return "restoring the pod from its snapshot"
    if caps.releases_kernel_memory:
        return "restarting the recorded sessions"
    return "restoring the environment"


def resuming(caps: Capabilities) -> str:
    """The status message while a resume runs."""
    return restore_step(caps)


def resuming_after_cold_start(caps: Capabilities, restore_checkpoints: bool) -> str:
    """The status message while a new server process resumes by itself (the
    platform brought the environment back without its live state: a cold start)."""
    text = ("the pod" if caps.releases_node else "the environment") + " started cold"
    if caps.keeps_live_memory:
        text += ", not from its snapshot"
    text += ": starting the recorded sessions again"
    if restore_checkpoints and caps.keeps_application_checkpoints:
        text += " and restoring their application checkpoints"
    return text


def suspended(caps: Capabilities, outcome: Suspended | None = None) -> str:
    """The status message once the environment is down, from what was released and measured."""
    done = []
    if caps.releases_node:
        done.append("node released")
    if caps.keeps_live_memory:
        done.append("kernels frozen in the snapshot")
    elif caps.releases_kernel_memory:
        still = (outcome.resume_plan.get("still_running_pids") if outcome else None) or []
        if still:
            done.append(f"kernels stopped, {len(still)} process(es) still holding memory")
        else:
            done.append("kernels stopped, memory released")
    return "suspended: " + (", ".join(done) if done else "nothing released")


def while_suspended(caps: Capabilities) -> str:
    if caps.server_survives_suspend:
        text = "This server keeps answering"
        text += "; the kernels are stopped and their memory is free." if caps.releases_kernel_memory else "."
    elif caps.keeps_live_memory:
        text = "This server is frozen with the pod and answers again once the pod is back"
        text += "; the node goes back to the pool." if caps.releases_node else "."
    else:
        text = (
            "This server stops with the pod; a new pod starts it again and it restarts the recorded sessions "
            "from files and application checkpoints"
        )
        text += "; the node goes back to the pool." if caps.releases_node else "."
    if caps.needs_sidecar:
        text += " " + _SIDECAR_ROLE[caps.keeps_live_memory]
    return text


#: What the sidecar does at a suspend: snapshot the pod (live memory kept) or stop the workload (files only).
_SIDECAR_ROLE = {
    True: "The sidecar beside this server takes the snapshot.",
    False: "The sidecar beside this server asks the platform to stop the workload.",
}


def resume_by(caps: Capabilities) -> str:
    """Who performs the resume."""
    if caps.resume_from_server:
        return "this server: Resume " + restore_step(caps).replace("restarting", "restarts", 1)
    return "the platform: reopen the workspace; this server then reports what came back"


def keeps(caps: Capabilities) -> list[str]:
    items = []
    if caps.keeps_files:
        items.append("notebooks and other files")
    if caps.keeps_application_checkpoints:
        items.append("application checkpoints")
    if caps.keeps_live_memory:
        items.append("variables in kernel memory")
    if caps.keeps_gpu_memory:
        items.append("tensors in GPU memory")
    return items


def loses(caps: Capabilities) -> list[str]:
    items = []
    if not caps.keeps_files:
        items.append("files outside the persistent volume")
    if not caps.keeps_live_memory:
        items.append(
            "variables in kernel memory that are not in application checkpoints"
            if caps.keeps_application_checkpoints
            else "variables in kernel memory"
        )
    if not caps.keeps_gpu_memory:
        items.append("tensors in GPU memory (reloaded from checkpoints)")
    return items


def backend_text(caps: Capabilities) -> dict[str, Any]:
    """``backend.text`` of ``GET status``: what the plugin shows instead of its own words."""
    return {
        "keeps": keeps(caps),
        "loses": loses(caps),
        "release_step": release_step(caps),
        "restore_step": restore_step(caps),
        "while_suspended": while_suspended(caps),
        "resume_by": resume_by(caps),
    }


def preflight_notes(caps: Capabilities) -> list[str]:
    notes = []
    if caps.releases_kernel_memory and not caps.keeps_live_memory:
        notes.append("Kernels will be shut down: variables in memory come back only from application checkpoints.")
    if caps.needs_sidecar:
        work = "The snapshot is taken" if caps.keeps_live_memory else "The workload is stopped"
        notes.append(f"{work} by the sidecar: it must be running beside this server.")
    if not caps.resume_from_server:
        notes.append("The platform resumes the environment, not this server.")
    return notes


def kernel_keeps_loses(
    caps: Capabilities, record: KernelRecord, registered: list[str], uses_gpu: bool
) -> tuple[list[str], list[str]]:
    """What a suspend keeps and loses of one kernel (the preflight's lists)."""
    kept = ["notebook file on disk"] if record.type == "notebook" and caps.keeps_files else []
    lost = []
    if registered and caps.keeps_application_checkpoints:
        kept.append("application checkpoints: " + ", ".join(registered))
    if caps.keeps_live_memory:
        kept.append("all variables in kernel memory")
    else:
        lost.append("variables not registered for checkpoints" if registered else "all variables in kernel memory")
    if uses_gpu:
        (kept if caps.keeps_gpu_memory else lost).append("tensors in GPU memory")
    return kept, lost


def backend_check_failed(what: str, error: str) -> str:
    """A preflight note or blocker when the backend's own check failed."""
    return f"the backend's preflight {what} could not be checked: {error}"


def would_abort(record: KernelRecord) -> str:
    return f"kernel {record.kernel_id} ({record.path or 'no notebook'}) is busy; wait, interrupt it, or use force"


def busy_kernels_abort(names: str) -> str:
    return (
        f"kernel busy: checkpoint skipped for {names}; suspending now would lose its work. "
        "Wait for the cell to finish or interrupt it, or suspend with force."
    )


def release_failed(caps: Capabilities, error: str) -> tuple[str, str]:
    """(reason, next step) after a release that failed part-way."""
    next_step = "Notebooks and checkpoints were flushed. "
    if caps.resume_from_server:
        next_step += f"Resume ({restore_step(caps)}); or acknowledge and start kernels by hand."
    else:
        next_step += "Acknowledge and start kernels by hand."
    return f"releasing the environment failed part-way: {error}", next_step


def no_capacity(waited: float, reason: str) -> tuple[str, str]:
    """(reason, next step) after a resume gave up waiting for capacity."""
    return (
        f"no capacity after {waited:g}s: {reason}",
        "Resume again later, or recover the work from the notebook and its checkpoints on another machine.",
    )


# -- a server that starts cold --------------------------------------------------------
def cold_start(caps: Capabilities, last_state: State, state: State, when: str) -> tuple[str, str]:
    """(message, next step) for a server that finds the journal of a previous process
    which last recorded ``last_state``, and now is in ``state``."""
    resume = (
        "The recorded sessions can be resumed." if caps.resume_from_server else "The platform resumes the environment."
    )
    if state == State.SUSPENDED and last_state == State.SNAPSHOTTING:
        return (
            f"The server stopped during the release ({release_step(caps)}) at {when}. "
            "Flushed files and checkpoints are on disk. " + resume,
            "",
        )
    if state == State.SUSPENDED:
        return f"The server restarted while suspended (last recorded {last_state.value} at {when}). " + resume, ""
    if last_state == State.FLUSHING:
        return f"The server stopped during a flush at {when}; nothing had been released by jupyter-suspend.", ""
    if state == State.FAILED:
        next_step = "Acknowledge to carry on without the recorded sessions."
        if caps.resume_from_server:
            next_step = f"Resume retries {restore_step(caps)}; acknowledge to carry on without them."
        return previous_failure(when), next_step
    return "", ""


def previous_failure(when: str) -> str:
    return f"The previous server recorded a failure at {when}."


def cold_start_failed(when: str) -> tuple[str, str]:
    """(message, next step) for a new pod whose previous server recorded a failure, on a
    platform whose server does not survive a suspend (the gke and Kubeflow backends)."""
    return (
        previous_failure(when),
        "Acknowledge to carry on; start kernels by hand and restore application checkpoints with %checkpoint restore.",
    )


def nothing_to_resume(last_state: State, when: str) -> str:
    return f"The previous server recorded {last_state.value} at {when}; nothing was left to resume."


def server_restarted(caps: Capabilities, message: str) -> str:
    """The cold-start message as the status says it: on a platform whose
    server does not survive a suspend, a new process is news of its own."""
    if caps.server_survives_suspend or not message:
        return message
    return "The server restarted: this is a new server process, not the one that was suspended. " + message


def unsaved_documents(problems: list[str]) -> str:
    """A suspend stops rather than lose what a JupyterLab page could not save."""
    return "unsaved documents could not be saved: " + "; ".join(problems) + ". Save them (or close them), then suspend."
