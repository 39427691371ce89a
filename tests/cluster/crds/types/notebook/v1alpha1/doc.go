// Package v1alpha1 is the same Notebook shape as package v1, served as kubeflow.org/v1alpha1
// (not stored): upstream's CRD (kubeflow/notebooks notebooks-v1,
// components/notebook-controller/config/crd/bases/kubeflow.org_notebooks.yaml) serves
// v1, v1alpha1 and v1beta1 with identical schemas and conversion strategy None.
// Keep it in step with v1/notebook_types.go (generate.sh checks the three schemas agree).
//
// +groupName=kubeflow.org
// +versionName=v1alpha1
package v1alpha1
