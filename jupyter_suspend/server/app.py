"""The jupyter-server extension: configuration and wiring, nothing else."""

from __future__ import annotations

import importlib
import os
from importlib.resources import files
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_data_dir
from jupyter_server.extension.application import ExtensionApp
from traitlets import Bool, Dict, Float, Integer, Unicode, default

from .activity import ActivityMonitor
from .backends.base import Backend
from .configuration import CheckedConfigurable, Problem, construction_problem, number_problems, summary
from .handlers import handlers, metrics_handlers, misconfigured_handlers
from .idle_policy import ClassResolver, IdlePolicy
from .journal import Journal, JournalWriteError
from .jupyter_environment import JupyterServerEnvironment
from .lifecycle import Lifecycle, LifecycleSettings
from .metrics import SuspendMetrics
from .replay import PINNED_KINDS
from .save_requests import EVENT_SCHEMA_ID as SAVE_EVENT_SCHEMA_ID
from .save_requests import SaveRequests
from .session_guard import SessionGuard, lifecycle_refusal

#: Where kernels write application checkpoints (read by ``jupyter_suspend.kernel.helper``).
KERNEL_CHECKPOINT_DIR_ENV = "JUPYTER_SUSPEND_CHECKPOINT_DIR"
EVENT_SCHEMA_ID = "https://schema.jupyter.org/jupyter_suspend/lifecycle/v1"

BACKENDS = {
    "local": "jupyter_suspend.server.backends.local:LocalBackend",
    "gke": "jupyter_suspend.server.backends.gke:GKEBackend",
    "kubeflow-notebook": "jupyter_suspend.server.backends.kubeflow:KubeflowNotebookBackend",
    "kubeflow-workspace": "jupyter_suspend.server.backends.kubeflow:KubeflowWorkspaceBackend",
    "gke-workspaces": "jupyter_suspend.server.backends.gke_workspaces:GKEWorkspacesBackend",
}


def load_backend_class(spec: str) -> type[Backend]:
    """A backend by short name (``local``) or as ``package.module:Class``."""
    target = BACKENDS.get(spec, spec)
    module_name, _, class_name = target.partition(":")
    if not class_name:
        raise ValueError(f"unknown backend {spec!r}: use one of {sorted(BACKENDS)} or 'package.module:Class'")
    cls = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise TypeError(f"{target} is not a jupyter_suspend Backend")
    return cls


def pinned_kinds(backend: Backend) -> frozenset[str]:
    """The entry kinds whose newest entry journal rotation keeps: the core's and the backend's own."""
    return PINNED_KINDS | frozenset(backend.pinned_kinds)


