package main

import (
	"context"
	"fmt"

	operon "operon.dev/sdk/go"
)

// The WebApp's versions: v1 moves the container's fields under
// spec.container.
const (
	V1alpha1 = "example.operon.dev/v1alpha1"
	V1       = "example.operon.dev/v1"
)

// containerFields move between spec (v1alpha1) and spec.container (v1).
var containerFields = []string{"image", "port", "env"}

// Convert converts WebApps between v1alpha1 and v1 (the CRD's conversion
// webhook). Anything but a WebApp of one of the two versions refuses the
// whole request.
func (WebAppReconciler) Convert(_ context.Context, objects []operon.Object, desired string) ([]operon.Object, error) {
	versions := fmt.Sprintf("WebApp has versions %s and %s", V1alpha1, V1)
	if desired != V1alpha1 && desired != V1 {
		return nil, fmt.Errorf("cannot convert to %s: %s", desired, versions)
	}
	out := make([]operon.Object, len(objects))
	for i, o := range objects {
		apiVersion, kind := o.String("apiVersion"), o.String("kind")
		if kind != "WebApp" || (apiVersion != V1alpha1 && apiVersion != V1) {
			return nil, fmt.Errorf("cannot convert %s %s: %s", apiVersion, kind, versions)
		}
		out[i] = o
		if apiVersion == desired {
			continue
		}
		if spec, ok := o["spec"].(map[string]any); ok {
			if desired == V1 {
				toV1(spec)
			} else {
				toV1alpha1(spec)
			}
		}
		o["apiVersion"] = desired
	}
	return out, nil
}

// toV1 moves the container's fields that are present into spec.container.
func toV1(spec map[string]any) {
	container := map[string]any{}
	for _, field := range containerFields {
		if v, ok := spec[field]; ok {
			container[field] = v
			delete(spec, field)
		}
	}
	if len(container) > 0 {
		spec["container"] = container
	}
}

// toV1alpha1 moves the keys of spec.container up into spec.
func toV1alpha1(spec map[string]any) {
	if container, ok := spec["container"].(map[string]any); ok {
		for k, v := range container {
			spec[k] = v
		}
	}
	delete(spec, "container")
}
