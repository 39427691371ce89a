// Command crddiff compares two CRD files and prints every difference, ignoring what
// does not change validation or pruning: "description" and "example" keys anywhere,
// and metadata.annotations (controller-gen stamps its version there). It is how the
// Kubeflow CRDs in ../generated were checked against the CRDs upstream ships (README.md,
// "What was checked"): it exits 0 only when the two are otherwise equal.
//
// Usage: crddiff <upstream.yaml> <ours.yaml>
package main

import (
	"fmt"
	"os"
	"reflect"
	"sort"

	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: crddiff <upstream.yaml> <ours.yaml>")
		os.Exit(2)
	}
	upstream, err := load(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "crddiff: %v\n", err)
		os.Exit(2)
	}
	ours, err := load(os.Args[2])
	if err != nil {
		fmt.Fprintf(os.Stderr, "crddiff: %v\n", err)
		os.Exit(2)
	}
	count := compare(upstream, ours, "")
	fmt.Printf("%d differences\n", count)
	if count > 0 {
		os.Exit(1)
	}
}

func load(path string) (any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var document any
	if err := yaml.Unmarshal(data, &document); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if object, ok := document.(map[string]any); ok {
		if metadata, ok := object["metadata"].(map[string]any); ok {
			delete(metadata, "annotations")
			// Old controller-gen versions wrote an empty creationTimestamp and status.
			delete(metadata, "creationTimestamp")
		}
		delete(object, "status")
	}
	return strip(document), nil
}

func strip(node any) any {
	switch value := node.(type) {
	case map[string]any:
		out := map[string]any{}
		for key, child := range value {
			if key == "description" || key == "example" {
				continue
			}
			out[key] = strip(child)
		}
		return out
	case []any:
		out := make([]any, len(value))
		for i, child := range value {
			out[i] = strip(child)
		}
		return out
	}
	return node
}

func compare(upstream, ours any, path string) int {
	upstreamMap, upstreamIsMap := upstream.(map[string]any)
	oursMap, oursIsMap := ours.(map[string]any)
	if upstreamIsMap && oursIsMap {
		keys := map[string]bool{}
		for key := range upstreamMap {
			keys[key] = true
		}
		for key := range oursMap {
			keys[key] = true
		}
		var sorted []string
		for key := range keys {
			sorted = append(sorted, key)
		}
		sort.Strings(sorted)
		count := 0
		for _, key := range sorted {
			child := path + "/" + key
			upstreamChild, inUpstream := upstreamMap[key]
			oursChild, inOurs := oursMap[key]
			switch {
			case !inOurs:
				fmt.Printf("only upstream: %s\n", child)
				count++
			case !inUpstream:
				fmt.Printf("only ours:     %s\n", child)
				count++
			default:
				count += compare(upstreamChild, oursChild, child)
			}
		}
		return count
	}
	upstreamList, upstreamIsList := upstream.([]any)
	oursList, oursIsList := ours.([]any)
	if upstreamIsList && oursIsList && len(upstreamList) == len(oursList) {
		count := 0
		for i := range upstreamList {
			count += compare(upstreamList[i], oursList[i], fmt.Sprintf("%s[%d]", path, i))
		}
		return count
	}
	if !reflect.DeepEqual(upstream, ours) {
		fmt.Printf("differs:       %s: upstream %v, ours %v\n", path, upstream, ours)
		return 1
	}
	return 0
}
