// Package v1beta1 holds Go types for Kubeflow Notebooks 2.0 (kubeflow.org/v1beta1
// Workspace and WorkspaceKind), written to the public shape of kubeflow/notebooks
// branch notebooks-v2, workspaces/controller/api/v1beta1/workspace_types.go and
// workspacekind_types.go (commit 8b610577, 2026-08-21). Upstream's module requires
// k8s.io/api v0.31.0, and so does this one, so the embedded corev1 types (probes,
// volumes, env, security contexts, affinity, tolerations, resources) have upstream's
// schema. The upstream module is not served by the module proxy, so the Go code is
// ours; field names, JSON names, required/optional, enums, defaults, limits, patterns
// and CEL rules follow upstream. Left out on purpose: upstream's field descriptions
// (generated with maxDescLen=0) and +kubebuilder:example markers (neither changes
// validation or pruning).
//
// +groupName=kubeflow.org
// +versionName=v1beta1
package v1beta1
