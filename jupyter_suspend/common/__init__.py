"""What more than one process of jupyter-suspend needs, and nothing else.

The package is split by the process a module runs in:

* ``jupyter_suspend.server``  -- the Jupyter server extension (REST API, state machine, backends);
* ``jupyter_suspend.kernel``  -- inside user kernels (magics, application checkpoints, live-state canary);
  cheap to import, never imports ``server``;
* ``jupyter_suspend.sidecar`` -- the sidecar container, the only holder of a Kubernetes token;
  never imports ``server`` or ``kernel``;
* ``jupyter_suspend.common``  -- this package: wire contracts and pure helpers shared by those processes
  (standard library only).
"""
