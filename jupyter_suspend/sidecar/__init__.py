"""The sidecar container: requests GKE Pod Snapshots of its own pod.

It runs in a second container of the notebook pod, holds the only Kubernetes
service-account token of the pod, and answers the server extension over a Unix
socket (:mod:`jupyter_suspend.common.sidecar_protocol`). It never imports the
server extension, jupyter_server or the kernel side.

Run it with ``jupyter-suspend-sidecar --help`` or ``python -m jupyter_suspend.sidecar``.
"""
