package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ---------------------------------------------------------------------------
// PodSnapshotStorageConfig (cluster-scoped): where snapshots are written.
// ---------------------------------------------------------------------------

// PodSnapshotStorageConfigSpec: only Cloud Storage is supported (GKE CRD reference).
type PodSnapshotStorageConfigSpec struct {
	SnapshotStorageConfig SnapshotStorageConfig `json:"snapshotStorageConfig"`
}

type SnapshotStorageConfig struct {
	GCS GCSStorage `json:"gcs"`
}

type GCSStorage struct {
	// The bucket that holds the snapshots (required in GKE's CRD reference).
	// +kubebuilder:validation:MinLength=1
	Bucket string `json:"bucket"`

	// A folder inside the bucket (optional in GKE's CRD reference).
	// +optional
	Path string `json:"path,omitempty"`

	// Listed only in the Markdown rendering of GKE's CRD reference
	// (podsnapshot.md.txt), without a description: unverified, kept as a free string.
	// +optional
	TokenSource string `json:"tokenSource,omitempty"`
}

// PodSnapshotStorageConfigStatus: the CRD reference lists conditions and observedGeneration.
type PodSnapshotStorageConfigStatus struct {
	// Condition item shape (metav1.Condition) unverified: the reference only says "array (object)".
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=podsnapshotstorageconfigs,singular=podsnapshotstorageconfig,scope=Cluster
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Bucket",type=string,JSONPath=`.spec.snapshotStorageConfig.gcs.bucket`
// +kubebuilder:printcolumn:name="Path",type=string,JSONPath=`.spec.snapshotStorageConfig.gcs.path`

// PodSnapshotStorageConfig names the Cloud Storage location of the snapshots of
// every PodSnapshotPolicy that refers to it by name.
type PodSnapshotStorageConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodSnapshotStorageConfigSpec   `json:"spec"`
	Status PodSnapshotStorageConfigStatus `json:"status,omitempty"`
}

// ---------------------------------------------------------------------------
// PodSnapshotPolicy (namespaced): which pods may be snapshotted, and how.
// ---------------------------------------------------------------------------

type PodSnapshotPolicySpec struct {
	// The pods this policy applies to (required in GKE's CRD reference).
	Selector metav1.LabelSelector `json:"selector"`

	// Name of a (cluster-scoped) PodSnapshotStorageConfig (required).
	// +kubebuilder:validation:MinLength=1
	StorageConfigName string `json:"storageConfigName"`

	TriggerConfig TriggerConfig `json:"triggerConfig"`

	// +optional
	RetentionConfig *RetentionConfig `json:"retentionConfig,omitempty"`

	// +optional
	SnapshotGroupingRules *SnapshotGroupingRules `json:"snapshotGroupingRules,omitempty"`

	// whole-pod (GKE's default) or rootfs-only. Placement unverified: platform-facts
	// names it beside snapshotGroupingRules; we accept it at spec level, where the
	// project's own manifest schema (tests/manifest_schemas/podsnapshotpolicy.json) has it.
	// No default is declared: whether GKE's CRD or its controller fills it in is unverified.
	// +optional
	SnapshotScope SnapshotScope `json:"snapshotScope,omitempty"`
}

// +kubebuilder:validation:Enum=whole-pod;rootfs-only
type SnapshotScope string

type TriggerConfig struct {
	// manual: a PodSnapshotManualTrigger starts the checkpoint; workload: the
	// process in the pod asks through /proc/gvisor/checkpoint.
	Type TriggerType `json:"type"`

	// stop: the pod turns Completed after the checkpoint; resume: it goes on running
	// (GKE's documented default; no default is declared here, see SnapshotScope).
	// +optional
	PostCheckpoint PostCheckpoint `json:"postCheckpoint,omitempty"`
}

// +kubebuilder:validation:Enum=manual;workload
type TriggerType string

// +kubebuilder:validation:Enum=stop;resume
type PostCheckpoint string

type RetentionConfig struct {
	// How long a snapshot nobody restores from is kept, e.g. "7d" (the value
	// gke-labs/workspaces writes). Unverified beyond that example: a "d" suffix is not
	// a Go duration, so this is a free string, not a format-checked duration.
	// +optional
	LastAccessTimeout string `json:"lastAccessTimeout,omitempty"`
}

// SnapshotGroupingRules: only maxSnapshotCountPerGroup is publicly named (platform-facts
// section 1); its integer type is unverified.
type SnapshotGroupingRules struct {
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxSnapshotCountPerGroup *int32 `json:"maxSnapshotCountPerGroup,omitempty"`
}

