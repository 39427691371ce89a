package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type NotebookSpec struct {
	// The pod template of the notebook's StatefulSet (spec only, as upstream).
	Template NotebookTemplateSpec `json:"template,omitempty"`
}

type NotebookTemplateSpec struct {
	// Kubernetes 1.23's PodSpec (k8s.io/api v0.23.x): see doc.go.
	Spec corev1.PodSpec `json:"spec,omitempty"`
}

// NotebookStatus: upstream's fields carry no omitempty, so controller-gen marks all
// three required, as in upstream's generated CRD.
type NotebookStatus struct {
	Conditions     []NotebookCondition   `json:"conditions"`
	ReadyReplicas  int32                 `json:"readyReplicas"`
	ContainerState corev1.ContainerState `json:"containerState"`
}

type NotebookCondition struct {
	// Running, Waiting or Terminated upstream.
	Type string `json:"type"`
	// True, False or Unknown.
	Status string `json:"status"`
	// +optional
	LastProbeTime metav1.Time `json:"lastProbeTime,omitempty"`
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=notebooks,singular=notebook,scope=Namespaced

// Notebook is Kubeflow's v1 notebook server: the controller turns it into a
// StatefulSet of one pod and a Service.
type Notebook struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NotebookSpec   `json:"spec,omitempty"`
	Status NotebookStatus `json:"status,omitempty"`
}
