# jupyter-suspend on Kubeflow Notebooks v1, put on the notebook's config path by the
# PodDefault `jupyter-suspend` (JUPYTER_CONFIG_PATH): the image's own command and
# arguments stay as Kubeflow's notebook images have them.
c = get_config()  # type: ignore[name-defined]  # noqa: F821 - provided by traitlets when loading

c.SuspendApp.backend = "kubeflow-notebook"
# On the persistent volume (Kubeflow mounts the workspace volume at /home/jovyan).
c.SuspendApp.state_dir = "/home/jovyan/.jupyter-suspend"
