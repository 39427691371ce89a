// Package v1alpha1 holds Go types for Kubeflow's PodDefault (kubeflow.org/v1alpha1),
// applied to pods at creation by Kubeflow's admission webhook. Written to the public
// shape of kubeflow/dashboard branch main,
// components/poddefaults-webhooks/pkg/apis/settings/v1alpha1/poddefault_types.go
// (commit d8424648, 2026-08-14); the webhook moved there from kubeflow/kubeflow
// components/admission-webhook (last on branch v1.10-branch).
//
// k8s.io/api version: upstream's go.mod requires v0.35.0 since 2026-08-04, but the CRD
// upstream ships (manifests/kustomize/base/crd.yaml, last regenerated 2026-02-19) was
// generated while it required v0.28.1 and was not regenerated since. This module pins
// v0.28.1, which reproduces that shipped CRD exactly (descriptions aside): sidecars[]
// and initContainers[] are Kubernetes 1.28 Containers, which do have restartPolicy.
// (Kubeflow 1.10's older CRD, kubeflow/kubeflow v1.10-branch, has no
// initContainers[].restartPolicy at all; see ../../../README.md.)
// The upstream module is not served by the module proxy, so the Go code is ours.
//
// +groupName=kubeflow.org
// +versionName=v1alpha1
package v1alpha1
