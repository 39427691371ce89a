"""``jupyter suspend``: the top-level command and its subcommands (imported only when used)."""

from __future__ import annotations

from .base import GroupApp

SUBCOMMANDS = {
    "status": ("jupyter_suspend.cli.resume.StatusApp", "The state of one suspended or running environment."),
    "resume": ("jupyter_suspend.cli.resume.ResumeApp", "Resume an environment from outside and follow it."),
    "snapshots": ("jupyter_suspend.cli.snapshots.SnapshotsApp", "List, delete and prune pod snapshots."),
    "release": (
        "jupyter_suspend.cli.release.ReleaseApp",
        "Scale a StatefulSet to 0 once its suspend's snapshot is Ready (once, or --watch a namespace).",
    ),
    "release-check": (
        "jupyter_suspend.cli.release_check.ReleaseCheckApp",
        "Check that a platform change keeps live state (prepare, then verify).",
    ),
    "report": ("jupyter_suspend.cli.report.ReportApp", "What suspending saved, from journals."),
    "simulate": ("jupyter_suspend.cli.simulate.SimulateApp", "Hours released per idle threshold."),
}


class SuspendCommandApp(GroupApp):
    name = "suspend"
    description = "Suspend and resume notebook environments from outside, manage snapshots, measure what it saved."
    subcommands = SUBCOMMANDS


main = SuspendCommandApp.launch_instance

if __name__ == "__main__":
    main()
