"""Server configuration of the UI tests: Galata's, plus jupyter-suspend.

The extension runs with its real default backend (local) and a fresh state
directory, so each run starts from "running" with an empty journal.
"""

import json
import os
import shutil
import sys
from pathlib import Path
from tempfile import mkdtemp

from jupyterlab.galata import configure_jupyter_server

c = get_config()  # noqa: F821 - provided by the config loader

configure_jupyter_server(c)

c.ServerApp.port = int(os.environ.get("JUPYTER_SUSPEND_UI_PORT", "8877"))
c.ServerApp.ip = "127.0.0.1"
# CI and these machines run as root.
c.ServerApp.allow_root = True

state_dir = mkdtemp(prefix="jupyter-suspend-ui-state-")
c.SuspendApp.state_dir = state_dir
c.SuspendApp.flush_kernel_timeout = 20.0

# A kernelspec of our own that the "failed" test removes while suspended, the
# way a platform upgrade can remove an environment a suspended session used.
# JUPYTER_PATH is read when the kernelspec manager starts, after this file.
extra_path = Path(os.environ.get("JUPYTER_SUSPEND_UI_KERNELS", mkdtemp(prefix="jupyter-suspend-ui-kernels-")))
spec_dir = extra_path / "kernels" / "suspend-test-python"
shutil.rmtree(spec_dir, ignore_errors=True)
spec_dir.mkdir(parents=True)
(spec_dir / "kernel.json").write_text(
    json.dumps(
        {
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (removable)",
            "language": "python",
        }
    )
)
os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in [str(extra_path), os.environ.get("JUPYTER_PATH", "")] if p)
print(f"jupyter-suspend UI tests: state {state_dir}, kernelspec {spec_dir}", flush=True)

# The idle policy (tests/idle.spec.ts): on, but patient (a day) unless an open
# notebook names the tiny class in its metadata; that test's warning lasts long
# enough that no automatic suspend reaches the other tests.
c.IdlePolicy.enabled = True
c.IdlePolicy.tick_seconds = 0.5
c.IdlePolicy.default_cycle_seconds = 0.1
# The suite's own suspend/resume cycles come back within a second: the
# break-even guard would learn that nobody stays away and refuse every
# automatic suspend for the tests that run after them (the guard is tested in
# tests/test_idle_policy.py).
c.IdlePolicy.break_even_factor = 0.0
c.IdlePolicy.default_workload_class = "ui-patient"
c.IdlePolicy.workload_classes = {
    "ui-patient": {"idle_seconds": 86400.0},
    "ui-tiny": {"idle_seconds": 3.0, "warning_seconds": 600.0},
    # tests/issue17.spec.ts: an automatic suspend with no warning, 10 s after the notebook went idle
    # (time for the test to leave an unsaved edit in the tab first, on a loaded machine).
    "ui-auto": {"idle_seconds": 10.0, "warning_seconds": 0.0, "min_running_seconds": 0.0},
}

# Reproducing a flake: JUPYTER_SUSPEND_UI_DEBUG=1 logs jupyter_server's kernel
# websocket steps (nudges, buffers) to jupyter-server.log.
if os.environ.get("JUPYTER_SUSPEND_UI_DEBUG") == "1":
    c.ServerApp.log_level = "DEBUG"
