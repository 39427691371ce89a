package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodDefaultSpec: what the webhook adds to a pod whose labels match Selector.
type PodDefaultSpec struct {
	// Required upstream (no omitempty).
	Selector metav1.LabelSelector `json:"selector"`

	// Shown to users by Kubeflow's spawner UI.
	// +optional
	Desc string `json:"desc,omitempty"`

	// +optional
	InitContainers []corev1.Container `json:"initContainers,omitempty"`

	// Appended to the pod's containers.
	// +optional
	Sidecars []corev1.Container `json:"sidecars,omitempty"`

	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// +optional
	AutomountServiceAccountToken *bool `json:"automountServiceAccountToken,omitempty"`

	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`

	// +optional
	EnvFrom []corev1.EnvFromSource `json:"envFrom,omitempty"`

	// +optional
	Volumes []corev1.Volume `json:"volumes,omitempty"`

	// +optional
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`

	Annotations map[string]string `json:"annotations,omitempty"`

	Labels map[string]string `json:"labels,omitempty"`

	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	Command []string `json:"command,omitempty"`

	Args []string `json:"args,omitempty"`

	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
}

// PodDefaultStatus is empty upstream.
type PodDefaultStatus struct{}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=poddefaults
// +kubebuilder:subresource:status

// PodDefault is Kubeflow's way to add containers, volumes and env to matching pods.
type PodDefault struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodDefaultSpec   `json:"spec,omitempty"`
	Status PodDefaultStatus `json:"status,omitempty"`
}