class SuspendApp(CheckedConfigurable, ExtensionApp):
    """Suspend a notebook environment safely and report its restore state.

    Every setting is checked at start (:mod:`.configuration`); with any problem the extension runs
    *misconfigured*: it logs each problem at ERROR, its REST API answers every call with 503 and the
    problems, its metrics say ``jupyter_suspend_misconfigured 1``, and nothing else starts.
    """

    name = "jupyter_suspend"
    # Only a server extension here: JupyterLab serves the frontend.
    load_other_extensions = True

    backend = Unicode(
        "local",
        config=True,
        help="Where suspend and resume happen: 'local' (this machine: kernels stop, "
        "memory is released) or a 'package.module:Class' implementing jupyter_suspend Backend.",
    )
    state_dir = Unicode(
        config=True,
        help="Directory on the persistent volume for the journal (must survive the pod).",
    )
    checkpoint_dir = Unicode(
        config=True,
        help="Directory on the persistent volume where kernels write application checkpoints "
        "(default: <state_dir>/checkpoints).",
    )
    flush_kernel_timeout = Float(
        60.0,
        config=True,
        help="Seconds each kernel gets to write its application checkpoints; "
        "a kernel busy for longer is reported as 'kernel busy: checkpoint skipped'.",
    )
    restore_checkpoints_on_resume = Bool(
        True, config=True, help="After a cold resume, load the application checkpoints back into the kernels."
    )
    capacity_max_wait = Float(
        3600.0, config=True, help="Seconds a resume waits for capacity before it fails with a next step."
    )
    save_answer_window = Float(
        3.0,
        config=True,
        help="Seconds every JupyterLab page connected to the event bus gets to answer a suspend's save "
        "request (a page that does not answer by then is not waited for).",
    )
    save_timeout = Float(
        30.0,
        config=True,
        help="Seconds a suspend waits for a JupyterLab page that is saving its unsaved documents; a page "
        "that has not finished by then aborts the suspend (nothing unsaved is lost).",
    )
    max_body_bytes = Integer(64 * 1024, config=True, help="Largest accepted request body, in bytes.")
    journal_max_bytes = Integer(4 * 1024 * 1024, config=True, help="Journal size that triggers rotation.")
    kernel_env = Dict(
        value_trait=Unicode(),
        config=True,
        help="Extra environment variables for kernels restarted by a resume.",
    )

    @default("state_dir")
    def _default_state_dir(self) -> str:
        return os.path.join(jupyter_data_dir(), "jupyter_suspend")

    @default("checkpoint_dir")
    def _default_checkpoint_dir(self) -> str:
        return os.path.join(self.state_dir, "checkpoints")

    #: The settings that are wrong; empty when the extension runs.
    problems: list[Problem] = []

    def configuration_problems(self) -> tuple[list[Problem], Backend | None, IdlePolicy]:
        """Every wrong setting of the extension, its backend and its idle policy (the backend and
        the policy are made here from their configuration: a backend that cannot be made is a problem)."""
        problems = [*self.config_problems, *number_problems(self)]
        idle_policy = IdlePolicy(parent=self.serverapp)
        problems += idle_policy.configuration_problems()
        backend: Backend | None = None
        try:
            backend = load_backend_class(self.backend)(parent=self)
        except Exception as exc:  # noqa: BLE001 - whatever it is, it is the backend setting that fails
            problem = construction_problem(exc, "SuspendApp.backend")
            if problem.setting == "SuspendApp.backend":
                allowed = ", ".join(BACKENDS)
                problem = Problem(problem.setting, f"{problem.message}; allowed: {allowed} or 'package.module:Class'")
            problems.append(problem)
        else:
            problems += number_problems(backend)
        return problems, backend, idle_policy

    def initialize_settings(self) -> None:
        problems, backend, self.idle_policy = self.configuration_problems()
        if problems or backend is None:
            self._run_misconfigured(problems)
            return
        journal = Journal(Path(self.state_dir), max_bytes=self.journal_max_bytes, pinned_kinds=pinned_kinds(backend))
        # Counters survive a restart: rebuilt from the journal, then they follow it entry by entry.
        self.metrics = SuspendMetrics(backend.name, last_activity=lambda: self.lifecycle.environment.last_activity())
        self.metrics.rebuild(journal.read().entries)
        journal.listeners.append(self.metrics.observe)
        self._tell_kernels_the_checkpoint_dir()
        event_logger = getattr(self.serverapp, "event_logger", None)
        if event_logger is not None:
            event_logger.register_event_schema(
                Path(str(files("jupyter_suspend.common.schemas") / "lifecycle-event.json"))
            )

        def emit(data: dict[str, Any]) -> None:
            if event_logger is not None:
                event_logger.emit(schema_id=EVENT_SCHEMA_ID, data=data)

        self.save_requests = self._save_requests(event_logger)
        self.lifecycle = Lifecycle(
            backend=backend,
            environment=JupyterServerEnvironment(self.serverapp),
            journal=journal,
            settings=LifecycleSettings(
                checkpoint_dir=Path(self.checkpoint_dir),
                flush_kernel_timeout=self.flush_kernel_timeout,
                restore_checkpoints_on_resume=self.restore_checkpoints_on_resume,
                capacity_max_wait=self.capacity_max_wait,
                kernel_env={**self.kernel_env, KERNEL_CHECKPOINT_DIR_ENV: self.checkpoint_dir},
            ),
            emit=emit,
            log=self.log,
            save_requests=self.save_requests,
        )
        try:
            self.lifecycle.recover()
        except JournalWriteError as exc:
            # The state was read; only recording it failed. Load anyway and say so
            # (status journal.problems; the journal is rechecked before each operation).
            self.log.error("jupyter-suspend: the journal cannot be written: %s", exc)
        if not journal.usable:
            self.log.error("jupyter-suspend: %s", journal.problem)
        # While suspended, no kernel starts for a notebook whose kernel the resume brings back.
        self.session_guard = SessionGuard(
            getattr(self.serverapp, "session_manager", None), lifecycle_refusal(self.lifecycle), self.log
        )
        self.session_guard.install()
        self._start_idle_policy(event_logger)
        self.settings.update(
            {
                "jupyter_suspend_lifecycle": self.lifecycle,
                "jupyter_suspend_metrics": self.metrics,
                "jupyter_suspend_max_body_bytes": self.max_body_bytes,
                "jupyter_suspend_idle_policy": self.idle_policy,
                "jupyter_suspend_save_requests": self.save_requests,
            }
        )
        self.log.info(
            "jupyter-suspend: backend %s, journal %s, state %s",
            backend.name,
            journal.path,
            self.lifecycle.state.value,
        )

    def _run_misconfigured(self, problems: list[Problem]) -> None:
        """Loud and safe: every problem at ERROR, the API answering 503 with them, the metric at 1;
        no lifecycle, no idle policy, no session guard (nothing that could act on a wrong setting)."""
        self.problems = problems
        for problem in problems:
            self.log.error("jupyter-suspend: misconfigured: %s: %s", problem.setting, problem.message)
        self.log.error("%s Every call under jupyter-suspend/api/ answers 503 with the problems.", summary(problems))
        self.metrics = SuspendMetrics(self.backend)
        self.metrics.misconfigured([p.setting for p in problems])
        self.settings.update(
            {
                "jupyter_suspend_problems": problems,
                "jupyter_suspend_metrics": self.metrics,
                "jupyter_suspend_max_body_bytes": self.max_body_bytes,
            }
        )

    def _save_requests(self, event_logger: Any) -> SaveRequests | None:
        """Save requests go out on the event bus; without one there is no page to ask."""
        if event_logger is None:
            return None
        event_logger.register_event_schema(
            Path(str(files("jupyter_suspend.common.schemas") / "save-request-event.json"))
        )

        def listeners() -> int | None:
            # jupyter_server's /api/events/subscribe adds one listener per socket for every schema
            # (SubscribeWebsocket.open -> EventLogger.add_listener(listener=...), which fills
            # _modified_listeners per registered schema: jupyter_events/logger.py). Private
            # attributes: when they are not there, the count is unknown and the whole window is waited.
            found: set[Any] = set()
            for name in ("_modified_listeners", "_unmodified_listeners"):
                table = getattr(event_logger, name, None)
                if not isinstance(table, dict):
                    return None
                found |= set(table.get(SAVE_EVENT_SCHEMA_ID, ()))
            return len(found)

        return SaveRequests(
            lambda data: event_logger.emit(schema_id=SAVE_EVENT_SCHEMA_ID, data=data),
            listeners,
            answer_window=self.save_answer_window,
            timeout=self.save_timeout,
        )

    def _tell_kernels_the_checkpoint_dir(self) -> None:
        """Every kernel this server starts writes checkpoints where the server reads them.

        jupyter_client starts local kernels with a copy of the server's environment
        (jupyter_server's sessions add ``JPY_SESSION_NAME`` to it), so the variable is
        set in this process; kernels restarted by a resume get it through ``kernel_env``
        too. The previous value comes back when the extension stops.
        """
        self._previous_checkpoint_env = os.environ.get(KERNEL_CHECKPOINT_DIR_ENV)
        os.environ[KERNEL_CHECKPOINT_DIR_ENV] = self.checkpoint_dir

    def _start_idle_policy(self, event_logger: Any) -> None:
        """The idle policy (``IdlePolicy`` traits); it ticks only when enabled, and stops with the extension."""
        from .idle_policy import EVENT_SCHEMA_ID as IDLE_EVENT_SCHEMA_ID

        if event_logger is not None:
            event_logger.register_event_schema(Path(str(files("jupyter_suspend.common.schemas") / "idle-event.json")))

        def emit_idle(data: dict[str, Any]) -> None:
            if event_logger is not None:
                event_logger.emit(schema_id=IDLE_EVENT_SCHEMA_ID, data=data)

        monitor = ActivityMonitor(self.serverapp, self.idle_policy.gpu_busy_percent)
        resolver = ClassResolver(self.lifecycle, getattr(self.serverapp, "kernel_spec_manager", None))
        self.idle_policy.setup(self.lifecycle, monitor, resolver, emit_idle)
        self.idle_policy.start()

    def initialize_handlers(self) -> None:
        self.handlers.extend(misconfigured_handlers() if self.problems else handlers())
        self.handlers.extend(metrics_handlers())

    async def stop_extension(self) -> None:
        """Stop what was made, and only that: after a failed or misconfigured start some parts
        never were, and an exception here would leave the server deaf to SIGTERM."""
        guard = getattr(self, "session_guard", None)
        if guard is not None:
            guard.uninstall()
        policy = getattr(self, "idle_policy", None)
        if policy is not None:
            await policy.stop()  # before the lifecycle: no automatic suspend starts while it stops
        lifecycle = getattr(self, "lifecycle", None)
        if lifecycle is not None:
            await lifecycle.stop()
        if (
            hasattr(self, "_previous_checkpoint_env")
            and os.environ.get(KERNEL_CHECKPOINT_DIR_ENV) == self.checkpoint_dir
        ):
            previous = getattr(self, "_previous_checkpoint_env", None)
            if previous is None:
                os.environ.pop(KERNEL_CHECKPOINT_DIR_ENV, None)
            else:
                os.environ[KERNEL_CHECKPOINT_DIR_ENV] = previous
