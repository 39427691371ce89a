// Command crdcheck validates the generated CRDs without an API server, with the API
// server's own code (k8s.io/apiextensions-apiserver, the version pinned in go.mod):
//
//   - every file parses strictly as one apiextensions.k8s.io/v1 CustomResourceDefinition;
//   - after the API server's defaulting, ValidateCustomResourceDefinition accepts it
//     (structural schemas, CEL rules, list types, defaults — what a create would check);
//   - every version's openAPIV3Schema is structural (checked again on its own, so the
//     output says so explicitly);
//   - no x-kubernetes-preserve-unknown-fields anywhere except where allowed below (in
//     particular never at or under a pod template);
//   - the facts the tests rely on: the Notebook pod template (Kubernetes 1.23 PodSpec)
//     has no initContainers[].restartPolicy in any version, carries upstream's
//     validation patch, and its three versions share one schema; the WorkspaceKind pod
//     template has exactly upstream's fields (no place for containers); Workspace times
//     are integers; PodDefault containers do have restartPolicy.
//
// Usage: crdcheck <dir with *.yaml>
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// Where x-kubernetes-preserve-unknown-fields may appear: PodSnapshotTokenRequest's
// shape is not public, so its spec and status keep whatever they are given.
var preserveUnknownAllowed = map[string]bool{
	"podsnapshottokenrequests.podsnapshot.gke.io/spec":   true,
	"podsnapshottokenrequests.podsnapshot.gke.io/status": true,
}

var expectedCRDs = []string{
	"notebooks.kubeflow.org",
	"poddefaults.kubeflow.org",
	"podsnapshotmanualtriggers.podsnapshot.gke.io",
	"podsnapshotpolicies.podsnapshot.gke.io",
	"podsnapshots.podsnapshot.gke.io",
	"podsnapshotstorageconfigs.podsnapshot.gke.io",
	"podsnapshottokenrequests.podsnapshot.gke.io",
	"workspacekinds.kubeflow.org",
	"workspaces.kubeflow.org",
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crdcheck <dir>")
		os.Exit(2)
	}
	problems, err := checkDir(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "crdcheck: %v\n", err)
		os.Exit(1)
	}
	for _, problem := range problems {
		fmt.Fprintf(os.Stderr, "crdcheck: %s\n", problem)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}

func checkDir(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var problems []string
	var seen []string
	for _, file := range files {
		crd, fileProblems := checkFile(file)
		problems = append(problems, fileProblems...)
		if crd != nil {
			seen = append(seen, crd.Name)
		}
		if crd != nil && len(fileProblems) == 0 {
			fmt.Printf("ok  %-48s %s\n", crd.Name, summary(crd))
		}
	}
	sort.Strings(seen)
	if !slices.Equal(seen, expectedCRDs) {
		problems = append(problems, fmt.Sprintf("CRDs found %v, expected %v", seen, expectedCRDs))
	}
	return problems, nil
}

func summary(crd *apiextensionsv1.CustomResourceDefinition) string {
	var versions []string
	for _, version := range crd.Spec.Versions {
		name := version.Name
		if version.Storage {
			name += "*"
		}
		versions = append(versions, name)
	}
	return fmt.Sprintf("%s, versions %s, structural", crd.Spec.Scope, strings.Join(versions, ","))
}

func checkFile(file string) (*apiextensionsv1.CustomResourceDefinition, []string) {
	fail := func(format string, args ...any) []string {
		return []string{fmt.Sprintf("%s: ", filepath.Base(file)) + fmt.Sprintf(format, args...)}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fail("%v", err)
	}
	if strings.Count(string(data), "\n---") > 0 {
		return nil, fail("more than one YAML document")
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		return nil, fail("not a strict apiextensions.k8s.io/v1 CRD: %v", err)
	}
	if crd.APIVersion != "apiextensions.k8s.io/v1" || crd.Kind != "CustomResourceDefinition" {
		return nil, fail("apiVersion/kind %s/%s", crd.APIVersion, crd.Kind)
	}

	// What the API server does on create: default, convert, validate.
	defaulted := crd.DeepCopy()
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(defaulted)
	internal := &apiextensions.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(defaulted, internal, nil); err != nil {
		return nil, fail("convert: %v", err)
	}
	var problems []string
	for _, fieldErr := range validation.ValidateCustomResourceDefinition(context.Background(), internal) {
		problems = append(problems, fail("API server validation: %v", fieldErr)...)
	}

	// Checked per version on the v1 object: the internal form moves a schema that all
	// versions share to spec.validation.
	for _, version := range crd.Spec.Versions {
		if version.Schema == nil || version.Schema.OpenAPIV3Schema == nil {
			problems = append(problems, fail("version %s has no openAPIV3Schema", version.Name)...)
			continue
		}
		schema := &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(version.Schema.OpenAPIV3Schema, schema, nil); err != nil {
			problems = append(problems, fail("version %s: convert schema: %v", version.Name, err)...)
			continue
		}
		structural, err := structuralschema.NewStructural(schema)
		if err != nil {
			problems = append(problems, fail("version %s: %v", version.Name, err)...)
			continue
		}
		for _, fieldErr := range structuralschema.ValidateStructural(field.NewPath("openAPIV3Schema"), structural) {
			problems = append(problems, fail("version %s not structural: %v", version.Name, fieldErr)...)
		}
		if version.Subresources == nil || version.Subresources.Status == nil {
			problems = append(problems, fail("version %s has no status subresource", version.Name)...)
		}
	}
	if len(problems) > 0 {
		return crd, problems
	}

	for _, version := range crd.Spec.Versions {
		walk(version.Schema.OpenAPIV3Schema, "", func(path string, schema *apiextensionsv1.JSONSchemaProps) {
			if schema.XPreserveUnknownFields != nil && *schema.XPreserveUnknownFields &&
				!preserveUnknownAllowed[crd.Name+path] {
				problems = append(problems, fail("version %s: x-kubernetes-preserve-unknown-fields at %q", version.Name, path)...)
			}
		})
	}
	problems = append(problems, checkFacts(crd, fail)...)
	return crd, problems
}

