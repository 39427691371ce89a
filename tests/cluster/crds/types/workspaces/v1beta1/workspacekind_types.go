package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +kubebuilder:validation:MinLength:=1
// +kubebuilder:validation:MaxLength:=32
// +kubebuilder:validation:Pattern:=`^[a-z0-9]([a-z0-9_-]*[a-z0-9])?$`
type PortId string

type WorkspaceKindSpec struct {
	Spawner WorkspaceKindSpawner `json:"spawner"`

	PodTemplate WorkspaceKindPodTemplate `json:"podTemplate"`

	// Evaluated top to bottom, first match wins, per effect type.
	// +kubebuilder:validation:Optional
	// +listType:="atomic"
	ActivityRules []ActivityRule `json:"activityRules,omitempty"`

	// Read by the backend API server only, not by the controller.
	// +kubebuilder:validation:Optional
	// +listType:="atomic"
	FilterRules []FilterRule `json:"filterRules,omitempty"`
}

type ActivityRule struct {
	Config ActivityRuleConfig `json:"config"`

	// Absent or empty: matches every Workspace.
	// +kubebuilder:validation:Optional
	Match *ActivityRuleMatch `json:"match,omitempty"`

	Effect ActivityRuleEffect `json:"effect"`
}

type ActivityRuleConfig struct {
	// +kubebuilder:validation:Minimum:=16
	SecondsSinceActive int32 `json:"secondsSinceActive"`

	// +kubebuilder:validation:Minimum:=0
	// +kubebuilder:default:=0
	// +kubebuilder:validation:Optional
	MinRunningSeconds *int32 `json:"minRunningSeconds,omitempty"`
}

type ActivityRuleMatch struct {
	// +kubebuilder:validation:Optional
	MatchNamespace *NamespaceMatch `json:"matchNamespace,omitempty"`

	// +kubebuilder:validation:Optional
	MatchPodConfig *PodConfigMatch `json:"matchPodConfig,omitempty"`
}

type NamespaceMatch struct {
	Selector metav1.LabelSelector `json:"selector"`
}

type PodConfigMatch struct {
	Selector metav1.LabelSelector `json:"selector"`
}

// +kubebuilder:validation:XValidation:message="must specify at least one effect",rule="has(self.pauseWorkspace)"
type ActivityRuleEffect struct {
	// true: pause; false: exempt; absent: fall through to the next rule.
	// +kubebuilder:validation:Optional
	PauseWorkspace *bool `json:"pauseWorkspace,omitempty"`
}

type WorkspaceKindSpawner struct {
	// +kubebuilder:validation:MinLength:=2
	// +kubebuilder:validation:MaxLength:=128
	DisplayName string `json:"displayName"`

	// +kubebuilder:validation:MinLength:=2
	// +kubebuilder:validation:MaxLength:=4096
	Description string `json:"description"`

	// +kubebuilder:validation:Optional
	// +kubebuilder:default:=false
	Hidden *bool `json:"hidden,omitempty"`

	// +kubebuilder:validation:Optional
	// +kubebuilder:default:=false
	Deprecated *bool `json:"deprecated,omitempty"`

	// +kubebuilder:validation:Optional
	// +kubebuilder:validation:MinLength:=2
	// +kubebuilder:validation:MaxLength:=256
	DeprecationMessage *string `json:"deprecationMessage,omitempty"`

	Icon WorkspaceKindAsset `json:"icon"`

	Logo WorkspaceKindAsset `json:"logo"`
}

// +kubebuilder:validation:XValidation:message="must specify exactly one of 'url' or 'configMap'",rule="!(has(self.url) && has(self.configMap)) && (has(self.url) || has(self.configMap))"
type WorkspaceKindAsset struct {
	// +kubebuilder:validation:Optional
	Url *string `json:"url,omitempty"`

	// +kubebuilder:validation:Optional
	ConfigMap *WorkspaceKindAssetConfigMap `json:"configMap,omitempty"`
}

