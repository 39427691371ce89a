// Package v1 holds Go types for Kubeflow Notebooks v1 (kubeflow.org/v1 Notebook),
// written to the public shape of kubeflow/notebooks branch notebooks-v1,
// components/notebook-controller/api/v1/notebook_types.go (commit 177b0986), whose
// module requires k8s.io/api v0.23.0. The upstream Go module is not served by the
// module proxy, so these types are ours; only the shape is upstream's.
//
// This module requires k8s.io/api v0.23.17 (the last 1.23 patch the proxy serves) so
// that spec.template.spec is Kubernetes 1.23's PodSpec, as in upstream's CRD: it has
// no initContainers[].restartPolicy (native sidecars arrived in 1.28), so a real API
// server prunes that field from a Notebook.
//
// +groupName=kubeflow.org
// +versionName=v1
package v1