func walk(schema *apiextensionsv1.JSONSchemaProps, path string, visit func(string, *apiextensionsv1.JSONSchemaProps)) {
	if schema == nil {
		return
	}
	visit(path, schema)
	for name, child := range schema.Properties {
		walk(&child, path+"/"+name, visit)
	}
	if schema.Items != nil {
		walk(schema.Items.Schema, path+"[]", visit)
	}
	if schema.AdditionalProperties != nil {
		walk(schema.AdditionalProperties.Schema, path+"{}", visit)
	}
}

// at follows a path of property names ("[]" steps into array items).
func at(schema *apiextensionsv1.JSONSchemaProps, path ...string) *apiextensionsv1.JSONSchemaProps {
	for _, step := range path {
		if schema == nil {
			return nil
		}
		if step == "[]" {
			if schema.Items == nil {
				return nil
			}
			schema = schema.Items.Schema
			continue
		}
		child, ok := schema.Properties[step]
		if !ok {
			return nil
		}
		schema = &child
	}
	return schema
}

func keys(schema *apiextensionsv1.JSONSchemaProps) []string {
	if schema == nil {
		return nil
	}
	var names []string
	for name := range schema.Properties {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func checkFacts(crd *apiextensionsv1.CustomResourceDefinition, fail func(string, ...any) []string) []string {
	var problems []string
	switch crd.Name {
	case "notebooks.kubeflow.org":
		var first *apiextensionsv1.JSONSchemaProps
		for _, version := range crd.Spec.Versions {
			root := version.Schema.OpenAPIV3Schema
			podSpec := at(root, "spec", "template", "spec")
			if podSpec == nil {
				problems = append(problems, fail("%s: no spec.template.spec", version.Name)...)
				continue
			}
			if at(podSpec, "initContainers", "[]", "restartPolicy") != nil {
				problems = append(problems, fail("%s: initContainers[].restartPolicy present: the pod template is not Kubernetes 1.23's PodSpec", version.Name)...)
			}
			if at(podSpec, "initContainers", "[]", "name") == nil {
				problems = append(problems, fail("%s: initContainers[] schema missing", version.Name)...)
			}
			containers := at(podSpec, "containers")
			if containers == nil || containers.MinItems == nil || *containers.MinItems != 1 ||
				!reflect.DeepEqual(containers.Items.Schema.Required, []string{"name", "image"}) {
				problems = append(problems, fail("%s: containers lacks upstream's validation patch (minItems 1, required name+image)", version.Name)...)
			}
			if first == nil {
				first = root
			} else if !reflect.DeepEqual(first, root) {
				problems = append(problems, fail("%s: schema differs from %s (upstream serves one schema)", version.Name, crd.Spec.Versions[0].Name)...)
			}
		}
	case "workspacekinds.kubeflow.org":
		want := []string{"activityProbe", "containerSecurityContext", "extraEnv", "extraVolumeMounts", "extraVolumes",
			"options", "podMetadata", "ports", "probes", "securityContext", "serviceAccount", "volumeMounts"}
		got := keys(at(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, "spec", "podTemplate"))
		if !slices.Equal(got, want) {
			problems = append(problems, fail("spec.podTemplate fields %v, upstream has %v", got, want)...)
		}
	case "workspaces.kubeflow.org":
		root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
		for _, path := range [][]string{{"status", "pauseTime"}, {"status", "activity", "lastActivity"}, {"status", "activity", "lastUpdate"}} {
			if node := at(root, path...); node == nil || node.Type != "integer" || node.Format != "int64" {
				problems = append(problems, fail("%s is not an int64 (epoch milliseconds)", strings.Join(path, "."))...)
			}
		}
		if node := at(root, "status", "state"); node == nil || len(node.Enum) != 6 {
			problems = append(problems, fail("status.state is not the six-value enum")...)
		}
	case "poddefaults.kubeflow.org":
		root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
		for _, list := range []string{"sidecars", "initContainers"} {
			if at(root, "spec", list, "[]", "restartPolicy") == nil {
				problems = append(problems, fail("spec.%s[].restartPolicy missing (upstream's shipped CRD has it)", list)...)
			}
		}
	}
	return problems
}