type PodSnapshotPolicyStatus struct {
	// Unverified: GKE's reference documents no status for the policy; conditions are
	// the Kubernetes convention.
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=podsnapshotpolicies,singular=podsnapshotpolicy,scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Trigger",type=string,JSONPath=`.spec.triggerConfig.type`
// +kubebuilder:printcolumn:name="PostCheckpoint",type=string,JSONPath=`.spec.triggerConfig.postCheckpoint`
// +kubebuilder:printcolumn:name="StorageConfig",type=string,JSONPath=`.spec.storageConfigName`

// PodSnapshotPolicy enables snapshots for the pods its selector matches.
type PodSnapshotPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodSnapshotPolicySpec   `json:"spec"`
	Status PodSnapshotPolicyStatus `json:"status,omitempty"`
}

// ---------------------------------------------------------------------------
// PodSnapshotManualTrigger (namespaced): "checkpoint this pod now".
// ---------------------------------------------------------------------------

type PodSnapshotManualTriggerSpec struct {
	// Name of the pod to checkpoint, in the trigger's namespace (gke-labs/workspaces
	// createManualTrigger writes spec.targetPod). Required: unverified, but a trigger
	// without a target cannot do anything.
	// +kubebuilder:validation:MinLength=1
	TargetPod string `json:"targetPod"`
}

type PodSnapshotManualTriggerStatus struct {
	// Condition "Triggered": True when done; False with reason Failed or Error when
	// it failed (platform-facts section 1). Item shape (metav1.Condition) unverified.
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// The PodSnapshot this trigger produced (gke-labs/workspaces reads
	// status.snapshotCreated.name).
	// +optional
	SnapshotCreated *SnapshotReference `json:"snapshotCreated,omitempty"`
}

type SnapshotReference struct {
	// +optional
	Name string `json:"name,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=podsnapshotmanualtriggers,singular=podsnapshotmanualtrigger,scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.spec.targetPod`
// +kubebuilder:printcolumn:name="Triggered",type=string,JSONPath=`.status.conditions[?(@.type=="Triggered")].status`
// +kubebuilder:printcolumn:name="Snapshot",type=string,JSONPath=`.status.snapshotCreated.name`

// PodSnapshotManualTrigger asks GKE to checkpoint one pod now.
type PodSnapshotManualTrigger struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodSnapshotManualTriggerSpec   `json:"spec"`
	Status PodSnapshotManualTriggerStatus `json:"status,omitempty"`
}

// ---------------------------------------------------------------------------
// PodSnapshot (namespaced): one stored checkpoint, written only by GKE.
// ---------------------------------------------------------------------------

type PodSnapshotSpec struct {
	// The PodSnapshotPolicy the snapshot was taken under; GKE's deletion finalizer
	// follows it to the storage config (gke-labs/workspaces reconcile.go comments).
	// +optional
	PolicyName string `json:"policyName,omitempty"`
}

type PodSnapshotStatus struct {
	// Checkpoint, StorageReplicated and Ready (platform-facts section 1).
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Last time a restore used this snapshot. Format unverified (RFC 3339 in every
	// public example we know): kept a plain string rather than a checked date-time.
	// +optional
	LastAccessTime string `json:"lastAccessTime,omitempty"`

	// +optional
	StorageStatus *SnapshotStorageStatus `json:"storageStatus,omitempty"`
}

type SnapshotStorageStatus struct {
	// +optional
	GCS *GCSStorageStatus `json:"gcs,omitempty"`
}

type GCSStorageStatus struct {
	// The gs:// path the snapshot was written to.
	// +optional
	ObservedGCSPath string `json:"observedGCSPath,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=podsnapshots,singular=podsnapshot,scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.policyName`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// PodSnapshot is one checkpoint of a pod, named by a UUID.
type PodSnapshot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodSnapshotSpec   `json:"spec,omitempty"`
	Status PodSnapshotStatus `json:"status,omitempty"`
}

// ---------------------------------------------------------------------------
// PodSnapshotTokenRequest (namespaced): named by platform-facts section 1 only.
// ---------------------------------------------------------------------------

// No public source gives its fields: spec and status keep whatever they are given.
// +kubebuilder:pruning:PreserveUnknownFields
type PodSnapshotTokenRequestSpec struct{}

// +kubebuilder:pruning:PreserveUnknownFields
type PodSnapshotTokenRequestStatus struct{}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=podsnapshottokenrequests,singular=podsnapshottokenrequest,scope=Namespaced
// +kubebuilder:subresource:status

// PodSnapshotTokenRequest exists in GKE's API group; its shape is unverified.
type PodSnapshotTokenRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodSnapshotTokenRequestSpec   `json:"spec,omitempty"`
	Status PodSnapshotTokenRequestStatus `json:"status,omitempty"`
}
