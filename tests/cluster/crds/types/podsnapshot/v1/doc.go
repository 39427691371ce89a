// Package v1 holds our own Go types for GKE's Pod snapshot API (podsnapshot.gke.io/v1),
// from which controller-gen writes the CRDs that the test control plane installs.
//
// GKE does not publish these CRDs or their Go types. The shapes here are written from
// GKE's public "Pod snapshot CRDs" reference
// (https://cloud.google.com/kubernetes-engine/docs/reference/crds/podsnapshot), the
// public client code of gke-labs/workspaces
// (providers/gke/internal/snapshot/reconcile.go and snapshot.go, commit df69eff6) and
// ../shared/docs/platform-facts.md section 1 (beside the repository). A field whose
// exact type no public source gives is marked "unverified" and given the least
// restrictive sensible type.
//
// +groupName=podsnapshot.gke.io
// +versionName=v1
package v1
