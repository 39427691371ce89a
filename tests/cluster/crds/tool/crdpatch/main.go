// Command crdpatch applies an RFC 6902 JSON patch (written as YAML) to a CRD file that
// controller-gen wrote, in place. It exists for the one thing markers cannot say:
// upstream's Notebook CRD tightens corev1.Container inside the pod template (kustomize
// patch config/crd/patches/validation_patches.yaml in kubeflow/notebooks notebooks-v1),
// and corev1 types cannot carry our markers.
//
// Only "add" and "replace" are supported, which is all those patches use; anything
// else, or a path that does not resolve, is an error (so a patch that no longer fits
// the generated CRD fails generate.sh instead of being skipped).
//
// Usage: crdpatch <crd.yaml> <patch.yaml>
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

type operation struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: crdpatch <crd.yaml> <patch.yaml>")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintf(os.Stderr, "crdpatch: %v\n", err)
		os.Exit(1)
	}
}

func run(crdPath, patchPath string) error {
	crdBytes, err := os.ReadFile(crdPath)
	if err != nil {
		return err
	}
	patchBytes, err := os.ReadFile(patchPath)
	if err != nil {
		return err
	}
	var document any
	if err := yaml.Unmarshal(crdBytes, &document); err != nil {
		return fmt.Errorf("%s: %w", crdPath, err)
	}
	var operations []operation
	if err := yaml.UnmarshalStrict(patchBytes, &operations); err != nil {
		return fmt.Errorf("%s: %w", patchPath, err)
	}
	for index, op := range operations {
		if document, err = apply(document, op); err != nil {
			return fmt.Errorf("%s: operation %d (%s %s): %w", patchPath, index, op.Op, op.Path, err)
		}
	}
	out, err := yaml.Marshal(document)
	if err != nil {
		return err
	}
	// controller-gen starts each file with a document marker; keep it.
	return os.WriteFile(crdPath, append([]byte("---\n"), out...), 0o644)
}

func apply(document any, op operation) (any, error) {
	if op.Op != "add" && op.Op != "replace" {
		return nil, fmt.Errorf("unsupported op %q", op.Op)
	}
	if !strings.HasPrefix(op.Path, "/") {
		return nil, fmt.Errorf("path must start with /")
	}
	tokens := strings.Split(op.Path[1:], "/")
	for i, token := range tokens {
		tokens[i] = strings.ReplaceAll(strings.ReplaceAll(token, "~1", "/"), "~0", "~")
	}
	parent := document
	for _, token := range tokens[:len(tokens)-1] {
		child, err := step(parent, token)
		if err != nil {
			return nil, err
		}
		parent = child
	}
	last := tokens[len(tokens)-1]
	switch container := parent.(type) {
	case map[string]any:
		if _, exists := container[last]; op.Op == "replace" && !exists {
			return nil, fmt.Errorf("replace: %q does not exist", last)
		}
		container[last] = op.Value
	case []any:
		index, err := strconv.Atoi(last)
		if err != nil || index < 0 || index >= len(container) {
			return nil, fmt.Errorf("array index %q out of range (appending is not supported)", last)
		}
		if op.Op == "add" {
			return nil, fmt.Errorf("add into an array is not supported")
		}
		container[index] = op.Value
	default:
		return nil, fmt.Errorf("parent of %q is neither object nor array", last)
	}
	return document, nil
}

func step(node any, token string) (any, error) {
	switch container := node.(type) {
	case map[string]any:
		child, ok := container[token]
		if !ok {
			return nil, fmt.Errorf("no key %q", token)
		}
		return child, nil
	case []any:
		index, err := strconv.Atoi(token)
		if err != nil || index < 0 || index >= len(container) {
			return nil, fmt.Errorf("array index %q out of range", token)
		}
		return container[index], nil
	}
	return nil, fmt.Errorf("cannot step into %q", token)
}