type WorkspaceKindAssetConfigMap struct {
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=253
	// +kubebuilder:validation:Pattern:=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=63
	// +kubebuilder:validation:Pattern:=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`

	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=253
	// +kubebuilder:validation:Pattern:=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`

	MediaType WorkspaceKindAssetMediaType `json:"mediaType"`
}

// +kubebuilder:validation:Enum:={"image/svg+xml"}
type WorkspaceKindAssetMediaType string

// WorkspaceKindPodTemplate has exactly upstream's fields. Note what it lacks
// (platform-facts section 3): no containers, initContainers, command, args,
// serviceAccountName or automountServiceAccountToken. The controller builds one
// container "main" and a ServiceAccount per Workspace; a sidecar can only come from a
// pod mutating webhook.
type WorkspaceKindPodTemplate struct {
	// +kubebuilder:validation:Optional
	PodMetadata *WorkspaceKindPodMetadata `json:"podMetadata,omitempty"`

	// ClusterRoles to bind (per namespace) to each Workspace's own ServiceAccount.
	// +kubebuilder:validation:Optional
	ServiceAccount *WorkspaceKindServiceAccount `json:"serviceAccount,omitempty"`

	// +kubebuilder:validation:Optional
	ActivityProbe *ActivityProbe `json:"activityProbe,omitempty"`

	// +kubebuilder:validation:Optional
	Probes *WorkspaceKindProbes `json:"probes,omitempty"`

	VolumeMounts WorkspaceKindVolumeMounts `json:"volumeMounts"`

	// +kubebuilder:validation:MinItems:=1
	// +listType:="map"
	// +listMapKey:="id"
	Ports []WorkspaceKindPort `json:"ports"`

	// +kubebuilder:validation:Optional
	// +listType:="map"
	// +listMapKey:="name"
	ExtraEnv []corev1.EnvVar `json:"extraEnv,omitempty"`

	// +kubebuilder:validation:Optional
	// +listType:="map"
	// +listMapKey:="mountPath"
	ExtraVolumeMounts []corev1.VolumeMount `json:"extraVolumeMounts,omitempty"`

	// +kubebuilder:validation:Optional
	// +listType:="map"
	// +listMapKey:="name"
	ExtraVolumes []corev1.Volume `json:"extraVolumes,omitempty"`

	// +kubebuilder:validation:Optional
	SecurityContext *corev1.PodSecurityContext `json:"securityContext,omitempty"`

	// +kubebuilder:validation:Optional
	ContainerSecurityContext *corev1.SecurityContext `json:"containerSecurityContext,omitempty"`

	Options WorkspaceKindPodOptions `json:"options"`
}

type WorkspaceKindPort struct {
	Id PortId `json:"id"`

	Protocol ImagePortProtocol `json:"protocol"`

	// +kubebuilder:validation:MinLength:=2
	// +kubebuilder:validation:MaxLength:=64
	DefaultDisplayName string `json:"defaultDisplayName"`

	// +kubebuilder:validation:Optional
	HTTPProxy *HTTPProxy `json:"httpProxy,omitempty"`
}

