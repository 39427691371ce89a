"""The Kubernetes objects that own a notebook pod, named once for the sidecar, the backends and the CLI.

Facts from docs (see ../shared/docs/platform-facts.md §1-3); standard library only.
"""

from __future__ import annotations

from typing import Final, Literal

#: What ``jupyter suspend --kind`` accepts and what a backend reports as its workload.
WorkloadKind = Literal["statefulset", "notebook", "workspace"]
WORKLOAD_KINDS: Final[tuple[WorkloadKind, ...]] = ("statefulset", "notebook", "workspace")

# -- GKE Pod Snapshots ----------------------------------------------------------------------------
PODSNAPSHOT_GROUP: Final = "podsnapshot.gke.io"
PODSNAPSHOT_VERSION: Final = "v1"
#: On a new pod: restore from this snapshot and no other.
PIN_SNAPSHOT_ANNOTATION: Final = "podsnapshot.gke.io/ps-name"
#: On a PodSnapshot: the pod it was taken from.
ORIGIN_POD_ANNOTATION: Final = "podsnapshot.gke.io/origin-pod"
#: On a PodSnapshot: the PodSnapshotManualTrigger that made it.
TRIGGERED_BY_LABEL: Final = "gke-pod-snapshot-triggered-by"
#: The pod condition GKE sets once a restore (including the lazy memory restore) has finished.
POD_RESTORED_CONDITION: Final = "PodRestored"

# -- Kubeflow Notebooks v1 --------------------------------------------------------------------------
NOTEBOOK_GROUP: Final = "kubeflow.org"
NOTEBOOK_VERSION: Final = "v1"
NOTEBOOK_PLURAL: Final = "notebooks"
#: Set (to an RFC 3339 time) = the notebook controller scales the StatefulSet to 0; removed = back to 1.
NOTEBOOK_STOPPED_ANNOTATION: Final = "kubeflow-resource-stopped"
#: Written by the culling controller from ``GET /api/kernels``.
NOTEBOOK_LAST_ACTIVITY_ANNOTATION: Final = "notebooks.kubeflow.org/last-activity"
#: The label the notebook controller puts on the notebook's pods.
NOTEBOOK_NAME_LABEL: Final = "notebook-name"

# -- Kubeflow Workspaces (Notebooks 2.0) ----------------------------------------------------------
WORKSPACE_GROUP: Final = "kubeflow.org"
WORKSPACE_VERSION: Final = "v1beta1"
WORKSPACE_PLURAL: Final = "workspaces"
#: ``status.state`` values.
WORKSPACE_STATES: Final = ("Running", "Terminating", "Paused", "Pending", "Error", "Unknown")

# -- coordination of restores from outside ----------------------------------------------------------
LEASE_GROUP: Final = "coordination.k8s.io"
LEASE_VERSION: Final = "v1"
#: The Lease that serialises resumes of one environment is named ``<prefix><kind>-<name>`` (cut to 253).
RESUME_LEASE_PREFIX: Final = "jupyter-suspend-resume-"
