# jupyter-suspend on Kubeflow Workspaces, put on the notebook's config path by
# jupyter-suspend-injector (JUPYTER_CONFIG_PATH=/etc/jupyter-suspend-platform:...):
# the image's own command and arguments stay as the Workspace controller runs them.
# On GKE Workspaces with its snapshot add-on, use "gke-workspaces" instead.
c = get_config()  # type: ignore[name-defined]  # noqa: F821 - provided by traitlets when loading

c.SuspendApp.backend = "kubeflow-workspace"
# On the home volume (the WorkspaceKind's volumeMounts.home).
c.SuspendApp.state_dir = "/home/jovyan/.jupyter-suspend"