type WorkspaceKindPodMetadata struct {
	// +kubebuilder:validation:Optional
	Labels map[string]string `json:"labels,omitempty"`

	// +kubebuilder:validation:Optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

type WorkspaceKindServiceAccount struct {
	// +kubebuilder:validation:Optional
	// +listType:="map"
	// +listMapKey:="name"
	ClusterRoles []WorkspaceKindClusterRole `json:"clusterRoles,omitempty"`
}

type WorkspaceKindClusterRole struct {
	// A path segment name (may hold upper case and ':'), as upstream validates it.
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=253
	// +kubebuilder:validation:Pattern:=`^([^./%][^/%]*|\.[^./%][^/%]*|\.[^/%][^/%]+)$`
	Name string `json:"name"`
}

// +kubebuilder:validation:XValidation:message="must specify exactly one of 'podExec' or 'jupyter'",rule="!(has(self.podExec) && has(self.jupyter)) && (has(self.podExec) || has(self.jupyter))"
// +kubebuilder:validation:XValidation:message="minProbeIntervalSeconds must be less than or equal to probeIntervalSeconds",rule="self.minProbeIntervalSeconds <= self.probeIntervalSeconds"
type ActivityProbe struct {
	// +kubebuilder:validation:Minimum:=1
	// +kubebuilder:validation:Maximum:=31536000
	// +kubebuilder:default:=300
	// +kubebuilder:validation:Optional
	MinProbeIntervalSeconds *int32 `json:"minProbeIntervalSeconds,omitempty"`

	// +kubebuilder:validation:Minimum:=1
	// +kubebuilder:validation:Maximum:=31536000
	// +kubebuilder:default:=3600
	// +kubebuilder:validation:Optional
	ProbeIntervalSeconds *int32 `json:"probeIntervalSeconds,omitempty"`

	// +kubebuilder:validation:Optional
	PodExec *ActivityProbePodExec `json:"podExec,omitempty"`

	// +kubebuilder:validation:Optional
	Jupyter *ActivityProbeJupyter `json:"jupyter,omitempty"`
}

type ActivityProbePodExec struct {
	// +kubebuilder:validation:Minimum:=1
	// +kubebuilder:default:=60
	// +kubebuilder:validation:Optional
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`

	// Writes {"has_activity": bool} or {"last_activity": "<ISO 8601>"} to
	// $OUTPUT_JSON_PATH (platform-facts section 3).
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=2048
	Script string `json:"script"`
}

// Reads last_activity from Jupyter's GET /api/status.
// +kubebuilder:validation:XValidation:message="'lastActivity' must be true",rule="has(self.lastActivity) && self.lastActivity"
type ActivityProbeJupyter struct {
	LastActivity bool `json:"lastActivity"`

	PortId PortId `json:"portId"`
}

type WorkspaceKindProbes struct {
	// +kubebuilder:validation:Optional
	StartupProbe *corev1.Probe `json:"startupProbe,omitempty"`

	// +kubebuilder:validation:Optional
	LivenessProbe *corev1.Probe `json:"livenessProbe,omitempty"`

	// +kubebuilder:validation:Optional
	ReadinessProbe *corev1.Probe `json:"readinessProbe,omitempty"`
}

type WorkspaceKindVolumeMounts struct {
	// +kubebuilder:validation:MinLength:=2
	// +kubebuilder:validation:MaxLength:=4096
	// +kubebuilder:validation:Pattern:=`^/[^/].*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="mount path of 'home' is immutable"
	Home string `json:"home"`
}

type HTTPProxy struct {
	// +kubebuilder:validation:Optional
	// +kubebuilder:default:=false
	RemovePathPrefix *bool `json:"removePathPrefix,omitempty"`

	// +kubebuilder:validation:Optional
	RequestHeaders *IstioHeaderOperations `json:"requestHeaders,omitempty"`
}

type IstioHeaderOperations struct {
	// +kubebuilder:validation:Optional
	Set map[string]string `json:"set,omitempty"`

	// +kubebuilder:validation:Optional
	Add map[string]string `json:"add,omitempty"`

	// +kubebuilder:validation:Optional
	Remove []string `json:"remove,omitempty"`
}

type WorkspaceKindPodOptions struct {
	ImageConfig ImageConfig `json:"imageConfig"`

	PodConfig PodConfig `json:"podConfig"`
}

type ImageConfig struct {
	Spawner OptionsSpawnerConfig `json:"spawner"`

	// +kubebuilder:validation:MinItems:=1
	// +listType:="map"
	// +listMapKey:="id"
	Values []ImageConfigValue `json:"values"`
}

type ImageConfigValue struct {
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=256
	Id string `json:"id"`

	Spawner OptionSpawnerInfo `json:"spawner"`

	// +kubebuilder:validation:Optional
	Redirect *OptionRedirect `json:"redirect,omitempty"`

	Spec ImageConfigSpec `json:"spec"`
}

type ImageConfigSpec struct {
	// +kubebuilder:validation:MinLength:=2
	Image string `json:"image"`

	// Upstream's JSON tag has no omitempty; the marker makes it optional anyway.
	// +kubebuilder:validation:Optional
	// +kubebuilder:default:="IfNotPresent"
	// +kubebuilder:validation:Enum:={"Always","IfNotPresent","Never"}
	ImagePullPolicy *corev1.PullPolicy `json:"imagePullPolicy"`

	// +kubebuilder:validation:MinItems:=1
	// +listType:="map"
	// +listMapKey:="id"
	Ports []ImagePort `json:"ports"`
}

type ImagePort struct {
	Id PortId `json:"id"`

	// +kubebuilder:validation:Minimum:=1
	// +kubebuilder:validation:Maximum:=65535
	Port int32 `json:"port"`

	// +kubebuilder:validation:MinLength:=2
	// +kubebuilder:validation:MaxLength:=64
	// +kubebuilder:validation:Optional
	DisplayName *string `json:"displayName,omitempty"`
}

// +kubebuilder:validation:Enum:={"HTTP"}
type ImagePortProtocol string

type PodConfig struct {
	Spawner OptionsSpawnerConfig `json:"spawner"`

	// +kubebuilder:validation:MinItems:=1
	// +listType:="map"
	// +listMapKey:="id"
	Values []PodConfigValue `json:"values"`
}

type PodConfigValue struct {
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=256
	Id string `json:"id"`

	Spawner OptionSpawnerInfo `json:"spawner"`

	// +kubebuilder:validation:Optional
	Redirect *OptionRedirect `json:"redirect,omitempty"`

	Spec PodConfigSpec `json:"spec"`
}

type PodConfigSpec struct {
	// +kubebuilder:validation:Optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// +kubebuilder:validation:Optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// +kubebuilder:validation:Optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Resources of the "main" container.
	// +kubebuilder:validation:Optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

type OptionsSpawnerConfig struct {
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=256
	Default string `json:"default"`
}

type OptionSpawnerInfo struct {
	// +kubebuilder:validation:MinLength:=2
	// +kubebuilder:validation:MaxLength:=128
	DisplayName string `json:"displayName"`

	// +kubebuilder:validation:Optional
	// +kubebuilder:validation:MinLength:=2
	// +kubebuilder:validation:MaxLength:=1024
	Description *string `json:"description,omitempty"`

	// +kubebuilder:validation:Optional
	// +kubebuilder:validation:MaxItems:=32
	// +listType:="map"
	// +listMapKey:="key"
	Labels []OptionSpawnerLabel `json:"labels,omitempty"`

	// +kubebuilder:validation:Optional
	// +kubebuilder:default:=false
	Hidden *bool `json:"hidden,omitempty"`
}

type OptionSpawnerLabel struct {
	// +kubebuilder:validation:MinLength:=2
	// +kubebuilder:validation:MaxLength:=64
	Key string `json:"key"`

	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=64
	Value string `json:"value"`
}

type OptionRedirect struct {
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=256
	To string `json:"to"`

	// +kubebuilder:validation:Optional
	Message *RedirectMessage `json:"message,omitempty"`
}

type RedirectMessage struct {
	Level RedirectMessageLevel `json:"level"`

	// +kubebuilder:validation:MinLength:=2
	// +kubebuilder:validation:MaxLength:=1024
	Text string `json:"text"`
}

// +kubebuilder:validation:Enum:={"Info","Warning","Danger"}
type RedirectMessageLevel string

type FilterRule struct {
	Scope FilterRuleScope `json:"scope"`

	Effect FilterRuleEffect `json:"effect"`

	// All must hold.
	// +kubebuilder:validation:MinItems:=1
	// +listType:="atomic"
	Match []FilterRuleMatch `json:"match"`
}

// +kubebuilder:validation:Enum:={"WORKSPACE_KIND","POD_CONFIG","IMAGE_CONFIG"}
type FilterRuleScope string

// +kubebuilder:validation:XValidation:message="must specify at least one of 'ui' or 'api'",rule="has(self.ui) || has(self.api)"
type FilterRuleEffect struct {
	// +kubebuilder:validation:Optional
	UI *FilterRuleEffectUI `json:"ui,omitempty"`

	// +kubebuilder:validation:Optional
	API *FilterRuleEffectAPI `json:"api,omitempty"`
}

type FilterRuleEffectUI struct {
	Hide bool `json:"hide"`
}

// +kubebuilder:validation:XValidation:message="'denyMessage' may only be set when 'deny' is true",rule="!has(self.denyMessage) || (has(self.deny) && self.deny)"
type FilterRuleEffectAPI struct {
	// +kubebuilder:validation:Optional
	Hide *bool `json:"hide,omitempty"`

	// +kubebuilder:validation:Optional
	Deny *bool `json:"deny,omitempty"`

	// +kubebuilder:validation:Optional
	DenyMessage *FilterRuleDenyMessage `json:"denyMessage,omitempty"`
}

type FilterRuleDenyMessage struct {
	// +kubebuilder:validation:MinLength:=2
	// +kubebuilder:validation:MaxLength:=1024
	Text string `json:"text"`
}

// +kubebuilder:validation:XValidation:message="must specify exactly one of 'matchNamespace', 'matchImageConfig', or 'matchPodConfig'",rule="(has(self.matchNamespace) ? 1 : 0) + (has(self.matchImageConfig) ? 1 : 0) + (has(self.matchPodConfig) ? 1 : 0) == 1"
type FilterRuleMatch struct {
	// +kubebuilder:validation:Optional
	MatchNamespace *FilterRuleSelector `json:"matchNamespace,omitempty"`

	// +kubebuilder:validation:Optional
	MatchImageConfig *FilterRuleSelector `json:"matchImageConfig,omitempty"`

	// +kubebuilder:validation:Optional
	MatchPodConfig *FilterRuleSelector `json:"matchPodConfig,omitempty"`
}

type FilterRuleSelector struct {
	Selector metav1.LabelSelector `json:"selector"`
}

type WorkspaceKindStatus struct {
	// +kubebuilder:default=0
	Workspaces int32 `json:"workspaces"`

	PodTemplateOptions PodTemplateOptionsMetrics `json:"podTemplateOptions"`

	SpawnerIcon ImageAssetStatus `json:"spawnerIcon"`

	SpawnerLogo ImageAssetStatus `json:"spawnerLogo"`
}

type ImageAssetStatus struct {
	// +kubebuilder:validation:Optional
	Sha256 string `json:"sha256,omitempty"`

	// +kubebuilder:validation:Optional
	ConfigMap *WorkspaceKindAssetConfigMapStatus `json:"configMap,omitempty"`
}

type WorkspaceKindAssetConfigMapStatus struct {
	// Upstream's Go name is Error; its JSON name is errorType.
	// +kubebuilder:validation:Optional
	Error *ConfigMapError `json:"errorType,omitempty"`

	// +kubebuilder:validation:Optional
	ErrorMessage *string `json:"errorMessage,omitempty"`
}

// +kubebuilder:validation:Enum:={"NotFound","KeyNotFound","Other"}
type ConfigMapError string

type PodTemplateOptionsMetrics struct {
	// +listType:="map"
	// +listMapKey:="id"
	ImageConfig []OptionMetric `json:"imageConfig"`

	// +listType:="map"
	// +listMapKey:="id"
	PodConfig []OptionMetric `json:"podConfig"`
}

type OptionMetric struct {
	// +kubebuilder:validation:MinLength:=1
	// +kubebuilder:validation:MaxLength:=256
	Id string `json:"id"`

	Workspaces int32 `json:"workspaces"`
}

// +kubebuilder:object:root=true
// +kubebuilder:printcolumn:name="Workspaces",type="integer",JSONPath=".status.workspaces",description="The number of Workspaces using this WorkspaceKind"
// +kubebuilder:printcolumn:name="Deprecated",type="boolean",JSONPath=".spec.spawner.deprecated",description="If this WorkspaceKind is deprecated"
// +kubebuilder:printcolumn:name="Hidden",type="boolean",JSONPath=".spec.spawner.hidden",description="If this WorkspaceKind is hidden from the spawner UI"
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=wsk

// WorkspaceKind (cluster-scoped) is the template and option catalogue Workspaces pick from.
type WorkspaceKind struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WorkspaceKindSpec   `json:"spec,omitempty"`
	Status WorkspaceKindStatus `json:"status,omitempty"`
}
