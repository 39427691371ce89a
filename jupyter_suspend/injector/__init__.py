"""``jupyter-suspend-injector``: a mutating admission webhook that adds the jupyter-suspend sidecar to notebook pods.

For platforms whose notebook pod template has no place for a second container (Kubeflow Workspaces: a
WorkspaceKind's ``podTemplate`` has no containers, and the controller builds the one container ``main``; GKE
Workspaces adds its own pieces the same way, by a Pod mutating webhook). Where Kubeflow's PodDefault webhook runs,
a PodDefault does the same job without this process (docs/platforms.md).

:mod:`.mutation` decides (pure, no I/O); :mod:`.server` is the HTTPS endpoint the API server calls
(``python -m jupyter_suspend.injector --cert … --key … --port …``).
"""
