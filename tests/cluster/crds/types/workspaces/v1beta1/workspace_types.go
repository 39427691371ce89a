package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type WorkspaceSpec struct {
	// No pod runs while paused. (platform-facts section 3; GKE Workspaces' snapshot
	// add-on holds it false while a checkpoint is taken.)
	// +kubebuilder:validation:Optional
	// +kubebuilder:default=false
	Paused bool `json:"paused"`

	// +kubebuilder:validation:Optional
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=128
	DisplayName *string `json:"displayName,omitempty"`

	// Name of the (cluster-scoped) WorkspaceKind; immutable.
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=253
	// +kubebuilder:validation:Pattern:=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Workspace 'kind' is immutable"
	Kind string `json:"kind"`

	PodTemplate WorkspacePodTemplate `json:"podTemplate"`
}

type WorkspacePodTemplate struct {
	// +kubebuilder:validation:Optional
	PodMetadata *WorkspacePodMetadata `json:"podMetadata,omitempty"`

	Volumes WorkspacePodVolumes `json:"volumes"`

	Options WorkspacePodOptions `json:"options"`
}

type WorkspacePodMetadata struct {
	// +kubebuilder:validation:Optional
	Labels map[string]string `json:"labels,omitempty"`

	// +kubebuilder:validation:Optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

type WorkspacePodVolumes struct {
	// PVC mounted at the WorkspaceKind's volumeMounts.home.
	// +kubebuilder:validation:Optional
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=253
	// +kubebuilder:validation:Pattern:=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Home *string `json:"home,omitempty"`

	// +kubebuilder:validation:Optional
	// +listType:="map"
	// +listMapKey:="mountPath"
	Data []PodVolumeMount `json:"data,omitempty"`

	// +kubebuilder:validation:Optional
	// +listType:="map"
	// +listMapKey:="mountPath"
	Secrets []PodSecretMount `json:"secrets,omitempty"`
}

type PodVolumeMount struct {
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=253
	// +kubebuilder:validation:Pattern:=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	PVCName string `json:"pvcName"`

	// +kubebuilder:validation:MinLength:=2
	// +kubebuilder:validation:MaxLength:=4096
	// +kubebuilder:validation:Pattern:=`^/[^/].*$`
	MountPath string `json:"mountPath"`

	// +kubebuilder:validation:Optional
	// +kubebuilder:default=false
	ReadOnly *bool `json:"readOnly,omitempty"`
}

type PodSecretMount struct {
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=253
	// +kubebuilder:validation:Pattern:=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	SecretName string `json:"secretName"`

	// +kubebuilder:validation:MinLength:=2
	// +kubebuilder:validation:MaxLength:=4096
	// +kubebuilder:validation:Pattern:=`^/[^/].*$`
	MountPath string `json:"mountPath"`

	// File mode bits, 0..0777.
	// +kubebuilder:validation:Optional
	// +kubebuilder:validation:Minimum:=0
	// +kubebuilder:validation:Maximum:=511
	// +kubebuilder:default=420
	DefaultMode int32 `json:"defaultMode,omitempty"`
}

type WorkspacePodOptions struct {
	// Id of one of the WorkspaceKind's imageConfig values.
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=256
	ImageConfig string `json:"imageConfig"`

	// Id of one of the WorkspaceKind's podConfig values.
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=256
	PodConfig string `json:"podConfig"`
}

// WorkspaceStatus: every time below is UNIX epoch MILLISECONDS on notebooks-v2
// (seconds only on the older v2.0-alpha-branch; platform-facts section 3).
type WorkspaceStatus struct {
	Activity WorkspaceActivity `json:"activity"`

	// +kubebuilder:default=0
	LastRunningTime int64 `json:"lastRunningTime"`

	// 0 while not paused.
	// +kubebuilder:default=0
	PauseTime int64 `json:"pauseTime"`

	// +kubebuilder:default=false
	PendingRestart bool `json:"pendingRestart"`

	PodTemplateOptions WorkspacePodOptionsStatus `json:"podTemplateOptions"`

	PodTemplatePod WorkspacePodStatus `json:"podTemplatePod"`

	// +kubebuilder:default="Unknown"
	State WorkspaceState `json:"state"`

	// For people, not programs.
	// +kubebuilder:default=""
	StateMessage string `json:"stateMessage"`
}

type WorkspaceActivity struct {
	// +kubebuilder:default=0
	LastActivity int64 `json:"lastActivity"`

	// +kubebuilder:default=0
	LastUpdate int64 `json:"lastUpdate"`

	// +kubebuilder:validation:Optional
	LastProbe *WorkspaceActivityLastProbe `json:"lastProbe,omitempty"`

	// +kubebuilder:validation:Optional
	Rules *WorkspaceActivityRules `json:"rules,omitempty"`
}

type WorkspaceActivityLastProbe struct {
	StartTime int64 `json:"startTime"`

	EndTime int64 `json:"endTime"`

	Result WorkspaceProbeResult `json:"result"`

	// +kubebuilder:default=""
	Message string `json:"message"`
}

// +kubebuilder:validation:Enum:={"Success","Failure","Timeout"}
type WorkspaceProbeResult string

type WorkspaceActivityRules struct {
	// +kubebuilder:validation:Optional
	PauseWorkspace *WorkspaceActivityPauseRule `json:"pauseWorkspace,omitempty"`
}

type WorkspaceActivityPauseRule struct {
	// +kubebuilder:default=0
	EligibleAfter int64 `json:"eligibleAfter"`
}

type WorkspacePodOptionsStatus struct {
	ImageConfig WorkspacePodOptionInfo `json:"imageConfig"`

	PodConfig WorkspacePodOptionInfo `json:"podConfig"`
}

type WorkspacePodOptionInfo struct {
	// +kubebuilder:validation:Optional
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=256
	Desired string `json:"desired,omitempty"`

	// +kubebuilder:validation:Optional
	RedirectChain []WorkspacePodOptionRedirectStep `json:"redirectChain,omitempty"`
}

type WorkspacePodOptionRedirectStep struct {
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=256
	Source string `json:"source"`

	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=256
	Target string `json:"target"`
}

type WorkspacePodStatus struct {
	Name string `json:"name"`

	NodeName string `json:"nodeName"`

	// The per-Workspace ServiceAccount the controller creates.
	// +kubebuilder:validation:Optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// +kubebuilder:validation:Optional
	Containers []WorkspacePodContainer `json:"containers,omitempty"`

	// +kubebuilder:validation:Optional
	InitContainers []WorkspacePodContainer `json:"initContainers,omitempty"`
}

type WorkspacePodContainer struct {
	Name string `json:"name"`
}

// +kubebuilder:validation:Enum:={"Running","Terminating","Paused","Pending","Error","Unknown"}
type WorkspaceState string

// +kubebuilder:object:root=true
// +kubebuilder:printcolumn:name="State",type="string",JSONPath=".status.state",description="The current state of the Workspace"
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ws

// Workspace is one user's running (or paused) environment of a WorkspaceKind.
type Workspace struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WorkspaceSpec   `json:"spec,omitempty"`
	Status WorkspaceStatus `json:"status,omitempty"`
}
